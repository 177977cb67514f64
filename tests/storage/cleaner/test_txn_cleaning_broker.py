"""A real broker compacts a transactional compacted topic on its own schedule: the
records of aborted transactions leave the log, the committed ones compact by key, the
markers without data go (delete.retention.ms=0), nothing at or above the LSO (an open
transaction) is cleaned, and both a read_committed and a read_uncommitted consumer then
read the same, latest committed value of every key."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.topics import TopicPartition
from clients.records.batch import CONTROL_MASK, iter_batches
from clients.records.record import decode_batch
from clients.types import AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TOPIC = "txn-compacted"
KEYS = [b"k%d" % i for i in range(5)]


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, 1, {"log_cleaner_interval_ms": 50}) as running:
        yield running  # stopped by PID on exit, even on failure


def consume(bootstrap: str, isolation_level: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every (key, value) a consumer with ``isolation_level`` reads up to the end."""
    tp = TopicPartition(TOPIC, 0)
    out: list[tuple[bytes | None, bytes | None]] = []
    with Consumer(bootstrap, isolation_level=isolation_level, fetch_max_wait_ms=50,
                  auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, (out, end)
            for records in consumer.poll(100).values():
                out += [(r.key, r.value) for r in records]
    return out


def on_disk(cluster: LocalCluster) -> tuple[set[bytes | None], int]:
    """The values of the broker's replica on disk (every batch), and its marker count."""
    data = cluster.replica_bytes(next(iter(cluster.state.brokers)), TOPIC, 0, 2**62)
    values: set[bytes | None] = set()
    markers = 0
    for pos, header in iter_batches(data):
        if header.attributes & CONTROL_MASK:
            markers += header.record_count > 0
        else:
            values |= {r.value for r in decode_batch(data[pos:pos + header.size_in_bytes])}
    return values, markers


def test_a_broker_removes_aborted_data_and_spent_markers_of_a_compacted_topic(
        cluster: LocalCluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, 1, 1, {
            "cleanup.policy": "compact", "segment.bytes": "1024",
            "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0",
            "min.compaction.lag.ms": "3600000"})])  # nothing is cleanable yet
    cluster.wait_partition(TOPIC, 0, lambda s: s.get("leader", -1) >= 0, "a leader")
    with Producer(cluster.bootstrap, transactional_id="txclean-1", linger_ms=0) as prod:
        prod.init_transactions()
        for t in range(8):  # even: committed, odd: aborted
            prod.begin_transaction()
            for key in KEYS:  # written before the end (an abort drops unsent records)
                prod.send(TOPIC, b"t%d-%s" % (t, key), key=key, partition=0).get(10)
            if t % 2:
                prod.abort_transaction()
            else:
                prod.commit_transaction()
    opened = Producer(cluster.bootstrap, transactional_id="txclean-open", linger_ms=0)
    try:
        with Producer(cluster.bootstrap, linger_ms=0) as prod:
            for i in range(30):  # roll every transaction out of the active segment
                prod.send(TOPIC, b"filler-%d" % i, key=b"f%d" % i, partition=0).get(10)
                if i == 14:  # an open transaction in the middle: the LSO
                    opened.init_transactions()
                    opened.begin_transaction()
                    for key in KEYS:
                        opened.send(TOPIC, b"open-%s" % key, key=key, partition=0).get(10)
        latest = {key: b"t6-%s" % key for key in KEYS}
        fillers = {(b"f%d" % i, b"filler-%d" % i) for i in range(30)}
        aborted = {b"t%d-%s" % (t, key) for t in (1, 3, 5, 7) for key in KEYS}
        superseded = {b"t%d-%s" % (t, key) for t in (0, 2, 4) for key in KEYS}
        still_open = {b"open-%s" % key for key in KEYS}
        before = consume(cluster.bootstrap, "read_uncommitted")
        assert aborted | superseded | still_open <= {v for _, v in before}  # not cleaned
        assert on_disk(cluster)[1] == 8
        with Admin(cluster.bootstrap) as admin:  # now it is
            admin.incremental_alter_configs({ConfigResource(ConfigResourceType.TOPIC, TOPIC): [
                AlterConfigOp("min.compaction.lag.ms", "0")]})
        last: list[object] = []

        def cleaned() -> bool:
            values, markers = on_disk(cluster)
            last[:] = [values & (aborted | superseded), markers]
            # the committed t6 marker keeps its data; the aborted t7 marker is the
            # producer's last batch (kept whole); the six others went
            return not values & (aborted | superseded) and markers == 2

        try:
            wait_until(cleaned, 30, "aborted data, superseded values and spent markers "
                       "cleaned", 0.1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen on disk: {last}") from None
        # nothing at or above the LSO was cleaned: the open transaction's records did
        # not compact the committed values of their keys away
        assert set(latest.values()) | still_open <= on_disk(cluster)[0]
        opened.abort_transaction()
    finally:
        opened.close()
    wait_until(lambda: not on_disk(cluster)[0] & still_open, 30,
               "the aborted open transaction's records cleaned", 0.1)
    for level in ("read_committed", "read_uncommitted"):
        got = consume(cluster.bootstrap, level)
        assert {k: v for k, v in got if k in latest} == latest, level
        assert {(k, v) for k, v in got if k not in latest} == fillers, level
        assert not {v for _, v in got} & (aborted | superseded), level
