"""librdkafka keeps its brokers when it asks a broker that serves before its metadata
image has anything (issue 32, the confluent pipeline stall).

A broker listens for clients as soon as it starts, before it has fetched the controller's
metadata log (Kafka's brokers open their listeners once unfenced).  When such a broker
answered Metadata with no brokers, librdkafka dropped every broker it knew, bootstrap
brokers too, and had none to ask until ``metadata.recovery.rebootstrap.trigger.ms``
(5 minutes) passed: the workload's pipeline workers blocked in
``send_offsets_to_transaction`` and their consumers left the group.  Here the whole
cluster crashes and the broker comes back before the controller, so its image stays
empty while the producer asks it for metadata (it must name itself); once the
controller is back the producer delivers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

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


def test_a_producer_keeps_its_brokers_across_a_broker_serving_before_its_image(
        cluster: LocalCluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
    cluster.wait_partition(TOPIC, 0, lambda s: s.get("leader", -1) >= 0, "a leader")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "message.timeout.ms": 60_000})
    assert delivered(producer, b"before", 30)  # it has learned broker 0
    cluster.kill("controller")
    cluster.kill("0")
    with pytest.raises(AssertionError):  # it serves, but cannot register without controller
        cluster.restart("0")
    seen = producer.list_topics(TOPIC, timeout=10)  # asks the broker with an empty image
    assert sorted(seen.brokers) == [0], seen.brokers  # was {}: librdkafka dropped them all
    cluster.restart("controller")
    assert delivered(producer, b"after", 30)
