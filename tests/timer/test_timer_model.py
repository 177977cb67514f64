"""Property test: the timing wheel against a sorted-list reference timer."""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.timer.helpers import RecordingTask
from timer.clock import ManualClock
from timer.system_timer import SystemTimer


class SortedListTimer:
    """Reference: a sorted list of (expiration, id); fires everything <= now."""

    def __init__(self, tick_ms: int) -> None:
        self.tick_ms = tick_ms
        self.entries: list[tuple[int, int]] = []

    def add(self, now_ms: int, delay_ms: int, task_id: int) -> None:
        exp = now_ms + delay_ms
        if delay_ms:
            exp = -(-exp // self.tick_ms) * self.tick_ms
        bisect.insort(self.entries, (exp, task_id))

    def cancel(self, task_id: int) -> None:
        self.entries = [e for e in self.entries if e[1] != task_id]

    def advance(self, now_ms: int) -> list[tuple[int, int]]:
        cut = bisect.bisect_right(self.entries, (now_ms, float("inf")))
        fired, self.entries = self.entries[:cut], self.entries[cut:]
        return fired


delays = st.one_of(
    st.integers(0, 30),
    st.integers(0, 2_000),
    st.integers(0, 200_000),
)
Op = tuple[str, int] | tuple[str, list[int]]
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), delays),
        st.tuples(st.just("add_many"), st.lists(st.integers(0, 40), min_size=2, max_size=8)),
        st.tuples(st.just("cancel"), st.integers(0, 10_000)),
        st.tuples(st.just("advance"), st.one_of(st.integers(0, 5), st.integers(0, 50_000))),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(
    ops=operations,
    tick_ms=st.sampled_from([1, 1, 3]),
    wheel_size=st.sampled_from([2, 3, 20]),
    start_ms=st.integers(0, 10_000),
)
def test_wheel_matches_sorted_list_reference(
    ops: list[Op], tick_ms: int, wheel_size: int, start_ms: int
) -> None:
    clock = ManualClock(start_ms)
    timer = SystemTimer(clock, tick_ms=tick_ms, wheel_size=wheel_size)
    model = SortedListTimer(tick_ms)
    tasks: list[RecordingTask] = []
    log: list[RecordingTask] = []
    for kind, arg in ops:
        now = clock.now_ms()
        if kind in ("add", "add_many"):
            for delay in arg if isinstance(arg, list) else [arg]:
                task = RecordingTask(delay, clock, label=len(tasks), log=log)
                tasks.append(task)
                model.add(now, delay, len(tasks) - 1)
                if not timer.add(task):  # already due: ran at once; the model fires it now
                    assert model.advance(now) == [(now, task.label)]
        elif kind == "cancel" and tasks:
            assert isinstance(arg, int)
            task = tasks[arg % len(tasks)]
            task.cancel()
            model.cancel(task.label)  # type: ignore[arg-type]
        elif kind == "advance":
            assert isinstance(arg, int)
            clock.advance(arg)
            now = clock.now_ms()
            log.clear()
            timer.advance_clock()
            fired_now = [(t.expiration_ms, t.label) for t in log]
            expected = model.advance(now)
            assert sorted(fired_now) == expected
            # fired in expiration order, every one on or after its expiration
            assert [e for e, _ in fired_now] == [e for e, _ in expected]
        timer.check_invariants()
        assert timer.size == len(model.entries)
    # drain: everything left fires exactly at its expiration
    clock.advance(10**7)
    timer.advance_clock()
    for exp, label in model.advance(clock.now_ms()):
        assert tasks[label].fired_at[-1] == clock.now_ms() and tasks[label].expiration_ms == exp
    for task in tasks:
        assert len(task.fired_at) <= 1
    assert timer.size == 0
