"""Time sources for the timer: a ``Clock`` protocol and two implementations.

Every timer component asks an injected clock for the time instead of calling
``time.monotonic`` itself, so tests drive time by hand (``ManualClock``) and never sleep.

Units: integer milliseconds.  Times only move forward: ``ManualClock.set`` to an earlier
time is an error, because a timing wheel cannot run backwards.

Costs: ``now_ms`` is O(1) (one attribute read, or one ``time.monotonic_ns`` call).

Thread-safety: ``MonotonicClock`` is stateless.  ``ManualClock`` stores one int; reads
from any thread are safe, and it is meant to be moved by one test thread at a time.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Anything that tells the current time in whole milliseconds, never decreasing."""

    def now_ms(self) -> int: ...


class MonotonicClock:
    """Wall-clock-independent time from ``time.monotonic_ns``, truncated to milliseconds."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


def _check_ms(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int number of milliseconds, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


class ManualClock:
    """A clock that moves only when told to: ``advance(ms)`` or ``set(ms)``."""

    __slots__ = ("_now_ms",)

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = _check_ms("start_ms", start_ms)

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> int:
        """Move time forward by ``ms`` (>= 0); returns the new time."""
        self._now_ms += _check_ms("ms", ms)
        return self._now_ms

    def set(self, ms: int) -> None:
        """Jump to absolute time ``ms``; moving backwards raises ValueError."""
        target = _check_ms("ms", ms)
        if target < self._now_ms:
            raise ValueError(
                f"ManualClock cannot move backwards: now {self._now_ms} ms, asked for {target} ms"
            )
        self._now_ms = target

    def __repr__(self) -> str:
        return f"ManualClock(now_ms={self._now_ms})"
