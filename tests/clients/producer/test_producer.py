from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import BufferPoolTimeoutError
from clients.producer.accumulator import AccumulatorClosedError, RecordAccumulator
from clients.producer.partitioner import partition_for_key
from clients.producer.produce_requests import DeliveryTimeoutError
from clients.producer.producer import Producer
from clients.producer.sender import ProducerClosedError
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import (
    ErrorCode,
    InvalidConfigError,
    MessageTooLargeError,
    RequestTimedOutError,
)
from clients.protocol.topics import InvalidTopicError, TopicPartition
from clients.records.batch import iter_batches
from clients.types import RecordMetadata
from tests.clients.fake_broker import FakeCluster, one_leader_metadata

T0 = TopicPartition("t", 0)


def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        time.sleep(0.005)


def batch_sizes(cluster: FakeCluster, tp: TopicPartition) -> list[int]:
    return [next(iter_batches(b))[1].record_count for b in cluster.batches(tp)]


def test_send_keys_headers_nulls_round_trip(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 3)
    with Producer(cluster.bootstrap, linger_ms=1) as producer:
        sent: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
            (b"k1", b"v1", [("h", b"x"), ("n", None)]),
            (None, b"v2", []),
            (b"k3", None, []),
            (None, None, [("only", b"")]),
        ]
        futures = [producer.send("t", v, key=k, headers=h, timestamp_ms=1000 + i)
                   for i, (k, v, h) in enumerate(sent)]  # fmt: skip
        metas = [f.result(20) for f in futures]
        assert cluster.errors == []
    for (key, value, headers), meta in zip(sent, metas, strict=True):
        assert isinstance(meta, RecordMetadata) and meta.topic == "t"
        if key is not None:
            assert meta.partition == partition_for_key(key, 3)
        stored = {r.offset: r for r in cluster.records(TopicPartition("t", meta.partition))}
        record = stored[meta.offset]
        assert (record.key, record.value, list(record.headers)) == (key, value, headers)
        assert record.timestamp == meta.timestamp


def test_linger_batches_records_until_flush(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, linger_ms=60_000, delivery_timeout_ms=120_000) as producer:
        futures = [producer.send("t", b"%d" % i, partition=0) for i in range(10)]
        assert not any(f.done() for f in futures)
        assert cluster.produce_requests == 0  # linger not over, batch not full
        producer.flush(timeout_s=20)
        assert all(f.done() for f in futures)
        assert [f.result().offset for f in futures] == list(range(10))
    assert batch_sizes(cluster, T0) == [10]


def test_linger_expiry_sends_without_flush(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, linger_ms=300) as producer:
        producer.partitions_for("t")  # metadata first, so all sends fall inside one linger
        futures = [producer.send("t", b"x", partition=0) for _ in range(5)]
        for f in futures:
            f.result(20)
    assert batch_sizes(cluster, T0) == [5]


