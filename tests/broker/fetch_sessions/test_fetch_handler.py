"""Fetch sessions through the Fetch handler and Kafka's codec (a standalone core)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.handlers.common import RequestContext
from broker.handlers.fetch import handle_fetch
from broker.metadata.records import (
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.records.record import build_batch
from tests.broker.handlers.wire import CoreHarness, call, call1, core_at
from tests.broker.image_feed import ImageFeed
from timer.clock import ManualClock
from timer.system_timer import SystemTimer


@pytest.fixture
def h(tmp_path: Path) -> Iterator[CoreHarness]:
    with core_at(tmp_path / "b0") as harness:
        harness.create("t", 3)
        yield harness


def produce(h: CoreHarness, partition: int, value: bytes) -> None:
    call1(h.core, ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 1000, "topics": [
        {"name": "t", "partitions": [{"index": partition,
                                      "records": build_batch([(None, value, 5, ())])}]}]})


def body(epoch: int, session_id: int = 0, offsets: dict[int, int] | None = None,
         forgotten: list[int] | None = None, wait_ms: int = 0) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": wait_ms, "min_bytes": 1 if wait_ms else 0,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
            "session_epoch": epoch, "topics": [{"name": "t", "partitions": [
                {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20}
                for p, o in (offsets or {}).items()]}] if offsets else [],
            "forgotten_topics_data": [{"name": "t", "partitions": forgotten}] if forgotten
            else []}


def parts(answer: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["partition_index"]: p for t in answer["responses"] for p in t["partitions"]}


def test_incremental_fetches_carry_only_partitions_with_news(h: CoreHarness) -> None:
    produce(h, 0, b"zero")
    full = call1(h.core, ApiKey.FETCH, body(0, offsets={0: 0, 1: 0, 2: 0}))
    sid = full["session_id"]
    assert sid != 0 and sorted(parts(full)) == [0, 1, 2]
    assert b"zero" in bytes(parts(full)[0]["records"])
    # the client moves its position on partition 0 only; nothing new anywhere
    quiet = call1(h.core, ApiKey.FETCH, body(1, sid, offsets={0: 1}))
    assert quiet["error_code"] == 0 and quiet["session_id"] == sid and parts(quiet) == {}
    produce(h, 2, b"two")  # the session fetches 2 at offset 0 still: its records
    news = call1(h.core, ApiKey.FETCH, body(2, sid))
    assert sorted(parts(news)) == [2] and b"two" in bytes(parts(news)[2]["records"])
    # forgotten: no longer fetched; a wrong epoch is refused
    call1(h.core, ApiKey.FETCH, body(3, sid, offsets={2: 1}, forgotten=[1]))
    session = h.core.fetch_sessions.get(sid)
    assert session is not None and sorted(p for _, p in session.partitions) == [0, 2]
    stale = call1(h.core, ApiKey.FETCH, body(3, sid))
    assert stale["error_code"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_a_parked_incremental_fetch_completes_with_the_new_data_only(h: CoreHarness) -> None:
    sid = call1(h.core, ApiKey.FETCH, body(0, offsets={0: 0, 1: 0, 2: 0}))["session_id"]
    answers = call(h.core, ApiKey.FETCH, body(1, sid, wait_ms=5000))
    assert answers == []  # nothing new: parked
    produce(h, 1, b"one")
    assert len(answers) == 1 and answers[0] is not None
    assert sorted(parts(answers[0])) == [1] and answers[0]["session_id"] == sid


class DenyAfter:
    """An authorizer that lets everything through until ``deny`` is set."""

    def __init__(self) -> None:
        self.deny = False

    def allowed(self, principal: str | None, operation: str, resource_type: str,
                name: str) -> bool:
        return not (self.deny and resource_type == "Topic")

    def allowed_somewhere(self, principal: str | None, operation: str,
                          resource_type: str) -> bool:
        return True


def test_an_incremental_fetch_checks_the_acls_again(h: CoreHarness) -> None:
    authorizer = DenyAfter()
    ctx = RequestContext(12, "c", principal="alice", authorizer=authorizer)  # type: ignore[arg-type]
    answers: list[Any] = []
    handle_fetch(h.core, body(0, offsets={0: 0, 1: 0}), answers.append, ctx)  # type: ignore[arg-type]
    sid = answers[-1]["session_id"]
    assert sid != 0 and sorted(parts(answers[-1])) == [0, 1]
    produce(h, 0, b"secret")
    authorizer.deny = True  # the ACL is removed: the session must not serve the topic
    handle_fetch(h.core, body(1, sid), answers.append, ctx)  # type: ignore[arg-type]
    denied = parts(answers[-1])
    assert sorted(denied) == [0, 1] and {p["error_code"] for p in denied.values()} == {
        ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert all(len(p["records"]) == 0 for p in denied.values())
    # another principal cannot use the session at all
    other = RequestContext(12, "c", principal="mallory")
    handle_fetch(h.core, body(2, sid), answers.append, other)  # type: ignore[arg-type]
    assert answers[-1]["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


# -- a leader change under an incremental session (controller mode) -------------------


@pytest.fixture
def controlled(tmp_path: Path) -> Iterator[tuple[BrokerCore, ImageFeed]]:
    clock = ManualClock()
    config = BrokerConfig(node_id=1, data_dir=str(tmp_path / "b1"),
                          controller_address="127.0.0.1:9")
    core = BrokerCore(config, clock, SystemTimer(clock))
    core.startup()
    feed = ImageFeed(core)
    feed.apply(RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001),
               RegisterBrokerRecord(2, 1, "b", "127.0.0.1", 9002),
               UnfenceBrokerRecord(1, 0), UnfenceBrokerRecord(2, 1),
               TopicRecord("t", 7, 2, 2),
               PartitionRecord("t", 0, (1, 2), 1, 0, (1, 2), 0),
               PartitionRecord("t", 1, (1, 2), 1, 0, (1, 2), 0))
    try:
        yield core, feed
    finally:
        core.shutdown()


def test_an_incremental_fetch_after_a_leader_change_names_the_new_leader(
        controlled: tuple[BrokerCore, ImageFeed]) -> None:
    core, feed = controlled
    sid = call1(core, ApiKey.FETCH, body(0, offsets={0: 0, 1: 0}))["session_id"]
    assert sid != 0 and parts(call1(core, ApiKey.FETCH, body(1, sid))) == {}
    feed.apply(PartitionRecord("t", 0, (1, 2), 2, 1, (1, 2), 1))  # broker 2 leads now
    moved = parts(call1(core, ApiKey.FETCH, body(2, sid)))
    assert sorted(moved) == [0] and moved[0]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert moved[0]["current_leader"] == {"leader_id": 2, "leader_epoch": 1}
    # still failing: still sent (the error resets what the session last told)
    assert sorted(parts(call1(core, ApiKey.FETCH, body(3, sid)))) == [0]
    # the client moves 0 to the new leader's session: forgotten here, quiet again
    assert parts(call1(core, ApiKey.FETCH, body(4, sid, forgotten=[0]))) == {}
    session = core.fetch_sessions.get(sid)
    assert session is not None and list(session.partitions) == [("t", 1)]
