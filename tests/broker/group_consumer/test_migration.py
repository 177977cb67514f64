"""Converting groups between the classic protocol and KIP-848's (sans-IO, ManualClock):
the pure conversion and policy, the upgrade when a KIP-848 member joins a classic group
with members, classic members served by the consumer group (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup), failover of a converted group, and the downgrade when the last
KIP-848 member leaves."""

from __future__ import annotations

from typing import Any

from broker.config import MIGRATION_POLICIES, BrokerConfig
from broker.group.consumer.classic_protocol import ClassicProtocolError, subscription_of
from broker.group.consumer.coordinator import ConsumerGroupConfig
from broker.group.consumer.member import ReconciliationState
from broker.group.consumer.migration import (
    MigrationPolicy,
    consumer_group_from_classic,
    downgrade_due,
    upgrade_refusal,
)
from broker.group.coordinator import GroupCoordinator
from broker.group.members import Group, GroupMember
from broker.group.protocol import GroupCoordinatorConfig
from broker.group.state import GroupState
from clients.consumer.group_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from clients.protocol.errors import ErrorCode, InvalidConfigError
from clients.protocol.topics import TopicPartition
from tests.broker.group.test_coordinator import Box, MemoryLog
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

T = b"\x05" * 16
TOPICS = {"orders": (T, 4)}
SUB = encode_subscription(Subscription(("orders",)))


def _assignment(*partitions: int) -> bytes:
    return encode_assignment(Assignment(tuple(TopicPartition("orders", p) for p in partitions)))


class Harness:
    def __init__(self, log: MemoryLog | None = None,
                 policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL) -> None:
        self.clock = ManualClock(1_000)
        self.timer = SystemTimer(self.clock)
        self.log = log or MemoryLog()
        self.c = GroupCoordinator(
            GroupCoordinatorConfig(max_size=4, initial_rebalance_delay_ms=0), self.clock,
            self.timer, self.log, num_partitions=1, topics=lambda: TOPICS,
            consumer_config=ConsumerGroupConfig(session_timeout_ms=3_000,
                                                heartbeat_interval_ms=500, max_size=3,
                                                migration_policy=policy))
        self.c.begin_load(0, 0)
        for key, value, offset in self.log.records:
            self.c.load_record(0, key, value, offset)
        self.c.finish_load(0)
        self.ids: dict[str, str] = {}  # classic members: name -> the id they were given

    def m(self, name: str) -> str:
        return self.ids.get(name, name)

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.timer.advance_clock()

    def join(self, member_id: str, metadata: bytes = SUB, instance: str | None = None) -> Box:
        box = Box()
        self.c.join_group({"group_id": "g", "session_timeout_ms": 10_000,
                           "rebalance_timeout_ms": 5_000, "member_id": self.m(member_id),
                           "group_instance_id": instance, "protocol_type": "consumer",
                           "protocols": [{"name": "range", "metadata": metadata}]}, box,
                          require_member_id=False)
        return box

    def sync(self, member_id: str, generation: int,
             assignments: dict[str, bytes] | None = None) -> Box:
        box = Box()
        self.c.sync_group({"group_id": "g", "generation_id": generation,
                           "member_id": self.m(member_id), "group_instance_id": None,
                           "assignments": [{"member_id": self.m(m), "assignment": a}
                                           for m, a in (assignments or {}).items()]}, box)
        return box

    def heartbeat(self, member_id: str, generation: int,
                  instance: str | None = None) -> ErrorCode:
        box = Box()
        self.c.heartbeat({"group_id": "g", "generation_id": generation,
                          "member_id": self.m(member_id), "group_instance_id": instance},
                         box)
        return box.code

    def hb(self, member_id: str, epoch: int, owned: Any = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "group_id": "g", "member_id": member_id, "member_epoch": epoch,
            "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 2_000 if epoch == 0 else -1,
            "subscribed_topic_names": ["orders"] if epoch == 0 else None,
            "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": None if owned is None else [
                {"topic_id": T, "partitions": sorted(owned)}]}
        box = Box()
        self.c.consumer_group_heartbeat(body, 1, box)  # type: ignore[arg-type]
        return box.answer

    def commit(self, member_id: str, generation: int, offset: int,
               version: int = 8) -> ErrorCode:
        box = Box()
        self.c.commit_offsets({"group_id": "g", "generation_id": generation,
                               "member_id": self.m(member_id), "group_instance_id": None,
                               "topics": [{"name": "orders", "partitions": [{
                                   "partition_index": 0, "committed_offset": offset,
                                   "committed_leader_epoch": -1,
                                   "committed_metadata": ""}]}]}, box, version)
        return ErrorCode(box.answer["topics"][0]["partitions"][0]["error_code"])

    def classic_group(self) -> int:
        """Members a and b in a Stable classic group: a {0, 1}, b {2, 3}; returns the
        generation."""
        self.ids["a"] = self.join("").answer["member_id"]  # joins alone: generation 1
        b = self.join("")  # parked until a rejoins
        self.join("a")
        self.ids["b"] = b.answer["member_id"]
        group = self.c.groups["g"]
        generation = group.generation_id
        leader = "a" if group.leader_id == self.ids["a"] else "b"
        self.sync(leader, generation, {"a": _assignment(0, 1), "b": _assignment(2, 3)})
        self.sync("b" if leader == "a" else "a", generation)
        assert group.is_(GroupState.STABLE)
        return generation


