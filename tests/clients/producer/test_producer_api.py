"""The producer's Kafka-named options: compression_type, key/value serializers,
future.get(timeout); and the version it produces at."""

from __future__ import annotations

import gzip
import json
import os
import struct
import time
from typing import Any

import numpy as np
import pytest
from crc32c import crc32c

from clients.memory.buffer_pool import BufferPool
from clients.producer import compression
from clients.producer.batch import ProducerBatch
from clients.producer.compression import (
    COMPRESSION_TYPES,
    compress_records,
    compression_codec,
)
from clients.producer.config import SerializationError
from clients.producer.future import SendTimeoutError
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import InvalidConfigError, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, read_header
from clients.records.bulk_encode import encode_batch_bulk_into
from clients.types import RecordMetadata
from tests.clients.fake_broker import FakeCluster

T0 = TopicPartition("t", 0)
FAST: dict[str, Any] = {"linger_ms": 1, "request_timeout_ms": 5000,
                        "delivery_timeout_ms": 10000}  # fmt: skip


def gzip_codec(codec: int, data: bytes) -> bytes:
    """Kafka's gzip codec is a plain gzip stream; stands in for the record codecs."""
    assert codec == 1
    return gzip.compress(data, mtime=0)


def check_compressed(batch: bytes, plain_records: bytes) -> None:
    header = read_header(batch)
    assert header.compression == 1 and header.size_in_bytes == len(batch)
    (crc,) = struct.unpack_from(">I", batch, CRC_OFFSET)
    assert crc == crc32c(batch[ATTRIBUTES_OFFSET:])  # the CRC covers the compressed bytes
    assert gzip.decompress(batch[HEADER_SIZE:]) == plain_records


def test_compression_type_names() -> None:
    assert [compression_codec(n) for n in ("none", "gzip", "snappy", "lz4", "zstd")] == [
        0, 1, 2, 3, 4]
    assert compression_codec("GZIP") == 1
    for bad in ("brotli", "", None, 1):
        with pytest.raises(InvalidConfigError, match="compression_type must be one of"):
            compression_codec(bad)
    with pytest.raises(InvalidConfigError, match="compression_type"):
        Producer("127.0.0.1:1", compression_type="deflate")


