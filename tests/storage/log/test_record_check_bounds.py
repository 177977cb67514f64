"""The bounds of a leader's record check (storage/log/validator.py, issue 30 item 7).

Per batch, from its header before any decompression: at most ``max_batch_records``
records; once decompressing: at most ``max_batch_decompressed_bytes`` of output (the
decoder stops there).  Per Produce request (:class:`CheckBudget`, shared by its
partitions): records plus record headers, and inflated bytes, each within a budget, and
an event-loop share past which the check is deferred (:class:`CheckDeferred`) and redone
in full elsewhere.  Record headers are checked without being kept.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from clients.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    MessageTooLargeError,
)
from clients.records.batch import HEADER_SIZE
from clients.records.bulk_decode import decode_batch_bulk
from clients.records.bulk_encode import encode_batch_bulk
from clients.records.compression import GZIP, LZ4, SNAPPY, ZSTD, compress
from clients.records.record import (
    _encode_record,
    build_batch,
    decode_record_headers,
    skip_record_headers,
)
from clients.records.varint import encode_varint
from storage.log.validator import (
    CheckBudget,
    CheckDeferred,
    KeylessRecordError,
    LeaderCheck,
)
from tests.clients.records.strategies import fix_crc

MiB = 1 << 20
CHECK = LeaderCheck(1 * MiB)


def tiny(n: int, codec: int = ZSTD) -> bytes:
    return encode_batch_bulk(np.zeros((n, 1), dtype=np.uint8), timestamps=5, compression=codec)


def with_header_count(batch: bytes, count: int) -> bytes:
    """``batch`` with its header claiming ``count`` records (CRC fixed)."""
    out = bytearray(batch)
    struct.pack_into(">i", out, 23, count - 1)  # last_offset_delta
    struct.pack_into(">i", out, 57, count)
    fix_crc(out)
    return bytes(out)


def test_a_batch_over_max_batch_records_is_refused_from_its_header() -> None:
    over = tiny(1001)
    with pytest.raises(MessageTooLargeError, match="holds 1001 records, above "
                       "max_batch_records 1000") as info:
        LeaderCheck(MiB, max_batch_records=1000).run(over)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    LeaderCheck(MiB, max_batch_records=1001).run(over)
    # refused before decompressing: compressed bytes that are garbage do not matter
    garbage = bytearray(over)
    garbage[HEADER_SIZE:] = bytes(len(garbage) - HEADER_SIZE)
    fix_crc(garbage)
    with pytest.raises(MessageTooLargeError, match="max_batch_records"):
        LeaderCheck(MiB, max_batch_records=1000).run(garbage)
    with pytest.raises(CorruptRecordError, match="corrupt zstd"):
        LeaderCheck(MiB, max_batch_records=1001).run(garbage)


def test_an_uncompressed_count_its_bytes_cannot_hold_is_corrupt_not_too_large() -> None:
    lying = with_header_count(tiny(3, codec=0), 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="2147483647 records cannot fit in"):
        CHECK.run(lying)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_decompression_stops_at_max_batch_decompressed_bytes(codec: int) -> None:
    one_big = build_batch([(None, bytes(3 * MiB), 5, [])], compression=codec)
    with pytest.raises(MessageTooLargeError,
                       match=r"above the limit of 2097152 bytes|more than the limit of "
                       r"2097152 bytes") as info:
        LeaderCheck(4 * MiB, max_decompressed_bytes=2 * MiB).run(one_big)
    assert "(max_batch_decompressed_bytes)" in str(info.value)
    LeaderCheck(4 * MiB, max_decompressed_bytes=4 * MiB).run(one_big)


def test_a_gzip_stream_that_lies_about_its_size_is_stopped_at_the_limit() -> None:
    body = bytearray()
    _encode_record(body, 0, 0, None, bytes(3 * MiB), [])
    packed = bytearray(compress(GZIP, bytes(body)))
    packed[-4:] = struct.pack("<I", 100)  # ISIZE (the output guess) claims 100 bytes
    batch = bytearray(build_batch([(None, b"x", 5, [])]))[:HEADER_SIZE] + packed
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, GZIP)
    fix_crc(batch)
    with pytest.raises(MessageTooLargeError, match="gzip-compressed records decompress to "
                       "more than the limit of 1048576 bytes"):
        LeaderCheck(4 * MiB, max_decompressed_bytes=MiB).run(batch)


def test_a_bomb_claiming_few_records_is_refused_after_its_count() -> None:
    """10 records claimed, a million inside: the decoder reads 10 and refuses the rest
    (O(count) work, one bounded inflation)."""
    bomb = with_header_count(tiny(1_000_000), 10)
    with pytest.raises(CorruptRecordError, match="bytes after its last record") as info:
        CHECK.run(bomb)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    budget = CheckBudget(records=100, decompressed_bytes=64 * MiB)
    with pytest.raises(CorruptRecordError):
        CHECK.run(bomb, budget)
    assert budget.records == 90  # charged for what the header claims, not what is inside


def test_the_request_budget_counts_records_and_headers_across_batches() -> None:
    plain = build_batch([(None, b"v", 5, [])] * 40)
    headed = build_batch([(None, b"v", 5, [("a", b"1"), ("b", None)])] * 10, compression=LZ4)
    budget = CheckBudget(records=100, decompressed_bytes=64 * MiB)
    CHECK.run(plain + headed, budget)
    assert budget.records == 100 - 40 - 10 - 20
    with pytest.raises(MessageTooLargeError, match="holds 40 records, above the 30 records "
                       "and headers left of this request's max_produce_records"):
        CHECK.run(plain, budget)
    budget = CheckBudget(records=55, decompressed_bytes=64 * MiB)
    with pytest.raises(MessageTooLargeError, match=r"carry 20 record headers, above the "
                       r"limit of 5 \(records and headers left"):
        CHECK.run(plain + headed, budget)


def test_the_request_budget_bounds_what_its_batches_inflate_to() -> None:
    big = build_batch([(None, bytes(MiB), 5, [])], compression=ZSTD)
    budget = CheckBudget(records=100, decompressed_bytes=int(2.5 * MiB))
    CHECK.run(big + big, budget)
    with pytest.raises(MessageTooLargeError, match="max_produce_decompressed_bytes"):
        CHECK.run(big, budget)


def test_the_event_loop_share_defers_and_the_job_is_redone_whole() -> None:
    small = build_batch([(None, b"v" * 100, 5, [])] * 10)
    inflating = build_batch([(None, bytes(200_000), 5, [])], compression=ZSTD)
    budget = CheckBudget(records=1000, decompressed_bytes=64 * MiB, inline_bytes=64 << 10)
    CHECK.run(small, budget)
    assert budget.inline_bytes == (64 << 10) - len(small)
    with pytest.raises(CheckDeferred):  # inflates past the share: stopped there
        CHECK.run(inflating, budget)
    with pytest.raises(CheckDeferred):  # too large as sent
        CHECK.run(build_batch([(None, bytes(100_000), 5, [])]), budget)
    budget.inline_bytes = None
    CHECK.run(inflating, budget)  # off the loop: no share, checked to the end


def test_record_headers_are_checked_without_keeping_them() -> None:
    items = [(None, b"v", 5, [(f"k{j}", b"x" * j) for j in range(i % 4)]) for i in range(50)]
    batch = build_batch(items, compression=ZSTD)
    kept = decode_batch_bulk(batch)
    lean = decode_batch_bulk(batch, max_headers=73)
    assert kept.header_count == lean.header_count == sum(i % 4 for i in range(50)) == 73
    assert kept.record_headers and not lean.record_headers
    assert np.array_equal(kept.offsets, lean.offsets)
    with pytest.raises(MessageTooLargeError, match="73 record headers, above the limit of 72"):
        decode_batch_bulk(batch, max_headers=72)


def _headers(*fields: tuple[bytes | None, bytes | None]) -> bytes:
    out = bytearray()
    for key, value in fields:
        for item in (key, value):
            encode_varint(-1 if item is None else len(item), out)
            out += item or b""
    return bytes(out)


@pytest.mark.parametrize("raw, count", [
    (_headers((b"a", b"1"), (b"b", None)), 2),
    (_headers((None, b"1")), 1),  # null key
    (_headers((b"\xff\xfe", b"1")), 1),  # not utf-8
    (_headers((b"a", b"1")) + b"\x01", 2),  # runs past the end
    (b"\x05", 1),  # invalid length -3
    (_headers((b"a", b"1")), -1),  # negative count
    (_headers((b"a", b"123456")), 1),  # value past the end (end cut below)
])
def test_skipping_headers_accepts_and_refuses_what_decoding_does(raw: bytes, count: int) -> None:
    end = len(raw) - (3 if raw.endswith(b"123456") else 0)
    try:
        _, expected = decode_record_headers(raw, 0, count, end)
    except CorruptRecordError as exc:
        with pytest.raises(CorruptRecordError) as info:
            skip_record_headers(raw, 0, count, end)
        assert info.value.message == exc.message
        return
    assert skip_record_headers(raw, 0, count, end) == expected


@pytest.mark.parametrize("codec", [0, ZSTD])
def test_a_compacted_logs_check_refuses_keyless_records(codec: int) -> None:
    check = LeaderCheck(MiB, keys_of="t-0")
    check.run(build_batch([(b"k", b"v", 5, []), (b"k", None, 5, [])], compression=codec))
    keyless = build_batch([(b"k", b"v", 5, []), (None, b"v", 5, [])], compression=codec)
    with pytest.raises(KeylessRecordError, match=r"compacted topic t-0 cannot accept a record "
                       r"without a key \(batch at position 0, offset delta 1\)") as info:
        check.run(keyless)
    assert isinstance(info.value, InvalidRecordError)
    assert info.value.code == ErrorCode.INVALID_RECORD
    LeaderCheck(MiB).run(keyless)  # not compacted: fine
