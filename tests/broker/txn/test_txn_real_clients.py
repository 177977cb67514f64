"""Transactions from clients no one here wrote, on a real 3-broker cluster:
confluent-kafka (librdkafka) commits one transaction and aborts the next, and its
read_committed consumer sees exactly the committed records; kafka-python's
transactional producer commits too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.cluster_harness import LocalCluster
from tests.broker.compat.common import create
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root: Path = tmp_path_factory.mktemp("txn-clients")
    with LocalCluster(root, 3, {"group_initial_rebalance_delay_ms": 0,
                                "offsets_topic_num_partitions": 3}) as c:
        yield c


def committed_values(cluster: LocalCluster, topic: str, expected: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap, "group.id": f"reader-{topic}",
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])

        def read() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
            return len(values) >= expected
        wait_until(read, 60, f"{expected} committed records", 0)
        for _ in range(4):  # nothing more (the aborted ones) arrives
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_confluent_kafka_commit_then_abort(cluster: LocalCluster) -> None:
    topic = create(cluster, "cf-txn", 3)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": cluster.bootstrap, "transactional.id": "cf-tx",
        "transaction.timeout.ms": 60_000})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, f"committed-{i}".encode(), partition=i % 3)
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"aborted-{i}".encode(), partition=i % 3)
    producer.flush(30)
    producer.abort_transaction(60)
    values = committed_values(cluster, topic, 30)
    assert sorted(values) == sorted(f"committed-{i}".encode() for i in range(30))


def test_kafka_python_commit(cluster: LocalCluster) -> None:
    kafka = pytest.importorskip("kafka")
    topic = create(cluster, "kp-txn", 3)
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap,
                                   transactional_id="kp-tx")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(12):
            producer.send(topic, f"kp-{i}".encode(), partition=i % 3)
        producer.commit_transaction()
    finally:
        producer.close(10)
    values = committed_values(cluster, topic, 12)
    assert sorted(values) == sorted(f"kp-{i}".encode() for i in range(12))


def test_confluent_kafka_a_restarted_producer_fences_the_old_one(cluster: LocalCluster) -> None:
    topic = create(cluster, "cf-fence", 1)
    config = {"bootstrap.servers": cluster.bootstrap, "transactional.id": "cf-fence-tx"}
    old = confluent_kafka.Producer(config)
    old.init_transactions(60)
    old.begin_transaction()
    old.produce(topic, b"from-the-old-one", partition=0)
    old.flush(30)
    new = confluent_kafka.Producer(config)
    new.init_transactions(60)  # aborts the old one's open transaction, bumps the epoch
    with pytest.raises(confluent_kafka.KafkaException) as err:
        old.commit_transaction(30)
    assert err.value.args[0].fatal() or err.value.args[0].txn_requires_abort()
    new.begin_transaction()
    new.produce(topic, b"from-the-new-one", partition=0)
    new.commit_transaction(60)
    assert committed_values(cluster, topic, 1) == [b"from-the-new-one"]
