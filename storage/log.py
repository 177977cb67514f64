"""One partition's log: an ordered list of segments in ``<data_dir>/<topic>-<partition>/``.

Directory layout (formats: :mod:`storage.segment`, :mod:`storage.offset_index`,
:mod:`storage.time_index`; batches: :mod:`clients.records`)::

    00000000000000000000.log        batches with offsets [0, 1200)
    00000000000000000000.index      sparse offset -> position (trimmed: inactive)
    00000000000000000000.timeindex  sparse max timestamp -> offset (trimmed)
    00000000000000001200.log        active segment (appends go here)
    00000000000000001200.index      preallocated to segment_index_bytes, mmapped
    00000000000000001200.timeindex  preallocated to segment_index_bytes, mmapped

Offsets: ``log_start_offset`` <= every readable offset < ``log_end_offset`` (LEO, the next
offset to assign).  Everything below ``recovery_point`` has been fsync'd.

Semantics worth knowing (Kafka's unless stated):

* Appends are all-or-nothing per request: every batch is validated first (length, magic,
  CRC-32C, counts, compression, ``max_message_bytes``), then the whole request goes to the
  active segment with one ``writev`` (leader appends patch only the 16 bytes of
  base_offset/batch_length/leader_epoch per batch, the records are not copied).  A roll
  happens before a request that would not fit; a request is never split across segments.
* ``read`` returns whole batches only, as file regions (path, position, length, plus the
  segment file's identity ``(st_dev, st_ino)``) that another process opens and
  ``sendfile``s.  A region may span the tail of one segment and the head of the next
  (one region per segment).  The identity lets that reader refuse a path that now names
  another file: a compaction swap renames a rewritten ``B.log`` over the old one, and a
  deleted-then-recreated topic reuses every path, so positions would point into
  unrelated bytes.  It costs one ``fstat`` per segment, cached per Segment object.
* ``truncate_to(offset)`` drops every batch whose last offset is >= ``offset`` and sets the
  LEO to ``min(offset, first dropped base offset)`` -- i.e. to the batch boundary at or
  below ``offset`` (Kafka would set LEO = offset, leaving a gap; we do not).
* ``offset_for_timestamp`` is record-precise (decodes one batch) and returns
  ``(offset, timestamp)`` of the first record with timestamp >= the target.
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
file regions concurrently: bytes below the LEO are immutable while they exist, because
appends only add bytes past them.  Truncation, retention and compaction can invalidate a
region that was handed out: the reader then sees a short read, a missing file or a file
with another identity and must treat it as a retriable error (``FileRegion.read_bytes``
raises :class:`StorageError`; the network process closes the connection).

Costs: append O(batches + bytes for the CRC); read O(log segments) bisect + O(log index)
+ a walk of at most ~``index_interval_bytes`` of headers per touched segment; open after a
clean shutdown O(index bytes) + a tail walk per segment; unclean open O(bytes after the
recovery point); retention O(segments).
"""

from __future__ import annotations

import bisect
import os
import re
import shutil
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from clients.errors import InvalidRecordError, MiniKafkaError
from clients.records import CONTROL_MASK, BatchHeader, decode_batch, iter_batches
from storage.cleaner_records import walk_records
from storage.config import LogConfig
from storage.errors import OffsetOutOfRangeError, StorageError
from storage.recovery import (
    HEADER,
    RecoveryReport,
    check_log_invariants,
    load_segments,
    validate_append_batches,
)
from storage.segment import Segment
from storage.time_index import NO_TIMESTAMP

__all__ = [
    "FetchDataInfo",
    "FileRegion",
    "Log",
    "LogAppendInfo",
    "RecoveryReport",
    "TimestampAndOffset",
]

# base_offset, batch_length, partition_leader_epoch: the bytes a leader append rewrites
_PATCH = struct.Struct(">qii")
_PATCH_SIZE = _PATCH.size
_INT32_MAX = 2**31 - 1
_TOPIC_PARTITION = re.compile(r"^(.+)-(\d+)$")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``length`` bytes at ``position`` of the file at ``path`` (whole batches).

    ``device``/``inode`` are the ``st_dev``/``st_ino`` of the segment file the region was
    read from (-1: unknown, not checked).  A reader must not send the region from a file
    with another identity (the path was reused: compaction swap, topic re-created).
    """

    path: str
    position: int
    length: int
    device: int = -1
    inode: int = -1

    def wire(self) -> list[str | int]:
        """The region as the network process takes it: ``[path, position, length,
        device, inode]``, or ``[path, position, length]`` when the identity is unknown
        (see :mod:`broker.network`)."""
        if self.inode < 0:
            return [self.path, self.position, self.length]
        return [self.path, self.position, self.length, self.device, self.inode]

    def read_bytes(self) -> bytes:
        """Open the file and read the region; a vanished/short/replaced file ->
        StorageError."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise StorageError(f"{self.path} is gone (deleted or truncated)") from None
        try:
            if self.inode >= 0:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != (self.device, self.inode):
                    raise StorageError(f"{self.path} was replaced since it was read "
                                       "(compaction swap or re-created topic)")
            data = os.pread(fd, self.length, self.position)
        finally:
            os.close(fd)
        if len(data) != self.length:
            raise StorageError(
                f"{self.path}: short read at {self.position} ({len(data)}/{self.length} bytes)"
            )
        return data


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    start_offset: int
    regions: tuple[FileRegion, ...]
    size_in_bytes: int

    def read_bytes(self) -> bytes:
        return b"".join(r.read_bytes() for r in self.regions)


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


