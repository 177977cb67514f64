"""Transaction markers (clients.records.control): Kafka's control batch, round trips, junk."""

from __future__ import annotations

import struct

import pytest
from kafka.record import MemoryRecords

from clients.protocol.errors import ErrorCode, InvalidRecordError
from clients.records.batch import NO_SEQUENCE, validate_batch
from clients.records.control import ControlType, build_marker_batch, parse_marker
from clients.records.record import decode_batch


@pytest.mark.parametrize("control_type", list(ControlType))
def test_round_trip(control_type: ControlType) -> None:
    batch = build_marker_batch(4711, 3, control_type, 17, 1_700_000_000_000)
    header = validate_batch(batch)
    assert header.is_control and header.is_transactional
    assert header.attributes == 0x30
    assert (header.producer_id, header.producer_epoch) == (4711, 3)
    assert header.base_sequence == NO_SEQUENCE
    assert header.base_offset == 0 and header.partition_leader_epoch == -1
    assert header.record_count == 1 and header.last_offset_delta == 0
    (record,) = decode_batch(batch)
    assert record.timestamp == 1_700_000_000_000
    assert record.key == struct.pack(">hh", 0, int(control_type))
    assert record.value == struct.pack(">hi", 0, 17)
    assert parse_marker(record.key, record.value) == (control_type, 17)


def test_kafka_python_reads_it_as_a_control_record() -> None:
    """An independent reader (kafka-python) sees a control batch with an abort record."""
    records = MemoryRecords(build_marker_batch(9, 1, ControlType.ABORT, 5, 1000))
    batch = records.next_batch()
    assert batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert record.abort and record.version == 0


def test_newer_versions_and_trailing_bytes_are_accepted() -> None:
    """As in Kafka: a higher version is read by its known fields, extra bytes ignored."""
    assert parse_marker(struct.pack(">hh", 1, 1) + b"x", struct.pack(">hi", 3, 9) + b"yz") == (
        ControlType.COMMIT,
        9,
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, struct.pack(">hi", 0, 1), "null key"),
        (b"\x00\x00\x00", struct.pack(">hi", 0, 1), "key has 3 bytes, needs at least 4"),
        (struct.pack(">hh", -1, 0), struct.pack(">hi", 0, 1), "key version -1 is negative"),
        (struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 1), "type 2 is not a transaction marker"),
        (struct.pack(">hh", 0, -1), struct.pack(">hi", 0, 1), "type -1 is not"),
        (struct.pack(">hh", 0, 0), None, "null value"),
        (struct.pack(">hh", 0, 0), b"\x00\x00\x00\x00\x01", "value has 5 bytes, needs at least 6"),
        (struct.pack(">hh", 0, 1), struct.pack(">hi", -2, 1), "value version -2 is negative"),
    ],
)
def test_junk_is_refused_precisely(key: bytes | None, value: bytes | None, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message) as info:
        parse_marker(key, value)
    assert info.value.code == ErrorCode.INVALID_RECORD


def test_out_of_range_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="out of range"):
        build_marker_batch(1, 0, ControlType.COMMIT, 1 << 31, 0)
    with pytest.raises(ValueError):
        build_marker_batch(1, 0, 5, 0, 0)  # type: ignore[arg-type]
