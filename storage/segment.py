"""One log segment: ``<base_offset:020d>.log`` + ``.index`` + ``.timeindex`` (+ ``.txnindex``).

The ``.log`` file is a plain concatenation of RecordBatch v2 (byte table in
:mod:`clients.records.batch`; run layout in :mod:`storage.records.scan`); the index
formats are in :mod:`storage.index.offset_index`, :mod:`storage.index.time_index` and
:mod:`storage.index.txn_index`.  ``base_offset`` is the first offset the segment may
hold; batch offsets inside are strictly increasing.

The segment owns its aborted-transaction index (:attr:`Segment.txn_index`): the file
appears with its first entry (the log's owner appends through
:meth:`storage.log.log.Log.append_aborted_txn`), is truncated with the segment
(:meth:`truncate_to`), flushed and deleted with it; what recovery does to it is in
:mod:`storage.log.txn_rebuild`.

The segment keeps one descriptor on its ``.log`` (``O_APPEND``; its logical size is
tracked in :attr:`size`) and appends with one ``os.writev`` per append (a request the log
splits across segments is one append in each).  A config change reaches a segment through
:meth:`Segment.update_config`.  Reads never go
through this object's descriptor for the bytes themselves: the log hands out
``(path, position, length)`` regions that other processes open and ``sendfile``.

Costs: append O(batches) Python + one ``writev``; :meth:`find_batch` O(1) for an offset in
the batch last appended through this object (the read of a follower or a reader at the
log end; forgotten by a cut or a rescan), else O(log entries) index search + a forward
header walk of at most ~``index_interval_bytes``; :meth:`recover`
O(bytes) (CRC) + O(batches); :meth:`load_clean` O(index entries) + a walk of the tail
after the last index entry.

Damage kept in place (:attr:`Segment.damage`): recovery that finds a bad batch in bytes
that were durable (below the recovery point) in a segment that is not the last one
keeps the file as it is instead of cutting the log there:
``damage = (position, first_bad_offset)`` says that the bytes from ``position`` on are
not trusted, and the segment still owns the offsets
up to the next segment's base (:attr:`next_offset`).  Every header walk
(:meth:`iter_batches`, so :meth:`find_batch`, reads and timestamp lookups) stops at
``position``; a truncation into the range cuts the file there.  The log's owner marks the
range damaged and repairs the segment in place (:mod:`storage.segment_repair`), which
swaps in a new Segment object without damage.

Damage marks (``<base_offset:020d>.damaged``): a segment in which damage was found (by
recovery, or by the owner's background CRC check: :meth:`write_damage_mark`) carries a
small file until the damage is gone, so that a restart before the repair finishes does
not forget it (a rebuilt index passes the clean-start check, and the scrubber's
persisted progress may be past the segment).  Format: one text line ``position
first_bad_offset`` (written atomically, fsync'd with its directory).  Recovery rescans a
marked segment with CRC whatever the shutdown was (:mod:`storage.log.recovery`).  The
mark goes when the cut removes the damage (:meth:`truncate_to` at or below its
position), with the segment (:meth:`delete`, a swap that replaces it), or when a rescan
finds the bytes intact; a removal lost in a crash costs one rescan at the next start.

Not thread-safe: owned by one log's :class:`~storage.log.segment_list.SegmentList` (one
event-loop thread).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from clients.records.batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC
from storage.config import LogConfig
from storage.errors import CorruptIndexError, StorageError
from storage.file_io import atomic_write_text, write_all
from storage.index.offset_index import OffsetIndex
from storage.index.time_index import NO_TIMESTAMP, TimeIndex
from storage.index.txn_index import TxnIndex
from storage.records.scan import INT32_MAX, SegmentScan, scan_segment

_WALK_CHUNK = 16 * 1024
_I = TypeVar("_I", OffsetIndex, TimeIndex)
_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)


def segment_file(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / f"{base_offset:020d}{suffix}"


DAMAGE_MARK_SUFFIX = ".damaged"


def _walk_to(seg: Segment, offset: int, pos: int) -> BatchPosition | None:
    """:meth:`Segment.find_batch`'s walk from ``pos``: the walk of
    :meth:`Segment.iter_batches` written out, as it is the hot part of every read (one
    per fetch, one more where the read ends), and a generator step and a BatchPosition
    per batch passed over cost about as much as the header parse."""
    end = seg.trusted_size
    buf, buf_start = b"", pos
    unpack = HEADER.unpack_from
    while pos < end:
        off = pos - buf_start
        if off + HEADER_SIZE > len(buf):
            buf, buf_start, off = _header_chunk(seg, pos), pos, 0
        base, length, _e, magic, _c, _a, lod, _bt, max_ts, *_ = unpack(buf, off)
        if magic != MAGIC or length < HEADER_SIZE - LOG_OVERHEAD:
            raise _no_header(seg, pos)
        # the base offset too: a bad batch's last offset delta (under its CRC, which
        # this walk does not check) may be garbage; never step over it
        if base + lod >= offset or base >= offset:
            return BatchPosition(pos, base, base + lod, length + LOG_OVERHEAD, max_ts)
        pos += length + LOG_OVERHEAD
    return None


def _header_chunk(seg: Segment, pos: int) -> bytes:
    """The next chunk of ``seg``'s file from ``pos`` for a header walk (a header at least)."""
    buf = os.pread(seg.fd, _WALK_CHUNK, pos)
    if len(buf) < HEADER_SIZE:
        raise StorageError(f"{seg.log_path}: torn batch header at position {pos}")
    return buf


