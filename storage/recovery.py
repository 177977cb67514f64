"""Walking runs of record batches (append validation, segment rescans) and log recovery.

Both paths share one rule set so that whatever the log accepts on append is exactly what a
recovery scan later accepts.  A run of batches is plain concatenation of RecordBatch v2
(see :mod:`clients.records` for the 61-byte header table); nothing else is stored in a
``.log`` file::

    position   size                 content
    0          12 + batch_length_0  batch 0 (base_offset, batch_length, ... records)
    p1         12 + batch_length_1  batch 1, base_offset >= batch 0's last offset + 1
    ...

:func:`validate_append_batches` checks every batch of a produce/replication request up
front (length, magic, CRC-32C, counts, compression, size limit) so the append is
all-or-nothing.  :func:`scan_segment` rescans a segment's bytes (an mmap of the file),
stops at the first torn or invalid batch, and rebuilds the offset and time index entries
with the same index-point rule the append path uses (first batch, then every
``index_interval_bytes``; full indexes skip entries; one final time entry for the
largest timestamp).

:func:`load_segments` is the open-time procedure (clean sanity checks or unclean rescan,
truncation of a torn/corrupt tail, the :class:`RecoveryReport`).

Costs: O(bytes) for the CRC (hardware CRC-32C) plus O(batches) of Python for the header
walk; one ``struct.unpack_from`` per batch.  The scan functions are pure (thread-safe);
:func:`load_segments` mutates the files of one directory and must be its only user.
"""

from __future__ import annotations

import bisect
import mmap
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from crc32c import crc32c

from clients.errors import CorruptRecordError, InvalidRecordError, MessageTooLargeError
from clients.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    validate_batch,
)
from storage.errors import CorruptIndexError, LogInvariantError
from storage.offset_index import OffsetIndex
from storage.time_index import NO_TIMESTAMP, TimeIndex

if TYPE_CHECKING:
    from storage.log import Log
    from storage.segment import Segment

INT32_MAX = 2**31 - 1
# base_offset, batch_length, partition_leader_epoch, magic, crc, attributes,
# last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
# base_sequence, record_count
HEADER = struct.Struct(">qiibIhiqqqhii")
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD


# What the log needs to know about one batch of a request, as a plain tuple (cheapest
# to build on the append path): (position in the request, size, base_offset,
# last_offset_delta, max_timestamp, record_count, partition_leader_epoch).
BatchInfo = tuple[int, int, int, int, int, int, int]


def _bad(buf: memoryview, pos: int) -> CorruptRecordError | InvalidRecordError:
    """The precise error for an invalid batch (delegates to the codec's validator)."""
    try:
        validate_batch(buf, pos)
    except (CorruptRecordError, InvalidRecordError) as exc:
        return exc
    return CorruptRecordError(f"batch at position {pos} is invalid")


def validate_append_batches(
    buf: memoryview, max_message_bytes: int, *, require_records: bool
) -> list[BatchInfo]:
    """Validate every batch of a request; raise the precise error for the first bad one.

    ``require_records`` (leader appends) also demands ``record_count >= 1`` and
    ``last_offset_delta == record_count - 1`` (what producers send).
    """
    out: list[BatchInfo] = []
    pos, total = 0, len(buf)
    unpack = HEADER.unpack_from
    while pos < total:
        if total - pos < HEADER_SIZE:
            raise _bad(buf, pos)
        (_base, length, epoch, magic, crc, attrs, lod, _bts, max_ts, _pid, _pep, _seq,
         count) = unpack(buf, pos)
        size = length + LOG_OVERHEAD
        end = pos + size
        if magic != MAGIC or length < MIN_BATCH_LENGTH or end > total:
            raise _bad(buf, pos)
        if size > max_message_bytes:
            raise MessageTooLargeError(
                f"batch at position {pos} is {size} bytes, above max_message_bytes "
                f"{max_message_bytes}"
            )
        if (crc32c(buf[pos + ATTRIBUTES_OFFSET : end]) != crc or count < 0 or lod < 0
                or (count and lod < count - 1) or attrs & COMPRESSION_MASK):
            raise _bad(buf, pos)
        if require_records and (count == 0 or lod != count - 1):
            raise InvalidRecordError(
                f"batch at position {pos}: record_count {count} and last_offset_delta {lod} "
                "do not describe consecutive records"
            )
        out.append((pos, size, _base, lod, max_ts, count, epoch))
        pos = end
    return out


