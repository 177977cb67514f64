"""Bulk RecordBatch v2 codec: many records encoded or decoded at once with numpy.

Same bytes as the per-record path in :mod:`clients.records` (see its byte table for the
61-byte batch header and the record layout); header and CRC are written by the shared
:func:`clients.records.assemble_batch`.  The bulk encoder writes records without headers
(header_count 0); the bulk decoder reads any record, headers included.

Record layout as the bulk path sees it (one row per record)::

    varint length | int8 attributes | varlong ts_delta | varint offset_delta |
    varint key_len | key | varint value_len | value | varint header_count (| headers)

Encoding.  Zig-zag varint sizes of every field are computed for all records with one
``searchsorted`` per field, record sizes and positions with ``cumsum``.  Then:

* uniform path (every value the same length, keys all null or all the same length): the
  records fall into a few runs of identical layout (a run ends where a timestamp or
  offset delta needs one more varint byte); each run is a 2-D ``(records, record_size)``
  view of the output, written column block by column block (constant varints broadcast,
  varying varints as byte matrices, values as one block copy from ``b"".join(values)``);
* general path (any lengths, nulls, or too many runs): all varint bytes are scattered
  column-wise into one "glue" buffer, sliced at record boundaries and interleaved with
  the keys and values, and the whole body is produced by one ``b"".join``.

Decoding.  A fast path parses one record in Python, assumes the following records share
its layout and verifies that assumption for all of them at once on a 2-D view (equal
length/key/value varint bytes, well-formed timestamp and offset varints, header count 0);
the run ends at the first row that differs and a new run starts there (at most
``MAX_RUNS`` runs, and only while runs are at least ``MIN_RUN`` records long).  The rest
is decoded by the general path: a Python loop finds record starts (one length varint per
record), then every other field is decoded vectorised, one byte column at a time over
all records (terminators found with ``byte < 0x80``).  Records
that carry headers have their headers decoded per record in Python.  Both paths accept
exactly what :func:`clients.records.decode_batch` accepts, and anything else raises
:class:`CorruptRecordError`.

Costs: O(records + record bytes) with a small constant number of numpy calls per field
(per run on the uniform paths); the general decode path adds ~0.1 us of Python per
record.  Values are never copied on decode: :class:`BulkRecords` holds positions into the
caller's buffer and hands out ``memoryview`` slices.  Functions are pure and
thread-safe; a :class:`BulkRecords` keeps the buffer exported (a ``bytearray`` it was
decoded from cannot be resized while the result or its views are alive).
"""

from __future__ import annotations

import itertools
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from crc32c import crc32c

from clients.errors import CorruptRecordError
from clients.records import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    INT64_MAX,
    INT64_MIN,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Buffer,
    Header,
    Record,
    assemble_batch,
    check_timestamp_range,
    decode_record_headers,
    decode_varint,
    decode_varint32,
    encode_varint,
    read_header,
    validate_batch,
)

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
U8 = npt.NDArray[np.uint8]
BytesInput = Sequence[bytes | None] | npt.NDArray[Any]

_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. record_count
_PREFIX = struct.Struct(">qiibI")  # base_offset, batch_length, epoch, magic, crc
MAX_RUNS = 8  # runs of identical layout tried before switching to the general path
MIN_RUN = 16  # a shorter run also switches to the general path
MIN_RECORD_BYTES = 7  # length, attributes, ts, offset, key_len, value_len, header_count
_THRESHOLDS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)


# -- vectorised varints ---------------------------------------------------------------


def _zigzag(x: I64) -> U64:
    return ((x << 1) ^ (x >> 63)).view(np.uint64)


def _unzigzag(raw: U64) -> I64:
    return (raw >> np.uint64(1)).view(np.int64) ^ -(raw & np.uint64(1)).view(np.int64)


def _sizes(zz: U64) -> I64:
    """Byte length of each varint (1..10)."""
    return np.searchsorted(_THRESHOLDS, zz, side="right").astype(np.int64) + 1


