"""Transaction control records (Kafka's EndTransactionMarker): build and parse markers.

A transaction ends on every partition it wrote to with one *control batch*: a
RecordBatch v2 (:mod:`clients.records.batch`) whose attributes have bit 5 (control) and
bit 4 (transactional) set, that carries the producer id and epoch of the transaction,
base_sequence -1, and exactly one record.  That record's key and value are
(big-endian)::

    key    offset size  field              note
           0      2     version            int16, 0 (a reader accepts higher versions)
           2      2     type               int16, ControlType: 0 ABORT, 1 COMMIT
    value  0      2     version            int16, 0 (a reader accepts higher versions)
           2      4     coordinator_epoch  int32, epoch of the coordinator that wrote it

Bytes after these fields are ignored (a newer writer may append fields), as in Kafka;
fewer bytes, a negative version, a null key or value, or a type other than ABORT or COMMIT
raise :class:`~clients.protocol.errors.InvalidRecordError` (INVALID_RECORD, Kafka's
InvalidRecordException) naming what is wrong.  Other control types of Kafka (LEADER_CHANGE
2, SNAPSHOT_HEADER 3, SNAPSHOT_FOOTER 4: KRaft's metadata log) are not transaction markers
and are refused by :func:`parse_marker`.

:func:`build_marker_batch` produces one control batch at base offset 0, leader epoch -1,
CreateTime, uncompressed: ready for a log append, which assigns the offset and stamps the
leader epoch (both outside the CRC).

Costs: building or parsing a marker is O(1) (a ~80-byte batch, one CRC-32C pass).
Functions are pure and thread-safe.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from clients.protocol.errors import InvalidRecordError
from clients.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK
from clients.records.record import build_batch

CONTROL_KEY = struct.Struct(">hh")  # version, type
MARKER_VALUE = struct.Struct(">hi")  # version, coordinator_epoch
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0
MARKER_ATTRIBUTES = CONTROL_MASK | TRANSACTIONAL_MASK


class ControlType(IntEnum):
    """The type of a transaction marker (Kafka's ControlRecordType ids)."""

    ABORT = 0
    COMMIT = 1


def build_marker_batch(
    producer_id: int,
    producer_epoch: int,
    control_type: ControlType,
    coordinator_epoch: int,
    timestamp_ms: int,
) -> bytes:
    """One control batch ending ``producer_id``'s transaction with ``control_type``.

    Base offset 0 and leader epoch -1 (the log append assigns both); ValueError when a
    field does not fit its int width.
    """
    control_type = ControlType(control_type)
    try:
        key = CONTROL_KEY.pack(CONTROL_KEY_VERSION, control_type)
        value = MARKER_VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)
    except struct.error as exc:
        raise ValueError(f"marker field out of range: {exc}") from None
    return build_batch(
        [(key, value, timestamp_ms, ())],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        attributes=MARKER_ATTRIBUTES,
    )


def parse_marker(key: bytes | None, value: bytes | None) -> tuple[ControlType, int]:
    """``(type, coordinator_epoch)`` of a marker record's key and value.

    Raises :class:`InvalidRecordError` (INVALID_RECORD) when the key or value is null,
    shorter than its fields, has a negative version, or the type is not ABORT or COMMIT.
    """
    if key is None:
        raise InvalidRecordError("control record has a null key")
    if len(key) < CONTROL_KEY.size:
        raise InvalidRecordError(
            f"control record key has {len(key)} bytes, needs at least {CONTROL_KEY.size}"
        )
    key_version, type_id = CONTROL_KEY.unpack_from(key)
    if key_version < 0:
        raise InvalidRecordError(f"control record key version {key_version} is negative")
    if type_id not in (ControlType.ABORT, ControlType.COMMIT):
        raise InvalidRecordError(
            f"control record type {type_id} is not a transaction marker "
            f"(ABORT {ControlType.ABORT:d}, COMMIT {ControlType.COMMIT:d})"
        )
    if value is None:
        raise InvalidRecordError("transaction marker has a null value")
    if len(value) < MARKER_VALUE.size:
        raise InvalidRecordError(
            f"transaction marker value has {len(value)} bytes, needs at least "
            f"{MARKER_VALUE.size}"
        )
    value_version, coordinator_epoch = MARKER_VALUE.unpack_from(value)
    if value_version < 0:
        raise InvalidRecordError(f"transaction marker value version {value_version} is negative")
    return ControlType(type_id), coordinator_epoch
