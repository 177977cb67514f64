"""Rescanning a segment's bytes: the framing rules a stored run of batches must keep.

A ``.log`` file is a plain concatenation of RecordBatch v2 (the 61-byte header table is in
:mod:`clients.records.batch`); :func:`scan_segment` walks one (an mmap of the file) from
position 0, stops at the first torn, invalid or out-of-order batch, and rebuilds the
offset and time index entries with the same index-point rule the append path uses (first
batch, then every ``index_interval_bytes``; full indexes skip entries; one final time
entry for the largest timestamp).  The framing constants here (:data:`MIN_BATCH_LENGTH`,
:data:`MAX_CODEC`, :data:`INT32_MAX`) are also the append validator's
(:mod:`storage.log.validator`), so what the log accepts on append is exactly what a
recovery scan later accepts.

Here, below both :mod:`storage.segment` and :mod:`storage.log`, so that the segment,
log recovery, the scrubber and the controller's metadata log import it downward.

Costs: O(bytes) for the CRC (hardware CRC-32C) plus O(batches) of Python for the header
walk; index entries are built in numpy arrays.  A pure function: thread-safe (the caller
owns the buffer).
"""

from __future__ import annotations

import bisect
import mmap
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from crc32c import crc32c

from clients.protocol.errors import MiniKafkaError
from clients.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODECS,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TRANSACTIONAL_MASK,
)
from clients.records.control import ControlType, parse_marker
from clients.records.record import decode_batch
from storage.index.offset_index import OffsetIndex
from storage.index.time_index import NO_TIMESTAMP, TimeIndex

INT32_MAX = 2**31 - 1
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
MAX_CODEC = len(COMPRESSION_CODECS) - 1  # zstd (4); 5-7 are not Kafka codecs
TXN_DATA = -1  # the kind of a transactional data batch in SegmentScan.txn_events


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
    # (offset, producer id, kind) of each transactional batch, in order: kind TXN_DATA
    # for data (offset: its base offset), the ControlType of a marker (the .txnindex
    # checks: storage.log.txn_rebuild); control batches that are not markers are left out
    txn_events: list[tuple[int, int, int]] = field(default_factory=list)



def scan_segment(
    buf: bytes | memoryview | mmap.mmap,
    base_offset: int,
    *,
    min_offset: int,
    index_interval_bytes: int,
    max_offset_entries: int,
    max_time_entries: int,
    strict_from: int | None = None,
    epochs: Sequence[tuple[int, int]] = (),
    next_segment_offset: int | None = None,
) -> SegmentScan:
    """Validate batches from position 0; stop at the first torn/invalid/out-of-order one.

    The header fields the CRC does not cover (base offset, partition leader epoch) are
    checked where they can be: every batch ends below ``next_segment_offset`` (the next
    segment's base, from its file name), and from offset ``strict_from`` on (the
    recovery point after a crash: what may not have been flushed) a batch's leader
    epoch must be the one ``epochs`` (the leader-epoch checkpoint's ``(epoch,
    start_offset)`` entries: every epoch is written to it before its first batch is
    written, and made durable before a flush covers that batch, so a power cut can only
    make it lag the unflushed tail, which is then cut) gives its offset.  A flipped
    bit would otherwise keep a batch 2^k offsets ahead, or one claiming a later epoch
    than any leader had (which the safe election would rank first).  Left unchecked: a
    base offset moved upwards in the last segment (gaps are legal there: a follower
    copies a compacted range as it is, and the log's cleanup policy is not known yet
    when a broker in a cluster recovers), or within a closed segment's range (the next
    batch then fails as out of order, unless it was the segment's last)."""
    view = memoryview(buf)
    total = len(view)
    unpack = HEADER.unpack_from
    epoch_starts = [start for _, start in epochs]
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
    txn_events: list[tuple[int, int, int]] = []
    try:
        while pos < total:
            if total - pos < HEADER_SIZE:
                error = f"torn batch header at position {pos} ({total - pos} bytes)"
                break
            (base, length, epoch, magic, crc, attrs, lod, _bts, batch_max_ts, pid, _pep,
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
                    or attrs & COMPRESSION_MASK > MAX_CODEC):
                error = f"invalid counts or attributes in batch at position {pos}"
                break
            if base < expected or base + lod - base_offset > INT32_MAX:
                error = f"batch at position {pos} has base offset {base}, expected >= {expected}"
                break
            if next_segment_offset is not None and base + lod >= next_segment_offset:
                error = (f"batch at position {pos} ends at offset {base + lod}, at or past "
                         f"the next segment's base {next_segment_offset}")
                break
            if strict_from is not None and expected >= strict_from:
                i = bisect.bisect_right(epoch_starts, base)  # the entry holding ``base``
                known = epochs[i - 1][0] if i else None
                if known is not None and known != epoch:
                    error = (f"batch at position {pos} (offset {base}) has leader epoch "
                             f"{epoch}; the leader-epoch checkpoint says {known}")
                    break
            if attrs & TRANSACTIONAL_MASK:
                kind = marker_kind(view, pos) if attrs & CONTROL_MASK else TXN_DATA
                if kind is not None:
                    txn_events.append((base, pid, kind))
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
        txn_events=txn_events,
    )


def marker_kind(buf: memoryview, pos: int) -> ControlType | None:
    """The type of the transaction marker in the control batch at ``pos`` (its CRC
    already checked); None when its record is not a marker."""
    try:
        record = decode_batch(buf, pos, validate=False)[0]
        return parse_marker(record.key, record.value)[0]
    except (MiniKafkaError, IndexError):
        return None
