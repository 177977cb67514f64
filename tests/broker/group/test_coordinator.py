"""The group coordinator driven with a ManualClock and an in-memory offsets log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from broker.coordination.placement import java_string_hash, partition_for
from broker.group.coordinator import GroupCoordinator
from broker.group.protocol import Done, GroupCoordinatorConfig
from broker.group.state import GroupState
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

Body = dict[str, Any]
SESSION_MS = 10_000
REBALANCE_MS = 5_000


class MemoryLog:
    """An offsets log in memory: appends succeed at once unless told to fail or hold."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None, int]] = []
        self.fail_with: ErrorCode | None = None

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               done: Done) -> None:
        if self.fail_with is not None:
            done(self.fail_with, -1)
            return
        base = len(self.records)
        self.records.extend((k, v, base + i) for i, (k, v) in enumerate(records))
        done(ErrorCode.NONE, base)


class Box:
    """Collects what ``respond`` was called with (exactly once expected)."""

    def __init__(self) -> None:
        self.answers: list[Body] = []

    def __call__(self, body: Body) -> None:
        self.answers.append(body)

    @property
    def answer(self) -> Body:
        assert len(self.answers) == 1, self.answers
        return self.answers[0]

    @property
    def code(self) -> ErrorCode:
        return ErrorCode(self.answer["error_code"])


class Harness:
    def __init__(self, initial_delay_ms: int = 0, log: MemoryLog | None = None,
                 **bounds: int) -> None:
        self.clock = ManualClock(1_000)
        self.timer = SystemTimer(self.clock)
        self.log = log or MemoryLog()
        config = GroupCoordinatorConfig(initial_rebalance_delay_ms=initial_delay_ms,
                                        **{"max_size": 4, **bounds})
        self.c = GroupCoordinator(config, self.clock, self.timer, self.log, num_partitions=1)
        self.c.begin_load(0, 0)
        self.c.finish_load(0)

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.timer.advance_clock()

    def join(self, member_id: str = "", group: str = "g", instance: str | None = None,
             protocols: Sequence[tuple[str, bytes]] = (("range", b"meta"),),
             session_ms: int = SESSION_MS, rebalance_ms: int = REBALANCE_MS) -> Box:
        box = Box()
        self.c.join_group({"group_id": group, "session_timeout_ms": session_ms,
                           "rebalance_timeout_ms": rebalance_ms, "member_id": member_id,
                           "group_instance_id": instance, "protocol_type": "consumer",
                           "protocols": [{"name": n, "metadata": m} for n, m in protocols]},
                          box)
        return box

    def new_member(self, group: str = "g", **kw: Any) -> tuple[str, Box]:
        """KIP-394: the first JoinGroup hands out an id, the second joins with it."""
        first = self.join(group=group, **kw)
        assert first.code == ErrorCode.MEMBER_ID_REQUIRED
        member_id = first.answer["member_id"]
        return member_id, self.join(member_id, group=group, **kw)

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             group: str = "g", instance: str | None = None) -> Box:
        box = Box()
        self.c.sync_group({"group_id": group, "generation_id": generation,
                           "member_id": member_id, "group_instance_id": instance,
                           "assignments": [{"member_id": m, "assignment": a}
                                           for m, a in (assignments or {}).items()]}, box)
        return box

    def heartbeat(self, member_id: str, generation: int, instance: str | None = None) -> ErrorCode:
        box = Box()
        self.c.heartbeat({"group_id": "g", "generation_id": generation, "member_id": member_id,
                          "group_instance_id": instance}, box)
        return box.code

    def commit(self, member_id: str, generation: int, offset: int, group: str = "g",
               partition: int = 0) -> ErrorCode:
        box = Box()
        self.c.commit_offsets({"group_id": group, "generation_id": generation,
                                "member_id": member_id, "group_instance_id": None,
                                "topics": [{"name": "t", "partitions": [{
                                    "partition_index": partition, "committed_offset": offset,
                                    "committed_leader_epoch": 3,
                                    "committed_metadata": "m"}]}]}, box)
        return ErrorCode(box.answer["topics"][0]["partitions"][0]["error_code"])

    def committed(self, group: str = "g", partition: int = 0) -> int:
        code, topics = self.c.fetch_offsets(group, [{"name": "t",
                                                      "partition_indexes": [partition]}])
        assert code == ErrorCode.NONE
        return int(topics[0]["partitions"][0]["committed_offset"])

    def state(self, group: str = "g") -> GroupState:
        return self.c.groups[group].state

    def stable_group(self, count: int, **kw: Any) -> tuple[list[str], int]:
        """``count`` members joined and synced; returns (member ids, generation)."""
        ids: list[str] = []
        for _ in range(count):
            member_id, _box = self.new_member(**kw)
            ids.append(member_id)
            for other in ids[:-1]:  # existing members rejoin: completes the join phase
                self.join(other, **kw)
        generation = self.c.groups["g"].generation_id
        leader = self.c.groups["g"].leader_id
        assert leader is not None
        syncs = [self.sync(m, generation, {i: i.encode() for i in ids} if m == leader else None)
                 for m in ids]
        assert all(s.code == ErrorCode.NONE for s in syncs)
        assert self.state() is GroupState.STABLE
        return ids, generation