def _parts(answer: dict[str, Any]) -> set[int]:
    assert answer["assignment"] is not None
    return {p for t in answer["assignment"]["topic_partitions"] for p in t["partitions"]}


def _classic(generation: int = 3) -> Group:
    group = Group("g", 0, 0, GroupState.STABLE)
    group.generation_id = generation
    for member_id, parts in (("a", (0, 1)), ("b", (2, 3))):
        member = GroupMember(member_id, None, "c", "h", 10_000, 5_000, "consumer",
                             [("range", SUB)])
        member.assignment = _assignment(*parts)
        group.add(member)
    group.protocol_type, group.protocol_name = "consumer", "range"
    return group


# -- the pure conversion ---------------------------------------------------------------

def test_a_classic_group_converts_with_members_assignments_and_epochs() -> None:
    converted = consumer_group_from_classic(_classic(3), TOPICS, 10)
    assert (converted.group_epoch, converted.assignment_epoch) == (3, 3)
    assert converted.state == "Stable"
    a, b = converted.members["a"], converted.members["b"]
    assert a.assignment.assigned == {T: frozenset({0, 1})} and a.member_epoch == 3
    assert b.assignment.assigned == {T: frozenset({2, 3})}
    assert a.assignment.state == ReconciliationState.STABLE
    assert a.subscribed_topic_names == ("orders",) and a.classic is not None
    assert a.classic.session_timeout_ms == 10_000 and a.classic.protocols == (("range", SUB),)
    assert converted.target == {"a": {T: frozenset({0, 1})}, "b": {T: frozenset({2, 3})}}
    assert converted.owners == {(T, 0): "a", (T, 1): "a", (T, 2): "b", (T, 3): "b"}
    assert converted.subscribed == {T: 4}


def test_the_policy_and_the_group_decide_whether_it_converts() -> None:
    group = _classic()
    assert upgrade_refusal(MigrationPolicy.BIDIRECTIONAL, group, 10) is None
    assert upgrade_refusal(MigrationPolicy.UPGRADE, group, 10) is None
    assert upgrade_refusal(MigrationPolicy.DOWNGRADE, group, 10) is not None
    assert upgrade_refusal(MigrationPolicy.DISABLED, group, 10) is not None
    assert upgrade_refusal(MigrationPolicy.BIDIRECTIONAL, group, 2) is not None  # full
    group.protocol_type = "connect"
    assert upgrade_refusal(MigrationPolicy.BIDIRECTIONAL, group, 10) is not None
    converted = consumer_group_from_classic(_classic(), TOPICS, 10)
    assert downgrade_due(MigrationPolicy.BIDIRECTIONAL, converted)  # all classic
    assert not downgrade_due(MigrationPolicy.UPGRADE, converted)
    converted.members["a"].classic = None  # one speaks KIP-848's protocol
    assert not downgrade_due(MigrationPolicy.BIDIRECTIONAL, converted)


