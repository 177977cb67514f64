"""Kafka RecordBatch v2 (magic 2): the unit stored on disk and carried on the wire.

This module is the simple per-record path and the header-level operations the broker
needs (read, validate, stamp base offset and leader epoch).  The vectorised path for many
records at once lives in :mod:`clients.records_bulk` and produces identical bytes.

Batch layout (all integers big-endian, 61-byte header)::

    offset  size  field                 note
    0       8     base_offset           int64, assigned by the leader on append
    8       4     batch_length          int32, bytes after this field (total = 12 + this)
    12      4     partition_leader_epoch int32, stamped by the leader on append
    16      1     magic                 int8, always 2
    17      4     crc                   uint32 CRC-32C of bytes [21, end)
    21      2     attributes            int16: bits 0-2 compression, 3 timestamp type,
                                        4 transactional, 5 control
    23      4     last_offset_delta     int32
    27      8     base_timestamp        int64 ms
    35      8     max_timestamp         int64 ms
    43      8     producer_id           int64, -1 when not idempotent
    51      2     producer_epoch        int16, -1 when not idempotent
    53      4     base_sequence         int32, -1 when not idempotent
    57      4     record_count          int32
    61      ...   records

Each record: varint length (of what follows), int8 attributes (0), varlong
timestamp_delta, varint offset_delta, varint key_length (-1 = null) + key, varint
value_length (-1 = null) + value, varint header_count, then per header: varint key
length + utf-8 key, varint value length (-1 = null) + value.  Varints are zig-zag;
timestamp_delta is a varlong (<= 10 bytes, 64 bits), every other varint is an int32
field (<= 5 bytes, 32 bits) and a longer or wider one is corrupt.  Decoded offsets and
timestamps must fit in int64.  With LogAppendTime (attribute bit 3) every record's
timestamp reads as the batch's max_timestamp, as in Kafka.

The CRC does not cover base_offset, batch_length, partition_leader_epoch or magic, so
the broker restamps base offset and leader epoch in place without recomputing it.

Costs: building or decoding is O(record bytes); validation is one CRC-32C pass
(hardware-accelerated by the ``crc32c`` package).  Functions are pure and thread-safe.
Only uncompressed batches are supported; a compressed one is rejected with
UNSUPPORTED_COMPRESSION_TYPE-style :class:`InvalidRecordError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

from clients.errors import CorruptRecordError, InvalidRecordError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes not counted in batch_length
MAGIC = 2
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # 0 = CreateTime, 1 = LogAppendTime
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

# >q i i b I h i q q q h i i
_HEADER = struct.Struct(">qiibIhiqqqhii")
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. record_count (40 bytes)

Header = tuple[str, bytes | None]


class Record(NamedTuple):
    """One decoded record; ``offset`` and ``timestamp`` are absolute."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


Buffer = bytes | bytearray | memoryview


def read_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos`` (no CRC check); short or bad magic raises."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch header at position {pos} needs {HEADER_SIZE} bytes, "
            f"only {max(0, len(buf) - pos)} available"
        )
    fields = _HEADER.unpack_from(buf, pos)
    header = BatchHeader(*fields)
    if header.magic != MAGIC:
        raise CorruptRecordError(f"batch at position {pos}: magic {header.magic}, expected 2")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batch at position {pos}: batch_length {header.batch_length} is smaller "
            f"than the header ({HEADER_SIZE - LOG_OVERHEAD})"
        )
    return header


