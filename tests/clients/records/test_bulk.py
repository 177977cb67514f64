"""Bulk (numpy) RecordBatch v2 path: same bytes as the per-record path, same decoding,
zero-copy values, Kafka compatibility and robustness against malformed records."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords

from clients.protocol.errors import CorruptRecordError
from clients.records.batch import HEADER_SIZE, TIMESTAMP_TYPE_MASK, assemble_batch, read_header
from clients.records.bulk_decode import (
    BulkRecords,
    concat_bulk,
    decode_batch_bulk,
    records_well_formed,
)
from clients.records.bulk_encode import (
    batch_size_bound,
    encode_batch_bulk,
    encode_batch_bulk_into,
    item_lengths,
)
from clients.records.record import Record, _encode_record, build_batch, decode_batch
from tests.clients.records.strategies import (
    expected_records,
    fix_crc,
    plain_record_inputs,
    record_inputs,
)
from tests.clients.records.test_record import SAMPLE, kafka_python_batch

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def bulk_encode(items: list, **kwargs: int) -> bytes:
    keys = [k for k, _, _, _ in items]
    return encode_batch_bulk(
        [v for _, v, _, _ in items],
        None if all(k is None for k in keys) else keys,
        np.array([ts for _, _, ts, _ in items], dtype=np.int64),
        **kwargs,
    )


def as_records(bulk: BulkRecords) -> list[Record]:
    return bulk.to_records()


# -- identical bytes and round trips -------------------------------------------------


@SETTINGS
@given(plain_record_inputs, st.integers(0, 1 << 40), st.integers(-1, 1 << 20))
def test_bulk_encode_gives_the_per_record_bytes(items: list, base_offset: int,
                                                 epoch: int) -> None:
    ours = bulk_encode(items, base_offset=base_offset, partition_leader_epoch=epoch,
                       producer_id=3, producer_epoch=1, base_sequence=8)
    assert ours == build_batch(items, base_offset=base_offset, partition_leader_epoch=epoch,
                               producer_id=3, producer_epoch=1, base_sequence=8)
    assert as_records(decode_batch_bulk(ours)) == expected_records(items, base_offset)


@SETTINGS
@given(
    st.integers(1, 300),
    st.integers(0, 40),
    st.integers(-1, 6),
    st.sampled_from(["same", "increasing", "random"]),
    st.data(),
)
def test_uniform_layouts_both_paths(n: int, value_size: int, key_size: int, ts_kind: str,
                                    data: st.DataObject) -> None:
    """Equal-size values (the fast encode/decode runs), for list and array inputs."""
    base = 1_700_000_000_000
    if ts_kind == "same":
        ts = np.full(n, base, dtype=np.int64)
    elif ts_kind == "increasing":
        ts = base + np.arange(n, dtype=np.int64) * data.draw(st.integers(1, 300))
    else:
        ts = np.array(data.draw(st.lists(st.integers(0, 1 << 45), min_size=n, max_size=n)))
    values = [bytes([i % 251]) * value_size for i in range(n)]
    keys = None if key_size < 0 else [bytes([i % 7]) * key_size for i in range(n)]
    per_record = build_batch(
        [(None if keys is None else keys[i], values[i], int(ts[i]), ()) for i in range(n)]
    )
    assert encode_batch_bulk(values, keys, ts) == per_record
    value_array = np.frombuffer(b"".join(values), dtype=f"S{value_size}") if value_size else (
        np.zeros((n, 0), dtype=np.uint8)
    )
    key_array = None if keys is None else np.frombuffer(b"".join(keys) or bytes(0),
                                                        dtype=np.uint8).reshape(n, key_size)
    assert encode_batch_bulk(value_array, key_array, ts) == per_record
    assert as_records(decode_batch_bulk(per_record)) == decode_batch(per_record)


@SETTINGS
@given(plain_record_inputs, st.booleans())
def test_encode_into_a_buffer_gives_the_same_bytes(items: list, one_timestamp: bool) -> None:
    """encode_batch_bulk_into == encode_batch_bulk, uniform and general layouts alike, and
    the size bound (one timestamp for the batch) holds for every record."""
    values = [v for _, v, _, _ in items]
    keys = [k for k, _, _, _ in items]
    key_arg = None if all(k is None for k in keys) else keys
    ts: int | np.ndarray = (items[0][2] if one_timestamp
                            else np.array([t for _, _, t, _ in items], dtype=np.int64))
    expected = encode_batch_bulk(values, key_arg, ts)
    dest = bytearray(b"\xee" * (len(expected) + 7))
    size = encode_batch_bulk_into(dest, values, key_arg, ts, value_lengths=item_lengths(values))
    assert size == len(expected) and bytes(dest[:size]) == expected
    assert dest[size:] == b"\xee" * 7
    if one_timestamp:
        klen = np.full(len(values), -1, dtype=np.int64) if key_arg is None else item_lengths(keys)
        bound = int(batch_size_bound(item_lengths(values), klen).sum())
        assert len(expected) <= HEADER_SIZE + bound
    with pytest.raises(ValueError, match="does not fit"):
        encode_batch_bulk_into(bytearray(len(expected) - 1), values, key_arg, ts)


def test_encode_into_uniform_records_in_place() -> None:
    values = [b"v" * 100] * 5000
    expected = encode_batch_bulk(values, None, 1_700_000_000_000)
    dest = memoryview(bytearray(len(expected)))
    assert encode_batch_bulk_into(dest, values, None, 1_700_000_000_000) == len(expected)
    assert dest.tobytes() == expected
    bound = batch_size_bound(np.full(5000, 100), np.full(5000, -1))
    assert len(expected) <= HEADER_SIZE + int(bound.sum()) <= len(expected) + 2 * 5000


def test_trailing_nul_bytes_in_fixed_size_arrays_are_kept() -> None:
    values = np.array([b"ab\x00\x00", b"\x00\x00\x00\x00"], dtype="S4")
    batch = encode_batch_bulk(values, None, 7)
    assert [r.value for r in decode_batch(batch)] == [b"ab\x00\x00", b"\x00" * 4]


def test_scalar_and_default_timestamps() -> None:
    batch = encode_batch_bulk([b"a", None], [None, b"k"], 123)
    assert decode_batch(batch) == [Record(0, 123, None, b"a"), Record(1, 123, b"k", None)]
    records = decode_batch(encode_batch_bulk([b"x"] * 3))
    assert len({r.timestamp for r in records}) == 1 and records[0].timestamp > 1_600_000_000_000


def test_bad_inputs_raise_precise_errors() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch_bulk([])
    with pytest.raises(ValueError, match="2 keys for 3 records"):
        encode_batch_bulk([b"a"] * 3, [b"k"] * 2)
    with pytest.raises(ValueError, match="timestamps for 3 records"):
        encode_batch_bulk([b"a"] * 3, None, np.arange(2))
    with pytest.raises(TypeError):
        encode_batch_bulk(["text", "text"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="S<n> or 2-D uint8"):
        encode_batch_bulk(np.arange(3))
    with pytest.raises(ValueError, match="int64"):
        encode_batch_bulk([b"a", b"b"], None, [-(1 << 63), (1 << 63) - 1])


# -- decoded form --------------------------------------------------------------------


def test_decode_gives_numpy_columns_and_zero_copy_values() -> None:
    n = 500
    values = [i.to_bytes(4, "big") * 25 for i in range(n)]
    buf = bytearray(encode_batch_bulk(values, None, 1000 + np.arange(n), base_offset=10))
    bulk = decode_batch_bulk(buf)
    assert len(bulk) == n
    assert bulk.offsets.dtype == np.int64 and bulk.timestamps.dtype == np.int64
    assert np.array_equal(bulk.offsets, 10 + np.arange(n))
    assert np.array_equal(bulk.timestamps, 1000 + np.arange(n))
    assert np.all(bulk.key_lengths == -1) and np.all(bulk.value_lengths == 100)
    assert bulk.key(0) is None and bulk.keys() == [None] * n
    view = bulk.value(7)
    assert isinstance(view, memoryview) and bytes(view) == values[7]
    assert [bytes(v) for v in bulk.values() if v is not None] == values
    # zero copy: the view reads the caller's buffer, not a copy of it
    buf[int(bulk.value_offsets[7])] ^= 0xFF
    assert bytes(view) != values[7]
    del view, bulk


def test_headers_are_decoded_by_the_bulk_decoder() -> None:
    items = [(b"k", bytes(20), 5 + i, [("h", bytes([i]))] if i % 3 == 0 else [])
             for i in range(50)]
    batch = build_batch(items)
    bulk = decode_batch_bulk(batch)
    assert bulk.headers(0) == (("h", b"\x00"),) and bulk.headers(1) == ()
    assert as_records(bulk) == decode_batch(batch) == expected_records(items)


@SETTINGS
@given(record_inputs, st.integers(0, 1 << 40))
def test_bulk_decode_matches_per_record_decode(items: list, base_offset: int) -> None:
    batch = build_batch(items, base_offset=base_offset)
    assert as_records(decode_batch_bulk(batch)) == expected_records(items, base_offset)


def test_log_append_time_and_position() -> None:
    prefix = build_batch(SAMPLE)
    batch = build_batch(SAMPLE, attributes=TIMESTAMP_TYPE_MASK)
    bulk = decode_batch_bulk(prefix + batch, pos=len(prefix))
    assert as_records(bulk) == decode_batch(prefix + batch, len(prefix))
    assert set(bulk.timestamps.tolist()) == {max(r[2] for r in SAMPLE)}


def test_timestamp_types_per_record_survive_concat() -> None:
    created = decode_batch_bulk(build_batch(SAMPLE))
    appended = decode_batch_bulk(build_batch(SAMPLE, base_offset=len(SAMPLE),
                                             attributes=TIMESTAMP_TYPE_MASK))
    n = len(SAMPLE)
    assert created.timestamp_type_column().tolist() == [0] * n
    assert appended.timestamp_type_column().tolist() == [1] * n
    assert concat_bulk([created, appended]).timestamp_type_column().tolist() == [0] * n + [1] * n
    assert concat_bulk([created, appended], n + 1).timestamp_type_column().tolist() == [1] * (
        n - 1)
    assert concat_bulk([created, created]).timestamp_types is None  # CreateTime: no column


# -- compatibility with kafka-python ------------------------------------------------


@SETTINGS
@given(plain_record_inputs)
def test_kafka_python_reads_bulk_batches_and_bulk_reads_theirs(items: list) -> None:
    ours = bulk_encode(items, partition_leader_epoch=0)
    assert ours == kafka_python_batch(items)
    kbatch = MemoryRecords(ours).next_batch()
    assert kbatch.validate_crc()
    got = [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in kbatch]
    assert got == expected_records(items)


@SETTINGS
@given(record_inputs)
def test_bulk_decoder_reads_kafka_python_batches(items: list) -> None:
    assert as_records(decode_batch_bulk(kafka_python_batch(items))) == expected_records(items)


# -- corruption and malformed records ------------------------------------------------


@pytest.mark.parametrize("mask", [0x01, 0x40, 0xFF])
def test_every_flipped_byte_is_detected_or_only_changes_broker_fields(mask: int) -> None:
    """As for the per-record path: base_offset (0-7) and partition_leader_epoch (12-15)
    are outside the CRC by design; every other flipped byte raises CorruptRecordError."""
    batch = encode_batch_bulk([bytes([i]) * 30 for i in range(20)], None, 50 + np.arange(20),
                              base_offset=500, partition_leader_epoch=2)
    good = as_records(decode_batch_bulk(batch))
    for i in range(len(batch)):
        bad = bytearray(batch)
        bad[i] ^= mask
        if i < 8:
            delta = struct.unpack_from(">q", bad)[0] - 500
            assert as_records(decode_batch_bulk(bad)) == [
                r._replace(offset=r.offset + delta) for r in good
            ]
        elif 12 <= i < 16:
            bulk = decode_batch_bulk(bad)
            assert bulk.header.partition_leader_epoch != 2 and as_records(bulk) == good
        else:
            with pytest.raises(CorruptRecordError):
                decode_batch_bulk(bad)


def decode_both(buf: bytes | bytearray) -> list[Record] | None:
    """Both decoders' verdict; they must agree (records, or CorruptRecordError)."""
    try:
        expected = decode_batch(buf)
    except CorruptRecordError:
        expected = None
    try:
        got = as_records(decode_batch_bulk(buf))
    except CorruptRecordError:
        got = None
    assert got == expected
    return got


