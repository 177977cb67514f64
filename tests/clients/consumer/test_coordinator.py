"""Consumer group membership against the in-process fake coordinator (real sockets)."""

from __future__ import annotations

import select
import time
from collections.abc import Iterator
from typing import Any

import pytest

from clients.consumer.assignors import RangeAssignor
from clients.consumer.consumer import Consumer
from clients.consumer.coordinator_channel import GroupConfig, GroupShared, MemberState
from clients.consumer.heartbeat import HeartbeatThread
from clients.consumer.offset_committer import CommitFailedError
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.records.record import build_batch
from clients.types import ConsumerRecord, OffsetAndMetadata
from tests.broker.processes import wait_until
from tests.clients.consumer.fake_group_coordinator import FakeGroupCluster
from tests.clients.consumer.group_helpers import Listener, Runner
from tests.clients.fake_broker import E

FAST = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 100, "retry_backoff_ms": 20,
        "fetch_max_wait_ms": 50, "auto_offset_reset": "earliest"}


@pytest.fixture
def fake() -> Iterator[FakeGroupCluster]:
    c = FakeGroupCluster(1, join_window_s=0.5)
    try:
        yield c
    finally:
        c.close()
    assert c.errors == [], "the fake received requests it could not serve"


def fill(fake: FakeGroupCluster, topic: str, partitions: int, per_partition: int) -> None:
    fake.create_topic(topic, partitions)
    for p in range(partitions if per_partition else 0):
        fake.append(TopicPartition(topic, p),
                    build_batch([(None, b"%d-%d" % (p, i), 1, ()) for i in range(per_partition)]))


def drain(c: Consumer, got: list[ConsumerRecord], count: int) -> bool:
    got.extend(r for rs in c.poll(100).values() for r in rs)
    return len(got) >= count


def consumer(fake: FakeGroupCluster, group: str = "g", **kw: Any) -> Consumer:
    return Consumer(fake.bootstrap, group_id=group, **{**FAST, **kw})


def test_two_members_split_partitions_then_one_leaves(fake: FakeGroupCluster) -> None:
    fill(fake, "t", 4, 5)
    a, b = Runner(consumer(fake), ["t"]), Runner(consumer(fake), ["t"])
    a.start()
    b.start()
    try:
        wait_until(lambda: len(a.assignment) == 2 and len(b.assignment) == 2, 30,
                   "both members hold two partitions")
        assert not a.assignment & b.assignment
        wait_until(lambda: len(a.records) + len(b.records) == 20, 30, "all 20 records")
        b.finish()  # close: auto commit, revoke, LeaveGroup
        assert b.listener.events[-1] == ("revoked", b.assignment)
        wait_until(lambda: len(a.assignment) == 4, 30, "the survivor takes all partitions")
        assert a.listener.events[-1][0] == "assigned"  # eager: revoke all, then assign all
        assert a.listener.events[-2] == ("revoked", a.assignment - b.assignment)
    finally:
        a.finish()
        if b.is_alive():
            b.finish()
    group = fake.group("g")
    assert group.offsets == {("t", p): 5 for p in range(4)}  # auto commit on close
    assert fake.heartbeats > 0
    keys = [(r.partition, r.offset) for r in a.records + b.records]
    assert len(set(keys)) == 20  # the survivor resumed from b's committed offsets


def test_member_id_required_then_listener_and_commit_resume(fake: FakeGroupCluster) -> None:
    fill(fake, "t", 2, 3)
    with consumer(fake, enable_auto_commit=False) as c:
        listener = Listener()
        c.subscribe(["t"], listener)
        got: list[ConsumerRecord] = []
        wait_until(lambda: drain(c, got, 6), 30, "six records")
        generation, member_id = c._coordinator.generation if c._coordinator else (-1, "")
        assert generation == 1 and member_id.startswith("member-")
        assert listener.events == [("assigned", {TopicPartition("t", 0), TopicPartition("t", 1)})]
        c.commit({TopicPartition("t", 0): 2, TopicPartition("t", 1): OffsetAndMetadata(3)})
        assert c.committed([TopicPartition("t", 0), TopicPartition("t", 1),
                            TopicPartition("t", 9)]) == {
            TopicPartition("t", 0): OffsetAndMetadata(2), TopicPartition("t", 1):
            OffsetAndMetadata(3), TopicPartition("t", 9): None}
    assert fake.group("g").offsets == {("t", 0): 2, ("t", 1): 3}  # no auto commit on close
    with consumer(fake) as c:
        c.subscribe(["t"])
        got = []
        wait_until(lambda: drain(c, got, 1), 30, "the one uncommitted record")
        assert [(r.partition, r.offset) for r in got] == [(0, 2)]


