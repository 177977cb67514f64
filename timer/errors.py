"""Exceptions raised by the timer package.

``timer`` is a leaf package (it imports nothing from ``clients``), so it carries its own
small exception hierarchy; callers that speak Kafka error codes map these at their edge
(a timer that is full or shut down is a broker-side condition, not a wire error).
"""

from __future__ import annotations


class TimerError(Exception):
    """Base class of every timer-package error."""


class TimerShutdownError(TimerError):
    """The timer, driver or purgatory was shut down; it accepts no new work."""


class TimerFullError(TimerError):
    """Adding a task would exceed the timer's configured ``max_tasks`` bound."""


class TimerQueueFullError(TimerError):
    """A driver's bounded command queue stayed full for longer than ``max_block_ms``."""


class TimerInvariantError(TimerError):
    """A ``check_invariants`` method found the timer's internal structure inconsistent."""
