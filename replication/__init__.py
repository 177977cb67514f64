"""minikafka replication: pure (sans-IO) cores for the replicas of a partition.

What lives here, one concept per module:

* :mod:`replication.partition` -- :class:`Partition`, one replica: the owner that
  decides and applies (role and epochs, the high watermark, which path runs when).
* :mod:`replication.partition_log` -- :class:`PartitionLog`, the log kept in step with its
  leader-epoch cache and producer state (the replication half of Kafka's ``UnifiedLog``;
  transaction state joins it next).
* :mod:`replication.isr` -- follower progress, the HW over the maximal ISR, ISR
  shrink/expand rules, AlterPartition proposals; :class:`LeaderIsr` holds them for a
  leader.
* :mod:`replication.leadership` -- what new metadata means for a replica (stale, update,
  new leadership) and leader-epoch fencing.
* :mod:`replication.truncation` -- the follower's truncation decision.
* :mod:`replication.damage_marks` -- the ranges a CRC check found bad and their repair;
  :mod:`replication.damage` -- what finding damage makes a replica do.
* :mod:`replication.producer_state_store` -- :class:`ProducerStateStore`, the replica's
  idempotent-producer state kept in step with its log: updates on append, snapshot files,
  rebuild after a restart or a truncation.
* :mod:`replication.producer_state` -- the idempotence rules (pure, no files).
* :mod:`replication.leader_epoch_cache` -- epoch -> start offset, checkpointed.
* :mod:`replication.follower_fetch` -- the follower side of replication from one leader.
* :mod:`replication.partition_errors` -- the errors a replica raises, with their codes.

The cut of :class:`Partition` follows Kafka's: the owner keeps the fields every path
reads and writes (role, epochs, HW) and applies decisions; the log with what must change
with it, the followers' progress with the ISR, the role-change and truncation decisions
and the damage marks are parts with contracts of their own, never base classes.

Imports: ``storage`` and ``clients`` (protocol, records) only; never ``broker``.  This
package exports nothing: import every name from the module that defines it.
"""
