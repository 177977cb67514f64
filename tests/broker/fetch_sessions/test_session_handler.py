"""The fetcher's side of a fetch session (clients.protocol.fetch_session.handler)."""

from __future__ import annotations

from typing import Any

from clients.protocol.errors import ErrorCode
from clients.protocol.fetch_session.handler import FetchSessionHandler


def want(**offsets: int) -> dict[tuple[str, int], dict[str, Any]]:
    return {("t", int(k[1:])): {"partition": int(k[1:]), "fetch_offset": v,
                                "partition_max_bytes": 100} for k, v in offsets.items()}


def answer(session_id: int, *partitions: int, error: int = 0) -> dict[str, Any]:
    return {"error_code": error, "session_id": session_id, "responses": [
        {"name": "t", "partitions": [{"partition_index": p} for p in partitions]}]}


def sent(fields: dict[str, Any]) -> list[int]:
    return [p["partition"] for t in fields["topics"] for p in t["partitions"]]


def test_full_then_incremental_with_changes_and_forgotten_partitions() -> None:
    h = FetchSessionHandler()
    full = h.build(want(p0=0, p1=0, p2=0))
    assert (full.session_id, full.session_epoch, sent(full.fields())) == (0, 0, [0, 1, 2])
    assert h.handle_response(full, answer(77, 0, 1, 2)) and (h.session_id, h.epoch) == (77, 1)
    inc = h.build(want(p0=5, p1=0, p3=0))  # 0 moved, 2 dropped, 3 added
    assert (inc.session_id, inc.session_epoch, sent(inc.fields())) == (77, 1, [0, 3])
    assert inc.forgotten_topics_data == [{"name": "t", "partitions": [2]}]
    assert h.handle_response(inc, answer(77, 3)) and h.epoch == 2
    quiet = h.build(want(p0=5, p1=0, p3=0))
    assert sent(quiet.fields()) == [] and quiet.forgotten_topics_data == []
    # a partition outside the session in the answer: not usable, close and start over
    assert not h.handle_response(quiet, answer(77, 9))
    again = h.build(want(p0=5, p1=0, p3=0))
    assert (again.session_id, again.session_epoch, sent(again.fields())) == (77, 0, [0, 1, 3])


def test_session_errors_and_lost_connections_make_the_next_fetch_full() -> None:
    h = FetchSessionHandler()
    h.handle_response(h.build(want(p0=0)), answer(5, 0))
    inc = h.build(want(p0=0))
    assert not h.handle_response(inc, answer(0, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
    assert (h.session_id, h.epoch) == (0, 0)  # a new session
    h.handle_response(h.build(want(p0=0)), answer(6, 0))
    inc = h.build(want(p0=0))
    assert not h.handle_response(inc, answer(6, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH))
    assert (h.session_id, h.epoch) == (6, 0)  # close 6, open a new one
    h.handle_response(h.build(want(p0=0)), answer(8, 0))
    h.handle_error()
    assert (h.session_id, h.epoch) == (8, 0)
    # a full answer without a session (the cache was full): full again next time
    h.handle_response(h.build(want(p0=0)), answer(0, 0))
    assert (h.session_id, h.epoch) == (0, 0)
    # a full answer that leaves a partition out is refused
    assert not h.handle_response(h.build(want(p0=0, p1=0)), answer(9, 0))
    off = FetchSessionHandler(enabled=False)
    assert off.build(want(p0=0)).session_epoch == -1