def validate_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Check length, magic, CRC-32C and header sanity of the batch at ``pos``."""
    header = read_header(buf, pos)
    end = pos + header.size_in_bytes
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at position {pos} claims {header.size_in_bytes} bytes, "
            f"only {len(buf) - pos} available"
        )
    view = memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]
    actual = crc32c(view)
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at position {pos}: CRC-32C mismatch (stored {header.crc:#010x}, "
            f"computed {actual:#010x})"
        )
    if header.record_count < 0 or header.last_offset_delta < 0:
        raise CorruptRecordError(
            f"batch at position {pos}: negative record_count or last_offset_delta"
        )
    if header.record_count > 0 and header.last_offset_delta < header.record_count - 1:
        raise CorruptRecordError(
            f"batch at position {pos}: last_offset_delta {header.last_offset_delta} "
            f"below record_count - 1 ({header.record_count - 1})"
        )
    if header.compression != 0:
        raise InvalidRecordError(
            f"batch at position {pos}: compression codec {header.compression} is not supported"
        )
    return header


def iter_batches(buf: Buffer, validate: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each batch in a buffer of consecutive batches.

    A trailing partial batch raises :class:`CorruptRecordError`, as does any invalid batch
    when ``validate`` is true.
    """
    pos = 0
    size = len(buf)
    while pos < size:
        header = validate_batch(buf, pos) if validate else read_header(buf, pos)
        if pos + header.size_in_bytes > size:
            raise CorruptRecordError(f"partial batch at position {pos}")
        yield pos, header
        pos += header.size_in_bytes


