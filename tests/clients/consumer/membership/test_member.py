"""KIP-848 member state machine (clients/consumer/membership/member.py), driven with
hand-written coordinator answers and an explicit clock: join, reconcile (revoke before
assign), acknowledge, fencing, retries, fatal errors, incremental fields, leaving and
the poll timer."""

from __future__ import annotations

from typing import Any

import pytest

from clients.consumer.membership.member import (
    ConsumerMembership,
    MembershipConfig,
    MembershipState,
    StepKind,
)
from clients.consumer.membership.reconciliation import TargetAssignment, plan
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition as TP

A, B, C = b"a" * 16, b"b" * 16, b"c" * 16
NAMES = {A: "ta", B: "tb"}


def member(**overrides: Any) -> ConsumerMembership:
    settings: dict[str, Any] = {"group_id": "g", "member_id": "m-1",
                                "max_poll_interval_ms": 10_000, "rebalance_timeout_ms": 5_000}
    settings.update(overrides)
    return ConsumerMembership(MembershipConfig(**settings))


def answer(epoch: int, assignment: dict[bytes, list[int]] | None = None, *,
           error: ErrorCode = ErrorCode.NONE, interval_ms: int = 3000) -> dict[str, Any]:
    return {"error_code": int(error), "error_message": None, "member_id": "m-1",
            "member_epoch": epoch, "heartbeat_interval_ms": interval_ms,
            "assignment": None if assignment is None else {"topic_partitions": [
                {"topic_id": t, "partitions": p} for t, p in assignment.items()]}}


def stable(m: ConsumerMembership, assignment: dict[bytes, list[int]], now: int = 0) -> None:
    m.subscribe(now, topics=("ta", "tb"))
    assert m.heartbeat(now) is not None
    m.on_response(answer(1, assignment), now)
    m.next_step(NAMES)
    m.step_done(now)
    ack = m.heartbeat(now)
    assert ack is not None
    m.on_response(answer(1), now)
    assert m.state is MembershipState.STABLE


def test_join_sends_every_field_then_reconciles_and_acknowledges_at_once() -> None:
    m = member(server_assignor="uniform")
    m.subscribe(0, topics=("tb", "ta", "ta"))
    join = m.heartbeat(0)
    assert join == {"group_id": "g", "member_id": "m-1", "member_epoch": 0,
                    "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 5000,
                    "subscribed_topic_names": ["ta", "tb"], "subscribed_topic_regex": None,
                    "server_assignor": "uniform", "topic_partitions": []}
    assert m.heartbeat(0) is None  # one in flight
    m.on_response(answer(3, {A: [1, 0]}), 10)
    assert m.state is MembershipState.RECONCILING and m.member_epoch == 3
    step = m.next_step(NAMES)
    assert step is not None and step.kind is StepKind.RECONCILE
    assert step.added == {TP("ta", 0), TP("ta", 1)} and not step.revoked
    assert m.heartbeat(10) is None  # the step runs first
    m.step_done(20)
    assert m.state is MembershipState.ACKNOWLEDGING and m.owned == {TP("ta", 0), TP("ta", 1)}
    ack = m.heartbeat(20)  # at once, not after the 3 s interval
    assert ack is not None and ack["member_epoch"] == 3
    assert ack["topic_partitions"] == [{"topic_id": A, "partitions": [0, 1]}]
    assert ack["subscribed_topic_names"] is None and ack["rebalance_timeout_ms"] == -1
    assert ack["server_assignor"] is None
    m.on_response(answer(3), 30)
    assert m.state is MembershipState.STABLE
    assert m.timeout_ms(30) == 3000
    regular = m.heartbeat(3030)
    assert regular is not None and regular["topic_partitions"] is None


def test_revocation_comes_before_assignment_in_one_step() -> None:
    m = member()
    stable(m, {A: [0, 1]})
    m.on_response(answer(2, {A: [0], B: [2]}), 100)
    step = m.next_step(NAMES)
    assert step is not None and step.revoked == {TP("ta", 1)} and step.added == {TP("tb", 2)}
    m.step_done(110)
    assert m.owned == {TP("ta", 0), TP("tb", 2)}
    ack = m.heartbeat(110)
    assert ack is not None and ack["topic_partitions"] == [
        {"topic_id": A, "partitions": [0]}, {"topic_id": B, "partitions": [2]}]


def test_a_topic_id_not_in_metadata_waits_and_is_assigned_once_known() -> None:
    m = member()
    stable(m, {A: [0]})
    m.on_response(answer(2, {A: [0], C: [5]}), 0)
    assert m.next_step(NAMES) is None  # nothing to do for now
    assert m.state is MembershipState.RECONCILING
    step = m.next_step({**NAMES, C: "tc"})
    assert step is not None and step.added == {TP("tc", 5)} and not step.revoked
    m.step_done(1)
    assert m.owned_topic_ids["tc"] == C


