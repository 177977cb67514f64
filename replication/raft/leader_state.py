"""LeaderState: what the leader of one epoch knows about the voters' logs.

Per voter: the end offset it has durably (the leader's own flushed end; a follower's
``fetch_offset`` once its Fetch was valid) and when it last fetched.  From them:

* **High watermark**: the largest offset a majority of voters have reached, *but only
  once that offset is past the epoch start offset* (the first entry of this epoch, the
  LeaderChange record the leader appends on election).  A new leader therefore commits
  entries of older epochs only together with one of its own (Raft's rule, Kafka's
  ``LeaderState.maybeUpdateHighWatermark``).  Never moves back.
* **Check quorum**: lost when fewer than a majority (the leader included) fetched within
  the fetch timeout; the leader then resigns.
* **Fetch validation**: a Fetch at ``(fetch_offset, last_fetched_epoch)`` diverges when the
  leader's epoch cache ends that epoch (or the largest below it) before ``fetch_offset``
  or knows it under another number; the answer is ``(epoch, end_offset)`` of
  ``LeaderEpochCache.end_offset_for``, as for OffsetsForLeaderEpoch.

Costs: O(voters log voters) per update (a sort), O(epochs) per validation.  Not
thread-safe: owned by the replica.
"""

from __future__ import annotations

from collections.abc import Iterable

from replication.leader_epoch_cache import LeaderEpochCache
from replication.raft.election import majority_of

__all__ = ["LeaderState", "diverging_epoch"]


def diverging_epoch(cache: LeaderEpochCache, log_end_offset: int, fetch_offset: int,
                    last_fetched_epoch: int) -> tuple[int, int] | None:
    """None when the follower's log is a prefix of ours; else where ours ends its epoch."""
    if fetch_offset == 0 and last_fetched_epoch < 0:
        return None  # an empty follower log
    epoch, end = cache.end_offset_for(last_fetched_epoch, log_end_offset)
    if epoch != last_fetched_epoch or fetch_offset > end:
        return epoch, end
    return None


class LeaderState:
    def __init__(self, node_id: int, voters: Iterable[int], epoch: int,
                 epoch_start_offset: int, high_watermark: int, now_ms: int) -> None:
        self.node_id = node_id
        self.epoch = epoch
        self.epoch_start_offset = epoch_start_offset
        self.high_watermark = high_watermark
        self._end_offsets = {v: 0 for v in voters}
        self._last_fetch_ms = dict.fromkeys(self._end_offsets, now_ms)  # a grace period
        self._majority = majority_of(len(self._end_offsets))
        self._observers: set[int] = set()  # voters whose last Fetch said observer

    def end_offset_of(self, voter: int) -> int:
        return self._end_offsets[voter]

    def last_fetch_ms_of(self, voter: int) -> int:
        """When ``voter`` last fetched (the leader: its last poll), on the replica's clock."""
        return self._last_fetch_ms[voter]

    def on_fetch_snapshot(self, voter: int, now_ms: int) -> None:
        """A valid FetchSnapshot from ``voter``: alive for check quorum, unless its last
        Fetch said it is an observer (FetchSnapshot does not say)."""
        if voter in self._last_fetch_ms and voter not in self._observers:
            self._last_fetch_ms[voter] = now_ms

    def update_local(self, flushed_end_offset: int, now_ms: int) -> bool:
        """The leader's own durable end moved; True if the high watermark moved."""
        self._end_offsets[self.node_id] = flushed_end_offset
        self._last_fetch_ms[self.node_id] = now_ms
        return self._maybe_advance()

    def on_fetch(self, voter: int, fetch_offset: int, now_ms: int,
                 observer: bool = False) -> bool:
        """A valid Fetch from ``voter``; True if the high watermark moved.  An
        ``observer`` (a voter catching up from a new directory, its disk lost) is never
        counted (HW majority, check quorum) and what it acknowledged before is forgotten."""
        if voter not in self._end_offsets or voter == self.node_id:
            return False
        if observer:
            self._observers.add(voter)
            self._end_offsets[voter] = 0
            return False
        self._observers.discard(voter)
        self._last_fetch_ms[voter] = now_ms
        self._end_offsets[voter] = max(self._end_offsets[voter], fetch_offset)
        return self._maybe_advance()

    def _maybe_advance(self) -> bool:
        reached = sorted(self._end_offsets.values(), reverse=True)[self._majority - 1]
        if reached > self.epoch_start_offset and reached > self.high_watermark:
            self.high_watermark = reached
            return True
        return False

    def quorum_deadline_ms(self, now_ms: int, fetch_timeout_ms: int) -> int:
        """When check quorum fails unless more voters fetch (the leader counts as now)."""
        self._last_fetch_ms[self.node_id] = now_ms
        recent = sorted(self._last_fetch_ms.values(), reverse=True)[self._majority - 1]
        return recent + fetch_timeout_ms + 1

    def successors(self) -> tuple[int, ...]:
        """The other voters, the most caught up first (EndQuorumEpoch's preference)."""
        others = [v for v in self._end_offsets if v != self.node_id]
        return tuple(sorted(others, key=lambda v: (-self._end_offsets[v], v)))
