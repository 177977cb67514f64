"""Drivers: asyncio and thread.  Waits are bounded polls of a condition, never sleeps."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from tests.timer.helpers import CountingOp
from timer.clock import ManualClock, MonotonicClock
from timer.drivers import AsyncioTimerDriver, ThreadTimerDriver
from timer.errors import TimerQueueFullError, TimerShutdownError
from timer.purgatory import Purgatory
from timer.system_timer import SystemTimer
from timer.timing_wheel import CallableTask

DEADLINE_S = 10.0


@pytest.fixture
def manual_driver() -> Iterator[tuple[ManualClock, ThreadTimerDriver]]:
    clock = ManualClock()
    driver = ThreadTimerDriver(SystemTimer(clock), name="test-timer")
    try:
        yield clock, driver
    finally:
        driver.shutdown()


def test_asyncio_driver_fires_in_order_and_rearms_for_earlier_tasks() -> None:
    async def scenario() -> list[str]:
        timer = SystemTimer(MonotonicClock())
        driver = AsyncioTimerDriver(timer)
        fired: list[str] = []
        done = asyncio.Event()
        try:
            driver.add(CallableTask(40, lambda: fired.append("late")))
            driver.add(CallableTask(5, lambda: fired.append("early")))  # re-arms earlier
            driver.add(CallableTask(0, lambda: fired.append("now")))  # due: runs inline
            cancelled = CallableTask(10, lambda: fired.append("cancelled"))
            driver.add(cancelled)
            cancelled.cancel()
            driver.add(CallableTask(60, done.set))
            await asyncio.wait_for(done.wait(), DEADLINE_S)
            assert driver.size == 0
            return fired
        finally:
            driver.shutdown()

    assert asyncio.run(scenario()) == ["now", "early", "late"]


def test_asyncio_driver_runs_purgatory_expirations() -> None:
    class SignallingOp(CountingOp):
        __slots__ = ("done",)

        def __init__(self, delay_ms: int) -> None:
            super().__init__(delay_ms)
            self.done = asyncio.Event()

        def on_expiration(self) -> None:
            super().on_expiration()
            self.done.set()

    async def scenario() -> CountingOp:
        driver = AsyncioTimerDriver(SystemTimer(MonotonicClock()))
        purgatory: Purgatory[CountingOp] = Purgatory("fetch", driver)
        try:
            op = SignallingOp(5)
            assert purgatory.try_complete_else_watch(op, ["t-0"]) is False
            assert purgatory.delayed == 1
            await asyncio.wait_for(op.done.wait(), DEADLINE_S)
            return op
        finally:
            driver.shutdown()

    op = asyncio.run(scenario())
    assert (op.completions, op.expirations) == (1, 1)


def test_thread_driver_with_manual_clock(
    manual_driver: tuple[ManualClock, ThreadTimerDriver],
) -> None:
    clock, driver = manual_driver
    fired = threading.Event()
    seen: list[str] = []

    def on_fire() -> None:
        seen.append(threading.current_thread().name)
        fired.set()

    driver.add(CallableTask(50, on_fire))
    assert driver.submit(lambda: driver.timer.size).result(DEADLINE_S) == 1
    clock.advance(49)
    driver.wakeup()
    driver.submit(lambda: None).result(DEADLINE_S)  # the driver has processed the wakeup
    assert not fired.is_set()
    clock.advance(1)
    driver.wakeup()
    assert fired.wait(DEADLINE_S)
    assert seen == ["test-timer"]  # tasks run on the driver thread


def test_thread_driver_submit_propagates_errors_and_bounds_its_queue() -> None:
    driver = ThreadTimerDriver(SystemTimer(ManualClock()), max_pending=1, max_block_ms=0)
    release = threading.Event()
    try:
        with pytest.raises(ZeroDivisionError):
            driver.submit(lambda: 1 // 0).result(DEADLINE_S)
        blocked = driver.submit(release.wait, DEADLINE_S)  # occupies the thread
        # the thread takes at most one more command, so the single slot fills at once
        with pytest.raises(TimerQueueFullError, match="queue full"):
            for _ in range(3):
                driver.submit(lambda: None)
        release.set()
        assert blocked.result(DEADLINE_S) is True
    finally:
        release.set()
        driver.shutdown()
    with pytest.raises(TimerShutdownError):
        driver.add(CallableTask(1, lambda: None))
    assert not driver.thread.is_alive()


def test_on_complete_runs_once_under_racing_completion_and_expiration(
    manual_driver: tuple[ManualClock, ThreadTimerDriver],
) -> None:
    """Real threads race force_complete against the driver thread's expiration."""
    clock, driver = manual_driver
    rounds, ops_per_round, completers = 20, 50, 3
    for _ in range(rounds):
        ops = [CountingOp(10) for _ in range(ops_per_round)]
        for op in ops:
            driver.add(op)
        driver.submit(lambda: None).result(DEADLINE_S)  # all added
        wins = [[0] * ops_per_round for _ in range(completers)]
        barrier = threading.Barrier(completers + 1, timeout=DEADLINE_S)
        threads = [
            threading.Thread(target=_complete_all, args=(barrier, ops, wins[i], i % 2 == 1))
            for i in range(completers)
        ]
        for thread in threads:
            thread.start()
        try:
            barrier.wait()
            clock.advance(10)  # every op is now due on the driver thread
            driver.wakeup()
        finally:
            for thread in threads:
                thread.join(DEADLINE_S)
        assert not any(thread.is_alive() for thread in threads)
        driver.submit(driver.timer.advance_clock).result(DEADLINE_S)
        for i, op in enumerate(ops):
            by_threads = sum(w[i] for w in wins)
            assert op.completions == 1, "on_complete must run exactly once"
            assert by_threads + op.expirations == 1, "exactly one completer wins"
        assert driver.submit(lambda: driver.timer.size).result(DEADLINE_S) == 0
        driver.submit(driver.timer.check_invariants).result(DEADLINE_S)


def _complete_all(
    barrier: threading.Barrier, ops: list[CountingOp], wins: list[int], reverse: bool
) -> None:
    barrier.wait()
    indexes = range(len(ops) - 1, -1, -1) if reverse else range(len(ops))
    for i in indexes:
        if ops[i].force_complete():
            wins[i] += 1


def test_cross_thread_cancel_is_deferred_to_the_owner(
    manual_driver: tuple[ManualClock, ThreadTimerDriver],
) -> None:
    clock, driver = manual_driver
    ran = threading.Event()
    task = CallableTask(100, ran.set)
    driver.add(task)
    driver.submit(lambda: None).result(DEADLINE_S)
    task.cancel()  # from this (non-owner) thread: flagged now, unlinked by the owner later
    assert task.is_cancelled
    clock.advance(100)
    driver.submit(driver.timer.advance_clock).result(DEADLINE_S)
    assert not ran.is_set()
    assert driver.submit(lambda: driver.timer.size).result(DEADLINE_S) == 0