def _no_header(seg: Segment, pos: int) -> StorageError:
    return StorageError(f"{seg.log_path}: no batch header at position {pos}")


class BatchPosition(NamedTuple):
    position: int
    base_offset: int
    last_offset: int
    size: int
    max_timestamp: int


class Segment:
    def __init__(self, directory: Path, base_offset: int, config: LogConfig, *,
                 create: bool, now_ms: int) -> None:
        self.base_offset = base_offset
        self.config = config
        self.log_path = segment_file(directory, base_offset, ".log")
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | (os.O_CREAT | os.O_TRUNC if create else 0)
        self.fd = os.open(self.log_path, flags, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.bytes_since_last_index = 0
        self.rolling_ms: int | None = None  # first append time (segment_ms roll)
        self.dirty = False
        # (position, first bad offset): bytes from position on are damaged (see above)
        self.damage: tuple[int, int] | None = None
        # the position in this segment's damage mark file (None: no mark; see above)
        self.damage_mark: int | None = None
        self.damage_mark_path = segment_file(directory, base_offset, DAMAGE_MARK_SUFFIX)
        self._tail: BatchPosition | None = None  # last batch appended (None: cut, rescan)
        self._opened_ms = now_ms
        self._index_interval_bytes = config.index_interval_bytes
        index_path = segment_file(directory, base_offset, ".index")
        time_path = segment_file(directory, base_offset, ".timeindex")
        txn_path = segment_file(directory, base_offset, ".txnindex")
        if create:
            for path in (index_path, time_path, txn_path, self.damage_mark_path):
                path.unlink(missing_ok=True)
        self.indexes_missing = not (index_path.exists() and time_path.exists())
        self.index = self._open_index(OffsetIndex, index_path)
        self.time_index = self._open_index(TimeIndex, time_path)
        self.txn_index = TxnIndex(txn_path, base_offset)

    def update_config(self, config: LogConfig) -> None:
        """Use ``config`` from now on: later appends index every
        ``index_interval_bytes``, and an active segment's indexes take
        ``segment_index_bytes`` (:meth:`MappedIndex.resize`); what is written stays."""
        self.config = config
        self._index_interval_bytes = config.index_interval_bytes
        self.index.resize(config.segment_index_bytes)
        self.time_index.resize(config.segment_index_bytes)

    def _open_index(self, cls: type[_I], path: Path) -> _I:
        try:
            return cls(path, self.base_offset, self.config.segment_index_bytes)
        except CorruptIndexError:
            path.unlink(missing_ok=True)
            self.indexes_missing = True
            return cls(path, self.base_offset, self.config.segment_index_bytes)

    # -- append ------------------------------------------------------------------------

    def append(self, iovs: Sequence[bytes | memoryview], total: int,
               batches: Sequence[tuple[int, int, int, int]], now_ms: int) -> None:
        """Write ``iovs`` (``total`` bytes) and index ``batches`` = (base, last, max_ts, size).

        All-or-nothing: a failed write truncates the file back and raises StorageError.
        """
        start = self.size
        try:
            self._write_all(iovs, total)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)
            raise StorageError(f"append to {self.log_path} failed: {exc}") from exc
        if self.rolling_ms is None:
            self.rolling_ms = now_ms
        pos = start
        interval = self._index_interval_bytes
        index = self.index
        since, max_ts, off_max = (self.bytes_since_last_index, self.max_timestamp,
                                  self.offset_of_max_timestamp)
        for base, _last, ts, size in batches:
            if ts > max_ts:
                max_ts, off_max = ts, base
            if since >= interval or not index.entries:
                if not index.is_full:
                    index.append(base, pos)
                if not self.time_index.is_full:
                    self.time_index.maybe_append(max_ts, off_max)
                since = 0
            since += size
            pos += size
        self.bytes_since_last_index, self.max_timestamp = since, max_ts
        self.offset_of_max_timestamp = off_max
        self.size = pos
        if batches:
            base, last, ts, size = batches[-1]
            self.next_offset = last + 1
            self._tail = BatchPosition(pos - size, base, last, size, ts)
        self.dirty = True

    def _write_all(self, iovs: Sequence[bytes | memoryview], total: int) -> None:
        written = os.writev(self.fd, iovs) if len(iovs) <= _IOV_MAX else 0
        if written == total:
            return
        # rare: a short write, or more iovecs than IOV_MAX -> write the rest from one copy
        write_all(self.fd, memoryview(b"".join(bytes(b) for b in iovs))[written:])

    # -- reading headers ---------------------------------------------------------------

    @property
    def trusted_size(self) -> int:
        """Where the batches that can be read end: the damage's position, else the size."""
        return self.size if self.damage is None else self.damage[0]

    def keep_damaged_tail(self, position: int, first_bad_offset: int,
                          end_offset: int) -> None:
        """Recovery: the bytes from ``position`` (offset ``first_bad_offset``) on are
        damaged, but this segment stays whole and owns the offsets up to ``end_offset``
        (the next segment's base) until a repair rewrites it (module docstring)."""
        self.damage, self._tail = (position, first_bad_offset), None
        self.next_offset = end_offset

    def write_damage_mark(self, position: int, first_bad_offset: int) -> None:
        """Record on disk that the bytes from ``position`` (offset ``first_bad_offset``)
        on are damaged; a mark at or below ``position`` already there is kept."""
        if self.damage_mark is not None and self.damage_mark <= position:
            return
        atomic_write_text(self.damage_mark_path, f"{position} {first_bad_offset}\n")
        self.damage_mark = position

    def clear_damage_mark(self) -> None:
        """Remove the damage mark (not fsync'd: a mark that comes back after a crash
        costs a rescan that removes it again)."""
        self.damage_mark = None
        self.damage_mark_path.unlink(missing_ok=True)

    def iter_batches(self, start: int, end: int | None = None) -> Iterator[BatchPosition]:
        """Walk batch headers from ``start`` (a batch boundary) up to ``end`` (default:
        :attr:`trusted_size`; no CRC)."""
        end = self.trusted_size if end is None else min(end, self.trusted_size)
        buf, buf_start = b"", start
        pos = start
        unpack = HEADER.unpack_from
        while pos < end:
            off = pos - buf_start
            if off + HEADER_SIZE > len(buf):
                buf, buf_start, off = _header_chunk(self, pos), pos, 0
            base, length, _e, magic, _c, _a, lod, _bt, max_ts, *_ = unpack(buf, off)
            if magic != MAGIC or length < HEADER_SIZE - LOG_OVERHEAD:
                raise _no_header(self, pos)
            size = length + LOG_OVERHEAD
            yield BatchPosition(pos, base, base + lod, size, max_ts)
            pos += size

    def find_batch(self, offset: int, from_position: int = 0) -> BatchPosition | None:
        """The first batch whose last (or base) offset is >= ``offset`` (None if none).
        ``from_position``: a batch boundary known to lie at or before that batch (the
        walk starts at it or at the offset index's entry, whichever is later)."""
        if offset >= self.next_offset:
            return None
        if (tail := self._tail) is not None and tail.base_offset <= offset <= tail.last_offset:
            return tail  # the batch last appended (a follower's or tailing reader's read)
        _, indexed = self.index.lookup(offset)
        return _walk_to(self, offset, indexed if indexed > from_position else from_position)

    def end_position(self, max_offset: int, from_position: int = 0) -> int:
        """Position of the first batch with last offset >= ``max_offset`` (else where the
        trusted batches end); ``from_position`` as in :meth:`find_batch`."""
        batch = self.find_batch(max_offset, from_position)
        return self.trusted_size if batch is None else batch.position

    def boundary_at_or_before(self, limit: int, start: int) -> int:
        """The largest batch end <= ``limit``, walking from ``start`` (a boundary <= limit)."""
        _, indexed = self.index.lookup_position(limit)
        cut = max(indexed, start)
        for batch in self.iter_batches(cut):
            if batch.position + batch.size > limit:
                break
            cut = batch.position + batch.size
        return cut

    def find_timestamp(self, timestamp_ms: int) -> BatchPosition | None:
        """The first batch whose max timestamp is >= ``timestamp_ms``."""
        if timestamp_ms > self.max_timestamp:
            return None
        entry = self.time_index.lookup(timestamp_ms)
        start = 0 if entry is None else self.index.lookup(entry[1])[1]
        for batch in self.iter_batches(start):
            if batch.max_timestamp >= timestamp_ms:
                return batch
        return None

    def read_bytes(self, position: int, length: int) -> bytes:
        data = os.pread(self.fd, length, position)
        if len(data) != length:
            raise StorageError(f"{self.log_path}: short read at {position} ({len(data)}/{length})")
        return data

    @property
    def largest_timestamp(self) -> int:
        """Max batch timestamp, or the file's mtime when no batch carries one."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    # -- loading and recovery ----------------------------------------------------------

    def load_clean(self) -> None:
        """Trust-but-verify load after a clean shutdown; CorruptIndexError -> rebuild."""
        if self.indexes_missing:
            raise CorruptIndexError(f"{self.log_path}: index files missing")
        self.index.sanity_check(self.size)
        start = 0
        if self.index.entries:
            start = self.index.last_position
            head = os.pread(self.fd, HEADER_SIZE, start)
            if len(head) < HEADER_SIZE:
                raise CorruptIndexError(f"{self.index.path}: last entry points past the log")
            base, _l, _e, magic, *_ = HEADER.unpack_from(head)
            if magic != MAGIC or base != self.index.last_offset:
                raise CorruptIndexError(
                    f"{self.index.path}: last entry ({self.index.last_offset}, {start}) does "
                    f"not point at that batch (found base offset {base}, magic {magic})"
                )
        self.max_timestamp = self.time_index.last_timestamp
        self.offset_of_max_timestamp = self.time_index.last_offset
        next_offset, since = self.base_offset, 0
        try:
            for batch in self.iter_batches(start):
                if batch.max_timestamp > self.max_timestamp:
                    self.max_timestamp = batch.max_timestamp
                    self.offset_of_max_timestamp = batch.base_offset
                next_offset = batch.last_offset + 1
                since = batch.position + batch.size - start
                if batch.position + batch.size > self.size:
                    raise CorruptIndexError(f"{self.log_path}: torn batch at {batch.position}")
        except StorageError as exc:
            raise CorruptIndexError(str(exc)) from None
        if self.index.entries:
            self.next_offset, self.bytes_since_last_index = next_offset, since
        self.time_index.sanity_check(self.next_offset)
        self._init_rolling()

    def recover(self, min_offset: int, *, strict_from: int | None = None,
                epochs: Sequence[tuple[int, int]] = (),
                next_segment_offset: int | None = None,
                keep_damaged_below: int = -1,
                before_cut: Callable[[], None] | None = None) -> SegmentScan:
        """Rescan with CRC, truncate at the first bad batch, rebuild both indexes (the
        keyword arguments: the header checks of
        :func:`~storage.records.scan.scan_segment`).  A bad batch that starts below
        ``keep_damaged_below`` in a segment that is not the last (``next_segment_offset``
        given) does not truncate the file: the segment keeps its bytes and its
        :attr:`damage` (see the module docstring).  ``before_cut`` runs just before the
        file is truncated (the log's recovery records the cut durably first)."""
        scan = self._scan(min_offset, strict_from=strict_from, epochs=epochs,
                          next_segment_offset=next_segment_offset)
        self.damage = self._tail = None
        keep = (scan.valid_bytes < self.size and next_segment_offset is not None
                and scan.next_offset < keep_damaged_below)
        if scan.valid_bytes < self.size and not keep:
            if before_cut is not None:
                before_cut()
            os.ftruncate(self.fd, scan.valid_bytes)
            self.size = scan.valid_bytes
            self.dirty = True
        self.index.replace_entries(scan.offset_entries)
        self.time_index.replace_entries(scan.time_entries)
        self.indexes_missing = False
        self.next_offset = scan.next_offset
        self.max_timestamp = scan.max_timestamp
        self.offset_of_max_timestamp = scan.offset_of_max_timestamp
        self.bytes_since_last_index = scan.bytes_since_last_index
        if keep:  # before any walk below: it must stop at the damage
            assert next_segment_offset is not None
            self.keep_damaged_tail(scan.valid_bytes, scan.next_offset, next_segment_offset)
        self._init_rolling()
        return scan

    def _scan(self, min_offset: int, *, strict_from: int | None = None,
              epochs: Sequence[tuple[int, int]] = (),
              next_segment_offset: int | None = None) -> SegmentScan:
        kwargs: dict[str, Any] = dict(
            min_offset=max(min_offset, self.base_offset),
            index_interval_bytes=self.config.index_interval_bytes,
            max_offset_entries=self.index.max_entries,
            max_time_entries=self.time_index.max_entries,
            strict_from=strict_from, epochs=epochs, next_segment_offset=next_segment_offset,
        )
        if self.size == 0:
            return scan_segment(b"", self.base_offset, **kwargs)
        mm = mmap.mmap(self.fd, self.size, access=mmap.ACCESS_READ)
        try:
            if hasattr(mm, "madvise"):
                mm.madvise(mmap.MADV_SEQUENTIAL)
            return scan_segment(mm, self.base_offset, **kwargs)
        finally:
            mm.close()

    def _init_rolling(self) -> None:
        """After a load the first append time is unknown: use the first batch's timestamp."""
        self.rolling_ms = None
        if self.size:
            first = next(self.iter_batches(0), None)
            ts = first.max_timestamp if first is not None else NO_TIMESTAMP
            self.rolling_ms = ts if ts >= 0 else self._opened_ms

    # -- truncation --------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int | None:
        """Drop every batch whose last offset is >= ``offset``; return the first dropped
        batch's base offset (None if nothing was dropped).  The segment must be active.
        An offset in a damaged tail cuts the file where the damage starts."""
        batch = self.find_batch(offset)
        if batch is not None:
            position, first_dropped = batch.position, batch.base_offset
        elif self.damage is not None and offset < self.next_offset:
            position, first_dropped = self.damage
        else:
            return None
        self.damage = self._tail = None  # the cut is at or below where it started
        if self.damage_mark is not None and position <= self.damage_mark:
            self.clear_damage_mark()
        os.ftruncate(self.fd, position)
        self.size = position
        self.dirty = True
        self.index.truncate_to_offset(first_dropped)
        self.time_index.truncate_to_offset(first_dropped)
        self.txn_index.truncate_to(first_dropped)
        # recompute the running state from the last surviving index entry
        self.max_timestamp = self.time_index.last_timestamp
        self.offset_of_max_timestamp = self.time_index.last_offset
        start = self.index.last_position if self.index.entries else 0
        self.next_offset, self.bytes_since_last_index = self.base_offset, 0
        for b in self.iter_batches(start):
            if b.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = b.max_timestamp, b.base_offset
            self.next_offset = b.last_offset + 1
            self.bytes_since_last_index = b.position + b.size - start
        if self.size == 0:
            self.rolling_ms = None
        return first_dropped

    # -- lifecycle ---------------------------------------------------------------------

    def make_active(self) -> None:
        self.index.make_active()
        self.time_index.make_active()

    def make_inactive(self) -> None:
        """On roll: record the final largest timestamp and trim both indexes."""
        self._final_time_entry()
        self.index.trim()
        self.time_index.trim()

    def _final_time_entry(self) -> None:
        ts, off = self.max_timestamp, self.offset_of_max_timestamp
        if ts > self.time_index.last_timestamp and self.time_index.entries < (
            self.time_index.max_entries
        ):
            self.time_index.maybe_append(ts, off)

    def flush(self) -> None:
        if self.dirty:
            os.fsync(self.fd)
            self.dirty = False
        self.index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self.fd < 0:
            return
        if self.index.is_writable:
            self._final_time_entry()
        self.index.close()
        self.time_index.close()
        self.txn_index.close()
        os.close(self.fd)
        self.fd = -1

    def abandon(self) -> None:
        """Close without flushing or trimming anything (simulated process crash)."""
        if self.fd < 0:
            return
        self.index.abandon()
        self.time_index.abandon()
        self.txn_index.close()  # what was written stays, fsync'd or not (a crash)
        os.close(self.fd)
        self.fd = -1

    def delete(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self.log_path.unlink(missing_ok=True)
        self.clear_damage_mark()

    def relative_offset_fits(self, last_offset: int) -> bool:
        return last_offset - self.base_offset <= INT32_MAX

    def __repr__(self) -> str:
        return (f"Segment(base={self.base_offset}, size={self.size}, "
                f"next_offset={self.next_offset})")
