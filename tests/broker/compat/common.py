"""Shared pieces of the real-client matrix: one 3-broker cluster, topics, our own reader.

The clients under test (confluent-kafka / librdkafka, kafka-python, aiokafka) were written
by others against Apache Kafka; these tests only use their public APIs, as an application
would, so a failure here is a difference between minikafka and Kafka.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.network.connection import BrokerConnection
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.topics import TopicPartition
from clients.records.batch import COMPRESSION_CODECS, iter_batches
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until

CODECS = ["gzip", "snappy", "lz4", "zstd"]
OVERRIDES: dict[str, object] = {"group_initial_rebalance_delay_ms": 0,
                                "offsets_topic_num_partitions": 3}


def start_cluster(root: Path) -> Iterator[LocalCluster]:
    """A controller and 3 brokers for one test module; stopped by PID when it ends."""
    with LocalCluster(root, 3, OVERRIDES) as cluster:
        yield cluster


def create(cluster: LocalCluster, name: str, partitions: int = 3,
           configs: dict[str, str] | None = None) -> str:
    """Create ``name`` (RF 3, min ISR 2) with our admin client; wait for its leaders."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name, partitions, 3,
                                      {"min.insync.replicas": "2", **(configs or {})})])
    for p in range(partitions):
        cluster.wait_partition(name, p, lambda s: s.get("leader", -1) >= 0, "a leader")
    # Brokers learn of the topic from the controller's metadata log a moment later, as in
    # Kafka; wait until each one serves it, as a deployment script would.
    for port in [info.port for info in cluster.state.brokers.values()]:
        wait_until(functools.partial(broker_knows, port, name, partitions), 30,
                   f"broker on port {port} serving {name}")
    return name


def broker_knows(port: int, topic: str, partitions: int) -> bool:
    conn = BrokerConnection("127.0.0.1", port, request_timeout_ms=10_000)
    try:
        conn.connect()
        answer = conn.request(ApiKey.METADATA, {"topics": [{"name": topic}]})
    finally:
        conn.close()
    (entry,) = answer["topics"]
    return entry["error_code"] == 0 and len(entry["partitions"]) == partitions and all(
        p["leader_id"] >= 0 for p in entry["partitions"])


def read_ours(bootstrap: str, topic: str, partitions: int, expected: int,
              timeout_s: float = 60.0) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    """Every (key, value) of ``topic`` per partition, read with our own consumer."""
    out: dict[int, list[tuple[bytes | None, bytes | None]]] = {p: [] for p in range(partitions)}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])

        def done() -> bool:
            for tp, records in consumer.poll(timeout_ms=200).items():
                out[tp.partition].extend((r.key, r.value) for r in records)
            return sum(map(len, out.values())) >= expected

        wait_until(done, timeout_s, f"{expected} records from {topic}", 0)
    return out


def values(per_partition: dict[int, list[tuple[bytes | None, bytes | None]]]) -> list[bytes]:
    return sorted(v for records in per_partition.values() for _, v in records if v is not None)


def stored_codecs(cluster: LocalCluster, topic: str, partitions: int,
                  min_records: int = 10) -> set[str]:
    """The compression codec of every batch of at least ``min_records`` records the
    leaders' logs hold (stored as sent).  Smaller batches are left out: kafka-python sends a
    batch uncompressed when the codec would not make it smaller (``_maybe_compress`` in
    its ``kafka/record/default_records.py``), which a batch of a record or two often is
    (a loaded run failed on a 'none' batch beside the snappy ones)."""
    found: set[str] = set()
    for p in range(partitions):
        leader = cluster.partition(topic, p)["leader"]
        data = cluster.replica_bytes(str(leader), topic, p, 2**62)
        found.update(COMPRESSION_CODECS[h.attributes & 7] for _, h in iter_batches(data)
                     if h.last_offset_delta + 1 >= min_records)
    return found


def produce_ours(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]],
                 compression_type: str = "none") -> None:
    """Send ``records`` with our own producer (acks=all), compressed as asked."""
    with Producer(bootstrap, acks="all", compression_type=compression_type,
                  linger_ms=20) as producer:
        futures = [producer.send(topic, value, key=key) for key, value in records]
        producer.flush()
        for f in futures:
            f.result(30)


