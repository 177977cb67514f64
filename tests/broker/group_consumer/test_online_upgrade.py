"""Kafka's online upgrade against a real broker: two of our Consumers with
``group_protocol="classic"`` hold every partition of a topic; a third joins the same
group with ``group_protocol="consumer"`` (KIP-848).  The classic group converts to a
consumer group: the newcomer gets no GROUP_ID_NOT_FOUND, the classic members keep
heartbeating the classic way and give partitions up when told to rejoin, every
partition ends up owned exactly once across the three (checked at every change, from
each member's rebalance listener), the offsets committed by the classic group are kept,
and DescribeGroups / ``minikafka groups describe`` show the group's type consumer.
When the KIP-848 member closes, the group converts back: a classic group whose two
members own every partition again.  And (slow, three brokers) a converted group survives
the loss of its coordinator."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clients.admin import Admin
from clients.cli.main import main as cli_main
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.raw_kafka import call, connect

pytestmark = pytest.mark.multiprocess

TOPIC, GROUP, PARTITIONS = "upgrade", "upgrade-group", 6
ALL = {TopicPartition(TOPIC, p) for p in range(PARTITIONS)}


class Owners:
    """What each member owns, checked for overlap at every change."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owned: dict[str, set[TopicPartition]] = {}
        self.overlaps: list[str] = []

    def change(self, member: str, revoked: set[TopicPartition],
               added: set[TopicPartition]) -> None:
        with self.lock:
            mine = self.owned.setdefault(member, set())
            mine -= revoked
            for other, theirs in self.owned.items():
                if other != member and theirs & added:
                    self.overlaps.append(f"{member} got {sorted(theirs & added)} of {other}")
            mine |= added

    def exactly_once(self, members: set[str]) -> bool:
        with self.lock:
            union = [tp for owned in self.owned.values() for tp in owned]
            return (set(union) == ALL and len(union) == len(ALL)
                    and all(self.owned.get(m) for m in members))


class Member(threading.Thread):
    def __init__(self, name: str, bootstrap: str, owners: Owners, protocol: str) -> None:
        super().__init__(name=name, daemon=True)
        self.owners = owners
        self.consumer = Consumer(bootstrap, group_id=GROUP, group_protocol=protocol,
                                 auto_offset_reset="earliest", auto_commit_interval_ms=200,
                                 fetch_max_wait_ms=100, retry_backoff_ms=50,
                                 session_timeout_ms=10_000, heartbeat_interval_ms=200)
        self.values: list[bytes] = []
        self.stop_flag = threading.Event()
        self.error: BaseException | None = None

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.owners.change(self.name, revoked, set())

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.owners.change(self.name, set(), assigned)

    def run(self) -> None:
        try:
            self.consumer.subscribe([TOPIC], listener=self)
            while not self.stop_flag.is_set():
                for records in self.consumer.poll(100).values():
                    self.values.extend(r.value for r in records if r.value is not None)
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


def produce(bootstrap: str, first: int, count: int) -> None:
    with Producer(bootstrap, acks="all") as producer:
        for i in range(first, first + count):
            producer.send(TOPIC, str(i).encode(), partition=i % PARTITIONS)
        producer.flush()


