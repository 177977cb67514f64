"""Our Consumer with ``group_protocol="consumer"`` (KIP-848) against a real broker: three
members of one group on a 12-partition topic; one closes (leave heartbeat), one joins.
The admin client and ``minikafka groups describe --members`` show the group's type and
each member's epoch (ConsumerGroupDescribe).
Each member publishes what it owns from its rebalance listener (so a revocation is
visible before the member acknowledges it), and every publication is checked against
the others': no partition is ever owned by two members at once.  Records produced
before and during the changes are all consumed, and the committed offsets reach the end
of every partition (auto commit, and the commit before a revocation)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.cli.main import main as cli_main
from clients.consumer.consumer import Consumer
from clients.consumer.membership.member import MembershipState
from clients.producer.producer import Producer
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until

pytestmark = pytest.mark.multiprocess

TOPIC, GROUP, PARTITIONS = "k848-ours", "k848-ours-group", 12
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

    def cover(self) -> bool:
        with self.lock:
            union = [tp for owned in self.owned.values() for tp in owned]
            return set(union) == ALL and len(union) == len(ALL)


class Member(threading.Thread):
    def __init__(self, name: str, bootstrap: str, owners: Owners) -> None:
        super().__init__(name=name, daemon=True)
        self.owners = owners
        self.consumer = Consumer(bootstrap, group_id=GROUP, group_protocol="consumer",
                                 auto_offset_reset="earliest", auto_commit_interval_ms=200,
                                 fetch_max_wait_ms=100, retry_backoff_ms=50)
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

    def stable(self) -> bool:
        coordinator = self.consumer._coordinator
        return getattr(coordinator, "state", None) is MembershipState.STABLE

    def finish(self) -> None:
        self.stop_flag.set()
        self.join(60)
        assert not self.is_alive(), f"{self.name} did not stop"
        assert self.error is None, f"{self.name}: {self.error!r}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, brokers=1) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        yield c


def produce(bootstrap: str, first: int, count: int) -> None:
    with Producer(bootstrap, acks="all") as producer:
        for i in range(first, first + count):
            producer.send(TOPIC, str(i).encode(), partition=i % PARTITIONS)
        producer.flush()


def test_three_members_leave_and_join_without_sharing_a_partition(
        cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    owners = Owners()
    members = [Member(f"m{i}", cluster.bootstrap, owners) for i in range(3)]
    started = time.monotonic()
    try:
        for m in members:
            m.start()
        produce(cluster.bootstrap, 0, 600)
        wait_until(lambda: owners.cover() and all(m.stable() for m in members), 60,
                   "three members own every partition once")
        joined_s = time.monotonic() - started
        # A member that joined after the others covered every partition is stable with
        # nothing while the broker still reconciles (its target waits for the others'
        # revocations, told at their next heartbeat): the group is Stable only then.
        with Admin(cluster.bootstrap) as admin:  # ConsumerGroupDescribe: member epochs
            def described() -> tuple[str, str, int]:
                d = admin.describe_groups([GROUP])[GROUP]
                return d.group_type, d.state, len(d.members)
            wait_until(lambda: described() == ("consumer", "Stable", 3)
                       and owners.cover() and all(m.stable() for m in members), 60,
                       "the broker's group Stable with three members")
            desc = admin.describe_groups([GROUP])[GROUP]
        assert (desc.group_type, desc.state, len(desc.members)) == ("consumer", "Stable", 3)
        assert all(0 < m.member_epoch <= desc.group_epoch for m in desc.members)
        assert sorted(tp for m in desc.members for tp in m.assignment) == sorted(ALL)
        capsys.readouterr()
        assert cli_main(["groups", "describe", GROUP, "--members",
                         "--bootstrap-server", cluster.bootstrap]) == 0
        rows = [line.split() for line in capsys.readouterr().out.splitlines()]
        assert rows[0][-1] == "MEMBER-EPOCH" and len(rows) == 4
        assert {int(r[-1]) for r in rows[1:]} == {m.member_epoch for m in desc.members}
        leaving = members.pop(0)
        t0 = time.monotonic()
        leaving.finish()
        wait_until(lambda: owners.cover() and all(m.stable() for m in members), 60,
                   "two members own every partition once")
        left_s = time.monotonic() - t0
        produce(cluster.bootstrap, 600, 600)
        newcomer = Member("m3", cluster.bootstrap, owners)
        members.append(newcomer)
        t0 = time.monotonic()
        newcomer.start()
        wait_until(lambda: owners.cover() and all(m.stable() for m in members)
                   and bool(owners.owned.get("m3")), 60, "the newcomer owns partitions")
        added_s = time.monotonic() - t0
        every = {str(i).encode() for i in range(1200)}
        wait_until(lambda: every <= {v for m in [leaving, *members] for v in m.values},
                   60, "every record consumed")
        print(f"\nKIP-848, our Consumer: 3 joined in {joined_s:.2f} s, "
              f"leave rebalanced in {left_s:.2f} s, join in {added_s:.2f} s")
    finally:
        for m in members:
            m.finish()
    assert owners.overlaps == []
    with Admin(cluster.bootstrap) as admin:
        committed = admin.list_group_offsets(GROUP)
    assert {tp: o.offset for tp, o in committed.items()} == {tp: 100 for tp in ALL}
