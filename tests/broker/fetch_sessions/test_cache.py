"""The fetch session cache and contexts (KIP-227), pure: an injected clock, no broker."""

from __future__ import annotations

import random
from typing import Any

import pytest

from broker.fetch_sessions.cache import FetchSessionCache, next_epoch
from broker.fetch_sessions.context import (
    ERROR,
    FULL,
    INCREMENTAL,
    SESSIONLESS,
    FetchContext,
    new_context,
)
from clients.protocol.errors import ErrorCode
from timer.clock import ManualClock

CLIENT = ("alice", -1)
FOLLOWER = ("broker-1", 1)


def req(epoch: int, session_id: int = 0, parts: dict[str, list[int]] | None = None,
        forgotten: dict[str, list[int]] | None = None, offset: int = 0) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
            "topics": [{"name": t, "partitions": [
                {"partition": p, "fetch_offset": offset, "partition_max_bytes": 100,
                 "current_leader_epoch": -1, "last_fetched_epoch": -1,
                 "log_start_offset": -1} for p in ps]} for t, ps in (parts or {}).items()],
            "forgotten_topics_data": [{"name": t, "partitions": ps}
                                      for t, ps in (forgotten or {}).items()]}


def answer(ctx: FetchContext, hw: dict[tuple[str, int], int] | None = None,
           data: frozenset[tuple[str, int]] = frozenset(),
           errors: frozenset[tuple[str, int]] = frozenset()) -> dict[str, Any]:
    """Finish ``ctx`` with a response for every partition it reads (hw default 10)."""
    hw = hw or {}
    response: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                                "responses": [{"name": t["name"], "partitions": [
                                    {"partition_index": p["partition"],
                                     "error_code": (3 if (t["name"], p["partition"]) in errors
                                                    else 0),
                                     "high_watermark": hw.get((t["name"], p["partition"]), 10),
                                     "last_stable_offset": 10, "log_start_offset": 0,
                                     "records": (b"x" * 7 if (t["name"], p["partition"]) in data
                                                 else b"")}
                                    for p in t["partitions"]]} for t in ctx.topics]}
    return dict(ctx.finish(response))  # type: ignore[arg-type]


def names(response: dict[str, Any]) -> list[tuple[str, int]]:
    return [(t["name"], p["partition_index"]) for t in response["responses"]
            for p in t["partitions"]]


def cache(clock: ManualClock, slots: int = 10, eviction_ms: int = 120_000,
          max_parts: int = 100) -> FetchSessionCache:
    return FetchSessionCache(slots, eviction_ms, max_parts, clock, random.Random(7))


def start(c: FetchSessionCache, parts: dict[str, list[int]], owner: Any = CLIENT) -> int:
    ctx = new_context(c, req(0, parts=parts), 12, owner)  # type: ignore[arg-type]
    assert ctx.kind == FULL
    response = answer(ctx)
    assert names(response) == [(t, p) for t, ps in parts.items() for p in ps]
    return int(response["session_id"])


def test_full_fetch_creates_a_session_and_incremental_fetches_send_only_news() -> None:
    clock = ManualClock(0)
    c = cache(clock)
    sid = start(c, {"a": [0, 1, 2], "b": [0]})
    assert sid != 0 and len(c) == 1 and c.partitions == 4
    # epoch 1: nothing changed -> no partition; every session partition is read
    ctx = new_context(c, req(1, sid), 12, CLIENT)  # type: ignore[arg-type]
    assert ctx.kind == INCREMENTAL
    assert [(t["name"], len(t["partitions"])) for t in ctx.topics] == [("a", 3), ("b", 1)]
    assert names(answer(ctx)) == []
    # epoch 2: records on a-1, the HW of b-0 moved, an error on a-2
    ctx = new_context(c, req(2, sid), 12, CLIENT)  # type: ignore[arg-type]
    got = answer(ctx, hw={("b", 0): 11}, data=frozenset({("a", 1)}),
                 errors=frozenset({("a", 2)}))
    assert got["session_id"] == sid and sorted(names(got)) == [("a", 1), ("a", 2), ("b", 0)]
    # a-1 (returned records) is read last now; the error is sent again once it is gone
    ctx = new_context(c, req(3, sid), 12, CLIENT)  # type: ignore[arg-type]
    assert [(t["name"], [p["partition"] for p in t["partitions"]]) for t in ctx.topics] == [
        ("a", [0, 2]), ("b", [0]), ("a", [1])]
    assert names(answer(ctx, hw={("b", 0): 11})) == [("a", 2)]


