"""Which controller voter a broker sends its next controller request to: a pure state
machine (sans-IO, injected clock), driven by
:class:`broker.metadata.controller_channel.ControllerQuorumChannel`.

A broker knows the quorum's voters (:mod:`broker.metadata.quorum_voters`), not which of
them is the active controller (the Raft leader).  The finder keeps its belief,
``leader_id`` at ``leader_epoch`` (Kafka's ``LeaderAndEpoch``), and learns from what
each request's outcome says:

====================================  =====================================================
event                                 the finder
====================================  =====================================================
``on_answered(v)``                    ``v`` acted as the controller: it is the leader; the
                                      round of failures and the backoff are reset
``on_leader_hint(id, epoch)``         a hint (DescribeQuorum's ``leader_id``/``leader_epoch``,
                                      Fetch's ``current_leader``): taken when its epoch is
                                      newer than the known one, or as new (same epoch) and
                                      naming a voter not failed this round; ignored when it
                                      names no known voter (-1: no leader yet)
``on_not_controller(v, id, epoch)``   ``v`` answered NOT_CONTROLLER / NOT_LEADER_OR_FOLLOWER:
                                      ``v`` failed this round; its hint (if any) as above
``on_unreachable(v)``                 connection refused/lost, timeout: ``v`` failed
                                      this round, and is no longer believed the leader
====================================  =====================================================

:meth:`target` is the voter to try now: the believed leader, else the next voter (in
the configured order, after the last one that failed) not failed this round.  Once
every voter failed in a round the finder backs off: :meth:`target` is None for
:meth:`wait_ms` (``backoff_initial_ms``, doubled per failed round up to
``backoff_max_ms``), then a new round starts; a hint of a newer epoch ends the backoff
at once.  A hint never loops: a voter failed this round is followed again only for a
newer epoch, and the number of voters bounds the tries per round.

Costs: O(voters) per event (a handful).  Not thread-safe: one event loop owns it.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.metadata.quorum_voters import UNKNOWN_VOTER_ID, VoterAddress
from timer.clock import Clock

__all__ = ["BACKOFF_INITIAL_MS", "BACKOFF_MAX_MS", "ActiveControllerFinder"]

BACKOFF_INITIAL_MS = 50
BACKOFF_MAX_MS = 1_000  # Kafka's election backoff bound: a new leader is up by then


class ActiveControllerFinder:
    """The believed active controller and where to try next (see the module docstring)."""

    def __init__(self, voters: Sequence[VoterAddress], clock: Clock, *,
                 backoff_initial_ms: int = BACKOFF_INITIAL_MS,
                 backoff_max_ms: int = BACKOFF_MAX_MS) -> None:
        if not voters:
            raise ValueError("no controller voters")
        if not 0 < backoff_initial_ms <= backoff_max_ms:
            raise ValueError("backoff: 0 < initial <= max")
        self.voters = tuple(voters)
        self.clock = clock
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self.leader_id: int | None = None
        self.leader_epoch = -1  # the newest epoch heard of (-1: none)
        self._failed: set[int] = set()  # indexes of voters failed this round
        self._next = 0  # index the next round-robin try starts from
        self._backoff_ms = backoff_initial_ms
        self._ready_at_ms = 0  # target() is None before this (backing off)
        self._index = {v.voter_id: i for i, v in enumerate(self.voters)
                       if v.voter_id != UNKNOWN_VOTER_ID}

    # -- queries -------------------------------------------------------------------------

    @property
    def leader(self) -> VoterAddress | None:
        """The voter believed to be the active controller, if any."""
        index = self._leader_index()
        return None if index is None else self.voters[index]

    def wait_ms(self) -> int:
        """How long :meth:`target` stays None (0: a voter to try now)."""
        return max(0, self._ready_at_ms - self.clock.now_ms())

    def target(self) -> VoterAddress | None:
        """The voter to send to now; None while backing off after a failed round."""
        if self.wait_ms() > 0:
            return None
        index = self._leader_index()
        if index is not None:
            return self.voters[index]
        for step in range(len(self.voters)):
            index = (self._next + step) % len(self.voters)
            if index not in self._failed:
                return self.voters[index]
        raise AssertionError("a round with every voter failed backs off")  # pragma: no cover

    # -- events --------------------------------------------------------------------------

    def on_answered(self, voter: VoterAddress) -> None:
        index = self.voters.index(voter)
        self.leader_id = voter.voter_id if voter.voter_id != UNKNOWN_VOTER_ID else None
        self._next = index
        self._failed.clear()
        self._backoff_ms = self.backoff_initial_ms

    def on_leader_hint(self, leader_id: int | None, leader_epoch: int) -> bool:
        """Take a hint of who leads; True when it was taken."""
        index = self._index.get(leader_id) if leader_id is not None else None
        if index is None:
            return False
        newer = leader_epoch > self.leader_epoch
        if not newer and (leader_epoch < self.leader_epoch or index in self._failed):
            return False
        if newer:  # a new epoch: worth a try now, even if it failed before
            self._failed.discard(index)
            self._ready_at_ms = 0
        self.leader_id, self.leader_epoch = leader_id, max(leader_epoch, self.leader_epoch)
        return True

    def on_not_controller(self, voter: VoterAddress, leader_id: int | None = None,
                          leader_epoch: int = -1) -> None:
        self._fail(voter)
        self.on_leader_hint(leader_id, leader_epoch)

    def on_unreachable(self, voter: VoterAddress) -> None:
        self._fail(voter)

    # -- internals -----------------------------------------------------------------------

    def _leader_index(self) -> int | None:
        if self.leader_id is not None:
            return self._index.get(self.leader_id)
        return None

    def _fail(self, voter: VoterAddress) -> None:
        index = self.voters.index(voter)
        if self.leader_id is not None and self._index.get(self.leader_id) == index:
            self.leader_id = None
        self._failed.add(index)
        self._next = (index + 1) % len(self.voters)
        if len(self._failed) >= len(self.voters):  # a whole round failed: back off
            self._failed.clear()
            self._ready_at_ms = self.clock.now_ms() + self._backoff_ms
            self._backoff_ms = min(self._backoff_ms * 2, self.backoff_max_ms)
