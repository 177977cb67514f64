"""SystemTimer: the pure core of the timer (a timing wheel plus a queue of buckets).

The timer owns a hierarchical ``TimingWheel`` and a priority queue (heap) of *buckets*
keyed by expiration, as in Kafka's ``SystemTimer``.  Advancing never loops over ticks:
it pops the next non-empty bucket whose expiration has come, moves the wheels to that
time, and re-inserts the bucket's tasks (each either lands in a finer wheel or is due).
Time comes from an injected ``Clock``; nothing here sleeps or starts threads.  Waiting
is the drivers' job (``timer.drivers``), which ask ``next_expiration_ms()`` how long.

Expirations are rounded *up* to the tick, so with any ``tick_ms`` a task never fires
before its delay has passed and fires at most one tick late when the owner polls on
time.  A task added with its expiration already reached is not inserted: ``add`` runs it
at once and returns False.

API: ``add(task) -> bool``, ``advance_clock(timeout_ms=0) -> bool``,
``poll_due(now_ms) -> list[TimerTask]``, ``run_due(tasks)``, ``next_expiration_ms()``,
``size``, ``shutdown()``, ``bind_owner_thread()``, ``check_invariants()``.
``advance_clock`` keeps Kafka's name and result (True when a bucket expired); the core
cannot wait, so ``timeout_ms`` only states how far ahead the caller would have waited,
and tasks still fire only once the clock has reached them (never early).

Costs: add O(1) on the hinted bucket (the last bucket used, reused while expirations
fall in its range), otherwise O(m) for m wheel levels plus an O(log B) heap push when
a bucket gets a new expiration; cancel O(1); advancing O(k + log B) per expired bucket
of k tasks; ``size`` and ``next_expiration_ms`` O(1) amortised.  Memory O(n) for n
outstanding tasks, with nothing kept for cancelled or completed ones.

Thread-safety: not thread-safe.  One owner thread (the broker's asyncio loop, or a
driver thread) calls everything.  After ``bind_owner_thread()``, ``TimerTask.cancel()``
(and so ``DelayedOperation.force_complete``) may be called from other threads: the
task is flagged at once and unlinked by the owner at its next ``poll_due``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from heapq import heappop
from threading import get_ident

from timer.clock import Clock
from timer.errors import TimerFullError, TimerInvariantError, TimerShutdownError
from timer.timing_wheel import TimerTask, TimerTaskList, TimingWheel, WheelState

_log = logging.getLogger(__name__)

#: Default bound on outstanding tasks in one timer.
DEFAULT_MAX_TASKS = 10_000_000

TaskErrorHook = Callable[[TimerTask, Exception], None]


def _log_task_error(task: TimerTask, error: Exception) -> None:
    _log.error("timer task %r failed", task, exc_info=error)


class SystemTimer:
    """Hierarchical timing wheel driven by an injected clock; see the module docstring."""

    __slots__ = (
        "_clock",
        "_hint",
        "_limit",
        "_now_ms",
        "_on_task_error",
        "_shut_down",
        "_state",
        "_wheel",
        "max_tasks",
        "tick_ms",
        "wheel_size",
    )

    def __init__(
        self,
        clock: Clock,
        tick_ms: int = 1,
        wheel_size: int = 20,
        *,
        max_tasks: int = DEFAULT_MAX_TASKS,
        on_task_error: TaskErrorHook | None = None,
    ) -> None:
        for name, value, low in (
            ("tick_ms", tick_ms, 1),
            ("wheel_size", wheel_size, 2),
            ("max_tasks", max_tasks, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {value!r}")
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        self._clock = clock
        self._now_ms = clock.now_ms
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.max_tasks = max_tasks
        self._limit = max_tasks  # 0 once shut down, so add checks one number
        self._on_task_error: TaskErrorHook = on_task_error or _log_task_error
        self._state = WheelState()
        self._wheel = TimingWheel(tick_ms, wheel_size, clock.now_ms(), self._state)
        self._hint: TimerTaskList | None = None
        self._shut_down = False

    # -- adding ---------------------------------------------------------------------
    def add(self, task: TimerTask) -> bool:
        """Schedule ``task`` to run ``task.delay_ms`` from now.

        Returns True when the task was inserted.  A task already due is not inserted:
        it runs right here, on the calling thread, and False is returned.  Adding a
        task that is currently scheduled raises ValueError; a cancelled or finished
        task may be added again (its cancelled flag is cleared).
        """
        state = self._state
        if task._bucket is not None or state.size >= self._limit:
            self._refuse(task)
        now = self._now_ms()
        exp = now + task.delay_ms
        task._cancelled = False
        if exp <= now:  # delay 0: due now, whatever the tick
            task.expiration_ms = exp
            self._run_one(task)
            return False
        tick = self.tick_ms
        if tick != 1:
            exp = -(-exp // tick) * tick
        task.expiration_ms = exp
        bucket = self._hint
        if bucket is not None:
            start = bucket.expiration_ms
            # A live bucket (in the queue) whose range holds exp: it expires at
            # start <= exp and then re-inserts the task, so this is never late.
            if -1 < start <= exp < start + bucket.tick_ms:
                tail = bucket._prev
                task._prev = tail
                task._next = bucket
                tail._next = task
                bucket._prev = task
                task._bucket = bucket
                state.size += 1
                return True
        if not self._wheel.add(task):  # only if the wheel ran ahead of the clock
            self._run_one(task)
            return False
        self._hint = task._bucket
        return True

    # -- advancing ------------------------------------------------------------------
    def poll_due(self, now_ms: int | None = None) -> list[TimerTask]:
        """Expire every bucket whose expiration is <= ``now_ms`` (default: the clock).

        Moves the wheels forward, re-inserts tasks that belong in finer wheels and
        returns the due tasks in expiration order, without running them.  ``now_ms``
        may lag the clock but not lead it (that would fire tasks early).
        """
        clock_ms = self._now_ms()
        if now_ms is None:
            now_ms = clock_ms
        elif now_ms > clock_ms:
            raise ValueError(f"now_ms {now_ms} is ahead of the clock ({clock_ms} ms)")
        state = self._state
        if state.pending_cancels:
            self._drain_pending_cancels()
        queue = state.queue
        wheel = self._wheel
        due: list[TimerTask] = []
        while queue and queue[0][0] <= now_ms:
            expiration_ms, _, bucket = heappop(queue)
            if bucket.expiration_ms != expiration_ms:
                continue  # defensive: stale entry (cannot happen while invariants hold)
            wheel.advance_clock(expiration_ms)
            task = bucket.detach_all()
            while task is not None and task is not bucket:
                nxt = task._next
                task._bucket = task._prev = task._next = None
                state.size -= 1
                if not task._cancelled and not wheel.add(task):
                    due.append(task)
                task = nxt  # type: ignore[assignment]
        wheel.advance_clock(now_ms)
        return due

    def run_due(self, tasks: Iterable[TimerTask]) -> int:
        """Run tasks returned by ``poll_due`` (skipping ones cancelled since); returns
        how many ran.  A task that raises is reported to ``on_task_error`` and the rest
        still run."""
        ran = 0
        for task in tasks:
            if not task._cancelled:
                self._run_one(task)
                ran += 1
        return ran

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        """Expire and run everything due by the clock's now; True if a bucket expired.

        ``timeout_ms`` (>= 0) is accepted for parity with Kafka's reaper loop; the pure
        core never waits and never fires a task before the clock reaches it.
        """
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms}")
        state = self._state
        queue = state.queue
        now_ms = self._now_ms()
        expired = bool(queue) and queue[0][0] <= now_ms
        if not expired and not state.pending_cancels:  # (most calls: nothing due)
            self._wheel.advance_clock(now_ms)  # what poll_due would do, and nothing runs
            return False
        self.run_due(self.poll_due(now_ms))
        return expired

    def next_expiration_ms(self) -> int | None:
        """Expiration of the earliest non-empty bucket, or None when nothing is queued.

        Buckets emptied by cancels are dropped from the queue here, so a driver does
        not wake up for them.  O(1) amortised.
        """
        queue = self._state.queue
        while queue:
            expiration_ms, _, bucket = queue[0]
            if bucket._next is not bucket and bucket.expiration_ms == expiration_ms:
                return expiration_ms
            heappop(queue)
            if bucket.expiration_ms == expiration_ms:
                bucket.expiration_ms = -1
        return None

    # -- bookkeeping ----------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of tasks linked in the wheel (cross-thread cancels count until drained)."""
        return self._state.size

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def is_shut_down(self) -> bool:
        return self._shut_down

    def bind_owner_thread(self, ident: int | None = None) -> None:
        """Declare the thread that owns this timer (default: the calling thread).

        From then on, cancels from other threads are deferred to the owner.  Pass the
        ident explicitly to bind before the owner thread has started running.
        """
        self._state.owner_ident = get_ident() if ident is None else ident

    def shutdown(self) -> None:
        """Drop every scheduled task without running it and refuse new ones.  O(n)."""
        self._shut_down = True
        self._limit = 0
        self._state.pending_cancels.clear()
        for wheel in self._wheel.levels():
            for bucket in wheel.buckets:
                task = bucket.detach_all()
                while task is not None and task is not bucket:
                    nxt = task._next
                    task._bucket = task._prev = task._next = None
                    task = nxt  # type: ignore[assignment]
        self._state.queue.clear()
        self._state.size = 0
        self._hint = None

    def _refuse(self, task: TimerTask) -> None:
        if self._shut_down:
            raise TimerShutdownError("timer is shut down; cannot add tasks")
        if task._bucket is not None:
            raise ValueError(f"task {task!r} is already scheduled")
        raise TimerFullError(f"timer holds max_tasks={self.max_tasks} tasks")

    def _run_one(self, task: TimerTask) -> None:
        try:
            task.run()
        except Exception as error:
            self._on_task_error(task, error)

    def _drain_pending_cancels(self) -> None:
        state = self._state
        pending = state.pending_cancels
        while pending:
            task = pending.popleft()
            if task._cancelled and task._bucket is not None:
                prev = task._prev
                nxt = task._next
                prev._next = nxt  # type: ignore[union-attr]
                nxt._prev = prev  # type: ignore[union-attr]
                task._bucket = task._prev = task._next = None
                state.size -= 1

    def check_invariants(self) -> None:
        """Verify links, bucket ranges, queue membership and size; O(n + B).

        Raises TimerInvariantError naming the first violation.
        """
        state = self._state
        queued = [entry[2] for entry in state.queue]
        if len({id(b) for b in queued}) != len(queued):
            raise TimerInvariantError("a bucket is queued more than once")
        queued_ids = {id(b) for b in queued}
        for expiration_ms, _, bucket in state.queue:
            if bucket.expiration_ms != expiration_ms:
                raise TimerInvariantError(
                    f"queued bucket expiration {bucket.expiration_ms} != key {expiration_ms}"
                )
        counted = 0
        for level, wheel in enumerate(self._wheel.levels()):
            if wheel.current_time_ms % wheel.tick_ms:
                raise TimerInvariantError(f"level {level} time not a multiple of its tick")
            for bucket in wheel.buckets:
                counted += self._check_bucket(level, bucket, queued_ids)
        if counted != state.size:
            raise TimerInvariantError(f"size {state.size} != {counted} linked tasks")

    @staticmethod
    def _check_bucket(level: int, bucket: TimerTaskList, queued_ids: set[int]) -> int:
        count = 0
        prev: object = bucket
        node = bucket._next
        while node is not bucket:
            if (
                not isinstance(node, TimerTask)
                or node._prev is not prev
                or node._bucket is not bucket
            ):
                raise TimerInvariantError(f"broken links in a level-{level} bucket")
            start = bucket.expiration_ms
            if not start <= node.expiration_ms < start + bucket.tick_ms:
                raise TimerInvariantError(
                    f"task expiring at {node.expiration_ms} in level-{level} bucket "
                    f"[{start}, {start + bucket.tick_ms})"
                )
            count += 1
            prev = node
            node = node._next  # type: ignore[assignment]
        if bucket._prev is not prev:
            raise TimerInvariantError(f"level-{level} bucket tail link is wrong")
        if count and id(bucket) not in queued_ids:
            raise TimerInvariantError(f"non-empty level-{level} bucket is not queued")
        return count
