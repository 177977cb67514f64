from __future__ import annotations

import time

import numpy as np
import pytest

from clients.consumer.consumer import Consumer
from clients.consumer.offset_fetcher import NoOffsetForPartitionError
from clients.producer.producer import Producer
from clients.protocol.errors import CorruptRecordError, OffsetOutOfRangeError
from clients.protocol.topics import TopicPartition
from clients.records.bulk_decode import BulkRecords
from clients.records.record import build_batch
from clients.types import ConsumerRecord
from tests.clients.fake_broker import FakeCluster

T0 = TopicPartition("t", 0)


def poll_until(consumer: Consumer, count: int, timeout_s: float = 20.0) -> list[ConsumerRecord]:
    deadline = time.monotonic() + timeout_s
    out: list[ConsumerRecord] = []
    while len(out) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(out)} of {count} records before the deadline")
        for records in consumer.poll(timeout_ms=200).values():
            out.extend(records)
    return out


def add_batch(cluster: FakeCluster, tp: TopicPartition, values: list[bytes], ts: int = 1) -> None:
    cluster.append(tp, build_batch([(None, v, ts, ()) for v in values]))


def test_round_trip_with_producer(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 2)
    sent = [(b"k%d" % i if i % 3 else None, None if i == 4 else b"v%d" % i,
             [("h", b"%d" % i)] if i % 2 else []) for i in range(40)]  # fmt: skip
    with Producer(cluster.bootstrap, linger_ms=1) as producer:
        metas = [producer.send("t", v, key=k, headers=h).result(20) for k, v, h in sent]
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        got = poll_until(consumer, 40)
        assert consumer.poll(timeout_ms=0) == {}
    by_position = {(r.partition, r.offset): r for r in got}
    assert len(by_position) == 40
    for (key, value, headers), meta in zip(sent, metas, strict=True):
        r = by_position[(meta.partition, meta.offset)]
        assert (r.topic, r.key, r.value, list(r.headers), r.timestamp) == (
            "t",
            key,
            value,
            headers,
            meta.timestamp,
        )
    for p in (0, 1):  # offsets increase within a partition
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == sorted(offsets)