def test_three_members_join_sync_and_get_their_own_assignment() -> None:
    h = Harness(initial_delay_ms=100)
    joins = [h.new_member() for _ in range(3)]
    assert all(not box.answers for _, box in joins), "the initial delay holds the join"
    h.advance(100)
    assert all(not box.answers for _, box in joins), "members arrived: one more delay"
    h.advance(100)
    answers = [box.answer for _, box in joins]
    assert {a["error_code"] for a in answers} == {0}
    assert {a["generation_id"] for a in answers} == {1}
    leader = answers[0]["leader"]
    assert {a["leader"] for a in answers} == {leader}
    for (member_id, _), answer in zip(joins, answers, strict=True):
        expected = 3 if member_id == leader else 0
        assert len(answer["members"]) == expected
        assert answer["protocol_name"] == "range"
    assert h.state() is GroupState.COMPLETING_REBALANCE
    followers = [m for m, _ in joins if m != leader]
    waiting = [h.sync(m, 1) for m in followers]
    assert all(not box.answers for box in waiting), "followers wait for the leader"
    assert h.heartbeat(followers[0], 1) == ErrorCode.NONE
    leader_sync = h.sync(leader, 1, {m: f"parts-of-{m}".encode() for m, _ in joins})
    assert h.state() is GroupState.STABLE
    assert leader_sync.answer["assignment"] == f"parts-of-{leader}".encode()
    for member_id, box in zip(followers, waiting, strict=True):
        assert box.answer["assignment"] == f"parts-of-{member_id}".encode()
    described = h.c.describe_groups({"groups": ["g"]})["groups"][0]
    assert described["group_state"] == "Stable" and described["protocol_data"] == "range"
    assert {m["member_assignment"] for m in described["members"]} == {
        f"parts-of-{m}".encode() for m, _ in joins}
    assert h.c.list_groups(["stable"], [])["groups"] == [
        {"group_id": "g", "protocol_type": "consumer", "group_state": "Stable",
         "group_type": "classic"}]
    assert h.c.list_groups(["Empty", "NoSuchState"], [])["groups"] == []
    assert h.c.list_groups([], ["consumer"])["groups"] == []  # (KIP-848 groups: none)
    assert len(h.c.list_groups([], ["Classic"])["groups"]) == 1


def test_initial_delay_is_extended_while_members_keep_arriving() -> None:
    h = Harness(initial_delay_ms=3_000)
    _, first = h.new_member(rebalance_ms=10_000)
    h.advance(1_000)
    _, second = h.new_member(rebalance_ms=10_000)
    h.advance(2_000)
    assert not first.answers and not second.answers
    h.advance(3_000)
    assert first.answer["generation_id"] == second.answer["generation_id"] == 1


