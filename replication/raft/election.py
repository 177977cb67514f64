"""Vote rules of KRaft (KIP-595) and PreVote (KIP-996), and the tally of one election.

Rules, for a voter in epoch ``E`` asked by a candidate whose log ends at
``(last_epoch, end_offset)``:

* **up to date**: ``(last_epoch, end_offset) >= (own last epoch, own end offset)``,
  compared as a pair (a longer log of an older epoch loses).
* **PreVote** for epoch ``E'``: granted iff ``E' > E``, the candidate is up to date, and
  this voter has not heard from a leader within the fetch timeout (it is not the leader,
  and not a follower that fetched recently from a leader that did not resign).  Nothing
  is persisted and the voter's epoch does not move.
* **Vote** in the voter's own epoch (a higher one was adopted first, as Unattached):
  granted iff the voter is Unattached or Prospective, has voted for nobody or for this
  candidate in the epoch, and the candidate is up to date.  The vote is persisted before
  the answer leaves (:mod:`replication.raft.quorum_state`).

:class:`VoteTally` counts the answers of one (pre-)election; the candidate counts itself.

Costs: O(1) per decision, O(voters) per tally.  Pure / single-owner: a tally is owned by
one replica; the functions have no state.
"""

from __future__ import annotations

from collections.abc import Iterable

from replication.raft.quorum_state import QuorumRole

__all__ = ["VoteTally", "grant_pre_vote", "grant_vote", "log_up_to_date", "majority_of"]


def majority_of(voter_count: int) -> int:
    return voter_count // 2 + 1


def log_up_to_date(candidate_last_epoch: int, candidate_end_offset: int,
                   own_last_epoch: int, own_end_offset: int) -> bool:
    return (candidate_last_epoch, candidate_end_offset) >= (own_last_epoch, own_end_offset)


def grant_pre_vote(request_epoch: int, own_epoch: int, up_to_date: bool,
                   heard_from_leader: bool) -> bool:
    return request_epoch > own_epoch and up_to_date and not heard_from_leader


def grant_vote(role: QuorumRole, voted_for: int | None, candidate_id: int,
               up_to_date: bool) -> bool:
    """For a request in the voter's own epoch (see module doc)."""
    if role not in (QuorumRole.UNATTACHED, QuorumRole.PROSPECTIVE):
        return False
    return voted_for in (None, candidate_id) and up_to_date


class VoteTally:
    """Granted and rejected answers of one (pre-)election among ``voters``."""

    def __init__(self, voters: Iterable[int], self_id: int) -> None:
        self._voters = frozenset(voters)
        self._granted = {self_id}
        self._rejected: set[int] = set()

    def record(self, voter: int, granted: bool) -> None:
        if voter not in self._voters or voter in self._granted or voter in self._rejected:
            return  # an outsider, or a duplicate answer
        (self._granted if granted else self._rejected).add(voter)

    @property
    def won(self) -> bool:
        return len(self._granted) >= majority_of(len(self._voters))

    def unanswered(self) -> frozenset[int]:
        return self._voters - self._granted - self._rejected
