"""A Produce's record checks: on the loop while small, on the record-check thread beyond
(broker/handlers/record_checks.py), with the request's budget from the broker's config.

The handler runs on a real asyncio loop here (the thread hands its outcomes back with
``call_soon_threadsafe``); tests wait for the answer with a deadline, never a sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.handlers.common import RequestContext
from broker.handlers.produce import handle_produce
from broker.handlers.record_checks import RecordCheckThread, run_checks
from clients.protocol.errors import ErrorCode, InvalidConfigError
from clients.protocol.topics import TopicPartition
from clients.records.compression import ZSTD
from clients.records.record import build_batch
from storage.log.validator import CheckBudget, LeaderCheck
from tests.broker.handlers.wire import CoreHarness, core_at

NOW = 1_000_000  # the harness's clock (ms): records stamped with it are in the window


@pytest.fixture
def h(tmp_path: Path) -> Iterator[CoreHarness]:
    with core_at(tmp_path / "b0") as harness:
        harness.create("t", 2)
        harness.create("c", 1, cleanup_policy="compact")
        yield harness


def body(*entries: tuple[str, int, bytes], acks: int = 1) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, index, records in entries:
        topics.setdefault(name, []).append({"index": index, "records": records})
    return {"transactional_id": None, "acks": acks, "timeout_ms": 1000,
            "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}


def end_offset(h: CoreHarness, topic: str, index: int) -> int:
    return h.core.partitions[TopicPartition(topic, index)].log.log_end_offset


def codes(answer: dict[str, Any]) -> list[int]:
    return [p["error_code"] for t in answer["responses"] for p in t["partition_responses"]]


def produce_on_a_loop(h: CoreHarness, request: dict[str, Any], inline_bytes: int
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the handler on a loop with a record-check thread; (answer, what happened)."""
    seen: dict[str, Any] = {"kept": 0, "released": 0}

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        thread = RecordCheckThread(inline_bytes)
        thread.start(loop)
        answered: asyncio.Future[dict[str, Any]] = loop.create_future()

        def keep_frame() -> Any:
            seen["kept"] += 1
            return lambda: seen.__setitem__("released", seen["released"] + 1)

        try:
            handle_produce(h.core, request, answered.set_result, RequestContext(
                9, record_checks=thread, keep_frame=keep_frame))
            seen["answered_in_handler"] = answered.done()
            answer = await asyncio.wait_for(answered, 60)
            seen["on_thread"] = thread.checks_run
            return answer
        finally:
            thread.stop()

    return asyncio.run(main()), seen


def test_a_small_produce_is_checked_and_answered_in_the_handler(h: CoreHarness) -> None:
    batch = build_batch([(b"k", b"v" * 100, NOW, [])] * 10)
    answer, seen = produce_on_a_loop(h, body(("t", 0, batch), ("t", 1, batch)), 64 << 10)
    assert codes(answer) == [0, 0]
    assert seen == {"kept": 0, "released": 0, "answered_in_handler": True, "on_thread": 0}


def test_a_large_produce_finishes_on_the_thread_then_appends_and_answers(
        h: CoreHarness) -> None:
    small = build_batch([(b"k", b"v" * 100, NOW, [])] * 10)
    large = build_batch([(b"k", b"%d" % i, NOW, [("h", b"x")]) for i in range(20_000)],
                        compression=ZSTD)
    keyless = build_batch([(None, b"v", NOW, [])] * 3)
    answer, seen = produce_on_a_loop(
        h, body(("t", 0, small), ("t", 1, large), ("c", 0, keyless)), 64 << 10)
    assert seen == {"kept": 1, "released": 1, "answered_in_handler": False, "on_thread": 1}
    assert codes(answer) == [0, 0, ErrorCode.INVALID_RECORD]
    assert "cannot accept a record without a key" in answer["responses"][1][
        "partition_responses"][0]["error_message"]
    assert end_offset(h, "t", 0) == 10 and end_offset(h, "t", 1) == 20_000
    assert end_offset(h, "c", 0) == 0


def test_acks_0_is_unmuted_only_after_the_thread(h: CoreHarness) -> None:
    large = build_batch([(b"k", b"%d" % i, NOW, []) for i in range(20_000)], compression=ZSTD)
    answers: list[Any] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        thread = RecordCheckThread(0)  # 0: every check off the loop
        thread.start(loop)
        done = asyncio.Event()

        def respond(answer: Any) -> None:
            answers.append(answer)
            done.set()

        try:
            handle_produce(h.core, body(("t", 0, large), acks=0), respond,
                           RequestContext(9, record_checks=thread))
            assert answers == []
            await asyncio.wait_for(done.wait(), 60)
        finally:
            thread.stop()

    asyncio.run(main())
    assert answers == [None]  # no response, sent once the append is done
    assert end_offset(h, "t", 0) == 20_000


def test_run_checks_stops_at_the_loop_share_and_the_rest_resumes_whole() -> None:
    check = LeaderCheck(1 << 20)
    small = build_batch([(None, b"v" * 100, 5, [])] * 10)
    large = build_batch([(None, b"v" * 100, 5, [])] * 1000)
    jobs = [(check, small), (None, small), (check, large), (check, small)]
    budget = CheckBudget(records=10_000, decompressed_bytes=1 << 30, inline_bytes=64 << 10)
    outcomes: list[Any] = []
    assert not run_checks(jobs, budget, outcomes)
    assert len(outcomes) == 2 and outcomes[1] is None and budget.records == 10_000 - 10
    budget.inline_bytes = None
    assert run_checks(jobs, budget, outcomes)
    assert [len(o) for o in outcomes if o is not None] == [1, 1, 1]
    assert budget.records == 10_000 - 1020  # the deferred job charged once


def test_the_request_budget_comes_from_the_config(tmp_path: Path) -> None:
    with core_at(tmp_path / "b1", max_produce_records=100, max_batch_records=50) as tight:
        tight.create("t", 2)
        batch = build_batch([(None, b"v", NOW, [])] * 40)
        over = build_batch([(None, b"v", NOW, [])] * 51)
        answer, _ = produce_on_a_loop(tight, body(("t", 0, batch + batch), ("t", 1, batch),
                                                  ("t", 1, over)), 64 << 10)
        responses = answer["responses"][0]["partition_responses"]
        assert codes(answer) == [0, ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.MESSAGE_TOO_LARGE]
        assert "left of this request's max_produce_records" in responses[1]["error_message"]
        assert "above max_batch_records 50" in responses[2]["error_message"]


@pytest.mark.parametrize("overrides, message", [
    ({"max_batch_records": 0}, "max_batch_records must be positive"),
    ({"max_produce_records": 10, "max_batch_records": 11}, "must not exceed"),
    ({"max_batch_decompressed_bytes": 2 << 20, "max_produce_decompressed_bytes": 1 << 20},
     "must not exceed"),
    ({"record_check_inline_bytes": -1}, "record_check_inline_bytes must be >= 0"),
])
def test_the_bounds_are_validated(overrides: dict[str, int], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig().with_overrides(overrides)


def test_a_failure_after_the_thread_still_answers_and_frees_the_frame(
        h: CoreHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> list[Any]:
        raise RuntimeError("a bug")

    monkeypatch.setattr("broker.handlers.produce._node_endpoints", broken)
    large = build_batch([(b"k", b"%d" % i, NOW, []) for i in range(20_000)], compression=ZSTD)
    answer, seen = produce_on_a_loop(h, body(("t", 0, large)), 0)
    assert codes(answer) == [ErrorCode.UNKNOWN_SERVER_ERROR]
    assert seen["kept"] == seen["released"] == 1
