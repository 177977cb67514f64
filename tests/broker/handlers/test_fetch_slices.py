"""broker.handlers.fetch.run_in_slices: one slice per event-loop turn, and a finished run
leaves nothing behind for the cyclic collector (it was a self-scheduling closure: a
reference cycle holding the whole fetch until the collector ran)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Generator, Iterator

import pytest

from broker.handlers.fetch import FetchResult, run_in_slices


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _slices(count: int, trace: list[str]) -> Generator[None, None, FetchResult]:
    for i in range(count):
        trace.append(f"slice {i}")
        if i < count - 1:
            yield
    return {"responses": []}, 7, False  # type: ignore[typeddict-item]


def test_each_slice_runs_in_its_own_loop_turn_and_the_run_is_freed_at_its_end(
        no_cyclic_gc: None) -> None:
    trace: list[str] = []
    results: list[FetchResult] = []

    async def main() -> weakref.ref[Generator[None, None, FetchResult]]:
        steps = _slices(3, trace)
        gone = weakref.ref(steps)
        run_in_slices(steps, results.append, lambda: trace.append("failed"))
        del steps
        assert trace == ["slice 0"] and not results  # the rest in later turns
        await asyncio.sleep(0)
        assert trace == ["slice 0", "slice 1"]
        await asyncio.sleep(0)
        assert trace == ["slice 0", "slice 1", "slice 2"]
        return gone

    gone = asyncio.run(main())
    assert [r[1] for r in results] == [7]
    assert gone() is None  # freed by reference counting: no cycle kept it


def test_a_single_slice_answers_at_once_without_a_loop() -> None:
    trace: list[str] = []
    results: list[FetchResult] = []
    run_in_slices(_slices(1, trace), results.append, lambda: trace.append("failed"))
    assert trace == ["slice 0"] and [r[1] for r in results] == [7]


def test_a_later_slice_that_fails_answers_with_fail() -> None:
    answers: list[str] = []

    def broken() -> Generator[None, None, FetchResult]:
        yield
        raise OSError("disk gone")

    async def main() -> None:
        run_in_slices(broken(), lambda r: answers.append("done"), lambda: answers.append("fail"))
        await asyncio.sleep(0)

    asyncio.run(main())
    assert answers == ["fail"]
