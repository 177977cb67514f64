"""The read path of a partition log: whole batches as file regions, timestamp lookup.

:class:`LogReader` reads a :class:`~storage.log.segment_list.SegmentList` and never
changes it; :class:`storage.log.log.Log` owns one of each and calls the reader after
checking that the log is open.  The reader owns only a cache of segment file identities.

* :meth:`LogReader.read` returns whole batches only, as file regions (path, position,
  length, plus the segment file's identity ``(st_dev, st_ino)``) that another process
  opens and ``sendfile``s.  It never reads into or across a damaged range that recovery
  kept in place (:attr:`~storage.segment.Segment.damage`): a read stops before it, and
  one that starts inside it raises :class:`StorageError` (KAFKA_STORAGE_ERROR) instead
  of skipping to the next segment's batches.  A region may span the tail of one
  segment and the head of the next (one region per segment).  The identity lets that
  reader refuse a path that now names another file: a compaction swap renames a
  rewritten ``B.log`` over the old one, and a deleted-then-recreated topic reuses every
  path, so positions would point into unrelated bytes.  It costs one ``fstat`` per
  segment, cached per Segment object.
* :meth:`LogReader.offset_for_timestamp` is record-precise (decodes one batch) and
  returns ``(offset, timestamp)`` of the first record with timestamp >= the target.

Region on the wire (:meth:`FileRegion.wire`, taken by :mod:`broker.network`)::

    [path, position, length, device, inode]   identity known
    [path, position, length]                  identity unknown (not checked)

Concurrency: the reader methods are **not thread-safe** (the log's owner thread calls
them).  Other processes may read file regions concurrently: bytes below the LEO are
immutable while they exist, because appends only add bytes past them.  Truncation,
retention and compaction can invalidate a region that was handed out: the reader then
sees a short read, a missing file or a file with another identity and must treat it as a
retriable error (:meth:`FileRegion.read_bytes` raises :class:`StorageError`; the network
process closes the connection).

Costs: read O(log segments) bisect + O(log index) + a walk of at most
~``index_interval_bytes`` of headers per touched segment; offset_for_timestamp
O(segments) time-index lookups + one batch decode; batches from ``start``: one index
lookup, then O(bytes from the index entry at or below it), a header object per batch
returned (not per batch passed over).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from clients.protocol.errors import OffsetOutOfRangeError
from clients.records.batch import LOG_OVERHEAD, BatchHeader
from clients.records.record import decode_batch
from storage.errors import StorageError
from storage.log.segment_list import SegmentList
from storage.records.walk import PRODUCER_ID_FIELD, header_fields
from storage.segment import Segment

__all__ = ["FetchDataInfo", "FileRegion", "LogReader", "TimestampAndOffset"]


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


class TimestampAndOffset(NamedTuple):
    offset: int
    timestamp: int


class LogReader:
    """Reads of one log's segments; ``name`` (``topic-partition``) is for error messages."""

    def __init__(self, segments: SegmentList, name: str) -> None:
        self._segments = segments
        self._name = name
        self._file_ids: dict[Segment, tuple[int, int]] = {}  # (st_dev, st_ino) by segment

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchDataInfo:
        """Whole batches from the one containing ``start_offset``, below ``max_offset``."""
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        log = self._segments
        leo, log_start = log.log_end_offset, log.log_start_offset
        if not log_start <= start_offset <= leo:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{log_start}, {leo}] of {self._name}"
            )
        bound = leo if max_offset is None else min(max_offset, leo)
        regions: list[FileRegion] = []
        remaining = max_bytes
        segments = log.segments
        i = log.floor_index(start_offset)
        while start_offset < bound and i < len(segments):
            seg = segments[i]
            i += 1
            batch = seg.find_batch(start_offset)
            if batch is None:
                damage = seg.damage
                if damage is not None and damage[1] <= start_offset < seg.next_offset:
                    raise StorageError(
                        f"{self._name}: offsets [{damage[1]}, {seg.next_offset}) of segment "
                        f"{seg.base_offset} are damaged (kept by recovery until repaired); "
                        f"offset {start_offset} is not served")
                continue
            if batch.last_offset >= bound:
                break
            start, end = batch.position, seg.end_position(bound, batch.position)
            if end - start <= remaining:
                regions.append(FileRegion(str(seg.log_path), start, end - start,
                                          *self._file_id(seg)))
                remaining -= end - start
                if end < seg.size or remaining == 0 or seg.damage is not None:
                    break  # (never across a damaged range kept by recovery)
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
            segments = self._segments.segments
            if len(ids) >= 2 * len(segments) + 8:
                live = set(segments)
                ids = self._file_ids = {s: v for s, v in ids.items() if s in live}
            ids[seg] = found
        return found

    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampAndOffset | None:
        """``(offset, timestamp)`` of the first record (>= log start) with ts >= the target."""
        log_start = self._segments.log_start_offset
        for seg in self._segments.segments:
            batch = seg.find_timestamp(timestamp_ms)
            if batch is None:
                continue
            for b in seg.iter_batches(batch.position):
                if b.max_timestamp < timestamp_ms or b.last_offset < log_start:
                    continue
                for rec in decode_batch(seg.read_bytes(b.position, b.size), validate=False):
                    if rec.timestamp >= timestamp_ms and rec.offset >= log_start:
                        return TimestampAndOffset(rec.offset, rec.timestamp)
        return None

    def batches(self, start_offset: int | None = None, *, producers_only: bool = False
                ) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every stored batch whose last offset is >= ``start_offset`` (default: the log
        start offset), read when the iteration reaches it (the broker's registration
        report, the producer-state rebuild, tests, tools).  A damaged tail
        kept by recovery (``Segment.damage``) is skipped: only the batches before it.
        ``producers_only``: only the batches with a producer id (>= 0), the others
        passed over by their header fields (:mod:`storage.records.walk`; what the
        producer-state rebuild replays)."""
        start = self._segments.log_start_offset if start_offset is None else start_offset
        for seg in list(self._segments.segments):
            if seg.next_offset <= start or not seg.trusted_size:
                continue
            # from the offset index's entry at or below ``start`` (a batch boundary before
            # which every batch ends below it): a read of the log's last batch, as the
            # broker's registration report does, does not walk the whole segment
            first = seg.index.lookup(start)[1] if start > seg.base_offset else 0
            if first >= seg.trusted_size:
                continue
            data = seg.read_bytes(first, seg.trusted_size - first)
            for pos, fields in header_fields(data):
                if fields[0] + fields[6] >= start and (
                        not producers_only or fields[PRODUCER_ID_FIELD] >= 0):
                    yield BatchHeader(*fields), data[pos : pos + fields[1] + LOG_OVERHEAD]