def test_coordinator_not_available_is_retried(fake: FakeGroupCluster) -> None:
    fill(fake, "t", 1, 1)
    fake.find_errors = [E.COORDINATOR_NOT_AVAILABLE] * 3 + [E.COORDINATOR_LOAD_IN_PROGRESS]
    with consumer(fake) as c:
        c.subscribe("t")
        got: list[ConsumerRecord] = []
        wait_until(lambda: drain(c, got, 1), 30, "the record")
    assert fake.find_errors == []


def test_stale_generation_commit_fails_and_member_rejoins(fake: FakeGroupCluster) -> None:
    fill(fake, "t", 1, 1)
    with consumer(fake, enable_auto_commit=False) as c:
        c.subscribe(["t"])
        wait_until(lambda: bool(c.poll(100)), 30, "the record")
        with fake.cond:  # the group moved on without this member knowing
            fake.group("g").generation += 1
        with pytest.raises(CommitFailedError) as info:
            c.commit()
        assert info.value.code == ErrorCode.ILLEGAL_GENERATION
        assert c._coordinator is not None
        wait_until(lambda: c.poll(50) == {} and c._coordinator is not None
                   and c._coordinator.generation[0] == fake.group("g").generation
                   and c._coordinator.state == MemberState.STABLE, 30, "rejoined")
        c.commit()
    assert fake.group("g").offsets == {("t", 0): 1}


def test_heartbeat_rebalance_in_progress_makes_the_member_rejoin(
    fake: FakeGroupCluster,
) -> None:
    fill(fake, "t", 2, 0)
    a = Runner(consumer(fake), ["t"])
    a.start()
    try:
        wait_until(lambda: len(a.assignment) == 2, 30, "a holds both partitions")
        before = fake.group("g").generation
        b = Runner(consumer(fake), ["t"])
        b.start()  # a learns of the rebalance through its heartbeat
        try:
            wait_until(lambda: len(a.assignment) == 1 and len(b.assignment) == 1, 30,
                       "one partition each")
            assert fake.group("g").generation > before
            assert ("revoked", {TopicPartition("t", 0), TopicPartition("t", 1)}) \
                in a.listener.events  # eager: everything revoked before rejoining
        finally:
            b.finish()
    finally:
        a.finish()


def _generations(c: Consumer, count: int) -> bool:
    """Poll briefly (as a loop of short polls does); True once ``count`` generations ran."""
    c.poll(10)
    return c._coordinator is not None and c._coordinator.rebalances >= count


def test_leader_assigns_from_fresh_metadata_when_polls_are_short(
    fake: FakeGroupCluster,
) -> None:
    """Regression: the leader's Metadata refresh before assigning was bounded by what was
    left of a short poll (here <= 20 ms) and timed out against a slow broker; its cache
    had never seen the subscribed topic (a member fetches metadata only for what it is
    assigned), so it assigned nothing and the group stayed Stable with no partitions."""
    fill(fake, "t", 2, 0)
    fake.metadata_delay_s = 0.3  # slower than any poll below, well within request_timeout
    with consumer(fake, enable_auto_commit=False) as c:
        c.subscribe(["t"])
        wait_until(lambda: _generations(c, 1), 30, "a first generation")
        assert c.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}


def test_join_answer_read_between_polls_is_not_lost(fake: FakeGroupCluster) -> None:
    """Regression: a SyncGroup (or JoinGroup) answer that arrived after ``poll`` stopped
    waiting was read by the next poll's drain of the coordinator connection and dropped
    as an unknown response; the member then waited for it until the request timed out
    (JoinGroup: the rebalance timeout + 5 s) and missed the generation."""
    fill(fake, "t", 2, 0)
    fake.sync_delay_s = 0.3  # the answer comes after the poll that sent it returned
    with consumer(fake, enable_auto_commit=False) as c:
        c.subscribe(["t"])
        group = c._coordinator
        assert group is not None
        wait_until(lambda: (c.poll(10), group.state)[1] == MemberState.SYNCING, 30,
                   "SyncGroup sent")
        conn = group.channel.conn
        assert conn is not None
        wait_until(lambda: bool(select.select([conn], [], [], 0)[0]), 30,
                   "the SyncGroup answer waiting on the coordinator connection")
        c.poll(10)  # reads it before anything else
        assert group.state == MemberState.STABLE
        assert c.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}


