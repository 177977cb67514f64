"""KIP-848 consumer groups in the group coordinator (sans-IO, ManualClock): heartbeats,
fencing, session and rebalance timeouts, offsets with member epochs, both protocols side
by side, ListGroups / DescribeGroups / ConsumerGroupDescribe / DeleteGroups."""

from __future__ import annotations

from typing import Any

from broker.group.consumer.coordinator import ConsumerGroupConfig
from broker.group.coordinator import GroupCoordinator
from broker.group.protocol import GroupCoordinatorConfig
from clients.protocol.errors import ErrorCode
from tests.broker.group.test_coordinator import Box, MemoryLog
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

T = b"\x05" * 16
TOPICS = {"orders": (T, 4)}


class Harness:
    def __init__(self) -> None:
        self.clock = ManualClock(1_000)
        self.timer = SystemTimer(self.clock)
        self.c = GroupCoordinator(
            GroupCoordinatorConfig(max_size=4), self.clock, self.timer, MemoryLog(),
            num_partitions=1, topics=lambda: TOPICS,
            consumer_config=ConsumerGroupConfig(session_timeout_ms=3_000,
                                                heartbeat_interval_ms=500, max_size=3))
        self.c.begin_load(0, 0)
        self.c.finish_load(0)

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.timer.advance_clock()

    def hb(self, member_id: str, epoch: int, owned: Any = None, version: int = 1,
           group: str = "g", **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "group_id": group, "member_id": member_id, "member_epoch": epoch,
            "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 2_000 if epoch == 0 else -1,
            "subscribed_topic_names": ["orders"] if epoch == 0 else None,
            "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": None if owned is None else [
                {"topic_id": T, "partitions": sorted(owned)}], **extra}
        return dict(self.c.consumer_group_heartbeat(body, version))  # type: ignore[arg-type]

    def commit(self, member_id: str, epoch: int, version: int = 9) -> ErrorCode:
        box = Box()
        self.c.commit_offsets({"group_id": "g", "generation_id": epoch, "member_id": member_id,
                               "group_instance_id": None, "topics": [{"name": "orders",
                               "partitions": [{"partition_index": 0, "committed_offset": 7,
                                               "committed_leader_epoch": -1,
                                               "committed_metadata": ""}]}]},
                              box, version)
        return ErrorCode(box.answer["topics"][0]["partitions"][0]["error_code"])


def _parts(answer: dict[str, Any]) -> set[int] | None:
    if answer["assignment"] is None:
        return None
    return {p for t in answer["assignment"]["topic_partitions"] for p in t["partitions"]}


def test_join_reconcile_and_describe() -> None:
    h = Harness()
    a = h.hb("a", 0, [])
    assert (a["error_code"], a["member_epoch"], _parts(a)) == (0, 1, {0, 1, 2, 3})
    assert a["heartbeat_interval_ms"] == 500
    b = h.hb("b", 0, [])
    assert (b["member_epoch"], _parts(b)) == (2, set())
    a = h.hb("a", 1, [0, 1, 2, 3])  # must revoke two first: epoch stays 1
    kept = _parts(a)
    assert a["member_epoch"] == 1 and kept is not None and len(kept) == 2
    a = h.hb("a", 1, kept)
    assert a["member_epoch"] == 2
    b = h.hb("b", 2, [])
    assert _parts(b) == {0, 1, 2, 3} - kept
    described = h.c.consumer_group_describe("g")
    assert described["group_state"] == "Stable" and described["group_epoch"] == 2
    assert {m["member_id"] for m in described["members"]} == {"a", "b"}
    listed = h.c.list_groups([], [])["groups"]
    assert listed == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable",
                       "group_type": "consumer"}]
    classic = h.c.describe_groups({"groups": ["g"]})["groups"][0]
    assert classic["protocol_type"] == "consumer" and len(classic["members"]) == 2


