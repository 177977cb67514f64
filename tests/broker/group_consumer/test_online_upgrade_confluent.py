"""Kafka's online upgrade with a real Kafka client: two confluent-kafka consumers with the
classic protocol (``group.protocol=classic``, the eager ``range`` assignor) hold every
partition; a third confluent-kafka consumer joins with ``group.protocol=consumer``
(KIP-848).  The group converts: every partition ends up owned exactly once across the
three (checked at every rebalance callback), the committed offsets are kept, and the
group's type is consumer.  Then the KIP-848 consumer closes and the group converts back
to a classic group whose two members own every partition again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer

from clients.admin import Admin
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.group_consumer.test_online_upgrade import Owners
from tests.broker.processes import wait_until

pytestmark = pytest.mark.multiprocess

TOPIC, GROUP, PARTITIONS = "upgrade", "upgrade-group", 6  # as Owners counts them


class Member(threading.Thread):
    """One confluent-kafka consumer polling in a thread; its rebalance callbacks report
    what it owns."""

    def __init__(self, name: str, bootstrap: str, owners: Owners, protocol: str) -> None:
        super().__init__(name=name, daemon=True)
        self.owners = owners
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": protocol,
            "auto.offset.reset": "earliest", "auto.commit.interval.ms": 200}
        if protocol == "classic":
            config.update({"session.timeout.ms": 6_000, "heartbeat.interval.ms": 200,
                           "partition.assignment.strategy": "range"})
        self.consumer = Consumer(config)
        self.count = 0
        self.stop_flag = threading.Event()
        self.error: BaseException | None = None

    def _assigned(self, _consumer: Consumer, partitions: list[Any]) -> None:
        self.owners.change(self.name, set(), {(p.topic, p.partition) for p in partitions})

    def _revoked(self, _consumer: Consumer, partitions: list[Any]) -> None:
        self.owners.change(self.name, {(p.topic, p.partition) for p in partitions}, set())

    def run(self) -> None:
        try:
            self.consumer.subscribe([TOPIC], on_assign=self._assigned,
                                    on_revoke=self._revoked, on_lost=self._revoked)
            while not self.stop_flag.is_set():
                message = self.consumer.poll(0.1)
                if message is not None and message.error() is None:
                    self.count += 1
            self.consumer.close()
        except BaseException as e:  # reported by the test
            self.error = e

    def finish(self) -> None:
        self.stop_flag.set()
        self.join(60)
        assert not self.is_alive(), f"{self.name} did not stop"
        assert self.error is None, f"{self.name}: {self.error!r}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, brokers=1,
                      overrides={"group_initial_rebalance_delay_ms": 0,
                                 "group_consumer_heartbeat_interval_ms": 500}) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        yield c


def test_confluent_kafka_consumers_upgrade_and_downgrade_a_group(
        cluster: LocalCluster) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(300):
        producer.produce(TOPIC, str(i).encode(), partition=i % PARTITIONS)
    producer.flush(30)
    owners = Owners()
    owners_all = {(TOPIC, p) for p in range(PARTITIONS)}

    def exactly_once(names: set[str]) -> bool:
        with owners.lock:
            union = [tp for owned in owners.owned.values() for tp in owned]
            return (set(union) == owners_all and len(union) == PARTITIONS
                    and all(owners.owned.get(n) for n in names))

    members = [Member(f"classic{i}", cluster.bootstrap, owners, "classic") for i in range(2)]
    try:
        for m in members:
            m.start()
        wait_until(lambda: exactly_once({"classic0", "classic1"})
                   and sum(m.count for m in members) >= 300, 60,
                   "two classic consumers own every partition and consumed everything")
        with Admin(cluster.bootstrap) as admin:
            assert admin.describe_groups([GROUP])[GROUP].group_type == "classic"
            wait_until(lambda: sorted(o.offset for o in admin.list_group_offsets(
                GROUP).values()) == [50] * PARTITIONS, 30, "the classic group commits")
        newcomer = Member("kip848", cluster.bootstrap, owners, "consumer")
        members.append(newcomer)
        t0 = time.monotonic()
        newcomer.start()
        wait_until(lambda: exactly_once({"classic0", "classic1", "kip848"}), 60,
                   "the three consumers own every partition exactly once")
        upgraded_s = time.monotonic() - t0
        with Admin(cluster.bootstrap) as admin:
            desc = admin.describe_groups([GROUP])[GROUP]
            assert (desc.group_type, len(desc.members)) == ("consumer", 3)
            committed = admin.list_group_offsets(GROUP)
        assert sorted(o.offset for o in committed.values()) == [50] * PARTITIONS
        members.remove(newcomer)
        t0 = time.monotonic()
        newcomer.finish()
        wait_until(lambda: exactly_once({"classic0", "classic1"}), 60,
                   "the two classic consumers own every partition again")
        downgraded_s = time.monotonic() - t0
        with Admin(cluster.bootstrap) as admin:
            assert admin.describe_groups([GROUP])[GROUP].group_type == "classic"
        print(f"\nconfluent-kafka online upgrade: {upgraded_s:.2f} s; downgrade: "
              f"{downgraded_s:.2f} s")
    finally:
        for m in members:
            m.finish()
    assert owners.overlaps == []
