"""Who appends a batch to a leader's log, which decides the producer checks it gets
(Kafka's ``AppendOrigin``).

- ``CLIENT`` (a Produce): every rule of :mod:`replication.producer_state` (epoch,
  sequence, duplicates, transactions).
- ``COORDINATOR`` (the group and transaction coordinators' own writes to their internal
  topics): the producer epoch only (rule 2: an older epoch is INVALID_PRODUCER_EPOCH, a
  negative one INVALID_RECORD) and the transaction rules 6-7; no sequence and no
  duplicate check, as Kafka's ``ProducerAppendInfo`` checks sequences of client appends
  only.  So a TxnOffsetCommit's batch carries base sequence 0, as Kafka's group
  coordinator writes it.
- ``REPLICATION`` (a follower's copy of its leader's log, and the log replay): no checks
  (rule 11); it goes through ``append_as_follower``, never the leader's append.

Decided where the append enters (:meth:`replication.partition.Partition.append_records_as_leader`,
:meth:`replication.partition_log.PartitionLog.append_as_leader`).  Costs: none (an enum).
Thread-safety: immutable.
"""

from __future__ import annotations

from enum import Enum


class AppendOrigin(Enum):
    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"