def test_join_completes_early_when_every_known_member_rejoined() -> None:
    h = Harness()
    (a, b), generation = h.stable_group(2)
    _c, c_join = h.new_member()
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(a, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    a_join = h.join(a)
    assert not c_join.answers
    b_join = h.join(b)  # the last known member: no timer needed
    assert {box.answer["generation_id"] for box in (a_join, b_join, c_join)} == {generation + 1}
    assert h.state() is GroupState.COMPLETING_REBALANCE


def test_rebalance_timeout_removes_a_member_that_does_not_rejoin() -> None:
    h = Harness()
    (a, b), generation = h.stable_group(2, session_ms=60_000)
    _, c_join = h.new_member(session_ms=60_000)
    a_join = h.join(a, session_ms=60_000)
    h.advance(REBALANCE_MS - 1)
    assert not a_join.answers
    h.advance(1)
    assert a_join.answer["generation_id"] == c_join.answer["generation_id"] == generation + 1
    assert b not in h.c.groups["g"].members
    assert h.heartbeat(b, generation) == ErrorCode.UNKNOWN_MEMBER_ID


def test_session_expiry_removes_the_member_and_starts_a_rebalance() -> None:
    h = Harness()
    (a, b), generation = h.stable_group(2)
    h.advance(SESSION_MS // 2)
    assert h.heartbeat(a, generation) == ErrorCode.NONE
    h.advance(SESSION_MS // 2 - 1)
    assert b in h.c.groups["g"].members
    h.advance(1)
    assert b not in h.c.groups["g"].members
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(a, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    answer = h.join(a).answer
    assert answer["generation_id"] == generation + 1 and answer["leader"] == a


def test_leave_group_rebalances_and_unknown_members_are_reported() -> None:
    h = Harness()
    (a, b), generation = h.stable_group(2)
    box = Box()
    h.c.leave_group({"group_id": "g", "members": [{"member_id": b, "group_instance_id": None},
                                                  {"member_id": "ghost",
                                                   "group_instance_id": None}]}, box)
    assert [m["error_code"] for m in box.answer["members"]] == [0, ErrorCode.UNKNOWN_MEMBER_ID]
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.join(a).answer["generation_id"] == generation + 1
    leave_all = Box()
    h.c.leave_group({"group_id": "g", "members": [{"member_id": a, "group_instance_id": None}]},
                    leave_all)
    assert h.state() is GroupState.EMPTY  # nobody left to wait for


def test_static_member_rejoins_with_a_new_id_without_a_rebalance() -> None:
    h = Harness()
    ids = []
    for instance in ("i-a", "i-b"):
        box = h.join(instance=instance)  # static members get their id at once
        ids.append(box.answers[0]["member_id"] if box.answers else None)
        for other in ids[:-1]:
            assert other is not None
            h.join(other, instance="i-a")
    group = h.c.groups["g"]
    a, b = group.static_members["i-a"], group.static_members["i-b"]
    generation = group.generation_id
    leader = group.leader_id
    h.sync(a, generation, {a: b"A", b: b"B"} if leader == a else None, instance="i-a")
    h.sync(b, generation, {a: b"A", b: b"B"} if leader == b else None, instance="i-b")
    assert h.state() is GroupState.STABLE
    rejoin = h.join(instance="i-a")  # a restart: no member id, same instance
    new_a = rejoin.answer["member_id"]
    assert rejoin.code == ErrorCode.NONE and new_a != a
    assert rejoin.answer["generation_id"] == generation
    assert h.state() is GroupState.STABLE
    assert h.sync(new_a, generation, instance="i-a").answer["assignment"] == b"A"
    assert h.heartbeat(a, generation, instance="i-a") == ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat(new_a, generation, instance="i-a") == ErrorCode.NONE
    assert h.heartbeat(b, generation, instance="i-b") == ErrorCode.NONE
    changed = h.join(instance="i-b", protocols=[("roundrobin", b"x"), ("range", b"y")])
    assert not changed.answers and h.state() is GroupState.PREPARING_REBALANCE


def test_heartbeat_and_sync_generation_and_member_checks() -> None:
    h = Harness()
    (a,), generation = h.stable_group(1)
    assert h.heartbeat(a, generation + 1) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat("ghost", generation) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.sync(a, generation - 1).code == ErrorCode.ILLEGAL_GENERATION
    assert h.join("ghost").code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.join(session_ms=10).code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.join(protocols=[("other", b"")]).code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(group="").code == ErrorCode.INVALID_GROUP_ID


def test_commit_generation_checks_and_simple_commits() -> None:
    h = Harness()
    assert h.commit("", -1, 10, group="solo") == ErrorCode.NONE  # standalone consumer
    assert h.committed("solo") == 10
    assert h.c.groups["solo"].state is GroupState.EMPTY
    assert h.commit("", 3, 10, group="nobody") == ErrorCode.ILLEGAL_GENERATION
    (a, b), generation = h.stable_group(2)
    assert h.commit("", -1, 5) == ErrorCode.UNKNOWN_MEMBER_ID  # group has members
    assert h.commit(a, generation + 1, 5) == ErrorCode.ILLEGAL_GENERATION
    assert h.commit("ghost", generation, 5) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.commit(a, generation, 7) == ErrorCode.NONE
    assert h.committed() == 7 and h.committed(partition=1) == -1
    h.new_member()
    assert h.commit(b, generation, 8) == ErrorCode.NONE  # allowed while preparing
    h.join(a)
    h.join(b)
    assert h.state() is GroupState.COMPLETING_REBALANCE
    assert h.commit(a, generation + 1, 9) == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.committed() == 8
    assert h.commit(a, generation, -5) != ErrorCode.NONE


def test_failed_writes_are_answered_with_coordinator_errors() -> None:
    h = Harness()
    (a,), generation = h.stable_group(1)
    h.log.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert h.commit(a, generation, 1) == ErrorCode.NOT_COORDINATOR
    h.log.fail_with = None
    b, b_join = h.new_member()
    h.join(a)
    generation = b_join.answer["generation_id"]
    follower = h.sync(b, generation)
    h.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    leader = h.sync(a, generation, {a: b"x", b: b"y"})
    assert leader.code == follower.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.state() is GroupState.PREPARING_REBALANCE


def test_pending_member_id_expires_after_the_session_timeout() -> None:
    h = Harness()
    first = h.join()
    pending = first.answer["member_id"]
    h.advance(SESSION_MS)
    assert h.join(pending).code == ErrorCode.UNKNOWN_MEMBER_ID


def test_group_max_size_bounds_members_and_pending_ids() -> None:
    h = Harness()
    h.stable_group(4)
    assert h.join().code == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_a_new_coordinator_loads_the_group_and_offsets_from_the_log() -> None:
    h = Harness()
    (a, b), generation = h.stable_group(2)
    assert h.commit(a, generation, 41) == ErrorCode.NONE
    assert h.commit(b, generation, 42, partition=1) == ErrorCode.NONE
    h.commit("", -1, 5, group="simple")
    moved = Harness(log=h.log)
    moved.c.unload(0)
    moved.c.begin_load(0, 1)
    assert moved.heartbeat(a, generation) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    for key, value, offset in h.log.records:
        moved.c.load_record(0, key, value, offset)
    moved.c.finish_load(0)
    group = moved.c.groups["g"]
    assert group.state is GroupState.STABLE and group.generation_id == generation
    assert set(group.members) == {a, b} and group.leader_id == h.c.groups["g"].leader_id
    assert group.members[a].assignment == a.encode()
    assert moved.committed() == 41 and moved.committed(partition=1) == 42
    assert moved.committed("simple") == 5
    assert moved.heartbeat(a, generation) == ErrorCode.NONE
    assert moved.sync(b, generation).answer["assignment"] == b.encode()
    moved.advance(SESSION_MS)  # loaded members are on the session timer too
    assert moved.state() is GroupState.EMPTY and not moved.c.groups["g"].members


def test_unload_answers_parked_requests_and_stops_serving() -> None:
    h = Harness()
    (a, b), generation = h.stable_group(2)
    parked = h.join(a)  # a rebalance waits for b
    assert not parked.answers
    h.c.unload(0)
    assert parked.code == ErrorCode.NOT_COORDINATOR
    assert h.heartbeat(b, generation) == ErrorCode.NOT_COORDINATOR
    assert h.c.fetch_offsets("g", None) == (ErrorCode.NOT_COORDINATOR, [])
    h.advance(REBALANCE_MS + SESSION_MS)  # nothing left on the timer fires into the group
    assert "g" not in h.c.groups


def test_protocol_vote_picks_what_most_members_prefer() -> None:
    h = Harness()
    both = (("roundrobin", b"r"), ("range", b"g"))
    (_a, b, c), _ = h.stable_group(3, protocols=both)
    group = h.c.groups["g"]
    assert group.protocol_name == "roundrobin"
    group.members[b].protocols = [("range", b""), ("roundrobin", b"")]
    group.members[c].protocols = [("range", b""), ("roundrobin", b"")]
    assert group.select_protocol() == "range"


def test_partition_for_matches_kafka() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert partition_for("polygenelubricants", 7) == 0
    assert all(0 <= partition_for(f"group-{i}", 5) < 5 for i in range(100))


@pytest.mark.parametrize("code", [ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR])
def test_commit_write_errors_map_like_kafka(code: ErrorCode) -> None:
    h = Harness()
    h.log.fail_with = code
    expected = (ErrorCode.COORDINATOR_NOT_AVAILABLE if code == ErrorCode.REQUEST_TIMED_OUT
                else ErrorCode.NOT_COORDINATOR)
    assert h.commit("", -1, 1) == expected


def test_join_below_v4_admits_a_member_without_an_id_at_once() -> None:
    h = Harness()
    box = Box()
    h.c.join_group({"group_id": "g", "session_timeout_ms": SESSION_MS,
                    "rebalance_timeout_ms": -1, "member_id": "", "group_instance_id": None,
                    "protocol_type": "consumer", "protocols": [{"name": "range",
                                                                "metadata": b"m"}]},
                   box, client_id="old-client", require_member_id=False)
    assert box.code == ErrorCode.NONE  # no MEMBER_ID_REQUIRED round trip (KIP-394 is v4+)
    member_id = box.answer["member_id"]
    assert member_id.startswith("old-client-") and box.answer["leader"] == member_id
    assert box.answer["generation_id"] == 1 and not h.c.groups["g"].pending_members
    member = h.c.groups["g"].members[member_id]
    assert member.rebalance_timeout_ms == SESSION_MS  # v0 has none: the session timeout


def test_delete_groups_removes_empty_groups_and_their_offsets() -> None:
    h = Harness()
    (a,), generation = h.stable_group(1)
    assert h.commit(a, generation, 5) == ErrorCode.NONE
    assert h.commit("", -1, 7, group="simple") == ErrorCode.NONE
    assert h.commit("", -1, 8, group="simple", partition=1) == ErrorCode.NONE
    written = len(h.log.records)
    results: list[list[tuple[str, ErrorCode]]] = []
    h.c.delete_groups(["g", "simple", "nope", "simple"], results.append)
    assert results == [[("g", ErrorCode.NON_EMPTY_GROUP), ("simple", ErrorCode.NONE),
                        ("nope", ErrorCode.GROUP_ID_NOT_FOUND)]]
    assert "simple" not in h.c.groups and "g" in h.c.groups
    tombstones = h.log.records[written:]
    assert len(tombstones) == 3 and all(value is None for _, value, _ in tombstones)
    assert h.committed("simple") == -1
    results.clear()
    h.c.delete_groups(["simple"], results.append)
    assert results == [[("simple", ErrorCode.GROUP_ID_NOT_FOUND)]]
    # a coordinator that loads the partition again does not bring the group back
    again = Harness(log=h.log)
    again.c.unload(0)
    again.c.begin_load(0, 1)
    for key, value, offset in h.log.records:
        again.c.load_record(0, key, value, offset)
    again.c.finish_load(0)
    assert "simple" not in again.c.groups and again.committed("g") == 5


def test_delete_offsets_of_an_empty_group_writes_tombstones() -> None:
    h = Harness()
    h.stable_group(1)  # group "g" has a member
    assert h.commit("", -1, 7, group="simple") == ErrorCode.NONE
    assert h.commit("", -1, 8, group="simple", partition=1) == ErrorCode.NONE
    written = len(h.log.records)
    t0, t9 = TopicPartition("t", 0), TopicPartition("t", 9)
    results: list[tuple[ErrorCode, dict[TopicPartition, ErrorCode]]] = []
    h.c.delete_offsets("simple", [t0, t9], lambda *a: results.append(a))
    assert results == [(ErrorCode.NONE, {t0: ErrorCode.NONE, t9: ErrorCode.NONE})]
    assert h.committed("simple") == -1 and h.committed("simple", 1) == 8
    assert [value for _, value, _ in h.log.records[written:]] == [None]  # t-0's tombstone
    results.clear()
    # a member is in "g" and its metadata (b"meta") is no subscription: every topic counts
    # as subscribed (tests/broker/group/test_offset_delete.py has the rest)
    h.c.delete_offsets("g", [t0], lambda *a: results.append(a))
    h.c.delete_offsets("nope", [t0], lambda *a: results.append(a))
    assert results == [(ErrorCode.NONE, {t0: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC}),
                       (ErrorCode.GROUP_ID_NOT_FOUND, {})]
    again = Harness(log=h.log)  # a reload keeps the offset deleted
    again.c.unload(0)
    again.c.begin_load(0, 1)
    for key, value, offset in h.log.records:
        again.c.load_record(0, key, value, offset)
    again.c.finish_load(0)
    assert again.committed("simple") == -1 and again.committed("simple", 1) == 8


def test_delete_groups_reports_coordinator_and_write_errors() -> None:
    h = Harness()
    assert h.commit("", -1, 7, group="simple") == ErrorCode.NONE
    h.log.fail_with = ErrorCode.REQUEST_TIMED_OUT
    results: list[list[tuple[str, ErrorCode]]] = []
    h.c.delete_groups(["simple"], results.append)
    assert results == [[("simple", ErrorCode.COORDINATOR_NOT_AVAILABLE)]]
    h.c.unload(0)
    results.clear()
    h.c.delete_groups(["simple"], results.append)
    assert results == [[("simple", ErrorCode.NOT_COORDINATOR)]]


def footprints_add_up(h: Harness) -> bool:
    return all(g.footprint_bytes == sum(m.footprint_bytes() for m in g.members.values())
               for g in h.c.groups.values())


def test_a_member_whose_metadata_passes_its_bound_is_refused() -> None:
    h = Harness(max_member_metadata_bytes=2_000)
    refused = h.join(protocols=[("range", bytes(2_000))])
    assert refused.code == ErrorCode.INVALID_REQUEST
    assert "group_max_member_metadata_bytes" in refused.answer["error_message"]
    assert "g" not in h.c.groups  # nothing kept
    _ids, _generation = h.stable_group(2, protocols=[("range", bytes(1_000))])
    assert footprints_add_up(h)


def test_a_group_full_of_metadata_refuses_the_next_member_and_its_leader_answer_fits() -> None:
    h = Harness(max_member_metadata_bytes=5_000, max_metadata_bytes=10_000, max_size=100)
    meta = [("range", bytes(3_000))]
    ids, _generation = h.stable_group(3, protocols=meta)  # ~3.1 KB each
    refused = h.join(protocols=meta)
    assert refused.code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert "group_max_metadata_bytes" in refused.answer["error_message"]
    group = h.c.groups["g"]
    assert group.footprint_bytes <= 10_000 and footprints_add_up(h)
    # a member rejoining with what it had is never refused; one growing past it is
    follower = next(m for m in ids if m != group.leader_id)
    assert h.join(follower, protocols=meta).code == ErrorCode.NONE
    grown = h.join(follower, protocols=[("range", bytes(4_500))])
    assert grown.code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert set(group.members) == set(ids) and footprints_add_up(h)


def test_every_group_of_a_coordinator_shares_one_metadata_bound() -> None:
    h = Harness(max_member_metadata_bytes=4_000, max_metadata_bytes=8_000,
                coordinator_max_metadata_bytes=8_000, max_size=100)
    meta = [("range", bytes(3_000))]
    for group in ("a", "b", "c"):
        member_id = h.join(group=group, protocols=meta).answer["member_id"]
        box = h.join(member_id, group=group, protocols=meta)
        if group == "c":
            assert box.code == ErrorCode.GROUP_MAX_SIZE_REACHED
            assert "group_coordinator_max_metadata_bytes" in box.answer["error_message"]
    assert h.c.footprint_bytes() <= 8_000 and footprints_add_up(h)


def test_a_leaders_assignments_past_the_group_bound_are_not_stored() -> None:
    h = Harness(max_member_metadata_bytes=2_000, max_metadata_bytes=6_000)
    (a, b), generation = h.stable_group(2)
    stored = len(h.log.records)
    for member in (a, b):
        h.join(member)  # a new generation
    generation = h.c.groups["g"].generation_id
    leader = h.c.groups["g"].leader_id
    follower = b if leader == a else a
    waiting = h.sync(follower, generation)
    answer = h.sync(leader, generation, {a: bytes(3_000), b: bytes(3_000)})
    assert answer.code == ErrorCode.INVALID_COMMIT_OFFSET_SIZE  # Kafka's: record too large
    assert waiting.code == ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    assert len(h.log.records) == stored and h.state() is GroupState.PREPARING_REBALANCE
    assert footprints_add_up(h)


def test_footprints_follow_joins_leaves_static_renames_syncs_and_loads() -> None:
    h = Harness(max_size=100)
    ids, _generation = h.stable_group(3, protocols=[("range", b"x" * 50)])
    assert footprints_add_up(h)
    h.join(instance="i-1")  # parked in the rebalance it starts
    static = h.c.groups["g"].static_members["i-1"]
    assert footprints_add_up(h)
    leave = Box()
    h.c.leave_group({"group_id": "g", "members": [{"member_id": ids[0],
                                                   "group_instance_id": None}]}, leave)
    assert footprints_add_up(h)
    h.join(instance="i-1")  # the static member comes back under a new id
    assert footprints_add_up(h) and static not in h.c.groups["g"].members
    moved = Harness(log=h.log)
    moved.c.unload(0)
    moved.c.begin_load(0, 1)
    for key, value, offset in h.log.records:
        moved.c.load_record(0, key, value, offset)
    moved.c.finish_load(0)
    assert footprints_add_up(moved)
