"""Bulk RecordBatch v2 encoding: many header-less records encoded at once with numpy.

Same bytes as :func:`clients.records.build_batch` (record table in
:mod:`clients.records.record`); header and CRC are written by the shared
:func:`clients.records.batch.assemble_batch`, or in place by
:func:`encode_batch_bulk_into`.  Records are written without headers (header_count 0).

Record layout as the bulk path writes it (one row per record)::

    varint length | int8 attributes | varlong ts_delta | varint offset_delta |
    varint key_len | key | varint value_len | value | varint header_count (= 0)

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

Compression: with ``compression`` (a Kafka codec id, :mod:`clients.records.compression`)
the encoded records body is compressed as a whole before the header and CRC are written.

Costs: O(records + record bytes) with a small constant number of numpy calls per field
(per run on the uniform path), plus one compression pass when asked.  Functions are pure
and thread-safe; the caller's ``values``/``keys`` are only read.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from crc32c import crc32c

from clients.records.batch import (
    AFTER_CRC,
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    PREFIX,
    Buffer,
    assemble_batch,
)
from clients.records.bulk_varint import (
    I64,
    MAX_RUNS,
    U8,
    U64,
    put_varints,
    scalar_varint,
    varint_matrix,
    varint_sizes,
    zigzag,
)
from clients.records.compression import compress
from clients.records.record import check_timestamp_range, with_codec

BytesInput = Sequence[bytes | None] | npt.NDArray[Any]



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
    compression: int = 0,
) -> bytes:
    """Encode one batch of header-less records; same bytes as :func:`build_batch`.

    ``values`` / ``keys``: sequences of ``bytes`` or ``None`` (null), or a fixed-size
    ``S<n>`` array / 2-D uint8 array where every item is exactly ``n`` raw bytes (numpy's
    trailing-NUL stripping does not apply).  ``keys=None`` means all keys are null.
    ``timestamps``: one int for all, one per record, or ``None`` for the current time (ms).
    ``compression``: Kafka codec id for the records body (as in :func:`build_batch`).
    """
    codec = with_codec(attributes, compression)
    plan = _BodyPlan(values, keys, timestamps)
    body: Buffer = plan.general() if plan.runs is None else plan.fill(None).data
    return assemble_batch(
        compress(codec, body) if codec else body,
        record_count=plan.n,
        last_offset_delta=plan.n - 1,
        base_timestamp=plan.base_ts,
        max_timestamp=plan.max_ts,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        attributes=attributes | codec,
    )


def encode_batch_bulk_into(
    dest: memoryview | bytearray,
    values: BytesInput,
    keys: BytesInput | None = None,
    timestamps: int | npt.NDArray[np.int64] | Sequence[int] | None = None,
    *,
    value_lengths: I64 | None = None,
    key_lengths: I64 | None = None,
    compression: int = 0,
) -> int:
    """:func:`encode_batch_bulk` written straight into ``dest``; returns the batch size.

    Same bytes as ``encode_batch_bulk(values, keys, timestamps, compression=...)`` (base
    offset 0, no producer id) at ``dest[:size]``, without the intermediate copies: the
    uniform layouts are filled in place, then (compressed in place when asked) header and
    CRC are written in front.  ``value_lengths`` / ``key_lengths`` (``len`` of every
    item, -1 for None) may be passed when the caller already computed them.  ValueError
    when ``dest`` is too small, for the plain or the compressed body (nothing useful is
    left in it then).
    """
    codec = with_codec(0, compression)
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
    if codec:
        packed = compress(codec, view[HEADER_SIZE:size])
        size = HEADER_SIZE + len(packed)
        if size > len(view):
            raise ValueError(f"a {size}-byte compressed batch does not fit in {len(view)} bytes")
        view[HEADER_SIZE:size] = packed
    AFTER_CRC.pack_into(
        view, ATTRIBUTES_OFFSET, codec, plan.n - 1, plan.base_ts, plan.max_ts,
        NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, plan.n,
    )  # fmt: skip
    crc = crc32c(view[ATTRIBUTES_OFFSET:size])
    PREFIX.pack_into(view, 0, 0, size - LOG_OVERHEAD, NO_PARTITION_LEADER_EPOCH, MAGIC, crc)
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
        + v + varint_sizes(zigzag(value_lengths)) + k + varint_sizes(zigzag(key_lengths))
    )
    return body + varint_sizes(zigzag(body))


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
            self.ts_zz = zigzag(ts - ts[0])
        self.off_zz = np.arange(0, 2 * n, 2, dtype=np.uint64)
        self.runs: list[tuple[int, int, int, U8, int]] | None = None
        self.total = 0
        if self.vcol.uniform >= -1 and self.kcol.uniform >= -1:
            self._plan_uniform()

    def _plan_uniform(self) -> None:
        n = self.n
        self.s_ts, self.s_off = varint_sizes(self.ts_zz), varint_sizes(self.off_zz)
        signature = self.s_ts * 16 + self.s_off
        cuts = (np.flatnonzero(signature[1:] != signature[:-1]) + 1).tolist()
        if len(cuts) >= MAX_RUNS:
            return
        k_len, v_len = self.kcol.uniform, self.vcol.uniform
        self.k_prefix, self.v_prefix = scalar_varint(k_len), scalar_varint(v_len)
        fixed = (1 + len(self.k_prefix) + max(k_len, 0) + len(self.v_prefix)
                 + max(v_len, 0) + 1)  # fmt: skip
        runs = []
        total = 0
        for a, b in itertools.pairwise([0, *cuts, n]):
            body_len = fixed + int(self.s_ts[a]) + int(self.s_off[a])
            len_prefix = scalar_varint(body_len)
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
                    rows[:, c : c + s] = varint_matrix(zz[a:b], s)
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
    k_zz, v_zz = zigzag(kcol.lengths), zigzag(vcol.lengths)
    s_ts, s_off = varint_sizes(ts_zz), varint_sizes(off_zz)
    s_k, s_v = varint_sizes(k_zz), varint_sizes(v_zz)
    body_len = (
        2 + s_ts + s_off + s_k + s_v + np.maximum(kcol.lengths, 0) + np.maximum(vcol.lengths, 0)
    )
    len_zz = zigzag(body_len)
    s_len = varint_sizes(len_zz)
    # glue of record i: [previous header_count 0] length attr ts off key_len | value_len
    lead = np.ones(n, dtype=np.int64)
    lead[0] = 0
    a_size = lead + s_len + 1 + s_ts + s_off + s_k
    g_start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(a_size + s_v, out=g_start[1:])
    glue = np.zeros(int(g_start[-1]), dtype=np.uint8)
    p = g_start[:-1] + lead
    put_varints(glue, p, len_zz, s_len)
    p = p + s_len + 1
    for zz, s in ((ts_zz, s_ts), (off_zz, s_off), (k_zz, s_k)):
        put_varints(glue, p, zz, s)
        p = p + s
    put_varints(glue, p, v_zz, s_v)
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