def test_request_checks_and_fencing() -> None:
    h = Harness()
    assert h.hb("", 0, [])["error_code"] == ErrorCode.INVALID_REQUEST  # v1: id needed
    generated = h.hb("", 0, [], version=0)
    assert generated["error_code"] == 0 and generated["member_id"]
    assert h.hb("x", 0, [], server_assignor="sticky")["error_code"] == \
        ErrorCode.UNSUPPORTED_ASSIGNOR
    assert h.hb("x", 0, [], subscribed_topic_regex="(a)\\1")["error_code"] == \
        ErrorCode.INVALID_REGULAR_EXPRESSION
    assert h.hb("nobody", 3)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    a = h.hb("a", 0, [])
    assert h.hb("a", a["member_epoch"] + 5)["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    h.hb("b", 0, [])
    h.hb("c", 0, [])
    assert h.hb("d", 0, [])["error_code"] == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_session_timeout_fences_and_releases() -> None:
    h = Harness()
    h.hb("a", 0, [])
    b = h.hb("b", 0, [])
    for _ in range(4):  # b keeps heartbeating, a is silent
        h.advance(1_000)
        b = h.hb("b", b["member_epoch"], _parts(b) or [])
    assert "a" not in h.c.consumer.groups["g"].members
    assert _parts(b) == {0, 1, 2, 3} or h.c.consumer.groups["g"].members["b"] \
        .assignment.assigned == {T: frozenset(range(4))}
    assert h.hb("a", 1)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    h = Harness()
    h.hb("a", 0, [])
    h.hb("b", 0, [])
    h.hb("a", 1, [0, 1, 2, 3])  # told to revoke; never acknowledges
    h.advance(1_500)
    h.hb("a", 1, [0, 1, 2, 3])  # still owns them: its session lives, not its rebalance
    h.hb("b", 2, [])
    h.advance(1_000)
    assert "a" not in h.c.consumer.groups["g"].members  # 2 s rebalance timeout passed


def test_offsets_use_member_epochs() -> None:
    h = Harness()
    a = h.hb("a", 0, [])
    assert h.commit("a", a["member_epoch"]) == ErrorCode.NONE
    assert h.commit("a", 0) == ErrorCode.STALE_MEMBER_EPOCH
    assert h.commit("a", 0, version=8) == ErrorCode.ILLEGAL_GENERATION
    assert h.commit("zz", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.commit("", -1) == ErrorCode.UNKNOWN_MEMBER_ID  # the group has members
    code, topics = h.c.fetch_offsets("g", None, False, "a", a["member_epoch"])
    assert code == ErrorCode.NONE and topics[0]["partitions"][0]["committed_offset"] == 7
    assert h.c.fetch_offsets("g", None, False, "a", 9)[0] == ErrorCode.STALE_MEMBER_EPOCH
    left = h.hb("a", -1)
    assert left["member_epoch"] == -1
    box = Box()
    h.c.delete_groups(["g"], box)
    assert box.answer == [("g", ErrorCode.NONE)]


def test_classic_and_consumer_groups_side_by_side() -> None:
    h = Harness()
    h.hb("a", 0, [])
    join = Box()
    h.c.join_group({"group_id": "g", "session_timeout_ms": 10_000,
                    "rebalance_timeout_ms": 5_000, "member_id": "", "group_instance_id": None,
                    "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": b""}]}, join,
                   require_member_id=False)
    assert join.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    classic = Box()
    h.c.join_group({"group_id": "k", "session_timeout_ms": 10_000,
                    "rebalance_timeout_ms": 5_000, "member_id": "", "group_instance_id": None,
                    "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": b""}]}, classic,
                   require_member_id=False)
    assert h.c.groups["k"].members  # parked in its join phase: a classic group
    assert h.hb("m", 0, [], group="k")["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    types = {g["group_id"]: g["group_type"] for g in h.c.list_groups([], [])["groups"]}
    assert types == {"g": "consumer", "k": "classic"}
    assert [g["group_id"] for g in h.c.list_groups([], ["Classic"])["groups"]] == ["k"]
    assert h.c.consumer_group_describe("k")["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
