"""The KIP-848 consumer group state machine (broker.group.consumer.group and .member):
epochs, target assignment, revocation before assignment, fencing, regex subscriptions."""

from __future__ import annotations

from typing import Any

from broker.group.consumer.group import ConsumerGroup, regex_error, regex_topics
from broker.group.consumer.member import ConsumerGroupMember, ReconciliationState
from clients.protocol.message_types import ConsumerGroupHeartbeatRequest

T = b"\x07" * 16
TOPICS = {"orders": (T, 6), "__consumer_offsets": (b"\x09" * 16, 50)}


def _hb(member_id: str, epoch: int, owned: dict[bytes, Any] | None = None,
        names: list[str] | None = None, regex: str | None = None
        ) -> ConsumerGroupHeartbeatRequest:
    return {"group_id": "g", "member_id": member_id, "member_epoch": epoch,
            "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 1000,
            "subscribed_topic_names": names, "subscribed_topic_regex": regex,
            "server_assignor": None, "topic_partitions": None if owned is None else [
                {"topic_id": t, "partitions": sorted(ps)} for t, ps in owned.items()]}


def _join(group: ConsumerGroup, member_id: str) -> ConsumerGroupMember:
    member = ConsumerGroupMember(member_id)
    group.heartbeat(member, _hb(member_id, 0, {}, names=["orders"]), TOPICS)
    return member


def _owners_are_exclusive(group: ConsumerGroup) -> None:
    seen: dict[tuple[bytes, int], str] = {}
    for m in group.members.values():
        for tp in m.assignment.partitions():
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {m.member_id}"
            seen[tp] = m.member_id


def test_first_member_gets_everything_at_epoch_1() -> None:
    group = ConsumerGroup("g", 0, 200)
    a = _join(group, "a")
    assert (group.group_epoch, a.member_epoch, group.state) == (1, 1, "Stable")
    assert a.assignment.assigned == {T: frozenset(range(6))}


def test_a_second_member_waits_for_the_revocation() -> None:
    group = ConsumerGroup("g", 0, 200)
    a = _join(group, "a")
    b = _join(group, "b")
    assert group.group_epoch == 2 and b.member_epoch == 2
    # a still owns everything: b gets nothing yet
    assert b.assignment.state == ReconciliationState.UNRELEASED_PARTITIONS
    assert b.assignment.assigned == {}
    _owners_are_exclusive(group)
    # a heartbeats still owning all: it must revoke half, keeping epoch 1
    group.heartbeat(a, _hb("a", 1, {T: range(6)}), TOPICS)
    assert a.assignment.state == ReconciliationState.UNREVOKED_PARTITIONS and a.member_epoch == 1
    assert group.state == "Reconciling"
    group.heartbeat(b, _hb("b", 2, {}), TOPICS)
    assert b.assignment.assigned == {}  # still unreleased
    kept = a.assignment.assigned[T]
    group.heartbeat(a, _hb("a", 1, {T: kept}), TOPICS)  # revoked
    assert a.member_epoch == 2 and a.assignment.state == ReconciliationState.STABLE
    group.heartbeat(b, _hb("b", 2, {}), TOPICS)
    assert b.assignment.state == ReconciliationState.STABLE
    assert b.assignment.assigned[T] | kept == frozenset(range(6)) and len(kept) == 3
    assert group.state == "Stable"
    _owners_are_exclusive(group)


def test_epochs_fence_but_tolerate_a_lost_answer() -> None:
    group = ConsumerGroup("g", 0, 200)
    a = _join(group, "a")
    assert group.epoch_error(a, 2, None) is not None  # ahead
    assert group.epoch_error(a, 1, None) is None
    b = _join(group, "b")
    group.heartbeat(a, _hb("a", 1, {T: range(6)}), TOPICS)
    group.heartbeat(a, _hb("a", 1, {T: a.assignment.assigned[T]}), TOPICS)
    assert a.member_epoch == 2
    # the answer moving a to epoch 2 was lost: epoch 1 with a subset is accepted
    assert group.epoch_error(a, 1, {T: a.assignment.assigned[T]}) is None
    assert group.epoch_error(a, 1, {T: frozenset(range(6))}) is not None
    assert group.epoch_error(a, 0, {}) is not None
    del b