def test_leader_rejoins_when_a_subscribed_topic_appears(fake: FakeGroupCluster) -> None:
    fill(fake, "t", 1, 0)
    with consumer(fake, enable_auto_commit=False) as c:
        c.subscribe(["t", "late"])  # "late" does not exist yet: assigned without it
        wait_until(lambda: _generations(c, 1), 30, "a first generation")
        assert c.assignment() == {TopicPartition("t", 0)}
        fake.create_topic("late", 2)
        wait_until(lambda: _generations(c, 2) and len(c.assignment()) == 3, 30,
                   "a rebalance that assigns the new topic")
        assert c.assignment() == {TopicPartition("t", 0), TopicPartition("late", 0),
                                  TopicPartition("late", 1)}


def test_heartbeats_run_while_syncing_not_while_joining(fake: FakeGroupCluster) -> None:
    """A leader between its JoinGroup answer and its SyncGroup (metadata refresh, assignor)
    keeps its session alive, as in Kafka (heartbeats in CompletingRebalance)."""
    with fake.cond:
        group = fake.group("g")
        group.members["m"], group.generation, group.state = {}, 1, "CompletingRebalance"
    shared = GroupShared(state=MemberState.JOINING, coordinator=(0, "127.0.0.1", fake.port(0)),
                         generation_id=1, member_id="m", last_poll=time.monotonic())
    beat = HeartbeatThread(shared, group_id="g", group_instance_id=None, client_id="t",
                           heartbeat_interval_ms=100, session_timeout_ms=3000,
                           max_poll_interval_ms=60_000, request_timeout_ms=5000,
                           retry_backoff_ms=20, clock=time.monotonic)  # fmt: skip
    try:
        beat._step()
        assert beat.sent == 0  # not joined yet: nothing to keep alive
        shared.state = MemberState.SYNCING
        beat._step()
        assert (beat.sent, fake.heartbeats) == (1, 1)
        assert (shared.state, shared.rejoin_needed, shared.coordinator is not None) == (
            MemberState.SYNCING, True, True)  # NONE changed nothing
    finally:
        beat.stop()


def test_cooperative_sticky_keeps_unmoved_partitions(fake: FakeGroupCluster) -> None:
    fill(fake, "t", 4, 0)
    strategy: dict[str, Any] = {"partition_assignment_strategy": ["cooperative-sticky"]}
    a = Runner(consumer(fake, **strategy), ["t"])
    a.start()
    try:
        wait_until(lambda: len(a.assignment) == 4, 30, "a holds all partitions")
        b = Runner(consumer(fake, **strategy), ["t"])
        b.start()
        try:
            wait_until(lambda: len(a.assignment) == 2 and len(b.assignment) == 2, 30,
                       "two partitions each")
            revoked = [tps for kind, tps in a.listener.events if kind == "revoked"]
            assert revoked and all(len(tps) == 2 for tps in revoked)  # only what moved
            assert set().union(*revoked) == b.assignment
        finally:
            b.finish()
    finally:
        a.finish()


def test_assign_with_group_uses_simple_commits(fake: FakeGroupCluster) -> None:
    fill(fake, "t", 1, 4)
    tp = TopicPartition("t", 0)
    with fake.cond:
        fake.group("g").offsets[("t", 0)] = 3
    with consumer(fake) as c:
        c.assign([tp])
        records = [r for rs in c.poll(2000).values() for r in rs]
        assert [r.offset for r in records] == [3]  # starts at the committed offset
        c.commit()
        assert fake.group("g").offsets[("t", 0)] == 4
        with pytest.raises(MiniKafkaError, match="after assign"):
            c.subscribe(["t"])
    with fake.cond:
        fake.group("busy").members["someone"] = {}
    with consumer(fake, group="busy") as c:
        c.assign([tp])
        with pytest.raises(CommitFailedError):
            c.commit({tp: 1})


def test_bad_group_configs_are_precise_errors(fake: FakeGroupCluster) -> None:
    with pytest.raises(InvalidConfigError, match="heartbeat_interval_ms"):
        Consumer(fake.bootstrap, group_id="g", heartbeat_interval_ms=5000, session_timeout_ms=5000)
    with pytest.raises(InvalidConfigError, match="known: "):
        Consumer(fake.bootstrap, group_id="g", partition_assignment_strategy=["sticky-ish"])
    with pytest.raises(InvalidConfigError, match="group_id"):
        GroupConfig("", [RangeAssignor()])
    with Consumer(fake.bootstrap) as c:
        with pytest.raises(InvalidConfigError, match="group_id"):
            c.subscribe(["t"])
        with pytest.raises(InvalidConfigError, match="group_id"):
            c.commit()
    with consumer(fake) as c, pytest.raises(ValueError, match="topic names"):
        c.subscribe([""])
