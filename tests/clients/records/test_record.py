"""Per-record RecordBatch v2 path: round trips, Kafka compatibility, corruption, header ops."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from clients.protocol.errors import CorruptRecordError, ErrorCode, InvalidRecordError
from clients.records.batch import (
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    iter_batches,
    read_header,
    set_base_offset,
    set_partition_leader_epoch,
    validate_batch,
)
from clients.records.record import Record, RecordInput, build_batch, decode_batch
from clients.records.varint import decode_varint, decode_varint32, encode_varint
from tests.clients.records.strategies import expected_records, fix_crc, record_inputs

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SAMPLE: list[RecordInput] = [
    (b"key-0", b"value-0", 1_700_000_000_000, [("trace", b"abc"), ("null", None)]),
    (None, b"value-1", 1_700_000_000_005, []),
    (b"key-2", None, 1_699_999_999_990, []),
    (b"", b"", 1_700_000_000_001, [("", b"")]),
]


def kafka_python_batch(items: list, producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=producer[0],
        producer_epoch=producer[1], base_sequence=producer[2], batch_size=1 << 30,
    )
    for i, (key, value, ts, headers) in enumerate(items):
        assert builder.append(i, ts, key, value, headers) is not None
    return bytes(builder.build())


# -- round trips -----------------------------------------------------------------------


@SETTINGS
@given(record_inputs, st.integers(0, 1 << 40))
def test_round_trip_arbitrary_records(items: list, base_offset: int) -> None:
    batch = build_batch(items, base_offset=base_offset)
    header = validate_batch(batch)
    assert header.record_count == len(items)
    assert header.size_in_bytes == len(batch)
    assert header.base_timestamp == items[0][2]
    assert header.max_timestamp == max(r[2] for r in items)
    assert decode_batch(batch) == expected_records(items, base_offset)


def test_header_fields_are_written() -> None:
    batch = build_batch(SAMPLE, base_offset=42, partition_leader_epoch=7, producer_id=1234,
                        producer_epoch=3, base_sequence=99)
    h = read_header(batch)
    assert (h.base_offset, h.partition_leader_epoch, h.magic) == (42, 7, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (1234, 3, 99)
    assert (h.last_offset_delta, h.record_count, h.next_offset) == (3, 4, 46)
    assert h.last_sequence == 102
    assert len(batch) == h.size_in_bytes and HEADER_SIZE == 61


def test_empty_batch_and_timestamp_overflow_are_rejected() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])
    with pytest.raises(ValueError, match="int64"):
        build_batch([(None, b"a", -(1 << 63), []), (None, b"b", (1 << 63) - 1, [])])


# -- byte compatibility with kafka-python (an implementation no one here wrote) -----


@SETTINGS
@given(record_inputs)
def test_kafka_python_builds_the_same_bytes(items: list) -> None:
    ours = build_batch(items, partition_leader_epoch=0)  # kafka-python writes epoch 0
    assert ours == kafka_python_batch(items)


@SETTINGS
@given(record_inputs, st.integers(0, 1 << 40))
def test_kafka_python_reads_our_batches(items: list, base_offset: int) -> None:
    batch = build_batch(items, base_offset=base_offset, producer_id=77, producer_epoch=2,
                        base_sequence=10)
    records = MemoryRecords(batch)
    kbatch = records.next_batch()
    assert isinstance(kbatch, DefaultRecordBatch)
    assert kbatch.validate_crc()
    assert (kbatch.base_offset, kbatch.producer_id, kbatch.base_sequence) == (base_offset, 77, 10)
    got = [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in kbatch]
    assert got == expected_records(items, base_offset)
    assert records.next_batch() is None


@SETTINGS
@given(record_inputs)
def test_we_read_kafka_python_batches(items: list) -> None:
    batch = kafka_python_batch(items, producer=(5, 1, 0))
    header = validate_batch(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 0)
    assert decode_batch(batch) == expected_records(items)


def test_log_append_time_reads_max_timestamp_like_kafka_python() -> None:
    batch = bytearray(build_batch(SAMPLE, attributes=TIMESTAMP_TYPE_MASK))
    expected_ts = max(r[2] for r in SAMPLE)
    assert {r.timestamp for r in decode_batch(batch)} == {expected_ts}
    kbatch = MemoryRecords(bytes(batch)).next_batch()
    assert {r.timestamp for r in kbatch} == {expected_ts}


# -- corruption ----------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_flipped_byte_is_detected_or_only_changes_broker_fields(mask: int) -> None:
    """Bytes 0-7 (base_offset) and 12-15 (partition_leader_epoch) are outside the CRC by
    the format's design (the broker restamps them); a flip there changes only that field.
    Any other flip, including batch_length (8-11) and magic (16), must raise."""
    batch = build_batch(SAMPLE, base_offset=1000, partition_leader_epoch=3)
    good = decode_batch(batch)
    for i in range(len(batch)):
        bad = bytearray(batch)
        bad[i] ^= mask
        if i < 8:
            delta = struct.unpack_from(">q", bad)[0] - 1000
            assert delta != 0
            assert decode_batch(bad) == [r._replace(offset=r.offset + delta) for r in good]
        elif 12 <= i < 16:
            assert read_header(bad).partition_leader_epoch != 3
            assert decode_batch(bad) == good
        else:
            with pytest.raises(CorruptRecordError) as info:
                decode_batch(bad)
            assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_precise_errors() -> None:
    batch = build_batch(SAMPLE)
    with pytest.raises(CorruptRecordError, match="needs 61 bytes"):
        read_header(batch[:60])
    with pytest.raises(CorruptRecordError, match="only"):
        validate_batch(batch[:-1])
    bad = bytearray(batch)
    bad[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        validate_batch(bad)
    bad = bytearray(batch)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC-32C mismatch"):
        validate_batch(bad)
    bad = bytearray(batch)
    struct.pack_into(">i", bad, 8, 10)
    with pytest.raises(CorruptRecordError, match="smaller than the header"):
        read_header(bad)
    unknown_codec = bytearray(batch)
    unknown_codec[22] |= 5  # attributes' low byte: codec 5 is not a Kafka codec
    fix_crc(unknown_codec)
    with pytest.raises(InvalidRecordError, match="codec 5 is not supported") as info:
        validate_batch(unknown_codec)
    assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(CorruptRecordError, match="only"):
        decode_batch(batch[:-3], validate=False)


def test_record_framing_errors_after_crc_fixup() -> None:
    batch = bytearray(build_batch([(None, b"abc", 5, [])]))
    # record: len, attr, ts, off, key_len(-1), value_len, value, header_count
    assert batch[HEADER_SIZE + 4] == 0x01
    bad = bytearray(batch)
    bad[HEADER_SIZE + 4] = 0x03  # key length -2
    fix_crc(bad)
    with pytest.raises(CorruptRecordError, match="invalid length -2"):
        decode_batch(bad)
    bad = bytearray(batch)
    bad[-1] = 0x02  # header count 1, but no bytes left for it
    fix_crc(bad)
    with pytest.raises(CorruptRecordError):
        decode_batch(bad)
    bad = bytearray(batch)
    struct.pack_into(">i", bad, 57, 2)  # record_count 2 with one record
    struct.pack_into(">i", bad, 23, 1)
    fix_crc(bad)
    with pytest.raises(CorruptRecordError):
        decode_batch(bad)


# -- varints -------------------------------------------------------------------------


@given(st.integers(-(1 << 63), (1 << 63) - 1))
@settings(max_examples=200, deadline=None)
def test_varint_round_trip(value: int) -> None:
    out = bytearray()
    encode_varint(value, out)
    assert decode_varint(bytes(out) + b"\x99", 0) == (value, len(out))
    if -(1 << 31) <= value < (1 << 31):
        assert decode_varint32(bytes(out), 0) == (value, len(out))
    else:
        with pytest.raises(CorruptRecordError):
            decode_varint32(bytes(out), 0)


def test_varint_limits() -> None:
    with pytest.raises(CorruptRecordError, match="overflows 64 bits"):
        decode_varint(bytes([0xFF] * 9 + [0x02]), 0)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varint(bytes([0xFF] * 11), 0)
    with pytest.raises(CorruptRecordError, match="past the end"):
        decode_varint(b"\x80", 0)
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_varint32(bytes([0x80] * 5 + [0x00]), 0)
    with pytest.raises(CorruptRecordError, match="overflows 32 bits"):
        decode_varint32(bytes([0xFF] * 4 + [0x1F]), 0)


# -- broker-owned header fields ------------------------------------------------------


@SETTINGS
@given(record_inputs, st.integers(0, (1 << 62)), st.integers(-(1 << 31), (1 << 31) - 1))
def test_restamping_keeps_records_and_crc(items: list, offset: int, epoch: int) -> None:
    batch = bytearray(build_batch(items))
    body = bytes(batch[16:])
    set_base_offset(batch, offset)
    set_partition_leader_epoch(batch, epoch)
    assert bytes(batch[16:]) == body  # magic, CRC and records untouched
    header = validate_batch(batch)
    assert (header.base_offset, header.partition_leader_epoch) == (offset, epoch)
    assert decode_batch(batch) == expected_records(items, offset)


def test_iter_batches_and_restamp_at_position() -> None:
    first = build_batch(SAMPLE)
    second = build_batch(SAMPLE[:2], base_offset=4)
    log = bytearray(first + second)
    set_base_offset(log, 100, pos=len(first))
    set_partition_leader_epoch(log, 9, pos=len(first))
    found = list(iter_batches(log))
    assert [pos for pos, _ in found] == [0, len(first)]
    assert found[1][1].base_offset == 100 and found[1][1].partition_leader_epoch == 9
    assert decode_batch(log, len(first))[0].offset == 100
    with pytest.raises(CorruptRecordError):
        list(iter_batches(log[:-1]))
