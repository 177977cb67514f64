"""minikafka timer package: hierarchical timing wheel, delayed operations, purgatory.

A leaf package: it imports nothing from ``broker``, ``replication``, ``storage`` or
``clients``.  The core (``SystemTimer``) is pure and single-threaded; time comes from an
injected ``Clock``; ``AsyncioTimerDriver`` (broker) and ``ThreadTimerDriver`` (client)
decide when it advances.  See each module's docstring for costs and thread-safety.
"""

from timer.clock import Clock, ManualClock, MonotonicClock
from timer.delayed_operation import DelayedOperation
from timer.drivers import AsyncioTimerDriver, ThreadTimerDriver
from timer.errors import (
    TimerError,
    TimerFullError,
    TimerInvariantError,
    TimerQueueFullError,
    TimerShutdownError,
)
from timer.purgatory import Purgatory, TimerLike
from timer.system_timer import DEFAULT_MAX_TASKS, SystemTimer
from timer.timing_wheel import MAX_DELAY_MS, CallableTask, TimerTask, TimerTaskList, TimingWheel

__all__ = [
    "DEFAULT_MAX_TASKS",
    "MAX_DELAY_MS",
    "AsyncioTimerDriver",
    "CallableTask",
    "Clock",
    "DelayedOperation",
    "ManualClock",
    "MonotonicClock",
    "Purgatory",
    "SystemTimer",
    "ThreadTimerDriver",
    "TimerError",
    "TimerFullError",
    "TimerInvariantError",
    "TimerLike",
    "TimerQueueFullError",
    "TimerShutdownError",
    "TimerTask",
    "TimerTaskList",
    "TimingWheel",
]
