"""DelayedOperation and Purgatory on a pure SystemTimer with a ManualClock."""

from __future__ import annotations

import pytest

from tests.timer.helpers import CountingOp
from timer.clock import ManualClock
from timer.errors import TimerShutdownError
from timer.purgatory import Purgatory
from timer.system_timer import SystemTimer


def make(purge_interval: int = 1000) -> tuple[ManualClock, SystemTimer, Purgatory[CountingOp]]:
    clock = ManualClock()
    timer = SystemTimer(clock)
    return clock, timer, Purgatory("produce", timer, purge_interval=purge_interval)


def test_force_complete_runs_on_complete_once_and_only_first_caller_wins() -> None:
    clock = ManualClock()
    timer = SystemTimer(clock)
    op = CountingOp(100)
    timer.add(op)
    assert op.force_complete() is True
    assert op.force_complete() is False
    assert op.completions == 1 and op.is_completed
    assert not op.is_scheduled and timer.size == 0  # its timer entry was cancelled
    clock.set(100)
    timer.advance_clock()
    assert op.completions == 1 and op.expirations == 0


def test_expiration_completes_then_reports_expiration() -> None:
    clock = ManualClock()
    timer = SystemTimer(clock)
    op = CountingOp(100)
    timer.add(op)
    clock.set(99)
    timer.advance_clock()
    assert not op.is_completed
    clock.set(100)
    timer.advance_clock()
    assert (op.completions, op.expirations) == (1, 1)
    assert op.force_complete() is False


def test_try_complete_else_watch_completes_immediately_when_ready() -> None:
    _, timer, purgatory = make()
    op = CountingOp(1_000, ready=True)
    assert purgatory.try_complete_else_watch(op, ["p0"]) is True
    assert op.completions == 1
    assert purgatory.watched == 0 and purgatory.delayed == 0 and timer.size == 0


def test_second_try_after_watching_catches_a_racing_event() -> None:
    _, _, purgatory = make()

    class ReadyOnSecondTry(CountingOp):
        __slots__ = ()

        def try_complete(self) -> bool:
            self.tries += 1
            return self.force_complete() if self.tries >= 2 else False

    op = ReadyOnSecondTry(1_000)
    assert purgatory.try_complete_else_watch(op, ["p0"]) is True
    assert op.tries == 2 and op.completions == 1
    assert purgatory.delayed == 0  # never reached the timer


def test_operation_completed_by_watch_key_leaves_wheel_and_watch_list() -> None:
    clock, timer, purgatory = make()
    ops = [CountingOp(1_000) for _ in range(5)]
    for op in ops:
        assert purgatory.try_complete_else_watch(op, ["p0"]) is False
    other = CountingOp(1_000)
    purgatory.try_complete_else_watch(other, ["p1"])
    assert purgatory.watched == 6 and purgatory.delayed == 6
    assert purgatory.check_and_complete("p0") == 0  # nothing ready yet
    for op in ops[:3]:
        op.ready = True
    assert purgatory.check_and_complete("p0") == 3
    assert purgatory.watched_for("p0") == 2 and purgatory.watched == 3
    assert timer.size == 3 and purgatory.delayed == 3
    assert all(not op.is_scheduled for op in ops[:3])
    timer.check_invariants()
    for op in ops[3:]:
        op.ready = True
    assert purgatory.check_and_complete("p0") == 2
    assert purgatory.watched_for("p0") == 0 and purgatory.num_keys == 1  # empty key removed
    assert purgatory.check_and_complete("unknown") == 0
    clock.set(1_000)
    timer.advance_clock()
    assert [op.completions for op in ops] == [1] * 5
    assert [op.expirations for op in ops] == [0] * 5
    assert (other.completions, other.expirations) == (1, 1)


def test_multi_key_operation_stays_listed_until_purge() -> None:
    _, timer, purgatory = make(purge_interval=1000)
    op = CountingOp(1_000)
    purgatory.try_complete_else_watch(op, ["a", "b", "a"])  # duplicate key ignored
    assert purgatory.watched == 2
    op.ready = True
    assert purgatory.check_and_complete("a") == 1
    assert purgatory.watched_for("b") == 1  # stale entry until purge
    assert purgatory.purge_completed() == 1
    assert purgatory.watched == 0 and purgatory.num_keys == 0 and timer.size == 0