def test_fenced_member_loses_its_partitions_without_commit_and_rejoins_with_its_id() -> None:
    m = member()
    stable(m, {A: [0, 1]})
    m.on_response(answer(0, error=ErrorCode.FENCED_MEMBER_EPOCH), 5000)
    assert m.state is MembershipState.FENCED
    step = m.next_step(NAMES)
    assert step is not None and step.kind is StepKind.LOSE
    assert step.revoked == {TP("ta", 0), TP("ta", 1)}
    assert m.heartbeat(5000) is None
    m.step_done(5001)
    assert m.state is MembershipState.JOINING and not m.owned
    rejoin = m.heartbeat(5001)
    assert rejoin is not None and rejoin["member_epoch"] == 0 and rejoin["member_id"] == "m-1"
    assert rejoin["topic_partitions"] == [] and rejoin["subscribed_topic_names"] == ["ta", "tb"]


def test_a_rejoin_is_a_new_incarnation_so_stale_commits_of_the_old_one_fail() -> None:
    m = member()
    stable(m, {A: [0]})
    assert (m.member_epoch, m.incarnation) == (1, 1)
    m.on_response(answer(2), 3000)  # a new epoch: the same membership
    assert m.incarnation == 1
    m.on_response(answer(0, error=ErrorCode.FENCED_MEMBER_EPOCH), 6000)
    m.next_step(NAMES)
    m.step_done(6001)
    assert m.incarnation == 2


@pytest.mark.parametrize("error", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
def test_coordinator_errors_retry_after_the_backoff_with_a_full_heartbeat(
        error: ErrorCode) -> None:
    m = member(retry_backoff_ms=100)
    stable(m, {A: [0]})
    assert m.heartbeat(3000) is not None
    m.on_response(answer(1, error=error), 3000)
    assert m.coordinator_lost and m.state is MembershipState.STABLE
    assert m.heartbeat(3099) is None
    again = m.heartbeat(3100)
    assert again is not None and again["subscribed_topic_names"] == ["ta", "tb"]
    assert again["topic_partitions"] == [{"topic_id": A, "partitions": [0]}]


def test_a_lost_answer_makes_the_next_heartbeat_full() -> None:
    m = member(retry_backoff_ms=50, rack_id="r1", instance_id="i1")
    stable(m, {A: [0]})
    regular = m.heartbeat(3000)
    assert regular is not None and regular["rack_id"] is None
    assert regular["instance_id"] == "i1"  # in every heartbeat, as Kafka's client
    m.on_failure(3000)
    again = m.heartbeat(3050)
    assert again is not None and again["rebalance_timeout_ms"] == 5000
    assert again["rack_id"] == "r1" and again["instance_id"] == "i1"


def test_other_errors_are_fatal() -> None:
    m = member()
    m.subscribe(0, topics=("ta",))
    m.heartbeat(0)
    m.on_response(answer(0, error=ErrorCode.GROUP_MAX_SIZE_REACHED), 1)
    assert m.state is MembershipState.FATAL
    assert m.fatal_error is not None and m.fatal_error[0] == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert m.heartbeat(10_000) is None


def test_a_subscription_change_travels_in_the_next_heartbeat_only() -> None:
    m = member()
    stable(m, {A: [0]})
    m.subscribe(100, pattern="t.*")
    hb = m.heartbeat(3000)
    assert hb is not None and hb["subscribed_topic_regex"] == "t.*"
    assert hb["subscribed_topic_names"] is None
    m.on_response(answer(1), 3000)
    hb = m.heartbeat(6000)
    assert hb is not None and hb["subscribed_topic_regex"] is None


@pytest.mark.parametrize(("instance_id", "epoch"), [(None, -1), ("static-1", -2)])
def test_leaving_revokes_with_a_commit_then_sends_the_leave_epoch(
        instance_id: str | None, epoch: int) -> None:
    m = member(instance_id=instance_id)
    stable(m, {A: [0]})
    m.unsubscribe()
    step = m.next_step(NAMES)
    assert step is not None and step.kind is StepKind.REVOKE_ALL
    assert step.revoked == {TP("ta", 0)}
    m.step_done(10)
    leave = m.heartbeat(10)
    assert leave is not None and leave["member_epoch"] == epoch
    m.on_response(answer(epoch), 11)
    assert m.state is MembershipState.UNSUBSCRIBED and not m.owned


def test_a_member_that_stops_polling_leaves_and_rejoins_on_its_next_poll() -> None:
    m = member()
    stable(m, {A: [0]})
    m.poll(1000)
    assert m.heartbeat(4000) is not None
    m.on_response(answer(1), 4000)
    leave = m.heartbeat(11_000)  # no poll since 1000: 10 s max poll interval passed
    assert leave is not None and leave["member_epoch"] == -1
    assert m.state is MembershipState.STALE
    m.on_response(answer(-1), 11_001)
    m.poll(20_000)
    step = m.next_step(NAMES)
    assert step is not None and step.kind is StepKind.LOSE and step.revoked == {TP("ta", 0)}
    m.step_done(20_000)
    assert m.state is MembershipState.JOINING
    join = m.heartbeat(20_000)
    assert join is not None and join["member_epoch"] == 0


def test_plan_revokes_what_the_target_drops_and_holds_back_unknown_topic_ids() -> None:
    target = TargetAssignment(4, {A: frozenset({0}), C: frozenset({1})})
    p = plan({TP("ta", 0), TP("ta", 1), TP("tb", 0)}, target, NAMES)
    assert p.revoked == {TP("ta", 1), TP("tb", 0)} and not p.added and p.unresolved == {C}