@dataclass
class SegmentScan:
    """Result of rescanning one segment's bytes."""

    valid_bytes: int
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_last_index: int
    batches: int
    offset_entries: np.ndarray
    time_entries: np.ndarray
    error: str | None = None  # why the scan stopped before the end of the buffer


@dataclass
class RecoveryReport:
    """What :meth:`storage.log.Log.open` did to make the log consistent."""

    had_clean_shutdown: bool
    segments_loaded: int = 0
    segments_rescanned: int = 0
    bytes_rescanned: int = 0
    indexes_rebuilt: int = 0  # segments whose .index/.timeindex were rebuilt
    truncated_bytes: int = 0
    truncated_at_offset: int | None = None  # log end offset after a truncation
    segments_deleted: int = 0  # whole segments dropped after a corrupt point
    problems: list[str] = field(default_factory=list)


def scan_segment(
    buf: bytes | memoryview | mmap.mmap,
    base_offset: int,
    *,
    min_offset: int,
    index_interval_bytes: int,
    max_offset_entries: int,
    max_time_entries: int,
) -> SegmentScan:
    """Validate batches from position 0; stop at the first torn/invalid/out-of-order one."""
    view = memoryview(buf)
    total = len(view)
    unpack = HEADER.unpack_from
    off_rel: list[int] = []
    off_pos: list[int] = []
    ts_val: list[int] = []
    ts_rel: list[int] = []
    pos = 0
    expected = min_offset
    max_ts, off_of_max = NO_TIMESTAMP, -1
    since = 0
    batches = 0
    error: str | None = None
    time_room = max_time_entries - 1  # one slot reserved for the final entry
    last_ts = NO_TIMESTAMP
    try:
        while pos < total:
            if total - pos < HEADER_SIZE:
                error = f"torn batch header at position {pos} ({total - pos} bytes)"
                break
            (base, length, _epoch, magic, crc, attrs, lod, _bts, batch_max_ts, _pid, _pep,
             _seq, count) = unpack(view, pos)
            end = pos + length + LOG_OVERHEAD
            if magic != MAGIC or length < MIN_BATCH_LENGTH:
                error = f"invalid batch header at position {pos} (magic {magic}, length {length})"
                break
            if end > total:
                error = f"torn batch at position {pos}: needs {end - pos} bytes, has {total - pos}"
                break
            if crc32c(view[pos + ATTRIBUTES_OFFSET : end]) != crc:
                error = f"CRC-32C mismatch in batch at position {pos}"
                break
            if (count < 0 or lod < 0 or (count and lod < count - 1)
                    or attrs & COMPRESSION_MASK):
                error = f"invalid counts or attributes in batch at position {pos}"
                break
            if base < expected or base + lod - base_offset > INT32_MAX:
                error = f"batch at position {pos} has base offset {base}, expected >= {expected}"
                break
            if batch_max_ts > max_ts:
                max_ts, off_of_max = batch_max_ts, base
            if not off_rel or since >= index_interval_bytes:
                if len(off_rel) < max_offset_entries:
                    off_rel.append(base - base_offset)
                    off_pos.append(pos)
                if max_ts > last_ts and len(ts_val) < time_room:
                    ts_val.append(max_ts)
                    ts_rel.append(off_of_max - base_offset)
                    last_ts = max_ts
                since = 0
            since += end - pos
            expected = base + lod + 1
            batches += 1
            pos = end
    finally:
        view.release()
    if max_ts > last_ts and len(ts_val) < max_time_entries:
        ts_val.append(max_ts)
        ts_rel.append(off_of_max - base_offset)
    offsets = np.zeros(len(off_rel), dtype=OffsetIndex.DTYPE)
    offsets["rel"], offsets["pos"] = off_rel, off_pos
    times = np.zeros(len(ts_val), dtype=TimeIndex.DTYPE)
    times["ts"], times["rel"] = ts_val, ts_rel
    return SegmentScan(
        valid_bytes=pos,
        next_offset=expected if batches else base_offset,
        max_timestamp=max_ts,
        offset_of_max_timestamp=off_of_max,
        bytes_since_last_index=since,
        batches=batches,
        offset_entries=offsets,
        time_entries=times,
        error=error,
    )


SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
STRAY_SUFFIXES = (".deleted", ".cleaned", ".swap")
INDEX_SUFFIXES = (".index", ".timeindex")