def test_seek_inside_a_batch_skips_earlier_records(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    add_batch(cluster, T0, [b"%d" % i for i in range(10)])
    with Consumer(cluster.bootstrap) as consumer:
        consumer.assign([T0])
        consumer.seek(T0, 6)
        got = poll_until(consumer, 4)
        assert [r.offset for r in got] == [6, 7, 8, 9]
        assert [r.value for r in got] == [b"6", b"7", b"8", b"9"]
        assert consumer.position(T0) == 10
        assert consumer.high_watermark(T0) == 10


def test_offset_reset_policies_and_seek_to(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    add_batch(cluster, T0, [b"a", b"b", b"c"])
    with Consumer(cluster.bootstrap, auto_offset_reset="latest") as latest:
        latest.assign([T0])
        assert latest.position(T0) == 3
        assert latest.poll(timeout_ms=50) == {}
        add_batch(cluster, T0, [b"d"])
        assert [r.value for r in poll_until(latest, 1)] == [b"d"]
        latest.seek_to_beginning([T0])
        assert latest.position(T0) == 0
        latest.seek_to_end()
        assert latest.position(T0) == 4
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as earliest:
        earliest.assign([T0])
        assert earliest.position(T0) == 0
        assert earliest.assignment() == {T0}


def test_out_of_range_resets_per_policy(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    for v in (b"a", b"b", b"c"):
        add_batch(cluster, T0, [v])
    cluster.truncate_front(T0, 1)  # log start offset is now 1
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([T0])
        consumer.seek(T0, 0)
        got = poll_until(consumer, 2)
        assert [(r.offset, r.value) for r in got] == [(1, b"b"), (2, b"c")]
        consumer.seek(T0, 1000)
        add_batch(cluster, T0, [b"d"])
        assert [r.offset for r in poll_until(consumer, 3)] == [1, 2, 3]  # back to earliest
    with Consumer(cluster.bootstrap, auto_offset_reset="none") as strict:
        strict.assign([T0])
        with pytest.raises(NoOffsetForPartitionError):
            strict.poll(timeout_ms=0)
        strict.seek(T0, 1000)
        with pytest.raises(OffsetOutOfRangeError):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                strict.poll(timeout_ms=100)


def test_max_poll_records(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    add_batch(cluster, T0, [b"%d" % i for i in range(25)])
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", max_poll_records=10) as c:
        c.assign([T0])
        sizes = []
        got: list[ConsumerRecord] = []
        while len(got) < 25:
            batch = c.poll(timeout_ms=1000).get(T0, [])
            sizes.append(len(batch))
            got.extend(batch)
        assert max(sizes) == 10
        assert [r.offset for r in got] == list(range(25))


def test_poll_bulk_numpy_columns_zero_copy(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    values = [b"%03d" % i for i in range(30)]
    add_batch(cluster, T0, values[:10], ts=5)
    add_batch(cluster, T0, values[10:], ts=7)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([T0])
        consumer.seek(T0, 4)
        deadline = time.monotonic() + 20
        out: dict[TopicPartition, BulkRecords] = {}
        while not out and time.monotonic() < deadline:
            out = consumer.poll_bulk(timeout_ms=200)
        bulk = out[T0]
        assert bulk.offsets.dtype == np.int64
        np.testing.assert_array_equal(bulk.offsets, np.arange(4, 30))
        np.testing.assert_array_equal(bulk.timestamps, [5] * 6 + [7] * 20)
        got = bulk.values()
        assert all(isinstance(v, memoryview) for v in got)
        assert [bytes(v) for v in got if v is not None] == values[4:]
        assert consumer.position(T0) == 30


def corrupt_batch(cluster: FakeCluster, tp: TopicPartition, index: int) -> None:
    """Flip a byte inside one stored batch's records: its CRC no longer matches (a bit
    flip on the broker's disk, served as it is)."""
    with cluster.cond:
        part = cluster.topics[tp.topic][tp.partition]
        damaged = bytearray(part.batches[index])
        damaged[-3] ^= 0xFF
        part.batches[index] = bytes(damaged)


@pytest.mark.parametrize("api", ["poll", "poll_bulk"])
def test_a_corrupt_batch_delivers_what_precedes_it_then_names_itself(
        cluster: FakeCluster, api: str) -> None:
    cluster.create_topic("t", 1)
    for first in (0, 5, 10):
        add_batch(cluster, T0, [b"%d" % i for i in range(first, first + 5)])
    corrupt_batch(cluster, T0, 1)  # offsets 5..9

    def take() -> list[int]:
        if api == "poll":
            return [r.offset for rs in consumer.poll(timeout_ms=200).values() for r in rs]
        return [int(o) for b in consumer.poll_bulk(timeout_ms=200).values() for o in b.offsets]

    with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([T0])
        got: list[int] = []
        deadline = time.monotonic() + 20
        with pytest.raises(CorruptRecordError) as raised:
            while time.monotonic() < deadline:
                got += take()
        assert got == [0, 1, 2, 3, 4]  # every record before the bad batch
        assert "t-0: the record batch at offsets 5..9 is invalid" in str(raised.value)
        assert "seek to 10" in str(raised.value)
        assert consumer.position(T0) == 5
        with pytest.raises(CorruptRecordError):  # still there on the next poll
            take()
        consumer.seek(T0, 10)
        got = []
        while len(got) < 5 and time.monotonic() < deadline:
            got += take()
        assert got == [10, 11, 12, 13, 14]


def test_fetch_follows_the_new_leader(cluster2: FakeCluster) -> None:
    cluster2.create_topic("t", 1)
    add_batch(cluster2, T0, [b"a"])
    with Consumer(cluster2.bootstrap, auto_offset_reset="earliest",
                  fetch_max_wait_ms=50, retry_backoff_ms=10) as consumer:  # fmt: skip
        consumer.assign([T0])
        assert [r.value for r in poll_until(consumer, 1)] == [b"a"]
        cluster2.move_leader(T0, 1)
        add_batch(cluster2, T0, [b"b"])
        assert [r.value for r in poll_until(consumer, 1)] == [b"b"]
    assert (1, 1) in cluster2.request_log  # a Fetch (api key 1) went to node 1


def test_bad_usage_is_reported(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Consumer(cluster.bootstrap) as consumer:
        with pytest.raises(ValueError, match="not assigned"):
            consumer.seek(T0, 0)
        consumer.assign([T0])
        with pytest.raises(ValueError):
            consumer.seek(T0, -1)
        with pytest.raises(ValueError):
            consumer.poll(timeout_ms=-1)
        assert consumer.partitions_for("t") == [0]
        assert consumer.partitions_for("nope") is None
