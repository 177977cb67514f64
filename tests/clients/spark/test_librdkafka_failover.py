"""librdkafka's idempotent producer across a leader SIGKILL, checked by the verify job.

confluent-kafka (librdkafka) sends a paced stream with ``enable.idempotence`` and
acks=all to a 3-broker cluster (RF 3, min ISR 2) while the test SIGKILLs the leader of
partition 0 and later restarts it: the client must find the new leader from metadata
and retry.  Every successful delivery report goes to a workload ledger (the same format
``minikafka workload`` writes) and ``minikafka verify``'s Spark job checks the topic
against it: 0 lost, 0 duplicated, 0 reordered, 0 phantom.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer
from pyspark.sql import SparkSession

from clients.spark.verify.job import VIOLATIONS, run_verify
from clients.workload.ledger import LedgerWriter
from clients.workload.run import encode_value, new_run_id
from tests.broker.cluster_harness import LocalCluster
from tests.broker.compat.common import create
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess, pytest.mark.slow]

MESSAGES = 6_000
BLOCK = 500  # sequences announced to the ledger (fsync'd) before they are sent


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, 3, {"replica_lag_time_max_ms": 1500}) as c:
        yield c


def test_idempotent_librdkafka_producer_through_a_leader_kill_verifies_clean(
        spark: SparkSession, cluster: LocalCluster, tmp_path: Path) -> None:
    topic = create(cluster, "rdk-failover", 3)
    run_id = new_run_id()
    ledger_path = tmp_path / "rdk-ledger.tsv"
    errors: list[KafkaError] = []
    acked = threading.Event()
    acks = 0
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "message.timeout.ms": 120_000})
    with LedgerWriter(ledger_path, run_id, topic) as ledger:
        def delivered(err: KafkaError | None, msg: Message, sequence: int, key: str) -> None:
            nonlocal acks
            if err is not None:
                errors.append(err)
                return
            ledger.ack(0, sequence, key, topic, msg.partition(), msg.offset())
            acks += 1
            acked.set()

        victim = cluster.partition(topic, 0)["leader"]
        for sequence in range(MESSAGES):
            if sequence % BLOCK == 0:
                ledger.sent(0, min(sequence + BLOCK, MESSAGES))
            if sequence == MESSAGES // 3:
                producer.flush(30)
                cluster.kill(str(victim))
            if sequence == 2 * MESSAGES // 3:
                cluster.wait_partition(topic, 0, lambda p: p["leader"] not in (-1, victim),
                                       "a new leader")
                cluster.restart(str(victim))
            key = f"p0-k{sequence % 64}"
            producer.produce(topic, key=key.encode(), value=encode_value(run_id, 0, sequence),
                             on_delivery=lambda err, msg, s=sequence, k=key: delivered(
                                 err, msg, s, k))
            producer.poll(0)
        assert producer.flush(120) == 0, "records still queued after 120 s"
    assert errors == []
    assert acks == MESSAGES
    wait_until(lambda: len(cluster.partition(topic, 0)["isr"]) == 3, 60, "victim back in ISR")
    report = run_verify(spark, str(ledger_path), bootstrap=cluster.bootstrap)
    assert {name: report.counts[name] for name in VIOLATIONS} == dict.fromkeys(VIOLATIONS, 0)
    assert report.ok, report.table()
    assert report.counts["acked"] == MESSAGES
