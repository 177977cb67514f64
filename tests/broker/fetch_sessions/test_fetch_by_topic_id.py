"""Fetch v13-17 by topic id through the Fetch handler and Kafka's codec (a controller-mode
core fed a metadata image): the round trip at every version, UNKNOWN_TOPIC_ID /
INCONSISTENT_TOPIC_ID, sessions keyed by id (never mixed with names), an incremental
fetch by id after a leader change (``node_endpoints``, v16+), a deleted and re-created
topic, the follower's id in ``replica_state`` (v15+) and the cache evicting a session
kept by id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.metadata.records import (
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from clients.records.record import build_batch
from tests.broker.handlers.wire import call1
from tests.broker.image_feed import ImageFeed
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

A, B = bytes(range(1, 17)), bytes(range(2, 18))
ID_VERSIONS = [13, 14, 15, 16, 17]


def start(tmp_path: Path, **overrides: Any) -> tuple[BrokerCore, ImageFeed, ManualClock]:
    clock = ManualClock()
    config = BrokerConfig(node_id=1, data_dir=str(tmp_path / "b1"),
                          controller_address="127.0.0.1:9", **overrides)
    core = BrokerCore(config, clock, SystemTimer(clock))
    core.startup()
    feed = ImageFeed(core)
    feed.apply(RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001),
               RegisterBrokerRecord(2, 1, "b", "127.0.0.2", 9002),
               UnfenceBrokerRecord(1, 0), UnfenceBrokerRecord(2, 1),
               TopicRecord("t", 7, 2, 2, {}, A),
               PartitionRecord("t", 0, (1, 2), 1, 0, (1,), 0),  # the HW follows the LEO
               PartitionRecord("t", 1, (1, 2), 1, 0, (1, 2), 0))
    return core, feed, clock


@pytest.fixture
def controlled(tmp_path: Path) -> Iterator[tuple[BrokerCore, ImageFeed]]:
    core, feed, _ = start(tmp_path)
    try:
        yield core, feed
    finally:
        core.shutdown()


def produce(core: BrokerCore, partition: int, value: bytes) -> None:
    answer = call1(core, ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 1000, "topics": [
        {"name": "t", "partitions": [{"index": partition,
                                      "records": build_batch([(None, value, 5, ())])}]}]})
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0


def by_id(epoch: int, session_id: int = 0, offsets: dict[int, int] | None = None,
          topic_id: bytes = A, forgotten: list[int] | None = None,
          replica_id: int = -1) -> dict[str, Any]:
    return {"replica_state": {"replica_id": replica_id, "replica_epoch": 3},
            "replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
            "session_epoch": epoch, "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20,
                 "replica_directory_id": B}
                for p, o in (offsets or {}).items()]}] if offsets else [],
            "forgotten_topics_data": [{"topic_id": topic_id, "partitions": forgotten}]
            if forgotten else []}


def parts(answer: dict[str, Any]) -> dict[tuple[bytes, int], dict[str, Any]]:
    return {(t["topic_id"], p["partition_index"]): p for t in answer["responses"]
            for p in t["partitions"]}


@pytest.mark.parametrize("version", ID_VERSIONS)
def test_fetch_by_id_round_trips_at_every_version(
        controlled: tuple[BrokerCore, ImageFeed], version: int) -> None:
    core, _ = controlled
    produce(core, 0, b"hello")
    answer = call1(core, ApiKey.FETCH, by_id(-1, offsets={0: 0, 1: 0}), version)
    assert answer["error_code"] == 0 and answer["session_id"] == 0
    [topic] = answer["responses"]
    assert topic["topic_id"] == A and topic["name"] == ""  # v13+ carries no name
    p0, p1 = topic["partitions"]
    assert (p0["error_code"], p0["high_watermark"], p1["error_code"]) == (0, 1, 0)
    assert b"hello" in bytes(p0["records"]) and len(p1["records"]) == 0


def test_unknown_and_inconsistent_topic_ids(controlled: tuple[BrokerCore, ImageFeed]) -> None:
    core, _ = controlled
    unknown = call1(core, ApiKey.FETCH, by_id(-1, offsets={0: 0, 5: 0}, topic_id=B), 13)
    assert [(k, p["error_code"]) for k, p in parts(unknown).items()] == [
        ((B, 0), ErrorCode.UNKNOWN_TOPIC_ID), ((B, 5), ErrorCode.UNKNOWN_TOPIC_ID)]
    # the image names A "t" but the log hosted as "t" is another topic's (not upgraded
    # to the image yet): INCONSISTENT_TOPIC_ID, nothing read
    core.hosted_topic_uuids["t"] = B
    answer = call1(core, ApiKey.FETCH, by_id(-1, offsets={0: 0}), 17)
    assert parts(answer)[(A, 0)]["error_code"] == ErrorCode.INCONSISTENT_TOPIC_ID


def test_a_session_by_id_never_mixes_with_names(
        controlled: tuple[BrokerCore, ImageFeed]) -> None:
    core, _ = controlled
    produce(core, 1, b"one")
    full = call1(core, ApiKey.FETCH, by_id(0, offsets={0: 0, 1: 0}), 13)
    sid = full["session_id"]
    session = core.fetch_sessions.get(sid)
    assert sid != 0 and session is not None and session.uses_topic_ids
    assert list(session.partitions) == [(A, 0), (A, 1)]
    assert parts(call1(core, ApiKey.FETCH, by_id(1, sid), 17)) == {}  # nothing new
    produce(core, 0, b"zero")
    news = parts(call1(core, ApiKey.FETCH, by_id(2, sid), 16))
    assert list(news) == [(A, 0)] and b"zero" in bytes(news[(A, 0)]["records"])
    named = call1(core, ApiKey.FETCH, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0,
                                       "isolation_level": 0, "session_id": sid,
                                       "session_epoch": 3, "topics": []}, 12)
    assert named["error_code"] == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    # and a session by name refuses an incremental fetch by id
    name_sid = call1(core, ApiKey.FETCH, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "isolation_level": 0,
        "session_id": 0, "session_epoch": 0, "topics": [{"name": "t", "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100}]}]},
        12)["session_id"]
    mixed = call1(core, ApiKey.FETCH, by_id(1, name_sid), 13)
    assert name_sid != 0 and mixed["error_code"] == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


def test_an_incremental_fetch_by_id_after_a_leader_change(
        controlled: tuple[BrokerCore, ImageFeed]) -> None:
    core, feed = controlled
    sid = call1(core, ApiKey.FETCH, by_id(0, offsets={0: 0, 1: 0}), 17)["session_id"]
    assert sid != 0 and parts(call1(core, ApiKey.FETCH, by_id(1, sid), 17)) == {}
    feed.apply(PartitionRecord("t", 0, (1, 2), 2, 1, (1, 2), 1))  # broker 2 leads now
    answer = call1(core, ApiKey.FETCH, by_id(2, sid), 17)
    moved = parts(answer)
    assert list(moved) == [(A, 0)]
    assert moved[(A, 0)]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert moved[(A, 0)]["current_leader"] == {"leader_id": 2, "leader_epoch": 1}
    assert answer["node_endpoints"] == [
        {"node_id": 2, "host": "127.0.0.2", "port": 9002, "rack": None}]
    assert parts(call1(core, ApiKey.FETCH, by_id(3, sid, forgotten=[0]), 17)) == {}
    session = core.fetch_sessions.get(sid)
    assert session is not None and list(session.partitions) == [(A, 1)]


def test_a_recreated_topic_is_not_served_to_the_old_id(
        controlled: tuple[BrokerCore, ImageFeed]) -> None:
    core, feed = controlled
    produce(core, 0, b"old")
    sid = call1(core, ApiKey.FETCH, by_id(0, offsets={0: 1}), 13)["session_id"]
    feed.apply(RemoveTopicRecord("t"), TopicRecord("t", 20, 1, 1, {}, B),
               PartitionRecord("t", 0, (1,), 1, 0, (1,), 0))
    produce(core, 0, b"new")
    stale = parts(call1(core, ApiKey.FETCH, by_id(1, sid), 13))
    assert stale[(A, 0)]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID  # kept, unresolved
    assert len(stale[(A, 0)]["records"]) == 0
    fresh = parts(call1(core, ApiKey.FETCH, by_id(-1, offsets={0: 0}, topic_id=B), 13))
    assert fresh[(B, 0)]["error_code"] == 0 and b"new" in bytes(fresh[(B, 0)]["records"])


@pytest.mark.parametrize("version", [14, 15])
def test_the_follower_id_moves_into_replica_state_at_v15(
        controlled: tuple[BrokerCore, ImageFeed], version: int) -> None:
    core, _ = controlled
    produce(core, 1, b"x")
    partition = core.partitions[TopicPartition("t", 1)]
    assert partition.high_watermark == 0  # replica 2 of the ISR has not fetched it yet
    call1(core, ApiKey.FETCH, by_id(-1, offsets={1: 1}, replica_id=2), version)
    assert partition.high_watermark == 1  # a follower fetch as replica 2 at offset 1


def test_the_cache_evicts_a_stale_session_kept_by_id(tmp_path: Path) -> None:
    core, _, clock = start(tmp_path, max_incremental_fetch_session_cache_slots=1,
                           min_incremental_fetch_session_eviction_ms=1000)
    try:
        first = call1(core, ApiKey.FETCH, by_id(0, offsets={0: 0, 1: 0}), 13)["session_id"]
        second = call1(core, ApiKey.FETCH, by_id(0, offsets={0: 0}), 13)["session_id"]
        assert first != 0 and second == 0  # full cache, first not stale: sessionless
        clock.advance(1001)
        third = call1(core, ApiKey.FETCH, by_id(0, offsets={1: 0}), 13)["session_id"]
        assert third not in (0, first) and core.fetch_sessions.evictions == 1
        gone = call1(core, ApiKey.FETCH, by_id(1, first), 13)
        assert gone["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        session = core.fetch_sessions.get(third)
        assert session is not None and list(session.partitions) == [(A, 1)]
    finally:
        core.shutdown()


@pytest.mark.parametrize("version", [7, 8, 9, 10])
def test_list_offsets_earliest_local_and_latest_tiered(
        controlled: tuple[BrokerCore, ImageFeed], version: int) -> None:
    core, _ = controlled
    produce(core, 0, b"a")
    produce(core, 0, b"b")
    core.partitions[TopicPartition("t", 0)].partition_log.maybe_increment_log_start_offset(1)
    answer = call1(core, ApiKey.LIST_OFFSETS, {
        "replica_id": -1, "isolation_level": 0, "timeout_ms": 1000, "topics": [
            {"name": "t", "partitions": [
                {"partition_index": 0, "timestamp": -4},  # EARLIEST_LOCAL_TIMESTAMP
                {"partition_index": 0, "timestamp": -5}]}]}, version)  # LATEST_TIERED
    local, tiered = answer["topics"][0]["partitions"]
    if version >= 8:  # the whole log is local: its start
        assert (local["error_code"], local["offset"], local["leader_epoch"]) == (0, 1, 0)
    else:
        assert local["error_code"] == ErrorCode.INVALID_REQUEST
    if version >= 9:  # no tiered storage: Kafka's answer without remote storage
        assert (tiered["error_code"], tiered["offset"], tiered["timestamp"]) == (0, -1, -1)
    else:
        assert tiered["error_code"] == ErrorCode.INVALID_REQUEST
