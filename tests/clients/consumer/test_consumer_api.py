"""The consumer's Kafka-named options and calls: isolation_level, deserializers,
beginning/end offsets, offsets_for_times, pause/resume, iteration, poll(max_records);
compressed batches through poll and poll_bulk."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from clients.consumer.consumer import Consumer
from clients.consumer.fetcher import RecordDeserializationError
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import InvalidConfigError, RequestTimedOutError
from clients.protocol.topics import TopicPartition
from clients.records.batch import read_header
from clients.records.record import build_batch
from clients.types import ConsumerRecord, OffsetAndTimestamp
from tests.clients.fake_broker import FakeCluster

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
FAST: dict[str, Any] = {"fetch_max_wait_ms": 20, "auto_offset_reset": "earliest",
                        "request_timeout_ms": 5000}


def add(cluster: FakeCluster, tp: TopicPartition, values: list[bytes | None],
        ts: int = 1, key: bytes | None = None) -> None:
    cluster.append(tp, build_batch([(key, v, ts, ()) for v in values]))


def poll_n(consumer: Consumer, count: int, timeout_s: float = 10.0) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count:
        assert time.monotonic() < deadline, f"got {len(out)} of {count} records"
        for records in consumer.poll(100).values():
            out.extend(records)
    return out


def test_isolation_level() -> None:
    # read_committed is accepted since transactions exist (issue 32; it was refused before)
    Consumer("127.0.0.1:1", isolation_level="read_committed").close()
    with pytest.raises(InvalidConfigError, match="read_uncommitted"):
        Consumer("127.0.0.1:1", isolation_level="dirty")


def test_fetches_are_sessionless_read_uncommitted(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    add(cluster, T0, [b"a", b"b"])
    with Consumer(cluster.bootstrap, isolation_level="read_uncommitted", **FAST) as c:
        c.assign([T0])
        assert [r.value for r in poll_n(c, 2)] == [b"a", b"b"]
    # the fake refuses (records an error for) any fetch with a session or from a replica
    assert cluster.fetch_isolation_levels and set(cluster.fetch_isolation_levels) == {0}
    # our highest, by topic id (the fake's Metadata gives every topic an id)
    assert {v for k, v in cluster.version_log if k == ApiKey.FETCH} == {17}


def test_deserializers(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    add(cluster, T0, [json.dumps({"n": i}).encode() for i in range(3)], key=b"k")
    add(cluster, T0, [None])  # a tombstone: the deserializer is not called for null
    with Consumer(cluster.bootstrap, key_deserializer=bytes.decode,
                  value_deserializer=json.loads, **FAST) as c:  # fmt: skip
        c.assign([T0])
        got = poll_n(c, 4)
    assert [(r.key, r.value) for r in got] == [("k", {"n": 0}), ("k", {"n": 1}),
                                               ("k", {"n": 2}), (None, None)]
    with pytest.raises(InvalidConfigError, match="callable"):
        Consumer(cluster.bootstrap, value_deserializer="json")  # type: ignore[arg-type]


def test_failing_deserializer_stops_at_the_record(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    add(cluster, T0, [b"1", b"2", b"oops", b"4"])
    with Consumer(cluster.bootstrap, value_deserializer=int, **FAST) as c:
        c.assign([T0])
        assert [r.value for r in poll_n(c, 2)] == [1, 2]  # the records before it first
        with pytest.raises(RecordDeserializationError) as info:
            for _ in range(50):
                c.poll(100)
        assert (info.value.tp, info.value.offset) == (T0, 2)
        assert isinstance(info.value.__cause__, ValueError)
        assert c.position(T0) == 2
        with pytest.raises(RecordDeserializationError):
            c.poll(100)  # still stuck on it
        c.seek(T0, 3)
        assert [r.value for r in poll_n(c, 1)] == [4]


def test_beginning_end_offsets_and_offsets_for_times(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 2)
    add(cluster, T0, [b"a", b"b"], ts=1000)
    add(cluster, T0, [b"c"], ts=2000)
    add(cluster, T0, [b"d"], ts=3000)
    cluster.truncate_front(T0, 1)  # log start offset 2
    with Consumer(cluster.bootstrap, **FAST) as c:  # no assignment needed
        assert c.beginning_offsets([T0, T1]) == {T0: 2, T1: 0}
        assert c.end_offsets([T0, T1]) == {T0: 4, T1: 0}
        found = c.offsets_for_times({T0: 1500, T1: 0})
        assert found == {T0: OffsetAndTimestamp(2, 2000, 0), T1: None}
        assert c.offsets_for_times({T0: 2500})[T0] == OffsetAndTimestamp(3, 3000, 0)
        assert c.offsets_for_times({T0: 9999}) == {T0: None}
        with pytest.raises(ValueError, match="timestamp"):
            c.offsets_for_times({T0: -1})
        with pytest.raises(RequestTimedOutError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            c.end_offsets([TopicPartition("missing", 0)], timeout_ms=300)


def test_offsets_follow_a_leader_move(cluster2: FakeCluster) -> None:
    cluster2.create_topic("t", 1)
    add(cluster2, T0, [b"a"])
    with Consumer(cluster2.bootstrap, **FAST) as c:
        assert c.end_offsets([T0]) == {T0: 1}
        cluster2.move_leader(T0, 1)  # node 0 now answers NOT_LEADER_OR_FOLLOWER
        assert c.end_offsets([T0]) == {T0: 1}
    assert (1, int(ApiKey.LIST_OFFSETS)) in cluster2.request_log


def test_pause_and_resume(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 2)
    add(cluster, T0, [b"a0", b"a1"])
    add(cluster, T1, [b"b0"])
    with Consumer(cluster.bootstrap, **FAST) as c:
        c.assign([T0, T1])
        c.pause(T1)
        assert c.paused() == {T1}
        got = poll_n(c, 2)
        assert {r.partition for r in got} == {0}
        assert c.poll(200) == {}  # T1 held back
        assert c.position(T1) == 0
        c.pause([T0])
        add(cluster, T0, [b"a2"])
        c.resume(T1)
        assert c.paused() == {T0}
        assert [r.value for r in poll_n(c, 1)] == [b"b0"]
        c.resume(T0, T1)
        assert c.paused() == set()
        assert [r.value for r in poll_n(c, 1)] == [b"a2"]
        with pytest.raises(ValueError, match="not assigned"):
            c.pause(TopicPartition("other", 0))
        c.pause(T0)
        c.assign([T1])  # a partition that leaves the assignment forgets its pause
        c.assign([T0, T1])
        assert c.paused() == set()


def test_iteration_honours_consumer_timeout(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    add(cluster, T0, [b"%d" % i for i in range(5)])
    with Consumer(cluster.bootstrap, consumer_timeout_ms=300, value_deserializer=int,
                  **FAST) as c:  # fmt: skip
        c.assign([T0])
        values = []
        for record in c:
            values.append(record.value)
            assert c.position(T0) == record.offset + 1  # one record handed out at a time
        assert values == [0, 1, 2, 3, 4]
        started = time.monotonic()
        assert list(c) == []
        assert 0.25 < time.monotonic() - started < 5
        add(cluster, T0, [b"5"])
        assert next(iter(c)).value == 5
    with pytest.raises(InvalidConfigError, match="consumer_timeout_ms"):
        Consumer(cluster.bootstrap, consumer_timeout_ms=-1)


def test_poll_max_records(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    add(cluster, T0, [b"%d" % i for i in range(10)])
    with Consumer(cluster.bootstrap, **FAST) as c:
        c.assign([T0])
        first: list[ConsumerRecord] = []
        deadline = time.monotonic() + 10
        while not first and time.monotonic() < deadline:
            first = c.poll(100, max_records=3).get(T0, [])
        assert [r.offset for r in first] == [0, 1, 2]
        assert [r.offset for r in c.poll(100, max_records=100)[T0]] == list(range(3, 10))
        with pytest.raises(ValueError, match="max_records"):
            c.poll(0, max_records=0)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_read_by_poll_and_poll_bulk(cluster: FakeCluster,
                                                          codec: str) -> None:
    pytest.importorskip("clients.records.compression", reason="the record codecs")
    cluster.create_topic("t", 1)
    values = [b"value %d " % i * 8 for i in range(300)]
    with Producer(cluster.bootstrap, compression_type=codec, linger_ms=5,
                  batch_size=4096) as p:  # fmt: skip
        for v in values:
            p.send("t", v, partition=0)
        p.flush()
    batches = cluster.batches(T0)
    assert len(batches) > 2 and all(read_header(b).compression for b in batches)
    with Consumer(cluster.bootstrap, **FAST) as c:
        c.assign([T0])
        c.seek(T0, 5)  # inside the first batch: records before the position are skipped
        assert [r.value for r in poll_n(c, 295)] == values[5:]
        c.seek(T0, 7)
        bulk: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(bulk) < 293:
            assert time.monotonic() < deadline
            for columns in c.poll_bulk(100).values():
                bulk.extend(bytes(v) for v in columns.values() if v is not None)
        assert bulk == values[7:]
