"""The errors a partition replica raises, with their Kafka error codes.

=========================  ==========================  ======================================
exception                  code (:mod:`clients.protocol.errors`) raised when
=========================  ==========================  ======================================
NotLeaderError             NOT_LEADER_OR_FOLLOWER      a leader-only call on a non-leader (or
                                                       a follower-only call on the leader)
NotEnoughReplicasError     NOT_ENOUGH_REPLICAS         acks=all with ISR < min.insync.replicas
FencedLeaderEpochError     FENCED_LEADER_EPOCH         a request carries an older leader epoch
UnknownLeaderEpochError    UNKNOWN_LEADER_EPOCH        a request carries a newer leader epoch
PartitionInvariantError    (AssertionError, no code)   a bug: the replica state is inconsistent
=========================  ==========================  ======================================

Plain exception classes: O(1), immutable, thread-safe.
"""

from __future__ import annotations

from clients.protocol.errors import ErrorCode, MiniKafkaError

__all__ = [
    "FencedLeaderEpochError",
    "NotEnoughReplicasError",
    "NotLeaderError",
    "PartitionInvariantError",
    "UnknownLeaderEpochError",
]


class NotLeaderError(MiniKafkaError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class NotEnoughReplicasError(MiniKafkaError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


class FencedLeaderEpochError(MiniKafkaError):
    code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(MiniKafkaError):
    code = ErrorCode.UNKNOWN_LEADER_EPOCH


class PartitionInvariantError(AssertionError):
    """A replica's state breaks one of the replication invariants (a bug, never input)."""
