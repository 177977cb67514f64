"""The marker queue (pure): partitions grouped by leader, answers that finish, retry or
give up, deleted partitions, cancellation; the WriteTxnMarkers body and answer mapping;
resends logged once per cause and interval (injected clock)."""

from __future__ import annotations

import logging

import pytest

from broker.logs.rate_limit import RateLimitedLog
from broker.txn.markers import (
    GONE,
    RESEND_LOG_INTERVAL_MS,
    MarkerQueue,
    TxnMarker,
    request_body,
    response_results,
)
from clients.protocol.errors import ErrorCode as E
from clients.protocol.topics import TopicPartition
from timer.clock import ManualClock

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
MARKER = TxnMarker("tx", 7, 3, True, 5, 2, frozenset({A0, A1, B0}))
LEADERS = {A0: 1, A1: 2, B0: 1}


def test_a_marker_is_done_when_every_partition_answered() -> None:
    queue, done = MarkerQueue(), list[bool]()
    key = queue.add(MARKER, done.append)
    rounds = queue.requests(LEADERS.get)
    assert {leader: [tps for _, _, tps in batch] for leader, batch in rounds.items()} == {
        1: [[A0, B0]], 2: [[A1]]}
    assert queue.requests(LEADERS.get) == {}  # in flight: not sent twice
    queue.on_result(key, {A0: E.NONE, B0: E.NOT_LEADER_OR_FOLLOWER})
    queue.on_result(key, {A1: E.INVALID_PRODUCER_EPOCH})  # a later epoch already there
    assert done == [] and queue.has_waiting()
    again = queue.requests(LEADERS.get)
    assert [tps for _, _, tps in again[1]] == [[B0]]
    queue.on_result(key, {B0: E.NONE})
    assert done == [True] and len(queue) == 0


def test_no_answer_is_sent_again_and_leaderless_partitions_wait() -> None:
    queue, done = MarkerQueue(), list[bool]()
    key = queue.add(MARKER, done.append)
    rounds = queue.requests(lambda tp: None if tp == A1 else LEADERS[tp])
    assert list(rounds) == [1]
    queue.on_failure(key, [A0, B0])
    assert sorted(tp for _, _, tps in queue.requests(LEADERS.get)[1] for tp in tps) == [A0, B0]
    assert done == []


def test_deleted_partitions_count_as_written() -> None:
    queue, done = MarkerQueue(), list[bool]()
    queue.add(MARKER, done.append)
    assert queue.requests(lambda tp: GONE) == {}
    assert done == [True]


def test_a_fenced_coordinator_gives_up() -> None:
    queue, done = MarkerQueue(), list[bool]()
    key = queue.add(MARKER, done.append)
    queue.requests(LEADERS.get)
    queue.on_result(key, {A0: E.TRANSACTION_COORDINATOR_FENCED})
    assert done == [False] and len(queue) == 0


def test_cancelled_markers_never_call_back() -> None:
    queue, done = MarkerQueue(), list[bool]()
    key = queue.add(MARKER, done.append)
    queue.requests(LEADERS.get)
    queue.cancel({"tx"})
    queue.on_result(key, {A0: E.NONE, A1: E.NONE, B0: E.NONE})
    assert done == [] and len(queue) == 0


def test_request_and_answer_mapping() -> None:
    batch = [(4, MARKER, [A0, B0])]
    body = request_body(batch)
    assert body == {"markers": [{
        "producer_id": 7, "producer_epoch": 3, "transaction_result": True,
        "topics": [{"name": "a", "partition_indexes": [0]},
                   {"name": "b", "partition_indexes": [0]}],
        "coordinator_epoch": 5, "transaction_version": 2}]}
    answer = {"markers": [{"producer_id": 7, "topics": [
        {"name": "a", "partitions": [{"partition_index": 0, "error_code": 0}]},
        {"name": "b", "partitions": [{"partition_index": 0, "error_code": 9999}]}]}]}
    assert response_results(batch, answer) == [  # type: ignore[arg-type]
        (4, {A0: E.NONE, B0: E.UNKNOWN_SERVER_ERROR})]
    assert response_results(batch, {"markers": []}) == [(4, {})]


def test_resends_are_logged_once_per_cause_then_with_the_count_suppressed(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "broker.txn.markers")
    clock = ManualClock(0)
    queue = MarkerQueue(RateLimitedLog(logging.getLogger("broker.txn.markers"), clock,
                                       RESEND_LOG_INTERVAL_MS))
    key = queue.add(MARKER, list[bool]().append)
    for _ in range(50):  # the leader of b-0 keeps answering NOT_LEADER_OR_FOLLOWER
        queue.requests(lambda tp: None if tp == A1 else LEADERS[tp])
        queue.on_result(key, {A0: E.NONE, B0: E.NOT_LEADER_OR_FOLLOWER})
    clock.advance(RESEND_LOG_INTERVAL_MS)
    queue.requests(lambda tp: None if tp == A1 else LEADERS[tp])
    queue.on_result(key, {B0: E.NOT_LEADER_OR_FOLLOWER})
    assert [r.getMessage() for r in caplog.records] == [
        "tx: marker for a-1 waits: the partition has no leader",
        "tx: marker for b-0: NOT_LEADER_OR_FOLLOWER; resending",
        "tx: marker for a-1 waits: the partition has no leader (49 similar suppressed)",
        "tx: marker for b-0: NOT_LEADER_OR_FOLLOWER; resending (49 similar suppressed)"]