def test_bytes_that_do_not_decode_refuse_the_conversion() -> None:
    group = _classic()
    group.members["a"].assignment = b"\x00\x00\x00\x00\x00\x09"  # 9 topics, no bytes
    try:
        consumer_group_from_classic(group, TOPICS, 10)
    except ClassicProtocolError:
        pass
    else:
        raise AssertionError("garbage converted")
    owned = encode_subscription(Subscription(("orders",), (TopicPartition("orders", 2),)))
    assert subscription_of(owned, TOPICS).owned == {T: frozenset({2})}


# -- the coordinator ---------------------------------------------------------------------

def _converge(h: Harness, epochs: dict[str, int], c_epoch: int, rounds: int = 6
              ) -> tuple[dict[str, set[int]], int]:
    """Classic members a and b follow the protocol (eager: rejoin on
    REBALANCE_IN_PROGRESS, then sync), KIP-848 member c heartbeats what it owns; returns
    what each owns and c's epoch."""
    owned: dict[str, set[int]] = {"a": {0, 1}, "b": {2, 3}, "c": set()}
    for _ in range(rounds):
        for m in ("a", "b"):
            if h.heartbeat(m, epochs[m]) == ErrorCode.REBALANCE_IN_PROGRESS:
                owned[m] = set()  # eager: gives everything up, then rejoins
                join = h.join(m)
                assert join.code == ErrorCode.NONE and join.answer["leader"] == ""
                epochs[m] = join.answer["generation_id"]
                sync = h.sync(m, epochs[m])
                assert sync.code == ErrorCode.NONE
                got = decode_assignment(sync.answer["assignment"]).partitions
                owned[m] = {tp.partition for tp in got}
            all_owned = [p for ps in owned.values() for p in ps]
            assert len(all_owned) == len(set(all_owned)), owned  # never two owners
        c = h.hb("c", c_epoch, owned["c"])
        assert c["error_code"] == 0
        c_epoch = c["member_epoch"]
        if c["assignment"] is not None:
            owned["c"] = _parts(c)
    return owned, c_epoch


def test_a_kip848_member_upgrades_a_classic_group_with_members() -> None:
    h = Harness()
    generation = h.classic_group()
    assert h.commit("a", generation, 42) == ErrorCode.NONE
    c = h.hb("c", 0, [])
    assert c["error_code"] == 0, c  # not GROUP_ID_NOT_FOUND
    assert h.c.consumer.is_consumer_group("g") and not h.c.groups["g"].members
    assert h.c.groups["g"].is_(GroupState.EMPTY)
    assert c["assignment"] is not None and _parts(c) == set()  # a and b still own all
    listed = h.c.list_groups([], [])["groups"]
    assert [(g["group_id"], g["group_type"]) for g in listed] == [("g", "consumer")]
    owned, _c_epoch = _converge(h, {"a": generation, "b": generation}, c["member_epoch"])
    assert sorted(p for ps in owned.values() for p in ps) == [0, 1, 2, 3]
    assert all(owned.values()), owned  # every member got something
    group = h.c.consumer.groups["g"]
    assert group.state == "Stable", group
    code, topics = h.c.fetch_offsets("g", [{"name": "orders", "partition_indexes": [0]}])
    assert code == ErrorCode.NONE and topics[0]["partitions"][0]["committed_offset"] == 42
    # a classic member commits at its member epoch (its generation)
    epoch_a = group.members[h.m("a")].member_epoch
    assert h.commit("a", epoch_a, 43) == ErrorCode.NONE
    assert h.commit("a", epoch_a - 1, 44) == ErrorCode.ILLEGAL_GENERATION
    # OffsetCommit v9 too: a classic member's is a generation (c's an epoch)
    assert h.commit("a", epoch_a - 1, 44, 9) == ErrorCode.ILLEGAL_GENERATION
    assert h.commit("c", 0, 44, 9) == ErrorCode.STALE_MEMBER_EPOCH
    described = h.c.describe_groups({"groups": ["g"]})["groups"][0]
    assert described["protocol_type"] == "consumer" and len(described["members"]) == 3

    # failover: a new coordinator loads the converted group and its classic members
    again = Harness(h.log)
    loaded = again.c.consumer.groups["g"]
    assert set(loaded.members) == {h.m("a"), h.m("b"), "c"}
    assert loaded.members[h.m("a")].classic == group.members[h.m("a")].classic
    again.ids = h.ids
    assert again.heartbeat("a", epoch_a) == ErrorCode.NONE
    code, topics = again.c.fetch_offsets("g", [{"name": "orders", "partition_indexes": [0]}])
    assert topics[0]["partitions"][0]["committed_offset"] == 43


