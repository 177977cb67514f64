"""What test_confluent_session_positions.py's stand-in assumes of librdkafka, checked on a
real 3-broker cluster: a partition assigned again reports the position of its previous
assignment until a record is delivered (while the group's committed offset is further),
and the pipeline's ConfluentSession, which subscribes with rebalance callbacks that do
not assign themselves, still gets its partitions and reports only fresh positions."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clients.workload.confluent_pipeline import ConfluentSession
from tests.broker.cluster_harness import LocalCluster
from tests.broker.compat.common import create
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]
confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root: Path = tmp_path_factory.mktemp("librdkafka-positions")
    with LocalCluster(root, 3, {"group_initial_rebalance_delay_ms": 0,
                                "offsets_topic_num_partitions": 1}) as c:
        yield c


def produce(cluster: LocalCluster, topic: str, count: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(count):
        producer.produce(topic, b"v%d" % i, partition=0)
    assert producer.flush(30) == 0


def consumer(cluster: LocalCluster, group: str) -> Any:
    return confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap, "group.id": group,
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "auto.offset.reset": "earliest"})


def consume(c: Any, count: int, timeout_s: float = 30.0) -> list[Any]:
    """``count`` records (fewer if ``timeout_s`` passes first)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += [m for m in c.consume(count - len(got), 0.2) if m.error() is None]
    return got


def test_librdkafka_reports_the_previous_assignments_position(cluster: LocalCluster) -> None:
    topic = create(cluster, "stale-position", 1)
    produce(cluster, topic, 40)
    tp = confluent_kafka.TopicPartition(topic, 0)
    c = consumer(cluster, "stale")
    try:
        c.subscribe([topic])
        assert [m.offset() for m in consume(c, 5)] == [0, 1, 2, 3, 4]
        assert c.position([tp])[0].offset == 5
        c.unsubscribe()
        c.consume(0, 0.2)
        c.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 20)], asynchronous=False)
        c.subscribe([topic])
        wait_until(lambda: bool(c.consume(0, 0.2) or c.assignment()), 30, "assigned again", 0)
        assert c.committed([tp], 10)[0].offset == 20
        assert c.position([tp])[0].offset == 5  # stale until a record is delivered
        assert [m.offset() for m in consume(c, 1)] == [20]
        assert c.position([tp])[0].offset == 21
    finally:
        c.close()


def test_the_session_gets_its_partition_and_reports_fresh_positions(
        cluster: LocalCluster) -> None:
    topic = create(cluster, "session-position", 1)
    produce(cluster, topic, 10)
    session = ConfluentSession(cluster.bootstrap, topic, "session-group", "session-tx",
                               20_000, {})
    try:
        deadline = time.monotonic() + 30
        records: list[Any] = []
        while len(records) < 3 and time.monotonic() < deadline:
            records += session.poll(0.2, 3 - len(records))
        assert [r.offset for r in records] == [0, 1, 2]
        assert session.positions() == {0: 3}
        session.begin()
        session.send_offsets(session.positions())
        session.commit()
        session.rewind()  # to the committed 3: no position until the next record
        assert session.positions() == {}
        deadline = time.monotonic() + 30
        records = []
        while not records and time.monotonic() < deadline:
            records = session.poll(0.2, 1)
        assert [r.offset for r in records] == [3] and session.positions() == {0: 4}
    finally:
        session.close()
