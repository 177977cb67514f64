"""librdkafka keeps its brokers across a whole-cluster restart in which a broker comes
back before the controller (issue 32, the confluent pipeline stall).

A broker used to listen for clients as soon as it started, before it had fetched the
controller's metadata log.  When such a broker answered Metadata with no brokers,
librdkafka dropped every broker it knew, bootstrap brokers too, and had none to ask
until ``metadata.recovery.rebootstrap.trigger.ms`` (5 minutes) passed: the workload's
pipeline workers blocked in ``send_offsets_to_transaction`` and their consumers left
the group.  Now (Kafka's start-up order, docs/broker.md) a broker listens only once
its image caught up: here the whole cluster crashes and the broker comes back before
the controller, so it refuses connections (the producer's metadata request fails with
a transport error, as against a broker that is down, and it keeps its brokers); once
the controller is back the producer delivers.  The Metadata guard that names the
broker itself when its image has no unfenced broker is tested in
``tests/broker/handlers/test_metadata_never_empty.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from clients.admin import Admin
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.compat.common import OVERRIDES

pytestmark = [pytest.mark.multiprocess]

TOPIC = "restarted"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, 1, OVERRIDES) as cluster:
        yield cluster


def delivered(producer: Producer, value: bytes, timeout_s: float) -> bool:
    reports: list[object] = []
    producer.produce(TOPIC, value, on_delivery=lambda err, msg: reports.append(err))
    producer.flush(timeout_s)
    return reports == [None]


def test_a_producer_keeps_its_brokers_across_a_broker_restarted_before_its_controller(
        cluster: LocalCluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
    cluster.wait_partition(TOPIC, 0, lambda s: s.get("leader", -1) >= 0, "a leader")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "message.timeout.ms": 60_000})
    assert delivered(producer, b"before", 30)  # it has learned broker 0
    cluster.kill("controller")
    cluster.kill("0")
    with pytest.raises(AssertionError):  # it cannot register without the controller ...
        cluster.restart("0")
    with pytest.raises(KafkaException, match="transport"):  # ... so it does not listen
        producer.list_topics(TOPIC, timeout=5)
    cluster.restart("controller")
    assert delivered(producer, b"after", 30)  # its brokers kept: no 5-minute re-bootstrap