def test_compression_type_uses_the_record_codecs(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    values = [b"value-%d " % i * 20 for i in range(50)]
    for name in COMPRESSION_TYPES:
        with Producer(cluster.bootstrap, compression_type=name, **FAST) as p:
            futures = [p.send("t", v, partition=0) for v in values]
            assert [f.get(10).partition for f in futures] == [0] * len(values)
            p.send_bulk("t", values, partition=0).get(10)
    batches = cluster.batches(T0)
    codecs = {read_header(b).compression for b in batches}
    assert codecs == set(COMPRESSION_TYPES.values())
    assert [r.value for r in cluster.records(T0)] == values * 2 * len(COMPRESSION_TYPES)


def test_batch_records_are_compressed_when_it_closes() -> None:
    pool = BufferPool.create(1 << 16, 4096)
    try:
        batches = []
        for compress in (None, gzip_codec):
            b = ProducerBatch(T0, pool.allocate(4096, 1000), 0.0, 1, compress)
            for i in range(20):
                assert b.try_append(1000 + i, b"k", b"a fairly repetitive value %d" % i, ())
            b.close()
            batches.append(b)
        plain, packed = (bytes(b.wire()) for b in batches)
        assert read_header(plain).compression == 0 and len(packed) < len(plain)
        check_compressed(packed, plain[HEADER_SIZE:])
        batches[1].set_producer_state(7, 0, 0)  # restamping keeps the CRC valid
        check_compressed(bytes(batches[1].wire()), plain[HEADER_SIZE:])
        # records that do not shrink go out plain (codec 0)
        noise = ProducerBatch(T0, pool.allocate(4096, 1000), 0.0, 1, gzip_codec)
        noise.try_append(1, None, os.urandom(200), ())
        noise.close()
        assert read_header(noise.wire()).compression == 0
        for b in [*batches, noise]:
            assert b.buffer is not None
            pool.deallocate(b.buffer)
    finally:
        pool.close()


def test_bulk_batches_are_compressed() -> None:
    memory = memoryview(bytearray(8192))
    values = [b"bulk value %d" % (i % 3) for i in range(100)]
    size = encode_batch_bulk_into(memory, values, None, 1000)
    plain = bytes(memory[:size])
    new_size = compress_records(memory, size, 1, gzip_codec)
    assert new_size < size
    check_compressed(bytes(memory[:new_size]), plain[HEADER_SIZE:])
    random = memoryview(bytearray(8192))
    size = encode_batch_bulk_into(random, [os.urandom(50) for _ in range(3)], None, 1)
    assert compress_records(random, size, 1, gzip_codec) == size


def test_producer_compresses_what_it_sends(cluster: FakeCluster,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The option reaches the wire, for send and send_bulk (the codec is the producer's)."""
    monkeypatch.setattr(compression, "compress", gzip_codec)
    cluster.create_topic("t", 1)
    values = [b"same old value"] * 40
    with Producer(cluster.bootstrap, compression_type="gzip", **FAST) as p:
        assert [f.get(10).offset for f in [p.send("t", v, partition=0) for v in values]] == list(
            range(40))
        assert p.send_bulk("t", np.array(values), partition=0).get(10).base_offsets == [40]
    sent = [records for tp, records in cluster.produced_records if tp == T0]
    assert len(sent) >= 2
    for records in sent:
        header = read_header(records)
        assert header.compression == 1 and header.size_in_bytes == len(records)
        assert b"same old value" not in records
        assert gzip.decompress(records[HEADER_SIZE:]).count(b"same old value") >= 1
    assert [r.value for r in cluster.records(T0)] == values * 2  # the broker read them


def test_serializers(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, key_serializer=str.encode,
                  value_serializer=lambda v: json.dumps(v).encode(), **FAST) as p:  # fmt: skip
        p.send("t", {"n": 1}, key="a", partition=0).get(10)
        p.send("t", None, key=None, partition=0).get(10)  # None is never serialized
        with pytest.raises(SerializationError, match="value_serializer") as info:
            p.send("t", {1, 2}, partition=0)  # a set is not JSON
        assert isinstance(info.value.__cause__, TypeError)
        assert isinstance(info.value, MiniKafkaError)
        p.flush()
    assert [(r.key, r.value) for r in cluster.records(T0)] == [(b"a", b'{"n": 1}'),
                                                              (None, None)]
    with (Producer(cluster.bootstrap, value_serializer=lambda v: v, **FAST) as p,
          pytest.raises(TypeError, match="value must be bytes")):
        p.send("t", 42, partition=0)
    with pytest.raises(InvalidConfigError, match="key_serializer must be callable"):
        Producer(cluster.bootstrap, key_serializer="utf-8")  # type: ignore[arg-type]


def test_future_get(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, **FAST) as p:
        future = p.send("t", b"a", partition=0)
        meta = future.get(10)
        assert isinstance(meta, RecordMetadata) and meta == future.result()
        cluster.hold_produce()
        held = p.send("t", b"b", partition=0)
        started = time.monotonic()
        with pytest.raises(SendTimeoutError) as info:
            held.get(0.2)
        assert 0.15 < time.monotonic() - started < 5
        assert isinstance(info.value, TimeoutError) and info.value.retriable
        cluster.release_produce()
        assert held.get(10).offset == 1
        bulk = p.send_bulk("t", [b"c", b"d"], partition=0)
        assert bulk.get(10).record_count == 2


def test_produces_at_the_highest_common_version(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, **FAST) as p:
        p.send("t", b"a", partition=0).get(10)
    assert {v for k, v in cluster.version_log if k == ApiKey.PRODUCE} == {12}
    # the producer id comes from InitProducerId alone: ApiVersions once per connection
    # (the connection's own handshake), none from the idempotence code
    versions_asked = [k for k, _ in cluster.version_log].count(int(ApiKey.API_VERSIONS))
    assert versions_asked == cluster.connections_accepted
    assert (int(ApiKey.INIT_PRODUCER_ID), 5) in cluster.version_log
