"""Changes to a partition log's segment list: rolling, truncation, retention, swaps.

* A roll closes the active segment for appends (its indexes are trimmed) and starts a
  new one at the given base offset; an empty active segment is replaced, never left
  behind.  A roll does not fsync inline: it schedules a flush of the rolled segment that
  the owner's next :meth:`storage.log.Log.maybe_flush` performs.
* ``truncate_to(offset)`` drops every batch whose last offset is >= ``offset`` and sets
  the LEO to ``min(offset, first dropped base offset)`` -- i.e. to the batch boundary at
  or below ``offset`` (Kafka would set LEO = offset, leaving a gap; we do not).
* Retention (:meth:`LogRetention.delete_old_segments`) deletes a prefix of inactive
  segments by log start offset, age and size; compacted logs only lose segments below
  their log start offset.
* :meth:`LogRetention.replace_segments` is the in-memory half of a cleaner swap.

Costs: roll O(1) plus creating three files; truncate_to O(dropped segments) + one index
lookup; retention O(segments); replace_segments O(segments).

Concurrency: **not thread-safe**; the log's owner thread calls every method.  A region
handed out before a truncation or deletion may become unreadable (see
:mod:`storage.log.reader`).
"""

from __future__ import annotations

from clients.protocol.errors import OffsetOutOfRangeError
from storage.errors import StorageError
from storage.log.state import LogState
from storage.segment import Segment

__all__ = ["LogRetention"]


class LogRetention(LogState):
    """Roll, truncation and retention methods of :class:`storage.log.Log`."""

    # -- rolling -----------------------------------------------------------------------

    def _should_roll(self, seg: Segment, total: int, last_offset: int, now: int) -> bool:
        cfg = self.config
        return (seg.size + total > cfg.segment_bytes
                or (seg.rolling_ms is not None and now - seg.rolling_ms > cfg.segment_ms)
                or seg.index.is_full or seg.time_index.is_full
                or not seg.relative_offset_fits(last_offset))

    def _roll(self, new_base: int, now: int) -> None:
        old = self.active
        if old.size == 0:  # an empty active segment is replaced, never left behind
            old.delete()
            self.segments.pop()
            self._bases.pop()
        else:
            old.make_inactive()
        new = Segment(self.dir, new_base, self.config, create=True, now_ms=now)
        new.make_active()
        self.segments.append(new)
        self._bases.append(new_base)
        self._dir_dirty = True
        self._roll_flush_offset = max(self._roll_flush_offset, new_base)

    def roll(self) -> None:
        """Force a roll at the LEO (no-op when the active segment is empty)."""
        self._check_open()
        if self.active.size:
            self._roll(self._log_end_offset, self._clock_ms())
    # -- truncation and retention ------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every batch with last offset >= ``offset`` (LEO becomes <= ``offset``)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if offset >= self._log_end_offset:
            return
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while self.segments[-1].base_offset > offset:
            self.segments.pop().delete()
            self._bases.pop()
        seg = self.active
        seg.make_active()
        seg.truncate_to(offset)
        self._log_end_offset = seg.next_offset
        self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
        self._recovery_point = min(self._recovery_point, self._log_end_offset)
        self._roll_flush_offset = min(self._roll_flush_offset, self._log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment; the log restarts empty at ``offset`` (start = end)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        for seg in self.segments:
            seg.delete()
        seg = Segment(self.dir, offset, self.config, create=True, now_ms=self._clock_ms())
        seg.make_active()
        self.segments, self._bases = [seg], [offset]
        self._log_start_offset = self._log_end_offset = offset
        self._recovery_point = self._roll_flush_offset = offset
        self._unflushed_messages, self._first_unflushed_ms = 0, None
        self._dir_dirty = True

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """Raise the log start offset (DeleteRecords / follower following its leader).

        Reads below it fail at once; whole segments below it are deleted by the next
        :meth:`delete_old_segments`.  Above the LEO -> OffsetOutOfRangeError.
        """
        self._check_open()
        if offset > self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset to {offset}, past the log end offset "
                f"{self._log_end_offset}"
            )
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._recovery_point = max(self._recovery_point, offset)

    def delete_old_segments(self) -> int:
        """Apply retention; return the number of segments deleted (never the active one).

        A prefix of inactive segments is deleted while each is entirely below the log
        start offset or older than ``retention_ms`` (by its largest timestamp); then,
        while the remaining size exceeds ``retention_bytes`` by at least the oldest
        segment's size, that segment too.  The log start offset moves to the first kept
        segment's base offset.  A compacted log (``cleanup_policy="compact"``) only loses
        segments below its log start offset (the cleaner bounds its size).
        """
        self._check_open()
        cfg = self.config
        segs = self.segments
        now = self._clock_ms()
        k = 0
        while k < len(segs) - 1:
            below_start = segs[k + 1].base_offset <= self._log_start_offset
            expired = (not cfg.compact and cfg.retention_ms >= 0
                       and now - segs[k].largest_timestamp > cfg.retention_ms)
            if not (below_start or expired):
                break
            k += 1
        if cfg.retention_bytes >= 0 and not cfg.compact:
            excess = sum(s.size for s in segs[k:]) - cfg.retention_bytes
            while k < len(segs) - 1 and excess >= segs[k].size:
                excess -= segs[k].size
                k += 1
        if k == 0:
            return 0
        for seg in segs[:k]:
            seg.delete()
        del segs[:k]
        del self._bases[:k]
        self._log_start_offset = max(self._log_start_offset, segs[0].base_offset)
        self._recovery_point = max(self._recovery_point, self._log_start_offset)
        self._dir_dirty = True
        return k

    def replace_segments(self, old: list[Segment], new: Segment) -> None:
        """Put ``new`` in place of ``old`` (consecutive inactive segments, ``new`` based at
        the first one's base): the in-memory half of a cleaner swap (storage.cleaner),
        called after the files were renamed.  The old segments' descriptors are closed."""
        self._check_open()
        i = next((k for k, s in enumerate(self.segments) if s is old[0]), -1)
        if (i < 0 or self.segments[i:i + len(old)] != old or i + len(old) >= len(self.segments)
                or new.base_offset != old[0].base_offset):
            raise StorageError(f"{self.dir}: cannot replace {old} with {new}")
        for seg in old:
            seg.abandon()
        self.segments[i:i + len(old)] = [new]
        self._bases[i:i + len(old)] = [new.base_offset]
