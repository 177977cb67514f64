"""kafka-python's transactional producer and read_committed consumer against a 3-broker
minikafka cluster, unchanged (issue 32).

kafka-python 3.x was written against Apache Kafka: ``init_transactions``
(FindCoordinator for a transactional id, InitProducerId), ``begin_transaction``,
transactional ``send`` (AddPartitionsToTxn), ``send_offsets_to_transaction``
(AddOffsetsToTxn, TxnOffsetCommit with the consumer's ``group_metadata()``),
``commit_transaction``/``abort_transaction`` (EndTxn; the coordinator writes the
markers).  A ``read_committed`` KafkaConsumer must see exactly the committed records, in
order, and a ``read_uncommitted`` one the aborted data too; a second producer with the
same transactional id fences the first (kafka-python raises ``ProducerFencedError``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka import errors as KafkaErrors

from tests.broker.cluster_harness import LocalCluster
from tests.broker.compat.common import create, start_cluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from start_cluster(Path(tmp_path_factory.mktemp("kafka_python_txn")))


def txn_producer(bootstrap: str, transactional_id: str) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                             transaction_timeout_ms=30_000, linger_ms=5, max_block_ms=30_000)
    producer.init_transactions()
    return producer


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str,
             expected: int, timeout_s: float = 30.0) -> list[Any]:
    """Every record of ``topic`` up to ``expected`` (and whatever more arrives in a
    second) with the given isolation level."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        got: list[Any] = []

        def poll(timeout_ms: int) -> None:
            for records in consumer.poll(timeout_ms=timeout_ms).values():
                got.extend(records)

        wait_until(lambda: poll(200) or len(got) >= expected, timeout_s,
                   f"{expected} {isolation} records of {topic}", 0)
        poll(1000)  # nothing more arrives: what is visible is exactly what was expected
        return got
    finally:
        consumer.close()


def test_committed_visible_aborted_hidden(cluster: LocalCluster) -> None:
    topic = create(cluster, "kp-txn-basic", 2)
    producer = txn_producer(cluster.bootstrap, "kp-basic")
    try:
        for prefix, n, commit in (("c1", 10, True), ("a", 10, False), ("c2", 6, True)):
            producer.begin_transaction()
            for i in range(n):
                producer.send(topic, value=f"{prefix}-{i}".encode(), partition=i % 2)
            producer.flush(30)  # on the brokers: abort must hide them with markers
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=10)

    committed = read_all(cluster.bootstrap, topic, 2, "read_committed", 16)
    for p in range(2):  # exactly the committed records, per partition in the order written
        mine = [m.value.decode() for m in committed if m.partition == p]
        assert mine == [f"c1-{i}" for i in range(10) if i % 2 == p] + [
            f"c2-{i}" for i in range(6) if i % 2 == p]
    assert len(committed) == 16
    everything = read_all(cluster.bootstrap, topic, 2, "read_uncommitted", 26)
    assert len(everything) == 26
    assert sorted(m.value for m in everything if m.value.startswith(b"a-")) == sorted(
        f"a-{i}".encode() for i in range(10))


def test_offsets_sent_to_a_transaction_are_committed_only_with_it(
    cluster: LocalCluster,
) -> None:
    source = create(cluster, "kp-txn-src", 1)
    sink = create(cluster, "kp-txn-sink", 1)
    plain = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=5)
    for i in range(20):
        plain.send(source, value=f"{i}".encode(), partition=0)
    plain.flush(30)
    plain.close(timeout=10)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id="kp-ctp",
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             isolation_level="read_committed")
    # A read_committed KafkaConsumer asks for stable offsets (OffsetFetch require_stable):
    # while offsets are pending in a transaction the coordinator answers
    # UNSTABLE_OFFSET_COMMIT, as Kafka's does, and kafka-python retries until the
    # transaction ends.  A read_uncommitted one is answered at once with what is committed.
    observer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id="kp-ctp",
                             enable_auto_commit=False, isolation_level="read_uncommitted")
    producer = txn_producer(cluster.bootstrap, "kp-ctp")
    tp = TopicPartition(source, 0)
    try:
        consumer.assign([tp])
        got: list[Any] = []
        wait_until(lambda: bool(got.extend(r for rs in consumer.poll(200).values()
                                           for r in rs)) or len(got) >= 20,
                   60, "20 source records", 0)
        first, second = got[:10], got[10:20]
        for batch, commit in ((first, True), (second, False)):
            producer.begin_transaction()
            for m in batch:
                producer.send(sink, value=b"x" + m.value, partition=0)
            producer.flush(30)
            producer.send_offsets_to_transaction(
                {tp: OffsetAndMetadata(batch[-1].offset + 1, "", -1)},
                consumer.group_metadata())
            before = None if commit else first[-1].offset + 1
            assert observer.committed(tp) == before  # pending: not visible before the end
            if commit:
                producer.commit_transaction()
                wait_until(lambda: observer.committed(tp) == first[-1].offset + 1, 30,
                           "the transaction's offset committed", 0.1)
            else:
                producer.abort_transaction()
        # the aborted one's offset is gone; the stable answer is the committed one's
        assert consumer.committed(tp) == observer.committed(tp) == first[-1].offset + 1
    finally:
        consumer.close()
        observer.close()
        producer.close(timeout=10)
    out = read_all(cluster.bootstrap, sink, 1, "read_committed", 10)
    assert [m.value for m in out] == [b"x" + m.value for m in first]


def test_a_second_producer_with_the_same_id_fences_the_first(cluster: LocalCluster) -> None:
    topic = create(cluster, "kp-txn-fence", 1)
    old = txn_producer(cluster.bootstrap, "kp-fence")
    new: KafkaProducer | None = None
    try:
        old.begin_transaction()
        old.send(topic, value=b"old", partition=0)
        old.flush(30)
        new = txn_producer(cluster.bootstrap, "kp-fence")  # aborts the old one's transaction
        new.begin_transaction()
        new.send(topic, value=b"new", partition=0)
        new.commit_transaction()
        with pytest.raises((KafkaErrors.ProducerFencedError,
                            KafkaErrors.InvalidProducerEpochError)):
            old.send(topic, value=b"old-2", partition=0)
            old.commit_transaction()
    finally:
        old.close(timeout=10)
        if new is not None:
            new.close(timeout=10)
    assert [m.value for m in read_all(cluster.bootstrap, topic, 1, "read_committed", 1)] \
        == [b"new"]
    assert sorted(m.value for m in read_all(cluster.bootstrap, topic, 1, "read_uncommitted",
                                            2)) == [b"new", b"old"]
