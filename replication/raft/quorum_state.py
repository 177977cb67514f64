"""Quorum roles of one KRaft voter as a transition table, and its persisted election state.

Roles (Kafka's ``QuorumState``; KIP-595, KIP-996):

| role        | meaning                                                               |
|-------------|-----------------------------------------------------------------------|
| Unattached  | knows an epoch but no leader; may hold a vote cast in that epoch       |
| Prospective | asking for pre-votes (KIP-996) for ``epoch + 1``; the epoch is unchanged |
| Candidate   | bumped the epoch, voted for itself, asking for votes                  |
| Leader      | won the epoch; appends, answers Fetch, advances the high watermark    |
| Follower    | knows the epoch's leader and fetches from it                          |
| Resigned    | was leader of the epoch and stepped down (check quorum, shutdown, restart) |

Events and where they lead (:data:`TRANSITIONS`; a pair not in the table raises
:class:`IllegalQuorumTransitionError`):

| from                                         | event             | to          |
|----------------------------------------------|-------------------|-------------|
| Unattached, Follower, Prospective, Candidate, Resigned | ELECTION_TIMEOUT | Prospective |
| Prospective                                  | PRE_VOTE_MAJORITY | Candidate   |
| Candidate                                    | VOTE_MAJORITY     | Leader      |
| Leader                                       | RESIGN            | Resigned    |
| Unattached, Prospective                      | VOTE_CAST         | Unattached  |
| any                                          | NEW_EPOCH         | Unattached  |
| any                                          | LEADER_KNOWN      | Follower    |

NEW_EPOCH: a message carried a higher epoch without naming its leader.  LEADER_KNOWN:
BeginQuorumEpoch or a response named the leader of an epoch at least ours (a Leader or a
Resigned voter only from a higher epoch: the caller checks, the table cannot).

:class:`ElectionState` is what survives a restart: ``(epoch, voted_for, leader_id)``.  A
:class:`QuorumStateStore` writes it; its contract is that :meth:`QuorumStateStore.write`
returns only once the state is durable (fsync), and the replica calls it *before* it
emits any message that depends on it (a granted vote, a vote request of a new epoch,
BeginQuorumEpoch).

Costs: :func:`next_role` is one dict lookup.  Pure and immutable: safe from any thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

__all__ = ["TRANSITIONS", "ElectionState", "IllegalQuorumTransitionError", "QuorumEvent",
           "QuorumRole", "QuorumStateStore", "next_role"]


class QuorumRole(Enum):
    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


class QuorumEvent(Enum):
    ELECTION_TIMEOUT = "election_timeout"  # election / fetch timer expired
    PRE_VOTE_MAJORITY = "pre_vote_majority"  # a majority granted the pre-vote
    VOTE_MAJORITY = "vote_majority"  # a majority granted the vote
    RESIGN = "resign"  # check quorum failed, or a graceful shutdown
    VOTE_CAST = "vote_cast"  # this voter granted a (real) vote in its epoch
    NEW_EPOCH = "new_epoch"  # a higher epoch was seen, leader unknown
    LEADER_KNOWN = "leader_known"  # the leader of an epoch >= ours is known


_R = QuorumRole
_E = QuorumEvent
_ALL = tuple(QuorumRole)

TRANSITIONS: dict[tuple[QuorumRole, QuorumEvent], QuorumRole] = {
    **{(r, _E.ELECTION_TIMEOUT): _R.PROSPECTIVE
       for r in (_R.UNATTACHED, _R.FOLLOWER, _R.PROSPECTIVE, _R.CANDIDATE, _R.RESIGNED)},
    (_R.PROSPECTIVE, _E.PRE_VOTE_MAJORITY): _R.CANDIDATE,
    (_R.CANDIDATE, _E.VOTE_MAJORITY): _R.LEADER,
    (_R.LEADER, _E.RESIGN): _R.RESIGNED,
    (_R.UNATTACHED, _E.VOTE_CAST): _R.UNATTACHED,
    (_R.PROSPECTIVE, _E.VOTE_CAST): _R.UNATTACHED,
    **{(r, _E.NEW_EPOCH): _R.UNATTACHED for r in _ALL},
    **{(r, _E.LEADER_KNOWN): _R.FOLLOWER for r in _ALL},
}
"""(role, event) -> next role; every other pair is illegal."""


class IllegalQuorumTransitionError(AssertionError):
    """An event the table does not allow in the current role (a bug in the caller)."""


def next_role(role: QuorumRole, event: QuorumEvent) -> QuorumRole:
    """The role after ``event`` in ``role``; raises on a pair not in :data:`TRANSITIONS`."""
    try:
        return TRANSITIONS[(role, event)]
    except KeyError:
        raise IllegalQuorumTransitionError(f"{event.value} is not allowed in {role.value}"
                                           ) from None


@dataclass(frozen=True, slots=True)
class ElectionState:
    """The persisted quorum state: the epoch, the vote cast in it, its leader if known."""

    epoch: int
    voted_for: int | None = None
    leader_id: int | None = None

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {self.epoch}")


class QuorumStateStore(Protocol):
    """Where a voter keeps its :class:`ElectionState` (a file, or the simulation's disk)."""

    def read(self) -> ElectionState | None:
        """The last durable state, or None when nothing was ever written."""
        ...

    def write(self, state: ElectionState) -> None:
        """Persist ``state``; returns only once it is durable (survives a power cut)."""
        ...