def test_purge_triggers_after_purge_interval_completions_so_memory_stays_bounded() -> None:
    _, timer, purgatory = make(purge_interval=10)
    for i in range(1_000):
        op = CountingOp(60_000)
        purgatory.try_complete_else_watch(op, [("p", i % 7), "all"])
        op.force_complete()  # completed elsewhere: lists are not told
        assert purgatory.watched <= 2 * (10 + 2)
    assert timer.size == 0
    # a live operation is never purged
    live = CountingOp(60_000)
    purgatory.try_complete_else_watch(live, ["all"])
    purgatory.purge_completed()
    assert purgatory.watched == 1 and purgatory.watched_for("all") == 1


def test_expired_operations_are_purged_too() -> None:
    clock, timer, purgatory = make(purge_interval=5)
    for _ in range(20):
        purgatory.try_complete_else_watch(CountingOp(10), ["k"])
    clock.set(10)
    timer.advance_clock()
    assert timer.size == 0 and purgatory.watched == 20
    purgatory.try_complete_else_watch(CountingOp(10), ["k"])  # next add notices and purges
    assert purgatory.watched == 1


def test_cancel_for_key_removes_timer_entries_without_completing() -> None:
    clock, timer, purgatory = make()
    ops = [CountingOp(100) for _ in range(3)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["group-1"])
    ops[0].force_complete()
    cancelled = purgatory.cancel_for_key("group-1")
    assert cancelled == ops[1:]
    assert timer.size == 0 and purgatory.watched == 0
    clock.set(100)
    timer.advance_clock()
    assert [op.completions for op in ops] == [1, 0, 0]
    assert purgatory.cancel_for_key("group-1") == []


def test_reentrant_watch_during_check_is_kept() -> None:
    _, _, purgatory = make()
    follow_ups: list[CountingOp] = []

    class Chained(CountingOp):
        __slots__ = ()

        def on_complete(self) -> None:
            super().on_complete()
            nxt = CountingOp(1_000)
            follow_ups.append(nxt)
            purgatory.try_complete_else_watch(nxt, ["k"])

    first = Chained(1_000)
    purgatory.try_complete_else_watch(first, ["k"])
    first.ready = True
    assert purgatory.check_and_complete("k") == 1
    assert purgatory.watched_for("k") == 1 and purgatory.watched == 1
    assert follow_ups[0].tries == 2  # tried by its own watch, not by the running check


def test_exception_in_try_complete_keeps_the_watch_list() -> None:
    _, _, purgatory = make()

    class Flaky(CountingOp):
        __slots__ = ()

        def try_complete(self) -> bool:
            if self.ready:
                raise RuntimeError("broken condition")
            return False

    ops = [CountingOp(1_000), Flaky(1_000), CountingOp(1_000)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["k"])
    ops[1].ready = True
    with pytest.raises(RuntimeError, match="broken condition"):
        purgatory.check_and_complete("k")
    assert purgatory.watched_for("k") == 3 and purgatory.watched == 3


def test_bad_input_and_shutdown() -> None:
    clock, timer, purgatory = make()
    with pytest.raises(ValueError, match="watch_keys must not be empty"):
        purgatory.try_complete_else_watch(CountingOp(10), [])
    done = CountingOp(10)
    done.force_complete()
    with pytest.raises(ValueError, match="already completed"):
        purgatory.try_complete_else_watch(done, ["k"])
    with pytest.raises(ValueError, match="purge_interval must be >= 1"):
        Purgatory("x", timer, purge_interval=0)
    parked = CountingOp(10)
    purgatory.try_complete_else_watch(parked, iter(["k"]))
    purgatory.shutdown()
    assert timer.size == 0 and purgatory.watched == 0
    clock.set(10)
    timer.advance_clock()
    assert parked.completions == 0
    with pytest.raises(TimerShutdownError, match="produce"):
        purgatory.try_complete_else_watch(CountingOp(10), ["k"])
