"""Bulk RecordBatch v2 decoding: a whole batch into numpy columns, values zero-copy.

Accepts exactly what :func:`clients.records.decode_batch` accepts (record table in
:mod:`clients.records.record`), headers included, and anything else raises
:class:`CorruptRecordError`.

Decoding.  A fast path parses one record in Python, assumes the following records share
its layout and verifies that assumption for all of them at once on a 2-D view (equal
length/key/value varint bytes, well-formed timestamp and offset varints, header count 0);
the run ends at the first row that differs and a new run starts there (at most
``MAX_RUNS`` runs, and only while runs are at least ``MIN_RUN`` records long).  The rest
is decoded by the general path: a Python loop finds record starts (one length varint per
record), then every other field is decoded vectorised, one byte column at a time over
all records (terminators found with ``byte < 0x80``).  Records
that carry headers have their headers decoded per record in Python.  Both paths accept
exactly what :func:`clients.records.decode_batch` accepts.

Checking without decoding.  :func:`records_well_formed` is the fast path of a leader's
check that a producer's records parse (:mod:`storage.log.validator`): it proves, run by
run on the same 2-D views (records whose layouts vary: one Python step per record to
find it, then numpy per field, as the general decode path), that the records decode here,
that their offset deltas are ``0 .. count - 1`` (compared with a table of their
canonical varints) and that their timestamps lie in a window (from the varint widths
alone where that is enough), without building any column.  Anything it cannot prove
(headers, non-canonical varints, any mismatch) returns False and the caller decodes for
the precise error, so it accepts a subset of what :func:`decode_batch_bulk` accepts.

Compressed batches (:mod:`clients.records.compression`) are decompressed first (bounded
by ``max_bytes``) and decoded the same way from the decompressed bytes, which then are
the result's ``buffer``.  :func:`concat_bulk` joins the results of several batches (a
fetch response's) into one.

Costs: O(records + record bytes) with a small constant number of numpy calls per field
(per run on the fast path); the general path adds ~0.1 us of Python per record; a
compressed batch adds one decompression pass.  Values are never copied: :class:`BulkRecords`
holds positions into the caller's buffer (or the decompressed bytes) and hands out
``memoryview`` slices.  Functions are pure and thread-safe; a :class:`BulkRecords` keeps
the buffer exported (a ``bytearray`` it was decoded from cannot be resized while the
result or its views are alive).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from clients.protocol.errors import CorruptRecordError, MessageTooLargeError
from clients.records.batch import (
    INT64_MAX,
    INT64_MIN,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Buffer,
    read_header,
    validate_batch,
)
from clients.records.bulk_varint import (
    I64,
    MAX_RUNS,
    U8,
    cols_value,
    unzigzag,
    varint_matrix,
    varint_sizes,
    varints_at,
    well_formed,
    zigzag,
)
from clients.records.compression import MAX_DECOMPRESSED_BYTES, plain_records
from clients.records.record import Header, Record, decode_record_headers, skip_record_headers
from clients.records.varint import decode_varint, decode_varint32

MIN_RUN = 16  # a shorter run also switches to the general path
MIN_RECORD_BYTES = 7  # length, attributes, ts, offset, key_len, value_len, header_count


@dataclass(frozen=True, slots=True, eq=False)
class BulkRecords:
    """Decoded batch: numpy columns plus zero-copy access to keys and values.

    ``*_offsets`` are positions in ``buffer`` (the caller's buffer, or for a compressed
    batch its decompressed records); a ``*_lengths`` of -1 means null (its offset is then
    where the data would start).  ``record_headers`` maps record index -> headers for the
    records that have any (empty when decoded with ``max_headers``: checked, not kept);
    ``header_count`` is how many record headers the batch carries in all.  ``header`` is
    the batch's header as stored (for a compressed batch its ``batch_length`` counts the
    compressed bytes).  ``timestamp_types`` is each record's timestamp type from its
    batch's attributes (0 CreateTime, 1 LogAppendTime; None: every record's is the
    header's), so it survives :func:`concat_bulk` of batches of both kinds.
    """

    buffer: memoryview
    header: BatchHeader
    offsets: I64
    timestamps: I64
    key_offsets: I64
    key_lengths: I64
    value_offsets: I64
    value_lengths: I64
    record_headers: dict[int, tuple[Header, ...]] = field(default_factory=dict)
    header_count: int = 0
    timestamp_types: U8 | None = None

    def timestamp_type_column(self) -> U8:
        """0 (CreateTime) or 1 (LogAppendTime) per record."""
        if self.timestamp_types is not None:
            return self.timestamp_types
        kind = 1 if self.header.attributes & TIMESTAMP_TYPE_MASK else 0
        return np.full(len(self.offsets), kind, dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.offsets)

    def value(self, i: int) -> memoryview | None:
        n = int(self.value_lengths[i])
        o = int(self.value_offsets[i])
        return None if n < 0 else self.buffer[o : o + n]

    def key(self, i: int) -> memoryview | None:
        n = int(self.key_lengths[i])
        o = int(self.key_offsets[i])
        return None if n < 0 else self.buffer[o : o + n]

    def headers(self, i: int) -> tuple[Header, ...]:
        return self.record_headers.get(i, ())

    def values(self) -> list[memoryview | None]:
        return _slices(self.buffer, self.value_offsets, self.value_lengths)

    def keys(self) -> list[memoryview | None]:
        return _slices(self.buffer, self.key_offsets, self.key_lengths)

    def to_records(self) -> list[Record]:
        """Copy out as :class:`Record` tuples (what :func:`decode_batch` returns)."""
        keys, values = self.keys(), self.values()
        return [
            Record(
                o,
                t,
                None if k is None else bytes(k),
                None if v is None else bytes(v),
                self.headers(i),
            )
            for i, (o, t, k, v) in enumerate(
                zip(self.offsets.tolist(), self.timestamps.tolist(), keys, values, strict=True)
            )
        ]


def _slices(buf: memoryview, offsets: I64, lengths: I64) -> list[memoryview | None]:
    return [
        None if n < 0 else buf[o : o + n]
        for o, n in zip(offsets.tolist(), lengths.tolist(), strict=True)
    ]


class _Columns:
    """Per-record results being filled in: deltas and field positions."""

    def __init__(self, n: int) -> None:
        self.ts_delta = np.empty(n, dtype=np.int64)
        self.off_delta = np.empty(n, dtype=np.int64)
        self.key_off = np.empty(n, dtype=np.int64)
        self.key_len = np.empty(n, dtype=np.int64)
        self.value_off = np.empty(n, dtype=np.int64)
        self.value_len = np.empty(n, dtype=np.int64)
        self.headers: dict[int, tuple[Header, ...]] = {}
        self.header_count = 0


def decode_batch_bulk(
    buf: Buffer, pos: int = 0, validate: bool = True, max_bytes: int = MAX_DECOMPRESSED_BYTES,
    *, max_headers: int | None = None,
) -> BulkRecords:
    """Decode the batch at ``pos`` into numpy columns (validating it first by default).

    A compressed batch is decompressed first, to at most ``max_bytes`` (more, or a
    corrupt stream, is a :class:`CorruptRecordError` naming the codec).  With
    ``max_headers`` the record headers are checked (same errors) but not kept, so memory
    stays O(records) whatever they hold, and more than ``max_headers`` of them in all is a
    :class:`MessageTooLargeError`, raised before any is walked (a leader's record check).
    """
    header = validate_batch(buf, pos) if validate else read_header(buf, pos)
    count = header.record_count
    if count < 0:
        raise CorruptRecordError(f"batch at position {pos}: negative record_count")
    records, p, end = plain_records(buf, pos, header, max_bytes)
    view = memoryview(records)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if count * MIN_RECORD_BYTES > end - p:
        raise CorruptRecordError(  # checked before sizing arrays by a corrupt count
            f"batch at position {pos}: {count} records cannot fit in {end - p} "
            f"{'decompressed ' if header.compression else ''}bytes"
        )
    data: U8 = np.frombuffer(view, dtype=np.uint8, count=end)
    cols = _Columns(count)
    i = 0
    for _run in range(MAX_RUNS):
        if i >= count:
            break
        layout = _probe(view, p, end)
        if layout is None:
            break
        taken = _decode_run(data, p, end, count - i, layout, cols, i)
        p += taken * layout.size
        i += taken
        if taken < MIN_RUN:  # layouts vary record to record: the general path is cheaper
            break
    if i < count:
        p = _decode_general(data, view, p, end, i, count, cols, max_headers)
    if p != end:
        raise CorruptRecordError(f"batch has {end - p} bytes after its last record")
    offsets = _absolute(header.base_offset, cols.off_delta, "offset")
    timestamps = _absolute(header.base_timestamp, cols.ts_delta, "timestamp")
    if header.attributes & TIMESTAMP_TYPE_MASK:
        timestamps = np.full(count, header.max_timestamp, dtype=np.int64)
    return BulkRecords(
        view,
        header,
        offsets,
        timestamps,
        cols.key_off,
        cols.key_len,
        cols.value_off,
        cols.value_len,
        cols.headers,
        cols.header_count,
    )


# the canonical offset-delta varints of the first _OFFSET_TABLE_ROWS records of a batch,
# left aligned in 3 columns (zig-zag 2 * delta: 1 byte below 64, 2 below 8192, else 3)
_OFFSET_TABLE_ROWS = 1 << 16


def _offset_table() -> tuple[U8, I64]:
    """(3, rows) byte columns (one contiguous row per varint byte: numpy compares 1-D
    columns much faster than narrow strided 2-D slices) and each varint's width."""
    zz = zigzag(np.arange(_OFFSET_TABLE_ROWS, dtype=np.int64))
    widths = varint_sizes(zz)
    table = np.zeros((_OFFSET_TABLE_ROWS, 3), dtype=np.uint8)
    for width in (1, 2, 3):
        rows = widths == width
        table[rows, :width] = varint_matrix(zz[rows], width)
    return np.ascontiguousarray(table.T), widths


_OFFSET_TABLE, _OFFSET_WIDTHS = _offset_table()
_OFFSET_WIDTH_END = {1: 64, 2: 8192, 3: _OFFSET_TABLE_ROWS}  # first delta of a wider varint


def records_well_formed(records: Buffer, p: int, end: int, count: int, base_offset: int,
                        base_timestamp: int, timestamp_window: tuple[int, int] | None
                        ) -> bool:
    """True when the ``count`` records in ``records[p:end]`` provably decode (as
    :func:`decode_batch_bulk` decodes them) with offset deltas ``0 .. count - 1`` and
    every timestamp in ``timestamp_window`` (inclusive; None: the int64 range).

    False means "not proven", never "invalid": headers, more than 65,536 records, a
    non-canonical varint or any mismatch; the caller then decodes.  Cost: a batch of one
    record takes one Python parse (no numpy past the probe's); runs of
    same-shaped records take one Python parse of their first record plus about a dozen
    numpy calls; records whose layouts vary take the general path
    (:func:`_general_well_formed`: one Python step per record to find it, then a few
    numpy calls per field).
    """
    if not 0 < count <= _OFFSET_TABLE_ROWS or count * MIN_RECORD_BYTES > end - p \
            or base_offset + count - 1 > INT64_MAX:
        return False
    low, high = timestamp_window if timestamp_window is not None else (INT64_MIN, INT64_MAX)
    view = memoryview(records)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    layout = _probe(view, p, end)
    if layout is None:
        return False  # headers (or a malformed first record): the decoder's business
    (ts_col, ts_width), (off_col, off_width) = layout.ts, layout.off
    if count == 1 and off_width == 1 and view[p + off_col] == 0 and ts_width <= 9:
        # one record: what the run below proves of its row, without numpy (the probe parsed
        # a well-formed timestamp varint; offset delta 0 is one canonical byte)
        reach = 1 << (7 * ts_width - 1)
        if base_timestamp - reach < low or base_timestamp + reach > high:
            stamp = base_timestamp + decode_varint(view, p + ts_col)[0]
            return low <= stamp <= high and p + layout.size == end
        return p + layout.size == end
    data: U8 = np.frombuffer(view, dtype=np.uint8, count=end)
    general = (data, view, p, end, 0, count, base_timestamp, low, high)
    if count > 1:  # sizes that vary, told cheaply: the second record's length differs
        length, q = decode_varint32(view, p)  # the probe parsed it
        second = q + length
        if second + q - p > end or view[p:q] != view[second : second + q - p]:
            return _general_well_formed(*general)
    i = short_runs = 0
    for _run in range(MAX_RUNS):
        if i == count:
            return p == end
        general = (data, view, p, end, i, count, base_timestamp, low, high)
        if i:
            layout = _probe(view, p, end)
        if layout is None:
            return _general_well_formed(*general)
        size = layout.size
        off_col, off_width = layout.off
        ts_col, ts_width = layout.ts
        if off_width > 3 or _OFFSET_WIDTHS[i] != off_width or ts_width > 9:
            return _general_well_formed(*general)
        m = min(count - i, (end - p) // size, _OFFSET_WIDTH_END[off_width] - i)
        rows = data[p : p + m * size].reshape(m, size)
        c = layout.const_cols
        bad = (rows[:, c] != rows[0, c]).any(axis=1)
        for j in range(off_width):
            bad |= rows[:, off_col + j] != _OFFSET_TABLE[j, i : i + m]
        stamps = rows[:, ts_col : ts_col + ts_width]
        bad |= ~well_formed(stamps, int32=False)
        if bad.any():
            m = int(bad.argmax())
            if m == 0:
                return _general_well_formed(*general)
        if m < MIN_RUN:  # a timestamp or offset varint grew, or layouts vary: allow 3
            short_runs += 1
            if short_runs > 3:
                return _general_well_formed(*general)
        reach = 1 << (7 * ts_width - 1)  # a well-formed varint of ts_width bytes: |delta| <= reach
        if base_timestamp - reach < low or base_timestamp + reach > high:
            deltas = unzigzag(cols_value(stamps[:m]))
            if not low <= base_timestamp + int(deltas.min()) <= base_timestamp + int(
                    deltas.max()) <= high:
                return False
        p += m * size
        i += m
    if i < count:
        return _general_well_formed(data, view, p, end, i, count, base_timestamp, low, high)
    return p == end


def _general_well_formed(data: U8, view: memoryview, p: int, end: int, i: int, count: int,
                         base_timestamp: int, low: int, high: int) -> bool:
    """Records ``i .. count`` from ``p`` whatever their layouts (:func:`records_well_formed`'s
    contract): Python finds each record's start, as :func:`_decode_general` does, then
    numpy checks every field of all of them at once: timestamps well formed and in
    ``[low, high]``, offset deltas equal to the canonical varints of ``i .. count - 1``,
    key and value lengths inside the record, no headers, nothing after the last field."""
    try:
        starts, lengths, p = _record_starts(view, p, end, i, count)
        if p != end or (lengths and min(lengths) < MIN_RECORD_BYTES - 1):
            return False
        begin = np.array(starts, dtype=np.int64)
        limit = begin + np.array(lengths, dtype=np.int64)
        ts_delta, q = varints_at(data, begin + 1, limit, 10)
        widths = _OFFSET_WIDTHS[i:count]
        if (q + widths > limit).any():
            return False
        for j in range(3):
            at = q if j == 0 else q[widths > j]
            if len(at) and not (data[at + j] == _OFFSET_TABLE[j, i:count][widths > j]).all():
                return False
        q = q + widths
        for _field in range(2):  # key, then value: a length (-1: null) and its bytes
            n, q = varints_at(data, q, limit, 5)
            if (n < -1).any():
                return False
            q = q + np.maximum(n, 0)
            if (q > limit).any():
                return False
        if not (q + 1 == limit).all() or data[q].any():  # header count 0, then the end
            return False
    except CorruptRecordError:
        return False
    return low <= base_timestamp + int(ts_delta.min()) and \
        base_timestamp + int(ts_delta.max()) <= high


def concat_bulk(parts: Sequence[BulkRecords], min_offset: int | None = None) -> BulkRecords:
    """One :class:`BulkRecords` over several decoded batches (in offset order), without
    the records below ``min_offset``; its ``header`` is the first part's.

    When every part points into the same buffer (uncompressed batches decoded from one
    fetch response) positions are kept and nothing is copied.  Otherwise (compressed
    batches: each has its own decompressed buffer) the distinct buffers are joined into
    one, copied once, and positions shifted.
    """
    if not parts:
        raise ValueError("concat_bulk needs at least one part")
    starts: dict[tuple[int, int], int] = {}  # (address, size) of a buffer -> its start
    buffers: list[memoryview] = []
    shifts: list[int] = []
    total = 0
    for part in parts:
        key = (_address(part.buffer), part.buffer.nbytes)
        if key not in starts:
            starts[key] = total
            buffers.append(part.buffer)
            total += part.buffer.nbytes
        shifts.append(starts[key])
    buffer = buffers[0] if len(buffers) == 1 else memoryview(b"".join(buffers))
    offsets = np.concatenate([b.offsets for b in parts])
    keep = 0 if min_offset is None else int(np.searchsorted(offsets, min_offset, side="left"))

    timestamp_types = None  # all CreateTime (the common case): no column
    if any(b.timestamp_types is not None or b.header.attributes & TIMESTAMP_TYPE_MASK
           for b in parts):
        timestamp_types = np.concatenate([b.timestamp_type_column() for b in parts])[keep:]

    def cat(name: str, shifted: bool = False) -> I64:
        columns = [
            getattr(b, name) + s if shifted and s else getattr(b, name)
            for b, s in zip(parts, shifts, strict=True)
        ]
        return np.concatenate(columns)[keep:]

    headers: dict[int, tuple[Header, ...]] = {}
    base = 0
    for b in parts:
        for i, h in b.record_headers.items():
            if base + i >= keep:
                headers[base + i - keep] = h
        base += len(b)
    return BulkRecords(buffer, parts[0].header, offsets[keep:], cat("timestamps"),
                       cat("key_offsets", True), cat("key_lengths"),
                       cat("value_offsets", True), cat("value_lengths"), headers,
                       sum(len(h) for h in headers.values()), timestamp_types)  # fmt: skip


def _address(view: memoryview) -> int:
    """Where ``view``'s bytes start in memory (identifies a buffer across memoryviews)."""
    if view.nbytes == 0:
        return 0
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)


def _absolute(base: int, deltas: I64, what: str) -> I64:
    if len(deltas) and (
        base + int(deltas.min()) < INT64_MIN or base + int(deltas.max()) > INT64_MAX
    ):
        raise CorruptRecordError(f"record {what} overflows int64 (base {base})")
    return deltas + np.int64(base)


@dataclass(frozen=True, slots=True)
class _Layout:
    """Byte layout of one record without headers, relative to its start."""

    size: int
    const_cols: npt.NDArray[np.intp]  # length, key_len, value_len, header_count columns
    ts: tuple[int, int]  # (column, bytes)
    off: tuple[int, int]
    key: tuple[int, int]  # (column, length or -1)
    value: tuple[int, int]


def _probe(view: memoryview, p: int, end: int) -> _Layout | None:
    """Parse one record in Python; its layout, or ``None`` if unusual (headers, errors)."""
    try:
        length, q = decode_varint32(view, p)
        rec_end = q + length
        if length < 2 or rec_end > end:
            return None
        const = list(range(q - p))
        ts_col = q + 1
        _, off_col = decode_varint(view, ts_col)
        _, q = decode_varint32(view, off_col)
        off_end = q
        fields = []
        for _f in range(2):
            start = q
            n, q = decode_varint32(view, q)
            if n < -1:
                return None
            const.extend(range(start - p, q - p))
            fields.append((q - p, n))
            q += max(n, 0)
        if q != rec_end - 1 or view[q] != 0:
            return None
    except CorruptRecordError:
        return None
    const.append(q - p)
    return _Layout(
        rec_end - p,
        np.array(const, dtype=np.intp),
        (ts_col - p, off_col - ts_col),
        (off_col - p, off_end - off_col),
        fields[0],
        fields[1],
    )


def _decode_run(
    data: U8, p: int, end: int, left: int, layout: _Layout, cols: _Columns, i: int
) -> int:
    """Decode the records from ``p`` that share ``layout``; returns how many (>= 1)."""
    size = layout.size
    m = min(left, (end - p) // size)
    rows = data[p : p + m * size].reshape(m, size)
    c = layout.const_cols
    ok = (rows[:, c] == rows[0, c]).all(axis=1)
    ts = rows[:, layout.ts[0] : layout.ts[0] + layout.ts[1]]
    off = rows[:, layout.off[0] : layout.off[0] + layout.off[1]]
    ok &= well_formed(ts, int32=False) & well_formed(off, int32=True)
    if not ok.all():
        m = int(np.argmin(ok))  # first row that differs; row 0 always matches
        ts, off = ts[:m], off[:m]
    row_start = p + size * np.arange(m, dtype=np.int64)
    cols.ts_delta[i : i + m] = unzigzag(cols_value(ts))
    cols.off_delta[i : i + m] = unzigzag(cols_value(off))
    cols.key_off[i : i + m] = row_start + layout.key[0]
    cols.key_len[i : i + m] = layout.key[1]
    cols.value_off[i : i + m] = row_start + layout.value[0]
    cols.value_len[i : i + m] = layout.value[1]
    return m


def _decode_general(
    data: U8, view: memoryview, p: int, end: int, i: int, count: int, cols: _Columns,
    max_headers: int | None = None,
) -> int:
    """Decode records ``i..count`` from ``p``: Python finds record starts, numpy the fields;
    headers are decoded per record in Python (with ``max_headers``: counted first, then
    checked without being kept, see :func:`decode_batch_bulk`)."""
    starts, lengths, p = _record_starts(view, p, end, i, count)
    begin = np.array(starts, dtype=np.int64)
    limit = begin + np.array(lengths, dtype=np.int64)
    if lengths and min(lengths) < 1:
        raise CorruptRecordError("record too short for its attributes byte")
    ts_delta, q = varints_at(data, begin + 1, limit, 10)
    off_delta, q = varints_at(data, q, limit, 5)
    key_len, q = varints_at(data, q, limit, 5)
    key_off = q
    q = _skip(q, key_len, limit)
    value_len, q = varints_at(data, q, limit, 5)
    value_off = q
    q = _skip(q, value_len, limit)
    header_count, q = varints_at(data, q, limit, 5)
    plain = header_count == 0
    if not (q[plain] == limit[plain]).all():
        raise CorruptRecordError("record declares more bytes than its fields use")
    with_headers = np.flatnonzero(~plain)
    cols.header_count = int(np.maximum(header_count[with_headers], 0).sum())
    if max_headers is not None and cols.header_count > max_headers:
        raise MessageTooLargeError(f"records carry {cols.header_count} record headers, above "
                                   f"the limit of {max_headers}")
    for j in with_headers.tolist():
        at, n, stop = int(q[j]), int(header_count[j]), int(limit[j])
        if max_headers is None:
            headers, h_end = decode_record_headers(view, at, n, stop)
            cols.headers[i + j] = headers
        else:
            h_end = skip_record_headers(view, at, n, stop)
        if h_end != stop:
            raise CorruptRecordError("record declares more bytes than its fields use")
    cols.ts_delta[i:] = ts_delta
    cols.off_delta[i:] = off_delta
    cols.key_off[i:] = key_off
    cols.key_len[i:] = key_len
    cols.value_off[i:] = value_off
    cols.value_len[i:] = value_len
    return p


def _record_starts(view: memoryview, p: int, end: int, i: int, count: int
                   ) -> tuple[list[int], list[int], int]:
    """Where records ``i .. count`` start (after their length varint) and their lengths,
    from ``p``; and the position after the last.  One Python step per record."""
    starts: list[int] = []
    lengths: list[int] = []
    fast: Buffer = view  # indexing bytes is quicker than a memoryview, if it is the same
    if isinstance(view.obj, bytes | bytearray) and len(view.obj) == view.nbytes:
        fast = view.obj
    for k in range(i, count):
        if p + 1 >= end:  # a record takes at least 2 bytes
            raise CorruptRecordError(f"batch ends after {k} of {count} records")
        raw = fast[p]
        if raw < 0x80:  # 1- and 2-byte lengths inline: records up to 8 KiB
            length = (raw >> 1) ^ -(raw & 1)
            p += 1
        elif fast[p + 1] < 0x80:
            raw = (raw & 0x7F) | (fast[p + 1] << 7)
            length = (raw >> 1) ^ -(raw & 1)
            p += 2
        else:
            length, p = decode_varint32(view, p)
        if length < 0 or p + length > end:
            raise CorruptRecordError("record length runs past the end of the batch")
        starts.append(p)
        lengths.append(length)
        p += length
    return starts, lengths, p


def _skip(q: I64, lengths: I64, limit: I64) -> I64:
    """Positions after nullable byte fields of ``lengths`` (-1 = null) starting at ``q``."""
    if (lengths < -1).any():
        raise CorruptRecordError(f"invalid length {int(lengths.min())} in record")
    q = q + np.maximum(lengths, 0)
    if (q > limit).any():
        raise CorruptRecordError("record field runs past the end of its record")
    return q
