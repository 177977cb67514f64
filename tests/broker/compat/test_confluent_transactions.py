"""confluent-kafka's transactional producer and read_committed consumer against a 3-broker
minikafka cluster, unchanged (issue 32).

librdkafka was written against Apache Kafka: ``init_transactions`` (FindCoordinator for a
transactional id, InitProducerId), ``begin_transaction``, transactional produce
(AddPartitionsToTxn), ``send_offsets_to_transaction`` (AddOffsetsToTxn, TxnOffsetCommit),
``commit_transaction``/``abort_transaction`` (EndTxn; the coordinator writes the markers).
A ``read_committed`` consumer must see exactly the committed records, in order, and a
``read_uncommitted`` one sees the aborted data too; a second producer with the same
transactional id fences the first.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.broker.cluster_harness import LocalCluster
from tests.broker.compat.common import create, start_cluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from start_cluster(Path(tmp_path_factory.mktemp("confluent_txn")))


def txn_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 30_000, "linger.ms": 5})
    producer.init_transactions(30)
    return producer


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str,
             expected: int, timeout_s: float = 30.0, group: str | None = None) -> list[Any]:
    """Every record of ``topic`` up to ``expected`` with the given isolation level."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group or f"r-{topic}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[Any] = []

        def done() -> bool:
            for m in consumer.consume(500, 0.2):
                if m.error() is None:
                    got.append(m)
                else:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            return len(got) >= expected

        wait_until(done, timeout_s, f"{expected} {isolation} records of {topic}", 0)
        # nothing more arrives: what is visible is exactly what was expected
        more = [m for m in consumer.consume(500, 1.0) if m.error() is None]
        return got + more
    finally:
        consumer.close()


def test_committed_visible_aborted_hidden(cluster: LocalCluster) -> None:
    topic = create(cluster, "txn-basic", 2)
    producer = txn_producer(cluster.bootstrap, "t-basic")
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=f"c1-{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=f"a-{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0  # on the brokers, or abort would just drop them unsent
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, value=f"c2-{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)

    committed = read_all(cluster.bootstrap, topic, 2, "read_committed", 16)
    values = sorted(m.value().decode() for m in committed)
    assert values == sorted([f"c1-{i}" for i in range(10)] + [f"c2-{i}" for i in range(6)])
    for p in range(2):  # per partition in the order written
        mine = [m.value().decode() for m in committed if m.partition() == p]
        assert mine == [v for v in [f"c1-{i}" for i in range(10) if i % 2 == p]
                        + [f"c2-{i}" for i in range(6) if i % 2 == p]]
    everything = read_all(cluster.bootstrap, topic, 2, "read_uncommitted", 26)
    assert sum(m.value().startswith(b"a-") for m in everything) == 10


def test_open_transaction_holds_read_committed_back(cluster: LocalCluster) -> None:
    topic = create(cluster, "txn-open", 1)
    producer = txn_producer(cluster.bootstrap, "t-open")
    producer.begin_transaction()
    producer.produce(topic, value=b"pending", partition=0)
    producer.flush(30)
    # read_uncommitted sees it at once; read_committed does not until the commit
    assert [m.value() for m in read_all(cluster.bootstrap, topic, 1, "read_uncommitted",
                                        1)] == [b"pending"]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "r-open",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert [m for m in consumer.consume(10, 1.5) if m.error() is None] == []
        producer.commit_transaction(30)
        got: list[Any] = []
        wait_until(lambda: bool(got.extend(m for m in consumer.consume(10, 0.2)
                                           if m.error() is None)) or len(got) >= 1,
                   30, "the committed record", 0)
        assert [m.value() for m in got] == [b"pending"]
    finally:
        consumer.close()


def test_consume_transform_produce_commits_offsets_in_the_transaction(
    cluster: LocalCluster,
) -> None:
    source = create(cluster, "txn-src", 1)
    sink = create(cluster, "txn-sink", 1)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(20):
        plain.produce(source, value=f"{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ctp",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    producer = txn_producer(cluster.bootstrap, "t-ctp")
    try:
        consumer.subscribe([source])
        got: list[Any] = []
        wait_until(lambda: bool(got.extend(m for m in consumer.consume(20, 0.2)
                                           if m.error() is None)) or len(got) >= 20,
                   60, "20 source records", 0)
        first, second = got[:10], got[10:20]
        for batch, commit in ((first, True), (second, False)):
            producer.begin_transaction()
            for m in batch:
                producer.produce(sink, value=b"x" + m.value(), partition=0)
            assert producer.flush(30) == 0
            last = batch[-1]
            producer.send_offsets_to_transaction(
                [TopicPartition(source, 0, last.offset() + 1)],
                consumer.consumer_group_metadata(), 30)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
        committed = consumer.committed([TopicPartition(source, 0)], 30)
        assert committed[0].offset == first[-1].offset() + 1  # the aborted one did not move it
    finally:
        consumer.close()
    out = read_all(cluster.bootstrap, sink, 1, "read_committed", 10)
    assert [m.value() for m in out] == [b"x" + m.value() for m in first]


def test_a_second_producer_with_the_same_id_fences_the_first(cluster: LocalCluster) -> None:
    topic = create(cluster, "txn-fence", 1)
    old = txn_producer(cluster.bootstrap, "t-fence")
    old.begin_transaction()
    old.produce(topic, value=b"old", partition=0)
    old.flush(30)
    new = txn_producer(cluster.bootstrap, "t-fence")  # aborts the old one's transaction
    new.begin_transaction()
    new.produce(topic, value=b"new", partition=0)
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        old.produce(topic, value=b"old-2", partition=0)
        old.commit_transaction(30)
    assert raised.value.args[0].fatal() or raised.value.args[0].code() in (
        KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    assert [m.value() for m in read_all(cluster.bootstrap, topic, 1, "read_committed", 1)] \
        == [b"new"]