def load_segments(
    directory: Path,
    *,
    recovery_point: int,
    had_clean_shutdown: bool,
    open_segment: Callable[[int], Segment],
) -> tuple[list[Segment], RecoveryReport]:
    """Open every segment of ``directory``; rescan from the recovery point if unclean.

    After a clean shutdown each segment gets a cheap sanity check (index sizes, monotonic
    entries, last entry on a real batch header); a failure rebuilds that segment's
    indexes by a CRC rescan.  After an unclean shutdown every segment from the one holding
    ``recovery_point`` onwards is rescanned.  The first torn or corrupt batch truncates its
    segment there and deletes every later segment (nothing after a corrupt point
    survives).  An interrupted cleaner swap is completed or rolled back first
    (:func:`finish_interrupted_swaps`); indexes without a ``.log`` are removed.
    """
    report = RecoveryReport(had_clean_shutdown=had_clean_shutdown)
    finish_interrupted_swaps(directory, report)
    bases: list[int] = []
    names: set[str] = set()
    for entry in os.scandir(directory):
        if entry.name.endswith(STRAY_SUFFIXES):
            os.unlink(entry.path)
            report.problems.append(f"removed stray file {entry.name}")
            continue
        names.add(entry.name)
        match = SEGMENT_NAME.match(entry.name)
        if match:
            bases.append(int(match.group(1)))
    bases.sort()
    for name in names:
        stem, dot, suffix = name.partition(".")
        if dot and "." + suffix in INDEX_SUFFIXES and stem + ".log" not in names:
            os.unlink(directory / name)
            report.problems.append(f"removed index {name} without a .log")
    segments = [open_segment(base) for base in bases]
    report.segments_loaded = len(segments)
    first_rescan = len(segments)
    if not had_clean_shutdown:
        first_rescan = max(0, bisect.bisect_right(bases, recovery_point) - 1)
    prev_next: int | None = None
    for i, seg in enumerate(segments):
        min_offset = seg.base_offset if prev_next is None else max(seg.base_offset, prev_next)
        scan: SegmentScan | None = None
        if i >= first_rescan:
            scan = _rescan(seg, min_offset, report)
        else:
            try:
                seg.load_clean()
            except CorruptIndexError as exc:
                report.problems.append(f"rebuilding indexes: {exc}")
                scan = _rescan(seg, min_offset, report)
        if scan is not None and scan.error is not None:
            report.problems.append(f"{seg.log_path}: {scan.error}; truncated")
            report.truncated_at_offset = seg.next_offset
            for later in segments[i + 1:]:
                report.truncated_bytes += later.size
                report.segments_deleted += 1
                later.delete()
            del segments[i + 1:]
            break
        prev_next = seg.next_offset
    return segments, report


SWAP_LOG = re.compile(r"^(\d{20})\.log\.swap$")
SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")


def finish_interrupted_swaps(directory: Path, report: RecoveryReport) -> None:
    """Complete or roll back a cleaner swap cut short by a crash.

    The protocol (S0-S4) is in :mod:`storage.cleaner`.  ``.cleaned`` files (no commit
    yet) and ``.deleted`` files (old files of a committed swap) are removed.  Each
    ``B.log.swap`` is committed: every segment file (``.log``, ``.index``, ``.timeindex``)
    with a base offset in ``[B, end of the swap file)`` is removed - the old segments it
    replaces and its own half-renamed indexes, rebuilt on load - and it becomes
    ``B.log``.  Any other ``.swap`` file is an index of an uncommitted swap: removed.
    Cost: O(files) + a CRC scan of each swap file (only after a crash mid-swap).
    """
    changed = False
    for entry in list(os.scandir(directory)):
        if entry.name.endswith((".cleaned", ".deleted")):
            os.unlink(entry.path)
            report.problems.append(f"removed {entry.name} (interrupted cleaner swap)")
            changed = True
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        match = SWAP_LOG.match(entry.name)
        if match is None:
            continue
        base = int(match.group(1))
        with open(entry.path, "rb") as f:
            data = f.read()
        end = scan_segment(data, base, min_offset=base, index_interval_bytes=1 << 30,
                           max_offset_entries=1, max_time_entries=1).next_offset
        for other in os.scandir(directory):
            seg = SEGMENT_FILE.match(other.name)
            if seg is not None and base <= int(seg.group(1)) < max(end, base + 1):
                os.unlink(other.path)
        os.rename(entry.path, directory / f"{base:020d}.log")
        report.problems.append(f"completed the interrupted cleaner swap of {entry.name} "
                               f"(offsets [{base}, {end}))")
        changed = True
    for entry in list(os.scandir(directory)):
        if entry.name.endswith(".swap"):
            os.unlink(entry.path)
            report.problems.append(f"removed {entry.name} (uncommitted cleaner swap)")
            changed = True
    if changed:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _rescan(seg: Segment, min_offset: int, report: RecoveryReport) -> SegmentScan:
    before = seg.size
    scan = seg.recover(min_offset)
    report.segments_rescanned += 1
    report.bytes_rescanned += before
    report.indexes_rebuilt += 1
    report.truncated_bytes += before - seg.size
    return scan


