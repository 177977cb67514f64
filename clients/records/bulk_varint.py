"""Vectorised zig-zag varints for the bulk RecordBatch v2 codec (numpy, many at once).

Same encoding as :mod:`clients.records.varint` (7 value bits per byte, low group first,
high bit set on every byte but the last; zig-zag ``(n << 1) ^ (n >> 63)``), applied to
whole columns: sizes by one ``searchsorted`` against the byte-length thresholds, writing
and reading one byte column at a time over all records, or as ``(records, bytes)``
matrices when every varint of a column has the same size.  Decoding rejects what the
scalar path rejects (int32 fields longer than 5 bytes or wider than 32 bits, varlongs
longer than 10 bytes or wider than 64 bits) with :class:`CorruptRecordError`.

Costs: O(records x varint bytes) in a constant number of numpy calls per byte column.
Functions are pure and thread-safe (they write only into arrays the caller passes).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from clients.protocol.errors import CorruptRecordError
from clients.records.varint import encode_varint

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
U8 = npt.NDArray[np.uint8]
# tuning shared by the encoder and the decoder (here: the module both import)
MAX_RUNS = 8  # runs of identical layout tried before switching to the general path
_THRESHOLDS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)


def zigzag(x: I64) -> U64:
    return ((x << 1) ^ (x >> 63)).view(np.uint64)


def unzigzag(raw: U64) -> I64:
    return (raw >> np.uint64(1)).view(np.int64) ^ -(raw & np.uint64(1)).view(np.int64)


def varint_sizes(zz: U64) -> I64:
    """Byte length of each varint (1..10)."""
    return np.searchsorted(_THRESHOLDS, zz, side="right").astype(np.int64) + 1


def varint_matrix(zz: U64, size: int) -> U8:
    """The ``size``-byte varints of ``zz`` (all of that size) as a ``(n, size)`` matrix."""
    cols = (zz[:, None] >> _SHIFTS[:size]) & np.uint64(0x7F)
    cols[:, :-1] |= np.uint64(0x80)
    return cols.astype(np.uint8)


def put_varints(out: U8, pos: I64, zz: U64, size: I64) -> None:
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


def scalar_varint(value: int) -> U8:
    out = bytearray()
    encode_varint(value, out)
    return np.frombuffer(bytes(out), dtype=np.uint8)


def cols_value(cols: U8) -> U64:
    """Raw (still zig-zagged) value of well-formed varints laid out as matrix columns."""
    parts = (cols & 0x7F).astype(np.uint64) << _SHIFTS[: cols.shape[1]]
    return np.bitwise_or.reduce(parts, axis=1)


def well_formed(cols: U8, int32: bool) -> npt.NDArray[np.bool_]:
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


def varints_at(data: U8, pos: I64, limit: I64, max_bytes: int) -> tuple[I64, I64]:
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
    return unzigzag(raw), nxt