class TimestampAndOffset(NamedTuple):
    offset: int
    timestamp: int


class Log:
    """A partition log; build with :meth:`Log.open`."""

    def __init__(self, directory: Path, config: LogConfig, clock_ms: Callable[[], int]) -> None:
        self.dir = directory
        self.config = config
        self._clock_ms = clock_ms
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._recovery_point = 0
        self._unflushed_messages = 0
        self._first_unflushed_ms: int | None = None
        self._roll_flush_offset = 0  # a roll asks maybe_flush() to fsync below this
        self._dir_dirty = False
        self._closed = False
        self._file_ids: dict[Segment, tuple[int, int]] = {}  # (st_dev, st_ino) by segment
        self.recovery_report = RecoveryReport(had_clean_shutdown=True)
        self.topic_partition = _parse_topic_partition(directory.name)

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

    # -- state -------------------------------------------------------------------------

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
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.dir} is closed")

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

    # -- read --------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchDataInfo:
        """Whole batches from the one containing ``start_offset``, below ``max_offset``."""
        self._check_open()
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        leo = self._log_end_offset
        if not self._log_start_offset <= start_offset <= leo:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self._log_start_offset}, {leo}] "
                f"of {self.topic_partition[0]}-{self.topic_partition[1]}"
            )
        bound = leo if max_offset is None else min(max_offset, leo)
        regions: list[FileRegion] = []
        remaining = max_bytes
        i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        while start_offset < bound and i < len(self.segments):
            seg = self.segments[i]
            i += 1
            batch = seg.find_batch(start_offset)
            if batch is None:
                continue
            if batch.last_offset >= bound:
                break
            start, end = batch.position, seg.end_position(bound)
            if end - start <= remaining:
                regions.append(FileRegion(str(seg.log_path), start, end - start,
                                          *self._file_id(seg)))
                remaining -= end - start
                if end < seg.size or remaining == 0:
                    break
                continue
            cut = seg.boundary_at_or_before(start + remaining, start)
            if cut == start and not regions and min_one_batch:
                cut = start + batch.size
            if cut > start:
                regions.append(FileRegion(str(seg.log_path), start, cut - start,
                                          *self._file_id(seg)))
            break
        return FetchDataInfo(start_offset, tuple(regions), sum(r.length for r in regions))

    def _file_id(self, seg: Segment) -> tuple[int, int]:
        """``(st_dev, st_ino)`` of ``seg``'s open ``.log``: one fstat per Segment object
        (a swapped-in segment is a new object); entries of segments gone are pruned."""
        ids = self._file_ids
        found = ids.get(seg)
        if found is None:
            st = os.fstat(seg.fd)
            found = (st.st_dev, st.st_ino)
            if len(ids) >= 2 * len(self.segments) + 8:
                live = set(self.segments)
                ids = self._file_ids = {s: v for s, v in ids.items() if s in live}
            ids[seg] = found
        return found

    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampAndOffset | None:
        """``(offset, timestamp)`` of the first record (>= log start) with ts >= the target."""
        self._check_open()
        for seg in self.segments:
            batch = seg.find_timestamp(timestamp_ms)
            if batch is None:
                continue
            for b in seg.iter_batches(batch.position):
                if b.max_timestamp < timestamp_ms or b.last_offset < self._log_start_offset:
                    continue
                for rec in decode_batch(seg.read_bytes(b.position, b.size), validate=False):
                    if rec.timestamp >= timestamp_ms and rec.offset >= self._log_start_offset:
                        return TimestampAndOffset(rec.offset, rec.timestamp)
        return None

    def batches(self, start_offset: int | None = None) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every stored batch whose last offset is >= ``start_offset`` (tests, tools)."""
        self._check_open()
        start = self._log_start_offset if start_offset is None else start_offset
        for seg in list(self.segments):
            if seg.next_offset <= start or not seg.size:
                continue
            data = seg.read_bytes(0, seg.size)
            for pos, header in iter_batches(data, validate=False):
                if header.last_offset >= start:
                    yield header, data[pos : pos + header.size_in_bytes]

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


def _parse_topic_partition(name: str) -> tuple[str, int]:
    """``"<topic>-<partition>"`` -> (topic, partition); (name, -1) if it does not parse."""
    match = _TOPIC_PARTITION.match(name)
    if match is None:
        return name, -1
    return match.group(1), int(match.group(2))
