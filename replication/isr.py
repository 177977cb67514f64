"""ISR maintenance on a leader: follower progress, shrink/expand proposals, AlterPartition.

The leader tracks each follower (:class:`ReplicaState`): its log end offset as shown by its
last Fetch (``UNKNOWN_OFFSET`` = -1 until it fetches in this leader's epoch), the time it
was last caught up and the leader's LEO at its previous fetch.  Kafka's caught-up rule on
a fetch at ``fetch_offset`` (time ``now_ms``, leader LEO ``leo``):

* ``fetch_offset >= leo`` -> caught up now;
* else ``fetch_offset >= leo at the previous fetch`` -> caught up at the previous fetch
  time (it has everything the leader had then).

ISR changes are never applied locally: the leader *proposes* them to the controller with
an AlterPartition request (:class:`AlterPartitionProposal`) and applies the answer.

* **Shrink**: an ISR member (other than the leader) not caught up within
  ``replica_lag_time_max_ms`` is proposed out; so is, at once, one whose fetch offset is
  below the HW (our rule: every ISR member holds the HW, so such a follower lost
  committed records - its scrubber cut a damaged range, or its disk lost a tail - and
  must not stay electable while it copies them again).
* **Expand**: a replica outside the ISR whose LEO, known from a fetch in the current leader
  epoch, is >= the HW and >= the start offset of the current leader epoch (so it has
  truncated and copied everything of this epoch up to the HW) is proposed in.
* One proposal at a time: while one is pending no new one is made.  Accepted -> the new
  ISR and partition epoch are committed.  No answer (a lost request or response) -> sent
  again.  Rejected -> stays pending (blocked: not sent again, still counted in the
  maximal ISR below) until new metadata arrives, because an earlier copy of the same
  proposal may have been committed and only its answer lost (the controller checks the
  leader, the leader epoch and the partition epoch first, so a retry of a committed
  proposal is refused with one of those errors).  Only :data:`NOT_APPLIED_ERRORS`
  (INVALID_REQUEST, INELIGIBLE_REPLICA: raised after the partition-epoch check, so the
  state the proposal was based on was current and nothing was applied) drop it; the
  next check proposes again.  Found by the simulation (no_loss seed 1099 of a
  10,000-seed sweep): an expansion's answer was lost, its retry got
  NOT_LEADER_OR_FOLLOWER, the leader dropped the pending member from its HW computation
  and acknowledged records the new member - in the ISR the controller elected from - never
  had.

**HW and acks choice (Kafka's)**: the HW is computed over the *maximal* ISR = committed
ISR ∪ replicas a pending proposal adds (a pending shrink keeps the removed members), so
neither a pending expansion nor a pending shrink can move the HW past a replica the
controller might consider in sync.  ``min_insync_replicas`` checks use the committed ISR.
:func:`leader_high_watermark` is that rule, pure; the owner applies it (never backwards).

:class:`LeaderIsr` is what a leading :class:`replication.partition.Partition` holds of
this: every follower's :class:`ReplicaState` and the :class:`IsrState`.  A new leader
epoch forgets every follower's LEO (unknown until it fetches in this epoch, so the HW can
only cover what each ISR member confirmed to this leader); a metadata update within the
epoch (new ISR / partition epoch / replicas) keeps the progress of the replicas it keeps.
It knows nothing of the role, the epochs or the log: the owner passes its LEO, HW and the
epoch's start offset in.

Costs: O(|replicas|) per check.  Not thread-safe: owned by the partition's owner.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clients.protocol.errors import ErrorCode, OffsetOutOfRangeError
from replication.partition_errors import NotLeaderError, PartitionInvariantError

__all__ = [
    "NOT_APPLIED_ERRORS",
    "UNKNOWN_OFFSET",
    "AlterPartitionProposal",
    "IsrState",
    "LeaderIsr",
    "ReplicaState",
    "can_join_isr",
    "leader_high_watermark",
    "out_of_sync_replicas",
]

UNKNOWN_OFFSET = -1
# AlterPartition errors that prove the proposal was not applied (see "One proposal")
NOT_APPLIED_ERRORS = frozenset({ErrorCode.INVALID_REQUEST, ErrorCode.INELIGIBLE_REPLICA})


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one follower."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET

    def update_fetch(self, fetch_offset: int, leader_log_end_offset: int, now_ms: int) -> None:
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset >= 0:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms,
                                              self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_time_ms = now_ms

    def reset(self, now_ms: int, in_sync: bool) -> None:
        """New leader epoch: LEO unknown until the replica fetches in this epoch."""
        self.log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.last_caught_up_time_ms = now_ms if in_sync else 0
        self.last_fetch_time_ms = now_ms if in_sync else 0

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int,
                     replica_lag_time_max_ms: int, high_watermark: int = 0) -> bool:
        if UNKNOWN_OFFSET < self.log_end_offset < high_watermark:
            return False  # it lost committed records (module docstring)
        return (self.log_end_offset == leader_log_end_offset
                or now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms)


@dataclass(frozen=True, slots=True)
class AlterPartitionProposal:
    """What the leader asks the controller (AlterPartition), fenced by both epochs."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