def _varint_matrix(zz: U64, size: int) -> U8:
    """The ``size``-byte varints of ``zz`` (all of that size) as a ``(n, size)`` matrix."""
    cols = (zz[:, None] >> _SHIFTS[:size]) & np.uint64(0x7F)
    cols[:, :-1] |= np.uint64(0x80)
    return cols.astype(np.uint8)


def _put_varints(out: U8, pos: I64, zz: U64, size: I64) -> None:
    """Write varint ``zz[i]`` of ``size[i]`` bytes at ``out[pos[i]]``, one byte column at a time."""
    lo, hi = int(size.min()), int(size.max())
    for j in range(hi):
        b = ((zz >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        if j + 1 < hi:
            b |= (size > j + 1).astype(np.uint8) << 7
        if j < lo:
            out[pos + j] = b
        else:
            sel = size > j
            out[pos[sel] + j] = b[sel]


def _scalar_varint(value: int) -> U8:
    out = bytearray()
    encode_varint(value, out)
    return np.frombuffer(bytes(out), dtype=np.uint8)


def _cols_value(cols: U8) -> U64:
    """Raw (still zig-zagged) value of well-formed varints laid out as matrix columns."""
    parts = (cols & 0x7F).astype(np.uint64) << _SHIFTS[: cols.shape[1]]
    return np.bitwise_or.reduce(parts, axis=1)


# -- encoding -------------------------------------------------------------------------


def _as_matrix(items: npt.NDArray[Any]) -> U8:
    """A fixed-size ``S<n>`` array or a 2-D uint8 array as a ``(records, n)`` uint8 matrix."""
    if items.ndim == 2 and items.dtype == np.uint8:
        return np.ascontiguousarray(items)
    if items.ndim == 1 and items.dtype.kind == "S":
        flat = np.ascontiguousarray(items).view(np.uint8)
        return flat.reshape(len(items), items.dtype.itemsize)
    raise TypeError(f"expected an S<n> or 2-D uint8 array, got {items.dtype} ndim {items.ndim}")


def item_lengths(items: Sequence[bytes | None]) -> I64:
    """``len`` of every item (-1 for None), at C speed when there is no None."""
    n = len(items)
    try:
        return np.fromiter(map(len, items), dtype=np.int64, count=n)  # type: ignore[arg-type]
    except TypeError:
        return np.fromiter((-1 if v is None else len(v) for v in items), dtype=np.int64, count=n)


class _Column:
    """Keys or values: lengths (-1 = null) plus either a block matrix or a list of bytes."""

    def __init__(
        self, items: BytesInput | None, n: int, what: str, lengths: I64 | None = None
    ) -> None:
        self.matrix: U8 | None = None
        self.items: Sequence[bytes | None] | None = None
        if items is None:
            self.lengths = np.full(n, -1, dtype=np.int64)
            self.uniform = -1
            return
        if len(items) != n:
            raise ValueError(f"{len(items)} {what} for {n} records")
        if isinstance(items, np.ndarray):
            self.matrix = _as_matrix(items)
            self.uniform = self.matrix.shape[1]
            self.lengths = np.full(n, self.uniform, dtype=np.int64)
            return
        self.items = items
        if lengths is not None:
            self.lengths = lengths
        else:
            self.lengths = item_lengths(items)
        lo, hi = int(self.lengths.min()), int(self.lengths.max())
        self.uniform = lo if lo == hi else -2  # -2: lengths differ

    def block(self) -> U8:
        if self.matrix is None:
            assert self.items is not None
            joined = b"".join(self.items)  # type: ignore[arg-type]  # uniform: no None
            self.matrix = np.frombuffer(joined, dtype=np.uint8).reshape(len(self.items), -1)
        return self.matrix

    def pieces(self) -> list[bytes]:
        if self.items is None:
            if self.matrix is None:
                return [b""] * len(self.lengths)
            raw = self.matrix.tobytes()
            w = self.matrix.shape[1]
            return (
                [raw[i : i + w] for i in range(0, len(raw), w)] if w else [b""] * len(self.lengths)
            )
        if int(self.lengths.min()) < 0:
            return [b"" if v is None else v for v in self.items]
        return list(self.items)  # type: ignore[arg-type]


def encode_batch_bulk(
    values: BytesInput,
    keys: BytesInput | None = None,
    timestamps: int | npt.NDArray[np.int64] | Sequence[int] | None = None,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    attributes: int = 0,
) -> bytes:
    """Encode one batch of header-less records; same bytes as :func:`build_batch`.

    ``values`` / ``keys``: sequences of ``bytes`` or ``None`` (null), or a fixed-size
    ``S<n>`` array / 2-D uint8 array where every item is exactly ``n`` raw bytes (numpy's
    trailing-NUL stripping does not apply).  ``keys=None`` means all keys are null.
    ``timestamps``: one int for all, one per record, or ``None`` for the current time (ms).
    """
    plan = _BodyPlan(values, keys, timestamps)
    body: Buffer = plan.general() if plan.runs is None else plan.fill(None).data
    return assemble_batch(
        body,
        record_count=plan.n,
        last_offset_delta=plan.n - 1,
        base_timestamp=plan.base_ts,
        max_timestamp=plan.max_ts,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        attributes=attributes,
    )


def encode_batch_bulk_into(
    dest: memoryview | bytearray,
    values: BytesInput,
    keys: BytesInput | None = None,
    timestamps: int | npt.NDArray[np.int64] | Sequence[int] | None = None,
    *,
    value_lengths: I64 | None = None,
    key_lengths: I64 | None = None,
) -> int:
    """:func:`encode_batch_bulk` written straight into ``dest``; returns the batch size.

    Same bytes as ``encode_batch_bulk(values, keys, timestamps)`` (base offset 0, no
    producer id) at ``dest[:size]``, without the intermediate copies: the uniform
    layouts are filled in place, then header and CRC are written in front.
    ``value_lengths`` / ``key_lengths`` (``len`` of every item, -1 for None) may be
    passed when the caller already computed them.  ValueError when ``dest`` is too
    small (nothing useful is left in it then).
    """
    plan = _BodyPlan(values, keys, timestamps, value_lengths, key_lengths)
    view = memoryview(dest).cast("B")
    if plan.runs is not None:
        size = HEADER_SIZE + plan.total
        if size > len(view):
            raise ValueError(f"a {size}-byte batch does not fit in {len(view)} bytes")
        plan.fill(np.frombuffer(view, dtype=np.uint8, count=plan.total, offset=HEADER_SIZE))
    else:
        body = plan.general()
        size = HEADER_SIZE + len(body)
        if size > len(view):
            raise ValueError(f"a {size}-byte batch does not fit in {len(view)} bytes")
        view[HEADER_SIZE:size] = body
    _AFTER_CRC.pack_into(
        view, ATTRIBUTES_OFFSET, 0, plan.n - 1, plan.base_ts, plan.max_ts,
        NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, plan.n,
    )  # fmt: skip
    crc = crc32c(view[ATTRIBUTES_OFFSET:size])
    _PREFIX.pack_into(view, 0, 0, size - LOG_OVERHEAD, NO_PARTITION_LEADER_EPOCH, MAGIC, crc)
    return size


def batch_size_bound(value_lengths: I64, key_lengths: I64) -> I64:
    """Per record, an upper bound of its encoded bytes in a bulk batch of one timestamp.

    Exact for the record's own fields; the offset delta is bounded by 3 bytes, so the
    bound holds for batches of fewer than ``MAX_BOUNDED_RECORDS`` records.
    """
    v = np.maximum(value_lengths, 0)
    k = np.maximum(key_lengths, 0)
    body = (
        4  # attributes, ts delta 0, header count, one offset-delta byte
        + 2  # at most two more offset-delta bytes
        + v + _sizes(_zigzag(value_lengths)) + k + _sizes(_zigzag(key_lengths))
    )
    return body + _sizes(_zigzag(body))


MAX_BOUNDED_RECORDS = 1 << 20  # zig-zag offset deltas below 2**21 take <= 3 bytes


class _BodyPlan:
    """Columns, timestamps and (uniform path) the run layout of one batch body."""

    def __init__(
        self,
        values: BytesInput,
        keys: BytesInput | None,
        timestamps: int | npt.NDArray[np.int64] | Sequence[int] | None,
        value_lengths: I64 | None = None,
        key_lengths: I64 | None = None,
    ) -> None:
        n = len(values)
        if n == 0:
            raise ValueError("a record batch needs at least one record")
        self.n = n
        self.vcol = _Column(values, n, "values", value_lengths)
        self.kcol = _Column(keys, n, "keys", key_lengths)
        if timestamps is None:
            timestamps = int(time.time() * 1000)
        if isinstance(timestamps, int | np.integer):
            self.base_ts = self.max_ts = int(timestamps)
            check_timestamp_range(self.base_ts, self.base_ts, self.max_ts)
            self.ts_zz = np.zeros(n, dtype=np.uint64)
        else:
            ts = np.asarray(timestamps, dtype=np.int64)
            if ts.shape != (n,):
                raise ValueError(f"{ts.shape} timestamps for {n} records")
            self.base_ts, self.max_ts = int(ts[0]), int(ts.max())
            check_timestamp_range(self.base_ts, int(ts.min()), self.max_ts)
            self.ts_zz = _zigzag(ts - ts[0])
        self.off_zz = np.arange(0, 2 * n, 2, dtype=np.uint64)
        self.runs: list[tuple[int, int, int, U8, int]] | None = None
        self.total = 0
        if self.vcol.uniform >= -1 and self.kcol.uniform >= -1:
            self._plan_uniform()

    def _plan_uniform(self) -> None:
        n = self.n
        self.s_ts, self.s_off = _sizes(self.ts_zz), _sizes(self.off_zz)
        signature = self.s_ts * 16 + self.s_off
        cuts = (np.flatnonzero(signature[1:] != signature[:-1]) + 1).tolist()
        if len(cuts) >= MAX_RUNS:
            return
        k_len, v_len = self.kcol.uniform, self.vcol.uniform
        self.k_prefix, self.v_prefix = _scalar_varint(k_len), _scalar_varint(v_len)
        fixed = (1 + len(self.k_prefix) + max(k_len, 0) + len(self.v_prefix)
                 + max(v_len, 0) + 1)  # fmt: skip
        runs = []
        total = 0
        for a, b in itertools.pairwise([0, *cuts, n]):
            body_len = fixed + int(self.s_ts[a]) + int(self.s_off[a])
            len_prefix = _scalar_varint(body_len)
            runs.append((a, b, total, len_prefix, len(len_prefix) + body_len))
            total += (b - a) * (len(len_prefix) + body_len)
        self.runs, self.total = runs, total

    def fill(self, out: U8 | None) -> U8:
        """Uniform path: write the body into ``out`` (``total`` bytes; new if None)."""
        assert self.runs is not None
        if out is None:
            out = np.empty(self.total, dtype=np.uint8)  # every byte is written below
        kcol, vcol = self.kcol, self.vcol
        k_len, v_len = kcol.uniform, vcol.uniform
        for a, b, start, len_prefix, size in self.runs:
            rows = out[start : start + (b - a) * size].reshape(b - a, size)
            c = len(len_prefix)
            rows[:, :c] = len_prefix
            rows[:, c] = 0  # attributes
            c += 1
            for zz, s in ((self.ts_zz, int(self.s_ts[a])), (self.off_zz, int(self.s_off[a]))):
                if s == 1:
                    rows[:, c] = zz[a:b]  # one-byte varints are the value itself
                else:
                    rows[:, c : c + s] = _varint_matrix(zz[a:b], s)
                c += s
            for col, prefix, length in ((kcol, self.k_prefix, k_len),
                                        (vcol, self.v_prefix, v_len)):  # fmt: skip
                rows[:, c : c + len(prefix)] = prefix
                c += len(prefix)
                if length > 0:
                    rows[:, c : c + length] = col.block()[a:b]
                    c += length
            rows[:, c] = 0  # header_count
        return out

    def general(self) -> bytes:
        return _encode_general(self.vcol, self.kcol, self.ts_zz, self.off_zz)


def _encode_general(vcol: _Column, kcol: _Column, ts_zz: U64, off_zz: U64) -> bytes:
    """Varints scattered into a glue buffer, sliced, interleaved with keys/values, joined."""
    n = len(ts_zz)
    k_zz, v_zz = _zigzag(kcol.lengths), _zigzag(vcol.lengths)
    s_ts, s_off, s_k, s_v = _sizes(ts_zz), _sizes(off_zz), _sizes(k_zz), _sizes(v_zz)
    body_len = (
        2 + s_ts + s_off + s_k + s_v + np.maximum(kcol.lengths, 0) + np.maximum(vcol.lengths, 0)
    )
    len_zz = _zigzag(body_len)
    s_len = _sizes(len_zz)
    # glue of record i: [previous header_count 0] length attr ts off key_len | value_len
    lead = np.ones(n, dtype=np.int64)
    lead[0] = 0
    a_size = lead + s_len + 1 + s_ts + s_off + s_k
    g_start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(a_size + s_v, out=g_start[1:])
    glue = np.zeros(int(g_start[-1]), dtype=np.uint8)
    p = g_start[:-1] + lead
    _put_varints(glue, p, len_zz, s_len)
    p = p + s_len + 1
    for zz, s in ((ts_zz, s_ts), (off_zz, s_off), (k_zz, s_k)):
        _put_varints(glue, p, zz, s)
        p = p + s
    _put_varints(glue, p, v_zz, s_v)
    raw = glue.tobytes()
    values = vcol.pieces()
    if kcol.items is None and kcol.matrix is None:  # all keys null: one glue piece per record
        cut = g_start.tolist()
        pieces: list[bytes] = [b""] * (2 * n + 1)
        pieces[0 : 2 * n : 2] = [raw[x:y] for x, y in itertools.pairwise(cut)]
        pieces[1 : 2 * n : 2] = values
    else:
        cut_arr = np.empty(2 * n + 1, dtype=np.int64)
        cut_arr[0::2] = g_start
        cut_arr[1::2] = g_start[:-1] + a_size
        cut = cut_arr.tolist()
        glues = [raw[x:y] for x, y in itertools.pairwise(cut)]
        pieces = [b""] * (4 * n + 1)
        pieces[0 : 4 * n : 4] = glues[0::2]
        pieces[1 : 4 * n : 4] = kcol.pieces()
        pieces[2 : 4 * n : 4] = glues[1::2]
        pieces[3 : 4 * n : 4] = values
    pieces[-1] = b"\x00"  # header_count of the last record
    return b"".join(pieces)


# -- decoding -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class BulkRecords:
    """Decoded batch: numpy columns plus zero-copy access to keys and values.

    ``*_offsets`` are positions in ``buffer`` (the caller's buffer); a ``*_lengths`` of -1
    means null (its offset is then where the data would start).  ``record_headers`` maps
    record index -> headers for the records that have any.
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


def decode_batch_bulk(buf: Buffer, pos: int = 0, validate: bool = True) -> BulkRecords:
    """Decode the batch at ``pos`` into numpy columns (validating it first by default)."""
    header = validate_batch(buf, pos) if validate else read_header(buf, pos)
    end = pos + header.size_in_bytes
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at position {pos} claims {header.size_in_bytes} bytes, "
            f"only {len(buf) - pos} available"
        )
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    data: U8 = np.frombuffer(view, dtype=np.uint8, count=end)
    count = header.record_count
    if count < 0 or count * MIN_RECORD_BYTES > end - pos - HEADER_SIZE:
        raise CorruptRecordError(  # checked before sizing arrays by a corrupt count
            f"batch at position {pos}: {count} records cannot fit in "
            f"{end - pos - HEADER_SIZE} bytes"
        )
    cols = _Columns(count)
    p, i = pos + HEADER_SIZE, 0
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
        p = _decode_general(data, view, p, end, i, count, cols)
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
    )


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


def _well_formed(cols: U8, int32: bool) -> npt.NDArray[np.bool_]:
    """Rows whose columns are one varint: continuation bits set except on the last byte."""
    last = cols[:, -1]
    ok = last < 0x80
    if cols.shape[1] > 1:
        ok &= (cols[:, :-1] >= 0x80).all(axis=1)
    if int32 and cols.shape[1] == 5:
        ok &= last <= 0x0F
    elif cols.shape[1] == 10:
        ok &= last <= 1
    return ok


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
    ok &= _well_formed(ts, int32=False) & _well_formed(off, int32=True)
    if not ok.all():
        m = int(np.argmin(ok))  # first row that differs; row 0 always matches
        ts, off = ts[:m], off[:m]
    row_start = p + size * np.arange(m, dtype=np.int64)
    cols.ts_delta[i : i + m] = _unzigzag(_cols_value(ts))
    cols.off_delta[i : i + m] = _unzigzag(_cols_value(off))
    cols.key_off[i : i + m] = row_start + layout.key[0]
    cols.key_len[i : i + m] = layout.key[1]
    cols.value_off[i : i + m] = row_start + layout.value[0]
    cols.value_len[i : i + m] = layout.value[1]
    return m


def _decode_general(
    data: U8, view: memoryview, p: int, end: int, i: int, count: int, cols: _Columns
) -> int:
    """Decode records ``i..count`` from ``p``: Python finds record starts, numpy the fields."""
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
    begin = np.array(starts, dtype=np.int64)
    limit = begin + np.array(lengths, dtype=np.int64)
    if lengths and min(lengths) < 1:
        raise CorruptRecordError("record too short for its attributes byte")
    ts_delta, q = _varints_at(data, begin + 1, limit, 10)
    off_delta, q = _varints_at(data, q, limit, 5)
    key_len, q = _varints_at(data, q, limit, 5)
    key_off = q
    q = _skip(q, key_len, limit)
    value_len, q = _varints_at(data, q, limit, 5)
    value_off = q
    q = _skip(q, value_len, limit)
    header_count, q = _varints_at(data, q, limit, 5)
    plain = header_count == 0
    if not (q[plain] == limit[plain]).all():
        raise CorruptRecordError("record declares more bytes than its fields use")
    for j in np.flatnonzero(~plain).tolist():
        headers, h_end = decode_record_headers(view, int(q[j]), int(header_count[j]), int(limit[j]))
        if h_end != int(limit[j]):
            raise CorruptRecordError("record declares more bytes than its fields use")
        cols.headers[i + j] = headers
    cols.ts_delta[i:] = ts_delta
    cols.off_delta[i:] = off_delta
    cols.key_off[i:] = key_off
    cols.key_len[i:] = key_len
    cols.value_off[i:] = value_off
    cols.value_len[i:] = value_len
    return p


def _skip(q: I64, lengths: I64, limit: I64) -> I64:
    """Positions after nullable byte fields of ``lengths`` (-1 = null) starting at ``q``."""
    if (lengths < -1).any():
        raise CorruptRecordError(f"invalid length {int(lengths.min())} in record")
    q = q + np.maximum(lengths, 0)
    if (q > limit).any():
        raise CorruptRecordError("record field runs past the end of its record")
    return q


def _varints_at(data: U8, pos: I64, limit: I64, max_bytes: int) -> tuple[I64, I64]:
    """Decode one varint at each ``pos`` (ending by ``limit``): (values, next positions).

    Works one byte column at a time over all records (1-D gathers), stopping after the
    longest varint present.
    """
    if (pos >= limit).any():
        raise CorruptRecordError("record field runs past the end of its record")
    last_index = len(data) - 1
    top = 0x0F if max_bytes == 5 else 0x01  # highest legal last byte of a full-width varint
    b = data[np.minimum(pos, last_index)]
    raw = (b & 0x7F).astype(np.uint64)
    size = np.ones(len(pos), dtype=np.int64)
    active = b >= 0x80
    for j in range(1, max_bytes):
        if not active.any():
            break
        b = data[np.minimum(pos + j, last_index)]
        raw |= ((b & 0x7F).astype(np.uint64) << np.uint64(7 * j)) * active
        size += active
        if j == max_bytes - 1 and (active & (b > top)).any():
            raise CorruptRecordError(f"varint overflows {32 if max_bytes == 5 else 64} bits")
        active &= b >= 0x80
    if active.any():
        raise CorruptRecordError(f"varint longer than {max_bytes} bytes")
    nxt = pos + size
    if (nxt > limit).any():
        raise CorruptRecordError("record field runs past the end of its record")
    return _unzigzag(raw), nxt
