"""Compressed RecordBatch v2: Kafka's four codecs (clients.records.compression) on the
per-record and bulk paths, with kafka-python (and the C libraries it uses: zlib, liblz4,
libzstd) as the oracle, Kafka's exact formats, bounded decompression and precise errors."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from clients.protocol.errors import CorruptRecordError, ErrorCode, InvalidRecordError
from clients.records.batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    read_header,
    validate_batch,
)
from clients.records.bulk_decode import concat_bulk, decode_batch_bulk
from clients.records.bulk_encode import encode_batch_bulk, encode_batch_bulk_into
from clients.records.compression import (
    GZIP,
    LZ4,
    MAX_DECOMPRESSED_BYTES,
    SNAPPY,
    XERIAL_BLOCK,
    XERIAL_HEADER,
    ZSTD,
    codec_name,
    compress,
    compress_batch,
    decompress,
    decompress_batch,
)
from clients.records.record import Record, RecordInput, build_batch, decode_batch
from tests.clients.records.strategies import (
    expected_records,
    fix_crc,
    plain_record_inputs,
    record_inputs,
)
from tests.clients.records.test_bulk import decode_both

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CODECS = [GZIP, SNAPPY, LZ4, ZSTD]
NAMES = {GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
codecs = st.sampled_from(CODECS)
payloads = st.one_of(
    st.binary(max_size=3000),
    st.builds(lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=40), st.integers(1, 3000)),
)
# kafka-python's encoders/decoders per codec (it needs python-snappy, lz4, zstandard)
KAFKA_PYTHON = {
    GZIP: (kafka_codec.has_gzip, kafka_codec.gzip_encode, kafka_codec.gzip_decode),
    SNAPPY: (kafka_codec.has_snappy, kafka_codec.snappy_encode, kafka_codec.snappy_decode),
    LZ4: (kafka_codec.has_lz4, kafka_codec.lz4_encode, kafka_codec.lz4_decode),
    ZSTD: (kafka_codec.has_zstd, kafka_codec.zstd_encode, kafka_codec.zstd_decode),
}


def kafka_python(codec: int) -> tuple:
    has, encode, decode = KAFKA_PYTHON[codec]
    if not has():
        pytest.skip(f"kafka-python has no {NAMES[codec]} library here (install the test extra)")
    return encode, decode


def sample(size: int, compressible: bool = True) -> bytes:
    rng = np.random.default_rng(size)
    if not compressible:
        return rng.bytes(size)
    words = [b"alpha ", b"beta ", b"gamma ", b"delta-", b"0123 ", b"{json}"]
    out = b"".join(words[i] for i in rng.integers(0, len(words), size // 4 + 1))
    return out[:size]


# -- codecs ---------------------------------------------------------------------------


@SETTINGS
@given(codecs, payloads)
def test_round_trip_and_exact_output_limit(codec: int, data: bytes) -> None:
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, packed, max_bytes=len(data)) == data  # the limit is inclusive
    if data:
        with pytest.raises(CorruptRecordError, match=f"{NAMES[codec]}-compressed records"):
            decompress(codec, packed, max_bytes=len(data) - 1)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, XERIAL_BLOCK - 1, XERIAL_BLOCK, XERIAL_BLOCK + 1,
                                  64 << 10, (64 << 10) + 1, 300_007])
def test_sizes_across_block_boundaries(codec: int, size: int) -> None:
    for data in (sample(size), sample(size, compressible=False)):
        packed = compress(codec, memoryview(bytearray(data)))  # any buffer is accepted
        assert decompress(codec, packed) == data
        assert decompress(codec, memoryview(packed)[0:]) == data


def test_none_is_the_identity_and_levels_are_honoured() -> None:
    data = sample(50_000)
    assert compress(0, data) == data and decompress(0, data) == data
    with pytest.raises(CorruptRecordError, match="none-compressed"):
        decompress(0, data, max_bytes=10)
    for codec, fast, slow in ((GZIP, 1, 9), (ZSTD, 1, 19)):
        assert len(compress(codec, data, level=slow)) <= len(compress(codec, data, level=fast))
        assert decompress(codec, compress(codec, data, level=fast)) == data


# -- Kafka's formats ------------------------------------------------------------------


def test_snappy_is_written_in_kafka_javas_xerial_framing() -> None:
    data = sample(3 * XERIAL_BLOCK + 100)
    packed = compress(SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + bytes([0, 0, 0, 1, 0, 0, 0, 1]) == XERIAL_HEADER
    pos, blocks = 16, []
    while pos < len(packed):
        (size,) = struct.unpack_from(">i", packed, pos)
        blocks.append(packed[pos + 4 : pos + 4 + size])
        pos += 4 + size
    assert pos == len(packed) and len(blocks) == 4  # one raw block per 32 KiB of input
    _, kafka_decode = kafka_python(SNAPPY)
    assert b"".join(kafka_decode(block) for block in blocks) == data
    assert compress(SNAPPY, b"") == XERIAL_HEADER  # snappy-java writes the header alone


def test_snappy_raw_blocks_and_xerial_variants_are_read() -> None:
    data = sample(100_000)
    kafka_encode, _ = kafka_python(SNAPPY)
    raw = kafka_encode(data, xerial_compatible=False)  # what librdkafka sends
    assert not raw.startswith(b"\x82SNAPPY")
    assert decompress(SNAPPY, raw) == data
    small_blocks = kafka_encode(data, xerial_compatible=True, xerial_blocksize=4096)
    assert decompress(SNAPPY, small_blocks) == data
    little_endian = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1) + small_blocks[16:]
    assert decompress(SNAPPY, little_endian) == data  # version ints are not checked
    twice = compress(SNAPPY, data[:5000]) + compress(SNAPPY, data[5000:])
    assert decompress(SNAPPY, twice) == data  # concatenated streams, as snappy-java reads


def test_lz4_frames_have_independent_blocks_as_kafka_java_needs() -> None:
    data = sample(200_000)
    packed = compress(LZ4, data)
    assert packed[:4] == b"\x04\x22\x4d\x18"
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 1 and flg & 0x20  # version 01, blocks independent
    assert not flg & 0x08 and not flg & 0x04  # no content size, no content checksum
    assert bd == 0x40  # 64 KiB blocks
    lz4_frame = pytest.importorskip("lz4.frame")
    assert lz4_frame.decompress(packed) == data
    for linked in (False, True):
        theirs = lz4_frame.compress(data, block_linked=linked, content_checksum=True,
                                    store_size=True)
        assert decompress(LZ4, theirs) == data


def test_zstd_and_gzip_read_what_the_reference_libraries_write() -> None:
    data = sample(300_000)
    zstandard = pytest.importorskip("zstandard")
    assert zstandard.ZstdDecompressor().decompress(compress(ZSTD, data)) == data
    no_size = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    streamed = no_size.compress(data) + no_size.flush()
    assert decompress(ZSTD, streamed) == data  # no declared size: the buffer grows
    frames = zstandard.ZstdCompressor().compress(data[:7]) + compress(ZSTD, data[7:])
    assert decompress(ZSTD, frames) == data
    assert gzip.decompress(compress(GZIP, data)) == data
    members = gzip.compress(data, mtime=0) + gzip.compress(b"tail", mtime=0)
    assert decompress(GZIP, members) == data + b"tail"  # the trailer's size undercounts


# -- kafka-python as the oracle ------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_codecs_read_ours_and_we_read_theirs(codec: int) -> None:
    kafka_encode, kafka_decode = kafka_python(codec)
    for data in (b"", b"x", sample(1000), sample(150_000), sample(70_000, compressible=False)):
        assert decompress(codec, kafka_encode(data)) == data
        if data or codec != SNAPPY:  # kafka-python takes a 16-byte xerial stream for raw
            assert kafka_decode(compress(codec, data)) == data  # (a records section never is)


def kafka_python_compressed(items: list, codec: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=0, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30,
    )  # fmt: skip
    for i, (key, value, ts, headers) in enumerate(items):
        assert builder.append(i, ts, key, value, headers) is not None
    return bytes(builder.build())


@SETTINGS
@given(codecs, record_inputs)
def test_kafka_python_batches_decode_on_both_paths(codec: int, items: list) -> None:
    kafka_python(codec)
    batch = kafka_python_compressed(items, codec)
    header = validate_batch(batch)
    assert header.compression in (0, codec)  # it sends plain what does not get smaller
    assert decode_batch(batch) == expected_records(items)
    assert decode_batch_bulk(batch).to_records() == expected_records(items)


@SETTINGS
@given(codecs, record_inputs, st.integers(0, 1 << 40))
def test_kafka_python_reads_our_compressed_batches(codec: int, items: list,
                                                    base_offset: int) -> None:
    kafka_python(codec)
    for batch in (build_batch(items, base_offset=base_offset, compression=codec),
                  compress_batch(build_batch(items, base_offset=base_offset), codec)):
        kbatch = MemoryRecords(batch).next_batch()
        assert kbatch.validate_crc() and kbatch.compression_type == codec
        got = [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in kbatch]
        assert got == expected_records(items, base_offset)


# -- batches --------------------------------------------------------------------------


@SETTINGS
@given(codecs, record_inputs, st.integers(0, 1 << 40))
def test_compressed_batch_round_trip_per_record(codec: int, items: list,
                                                base_offset: int) -> None:
    plain = build_batch(items, base_offset=base_offset, producer_id=9, producer_epoch=1,
                        base_sequence=4)
    batch = build_batch(items, base_offset=base_offset, producer_id=9, producer_epoch=1,
                        base_sequence=4, compression=codec)
    header, plain_header = validate_batch(batch), read_header(plain)
    assert header.compression == codec and header.size_in_bytes == len(batch)
    assert header.crc == crc32c(batch[ATTRIBUTES_OFFSET:])  # the CRC covers compressed bytes
    assert decompress(codec, batch[HEADER_SIZE:]) == plain[HEADER_SIZE:]
    for field in ("base_offset", "last_offset_delta", "base_timestamp", "max_timestamp",
                  "producer_id", "producer_epoch", "base_sequence", "record_count"):
        assert getattr(header, field) == getattr(plain_header, field)
    assert decode_batch(batch) == expected_records(items, base_offset)
    assert decompress_batch(batch) == plain
    assert decompress_batch(plain) == plain
    assert compress_batch(plain, codec) == batch


@SETTINGS
@given(codecs, plain_record_inputs)
def test_bulk_paths_give_the_per_record_bytes_and_records(codec: int, items: list) -> None:
    values = [v for _, v, _, _ in items]
    keys = [k for k, _, _, _ in items]
    ts = np.array([t for _, _, t, _ in items], dtype=np.int64)
    batch = encode_batch_bulk(values, keys, ts, compression=codec)
    assert batch == build_batch(items, compression=codec)
    bulk = decode_batch_bulk(batch)
    assert bulk.to_records() == expected_records(items)
    assert bulk.header.compression == codec and bulk.header.size_in_bytes == len(batch)
    dest = bytearray(len(batch) + 100 + 2 * sum(len(v or b"") + len(k or b"") + 20
                                                for k, v, _, _ in items))
    size = encode_batch_bulk_into(dest, values, keys, ts, compression=codec)
    assert bytes(dest[:size]) == batch


def test_bulk_encode_into_a_too_small_buffer_for_the_compressed_body() -> None:
    values = [np.random.default_rng(5).bytes(20_000)]  # incompressible
    plain_size = encode_batch_bulk_into(bytearray(1 << 16), values, None, 1)
    with pytest.raises(ValueError, match="compressed batch does not fit"):
        encode_batch_bulk_into(bytearray(plain_size), values, None, 1, compression=GZIP)


def test_uniform_values_decode_zero_copy_from_the_decompressed_bytes() -> None:
    values = np.frombuffer(sample(64 * 1000), dtype="S64")
    batch = encode_batch_bulk(values, None, 1_000, compression=ZSTD)
    assert len(batch) < len(values) * 64 // 4
    bulk = decode_batch_bulk(batch)
    assert bulk.values()[7] == values[7].tobytes()
    assert bulk.buffer.obj is not batch and bulk.buffer.nbytes > len(batch)


def test_codec_in_attributes_and_log_append_time() -> None:
    items: list[RecordInput] = [(None, b"v%d" % i, 100 + i, []) for i in range(10)]
    assert build_batch(items, attributes=GZIP) == build_batch(items, compression=GZIP)
    with pytest.raises(ValueError, match="attributes name codec 1"):
        build_batch(items, attributes=GZIP, compression=ZSTD)
    batch = build_batch(items, attributes=TIMESTAMP_TYPE_MASK, compression=LZ4)
    assert {r.timestamp for r in decode_batch(batch)} == {109}
    assert set(decode_batch_bulk(batch).timestamps.tolist()) == {109}


def test_concat_bulk_over_plain_and_compressed_batches() -> None:
    batches, items_all, base = [], [], 0
    for i, codec in enumerate([0, GZIP, 0, ZSTD, SNAPPY]):
        items: list[RecordInput] = [(None if j % 3 else b"k", b"v%d-%d" % (i, j), 1000 + j,
                  [("h", b"%d" % j)] if j == 2 else []) for j in range(5 + i)]
        batches.append(build_batch(items, base_offset=base, compression=codec))
        items_all.extend(items)
        base += len(items)
    response = b"".join(batches)
    positions = np.cumsum([0] + [len(b) for b in batches[:-1]]).tolist()
    parts = [decode_batch_bulk(response, p) for p in positions]
    joined = concat_bulk(parts)
    assert joined.to_records() == expected_records(items_all)
    assert joined.header == parts[0].header
    later = concat_bulk(parts, min_offset=7)
    assert later.to_records() == expected_records(items_all)[7:]
    assert later.headers(0) == (("h", b"2"),) and later.headers(1) == ()  # offsets 7, 8
    assert later.headers(6) == (("h", b"2"),)  # offset 13, in the zstd batch
    plain = [decode_batch_bulk(response, positions[i]) for i in (0, 2)]
    shared = concat_bulk(plain)  # one shared buffer: nothing copied
    assert shared.buffer is plain[0].buffer
    assert shared.to_records() == [r for part in plain for r in part.to_records()]
    with pytest.raises(ValueError, match="at least one"):
        concat_bulk([])


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codecs_are_unsupported_compression_type(codec: int) -> None:
    for call in (lambda: compress(codec, b"x"), lambda: decompress(codec, b"x"),
                 lambda: build_batch([(None, b"x", 0, [])], compression=codec)):
        with pytest.raises(InvalidRecordError, match=f"codec {codec} is not supported") as info:
            call()
        assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE == 76
    batch = bytearray(build_batch([(None, b"x", 0, [])]))
    batch[ATTRIBUTES_OFFSET + 1] |= codec
    fix_crc(batch)
    for decode in (decode_batch, decode_batch_bulk):
        for validate in (True, False):
            with pytest.raises(InvalidRecordError) as info:
                decode(batch, validate=validate)
            assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert codec_name(codec) == f"codec {codec}" and codec_name(ZSTD) == "zstd"


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_streams_name_the_codec(codec: int) -> None:
    data = sample(100_000)
    packed = compress(codec, data)
    name = NAMES[codec]
    bad_inputs = [packed[: len(packed) // 2], packed[:-1], b"", b"\x00" * 40,
                  packed[:30] + bytes(b ^ 0x5A for b in packed[30:60]) + packed[60:]]
    for bad in bad_inputs:
        with pytest.raises(CorruptRecordError, match=f"corrupt {name}-compressed records"):
            decompress(codec, bad)


def test_corrupt_xerial_framing_is_precise() -> None:
    packed = compress(SNAPPY, sample(40_000))
    with pytest.raises(CorruptRecordError, match="xerial header of 10 bytes"):
        decompress(SNAPPY, packed[:10])
    with pytest.raises(CorruptRecordError, match="too few for a block length"):
        decompress(SNAPPY, packed + b"\x00\x00")
    with pytest.raises(CorruptRecordError, match="runs past the end"):
        decompress(SNAPPY, packed[:-1])
    bad = bytearray(packed)
    struct.pack_into(">i", bad, 16, -5)
    with pytest.raises(CorruptRecordError, match="block of -5 bytes"):
        decompress(SNAPPY, bytes(bad))


@pytest.mark.parametrize("codec", CODECS)
def test_zip_bombs_are_errors_not_allocations(codec: int) -> None:
    bomb = compress(codec, bytes(40 << 20))  # 40 MiB of zeros
    assert len(bomb) < 2 << 20
    with pytest.raises(CorruptRecordError, match=r"limit of 1048576 bytes") as info:
        decompress(codec, bomb, max_bytes=1 << 20)
    assert NAMES[codec] in str(info.value)
    batch = build_batch([(None, bytes(40 << 20), 0, [])], compression=codec)
    for decode in (decode_batch, decode_batch_bulk):
        with pytest.raises(CorruptRecordError, match=r"batch at position 0: .*limit of 4096"):
            decode(batch, max_bytes=4096)
    assert MAX_DECOMPRESSED_BYTES == 64 << 20


def test_declared_sizes_above_the_limit_fail_before_decompressing() -> None:
    with pytest.raises(CorruptRecordError, match="declare 5000 bytes, above the limit of 100"):
        decompress(ZSTD, compress(ZSTD, bytes(5000)), max_bytes=100)
    kafka_encode, _ = kafka_python(SNAPPY)
    raw = kafka_encode(bytes(5000), xerial_compatible=False)
    with pytest.raises(CorruptRecordError, match="snappy-compressed records declare 5000"):
        decompress(SNAPPY, raw, max_bytes=100)
    lz4_frame = pytest.importorskip("lz4.frame")
    with pytest.raises(CorruptRecordError, match="lz4-compressed records declare 5000"):
        decompress(LZ4, lz4_frame.compress(bytes(5000), store_size=True), max_bytes=100)
    lie = b"\xff\xff\xff\x0f" + raw[3:]  # a raw preamble of 32 MiB on a tiny block
    with pytest.raises(CorruptRecordError, match="more than snappy can encode in it"):
        decompress(SNAPPY, lie)
    xerial = compress(SNAPPY, bytes(3 * XERIAL_BLOCK))
    with pytest.raises(CorruptRecordError, match="decompress to more than the limit of 70000"):
        decompress(SNAPPY, xerial, max_bytes=70_000)  # the third block is one too many


def test_corrupt_compressed_batches_raise_corrupt_message_on_both_paths() -> None:
    items: list[RecordInput] = [(b"key", b"value %d" % i * 10, 5 + i, []) for i in range(30)]
    for codec in CODECS:
        batch = bytearray(build_batch(items, compression=codec))
        del batch[-3:]  # truncated compressed stream, lengths and CRC fixed up
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        fix_crc(batch)
        for decode in (decode_batch, decode_batch_bulk):
            with pytest.raises(CorruptRecordError, match=f"{NAMES[codec]}-compressed") as info:
                decode(batch)
            assert info.value.code == ErrorCode.CORRUPT_MESSAGE
        wrong_count = bytearray(build_batch(items, compression=codec))
        struct.pack_into(">i", wrong_count, 57, 31)  # record_count one too many
        struct.pack_into(">i", wrong_count, 23, 30)
        fix_crc(wrong_count)
        assert decode_both(wrong_count) is None
        extra = build_batch(items, compression=codec)
        plain_body = decompress(codec, extra[HEADER_SIZE:]) + b"\x00"  # a byte after the last
        trailing = bytearray(extra[:HEADER_SIZE] + compress(codec, plain_body))
        struct.pack_into(">i", trailing, 8, len(trailing) - 12)
        fix_crc(trailing)
        assert decode_both(trailing) is None


mutation = st.tuples(st.integers(0, 1 << 20), st.integers(0, 255))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codecs, record_inputs, st.lists(mutation, min_size=1, max_size=3))
def test_mutated_compressed_batches_decode_or_raise_alike(codec: int, items: list,
                                                          edits: list) -> None:
    """Bytes of the compressed section changed (CRC fixed): both decoders either give the
    same records or raise CorruptRecordError, never anything else."""
    batch = bytearray(build_batch(items, compression=codec))
    body = len(batch) - HEADER_SIZE
    for where, value in edits:
        batch[HEADER_SIZE + where % body] = value
    fix_crc(batch)
    decode_both(batch)