def out_of_sync_replicas(isr: Iterable[int], local_id: int, replicas: dict[int, ReplicaState],
                         leader_log_end_offset: int, now_ms: int,
                         replica_lag_time_max_ms: int, high_watermark: int = 0) -> list[int]:
    """ISR members (never the leader) that have not been caught up recently enough, or
    that fetch from below the HW."""
    result = []
    for r in isr:
        if r == local_id:
            continue
        state = replicas.get(r)
        if state is None or not state.is_caught_up(leader_log_end_offset, now_ms,
                                                   replica_lag_time_max_ms, high_watermark):
            result.append(r)
    return result


def can_join_isr(state: ReplicaState, high_watermark: int,
                 leader_epoch_start_offset: int) -> bool:
    """A follower may join once it fetched in this epoch up to the HW and the epoch start."""
    leo = state.log_end_offset
    return leo != UNKNOWN_OFFSET and leo >= high_watermark and leo >= leader_epoch_start_offset


def leader_high_watermark(maximal_isr: Iterable[int], local_id: int,
                          replicas: dict[int, ReplicaState],
                          leader_log_end_offset: int) -> int | None:
    """min LEO over the maximal ISR (never above the leader's); None while a member's LEO
    is unknown (it has not fetched in this epoch): the HW cannot move."""
    high_watermark = leader_log_end_offset
    for r in maximal_isr:
        if r == local_id:
            continue
        state = replicas.get(r)
        if state is None or state.log_end_offset == UNKNOWN_OFFSET:
            return None
        high_watermark = min(high_watermark, state.log_end_offset)
    return high_watermark


class IsrState:
    """Committed ISR plus at most one pending AlterPartition proposal."""

    __slots__ = ("blocked", "isr", "pending")

    def __init__(self, isr: Iterable[int] = ()) -> None:
        self.isr: tuple[int, ...] = tuple(isr)
        self.pending: AlterPartitionProposal | None = None
        self.blocked = False  # pending was rejected as stale: wait for metadata

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending.new_isr if r not in self.isr)

    def reset(self, isr: Iterable[int]) -> None:
        """New metadata from the controller: commit its ISR, forget any proposal."""
        self.isr = tuple(isr)
        self.pending = None
        self.blocked = False

    def propose(self, proposal: AlterPartitionProposal) -> AlterPartitionProposal | None:
        if self.pending is not None or set(proposal.new_isr) == set(self.isr):
            return None
        self.pending = proposal
        return proposal

    def on_response(self, proposal: AlterPartitionProposal, error_code: int,
                    isr: Iterable[int] | None) -> bool:
        """Apply the controller's answer; True when ``isr`` was committed."""
        if proposal != self.pending:
            return False  # an answer to an older or a forgotten proposal
        if error_code == ErrorCode.NONE:
            self.reset(proposal.new_isr if isr is None else isr)
            return True
        if error_code in NOT_APPLIED_ERRORS:
            self.pending = None
        else:
            self.blocked = True
        return False


