"""One partition's log: an ordered list of segments in ``<data_dir>/<topic>-<partition>/``.

Directory layout (formats: :mod:`storage.segment`, :mod:`storage.offset_index`,
:mod:`storage.time_index`; batches: :mod:`clients.records`)::

    00000000000000000000.log        batches with offsets [0, 1200)
    00000000000000000000.index      sparse offset -> position (trimmed: inactive)
    00000000000000000000.timeindex  sparse max timestamp -> offset (trimmed)
    00000000000000001200.log        active segment (appends go here)
    00000000000000001200.index      preallocated to segment_index_bytes, mmapped
    00000000000000001200.timeindex  preallocated to segment_index_bytes, mmapped

:class:`Log` is assembled from parts, one module each: the shared state and offsets
(:mod:`storage.log.state`), the read path and file regions (:mod:`storage.log.reader`),
rolling/truncation/retention (:mod:`storage.log.retention`); this module has opening,
appends, flushing and the lifecycle.  Every name is importable from here.

Semantics worth knowing (Kafka's unless stated):

* Appends are all-or-nothing per request: every batch is validated first (length, magic,
  CRC-32C, counts, compression, ``max_message_bytes``), then the whole request goes to the
  active segment with one ``writev`` (leader appends patch only the 16 bytes of
  base_offset/batch_length/leader_epoch per batch, the records are not copied).  A roll
  happens before a request that would not fit; a request is never split across segments.
  Patched bytes of each batch (big-endian)::

      offset  size  field
      0       8     base_offset             (the LEO at append)
      8       4     batch_length            (unchanged value, rewritten)
      12      4     partition_leader_epoch  (the leader's epoch)

* Reads, regions and their identity: see :mod:`storage.log.reader`; ``truncate_to`` and
  retention: see :mod:`storage.log.retention`.
* Flushing: by default nothing is fsync'd on append (replication is the durability);
  ``flush_messages``/``flush_ms`` are applied after each append and by
  :meth:`Log.maybe_flush`.  A roll does not fsync inline: it schedules a flush of the
  rolled segment that the owner's next :meth:`Log.maybe_flush` performs (Kafka does it on
  a background scheduler).
* A compacted log (``cleanup_policy="compact"``) must not take a produced record without
  a key (Kafka's rule: compaction keeps the latest record per key, so a keyless record
  has no meaning there).  :meth:`Log.require_keys` raises :class:`InvalidRecordError`
  (INVALID_RECORD) for such a request; the Produce handler calls it before the leader
  append, so nothing is appended.  It walks every record (O(records)) and a second CRC
  pass, on compacted logs only.  The appends themselves stay permissive: follower
  appends copy the leader, and the cleaner still drops keyless records that got in
  before a topic became compacted.  Control batches are not checked.
* Only CreateTime timestamps are supported (a LogAppendTime batch would need its CRC
  recomputed); batches are stored as received.

Concurrency: **not thread-safe**; the broker's event loop thread owns the Log (several
Logs may be opened in parallel threads, each by one thread).  Other processes may read
file regions concurrently (see :mod:`storage.log.reader` for what they must tolerate).

Costs: append O(batches + bytes for the CRC); open after a clean shutdown O(index bytes)
+ a tail walk per segment; unclean open O(bytes after the recovery point); flush
O(segments) + the fsyncs; read and retention: see their modules.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from clients.protocol.errors import InvalidRecordError, MiniKafkaError
from clients.records.batch import CONTROL_MASK, HEADER
from storage.cleaner.batch_filter import walk_records
from storage.config import LogConfig
from storage.log.invariants import check_log_invariants
from storage.log.reader import FetchDataInfo, FileRegion, LogReader, TimestampAndOffset
from storage.log.recovery import RecoveryReport, load_segments
from storage.log.retention import LogRetention
from storage.log.state import wall_clock_ms
from storage.log.validator import validate_append_batches
from storage.segment import Segment
from storage.time_index import NO_TIMESTAMP

__all__ = [
    "FetchDataInfo",
    "FileRegion",
    "Log",
    "LogAppendInfo",
    "RecoveryReport",
    "TimestampAndOffset",
    "wall_clock_ms",
]

# base_offset, batch_length, partition_leader_epoch: the bytes a leader append rewrites
_PATCH = struct.Struct(">qii")
_PATCH_SIZE = _PATCH.size
_INT32_MAX = 2**31 - 1


class LogAppendInfo(NamedTuple):
    """Result of an append (a NamedTuple: immutable and cheap to build per request)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    num_batches: int
    num_records: int
    valid_bytes: int
    log_start_offset: int
    # (leader_epoch, base_offset) of the first appended batch and of every batch whose
    # epoch differs from the previous one: feeds the leader-epoch cache without rescans.
    epoch_changes: tuple[tuple[int, int], ...]
    rolled: bool = False


