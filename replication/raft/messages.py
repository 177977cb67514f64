"""The KRaft protocol between voters (KIP-595, KIP-996), as plain values.

The wire bodies of the same messages (Kafka's Vote, BeginQuorumEpoch, EndQuorumEpoch,
Fetch) are declared in :mod:`clients.protocol.messages.quorum`; these are the replica's
own values, hence the ``Quorum`` prefix.

Each request and response carries the sender's epoch; a receiver that sees a higher epoch
moves to it (and to its leader when the message names one) before anything else.

=========================  =====================  ===========================================
message                    from -> to             fields besides ``epoch``
=========================  =====================  ===========================================
QuorumVoteRequest          prospective/candidate  candidate_id, last_epoch, end_offset, pre_vote
QuorumVoteResponse         voter                  granted, leader_id, pre_vote, error
QuorumBeginEpochRequest    new leader             leader_id
QuorumBeginEpochResponse   voter                  error
QuorumEndEpochRequest      resigning leader       leader_id, preferred_successors
QuorumFetchRequest         follower               replica_id, fetch_offset, last_fetched_epoch
QuorumFetchResponse        leader                 leader_id, base_offset, entries,
                                                  high_watermark, diverging, error,
                                                  snapshot_id
QuorumFetchSnapshotRequest follower               replica_id, snapshot_id, position
QuorumFetchSnapshotResponse leader                leader_id, snapshot_id, position, size,
                                                  data, error
=========================  =====================  ===========================================

A PreVote's ``epoch`` is the epoch the prospective would stand in (its own + 1) without
having bumped anything.  ``diverging`` is ``(epoch, end_offset)``: the follower's log
diverges from the leader's; it truncates (:mod:`replication.truncation`) and fetches again.
``snapshot_id`` (KIP-630): the follower's fetch offset is below the leader's log start;
it fetches that snapshot in chunks (``position``: bytes already received; ``size``: the
whole snapshot) with FetchSnapshot, installs it and fetches the log after it.
Errors are Kafka's codes (:class:`clients.protocol.errors.ErrorCode`).

Costs: constructing one is O(fields).  Frozen values: safe to share between threads.
"""

from __future__ import annotations

from dataclasses import dataclass

from clients.protocol.errors import ErrorCode

__all__ = [
    "Entry",
    "OffsetAndEpoch",
    "QuorumBeginEpochRequest",
    "QuorumBeginEpochResponse",
    "QuorumEndEpochRequest",
    "QuorumFetchRequest",
    "QuorumFetchResponse",
    "QuorumFetchSnapshotRequest",
    "QuorumFetchSnapshotResponse",
    "QuorumVoteRequest",
    "QuorumVoteResponse",
    "RaftMessage",
    "Send",
]


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry: the epoch of the leader that appended it, and its bytes."""

    epoch: int
    payload: bytes


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """KIP-630's snapshot id (Kafka's ``OffsetAndEpoch``; ``SnapshotId`` on the wire): the
    snapshot holds the state after every entry below ``end_offset``; ``epoch`` is the
    epoch of the entry at ``end_offset - 1``."""

    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class QuorumVoteRequest:
    epoch: int
    candidate_id: int
    last_epoch: int
    end_offset: int
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class QuorumVoteResponse:
    epoch: int
    granted: bool
    leader_id: int | None
    pre_vote: bool
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class QuorumBeginEpochRequest:
    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class QuorumBeginEpochResponse:
    epoch: int
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class QuorumEndEpochRequest:
    epoch: int
    leader_id: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class QuorumFetchRequest:
    epoch: int
    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int
    observer: bool = False  # a voter from a new directory catching up (not counted)


@dataclass(frozen=True, slots=True)
class QuorumFetchResponse:
    epoch: int
    leader_id: int | None
    base_offset: int = 0
    entries: tuple[Entry, ...] = ()
    high_watermark: int = 0
    diverging: tuple[int, int] | None = None
    error: ErrorCode = ErrorCode.NONE
    snapshot_id: OffsetAndEpoch | None = None


@dataclass(frozen=True, slots=True)
class QuorumFetchSnapshotRequest:
    epoch: int
    replica_id: int
    snapshot_id: OffsetAndEpoch
    position: int


@dataclass(frozen=True, slots=True)
class QuorumFetchSnapshotResponse:
    epoch: int
    leader_id: int | None
    snapshot_id: OffsetAndEpoch
    position: int = 0
    size: int = 0
    data: bytes = b""
    error: ErrorCode = ErrorCode.NONE


RaftMessage = (QuorumVoteRequest | QuorumVoteResponse | QuorumBeginEpochRequest
               | QuorumBeginEpochResponse | QuorumEndEpochRequest | QuorumFetchRequest
               | QuorumFetchResponse | QuorumFetchSnapshotRequest
               | QuorumFetchSnapshotResponse)


@dataclass(frozen=True, slots=True)
class Send:
    """An outgoing message: what the replica asks its driver to deliver."""

    destination: int
    message: RaftMessage
