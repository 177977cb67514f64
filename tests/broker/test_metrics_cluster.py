"""The metrics ports of a real 3-broker cluster (``cluster start --metrics``), scraped over
HTTP and parsed with prometheus_client's own parser, checked against a known state:
records produced, a group's committed offset, a broker killed; and a broker that
requires logins asks scrapes for one."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker import users
from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.types import NewTopic, TopicPartition
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess]

TOPIC, SOLO = "metered", "solo"
RECORDS = 120

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain; version=")
        text = answer.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, 3, {"replica_lag_time_max_ms": 1500}, metrics=True) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 3, {"min_insync_replicas": "2"}),
                                 NewTopic(SOLO, 3, 1)])
        c.wait_partition(TOPIC, 0, lambda p: len(p["isr"]) == 3, "all in sync")
        yield c


def test_metrics_match_the_cluster_state(cluster: LocalCluster) -> None:
    state = cluster.state
    ports = {int(k): b.metrics_port for k, b in state.brokers.items()}
    controller_port = state.controller.metrics_port
    assert all(p > 0 for p in ports.values()) and controller_port > 0
    assert cluster.report()["processes"][0]["metrics_port"] == controller_port  # status

    leader = cluster.partition(TOPIC, 0)["leader"]
    before = scrape(ports[leader])
    with Producer(cluster.bootstrap, acks="all", linger_ms=5) as producer:
        futures = [producer.send(TOPIC, b"v%03d" % i, partition=0) for i in range(RECORDS)]
        acked = sum(1 for f in futures if f.result(30).offset >= 0)
    assert acked == RECORDS
    with Consumer(cluster.bootstrap, group_id="billing", enable_auto_commit=False) as consumer:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        wait_until(lambda: bool(consumer.poll(200)), 20, "records fetched")
        consumer.commit({tp: 40})

    after = scrape(ports[leader])
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) \
        == RECORDS
    assert value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC) \
        > RECORDS * 4
    assert value(after, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) > 0
    assert value(after, "kafka_server_brokertopicmetrics_replicationbytesout_total") > 0
    produce = value(after, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert produce >= 1 + before.get(("kafka_network_requestmetrics_requests_total",
                                      frozenset({("request", "Produce")})), 0.0)
    assert value(after, "kafka_network_requestmetrics_totaltimems_count",
                 request="Produce") == produce
    assert value(after, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce",
                 le="+Inf") == produce
    assert value(after, "kafka_network_requestmetrics_requests_total",
                 request="FetchFollower") > 0
    assert value(after, "kafka_server_replicamanager_leadercount") >= 1
    assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert ("kafka_server_delayedoperationpurgatory_purgatorysize",
            frozenset({("delayedOperation", "Produce")})) in after
    assert value(after, "minikafka_bufferpool_total_bytes") > 0
    for node, port in ports.items():  # followers append as followers: no messages in
        if node != leader:
            follower = scrape(port)
            assert ("kafka_server_brokertopicmetrics_messagesin_total",
                    frozenset({("topic", TOPIC)})) not in follower
            assert value(follower, "kafka_server_brokertopicmetrics_replicationbytesin_total") \
                >= value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC)

    lags = [s for s in map(scrape, ports.values())
            if ("kafka_consumergroup_lag", frozenset(
                {("consumergroup", "billing"), ("topic", TOPIC), ("partition", "0")})) in s]
    assert len(lags) == 1, "exactly the group's coordinator exports its lag"
    assert value(lags[0], "kafka_consumergroup_lag", consumergroup="billing", topic=TOPIC,
                 partition="0") == RECORDS - 40
    assert value(lags[0], "kafka_consumergroup_current_offset", consumergroup="billing",
                 topic=TOPIC, partition="0") == 40

    controller = scrape(controller_port)
    assert value(controller, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(controller, "kafka_controller_kafkacontroller_fencedbrokercount") == 0
    assert value(controller, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(controller, "kafka_controller_kafkacontroller_globalpartitioncount") >= 4

    # a follower of TOPIC dies: under-replicated on the leader, fenced and (for its
    # replication-factor-1 partitions of SOLO) offline on the controller
    victim = next(n for n in ports if n != leader)
    solo_on_victim = sum(1 for i in range(3) if cluster.partition(SOLO, i)["replicas"]
                         == [victim])
    cluster.kill(str(victim))
    wait_until(lambda: value(scrape(controller_port),
                             "kafka_controller_kafkacontroller_fencedbrokercount") == 1,
               30, "the controller reports the broker fenced")

    def under_replicated() -> bool:
        """The leader's count is its partitions (as the controller says) with the victim
        among their replicas (TOPIC-0 and, once it committed, __consumer_offsets')."""
        expected = sum(1 for p in cluster.report()["partitions"]
                       if p["leader"] == leader and victim in p["replicas"])
        return value(scrape(ports[leader]),
                     "kafka_server_replicamanager_underreplicatedpartitions") == expected >= 1

    wait_until(under_replicated, 30, "the leader reports its partitions under-replicated")
    controller = scrape(controller_port)
    assert value(controller, "kafka_controller_kafkacontroller_activebrokercount") == 2
    assert value(controller, "kafka_controller_kafkacontroller_offlinepartitionscount") \
        == solo_on_victim
    requests = value(controller, "kafka_network_requestmetrics_requests_total",
                     request="BrokerHeartbeat")
    wait_until(lambda: value(scrape(controller_port), "kafka_network_requestmetrics_"
                             "requests_total", request="BrokerHeartbeat") > requests, 10,
               "heartbeats counted")


def test_a_broker_that_requires_logins_asks_scrapes_for_one(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 1, {"client_auth_required": "true"}, metrics=True) as c:
        users.add_user(Path(c.data_dir) / users.USERS_FILE, "prometheus", b"scrape-secret")
        url = f"http://127.0.0.1:{c.state.brokers['0'].metrics_port}/metrics"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=5)
        refused.value.close()
        assert refused.value.code == 401
        login = "Basic " + base64.b64encode(b"prometheus:scrape-secret").decode()

        def scraped() -> bool:  # the broker reads the users file within a second
            try:
                with urllib.request.urlopen(urllib.request.Request(
                        url, headers={"Authorization": login}), timeout=5) as answer:
                    return b"kafka_server_replicamanager_partitioncount" in answer.read()
            except urllib.error.HTTPError as exc:
                exc.close()
                assert exc.code == 401
                return False

        wait_until(scraped, 10, "a scrape logged in as a SASL user")