class Log(LogReader, LogRetention):
    """A partition log; build with :meth:`Log.open`."""

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def open(cls, dir: str | Path, config: LogConfig, *, recovery_point: int = 0,
             log_start_offset: int = 0, had_clean_shutdown: bool = False,
             clock_ms: Callable[[], int] = wall_clock_ms) -> Log:
        """Open (creating if missing) and, after an unclean shutdown, recover the log.

        ``recovery_point`` and ``log_start_offset`` come from the owner's checkpoints;
        what recovery did is in :attr:`recovery_report`.
        """
        directory = Path(dir)
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config, clock_ms)
        now = clock_ms()

        def open_segment(base: int) -> Segment:
            return Segment(directory, base, config, create=False, now_ms=now)

        segments, report = load_segments(directory, recovery_point=recovery_point,
                                         had_clean_shutdown=had_clean_shutdown,
                                         open_segment=open_segment)
        if not segments:
            segments = [Segment(directory, max(log_start_offset, 0), config, create=True,
                                now_ms=now)]
            log._dir_dirty = True
        log.segments = segments
        log._bases = [s.base_offset for s in segments]
        log.active.make_active()
        log._log_end_offset = log.active.next_offset
        log._log_start_offset = max(log_start_offset, segments[0].base_offset)
        log.recovery_report = report
        if had_clean_shutdown and report.segments_rescanned == 0:
            log._recovery_point = log._log_end_offset
        else:  # only a flush may advance it (Kafka's rule)
            log._recovery_point = min(max(recovery_point, 0), log._log_end_offset)
        if log._log_start_offset > log._log_end_offset:
            # the checkpoint is ahead of the data: everything below it is deleted anyway
            log.truncate_fully_and_start_at(log._log_start_offset)
        log._recovery_point = max(log._recovery_point, log._log_start_offset)
        log._roll_flush_offset = log._recovery_point
        return log

    # -- append ------------------------------------------------------------------------

    def append_as_leader(self, batches: bytes | bytearray | memoryview,
                         leader_epoch: int) -> LogAppendInfo:
        """Validate, assign offsets from the LEO, stamp ``leader_epoch``, append."""
        if self._closed:
            self._check_open()
        if not 0 <= leader_epoch <= _INT32_MAX:
            raise ValueError(f"leader_epoch must be in [0, 2**31 - 1], got {leader_epoch}")
        view = _byte_view(batches)
        infos = validate_append_batches(view, self.config.max_message_bytes,
                                        require_records=True)
        if not infos:
            return self._empty_append_info()
        first = offset = self._log_end_offset
        iovs: list[bytes | memoryview] = []
        metas: list[tuple[int, int, int, int]] = []
        pack = _PATCH.pack
        max_ts, off_max, records = NO_TIMESTAMP, first, 0
        for pos, size, _base, lod, ts, count, _epoch in infos:
            last = offset + lod
            iovs.append(pack(offset, size - 12, leader_epoch))
            iovs.append(view[pos + _PATCH_SIZE : pos + size])
            metas.append((offset, last, ts, size))
            if ts > max_ts:
                max_ts, off_max = ts, offset
            records += count
            offset = last + 1
        return self._append(iovs, len(view), metas, records, max_ts, off_max,
                            ((leader_epoch, first),))

    def require_keys(self, batches: bytes | bytearray | memoryview) -> None:
        """Compacted log: raise InvalidRecordError if a record of ``batches`` (a produce
        request's records) has no key; no-op otherwise.  Malformed batches are left to
        the append, which reports them precisely."""
        self._check_open()
        if not self.config.compact:
            return
        view = _byte_view(batches)
        try:
            infos = validate_append_batches(view, self.config.max_message_bytes,
                                            require_records=True)
        except MiniKafkaError:
            return
        for info in infos:
            pos = info[0]
            header = HEADER.unpack_from(view, pos)
            if header[5] & CONTROL_MASK:
                continue
            for span in walk_records(view, pos, header):  # type: ignore[arg-type]
                if span[6] is None:
                    topic, partition = self.topic_partition
                    raise InvalidRecordError(
                        f"compacted topic {topic}-{partition} cannot accept a record without "
                        f"a key (batch at position {pos}, offset delta {span[5] - header[0]})"
                    )

    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append replicated batches as they are (offsets and epochs kept)."""
        self._check_open()
        view = _byte_view(batches)
        infos = validate_append_batches(view, self.config.max_message_bytes,
                                        require_records=False)
        if not infos:
            return self._empty_append_info()
        expected = self._log_end_offset
        metas: list[tuple[int, int, int, int]] = []
        changes: list[tuple[int, int]] = []
        max_ts, off_max, records = NO_TIMESTAMP, infos[0][2], 0
        for pos, size, base, lod, ts, count, epoch in infos:
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
        return self._append([view], len(view), metas, records, max_ts, off_max, tuple(changes))

    def _append(self, iovs: list[bytes | memoryview], total: int,
                metas: list[tuple[int, int, int, int]], records: int, max_ts: int, off_max: int,
                epoch_changes: tuple[tuple[int, int], ...]) -> LogAppendInfo:
        first_offset, last_offset = metas[0][0], metas[-1][1]
        now = self._clock_ms()
        seg = self.segments[-1]
        rolled = False
        if (seg.size and self._should_roll(seg, total, last_offset, now)) or (
            not seg.size and not seg.relative_offset_fits(last_offset)
        ):
            self._roll(first_offset, now)
            seg = self.segments[-1]
            rolled = True
        seg.append(iovs, total, metas, now)
        self._log_end_offset = last_offset + 1
        self._unflushed_messages += records
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = now
        cfg = self.config
        if (cfg.flush_messages is not None and self._unflushed_messages >= cfg.flush_messages) or (
            cfg.flush_ms is not None and now - self._first_unflushed_ms >= cfg.flush_ms
        ):
            self.flush()
        return LogAppendInfo(first_offset, last_offset, max_ts, off_max, len(metas), records,
                             total, self._log_start_offset, epoch_changes, rolled)

    def _empty_append_info(self) -> LogAppendInfo:
        leo = self._log_end_offset
        return LogAppendInfo(leo, leo - 1, NO_TIMESTAMP, -1, 0, 0, 0, self._log_start_offset, ())

    # -- durability and lifecycle ------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync segments (and the directory if segments came or went); advance the
        recovery point to ``up_to_offset`` (default: the LEO)."""
        self._check_open()
        leo = self._log_end_offset
        target = leo if up_to_offset is None else min(up_to_offset, leo)
        for seg in self.segments:
            if seg.base_offset >= target and seg is not self.segments[0]:
                break
            seg.flush()
        if self._dir_dirty:
            fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._dir_dirty = False
        self._recovery_point = max(self._recovery_point, target)
        if target >= leo:
            self._unflushed_messages, self._first_unflushed_ms = 0, None

    def maybe_flush(self) -> None:
        """Run the flush policy: rolled segments, ``flush_messages``, ``flush_ms``."""
        self._check_open()
        if self._roll_flush_offset > self._recovery_point:
            self.flush(self._roll_flush_offset)
        cfg = self.config
        if self._first_unflushed_ms is None:
            return
        if (cfg.flush_messages is not None and self._unflushed_messages >= cfg.flush_messages) or (
            cfg.flush_ms is not None and self._clock_ms() - self._first_unflushed_ms >= cfg.flush_ms
        ):
            self.flush()

    def close(self) -> None:
        """Flush, write the final time-index entries, trim indexes, close descriptors."""
        if self._closed:
            return
        self.flush()
        for seg in self.segments:
            seg.close()
        self._closed = True

    def abandon(self) -> None:
        """Simulate a process crash: close descriptors without flushing or trimming."""
        if self._closed:
            return
        for seg in self.segments:
            seg.abandon()
        self._closed = True

    def delete(self) -> None:
        """Close and remove the whole directory."""
        if not self._closed:
            for seg in self.segments:
                seg.abandon()
            self._closed = True
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- invariants --------------------------------------------------------------------

    def check_invariants(self) -> None:
        """O(log bytes) structural check; raises :class:`LogInvariantError`."""
        self._check_open()
        check_log_invariants(self)

    def __repr__(self) -> str:
        return (f"Log({self.dir}, start={self._log_start_offset}, end={self._log_end_offset}, "
                f"segments={len(self.segments)})")


def _byte_view(data: bytes | bytearray | memoryview) -> memoryview:
    view = data if type(data) is memoryview else memoryview(data)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view