def test_parked_classic_requests_are_told_to_rejoin_and_sessions_still_run() -> None:
    h = Harness()
    generation = h.classic_group()
    leader = "a" if h.c.groups["g"].leader_id == h.m("a") else "b"
    parked = h.join(leader)  # the leader rejoins: a join phase, its JoinGroup parked
    assert not parked.answers and h.c.groups["g"].is_(GroupState.PREPARING_REBALANCE)
    assert h.hb("c", 0, [])["error_code"] == 0
    assert parked.code == ErrorCode.REBALANCE_IN_PROGRESS  # rejoin: the consumer group
    assert h.heartbeat("a", generation) == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.heartbeat("x", generation) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("a", generation + 7) == ErrorCode.ILLEGAL_GENERATION
    for _ in range(6):  # c and a are heard from; b is silent past its 10 s session
        h.advance(2_000)
        h.hb("c", h.c.consumer.groups["g"].members["c"].member_epoch)
        h.heartbeat("a", generation)
    assert set(h.c.consumer.groups["g"].members) == {h.m("a"), "c"}


def test_a_classic_join_into_the_consumer_group_needs_a_subscription() -> None:
    h = Harness()
    h.classic_group()
    h.hb("c", 0, [])
    assert h.join("a", b"junk").code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.join("c").code == ErrorCode.UNKNOWN_MEMBER_ID  # c speaks KIP-848's protocol
    box = Box()
    h.c.leave_group({"group_id": "g", "members": [
        {"member_id": h.m("b"), "group_instance_id": None},
        {"member_id": "c", "group_instance_id": None}]}, box)
    assert [m["error_code"] for m in box.answer["members"]] == [0, ErrorCode.UNKNOWN_MEMBER_ID]
    assert set(h.c.consumer.groups["g"].members) == {h.m("a"), "c"}


