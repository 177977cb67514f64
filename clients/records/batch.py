"""RecordBatch v2 (magic 2) batch header: layout, constants and batch-level operations.

The batch is the unit stored on disk and carried on the wire.  This module reads,
validates, walks and stamps batch headers (what the broker needs without looking at
records) and writes a header plus CRC in front of an encoded records body
(:func:`assemble_batch`, shared by the per-record codec :mod:`clients.records.record` and
the bulk encoder :mod:`clients.records.bulk_encode`).  :data:`HEADER` (with its two halves
:data:`PREFIX` and :data:`AFTER_CRC`) is the one declaration of the header layout: every
reader and writer of batches in the code base uses it.

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

The record layout after the header is in :mod:`clients.records.record`.

The CRC does not cover base_offset, batch_length, partition_leader_epoch or magic, so
the broker restamps base offset and leader epoch in place without recomputing it.

Compression (attributes bits 0-2, Kafka's ids: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)
covers the records section only: the header stays plain, ``batch_length`` counts the
compressed bytes and the CRC covers them, so validating a batch never decompresses it.
Ids 5-7 are refused with UNSUPPORTED_COMPRESSION_TYPE (:func:`unsupported_compression`).
The codecs are in :mod:`clients.records.compression`.

Costs: reading a header is O(1); validation is one CRC-32C pass over the batch
(hardware-accelerated by the ``crc32c`` package); :func:`assemble_batch` copies the body
once.  Functions are pure and thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from crc32c import crc32c

from clients.protocol.errors import CorruptRecordError, ErrorCode, InvalidRecordError

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
COMPRESSION_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")  # names of codec ids 0-4
TIMESTAMP_TYPE_MASK = 0x08  # 0 = CreateTime, 1 = LogAppendTime
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

# The one declaration of the header layout; every reader and writer of batches uses these.
# HEADER: all 13 fields, base_offset .. record_count (61 bytes).
HEADER = struct.Struct(">qiibIhiqqqhii")
# PREFIX: base_offset, batch_length, partition_leader_epoch, magic, crc (21 bytes, not
# covered by the CRC); AFTER_CRC: attributes .. record_count (40 bytes, CRC-covered).
PREFIX = struct.Struct(">qiibI")
AFTER_CRC = struct.Struct(">hiqqqhii")
assert HEADER.size == PREFIX.size + AFTER_CRC.size == HEADER_SIZE


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
    fields = HEADER.unpack_from(buf, pos)
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
    """Check length, magic, CRC-32C and header sanity of the batch at ``pos``.

    A compressed batch is not decompressed here (its records are checked when decoded);
    a codec id above 4 raises InvalidRecordError with UNSUPPORTED_COMPRESSION_TYPE.
    """
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
    if header.compression >= len(COMPRESSION_CODECS):
        raise unsupported_compression(header.compression, pos)
    return header


def unsupported_compression(codec: int, pos: int | None = None) -> InvalidRecordError:
    """The error for a codec id Kafka does not define (5-7): UNSUPPORTED_COMPRESSION_TYPE."""
    where = "" if pos is None else f"batch at position {pos}: "
    return InvalidRecordError(
        f"{where}compression codec {codec} is not supported "
        f"(known: {', '.join(f'{i} {n}' for i, n in enumerate(COMPRESSION_CODECS))})",
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
    )


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
    AFTER_CRC.pack_into(
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
