"""Drivers: who waits for the next bucket and on which thread tasks run.

``SystemTimer`` never waits.  A driver owns one and decides when to advance it:

- ``AsyncioTimerDriver`` (the broker): one ``loop.call_later`` handle armed for the
  earliest bucket's expiration; when it fires, the timer advances and due tasks run on
  the loop.  Adds that create an earlier bucket re-arm the handle.  Everything happens
  on the loop's thread, so no locks.
- ``ThreadTimerDriver`` (the client): one daemon thread that is both reaper and
  single-threaded executor.  Other threads hand it work through a bounded FIFO queue
  (``add``, ``submit``); it waits on that queue until the next expiration, then
  advances the timer and runs due tasks, so all timer state is touched by one thread.

Costs: per add, the core's add plus O(1) (asyncio: a comparison, rarely a re-arm of one
handle; thread: one queue put, which may block up to ``max_block_ms`` when the queue
holds ``max_pending`` commands).  Per wake-up, the core's advance.

Thread-safety: ``AsyncioTimerDriver`` methods must be called on the loop's thread.
``ThreadTimerDriver.add``/``submit``/``wakeup``/``shutdown`` may be called from any
thread; tasks and submitted callables run on the driver thread.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from timer.clock import MonotonicClock
from timer.errors import TimerQueueFullError, TimerShutdownError
from timer.system_timer import SystemTimer
from timer.timing_wheel import TimerTask

T = TypeVar("T")

_log = logging.getLogger(__name__)


class AsyncioTimerDriver:
    """Runs a ``SystemTimer`` on an asyncio event loop (call on the loop's thread)."""

    __slots__ = ("_armed_ms", "_handle", "_loop", "_timer")

    def __init__(self, timer: SystemTimer, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._timer = timer
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = None
        self._armed_ms: int | None = None
        timer.bind_owner_thread()

    @property
    def timer(self) -> SystemTimer:
        return self._timer

    @property
    def size(self) -> int:
        return self._timer.size

    def add(self, task: TimerTask) -> bool:
        """Add to the timer (a due task runs right away); re-arm if it is now earlier."""
        inserted = self._timer.add(task)
        if inserted:
            armed = self._armed_ms
            if armed is None or task.expiration_ms < armed:
                self._rearm()
        return inserted

    def _rearm(self) -> None:
        next_ms = self._timer.next_expiration_ms()
        if next_ms == self._armed_ms:
            return
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed_ms = next_ms
        if next_ms is not None:
            delay_ms = max(0, next_ms - self._timer.clock.now_ms())
            self._handle = self._loop.call_later(delay_ms / 1000.0, self._on_wakeup)

    def _on_wakeup(self) -> None:
        self._handle = None
        self._armed_ms = None
        try:
            self._timer.advance_clock()
        finally:
            if not self._timer.is_shut_down:
                self._rearm()

    def shutdown(self) -> None:
        """Cancel the wake-up and shut the timer down (pending tasks are dropped)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed_ms = None
        self._timer.shutdown()


_STOP = object()

#: Commands run between two timer advances, so a flood of adds cannot starve expiry.
_MAX_COMMANDS_PER_STEP = 1024


class ThreadTimerDriver:
    """A thread that owns a ``SystemTimer`` and serialises all work through itself."""

    def __init__(
        self,
        timer: SystemTimer | None = None,
        *,
        name: str = "minikafka-timer",
        max_pending: int = 10_000,
        max_block_ms: int = 60_000,
        idle_wait_ms: int = 200,
    ) -> None:
        if max_pending < 1 or max_block_ms < 0 or idle_wait_ms < 1:
            raise ValueError(
                "need max_pending >= 1, max_block_ms >= 0, idle_wait_ms >= 1; got "
                f"{max_pending}, {max_block_ms}, {idle_wait_ms}"
            )
        self._timer = timer if timer is not None else SystemTimer(MonotonicClock())
        self._commands: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        self._max_block_s = max_block_ms / 1000.0
        self._idle_wait_ms = idle_wait_ms
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._timer.bind_owner_thread(self._thread.ident)

    @property
    def timer(self) -> SystemTimer:
        return self._timer

    @property
    def size(self) -> int:
        return self._timer.size

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def add(self, task: TimerTask) -> bool:
        """Queue ``task`` for the driver thread to add (non-blocking unless the queue is
        full); True once queued.  A due task then runs on the driver thread."""
        self._put((self._timer.add, (task,), None))
        return True

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` on the driver thread, in FIFO order with adds."""
        future: Future[T] = Future()
        self._put((fn, args, future))
        return future

    def wakeup(self) -> None:
        """Make the driver re-read the clock now (tests that move a ManualClock)."""
        self._put((_noop, (), None))

    def shutdown(self, timeout_ms: int = 10_000) -> None:
        """Stop the thread (queued commands run first) and drop scheduled tasks."""
        if not self._closed:
            self._closed = True
            try:
                self._commands.put(_STOP, timeout=self._max_block_s)
            except queue.Full:
                raise TimerQueueFullError("timer command queue full; cannot stop") from None
        self._thread.join(timeout_ms / 1000.0)
        if self._thread.is_alive():
            raise TimeoutError(f"timer thread {self._thread.name} did not stop in {timeout_ms} ms")

    def _put(self, command: Any) -> None:
        if self._closed:
            raise TimerShutdownError("timer driver is shut down")
        try:
            self._commands.put(command, timeout=self._max_block_s)
        except queue.Full:
            raise TimerQueueFullError(
                f"timer command queue full ({self._commands.maxsize}) for "
                f"{self._max_block_s * 1000:.0f} ms"
            ) from None

    def _run(self) -> None:
        timer = self._timer
        timer.bind_owner_thread()
        commands = self._commands
        try:
            while True:
                next_ms = timer.next_expiration_ms()
                wait_ms = (
                    self._idle_wait_ms
                    if next_ms is None
                    else min(self._idle_wait_ms, next_ms - timer.clock.now_ms())
                )
                try:
                    if wait_ms > 0:
                        command = commands.get(timeout=wait_ms / 1000.0)
                    else:
                        command = commands.get_nowait()
                    for _ in range(_MAX_COMMANDS_PER_STEP):
                        if command is _STOP:
                            return
                        self._execute(command)
                        command = commands.get_nowait()
                    else:
                        if command is _STOP:
                            return
                        self._execute(command)
                except queue.Empty:
                    pass
                timer.advance_clock()
        finally:
            timer.shutdown()
            self._fail_pending()

    @staticmethod
    def _execute(command: tuple[Callable[..., Any], tuple[Any, ...], Future[Any] | None]) -> None:
        fn, args, future = command
        if future is None:
            try:
                fn(*args)
            except Exception as error:
                _log.error("timer driver command %r failed", fn, exc_info=error)
            return
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except Exception as error:
            future.set_exception(error)

    def _fail_pending(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if command is not _STOP and command[2] is not None:
                command[2].set_exception(TimerShutdownError("timer driver shut down"))


def _noop() -> None:
    return None