def test_a_malformed_first_heartbeat_converts_nothing() -> None:
    h = Harness()
    h.classic_group()
    box = Box()
    h.c.consumer_group_heartbeat({  # type: ignore[typeddict-item]
        "group_id": "g", "member_id": "c", "member_epoch": 0, "instance_id": None,
        "rack_id": None, "rebalance_timeout_ms": -1, "subscribed_topic_names": ["orders"],
        "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []},
        1, box)
    assert box.code == ErrorCode.INVALID_REQUEST  # no rebalance timeout when joining
    assert not h.c.consumer.is_consumer_group("g") and len(h.c.groups["g"].members) == 2


def test_no_upgrade_when_the_policy_forbids_it() -> None:
    h = Harness(policy=MigrationPolicy.DOWNGRADE)
    h.classic_group()
    assert h.hb("c", 0, [])["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.c.groups["g"].is_(GroupState.STABLE) and len(h.c.groups["g"].members) == 2


def test_the_last_kip848_member_leaving_downgrades_to_a_classic_group() -> None:
    h = Harness()
    generation = h.classic_group()
    c = h.hb("c", 0, [])
    _converge(h, {"a": generation, "b": generation}, c["member_epoch"])
    assert h.hb("c", -1)["error_code"] == 0
    assert not h.c.consumer.is_consumer_group("g")
    group = h.c.groups["g"]
    assert set(group.members) == {h.m("a"), h.m("b")}
    assert group.is_(GroupState.PREPARING_REBALANCE)
    epoch = group.generation_id
    assert h.heartbeat("a", epoch) == ErrorCode.REBALANCE_IN_PROGRESS
    a, b = h.join("a"), h.join("b")  # both rejoin: a classic generation again
    assert a.code == ErrorCode.NONE and b.code == ErrorCode.NONE
    assert group.generation_id == epoch + 1 and group.is_(GroupState.COMPLETING_REBALANCE)
    assert [g["group_type"] for g in h.c.list_groups([], [])["groups"]] == ["classic"]
    again = Harness(h.log)  # the log says: a classic group again
    assert not again.c.consumer.is_consumer_group("g")
    assert set(again.c.groups["g"].members) == {h.m("a"), h.m("b")}


def test_no_downgrade_when_the_policy_forbids_it() -> None:
    h = Harness(policy=MigrationPolicy.UPGRADE)
    generation = h.classic_group()
    c = h.hb("c", 0, [])
    _converge(h, {"a": generation, "b": generation}, c["member_epoch"])
    h.hb("c", -1)
    assert set(h.c.consumer.groups["g"].members) == {h.m("a"), h.m("b")}


def test_the_broker_setting_takes_kafkas_policies() -> None:
    assert set(MIGRATION_POLICIES) == {p.value for p in MigrationPolicy}
    assert BrokerConfig().group_consumer_migration_policy == "bidirectional"
    assert BrokerConfig().with_overrides(
        {"group.consumer.migration.policy": "upgrade"}).group_consumer_migration_policy \
        == "upgrade"
    try:
        BrokerConfig().with_overrides({"group_consumer_migration_policy": "sideways"})
    except InvalidConfigError:
        pass
    else:
        raise AssertionError("an unknown policy was accepted")


def test_classic_joins_into_a_consumer_group_are_bounded_and_an_empty_one_downgrades() -> None:
    h = Harness()
    h.hb("c", 0, [])
    big = encode_subscription(Subscription(("orders",), user_data=b"x" * (1024 * 1024)))
    assert h.join("", big).code == ErrorCode.INVALID_REQUEST  # over the member bound
    joined = h.join("")  # a new classic member of the consumer group
    assert joined.code == ErrorCode.NONE and joined.answer["leader"] == ""
    member_id = joined.answer["member_id"]
    assert h.c.consumer.groups["g"].members[member_id].classic is not None
    box = Box()
    h.c.leave_group({"group_id": "g", "members": [
        {"member_id": member_id, "group_instance_id": None}]}, box)
    assert box.answer["members"][0]["error_code"] == 0
    assert h.hb("c", -1)["error_code"] == 0  # the group is empty now
    assert h.c.consumer.is_consumer_group("g")
    h.join("")  # a classic JoinGroup: the empty consumer group becomes a classic group
    assert not h.c.consumer.is_consumer_group("g") and len(h.c.groups["g"].members) == 1


def test_a_static_classic_member_takes_its_place_under_a_new_id() -> None:
    h = Harness()
    h.hb("c", 0, [])
    first = h.join("", instance="inst")
    assert first.code == ErrorCode.NONE
    old_id, epoch = first.answer["member_id"], first.answer["generation_id"]
    group = h.c.consumer.groups["g"]
    old = group.members[old_id]
    group_epoch = group.group_epoch
    again = h.join("", instance="inst")  # restarted: an empty member id, same instance
    assert again.code == ErrorCode.NONE and again.answer["member_id"] != old_id
    new_id = again.answer["member_id"]
    assert again.answer["generation_id"] == epoch and group.group_epoch == group_epoch
    assert old_id not in group.members and group.static_members["inst"] == new_id
    assert group.members[new_id].assignment.assigned == old.assignment.assigned
    assert group.members[new_id].member_epoch == old.member_epoch
    assert h.heartbeat(old_id, epoch, "inst") == ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat(new_id, epoch, "inst") == ErrorCode.NONE
    assert h.join(old_id, instance="inst").code == ErrorCode.FENCED_INSTANCE_ID
    assert h.join("", instance="c-instance").code == ErrorCode.NONE  # another instance
    again_log = Harness(h.log)  # the records say the same
    assert again_log.c.consumer.groups["g"].static_members["inst"] == new_id
