"""The segments of one partition log and the offsets that describe them: :class:`SegmentList`.

A :class:`SegmentList` owns the ordered :class:`~storage.segment.Segment` objects of a log
directory and the three offsets Kafka keeps for them, and it is the only code that
changes either.  Every edit keeps these invariants (checked by
:func:`storage.log.invariants.check_log_invariants`):

* ``segments`` is never empty, sorted by base offset; the last one is the *active*
  segment (indexes writable, appends go there), every other one is inactive and non-empty;
* ``segments[0].base_offset <= log_start_offset <= log_end_offset`` (LEO, the next offset
  to assign) and ``log_end_offset == active.next_offset``;
* ``recovery_point <= log_end_offset``: everything below it has been fsync'd.

Edits and what they do to the offsets:

==========================  ================================================================
edit                        effect
==========================  ================================================================
``append``                  batches to the active segment; LEO = last offset + 1
``roll(base)``              the active segment becomes inactive (indexes trimmed; an empty
                            one is deleted instead) and a new one starts at ``base``; the
                            rolled bytes are due for a flush (:attr:`roll_flush_offset`)
``truncate_to(offset)``     drops every batch with last offset >= ``offset``: LEO = the
                            batch boundary at or below ``offset`` (Kafka would leave a gap
                            at ``offset``; we do not); start, recovery point clamped to it
``restart_at(offset)``      deletes every segment; one empty segment at ``offset`` =
                            start = LEO = recovery point
``delete_prefix(k)``        deletes the first ``k`` (inactive) segments; start moves up to
                            the first kept base offset
``replace(old, new)``       puts a cleaned segment in place of consecutive inactive ones
                            (the in-memory half of a cleaner swap, :mod:`storage.cleaner.swap`)
``raise_log_start(offset)`` start (and the recovery point) move up; no file changes
``flush(up_to)``            fsyncs segments below ``up_to`` (and the directory if segments
                            came or went); recovery point = max(itself, ``up_to``)
==========================  ================================================================

What to roll and what to delete is decided elsewhere (:mod:`storage.log.segment_policy`);
a list only checks what would break its invariants (``replace`` of segments that are not
its own raises :class:`~storage.errors.StorageError`).  Reads go through
:class:`storage.log.reader.LogReader`, which only looks (``segments``,
:meth:`floor_index`, the offsets).

Reads from the owner: nothing; it holds the directory and the :class:`LogConfig` new
segments are created with (``update_config`` replaces it and hands it to every segment,
O(segments)).  Called by :class:`storage.log.log.Log` (which checks that the
log is open first).  Costs: offsets O(1); ``floor_index`` O(log segments) bisect;
``size_in_bytes`` and ``flush`` O(segments); ``truncate_to`` O(dropped segments) + one
index lookup; ``roll`` creates three files.  Concurrency: **not thread-safe**; the log's
owner thread calls every method.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from pathlib import Path

from storage.config import LogConfig
from storage.errors import StorageError
from storage.file_io import fsync_dir
from storage.segment import Segment

__all__ = ["SegmentList"]

log = logging.getLogger("storage.log")


class SegmentList:
    """The ordered segments of one log directory and their offsets (see the module doc)."""

    def __init__(self, directory: Path, config: LogConfig, segments: list[Segment], *,
                 log_start_offset: int, recovery_point: int, now_ms: int,
                 dir_dirty: bool = False) -> None:
        """Take ``segments`` (non-empty, sorted, as recovery left them) and make the last
        one active.  ``log_start_offset`` and ``recovery_point`` (from the checkpoints) are
        clamped into range.  A log start above the log end contradicts the data (a
        damaged or hand-edited checkpoint; or a DeleteRecords whose records a crash then
        cut off): it is ignored with a warning and the log starts at its first segment -
        a checkpoint is never obeyed by deleting data (the price: records deleted by
        DeleteRecords may be served again after such a crash)."""
        if not segments:
            raise StorageError(f"{directory}: a segment list needs at least one segment")
        self.dir = directory
        self.config = config
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        segments[-1].make_active()
        self._log_end_offset = segments[-1].next_offset
        self._log_start_offset = max(log_start_offset, segments[0].base_offset)
        self._recovery_point = min(max(recovery_point, 0), self._log_end_offset)
        self._dir_dirty = dir_dirty
        if self._log_start_offset > self._log_end_offset:
            log.warning("%s: checkpointed log start offset %d is beyond the log end %d; "
                        "ignored, the log starts at %d (nothing deleted)", directory,
                        log_start_offset, self._log_end_offset, segments[0].base_offset)
            self._log_start_offset = segments[0].base_offset
        self._recovery_point = max(self._recovery_point, self._log_start_offset)
        self._roll_flush_offset = self._recovery_point  # a roll asks for a flush below this

    # -- views -------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def roll_flush_offset(self) -> int:
        """Rolled segments below this offset are due for a flush (see ``Log.maybe_flush``)."""
        return self._roll_flush_offset

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def floor_index(self, offset: int) -> int:
        """Index of the last segment with base offset <= ``offset`` (0 if none)."""
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def update_config(self, config: LogConfig) -> None:
        """New segments, and every segment now (:meth:`Segment.update_config`), follow
        ``config``."""
        self.config = config
        for seg in self.segments:
            seg.update_config(config)

    # -- appends and rolls -------------------------------------------------------------

    def append(self, iovs: Sequence[bytes | memoryview], total: int,
               batches: Sequence[tuple[int, int, int, int]], now_ms: int) -> None:
        """Write ``iovs`` (``total`` bytes) to the active segment, index ``batches``
        ``(base, last, max_ts, size)`` and move the LEO past the last one."""
        self.segments[-1].append(iovs, total, batches, now_ms)
        self._log_end_offset = batches[-1][1] + 1

    def roll(self, new_base: int, now_ms: int) -> None:
        """Start a new active segment at ``new_base``; an empty active one is replaced."""
        old = self.segments[-1]
        if old.size == 0:  # an empty active segment is replaced, never left behind
            old.delete()
            self.segments.pop()
            self._bases.pop()
        else:
            old.make_inactive()
        new = Segment(self.dir, new_base, self.config, create=True, now_ms=now_ms)
        new.make_active()
        self.segments.append(new)
        self._bases.append(new_base)
        self._dir_dirty = True
        self._roll_flush_offset = max(self._roll_flush_offset, new_base)

    # -- truncation, retention, swaps --------------------------------------------------

    def truncate_to(self, offset: int, now_ms: int) -> None:
        """Drop every batch with last offset >= ``offset`` (LEO becomes <= ``offset``)."""
        if offset >= self._log_end_offset:
            return
        if offset < self.segments[0].base_offset:
            self.restart_at(offset, now_ms)
            return
        while self.segments[-1].base_offset > offset:
            self.segments.pop().delete()
            self._bases.pop()
            # the next flush makes the deletion durable with the batches written after
            # it: a power cut must not bring the old segment back under newer offsets
            self._dir_dirty = True
        seg = self.segments[-1]
        seg.make_active()
        seg.truncate_to(offset)
        self._log_end_offset = seg.next_offset
        self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
        self._recovery_point = min(self._recovery_point, self._log_end_offset)
        self._roll_flush_offset = min(self._roll_flush_offset, self._log_end_offset)

    def restart_at(self, offset: int, now_ms: int) -> None:
        """Delete every segment; the list restarts empty at ``offset`` (start = end)."""
        for seg in self.segments:
            seg.delete()
        seg = Segment(self.dir, offset, self.config, create=True, now_ms=now_ms)
        seg.make_active()
        self.segments, self._bases = [seg], [offset]
        self._log_start_offset = self._log_end_offset = offset
        self._recovery_point = self._roll_flush_offset = offset
        self._dir_dirty = True

    def raise_log_start(self, offset: int) -> None:
        """Move the log start offset up to ``offset`` (<= LEO; the caller checks)."""
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._recovery_point = max(self._recovery_point, offset)

    def delete_prefix(self, count: int) -> int:
        """Delete the first ``count`` segments (never the active one); the log start
        offset moves to the first kept base offset if it was below.  Returns ``count``."""
        if not 0 <= count < len(self.segments):
            raise StorageError(f"{self.dir}: cannot delete {count} of "
                               f"{len(self.segments)} segments")
        if count == 0:
            return 0
        for seg in self.segments[:count]:
            seg.delete()
        del self.segments[:count]
        del self._bases[:count]
        self._log_start_offset = max(self._log_start_offset, self.segments[0].base_offset)
        self._recovery_point = max(self._recovery_point, self._log_start_offset)
        self._dir_dirty = True
        return count

    def replace(self, old: list[Segment], new: Segment) -> None:
        """Put ``new`` in place of ``old`` (consecutive inactive segments, ``new`` based at
        the first one's base), after the files were renamed; the old segments'
        descriptors are closed."""
        i = next((k for k, s in enumerate(self.segments) if s is old[0]), -1)
        if (i < 0 or self.segments[i:i + len(old)] != old or i + len(old) >= len(self.segments)
                or new.base_offset != old[0].base_offset):
            raise StorageError(f"{self.dir}: cannot replace {old} with {new}")
        for seg in old:
            seg.abandon()
        self.segments[i:i + len(old)] = [new]
        self._bases[i:i + len(old)] = [new.base_offset]

    # -- durability ---------------------------------------------------------------------

    def flush(self, up_to_offset: int) -> None:
        """fsync every segment holding offsets below ``up_to_offset`` (<= LEO; the first
        one always) and the directory if segments came or went; advance the recovery
        point to ``up_to_offset``."""
        for seg in self.segments:
            if seg.base_offset >= up_to_offset and seg is not self.segments[0]:
                break
            seg.flush()
        if self._dir_dirty:
            fsync_dir(self.dir)
            self._dir_dirty = False
        self._recovery_point = max(self._recovery_point, up_to_offset)
