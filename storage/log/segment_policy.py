"""When a log rolls its active segment and which old segments retention deletes.

:class:`SegmentPolicy` turns the segment and retention settings of a
:class:`~storage.config.LogConfig` into decisions; :class:`storage.log.log.Log` asks it and
then has its :class:`~storage.log.segment_list.SegmentList` carry them out.  It owns no
state and changes nothing.

* **Roll** (:meth:`SegmentPolicy.should_roll`) before an append to a non-empty active
  segment when the request would take it past ``segment_bytes``, the segment is older
  than ``segment_ms`` (from its first append), either index is full, or the request's
  last offset is not within a 32-bit relative offset of the segment's base.  An append
  of many batches (a produce request of several batches of a partition, a follower's
  fetched batches) is split at batch boundaries by :class:`storage.log.log.Log` so each
  segment keeps to ``segment_bytes`` unless one batch alone is larger.
* **Retention** (:meth:`SegmentPolicy.deletable_prefix`): a prefix of inactive segments
  goes while each is entirely below the log start offset or older than ``retention_ms``
  (by its largest timestamp); then, while the remaining bytes exceed ``retention_bytes``
  by at least the oldest segment's size, that segment too.  Time and size retention
  apply when "delete" is in the log's ``cleanup_policy`` (:attr:`LogConfig.delete`:
  ``delete`` or ``compact,delete``, whose cleaner compacts what retention keeps); a
  compact-only log (``cleanup_policy="compact"``) only loses segments below its log
  start offset (the cleaner bounds its size).  The active segment is never deleted.

Costs: ``should_roll`` O(1); ``deletable_prefix`` O(segments).  Thread safety: immutable
(the config is frozen); callable from any thread with segments it may read.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.config import LogConfig
from storage.segment import Segment

__all__ = ["SegmentPolicy"]


class SegmentPolicy:
    """The roll and retention rules of one log's :class:`LogConfig`."""

    __slots__ = ("config",)

    def __init__(self, config: LogConfig) -> None:
        self.config = config

    def should_roll(self, active: Segment, append_bytes: int, last_offset: int,
                    now_ms: int) -> bool:
        """Roll ``active`` (non-empty) before appending ``append_bytes`` whose last offset
        is ``last_offset``?"""
        cfg = self.config
        return (active.size + append_bytes > cfg.segment_bytes
                or (active.rolling_ms is not None and now_ms - active.rolling_ms > cfg.segment_ms)
                or active.index.is_full or active.time_index.is_full
                or not active.relative_offset_fits(last_offset))

    def deletable_prefix(self, segments: Sequence[Segment], log_start_offset: int,
                         now_ms: int, high_watermark: int | None = None) -> int:
        """How many leading segments retention deletes (always fewer than all).

        With ``high_watermark`` (what a broker always passes), time and size retention
        only delete a segment that lies wholly below it (its next segment's base offset
        <= HW, Kafka's ``deletableSegments`` rule): records a lagging follower still
        needs, and records not yet acknowledged to acks=all producers, are never
        deleted.  None (storage used alone, tests) means no such bound."""
        cfg = self.config
        k = 0

        def below_hw(i: int) -> bool:
            return high_watermark is None or segments[i + 1].base_offset <= high_watermark

        while k < len(segments) - 1:
            below_start = segments[k + 1].base_offset <= log_start_offset
            expired = (cfg.delete and cfg.retention_ms >= 0
                       and now_ms - segments[k].largest_timestamp > cfg.retention_ms
                       and below_hw(k))
            if not (below_start or expired):
                break
            k += 1
        if cfg.retention_bytes >= 0 and cfg.delete:
            excess = sum(s.size for s in segments[k:]) - cfg.retention_bytes
            while k < len(segments) - 1 and excess >= segments[k].size and below_hw(k):
                excess -= segments[k].size
                k += 1
        return k
