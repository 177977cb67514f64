"""Shared test doubles for the timer tests."""

from __future__ import annotations

import threading

from timer.clock import ManualClock
from timer.delayed_operation import DelayedOperation
from timer.timing_wheel import TimerTask


class RecordingTask(TimerTask):
    """Records the clock's time each time it runs."""

    __slots__ = ("clock", "fired_at", "label", "log")

    def __init__(
        self, delay_ms: int, clock: ManualClock, label: object = None, log: list | None = None
    ) -> None:
        super().__init__(delay_ms)
        self.clock = clock
        self.label = label
        self.log = log
        self.fired_at: list[int] = []

    def run(self) -> None:
        self.fired_at.append(self.clock.now_ms())
        if self.log is not None:
            self.log.append(self)


class CountingOp(DelayedOperation):
    """Completes when ``ready`` is set; counts every callback (thread-safe counters)."""

    __slots__ = ("_counts_lock", "completions", "expirations", "ready", "tries")

    def __init__(self, delay_ms: int, ready: bool = False) -> None:
        super().__init__(delay_ms)
        self.ready = ready
        self.tries = 0
        self.completions = 0
        self.expirations = 0
        self._counts_lock = threading.Lock()

    def try_complete(self) -> bool:
        self.tries += 1
        if self.ready:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        with self._counts_lock:
            self.completions += 1

    def on_expiration(self) -> None:
        with self._counts_lock:
            self.expirations += 1