def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Overwrite base_offset in place (outside the CRC, so the batch stays valid)."""
    struct.pack_into(">q", buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, pos: int = 0) -> None:
    """Overwrite partition_leader_epoch in place (outside the CRC)."""
    struct.pack_into(">i", buf, pos + 12, epoch)


# -- varints -----------------------------------------------------------------------


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


# -- building ------------------------------------------------------------------------


RecordInput = tuple[bytes | None, bytes | None, int, Sequence[Header]]


def _encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> None:
    body = bytearray(b"\x00")  # attributes
    encode_varint(timestamp_delta, body)
    encode_varint(offset_delta, body)
    _encode_nullable_bytes(key, body)
    _encode_nullable_bytes(value, body)
    encode_varint(len(headers), body)
    for h_key, h_value in headers:
        _encode_nullable_bytes(h_key.encode("utf-8"), body)
        _encode_nullable_bytes(h_value, body)
    encode_varint(len(body), out)
    out += body


def _encode_nullable_bytes(data: bytes | None, out: bytearray) -> None:
    """varint length (-1 for null) followed by the bytes."""
    if data is None:
        encode_varint(-1, out)
    else:
        encode_varint(len(data), out)
        out += data


def build_batch(
    records: Iterable[RecordInput],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    attributes: int = 0,
) -> bytes:
    """Encode ``(key, value, timestamp_ms, headers)`` tuples as one batch (per record).

    An empty ``records`` raises ``ValueError``: Kafka never writes empty batches.
    """
    items = list(records)
    if not items:
        raise ValueError("a record batch needs at least one record")
    base_timestamp = items[0][2]
    max_timestamp = max(r[2] for r in items)
    check_timestamp_range(base_timestamp, min(r[2] for r in items), max_timestamp)
    body = bytearray()
    for delta, (key, value, timestamp, headers) in enumerate(items):
        _encode_record(body, delta, timestamp - base_timestamp, key, value, headers)
    return assemble_batch(
        body,
        record_count=len(items),
        last_offset_delta=len(items) - 1,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        attributes=attributes,
    )


def check_timestamp_range(base_timestamp: int, min_timestamp: int, max_timestamp: int) -> None:
    """Raise ``ValueError`` unless timestamps and their deltas to the base fit in int64."""
    if min_timestamp < INT64_MIN or max_timestamp > INT64_MAX:
        raise ValueError(f"timestamps must fit in int64, got [{min_timestamp}, {max_timestamp}]")
    if min_timestamp - base_timestamp < INT64_MIN or max_timestamp - base_timestamp > INT64_MAX:
        raise ValueError(
            f"timestamp deltas to the base timestamp {base_timestamp} do not fit in int64"
        )


def assemble_batch(
    records_body: Buffer,
    *,
    record_count: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    attributes: int = 0,
) -> bytes:
    """Prefix encoded records with a header and CRC (shared by both codec paths).

    The body is copied once (into the joined result); the CRC is chained over the header
    tail and the body instead of being computed over a copy.
    """
    body = memoryview(records_body).cast("B")
    head = bytearray(HEADER_SIZE)
    _AFTER_CRC.pack_into(
        head,
        ATTRIBUTES_OFFSET,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    crc = crc32c(body, crc32c(memoryview(head)[ATTRIBUTES_OFFSET:]))
    struct.pack_into(
        ">qiibI",
        head,
        0,
        base_offset,
        HEADER_SIZE + len(body) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        crc,
    )
    return b"".join((head, body))


# -- decoding ------------------------------------------------------------------------


def _read_bytes(buf: Buffer, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint32(buf, pos)
    if length < 0:
        if length != -1:
            raise CorruptRecordError(f"invalid length {length} in record")
        return None, pos
    if pos + length > end:
        raise CorruptRecordError("record field runs past the end of its record")
    return bytes(buf[pos : pos + length]), pos + length


def decode_record_headers(
    buf: Buffer, pos: int, count: int, end: int
) -> tuple[tuple[Header, ...], int]:
    """Decode ``count`` record headers at ``pos`` (none may pass ``end``): (headers, next_pos)."""
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    headers: list[Header] = []
    for _h in range(count):
        h_key, pos = _read_bytes(buf, pos, end)
        if h_key is None:
            raise CorruptRecordError("null header key")
        h_value, pos = _read_bytes(buf, pos, end)
        try:
            headers.append((h_key.decode("utf-8"), h_value))
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key is not utf-8: {exc}") from None
    return tuple(headers), pos


def check_absolute(base: int, delta: int, what: str) -> int:
    """``base + delta``, or :class:`CorruptRecordError` when it leaves int64."""
    value = base + delta
    if value < INT64_MIN or value > INT64_MAX:
        raise CorruptRecordError(f"record {what} {base} + {delta} overflows int64")
    return value


def decode_batch(buf: Buffer, pos: int = 0, validate: bool = True) -> list[Record]:
    """Decode every record of the batch at ``pos`` (validating it first by default).

    With LogAppendTime (attribute bit 3) every record's timestamp is the batch's
    max_timestamp, as in Kafka.  Lengths, offset deltas and header counts must be 32-bit
    varints (at most 5 bytes); absolute offsets and timestamps must fit in int64.
    """
    header = validate_batch(buf, pos) if validate else read_header(buf, pos)
    end = pos + header.size_in_bytes
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at position {pos} claims {header.size_in_bytes} bytes, "
            f"only {len(buf) - pos} available"
        )
    if header.record_count < 0:
        raise CorruptRecordError(f"batch at position {pos}: negative record_count")
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    p = pos + HEADER_SIZE
    out: list[Record] = []
    for _ in range(header.record_count):
        length, p = decode_varint32(buf, p)
        rec_end = p + length
        if length < 0 or rec_end > end:
            raise CorruptRecordError("record length runs past the end of the batch")
        p += 1  # record attributes
        ts_delta, p = decode_varint(buf, p)
        off_delta, p = decode_varint32(buf, p)
        key, p = _read_bytes(buf, p, rec_end)
        value, p = _read_bytes(buf, p, rec_end)
        count, p = decode_varint32(buf, p)
        headers, p = decode_record_headers(buf, p, count, rec_end)
        if p != rec_end:
            used = p - rec_end + length
            raise CorruptRecordError(f"record declares {length} bytes but uses {used}")
        timestamp = check_absolute(header.base_timestamp, ts_delta, "timestamp")
        if log_append_time:
            timestamp = header.max_timestamp
        offset = check_absolute(header.base_offset, off_delta, "offset")
        out.append(Record(offset, timestamp, key, value, headers))
    if p != end:
        raise CorruptRecordError(f"batch has {end - p} bytes after its last record")
    return out
