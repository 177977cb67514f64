"""Appends to one partition log's segments: :class:`LogAppender`.

The write half of :class:`storage.log.log.Log` (which checks that the log is open and
what a leader append must pass, then hands the bytes here): a leader append assigns
offsets from the log end offset and stamps the leader's epoch (and, for a
``LogAppendTime`` topic, the time) into each batch's header; a follower append keeps
the leader's offsets and epochs, refusing offsets that do not increase.  Either way the
request is cut at batch boundaries so that each segment keeps to ``segment_bytes``
(:meth:`LogAppender._segment_cuts`), the active segment rolls before a part that does
not fit (:class:`~storage.log.segment_policy.SegmentPolicy`), and each part is one
``writev`` (:meth:`storage.log.segment_list.SegmentList.append`).  All-or-nothing: a
part whose write fails takes the parts before it back out.  After each write the
owner's ``on_written(records, now_ms)`` runs (the log's flush policy); the result is a
:class:`~storage.log.validator.LogAppendInfo`.

Patched bytes of each batch on a leader append (big-endian)::

    offset  size  field
    0       8     base_offset             (the LEO at append)
    8       4     batch_length            (unchanged value, rewritten)
    12      4     partition_leader_epoch  (the leader's epoch)

Costs: O(batches) Python per append + one ``writev`` per segment written; a
``LogAppendTime`` leader append one copy and one CRC-32C pass per batch.  Not
thread-safe: owned by one :class:`~storage.log.log.Log` (its event-loop thread).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from crc32c import crc32c

from clients.protocol.errors import InvalidRecordError
from clients.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    PREFIX,
    TIMESTAMP_TYPE_MASK,
)
from storage.config import LogConfig
from storage.errors import StorageError
from storage.index.time_index import NO_TIMESTAMP
from storage.log.segment_list import SegmentList
from storage.log.segment_policy import SegmentPolicy
from storage.log.validator import BatchInfo, LogAppendInfo, validate_append_batches
from storage.records.scan import INT32_MAX

__all__ = ["LogAppender", "byte_view"]

# The bytes a leader append rewrites: the first three fields of the header's PREFIX
# (base_offset, batch_length, partition_leader_epoch; 16 bytes, magic follows), so the
# layout stays the one in clients.records.batch.  Packing the whole PREFIX instead (magic
# and crc carried over from validation) measured 10-30 ns more per batch, 1-2% of a leader
# append of 170-byte batches (noise for 16 KiB ones); the partial patch is kept for that.
_PATCH = struct.Struct(PREFIX.format[:4])
_PATCH_SIZE = _PATCH.size
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_OFFSET = ATTRIBUTES_OFFSET + 2 + 4 + 8  # attributes, last delta, base ts
_CRC = struct.Struct(">I")


class LogAppender:
    """Leader and follower appends to one log's :class:`SegmentList` (see the module
    docstring); built by the log with its segments, config, clock and flush hook."""

    def __init__(self, segments: SegmentList, config: LogConfig, clock_ms: Callable[[], int],
                 on_written: Callable[[int, int], None]) -> None:
        self._segments = segments
        self._clock_ms = clock_ms
        self._on_written = on_written
        self.config = config
        self._policy = SegmentPolicy(config)

    def update_config(self, config: LogConfig) -> None:
        """Later appends validate, stamp and roll by ``config``."""
        self.config = config
        self._policy = SegmentPolicy(config)

    def append_as_leader(self, view: memoryview, leader_epoch: int,
                         infos: Sequence[BatchInfo]) -> LogAppendInfo:
        """Assign offsets from the LEO to the batches of ``view`` (``infos``: what the
        leader's check found in them), stamp ``leader_epoch`` (and the append time on a
        ``LogAppendTime`` topic), append."""
        if not infos:
            return self._empty_append_info()
        append_time = self.config.log_append_time
        now = self._clock_ms() if append_time else NO_TIMESTAMP
        first = offset = self._segments.log_end_offset
        iovs: list[bytes | memoryview] = []
        metas: list[tuple[int, int, int, int]] = []
        pack = _PATCH.pack
        max_ts, off_max, records = NO_TIMESTAMP, first, 0
        counts: list[int] = []
        for pos, size, _base, lod, ts, count, _epoch, _header in infos:
            last = offset + lod
            iovs.append(pack(offset, size - LOG_OVERHEAD, leader_epoch))
            if append_time:
                iovs.append(_stamped(view[pos + _PATCH_SIZE : pos + size], now))
                ts = now
            else:
                iovs.append(view[pos + _PATCH_SIZE : pos + size])
            metas.append((offset, last, ts, size))
            counts.append(count)
            if ts > max_ts:
                max_ts, off_max = ts, offset
            records += count
            offset = last + 1
        changes = ((leader_epoch, first),)
        cuts = self._segment_cuts(metas)
        if not cuts:
            return self._append(iovs, len(view), metas, records, max_ts, off_max, changes)
        # a produce request may carry many batches of a partition (our producer sends up
        # to max_request_size of them): cut at batch boundaries like a follower's append
        return self._append_parts(cuts, metas, counts, lambda lo, hi: iovs[2 * lo : 2 * hi],
                                  max_ts, off_max, changes)

    def append_as_follower(self, view: memoryview, checked: Sequence[BatchInfo] | None = None
                           ) -> LogAppendInfo:
        """Append replicated batches as they are (offsets and epochs kept); ``checked``:
        their validation, already run (:meth:`~storage.log.log.Log.follower_check`)."""
        infos = checked if checked is not None else validate_append_batches(
            view, self.config.max_message_bytes, require_records=False)
        if not infos:
            return self._empty_append_info()
        expected = self._segments.log_end_offset
        metas: list[tuple[int, int, int, int]] = []
        changes: list[tuple[int, int]] = []
        max_ts, off_max, records = NO_TIMESTAMP, infos[0][2], 0
        for pos, size, base, lod, ts, count, epoch, _header in infos:
            if base < expected:
                what = "the log end offset" if not metas else "the previous batch's next offset"
                raise InvalidRecordError(
                    f"batch at position {pos} has base offset {base}, below "
                    f"{what} {expected} (offsets must increase)"
                )
            last = base + lod
            metas.append((base, last, ts, size))
            if not changes or changes[-1][0] != epoch:
                changes.append((epoch, base))
            if ts > max_ts:
                max_ts, off_max = ts, base
            records += count
            expected = last + 1
        cuts = self._segment_cuts(metas)
        if not cuts:
            return self._append([view], len(view), metas, records, max_ts, off_max,
                                tuple(changes))
        # A lagging follower fetches many batches at once: they are split at batch
        # boundaries so its segments keep to segment_bytes as the leader's do.
        return self._append_parts(
            cuts, metas, [i[5] for i in infos],
            lambda lo, hi: [view[infos[lo][0] : infos[hi - 1][0] + infos[hi - 1][1]]],
            max_ts, off_max, tuple(changes))

    def _append_parts(self, cuts: list[int], metas: list[tuple[int, int, int, int]],
                      counts: list[int],
                      part_iovs: Callable[[int, int], list[bytes | memoryview]],
                      max_ts: int, off_max: int,
                      epoch_changes: tuple[tuple[int, int], ...]) -> LogAppendInfo:
        """Append batches ``[0, cuts[0])``, ``[cuts[0], cuts[1])``... each with its own
        roll check (:meth:`_segment_cuts` chose the cuts); one info for them all.  Still
        all-or-nothing: a part whose write fails (StorageError) takes the parts before
        it back out (the log is truncated to where the request began) before it raises,
        so a retried request is appended once."""
        rolled = False
        info = None
        start = self._segments.log_end_offset
        for lo, hi in zip([0, *cuts], [*cuts, len(metas)], strict=True):
            part = metas[lo:hi]
            try:
                info = self._append(part_iovs(lo, hi), sum(m[3] for m in part), part,
                                    sum(counts[lo:hi]), max_ts, off_max, ())
            except StorageError:
                if lo:
                    self._segments.truncate_to(start, self._clock_ms())
                raise
            rolled |= info.rolled
        assert info is not None
        return LogAppendInfo(metas[0][0], metas[-1][1], max_ts, off_max, len(metas),
                             sum(counts), sum(m[3] for m in metas), info.log_start_offset,
                             epoch_changes, rolled)

    def _segment_cuts(self, metas: list[tuple[int, int, int, int]]) -> list[int]:
        """Indexes of the batches (of one append, ``(base, last, ts, size)`` each) that
        must begin a new segment to keep each segment within ``segment_bytes``; empty
        when the whole append fits (the common case).  A batch larger than a segment has
        one of its own."""
        limit = self.config.segment_bytes
        room = limit - self._segments.active.size
        if sum(m[3] for m in metas) <= room or len(metas) == 1:
            return []
        cuts: list[int] = []
        used = 0
        for i, meta in enumerate(metas):
            size = meta[3]
            if used == 0:
                if size > room:  # _append rolls before this batch
                    room = limit
            elif used + size > room:
                cuts.append(i)
                used, room = 0, limit
            used += size
        return cuts

    def _append(self, iovs: list[bytes | memoryview], total: int,
                metas: list[tuple[int, int, int, int]], records: int, max_ts: int, off_max: int,
                epoch_changes: tuple[tuple[int, int], ...]) -> LogAppendInfo:
        first_offset, last_offset = metas[0][0], metas[-1][1]
        now = self._clock_ms()
        segments = self._segments
        seg = segments.active
        rolled = False
        if (seg.size and self._policy.should_roll(seg, total, last_offset, now)) or (
            not seg.size and not seg.relative_offset_fits(last_offset)
        ):
            # The new segment starts at the LEO even when a follower's batch starts above
            # it (a compacted leader's gap): segment boundaries stay contiguous, so
            # recovery can read a hole at a boundary as a lost unflushed tail.  Only a
            # gap too wide for relative offsets (2**31) starts the segment at the batch.
            leo = segments.log_end_offset
            segments.roll(leo if last_offset - leo <= INT32_MAX else first_offset, now)
            rolled = True
        segments.append(iovs, total, metas, now)
        self._on_written(records, now)
        return LogAppendInfo(first_offset, last_offset, max_ts, off_max, len(metas), records,
                             total, segments.log_start_offset, epoch_changes, rolled)

    def _empty_append_info(self) -> LogAppendInfo:
        leo = self._segments.log_end_offset
        return LogAppendInfo(leo, leo - 1, NO_TIMESTAMP, -1, 0, 0, 0,
                             self._segments.log_start_offset, ())


def _stamped(tail: memoryview, now_ms: int) -> bytes:
    """A batch from its magic byte on (``tail``) stamped LogAppendTime ``now_ms``: the
    timestamp-type bit, ``max_timestamp``, and the CRC over them again."""
    out = bytearray(tail)
    at = ATTRIBUTES_OFFSET - _PATCH_SIZE
    _ATTRIBUTES.pack_into(out, at, _ATTRIBUTES.unpack_from(out, at)[0] | TIMESTAMP_TYPE_MASK)
    _MAX_TIMESTAMP.pack_into(out, _MAX_TIMESTAMP_OFFSET - _PATCH_SIZE, now_ms)
    _CRC.pack_into(out, CRC_OFFSET - _PATCH_SIZE, crc32c(memoryview(out)[at:]))
    return bytes(out)


def byte_view(data: bytes | bytearray | memoryview) -> memoryview:
    """``data`` as a flat memoryview of bytes (no copy)."""
    view = data if type(data) is memoryview else memoryview(data)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view