def test_incremental_adds_updates_and_forgets_partitions() -> None:
    clock = ManualClock(0)
    c = cache(clock)
    sid = start(c, {"a": [0, 1]})
    ctx = new_context(c, req(1, sid, parts={"a": [1], "c": [5]}, forgotten={"a": [0]},  # type: ignore[arg-type]
                             offset=42), 12, CLIENT)
    session = c.get(sid)
    assert session is not None and list(session.partitions) == [("a", 1), ("c", 5)]
    assert session.partitions[("a", 1)].fetch_offset == 42
    assert names(answer(ctx)) == [("c", 5)]  # new: always sent once
    # forgetting everything closes the session; the fetch is sessionless
    ctx = new_context(c, req(2, sid, forgotten={"a": [1], "c": [5]}), 12, CLIENT)  # type: ignore[arg-type]
    assert ctx.kind == SESSIONLESS and c.get(sid) is None and c.partitions == 0


def test_epoch_mismatch_unknown_session_other_owner_and_closing() -> None:
    clock = ManualClock(0)
    c = cache(clock)
    sid = start(c, {"a": [0]})
    for body, owner, code in ((req(5, sid), CLIENT, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
                              (req(1, sid + 1), CLIENT, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
                              (req(1, sid), ("mallory", -1), ErrorCode.FETCH_SESSION_ID_NOT_FOUND)):
        ctx = new_context(c, body, 12, owner)  # type: ignore[arg-type]
        assert ctx.kind == ERROR and ctx.error_code == code
        assert answer(ctx)["error_code"] == code and c.get(sid) is not None
    # a parked incremental fetch whose session moved on meanwhile: INVALID_FETCH_SESSION_EPOCH
    parked = new_context(c, req(1, sid), 12, CLIENT)  # type: ignore[arg-type]
    assert new_context(c, req(2, sid), 12, CLIENT).kind == INCREMENTAL  # type: ignore[arg-type]
    assert answer(parked)["error_code"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # epoch -1 closes the session and is sessionless; v6 never makes one
    ctx = new_context(c, req(-1, sid, parts={"a": [0]}), 12, CLIENT)  # type: ignore[arg-type]
    assert ctx.kind == SESSIONLESS and c.get(sid) is None
    assert answer(ctx)["session_id"] == 0
    assert new_context(c, req(0, parts={"a": [0]}), 6, CLIENT).kind == SESSIONLESS  # type: ignore[arg-type]
    assert next_epoch(2**31 - 1) == 1 and next_epoch(0) == 1 and next_epoch(-1) == -1


def test_per_session_partition_bound() -> None:
    clock = ManualClock(0)
    c = cache(clock, max_parts=3)
    assert start(c, {"a": [0, 1, 2, 3]}) == 0  # too large: sessionless
    sid = start(c, {"a": [0, 1, 2]})
    ctx = new_context(c, req(1, sid, parts={"b": [0]}), 12, CLIENT)  # type: ignore[arg-type]
    assert ctx.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and c.get(sid) is None


def test_eviction_stale_first_then_least_valuable_evictable() -> None:
    clock = ManualClock(0)
    c = cache(clock, slots=2, eviction_ms=1000)
    small = start(c, {"a": [0]})
    big = start(c, {"a": [0, 1, 2]})
    # full, nothing stale, nothing old enough: a client newcomer gets no session
    assert start(c, {"b": [0, 1, 2, 3]}) == 0
    # a follower newcomer may evict client sessions at any time: the least valuable
    follower = start(c, {"f": [0]}, FOLLOWER)
    assert c.get(small) is None and c.get(big) is not None and c.evictions == 1
    # sessions touched after eviction_ms are evictable by anyone, if worth less
    clock.advance(1001)
    c.touch(c.get(big))  # type: ignore[arg-type]
    c.touch(c.get(follower))  # type: ignore[arg-type]
    assert start(c, {"b": [0, 1]}) == 0  # smaller than the smallest client session
    assert start(c, {"b": [0, 1, 2, 3]}) != 0 and c.get(big) is None  # larger: evicts
    # a session unused for more than eviction_ms is evicted first, whatever its value
    clock.advance(1001)
    c.touch(c.get(follower))  # type: ignore[arg-type]
    tiny = start(c, {"z": [0]})
    assert tiny != 0 and c.get(follower) is not None and len(c) == 2


def test_zero_slots_keeps_no_session_and_bad_settings_are_refused() -> None:
    clock = ManualClock(0)
    assert start(cache(clock, slots=0), {"a": [0]}) == 0
    with pytest.raises(ValueError):
        FetchSessionCache(-1, 0, 1, clock)
