"""Fetch by topic id against a 3-broker cluster: our consumer fetches at v17 by id in
incremental sessions, and librdkafka (confluent-kafka) reads at the Fetch version it
negotiates (its DEBUG protocol log names each request's version; what it sent goes into
docs/compatibility.md).  Followers fetching by id through a leader kill:
test_kafka_python_sessions.py::test_incremental_sessions_through_a_leader_kill (our
brokers' replica fetchers follow by the hosted topic id)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer

from clients.consumer.consumer import Consumer
from clients.protocol.topics import ZERO_UUID
from clients.protocol.topics import TopicPartition as OurTopicPartition
from tests.broker.cluster_harness import LocalCluster
from tests.broker.compat.common import create, start_cluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]
PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from start_cluster(Path(tmp_path_factory.mktemp("fetch-by-id")))


def produce(cluster: LocalCluster, topic: str, n: int) -> set[bytes]:
    producer = ConfluentProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    sent = {f"{topic}-{i}".encode() for i in range(n)}
    for i, value in enumerate(sorted(sent)):
        producer.produce(topic, value=value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return sent


def test_our_consumer_fetches_by_topic_id_in_sessions(cluster: LocalCluster) -> None:
    topic = create(cluster, "ours-by-id", PARTITIONS)
    sent = produce(cluster, topic, 60)
    got: list[bytes] = []
    leaders = {int(cluster.partition(topic, p)["leader"]) for p in range(PARTITIONS)}
    with Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                  fetch_max_wait_ms=50) as consumer:
        consumer.assign([OurTopicPartition(topic, p) for p in range(PARTITIONS)])
        sessions = consumer._fetcher._sessions  # the fetcher's KIP-227 state per node

        def done() -> bool:
            for records in consumer.poll(timeout_ms=100).values():
                got.extend(r.value for r in records if r.value is not None)
            return sent <= set(got) and leaders <= set(sessions) and all(
                sessions[n].incremental_fetches >= 2 for n in leaders)

        wait_until(done, 60, f"every record, incremental fetches to {leaders}", 0)
        for node in leaders:  # sessions by id: Fetch v17 (names go at most at v12)
            ids = sessions[node].topic_ids
            assert set(ids) == {topic} and ids[topic] != ZERO_UUID
    assert sorted(got) == sorted(sent)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_librdkafka_reads_at_the_fetch_version_it_negotiates(cluster: LocalCluster) -> None:
    topic = create(cluster, "rdkafka-by-id", PARTITIONS)
    sent = produce(cluster, topic, 30)
    lines = Lines()
    logger = logging.getLogger("fetch13-rdkafka")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    consumer = ConfluentConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "rd",
                                  "auto.offset.reset": "earliest", "debug": "protocol",
                                  "fetch.wait.max.ms": 50}, logger=logger)
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])

        def done() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append(message.value())
            return sent <= set(got)

        wait_until(done, 60, "every record read by librdkafka", 0)
    finally:
        consumer.close()
        logger.removeHandler(lines)
    versions: dict[str, set[int]] = {}
    for line in lines.lines:
        if (m := re.search(r"Sent (\w+)Request \(v(\d+)", line)) is not None:
            versions.setdefault(m.group(1), set()).add(int(m.group(2)))
    # librdkafka 2.16 fetches by topic id at v16 (its highest; ours is 17)
    assert max(versions["Fetch"]) >= 13, versions
    assert sorted(got) == sorted(sent)
