"""Zig-zag varints of RecordBatch v2 records (the per-record, pure-Python path).

Kafka writes every record field length, offset delta and header count as a zig-zag
varint of an int32 field (at most 5 bytes, 32 bits) and the timestamp delta as a
varlong (at most 10 bytes, 64 bits): 7 value bits per byte, least significant group
first, the high bit set on every byte but the last; zig-zag maps n to ``(n << 1) ^
(n >> 63)`` so small negative numbers stay short.  A longer or wider encoding is
corrupt.  The vectorised counterparts are in :mod:`clients.records.bulk_varint`.

Costs: O(bytes of the varint) each.  Functions are pure and thread-safe.
"""

from __future__ import annotations

from clients.protocol.errors import CorruptRecordError
from clients.records.batch import Buffer


def encode_varint(value: int, out: bytearray) -> None:
    """Append the zig-zag varint of ``value`` (64-bit range) to ``out``."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def decode_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varlong (at most 10 bytes, 64 bits) at ``pos``: ``(value, next_pos)``.

    Bits beyond 64 (a 10th byte above 1) raise :class:`CorruptRecordError`, so every value
    returned fits in int64.
    """
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise CorruptRecordError("varint runs past the end of the batch")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
    if result >> 64:
        raise CorruptRecordError("varlong overflows 64 bits")
    return (result >> 1) ^ -(result & 1), pos


def decode_varint32(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varint of an int32 field (at most 5 bytes, 32 bits) at ``pos``.

    Kafka writes lengths, offset deltas and header counts as 32-bit varints; longer or
    wider encodings raise :class:`CorruptRecordError`.
    """
    end = len(buf)
    if pos < end:
        b = buf[pos]
        if b < 0x80:  # one-byte fast path: the common case
            return (b >> 1) ^ -(b & 1), pos + 1
    result = 0
    for shift in range(0, 35, 7):
        if pos >= end:
            raise CorruptRecordError("varint runs past the end of the batch")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result >> 32:
                raise CorruptRecordError("varint overflows 32 bits")
            return (result >> 1) ^ -(result & 1), pos
    raise CorruptRecordError("varint of an int32 field longer than 5 bytes")