class LeaderIsr:
    """A leader's view of its partition's replicas: each follower's progress and the ISR
    with at most one pending proposal (see the module docstring)."""

    __slots__ = ("followers", "local_id", "state")

    def __init__(self, local_id: int) -> None:
        self.local_id = local_id
        self.followers: dict[int, ReplicaState] = {}
        self.state = IsrState()

    def assign(self, replicas: Iterable[int], isr: Iterable[int], now_ms: int, *,
               new_epoch: bool) -> None:
        """New metadata: commit ``isr`` and track every replica but this one.  A follower
        already tracked keeps its progress unless ``new_epoch``."""
        isr = tuple(isr)
        self.state.reset(isr)
        known = {} if new_epoch else self.followers
        followers = {}
        for r in replicas:
            if r == self.local_id:
                continue
            state = known.get(r)
            if state is None:
                state = ReplicaState()
                state.reset(now_ms, in_sync=r in isr)
            followers[r] = state
        self.followers = followers

    def forget(self, isr: Iterable[int]) -> None:
        """Not leading any more: no follower state; ``isr`` as the metadata says."""
        self.followers = {}
        self.state.reset(isr)

    def record_fetch(self, name: str, replica_id: int, fetch_offset: int,
                     leader_log_end_offset: int, now_ms: int) -> None:
        """A follower fetched at ``fetch_offset`` (``name``: the partition, for errors)."""
        state = self.followers.get(replica_id)
        if state is None:
            raise NotLeaderError(f"{name}: replica {replica_id} is not a follower of leader "
                                 f"{self.local_id} (followers {sorted(self.followers)})")
        if not 0 <= fetch_offset <= leader_log_end_offset:
            raise OffsetOutOfRangeError(f"{name}: follower {replica_id} fetch offset "
                                        f"{fetch_offset} is outside [0, {leader_log_end_offset}]")
        state.update_fetch(fetch_offset, leader_log_end_offset, now_ms)

    def high_watermark(self, leader_log_end_offset: int) -> int | None:
        """:func:`leader_high_watermark` over the maximal ISR."""
        return leader_high_watermark(self.state.maximal_isr, self.local_id, self.followers,
                                     leader_log_end_offset)

    def shrunk_isr(self, leader_log_end_offset: int, now_ms: int,
                   replica_lag_time_max_ms: int, high_watermark: int) -> tuple[int, ...] | None:
        """The ISR without its out-of-sync members; None if none is (or one is pending)."""
        if self.state.pending is not None:
            return None
        out = out_of_sync_replicas(self.state.isr, self.local_id, self.followers,
                                   leader_log_end_offset, now_ms, replica_lag_time_max_ms,
                                   high_watermark)
        if not out:
            return None
        return tuple(r for r in self.state.isr if r not in out)

    def expanded_isr(self, replica_id: int, high_watermark: int,
                     leader_epoch_start_offset: int) -> tuple[int, ...] | None:
        """The ISR with ``replica_id`` if it may join now; None otherwise."""
        if (self.state.pending is not None or replica_id in self.state.isr
                or replica_id not in self.followers):
            return None
        if not can_join_isr(self.followers[replica_id], high_watermark,
                            leader_epoch_start_offset):
            return None
        return (*self.state.isr, replica_id)

    def check_invariants(self, name: str, leader_log_end_offset: int) -> None:
        """:class:`PartitionInvariantError` unless the leader is in the ISR and no
        follower is ahead of it."""
        if self.local_id not in self.state.isr:
            raise PartitionInvariantError(f"{name}: leader not in ISR {self.state.isr}")
        for r, state in self.followers.items():
            if state.log_end_offset > leader_log_end_offset:
                raise PartitionInvariantError(
                    f"{name}: follower {r} LEO {state.log_end_offset} > leader LEO "
                    f"{leader_log_end_offset}")
