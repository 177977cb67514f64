"""SystemTimer and TimingWheel driven by a ManualClock: no sleeps anywhere."""

from __future__ import annotations

import pytest

from tests.timer.helpers import RecordingTask
from timer.clock import ManualClock
from timer.errors import TimerFullError, TimerShutdownError
from timer.system_timer import SystemTimer
from timer.timing_wheel import MAX_DELAY_MS, CallableTask


def step_through(timer: SystemTimer, clock: ManualClock, until_ms: int) -> None:
    """Advance one millisecond at a time (the worst case for lateness), checking
    invariants as we go."""
    while clock.now_ms() < until_ms:
        clock.advance(1)
        timer.advance_clock()
    timer.check_invariants()


def jump_through(timer: SystemTimer, clock: ManualClock) -> None:
    """Advance straight to each next bucket, as a driver would."""
    while (next_ms := timer.next_expiration_ms()) is not None:
        clock.set(max(next_ms, clock.now_ms()))
        timer.advance_clock()
        timer.check_invariants()


@pytest.mark.parametrize("order", ["ascending", "descending", "interleaved"])
@pytest.mark.parametrize(("tick_ms", "wheel_size"), [(1, 20), (1, 3), (7, 4), (10, 20)])
def test_tasks_fire_in_their_bucket_never_early_at_most_one_tick_late(
    tick_ms: int, wheel_size: int, order: str
) -> None:
    clock = ManualClock(start_ms=13)
    timer = SystemTimer(clock, tick_ms=tick_ms, wheel_size=wheel_size)
    delays = list(range(1, 700, 3)) + list(range(1, 40))
    if order == "descending":
        delays.sort(reverse=True)
    elif order == "interleaved":
        delays.sort(key=lambda d: (d * 7_919) % 97)  # deterministic shuffle
    tasks = [RecordingTask(delay, clock) for delay in delays]
    for task in tasks:
        timer.add(task)
    timer.check_invariants()
    assert timer.size == len(tasks)
    step_through(timer, clock, 13 + 800)
    for task in tasks:
        deadline = 13 + task.delay_ms
        assert len(task.fired_at) == 1, task.delay_ms
        fired = task.fired_at[0]
        assert deadline <= fired < deadline + tick_ms, (task.delay_ms, fired)
        # "exactly in its bucket": the bucket of a rounded-up expiration starts there
        assert fired == task.expiration_ms
    assert timer.size == 0


def test_tick_one_fires_exactly_on_deadline_when_jumping_bucket_to_bucket() -> None:
    clock = ManualClock(start_ms=1_000)
    timer = SystemTimer(clock)
    tasks = [RecordingTask(delay, clock) for delay in (1, 2, 19, 20, 21, 399, 400, 401, 8_001)]
    for task in tasks:
        timer.add(task)
    jump_through(timer, clock)
    assert [t.fired_at for t in tasks] == [[1_000 + t.delay_ms] for t in tasks]


def test_hours_long_delays_pass_through_overflow_wheels_and_fire_on_time() -> None:
    clock = ManualClock()
    timer = SystemTimer(clock)  # 1 ms x 20: an hour needs 6 levels
    hour = 3_600_000
    tasks = [RecordingTask(d, clock) for d in (hour, 3 * hour + 17, 17 * hour + 1, 30 * hour)]
    for task in tasks:
        timer.add(task)
    assert len(list(timer._wheel.levels())) >= 6
    timer.check_invariants()
    # nothing fires a millisecond early
    for task in tasks:
        clock.set(task.delay_ms - 1)
        timer.advance_clock()
        assert task.fired_at == []
        clock.set(task.delay_ms)
        timer.advance_clock()
        assert task.fired_at == [task.delay_ms]
        timer.check_invariants()
    assert timer.size == 0


def test_clock_advance_moves_task_into_finer_wheel() -> None:
    clock = ManualClock()
    timer = SystemTimer(clock, tick_ms=1, wheel_size=20)
    task = RecordingTask(1_234, clock)
    timer.add(task)
    assert task._bucket is not None
    assert task._bucket.tick_ms == 400  # level 3 (1, 20, 400)
    clock.set(1_200)  # the 400 ms bucket [1200, 1600) expires
    timer.advance_clock()
    assert task.fired_at == []
    assert task._bucket is not None and task._bucket.tick_ms == 20
    clock.set(1_220)
    timer.advance_clock()
    assert task._bucket is not None and task._bucket.tick_ms == 1
    clock.set(1_234)
    timer.advance_clock()
    assert task.fired_at == [1_234]
    assert not task.is_scheduled


def test_cancel_before_expiry_prevents_firing_and_frees_the_slot() -> None:
    clock = ManualClock()
    timer = SystemTimer(clock)
    keep = [RecordingTask(d, clock) for d in (5, 50, 5_000)]
    drop = [RecordingTask(d, clock) for d in (5, 50, 5_000)]
    for task in keep + drop:
        timer.add(task)
    for task in drop:
        task.cancel()
        task.cancel()  # idempotent
    assert timer.size == 3
    timer.check_invariants()
    jump_through(timer, clock)
    assert [t.fired_at for t in keep] == [[5], [50], [5_000]]
    assert all(t.fired_at == [] for t in drop)


