"""RequestLanes: Produce after Produce overlaps, everything else keeps Kafka's one at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.network.channel.answer_order import AnswerOrder
from broker.network.channel.codec import NO_RESPONSE
from broker.requests.pipeline import RequestLanes
from clients.protocol.api_keys import ApiKey


class _Endpoint:
    def __init__(self) -> None:
        self.index = 0
        self.posted: list[tuple] = []
        self.answers = AnswerOrder(lambda m: self.posted.append(m) is None, lambda h: None)


class _Frame:
    def __init__(self, api: ApiKey, name: str) -> None:
        self.memory = memoryview(int(api).to_bytes(2, "big") + name.encode())
        self.name = name


class _Pool:
    """Handles are the frames themselves."""

    def __init__(self) -> None:
        self.freed: list[str] = []

    def attach_buffer(self, handle: _Frame) -> _Frame:
        return handle

    def deallocate(self, buffer: _Frame) -> None:
        self.freed.append(buffer.name)


class _Broker:
    """Dispatches requests: records the order they start in, keeps the frames it is told
    to (as a Produce checked off the loop does)."""

    def __init__(self, keep: frozenset[str] = frozenset()) -> None:
        self.started: list[str] = []
        self.tickets: dict[str, int] = {}
        self.done: dict[str, Callable[[], None]] = {}
        self.keep = keep

    def dispatch(self, endpoint: Any, conn_id: int, frame: memoryview,
                 keep_frame: Callable[[], Callable[[], None]], ticket: int) -> None:
        name = bytes(frame[2:]).decode()
        self.started.append(name)
        self.tickets[name] = ticket
        if name in self.keep:
            self.done[name] = keep_frame()


def _answer(endpoint: _Endpoint, lanes: RequestLanes, broker: _Broker, name: str) -> None:
    endpoint.answers.answer(1, broker.tickets[name], (NO_RESPONSE, 1, name))
    lanes.answered(endpoint, 1)  # type: ignore[arg-type]  # MainChannelEndpoint.on_answered


def _setup(keep: frozenset[str] = frozenset()) -> tuple[_Endpoint, RequestLanes, _Broker, _Pool]:
    endpoint, broker, pool = _Endpoint(), _Broker(keep), _Pool()
    return endpoint, RequestLanes(pool, broker.dispatch), broker, pool  # type: ignore[arg-type]


def _admit(lanes: RequestLanes, endpoint: _Endpoint, conn_id: int, api: ApiKey,
           name: str) -> None:
    frame = _Frame(api, name)
    lanes.admit(endpoint, conn_id, frame, len(frame.memory))  # type: ignore[arg-type]


def test_produce_after_produce_starts_before_the_first_is_answered() -> None:
    endpoint, lanes, broker, _pool = _setup()
    for name in ("p1", "p2", "p3"):
        _admit(lanes, endpoint, 1, ApiKey.PRODUCE, name)
    assert broker.started == ["p1", "p2", "p3"]  # all waiting for followers at once
    _answer(endpoint, lanes, broker, "p3")
    _answer(endpoint, lanes, broker, "p2")
    assert endpoint.posted == []  # p1 first
    _answer(endpoint, lanes, broker, "p1")
    assert [m[2] for m in endpoint.posted] == ["p1", "p2", "p3"]
    assert len(lanes) == 0


def test_other_apis_wait_for_every_earlier_answer_and_block_later_produces() -> None:
    endpoint, lanes, broker, _pool = _setup()
    _admit(lanes, endpoint, 1, ApiKey.PRODUCE, "p1")
    _admit(lanes, endpoint, 1, ApiKey.METADATA, "m")
    _admit(lanes, endpoint, 1, ApiKey.PRODUCE, "p2")
    assert broker.started == ["p1"]
    _answer(endpoint, lanes, broker, "p1")
    assert broker.started == ["p1", "m"]  # p2 waits behind the Metadata, in order
    _answer(endpoint, lanes, broker, "m")
    assert broker.started == ["p1", "m", "p2"]


def test_a_produce_after_a_non_produce_waits() -> None:
    endpoint, lanes, broker, _pool = _setup()
    _admit(lanes, endpoint, 1, ApiKey.JOIN_GROUP, "j")
    _admit(lanes, endpoint, 1, ApiKey.PRODUCE, "p")
    assert broker.started == ["j"]
    _answer(endpoint, lanes, broker, "j")
    assert broker.started == ["j", "p"]


def test_a_kept_frame_holds_the_next_produce_until_it_is_appended() -> None:
    endpoint, lanes, broker, pool = _setup(frozenset({"p1"}))
    _admit(lanes, endpoint, 1, ApiKey.PRODUCE, "p1")
    _admit(lanes, endpoint, 1, ApiKey.PRODUCE, "p2")
    assert broker.started == ["p1"]  # p1's records are checked off the loop
    assert "p1" not in pool.freed
    broker.done["p1"]()  # appended, frame freed; its answer still waits for followers
    assert broker.started == ["p1", "p2"]


def test_connections_do_not_wait_for_each_other_and_closing_frees_waiting_frames() -> None:
    endpoint, lanes, broker, pool = _setup()
    _admit(lanes, endpoint, 1, ApiKey.METADATA, "a")
    _admit(lanes, endpoint, 1, ApiKey.METADATA, "b")
    _admit(lanes, endpoint, 2, ApiKey.METADATA, "c")
    assert broker.started == ["a", "c"]
    assert pool.freed == ["a", "c"]  # frames are freed once dispatched (not kept)
    lanes.closed(0, 1)
    assert pool.freed == ["a", "c", "b"]  # the waiting frame given back


def test_a_kept_frame_finishing_after_its_connection_closed_does_not_touch_a_new_one() -> None:
    endpoint, lanes, broker, pool = _setup(frozenset({"old"}))
    _admit(lanes, endpoint, 1, ApiKey.PRODUCE, "old")
    lanes.closed(0, 1)  # e.g. its network process died; the id comes back for a new one
    endpoint.answers.forget(1)
    _admit(lanes, endpoint, 1, ApiKey.METADATA, "new")
    _admit(lanes, endpoint, 1, ApiKey.METADATA, "next")
    assert broker.started == ["old", "new"]  # "next" waits for "new"'s answer
    broker.done["old"]()  # the old frame freed late: the new lane's count stays right
    assert "old" in pool.freed
    _answer(endpoint, lanes, broker, "new")
    assert broker.started == ["old", "new", "next"]
