"""minikafka replication: pure (sans-IO) cores for partition replicas.

Re-exports the public API: :class:`Partition` (leader/follower state, HW/LEO),
:class:`LeaderEpochCache`, the follower truncation decision and ISR proposals.
"""

from replication.isr import UNKNOWN_OFFSET, AlterPartitionProposal, IsrState, ReplicaState
from replication.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
    LeaderEpochCacheError,
)
from replication.partition import Partition
from replication.partition_errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderError,
    PartitionInvariantError,
    UnknownLeaderEpochError,
)
from replication.truncation import (
    EpochEndOffset,
    TruncationDecision,
    TruncationPolicy,
    decide_truncation,
)

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "UNKNOWN_OFFSET",
    "AlterPartitionProposal",
    "EpochEndOffset",
    "EpochEntry",
    "FencedLeaderEpochError",
    "IsrState",
    "LeaderEpochCache",
    "LeaderEpochCacheError",
    "NotEnoughReplicasError",
    "NotLeaderError",
    "Partition",
    "PartitionInvariantError",
    "ReplicaState",
    "TruncationDecision",
    "TruncationPolicy",
    "UnknownLeaderEpochError",
    "decide_truncation",
]
