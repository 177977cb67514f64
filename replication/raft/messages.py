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
                                                  high_watermark, diverging, error
=========================  =====================  ===========================================

A PreVote's ``epoch`` is the epoch the prospective would stand in (its own + 1) without
having bumped anything.  ``diverging`` is ``(epoch, end_offset)``: the follower's log
diverges from the leader's; it truncates (:mod:`replication.truncation`) and fetches again.
Errors are Kafka's codes (:class:`clients.protocol.errors.ErrorCode`).  Snapshots
(FetchSnapshot) are not part of this version.

Costs: constructing one is O(fields).  Frozen values: safe to share between threads.
"""

from __future__ import annotations

from dataclasses import dataclass

from clients.protocol.errors import ErrorCode

__all__ = [
    "Entry",
    "QuorumBeginEpochRequest",
    "QuorumBeginEpochResponse",
    "QuorumEndEpochRequest",
    "QuorumFetchRequest",
    "QuorumFetchResponse",
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


RaftMessage = (QuorumVoteRequest | QuorumVoteResponse | QuorumBeginEpochRequest
               | QuorumBeginEpochResponse | QuorumEndEpochRequest | QuorumFetchRequest
               | QuorumFetchResponse)


@dataclass(frozen=True, slots=True)
class Send:
    """An outgoing message: what the replica asks its driver to deliver."""

    destination: int
    message: RaftMessage
