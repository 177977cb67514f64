"""Transactions on a real 3-broker cluster, with a client no one here wrote on the other side:
our transactional producer read by confluent-kafka's read_committed consumer, and
confluent-kafka's transactional producer (librdkafka) read by our read_committed consumer;
a producer restarted with the same transactional id fences the old one.

Skipped when the brokers do not serve the transaction APIs (EndTxn absent from
ApiVersions), i.e. on a tree without the broker's transaction coordinator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import KafkaError
from confluent_kafka import Producer as CkProducer
from confluent_kafka import TopicPartition as CkTopicPartition

from clients.consumer.consumer import Consumer
from clients.network.connection import BrokerConnection
from clients.producer.idempotence import ProducerFencedError
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.topics import TopicPartition
from tests.broker.cluster_harness import LocalCluster
from tests.broker.compat.common import create, start_cluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    started = start_cluster(Path(tmp_path_factory.mktemp("txn")))
    running = next(started)
    try:
        port = next(iter(running.state.brokers.values())).port
        conn = BrokerConnection("127.0.0.1", port, request_timeout_ms=10_000)
        try:
            conn.connect()
            served = int(ApiKey.END_TXN) in conn.api_versions
        finally:
            conn.close()
        if not served:
            pytest.skip("the brokers do not serve EndTxn (no transaction coordinator here)")
        yield running
    finally:
        started.close()  # stops the processes (by PID) even when skipped or failed


def eventually(read: Callable[[], list[bytes]], expected: list[bytes]) -> None:
    """``read()`` equals ``expected`` within 30 s: a commit returns once the coordinator
    wrote its decision, the markers (and so the last stable offset) follow a moment
    later, as in Kafka.  No read may ever show a record that is not expected (an aborted
    one)."""

    def complete() -> bool:
        got = read()
        assert set(got) <= set(expected), sorted(set(got) - set(expected))
        return got == expected

    wait_until(complete, 30, "every committed record visible", 0.05)


def ours_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every value of ``topic`` a read_committed consumer of ours sees, up to the LSO."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out: list[bytes] = []
    with Consumer(bootstrap, isolation_level="read_committed", fetch_max_wait_ms=50,
                  auto_offset_reset="earliest") as consumer:  # fmt: skip
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, (out, ends)
            for records in consumer.poll(100).values():
                out += [r.value for r in records]
    return sorted(out)


def theirs_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every value confluent-kafka's read_committed consumer sees up to each partition's end."""
    consumer = CkConsumer({"bootstrap.servers": bootstrap, "group.id": f"ck-{topic}",
                           "isolation.level": "read_committed", "enable.auto.commit": False,
                           "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    out: list[bytes] = []
    try:
        consumer.assign([CkTopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 60
        at_end: set[int] = set()
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, (out, at_end)
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            out.append(msg.value())
    finally:
        consumer.close()
    return sorted(out)


def test_ours_commits_and_aborts_theirs_reads_committed(cluster: LocalCluster) -> None:
    topic = create(cluster, "txn-ours", partitions=3)
    with Producer(cluster.bootstrap, transactional_id="ours-1", linger_ms=5) as prod:
        prod.init_transactions()
        for t in range(6):
            prod.begin_transaction()
            for i in range(10):
                prod.send(topic, b"t%d-%d" % (t, i), partition=i % 3)
            if t % 2:
                prod.abort_transaction()
            else:
                prod.commit_transaction()
    committed = sorted(b"t%d-%d" % (t, i) for t in (0, 2, 4) for i in range(10))
    eventually(lambda: ours_committed(cluster.bootstrap, topic, 3), committed)
    eventually(lambda: theirs_committed(cluster.bootstrap, topic, 3), committed)


def test_theirs_commits_and_aborts_ours_reads_committed(cluster: LocalCluster) -> None:
    topic = create(cluster, "txn-theirs", partitions=3)
    producer = CkProducer({"bootstrap.servers": cluster.bootstrap,
                           "transactional.id": "theirs-1", "linger.ms": 5})  # fmt: skip
    producer.init_transactions(30)
    for t in range(4):
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, value=b"t%d-%d" % (t, i), partition=i % 3)
        if t % 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    committed = sorted(b"t%d-%d" % (t, i) for t in (0, 2) for i in range(10))
    eventually(lambda: ours_committed(cluster.bootstrap, topic, 3), committed)


def test_a_restarted_producer_fences_the_old_one(cluster: LocalCluster) -> None:
    topic = create(cluster, "txn-fence", partitions=1)
    old = Producer(cluster.bootstrap, transactional_id="fence-1", linger_ms=0)
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, b"zombie", partition=0)
        old.flush()
        with Producer(cluster.bootstrap, transactional_id="fence-1", linger_ms=0) as new:
            new.init_transactions()
            with pytest.raises(ProducerFencedError):
                old.commit_transaction()
            new.begin_transaction()
            new.send(topic, b"fresh", partition=0)
            new.commit_transaction()
    finally:
        old.close()
    eventually(lambda: ours_committed(cluster.bootstrap, topic, 1), [b"fresh"])


def test_offsets_commit_with_the_transaction_only(cluster: LocalCluster) -> None:
    """Consume-transform-produce: the group's offsets move only when the transaction
    that carries them commits."""
    source = create(cluster, "txn-source", partitions=1)
    sink = create(cluster, "txn-sink", partitions=1)
    src = TopicPartition(source, 0)
    with Producer(cluster.bootstrap, linger_ms=0) as plain:
        for i in range(4):
            plain.send(source, b"in-%d" % i, partition=0).get(30)
    with (Consumer(cluster.bootstrap, group_id="pipeline", enable_auto_commit=False,
                   auto_offset_reset="earliest", isolation_level="read_committed") as consumer,
          Producer(cluster.bootstrap, transactional_id="pipeline-1", linger_ms=0) as prod):
        consumer.subscribe([source])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 4:
            assert time.monotonic() < deadline, got
            got += [r.value for rs in consumer.poll(200).values() for r in rs]
        prod.init_transactions()
        prod.begin_transaction()
        prod.send(sink, b"out-aborted", partition=0)
        prod.send_offsets_to_transaction({src: 2}, consumer.group_metadata())
        prod.abort_transaction()
        assert consumer.committed([src])[src] is None
        prod.begin_transaction()
        for value in got:
            prod.send(sink, value.replace(b"in", b"out"), partition=0)
        prod.send_offsets_to_transaction({src: 4}, consumer.group_metadata())
        prod.commit_transaction()

        def moved() -> bool:  # once the marker reached the group's offsets partition
            committed = consumer.committed([src])[src]
            return committed is not None and committed.offset == 4

        wait_until(moved, 30, "the transaction's offset committed", 0.05)
    eventually(lambda: ours_committed(cluster.bootstrap, sink, 1),
               [b"out-%d" % i for i in range(4)])