def test_full_batches_go_without_waiting_for_linger(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    # batch_max_size=0: no growth, so every batch is at most batch_size
    with Producer(cluster.bootstrap, linger_ms=60_000, batch_size=1024,
                  batch_max_size=0) as producer:  # fmt: skip
        futures = [producer.send("t", bytes(100), partition=0) for _ in range(30)]
        futures[0].result(20)  # first batch filled up: sent despite the long linger
        producer.flush(timeout_s=20)
    sizes = batch_sizes(cluster, T0)
    assert sum(sizes) == 30 and len(sizes) >= 3
    assert all(len(b) <= 1024 for b in cluster.batches(T0))


def test_send_bulk_splits_into_batches(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 2)
    values = [b"%05d" % i + bytes(95) for i in range(5000)]
    # batch_max_size=0: no growth, so every batch is at most batch_size
    with Producer(cluster.bootstrap, batch_size=16384, batch_max_size=0) as producer:
        result = producer.send_bulk("t", values, partition=1).result(20)
    tp = TopicPartition("t", 1)
    assert result.record_count == 5000 and set(result.partitions) == {1}
    assert len(result.base_offsets) > 1
    expected_base = 0
    for base, count in zip(result.base_offsets, result.record_counts, strict=True):
        assert base == expected_base
        expected_base += count
    assert all(len(b) <= 16384 for b in cluster.batches(tp))
    assert [r.value for r in cluster.records(tp)] == values


def test_send_bulk_batches_grow_to_batch_max_size_like_sends(cluster: FakeCluster) -> None:
    """A call holding more than a batch_size batch for a partition is a backlog: its
    batches are cut at batch_max_size (as send's grow behind a backlog), not at
    batch_size; a call that fits one batch_size batch stays one batch."""
    cluster.create_topic("t", 1)
    values = [b"%05d" % i + bytes(1019) for i in range(2000)]  # 1 KiB each, ~2 MB
    with Producer(cluster.bootstrap, batch_size=16384, batch_max_size=262144) as producer:
        result = producer.send_bulk("t", values, partition=0).result(20)
        small = producer.send_bulk("t", values[:5], partition=0).result(20)
    sizes = [len(b) for b in cluster.batches(T0)]
    assert result.record_count == 2000 and len(result.base_offsets) == len(sizes) - 1
    assert max(sizes) <= 262144 and all(s > 16384 for s in sizes[:-2])
    assert len(result.base_offsets) <= 2_100_000 // (262144 - 1200) + 1  # 8 or 9, not 130
    assert small.record_count == 5 and len(small.base_offsets) == 1
    assert [r.value for r in cluster.records(T0)] == values + values[:5]


def test_send_bulk_numpy_and_keys(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 4)
    arr = np.frombuffer(b"".join(b"%08d" % i for i in range(1000)), dtype="S8")
    keys = [b"key-%d" % (i % 17) for i in range(1000)]
    with Producer(cluster.bootstrap) as producer:
        result = producer.send_bulk("t", arr, keys=keys).result(20)
        sticky = producer.send_bulk("t", [b"s"] * 10).result(20)
    assert result.record_count == 1000 and sticky.record_count == 10
    by_partition: dict[int, list[bytes | None]] = {}
    for p in range(4):
        for r in cluster.records(TopicPartition("t", p)):
            if r.value != b"s":
                by_partition.setdefault(p, []).append(r.key)
                assert partition_for_key(r.key or b"", 4) == p
    # order kept within each partition
    for p, got in by_partition.items():
        assert got == [k for k in keys if partition_for_key(k, 4) == p]


def test_retry_after_leader_moves_keeps_order(cluster2: FakeCluster) -> None:
    cluster2.create_topic("t", 1)  # leader: node 0
    with Producer(cluster2.bootstrap, linger_ms=0, batch_size=256, retry_backoff_ms=10) as prod:
        prod.send("t", b"first", partition=0).result(20)
        cluster2.move_leader(T0, 1)
        futures = [prod.send("t", b"%03d" % i + bytes(40), partition=0) for i in range(40)]
        offsets = [f.result(20).offset for f in futures]
    assert offsets == list(range(1, 41))
    values = [r.value for r in cluster2.records(T0)]
    assert values == [b"first"] + [b"%03d" % i + bytes(40) for i in range(40)]
    assert (1, 0) in cluster2.request_log  # produced to the new leader


def test_retry_injected_errors_without_reordering(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, linger_ms=0, batch_size=256, retry_backoff_ms=5) as prod:
        prod.partitions_for("t")
        cluster.inject_produce_errors(T0, ErrorCode.NOT_LEADER_OR_FOLLOWER, times=2)
        cluster.inject_produce_errors(T0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, times=1)
        futures = [prod.send("t", b"%03d" % i + bytes(40), partition=0) for i in range(60)]
        assert [f.result(20).offset for f in futures] == list(range(60))
        assert prod.metrics()["retries"] >= 3
    assert [r.value for r in cluster.records(T0)] == [b"%03d" % i + bytes(40) for i in range(60)]


def test_retry_after_dropped_connection(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, linger_ms=0, batch_size=256, retry_backoff_ms=5) as prod:
        prod.partitions_for("t")
        cluster.drop_next_produce(1)
        futures = [prod.send("t", b"%03d" % i + bytes(40), partition=0) for i in range(50)]
        assert [f.result(20).offset for f in futures] == list(range(50))
    assert [r.value for r in cluster.records(T0)] == [b"%03d" % i + bytes(40) for i in range(50)]


def test_non_retriable_error_fails_the_future(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, linger_ms=0) as prod:
        prod.partitions_for("t")
        cluster.inject_produce_errors(T0, ErrorCode.INVALID_REQUIRED_ACKS, times=1)
        future = prod.send("t", b"x", partition=0)
        with pytest.raises(Exception) as info:
            future.result(20)
        assert getattr(info.value, "code", None) == ErrorCode.INVALID_REQUIRED_ACKS
        assert prod.send("t", b"y", partition=0).result(20).offset == 0


def test_unknown_topic_right_after_creation_is_waited_for(cluster: FakeCluster) -> None:
    cluster.create_topic("fresh", 1)
    cluster.hide_topic("fresh", 3)
    with Producer(cluster.bootstrap, retry_backoff_ms=10) as prod:
        assert prod.send("fresh", b"x").result(20).offset == 0


def test_delivery_timeout_fails_batches(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    cluster.blackhole_produce = True
    with Producer(cluster.bootstrap, linger_ms=0, request_timeout_ms=200,
                  delivery_timeout_ms=500, retry_backoff_ms=10) as prod:  # fmt: skip
        future = prod.send("t", b"x", partition=0)
        with pytest.raises(DeliveryTimeoutError) as info:
            future.result(20)
        assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
        # the buffer goes back to the pool right after the future is resolved
        wait_until(lambda: prod.metrics()["buffer_pool_available_bytes"] == 32 * 1024 * 1024)


def test_max_block_ms_when_the_pool_is_full(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    cluster.blackhole_produce = True
    prod = Producer(cluster.bootstrap, batch_size=1024, buffer_memory=2048, max_block_ms=200,
                    linger_ms=0)  # fmt: skip
    try:
        first = [prod.send("t", bytes(900), partition=0) for _ in range(2)]
        with pytest.raises(BufferPoolTimeoutError) as info:
            prod.send("t", bytes(900), partition=0)
        assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
    finally:
        prod.close(timeout_s=0.5)
    for f in first:  # force-closed while unacknowledged
        with pytest.raises(ProducerClosedError):
            f.result(20)


def test_send_errors_are_precise(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 2)
    prod = Producer(cluster.bootstrap, max_block_ms=200, max_request_size=1000)
    try:
        with pytest.raises(InvalidTopicError):
            prod.send("bad topic!", b"x")
        with pytest.raises(MessageTooLargeError):
            prod.send("t", bytes(2000))
        with pytest.raises(ValueError, match="partition 5"):
            prod.send("t", b"x", partition=5)
        with pytest.raises(TypeError):
            prod.send("t", "text")  # type: ignore[arg-type]
        with pytest.raises(RequestTimedOutError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            prod.send("missing", b"x")
    finally:
        prod.close()
    with pytest.raises(AccumulatorClosedError):
        prod.send("t", b"x")
    with pytest.raises(InvalidConfigError):
        Producer(cluster.bootstrap, acks=2)
    with pytest.raises(InvalidConfigError):
        Producer(cluster.bootstrap, request_timeout_ms=1000, delivery_timeout_ms=500)


def test_acks_zero_resolves_without_offsets(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, acks=0, linger_ms=0) as prod:
        metas = [prod.send("t", b"%d" % i, partition=0).result(20) for i in range(5)]
    assert {m.offset for m in metas} == {-1}
    wait_until(lambda: len(cluster.records(T0)) == 5)


def test_metadata_is_not_refetched_for_every_send(cluster: FakeCluster) -> None:
    """Regression: the sender fed monotonic ms to a metadata cache that keeps seconds,
    so the cache always looked stale and each loop sent a Metadata request."""
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, linger_ms=0) as prod:
        for i in range(50):
            prod.send("t", b"%d" % i, partition=0).result(20)
    with cluster.cond:
        metadata_requests = sum(1 for _, key in cluster.request_log if key == ApiKey.METADATA)
    assert 1 <= metadata_requests <= 2


def test_linger_zero_sends_from_the_caller_and_keeps_order(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, linger_ms=0) as prod:
        futures = [prod.send("t", b"%d" % i, partition=0) for i in range(300)]
        prod.flush()
        assert all(f.done() for f in futures)  # flush returns after every future resolved
        offsets = [f.result(0).offset for f in futures]
    assert offsets == sorted(offsets) and len(set(offsets)) == 300
    assert [r.value for r in cluster.records(T0)] == [b"%d" % i for i in range(300)]


# ------------------------------------------------------------------ accumulator unit


class _Clock:
    def __init__(self) -> None:
        self.ms = 1000.0

    def __call__(self) -> float:
        return self.ms


def test_append_reports_only_what_the_sender_and_partitioner_must_act_on() -> None:
    # a sender woken per record cost one socket write per send() while batches queued
    # behind the in-flight ones; the sticky partitioner moved on per record then too
    clock = _Clock()
    with BufferPool.create(16 * 512, 512) as pool:
        acc = RecordAccumulator(pool, batch_size=512, linger_ms=50, retry_backoff_ms=20,
                                delivery_timeout_ms=1000, clock_ms=clock)  # fmt: skip
        results = [acc.append(T0, 0, None, bytes(100), (), 0)[1:] for _ in range(16)]
        assert results[0] == (False, True)  # a first batch: the sender lingers on it
        new_batches = [i for i, r in enumerate(results) if r[1]]
        assert len(new_batches) >= 3  # several full batches queue up
        for i, result in enumerate(results[1:], 1):
            # a batch filled <=> a new one took the record; else nothing to report
            assert result == ((True, True) if i in new_batches else (False, False))
        for batch in acc.drain(one_leader_metadata(), {0}, 1 << 20, clock.ms)[0]:
            batch.complete(-1, -1, RuntimeError("test"))
            acc.deallocate(batch)


def test_accumulator_ready_drain_retry_expiry() -> None:
    clock = _Clock()
    md = one_leader_metadata()
    with BufferPool.create(8 * 512, 512) as pool:
        acc = RecordAccumulator(pool, batch_size=512, linger_ms=50, retry_backoff_ms=20,
                                delivery_timeout_ms=1000, clock_ms=clock)  # fmt: skip
        f, filled, new_batch = acc.append(T0, 0, None, b"a", (), 0)
        assert (filled, new_batch) == (False, True)
        assert acc.ready(md, clock.ms) == (set(), 50, set())
        clock.ms += 50
        assert acc.ready(md, clock.ms)[0] == {0}
        # fill more batches: the first full batch makes the node ready at once
        for _ in range(12):
            acc.append(T0, 0, None, bytes(100), (), 0)
        drained = acc.drain(md, {0}, 10_000, clock.ms)[0]
        assert len(drained) >= 3 and drained[0].record_count == 5  # several batches, one req
        assert acc.ready(md, clock.ms)[0] == set()  # partition muted while in flight
        acc.reenqueue(drained, clock.ms)
        acc.unmute(T0)
        ready, wait_ms, _ = acc.ready(md, clock.ms)
        assert ready == set() and wait_ms == 20  # retry backoff
        clock.ms += 20
        again = acc.drain(md, {0}, 10_000, clock.ms)[0]
        assert again == drained[:1]  # a retried batch travels alone, first in line
        clock.ms += 2000
        expired = acc.expired_batches(clock.ms)
        assert expired and all(b.created_ms <= clock.ms - 1000 for b in expired)
        for b in [*again, *expired]:
            b.complete(-1, -1, RuntimeError("test"))
            acc.deallocate(b)
        assert acc.incomplete == 0
        assert f.exception() is not None
        pool.check_accounting()