def test_emptied_bucket_does_not_wake_the_driver() -> None:
    clock = ManualClock()
    timer = SystemTimer(clock)
    early = RecordingTask(10, clock)
    late = RecordingTask(500, clock)
    timer.add(early)
    timer.add(late)
    assert timer.next_expiration_ms() == 10
    early.cancel()
    assert timer.next_expiration_ms() == 400  # the 400 ms-level bucket holding `late`
    late.cancel()
    assert timer.next_expiration_ms() is None
    timer.check_invariants()


def test_due_task_is_run_at_once_and_not_inserted() -> None:
    clock = ManualClock(start_ms=50)
    timer = SystemTimer(clock, tick_ms=10)
    task = RecordingTask(0, clock)
    assert timer.add(task) is False
    assert task.fired_at == [50]
    assert timer.size == 0
    later = RecordingTask(1, clock)
    assert timer.add(later) is True
    assert later.expiration_ms == 60  # rounded up to the tick: never early


def test_poll_due_returns_tasks_in_expiration_order_without_running_them() -> None:
    clock = ManualClock()
    timer = SystemTimer(clock)
    tasks = [RecordingTask(d, clock, label=d) for d in (300, 7, 45, 7, 1_000)]
    for task in tasks:
        timer.add(task)
    clock.set(400)
    due = timer.poll_due()
    assert [t.label for t in due if isinstance(t, RecordingTask)] == [7, 7, 45, 300]
    assert all(t.fired_at == [] for t in tasks)
    assert timer.size == 1
    due[1].cancel()
    assert timer.run_due(due) == 3


def test_readding_rules() -> None:
    clock = ManualClock()
    timer = SystemTimer(clock)
    task = RecordingTask(10, clock)
    timer.add(task)
    with pytest.raises(ValueError, match="already scheduled"):
        timer.add(task)
    task.cancel()
    assert task.is_cancelled
    timer.add(task)  # a cancelled task may be scheduled again
    assert not task.is_cancelled
    clock.set(10)
    timer.advance_clock()
    assert task.fired_at == [10]
    timer.add(task)  # and so may a finished one
    clock.set(20)
    timer.advance_clock()
    assert task.fired_at == [10, 20]


def test_bad_input_gets_precise_errors() -> None:
    clock = ManualClock()
    with pytest.raises(ValueError, match="delay_ms must be >= 0"):
        CallableTask(-1, lambda: None)
    with pytest.raises(TypeError, match="delay_ms must be an int"):
        CallableTask(1.5, lambda: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="delay_ms must be an int"):
        CallableTask(True, lambda: None)
    with pytest.raises(ValueError, match="delay_ms must be <="):
        CallableTask(MAX_DELAY_MS + 1, lambda: None)
    with pytest.raises(ValueError, match="tick_ms must be >= 1"):
        SystemTimer(clock, tick_ms=0)
    with pytest.raises(ValueError, match="wheel_size must be >= 2"):
        SystemTimer(clock, wheel_size=1)
    with pytest.raises(TypeError, match="max_tasks must be an int"):
        SystemTimer(clock, max_tasks=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_ms must be >= 0"):
        SystemTimer(clock).advance_clock(-5)
    with pytest.raises(ValueError, match="ahead of the clock"):
        SystemTimer(clock).poll_due(clock.now_ms() + 1)
    with pytest.raises(ValueError, match="cannot move backwards"):
        ManualClock(10).set(9)
    with pytest.raises(ValueError, match="ms must be >= 0"):
        ManualClock().advance(-1)


def test_max_tasks_bound_and_shutdown() -> None:
    clock = ManualClock()
    timer = SystemTimer(clock, max_tasks=2)
    timer.add(RecordingTask(5, clock))
    timer.add(RecordingTask(6, clock))
    with pytest.raises(TimerFullError, match="max_tasks=2"):
        timer.add(RecordingTask(7, clock))
    pending = RecordingTask(8, clock)
    timer.shutdown()
    assert timer.size == 0
    assert timer.next_expiration_ms() is None
    with pytest.raises(TimerShutdownError):
        timer.add(pending)
    clock.set(100)
    assert timer.advance_clock() is False


def test_failing_task_is_reported_and_others_still_run() -> None:
    clock = ManualClock()
    errors: list[tuple[object, Exception]] = []
    timer = SystemTimer(clock, on_task_error=lambda task, err: errors.append((task, err)))

    def boom() -> None:
        raise RuntimeError("boom")

    bad = CallableTask(5, boom)
    good = RecordingTask(5, clock)
    timer.add(bad)
    timer.add(good)
    clock.set(5)
    assert timer.advance_clock() is True
    assert good.fired_at == [5]
    assert len(errors) == 1 and errors[0][0] is bad and str(errors[0][1]) == "boom"


def test_advance_with_nothing_due_reports_false() -> None:
    clock = ManualClock()
    timer = SystemTimer(clock)
    timer.add(RecordingTask(100, clock))
    clock.set(99)
    assert timer.advance_clock(timeout_ms=1_000) is False  # never fires early
    clock.set(100)
    assert timer.advance_clock() is True