mutation = st.tuples(st.integers(0, 1 << 20), st.integers(0, 255))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        record_inputs,
        plain_record_inputs,
        st.builds(lambda n, size: [(None, bytes(size), 9, [])] * n,
                  st.integers(1, 120), st.integers(0, 200)),
    ),
    st.lists(mutation, min_size=1, max_size=4),
)
def test_mutated_records_with_fixed_crc_decode_or_raise_alike(items: list,
                                                             edits: list) -> None:
    """Mutations inside the records, CRC recomputed so the record parsers are exercised."""
    batch = bytearray(build_batch(items))
    body = len(batch) - HEADER_SIZE
    for where, value in edits:
        batch[HEADER_SIZE + where % body] = value
    fix_crc(batch)
    decode_both(batch)


@settings(max_examples=80, deadline=None)
@given(plain_record_inputs, st.integers(-3, 3), st.integers(-3, 3))
def test_wrong_record_count_or_length_raises_in_both(items: list, count_delta: int,
                                                     length_delta: int) -> None:
    batch = bytearray(build_batch(items) + bytes(max(length_delta, 0)))
    (count,) = struct.unpack_from(">i", batch, 57)
    struct.pack_into(">i", batch, 57, max(count + count_delta, 0))
    struct.pack_into(">i", batch, 23, max(count + count_delta - 1, 0))
    struct.pack_into(">i", batch, 8, len(batch) - 12 + min(length_delta, 0))
    fix_crc(batch)
    result = decode_both(batch)
    if count_delta or length_delta:
        assert result is None