def check_log_invariants(log: Log) -> None:
    """Walk every batch of ``log``; raise LogInvariantError naming the first broken rule.

    Rules: segments sorted with matching file names and sizes; only the last may be empty;
    batch offsets strictly increasing within and across segments and at or above each
    segment's base; each segment's next offset and largest timestamp match its batches;
    every offset-index entry points at a batch start with that base offset and every
    time-index entry at a batch base offset, both strictly increasing; LEO equals the
    active segment's next offset; log start in [first base, LEO]; recovery point <= LEO.
    """
    segs = log.segments
    if not segs:
        raise LogInvariantError(f"{log.dir}: no segments")
    prev_next = segs[0].base_offset
    for i, seg in enumerate(segs):
        where = f"{log.dir}/{seg.log_path.name}"
        if seg.base_offset < prev_next:
            raise LogInvariantError(f"{where}: base offset below previous end {prev_next}")
        if os.fstat(seg.fd).st_size != seg.size:
            raise LogInvariantError(f"{where}: file size differs from tracked size {seg.size}")
        if seg.size == 0 and i != len(segs) - 1:
            raise LogInvariantError(f"{where}: empty segment that is not the active one")
        starts: dict[int, int] = {}
        expected, max_ts = max(prev_next, seg.base_offset), NO_TIMESTAMP
        end = 0
        for batch in seg.iter_batches(0):
            if batch.base_offset < expected:
                raise LogInvariantError(
                    f"{where}: batch at {batch.position} has base offset {batch.base_offset} "
                    f"< {expected}")
            starts[batch.position] = batch.base_offset
            expected = batch.last_offset + 1
            max_ts = max(max_ts, batch.max_timestamp)
            end = batch.position + batch.size
        if end != seg.size:
            raise LogInvariantError(f"{where}: batches end at {end}, file size {seg.size}")
        next_offset = expected if starts else seg.base_offset
        if seg.next_offset != next_offset or seg.max_timestamp != max_ts:
            raise LogInvariantError(
                f"{where}: tracked next_offset/max_timestamp {seg.next_offset}/"
                f"{seg.max_timestamp}, batches say {next_offset}/{max_ts}")
        bases = set(starts.values())
        entries = seg.index.to_array()
        for rel, pos in zip(entries["rel"].tolist(), entries["pos"].tolist(), strict=True):
            if starts.get(pos) != seg.base_offset + rel:
                raise LogInvariantError(f"{where}: index entry ({rel}, {pos}) is not a batch start")
        if len(entries) > 1 and not (bool((entries["rel"][1:] > entries["rel"][:-1]).all())
                                     and bool((entries["pos"][1:] > entries["pos"][:-1]).all())):
            raise LogInvariantError(f"{where}: offset index not strictly increasing")
        times = seg.time_index.to_array()
        for ts, rel in zip(times["ts"].tolist(), times["rel"].tolist(), strict=True):
            if seg.base_offset + rel not in bases or ts > max_ts:
                raise LogInvariantError(f"{where}: time index entry ({ts}, {rel}) is invalid")
        if len(times) > 1 and not (bool((times["ts"][1:] > times["ts"][:-1]).all())
                                   and bool((times["rel"][1:] > times["rel"][:-1]).all())):
            raise LogInvariantError(f"{where}: time index not strictly increasing")
        prev_next = seg.next_offset
    if log.log_end_offset != segs[-1].next_offset:
        raise LogInvariantError(
            f"{log.dir}: log end offset {log.log_end_offset} != active segment end "
            f"{segs[-1].next_offset}")
    if not segs[0].base_offset <= log.log_start_offset <= log.log_end_offset:
        raise LogInvariantError(f"{log.dir}: log start offset {log.log_start_offset} out of range")
    if log.recovery_point > log.log_end_offset:
        raise LogInvariantError(f"{log.dir}: recovery point {log.recovery_point} > LEO")
