"""Kafka RecordBatch v2 (magic 2): the unit stored on disk and carried on the wire.

The format and its codecs, one concept per module; this module re-exports their public
names so that ``from clients.records import ...`` keeps working everywhere:

- :mod:`clients.records_batch`: the 61-byte batch header (byte table), its constants,
  read/validate/walk/stamp operations and :func:`assemble_batch` (header + CRC);
- :mod:`clients.records_varint`: zig-zag varints of record fields;
- :mod:`clients.records_codec`: the record layout (byte table) and the simple
  per-record path, :func:`build_batch` and :func:`decode_batch`;
- :mod:`clients.records_bulk`: the vectorised path for many records at once (not
  re-exported here; it produces identical bytes).

Costs: those of the modules above (building or decoding is O(record bytes); validation
is one CRC-32C pass).  Thread/process safety: every function is pure and thread-safe.
Only uncompressed batches are supported.
"""

from __future__ import annotations

from clients.records_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
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
    TRANSACTIONAL_MASK,
    BatchHeader,
    Buffer,
    assemble_batch,
    iter_batches,
    read_header,
    set_base_offset,
    set_partition_leader_epoch,
    validate_batch,
)
from clients.records_codec import (
    Header,
    Record,
    RecordInput,
    _encode_record,
    build_batch,
    check_absolute,
    check_timestamp_range,
    decode_batch,
    decode_record_headers,
)
from clients.records_varint import decode_varint, decode_varint32, encode_varint

__all__ = [
    "ATTRIBUTES_OFFSET",
    "COMPRESSION_MASK",
    "CONTROL_MASK",
    "CRC_OFFSET",
    "HEADER_SIZE",
    "INT64_MAX",
    "INT64_MIN",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "BatchHeader",
    "Buffer",
    "Header",
    "Record",
    "RecordInput",
    "_encode_record",  # used by tests/clients/test_records_bulk.py
    "assemble_batch",
    "build_batch",
    "check_absolute",
    "check_timestamp_range",
    "decode_batch",
    "decode_record_headers",
    "decode_varint",
    "decode_varint32",
    "encode_varint",
    "iter_batches",
    "read_header",
    "set_base_offset",
    "set_partition_leader_epoch",
    "validate_batch",
]
