"""Compressed batches in the log: a leader append validates them (CRC, header,
decompressed records) and stores them exactly as sent; followers and recovery scans
accept them on the CRC; bad ones get Kafka's error codes and nothing is appended."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from clients.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    MessageTooLargeError,
    MiniKafkaError,
)
from clients.records.batch import HEADER_SIZE, iter_batches
from clients.records.compression import GZIP, LZ4, SNAPPY, ZSTD, compress, decompress
from clients.records.record import RecordInput, _encode_record, build_batch, decode_batch
from storage.config import LogConfig
from storage.log.log import Log
from storage.log.validator import validate_append_batches
from tests.clients.records.strategies import fix_crc

CODECS = [GZIP, SNAPPY, LZ4, ZSTD]
NAMES = {GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CONFIG = LogConfig(segment_bytes=64 << 10, index_interval_bytes=256)


def records(n: int, ts: int = 1000, tag: bytes = b"") -> list[RecordInput]:
    return [(b"key-%d" % (i % 4), b"payload %d %s " % (i, tag) * 8, ts + i,
             [("trace", b"t%d" % i)] if i % 5 == 0 else []) for i in range(n)]  # fmt: skip


def open_log(tmp_path: Path, **kw: object) -> Log:
    return Log.open(tmp_path / "topic-0", CONFIG, **kw)  # type: ignore[arg-type]


def stored(log: Log) -> bytes:
    return log.read(0, 10**9).read_bytes()


def batch_with_body(body: bytes, count: int, codec: int, compressed_body: bytes | None = None
                    ) -> bytearray:
    """A batch around ``body`` (plain records) compressed with ``codec``, header fields
    claiming ``count`` records; CRC valid."""
    packed = compress(codec, body) if compressed_body is None else compressed_body
    out = bytearray(build_batch([(None, b"x", 0, [])]))[:HEADER_SIZE] + packed
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, 21, codec)
    struct.pack_into(">i", out, 23, count - 1)
    struct.pack_into(">i", out, 57, count)
    fix_crc(out)
    return out


def test_leader_stores_compressed_batches_exactly_as_sent(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sent = [build_batch(records(30, tag=b"%d" % codec), compression=codec) for codec in CODECS]
    plain = build_batch(records(3))
    info = log.append_as_leader(sent[0] + plain + b"".join(sent[1:]), leader_epoch=4)
    assert (info.num_batches, info.num_records, info.last_offset) == (5, 123, 122)
    data = stored(log)
    positions = [pos for pos, _ in iter_batches(data)]  # CRCs still valid
    got = [data[p : p + h.size_in_bytes] for p, h in iter_batches(data)]
    expected = [sent[0], plain, *sent[1:]]
    for raw, original in zip(got, expected, strict=True):
        assert raw[16:] == original[16:]  # compressed bytes untouched; offset/epoch stamped
        assert struct.unpack_from(">i", raw, 12)[0] == 4
    offsets = [r.offset for p in positions for r in decode_batch(data, p)]
    assert offsets == list(range(123))
    assert [r.value for r in decode_batch(data, positions[2])] == [
        v for _, v, _, _ in records(30, tag=b"2")
    ]
    kafka_batches = MemoryRecords(data)  # an implementation no one here wrote reads them
    compressions = []
    while (kb := kafka_batches.next_batch()) is not None:
        assert kb.validate_crc()
        compressions.append(kb.compression_type)
        assert len(list(kb)) in (3, 30)
    assert compressions == [GZIP, 0, SNAPPY, LZ4, ZSTD]
    log.check_invariants()
    log.close()
    reopened = open_log(tmp_path, recovery_point=0)  # unclean: the scan accepts them too
    assert reopened.recovery_report.truncated_bytes == 0
    assert reopened.log_end_offset == 123 and stored(reopened) == data
    reopened.close()


@pytest.mark.parametrize("codec", CODECS)
def test_bad_compressed_batches_are_refused_and_nothing_is_appended(tmp_path: Path,
                                                                     codec: int) -> None:
    log = open_log(tmp_path)
    good = build_batch(records(10), compression=codec)
    body = decompress(codec, good[HEADER_SIZE:])
    truncated = batch_with_body(b"", 10, codec, compress(codec, body)[:-2])
    gapped = bytearray()
    for i in range(3):
        _encode_record(gapped, 2 * i, 0, None, b"v", [])  # offset deltas 0, 2, 4
    bad: list[tuple[bytes | bytearray, type[MiniKafkaError], ErrorCode, str]] = [
        (truncated, CorruptRecordError, ErrorCode.CORRUPT_MESSAGE,
         f"corrupt {NAMES[codec]}-compressed"),
        (batch_with_body(body, 11, codec), CorruptRecordError, ErrorCode.CORRUPT_MESSAGE,
         "batch ends after 10 of 11 records"),
        (batch_with_body(body + b"\x00", 10, codec), CorruptRecordError,
         ErrorCode.CORRUPT_MESSAGE, "bytes after its last record"),
        (batch_with_body(bytes(gapped), 3, codec), InvalidRecordError, ErrorCode.INVALID_RECORD,
         "compressed record 1 has offset delta 2"),
    ]  # fmt: skip
    for batch, error, code, message in bad:
        with pytest.raises(error, match=message) as info:
            log.append_as_leader(good + batch, leader_epoch=0)  # all-or-nothing
        assert info.value.code == code
        assert "batch at position" in str(info.value)
    assert log.log_end_offset == 0 and log.size_in_bytes == 0
    log.append_as_leader(good, leader_epoch=0)
    assert log.log_end_offset == 10
    log.close()


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codecs_are_unsupported_compression_type(tmp_path: Path, codec: int) -> None:
    log = open_log(tmp_path)
    batch = bytearray(build_batch(records(2)))
    batch[22] |= codec
    fix_crc(batch)
    for append in (lambda: log.append_as_leader(batch, 0), lambda: log.append_as_follower(batch)):
        with pytest.raises(InvalidRecordError, match=f"codec {codec} is not supported") as info:
            append()
        assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE == 76
    log.append_as_leader(build_batch(records(2), compression=ZSTD), 0)
    segment = log.active.log_path
    log.abandon()
    with open(segment, "ab") as f:  # a codec-7 batch in the file: recovery stops before it
        f.write(batch)
    reopened = open_log(tmp_path, recovery_point=0)
    assert reopened.log_end_offset == 2 and reopened.recovery_report.truncated_bytes == len(batch)
    reopened.close()


def test_zip_bombs_are_refused_with_the_decompression_limit() -> None:
    """MESSAGE_TOO_LARGE (not CORRUPT_MESSAGE, which clients retry): a producer splits."""
    bomb = build_batch([(None, bytes(8 << 20), 0, [])], compression=ZSTD)
    assert len(bomb) < 4096
    view = memoryview(bomb)
    with pytest.raises(MessageTooLargeError, match="above the limit of 1048576 bytes "
                       r"\(max_batch_decompressed_bytes\)") as info:
        validate_append_batches(view, 1 << 20, require_records=True,
                                max_decompressed_bytes=1 << 20)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert validate_append_batches(view, 1 << 20, require_records=True)[0][5] == 1


def test_followers_store_compressed_batches_on_the_crc(tmp_path: Path) -> None:
    """Followers take what the leader validated (as Kafka's do): CRC and header only."""
    log = open_log(tmp_path)
    leader_batch = bytearray(build_batch(records(5), base_offset=0, compression=LZ4))
    struct.pack_into(">i", leader_batch, 12, 3)  # the leader's epoch stamp
    not_decompressed = batch_with_body(b"", 4, GZIP, b"not gzip at all")
    struct.pack_into(">q", not_decompressed, 0, 5)
    info = log.append_as_follower(bytes(leader_batch) + bytes(not_decompressed))
    assert info.last_offset == 8 and stored(log) == bytes(leader_batch) + not_decompressed
    log.close()