def test_a_consumer_protocol_member_upgrades_a_classic_group(
        cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    owners = Owners()
    members = [Member(f"classic{i}", cluster.bootstrap, owners, "classic") for i in range(2)]
    try:
        for m in members:
            m.start()
        produce(cluster.bootstrap, 0, 300)
        every = {str(i).encode() for i in range(300)}
        wait_until(lambda: owners.exactly_once({"classic0", "classic1"})
                   and every <= {v for m in members for v in m.values}, 60,
                   "two classic members own every partition and consumed everything")
        with Admin(cluster.bootstrap) as admin:
            assert admin.describe_groups([GROUP])[GROUP].group_type == "classic"
            wait_until(lambda: {tp: o.offset for tp, o in admin.list_group_offsets(
                GROUP).items()} == {tp: 50 for tp in ALL}, 30, "the classic group commits")
        newcomer = Member("kip848", cluster.bootstrap, owners, "consumer")
        members.append(newcomer)
        t0 = time.monotonic()
        newcomer.start()
        wait_until(lambda: owners.exactly_once({"classic0", "classic1", "kip848"}), 60,
                   "the three members own every partition exactly once")
        upgraded_s = time.monotonic() - t0
        assert newcomer.error is None  # no GROUP_ID_NOT_FOUND
        with Admin(cluster.bootstrap) as admin:
            desc = admin.describe_groups([GROUP])[GROUP]
            assert (desc.group_type, len(desc.members)) == ("consumer", 3)
            committed = admin.list_group_offsets(GROUP)
        assert all(committed[tp].offset >= 50 for tp in ALL)  # kept through the upgrade
        capsys.readouterr()
        assert cli_main(["groups", "describe", GROUP, "--members",
                         "--bootstrap-server", cluster.bootstrap]) == 0
        rows = [line.split() for line in capsys.readouterr().out.splitlines()]
        assert rows[0][-1] == "MEMBER-EPOCH" and len(rows) == 4, rows  # three members
        assert cli_main(["groups", "describe", GROUP,
                         "--bootstrap-server", cluster.bootstrap]) == 0
        assert "Type: consumer" in capsys.readouterr().out
        produce(cluster.bootstrap, 300, 300)
        every = {str(i).encode() for i in range(600)}
        wait_until(lambda: every <= {v for m in members for v in m.values}, 60,
                   "every record consumed after the upgrade")
        members.remove(newcomer)
        t0 = time.monotonic()
        newcomer.finish()  # the last KIP-848 member leaves: back to a classic group
        wait_until(lambda: owners.exactly_once({"classic0", "classic1"}), 60,
                   "the two classic members own every partition again")
        downgraded_s = time.monotonic() - t0
        with Admin(cluster.bootstrap) as admin:
            assert admin.describe_groups([GROUP])[GROUP].group_type == "classic"
        print(f"\nonline upgrade: three members own every partition once "
              f"{upgraded_s:.2f} s after the KIP-848 member started; downgrade: two "
              f"classic members own them all {downgraded_s:.2f} s after it closed")
    finally:
        for m in members:
            m.finish()
    assert owners.overlaps == []


def _describe_at(port: int) -> dict[str, Any] | None:
    """The group as broker ``port`` describes it (ConsumerGroupDescribe; None: it is not
    the coordinator, or down)."""
    try:
        sock = connect(port, 5)
    except OSError:
        return None
    try:
        group: dict[str, Any] = call(sock, ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {
            "group_ids": [GROUP], "include_authorized_operations": False})["groups"][0]
    except (OSError, ValueError):
        return None
    finally:
        sock.close()
    return group if group["error_code"] == 0 else None


@pytest.mark.slow
def test_a_converted_group_survives_its_coordinator(tmp_path: Path) -> None:
    """Three brokers: the group is upgraded, then its coordinator's broker is killed; the
    new coordinator loads the consumer group with its classic members (their records
    carry their classic metadata) and every partition is owned exactly once again, by
    the same three members."""
    owners = Owners()
    members: list[Member] = []
    with LocalCluster(tmp_path, 3, overrides={
            "group_initial_rebalance_delay_ms": 0,
            "group_consumer_heartbeat_interval_ms": 500}) as cluster, \
            Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
        ports = {str(i): cluster.base_port + i for i in range(3)}
        found: dict[str, Any] = {}

        def converged(exclude: str = "") -> bool:
            for broker, port in ports.items():
                group = None if broker == exclude else _describe_at(port)
                if group is not None and group["group_state"] == "Stable" \
                        and len(group["members"]) == 3:
                    found.update(broker=broker, group=group)
                    return owners.exactly_once({"classic0", "classic1", "kip848"})
            return False

        try:
            members += [Member(f"classic{i}", cluster.bootstrap, owners, "classic")
                        for i in range(2)]
            for m in members:
                m.start()
            wait_until(lambda: owners.exactly_once({"classic0", "classic1"}), 60,
                       "two classic members own every partition")
            members.append(Member("kip848", cluster.bootstrap, owners, "consumer"))
            members[-1].start()
            wait_until(converged, 60, "the upgraded group Stable, partitions owned once", 0.2)
            coordinator, before = found["broker"], found["group"]
            cluster.kill(coordinator)
            wait_until(lambda: converged(exclude=coordinator), 90,
                       "the group Stable at a new coordinator", 0.2)
            after = found["group"]
        finally:
            for m in members:
                m.finish()
    assert {m["member_id"] for m in after["members"]} == \
        {m["member_id"] for m in before["members"]}  # loaded, classic members included
    assert after["group_epoch"] >= before["group_epoch"]
    assert owners.overlaps == []