def test_specific_malformed_varints_in_both() -> None:
    """Over-wide varints (6-byte int32, 65-bit varlong) and an overlong-but-legal one."""
    batch = bytearray(build_batch([(None, b"v", 1, [])] * 3))
    rec = HEADER_SIZE
    # record 0: length, attr, ts(1 byte), off, key_len, value_len, value, hdr count
    assert batch[rec + 2] == 0x00  # ts delta 0
    cases = [
        bytes([0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),  # 6-byte offset delta (int32 field)
        bytes([0xFF] * 4 + [0x1F]),  # offset delta over 32 bits
    ]
    for wide in cases:
        bad = bytearray(batch[:rec]) + bytes([batch[rec] + 2 * (len(wide) - 1)])
        bad += batch[rec + 1 : rec + 3] + wide + batch[rec + 4 :]
        struct.pack_into(">i", bad, 8, len(bad) - 12)
        fix_crc(bad)
        assert decode_both(bad) is None
    overlong = bytearray(batch[:rec]) + bytes([batch[rec] + 2])
    overlong += batch[rec + 1 : rec + 2] + b"\x80\x00" + batch[rec + 3 :]  # ts 0 in 2 bytes
    struct.pack_into(">i", overlong, 8, len(overlong) - 12)
    fix_crc(overlong)
    assert decode_both(overlong) == decode_batch(batch)


def crafted_batch(offset_deltas: list[int], ts_deltas: list[int]) -> bytearray:
    """A batch with arbitrary offset/timestamp deltas (as after compaction)."""
    body = bytearray()
    for off, ts in zip(offset_deltas, ts_deltas, strict=True):
        _encode_record(body, off, ts, None, b"vv", ())
    return bytearray(assemble_batch(body, record_count=len(offset_deltas),
                                    last_offset_delta=max(offset_deltas),
                                    base_timestamp=0, max_timestamp=max(ts_deltas)))


def test_full_width_varints_in_later_records_of_a_run() -> None:
    """Row 0 of a fast-path run is parsed strictly in Python; later rows are checked by
    numpy: a 5-byte offset delta over 32 bits or a 10-byte timestamp delta over 64 bits
    there must still raise, in both decoders."""
    batch = crafted_batch([1 << 30] * 40, [-(1 << 62) - 1] * 40)
    assert decode_both(batch) is not None
    size = (len(batch) - HEADER_SIZE) // 40
    start = HEADER_SIZE + size * 5  # record 5: length(1) attr(1) ts(10) off(5) ...
    ts_last, off_last = start + 11, start + 16
    assert batch[ts_last] == 0x01 and batch[off_last] == 0x08
    for where, value in ((ts_last, 0x03), (off_last, 0x18)):
        bad = bytearray(batch)
        bad[where] = value
        fix_crc(bad)
        assert decode_both(bad) is None
    gaps = crafted_batch([0, 5, 9, 1000, 70000], [0, -5, 1 << 40, 3, 3])
    assert [r.offset for r in decode_both(gaps) or []] == [0, 5, 9, 1000, 70000]


@pytest.mark.parametrize("timestamps", ["increasing", "random"])
def test_decode_from_a_memoryview_slice(timestamps: str) -> None:
    """Positions are relative to the view given, even when it is a slice of a bigger
    buffer (as a fetch response or a log segment read gives)."""
    rng = np.random.default_rng(5)
    ts = np.arange(100) if timestamps == "increasing" else rng.integers(0, 1 << 40, 100)
    batch = encode_batch_bulk([bytes([i]) * (i % 7) for i in range(100)], None, ts)
    outer = bytearray(b"x" * 13 + batch + b"y" * 5)
    view = memoryview(outer)[13 : 13 + len(batch)]
    bulk = decode_batch_bulk(view)
    assert as_records(bulk) == decode_batch(batch)
    assert bytes(bulk.value(6) or b"") == bytes([6]) * 6
    del bulk, view


@pytest.mark.parametrize("count", [-1, (1 << 31) - 1, 3])
@pytest.mark.parametrize("validate", [True, False])
def test_impossible_record_count_raises_before_allocating(count: int, validate: bool) -> None:
    batch = bytearray(build_batch([(None, b"", 1, [])] * 2))
    struct.pack_into(">i", batch, 57, count)
    struct.pack_into(">i", batch, 23, max(count - 1, 0))
    fix_crc(batch)
    for decode in (decode_batch, decode_batch_bulk):
        with pytest.raises(CorruptRecordError):
            decode(batch, 0, validate)


# -- records_well_formed: the leader's check without decoding ------------------------------

INT64 = (-(1 << 63), (1 << 63) - 1)


def proven(batch: bytes | bytearray, window: tuple[int, int] | None = None) -> bool:
    h = read_header(batch, 0)
    return records_well_formed(batch, HEADER_SIZE, len(batch), h.record_count, h.base_offset,
                               h.base_timestamp, window)


uniform_inputs = st.builds(
    lambda n, size, key, step: [(key, bytes([i % 251]) * size, 1_000 + i * step, [])
                                for i in range(n)],
    st.integers(1, 150), st.integers(0, 150), st.none() | st.binary(min_size=1, max_size=12),
    st.sampled_from([0, 1, 70, 10**6]),
)
windows = st.none() | st.tuples(st.integers(-(1 << 40), 1 << 40), st.integers(0, 1 << 30)).map(
    lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(uniform_inputs, record_inputs, plain_record_inputs),
       st.lists(mutation, max_size=3), windows)
def test_proven_records_decode_with_consecutive_offsets_inside_the_window(
        items: list, edits: list, window: tuple[int, int] | None) -> None:
    """Whatever the fast check proves, the decoder accepts: offset deltas 0 .. count - 1
    and every timestamp inside the window (mutations inside the records, CRC fixed)."""
    batch = bytearray(build_batch(items))
    body = len(batch) - HEADER_SIZE
    for where, value in edits:
        batch[HEADER_SIZE + where % body] = value
    fix_crc(batch)
    if not proven(batch, window):
        return
    bulk = decode_batch_bulk(batch)
    assert (bulk.offsets - bulk.header.base_offset).tolist() == list(range(len(bulk)))
    low, high = window if window is not None else INT64
    assert all(low <= t <= high for t in bulk.timestamps.tolist())


@pytest.mark.parametrize("n", [1, 16, 64, 65, 300, 9000])
@pytest.mark.parametrize("step", [0, 3, 40])
def test_a_producer_batch_of_same_sized_records_is_proven(n: int, step: int) -> None:
    """The case the fast check exists for: offset deltas of 1, 2 and 3 bytes, timestamp
    deltas growing from 1 to 3 bytes inside the batch."""
    items = [(b"key-%06d" % i, bytes([i % 256]) * 40, 1_700_000_000_000 + i * step, [])
             for i in range(n)]
    batch = build_batch(items)
    assert proven(batch)
    last = 1_700_000_000_000 + (n - 1) * step
    assert proven(batch, (1_700_000_000_000, last))
    assert not proven(batch, (1_700_000_000_000, last - 1)) or n == 1 or step == 0
    assert not proven(batch, (1_700_000_000_001, 1 << 62))


def test_what_the_fast_check_leaves_to_the_decoder() -> None:
    """Not proven (the decoder decides): a wrong offset delta, headers; sizes that vary
    record to record take the general path and are proven."""
    wrong = crafted_batch([*range(20), 25, *range(21, 40)], [0] * 40)
    assert not proven(wrong) and decode_both(wrong) is not None
    wrong_late = crafted_batch([0, 1, 2, 4], [0] * 4)  # general path: the last one is off
    assert not proven(wrong_late) and decode_both(wrong_late) is not None
    headers = build_batch([(b"k", b"v", 5, [("h", b"x")])] * 30)
    assert not proven(headers) and decode_both(headers) is not None
    varied = build_batch([(b"k" * (i % 3), bytes(i), 5 + 90 * i, []) for i in range(300)])
    assert proven(varied) and decode_both(varied) is not None
    assert not proven(varied, (5, 5 + 90 * 298))  # the last timestamp is outside
