"""RecordBatch v2 records, one at a time: build a batch from records and decode it back.

The simple per-record path; the vectorised path for many records at once
(:mod:`clients.records.bulk_encode`, :mod:`clients.records.bulk_decode`) produces
identical bytes.  The 61-byte batch header in front of the records is in
:mod:`clients.records.batch`.

Record layout (one after another after the header, ``record_count`` of them)::

    field             encoding                 note
    length            varint                   bytes of the record after this field
    attributes        int8                     always 0
    timestamp_delta   varlong                  to the batch's base_timestamp
    offset_delta      varint                   to the batch's base_offset
    key_length        varint                   -1 = null key
    key               key_length bytes
    value_length      varint                   -1 = null value
    value             value_length bytes
    header_count      varint
    headers           header_count times:      varint key length + utf-8 key,
                                               varint value length (-1 = null) + value

Varints are zig-zag (:mod:`clients.records.varint`); timestamp_delta is a varlong
(<= 10 bytes, 64 bits), every other varint is an int32 field (<= 5 bytes, 32 bits) and
a longer or wider one is corrupt.  Decoded offsets and timestamps must fit in int64.
With LogAppendTime (attribute bit 3) every record's timestamp reads as the batch's
max_timestamp, as in Kafka.

Compression (:mod:`clients.records.compression`): the whole records section above is
what gets compressed; :func:`build_batch` compresses it when given ``compression`` and
:func:`decode_batch` decompresses it (bounded by ``max_bytes``) before reading records.

Costs: building or decoding is O(record bytes), one Python step per field, plus one
(de)compression pass and copy for a compressed batch.  Functions are pure and
thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from clients.protocol.errors import CorruptRecordError
from clients.records.batch import (
    COMPRESSION_MASK,
    INT64_MAX,
    INT64_MIN,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Buffer,
    assemble_batch,
    read_header,
    validate_batch,
)
from clients.records.compression import (
    MAX_DECOMPRESSED_BYTES,
    check_codec,
    compress,
    plain_records,
)
from clients.records.varint import decode_varint, decode_varint32, encode_varint

Header = tuple[str, bytes | None]


class Record(NamedTuple):
    """One decoded record; ``offset`` and ``timestamp`` are absolute."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


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
    compression: int = 0,
) -> bytes:
    """Encode ``(key, value, timestamp_ms, headers)`` tuples as one batch (per record).

    ``compression``: Kafka codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd) applied
    to the records section, also set in the attributes' bits 0-2 (codec bits already in
    ``attributes`` count as the codec when ``compression`` is 0).  An empty ``records``
    raises ``ValueError``: Kafka never writes empty batches.
    """
    codec = with_codec(attributes, compression)
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
        compress(codec, body) if codec else body,
        record_count=len(items),
        last_offset_delta=len(items) - 1,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        attributes=attributes | codec,
    )


def with_codec(attributes: int, compression: int) -> int:
    """The codec a batch is built with: ``compression`` or the codec bits of
    ``attributes`` (ValueError when both name different codecs; codecs 5-7 raise
    InvalidRecordError with UNSUPPORTED_COMPRESSION_TYPE)."""
    in_attributes = attributes & COMPRESSION_MASK
    if compression and in_attributes and compression != in_attributes:
        raise ValueError(f"compression={compression} but the attributes name codec {in_attributes}")
    codec = compression or in_attributes
    check_codec(codec)
    return codec


def check_timestamp_range(base_timestamp: int, min_timestamp: int, max_timestamp: int) -> None:
    """Raise ``ValueError`` unless timestamps and their deltas to the base fit in int64."""
    if min_timestamp < INT64_MIN or max_timestamp > INT64_MAX:
        raise ValueError(f"timestamps must fit in int64, got [{min_timestamp}, {max_timestamp}]")
    if min_timestamp - base_timestamp < INT64_MIN or max_timestamp - base_timestamp > INT64_MAX:
        raise ValueError(
            f"timestamp deltas to the base timestamp {base_timestamp} do not fit in int64"
        )


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


def skip_record_headers(buf: Buffer, pos: int, count: int, end: int) -> int:
    """Check ``count`` record headers at ``pos`` as :func:`decode_record_headers` does
    (the same errors, in the same order) without keeping them: O(1) memory whatever the
    count (a leader's record check); returns the position after the last."""
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    dv32 = decode_varint32
    for _h in range(count):
        n, pos = dv32(buf, pos)
        if n < 0:
            raise CorruptRecordError("null header key" if n == -1
                                     else f"invalid length {n} in record")
        if pos + n > end:
            raise CorruptRecordError("record field runs past the end of its record")
        key_at, pos = pos, pos + n
        key_end = pos
        n, pos = dv32(buf, pos)
        if n < -1:
            raise CorruptRecordError(f"invalid length {n} in record")
        if n >= 0:
            if pos + n > end:
                raise CorruptRecordError("record field runs past the end of its record")
            pos += n
        try:
            str(buf[key_at:key_end], "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key is not utf-8: {exc}") from None
    return pos


def check_absolute(base: int, delta: int, what: str) -> int:
    """``base + delta``, or :class:`CorruptRecordError` when it leaves int64."""
    value = base + delta
    if value < INT64_MIN or value > INT64_MAX:
        raise CorruptRecordError(f"record {what} {base} + {delta} overflows int64")
    return value


def decode_batch(
    buf: Buffer, pos: int = 0, validate: bool = True, max_bytes: int = MAX_DECOMPRESSED_BYTES
) -> list[Record]:
    """Decode every record of the batch at ``pos`` (validating it first by default).

    A compressed batch is decompressed first, to at most ``max_bytes`` (more, or a
    corrupt stream, is a :class:`CorruptRecordError` naming the codec).  With
    LogAppendTime (attribute bit 3) every record's timestamp is the batch's
    max_timestamp, as in Kafka.  Lengths, offset deltas and header counts must be 32-bit
    varints (at most 5 bytes); absolute offsets and timestamps must fit in int64.
    """
    header = validate_batch(buf, pos) if validate else read_header(buf, pos)
    if header.record_count < 0:
        raise CorruptRecordError(f"batch at position {pos}: negative record_count")
    records, p, end = plain_records(buf, pos, header, max_bytes)
    return _decode_records(records, p, end, header)


def _decode_records(buf: Buffer, p: int, end: int, header: BatchHeader) -> list[Record]:
    """The ``header.record_count`` records in ``buf[p:end]`` (exactly: no bytes after)."""
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_MASK)
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
