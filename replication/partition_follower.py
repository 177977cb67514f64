"""The follower path of a partition replica: truncation handshake and copied appends.

A follower whose leader or epoch changed runs the truncation handshake before fetching:
send OffsetsForLeaderEpoch(``truncation_request_epoch``), pass the answer to
:meth:`PartitionFollower.truncate_on_leader_answer`, repeat while the decision is not
``completed``.  Appends copy the leader's batches (offsets and epochs kept); the
leader-epoch cache is assigned from the incoming batch headers *before* the append and
trimmed back if it fails.  HW = min(leader's HW from the last fetch, own LEO).  Every
truncation trims the epoch cache and rebuilds the producer state if the LEO went down.

Costs: a truncation decision O(epochs) plus the log's truncation; an append the log's
append plus O(batches).  Not thread-safe: owned by the broker's event loop (the replica
fetcher drives it).
"""

from __future__ import annotations

from replication.leader_epoch_cache import epoch_changes
from replication.partition_errors import NotLeaderError
from replication.partition_state import PartitionState, _headers_or_none
from replication.truncation import (
    EpochEndOffset,
    TruncationDecision,
    TruncationPolicy,
    decide_truncation,
)
from storage.log.log import LogAppendInfo
from storage.producer_snapshot import delete_snapshots_above

__all__ = ["PartitionFollower"]


class PartitionFollower(PartitionState):
    """Follower-side methods of :class:`replication.partition.Partition`."""

    def _require_not_leader(self, what: str) -> None:
        if self.is_leader:
            raise NotLeaderError(f"{self.topic}-{self.index}: the leader cannot {what}")

    def truncate_on_leader_answer(
        self, answer: EpochEndOffset,
        policy: TruncationPolicy = TruncationPolicy.LEADER_EPOCH,
    ) -> TruncationDecision:
        """Truncate per the leader's OffsetsForLeaderEpoch answer; ask again unless
        the returned decision is ``completed``."""
        self._require_not_leader("truncate")
        decision = decide_truncation(answer, self.leader_epoch_cache, self.log_end_offset,
                                     self.log_start_offset, self.high_watermark, policy)
        self.truncate_to(decision.truncate_to)
        return decision

    def truncate_to(self, offset: int) -> None:
        """Follower: drop everything at or after ``offset`` (batch boundary at or below)."""
        self._require_not_leader("truncate")
        leo = self.log_end_offset
        self.log.truncate_to(offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        if self.log_end_offset < leo:
            self.rebuild_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Follower behind the leader's log start: restart the log empty at ``offset``."""
        self._require_not_leader("truncate")
        self.log.truncate_fully_and_start_at(offset)
        self.leader_epoch_cache.clear()
        self.high_watermark = offset
        if self._snapshot_dir is not None:  # every snapshot describes a history now gone
            delete_snapshots_above(self._snapshot_dir, -1)
        self.rebuild_producer_state()

    def append_records_as_follower(self, batches: bytes | bytearray | memoryview,
                                   leader_high_watermark: int,
                                   leader_log_start_offset: int | None = None
                                   ) -> LogAppendInfo | None:
        """Append copied batches (offsets/epochs kept); HW = min(leader HW, own LEO).

        ``batches`` may be empty (a fetch that only carried the HW): returns None.
        """
        self._require_not_leader("append as a follower")
        info = None
        if len(batches):
            self.leader_epoch_cache.assign_all(epoch_changes(batches))
            try:
                info = self.log.append_as_follower(batches)
            except Exception:
                self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
                raise
            self._after_append(_headers_or_none(batches), info, assigned=False)
        leo = self.log_end_offset
        if leader_log_start_offset is not None and leader_log_start_offset > self.log_start_offset:
            self.log.maybe_increment_log_start_offset(min(leader_log_start_offset, leo))
            self.sync_log_start()
        self.high_watermark = max(0, min(leader_high_watermark, leo))
        return info
