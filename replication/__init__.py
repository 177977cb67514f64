"""minikafka replication: pure (sans-IO) cores for the replicas of a partition.

What lives here, one concept per module:

* :mod:`replication.partition` -- :class:`Partition`, one replica: role and epochs,
  HW/LEO, the leader path (appends, reads, follower fetches, ISR proposals), the follower
  path (truncation handshake, copied appends) and the invariant check.
* :mod:`replication.producer_state_store` -- :class:`ProducerStateStore`, the replica's
  idempotent-producer state kept in step with its log: updates on append, snapshot files,
  rebuild after a restart or a truncation.
* :mod:`replication.producer_state` -- the idempotence rules (pure, no files).
* :mod:`replication.isr` -- follower progress, ISR shrink/expand rules, AlterPartition
  proposals.
* :mod:`replication.leader_epoch_cache` -- epoch -> start offset, checkpointed.
* :mod:`replication.truncation` -- the follower's truncation decision.
* :mod:`replication.partition_errors` -- the errors a replica raises, with their codes.

The cut of :class:`Partition`: its roles, leader path, ISR changes, follower path and
invariants all read and write the same fields (role, epochs, HW, the log, the epoch
cache), so they are one class in one module rather than a chain of base classes split by
line count.  What has a contract of its own is a collaborator it owns or calls: the
producer state with its snapshots (it reads only the log, never the replica's role or
HW), the ISR state, the epoch cache and the truncation decision.

Imports: ``storage`` and ``clients`` (protocol, records) only; never ``broker``.  This
package exports nothing: import every name from the module that defines it.
"""