def test_leaving_releases_partitions_and_bumps_the_epoch() -> None:
    group = ConsumerGroup("g", 0, 200)
    a = _join(group, "a")
    b = _join(group, "b")
    group.remove("a")
    assert group.group_epoch == 3 and group.owners == {}
    group.heartbeat(b, _hb("b", 2, {}), TOPICS)
    assert b.assignment.assigned == {T: frozenset(range(6))} and b.member_epoch == 3
    del a


def test_regex_subscription_skips_internal_topics_and_non_re2() -> None:
    group = ConsumerGroup("g", 0, 200)
    member = ConsumerGroupMember("a")
    group.heartbeat(member, _hb("a", 0, {}, regex=".*"), TOPICS)
    assert member.assignment.assigned == {T: frozenset(range(6))}
    assert regex_error("ord.*") is None
    assert regex_error(r"(a)\1") is not None and regex_error("a(?=b)") is not None
    assert regex_error("(") is not None and regex_error("a" * 2000) is not None


def test_new_partitions_bump_the_group_epoch() -> None:
    group = ConsumerGroup("g", 0, 200)
    a = _join(group, "a")
    group.heartbeat(a, _hb("a", 1), {"orders": (T, 8)})
    assert group.group_epoch == 2 and a.assignment.assigned == {T: frozenset(range(8))}


PUB, SECRET = b"\x01" * 16, b"\x02" * 16
ACL_TOPICS = {"pub-a": (PUB, 2), "secret": (SECRET, 3)}


def _public(name: str) -> bool:
    return name.startswith("pub-")


def test_regex_resolves_only_to_topics_the_member_may_describe() -> None:
    assert regex_topics(".*", ACL_TOPICS, _public) == {PUB: 2}
    group = ConsumerGroup("g", 0, 200)
    alice = ConsumerGroupMember("alice")
    group.heartbeat(alice, _hb("alice", 0, {}, regex=".*"), ACL_TOPICS, _public)
    assert alice.assignment.assigned == {PUB: frozenset(range(2))}
    assert SECRET not in group.target["alice"] and SECRET not in group.subscribed
    # an admin in the same group sees both; alice still never gets `secret`
    admin = ConsumerGroupMember("admin")
    group.heartbeat(admin, _hb("admin", 0, {}, regex=".*"), ACL_TOPICS)
    assert SECRET in group.target["admin"] and SECRET not in group.target["alice"]
    # alice loses Describe on pub-*: her next heartbeat resolves to nothing
    group.heartbeat(alice, _hb("alice", alice.member_epoch, None), ACL_TOPICS, lambda n: False)
    assert group.member_topics(alice, ACL_TOPICS) == {} and not group.target["alice"]
    assert alice.assignment.revoking == {PUB: frozenset(range(2))}  # pub-a goes to admin
    assert group.target["admin"] == {PUB: frozenset(range(2)), SECRET: frozenset(range(3))}


def test_after_a_load_a_regex_member_sees_only_what_it_holds_until_it_heartbeats() -> None:
    group = ConsumerGroup("g", 0, 200)
    alice = ConsumerGroupMember("alice")
    group.heartbeat(alice, _hb("alice", 0, {}, regex=".*"), ACL_TOPICS, _public)
    alice.may_describe = None  # as a coordinator load leaves her: her principal unknown
    more = {**ACL_TOPICS, "pub-b": (b"\x03" * 16, 1)}
    # held topics stay (no rebalance after a load), nothing new is shown
    assert group.member_topics(alice, more) == {PUB: 2}
    group.heartbeat(alice, _hb("alice", alice.member_epoch, None), more, _public)
    assert group.member_topics(alice, more) == {PUB: 2, b"\x03" * 16: 1}
