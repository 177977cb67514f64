"""Hierarchical timing wheel: timer tasks, buckets (doubly linked lists) and wheels.

Structure (Kafka's ``TimingWheel``): a wheel of ``wheel_size`` buckets, each covering
``tick_ms`` of time, spans ``interval_ms = tick_ms * wheel_size`` from its
``current_time_ms`` (a multiple of ``tick_ms``).  A task whose expiration lies beyond a
wheel's span goes to an overflow wheel, created on demand, whose tick is the lower
wheel's interval (1 ms x 20 -> 20 ms x 20 -> 400 ms x 20 -> 8 s x 20 -> 160 s ...; a
delay of hours needs 6 levels).  A bucket's expiration is the start of its time range.
When a bucket expires, its tasks are re-inserted from the lowest wheel: a task moved by
clock advance lands in a finer wheel, and a task whose bucket is the current one is due
(``TimingWheel.add`` returns False: "not inserted, run it now").

Buckets are intrusive, circular, doubly linked lists: a ``TimerTask`` carries its own
``_prev``/``_next``/``_bucket`` links and the ``TimerTaskList`` object is the list's
sentinel node.  No per-task node object is allocated.  A bucket is pushed on the shared
priority queue (a heap of ``(expiration_ms, id(bucket), bucket)``) only when its
expiration changes, so the queue holds buckets, never tasks, and a bucket is in the
queue exactly when ``expiration_ms != -1``.

Costs: add O(m) for m wheel levels (m <= 6 for delays up to ~17 h), O(1) per level;
cancel O(1) (unlink); advancing past a bucket O(k) for its k tasks plus one heap pop,
O(log B) for B non-empty buckets (B <= m * wheel_size).  Memory: one slotted object per
task (no node, no heap entry), ``wheel_size`` buckets per level.

Thread-safety: none by itself.  A wheel and its tasks belong to one owner thread (the
asyncio loop in the broker, the driver thread in the client).  The one cross-thread
operation is ``TimerTask.cancel()`` when the timer was bound to an owner thread (see
``WheelState.owner_ident``): from any other thread it only sets the cancelled flag and
queues the task; the owner unlinks it at its next step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from heapq import heappush
from threading import get_ident

#: Largest accepted delay (about 146 million years); keeps wheel levels bounded (< 16).
MAX_DELAY_MS = 2**62

#: Cross-thread cancels waiting for the owner thread.  When full, further cancels keep
#: only their flag: the task stays linked until its bucket expires and is then dropped.
MAX_PENDING_CANCELS = 65_536

_NO_BUCKET_EXPIRATION = -1


class WheelState:
    """State shared by all wheels and buckets of one timer.

    ``queue`` is the heap of expiring buckets, ``size`` the number of linked tasks,
    ``owner_ident`` the thread allowed to mutate links (None: the caller guarantees a
    single thread), ``pending_cancels`` the cancels requested by other threads.
    """

    __slots__ = ("owner_ident", "pending_cancels", "queue", "size")

    def __init__(self) -> None:
        self.queue: list[tuple[int, int, TimerTaskList]] = []
        self.size = 0
        self.owner_ident: int | None = None
        self.pending_cancels: deque[TimerTask] = deque(maxlen=MAX_PENDING_CANCELS)


class TimerTask(ABC):
    """A unit of work to ``run()`` once ``delay_ms`` has passed since it was added.

    ``expiration_ms`` is set when the task is added: the clock's time plus ``delay_ms``,
    rounded up to the timer's tick (so a task never fires before its delay).
    """

    __slots__ = ("_bucket", "_cancelled", "_next", "_prev", "delay_ms", "expiration_ms")

    def __init__(self, delay_ms: int) -> None:
        if type(delay_ms) is not int or not 0 <= delay_ms <= MAX_DELAY_MS:
            delay_ms = _checked_delay(delay_ms)
        self.delay_ms = delay_ms
        self.expiration_ms = -1
        self._bucket: TimerTaskList | None = None
        self._prev: TimerTask | TimerTaskList | None = None
        self._next: TimerTask | TimerTaskList | None = None
        self._cancelled = False

    @abstractmethod
    def run(self) -> None:
        """The work to do on expiry; called at most once per add, on the owner thread."""

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled

    @property
    def is_scheduled(self) -> bool:
        """True while the task sits in a bucket of some timer."""
        return self._bucket is not None

    def cancel(self) -> None:
        """Stop the task from firing and unlink it from its bucket.  O(1); idempotent.

        Safe from any thread when the timer is bound to an owner thread: a foreign thread
        only flags the task and queues the unlink for the owner.
        """
        self._cancelled = True
        bucket = self._bucket
        if bucket is None:
            return
        state = bucket._state
        owner = state.owner_ident
        if owner is not None and owner != get_ident():
            state.pending_cancels.append(self)
            return
        prev = self._prev
        nxt = self._next
        prev._next = nxt  # type: ignore[union-attr]
        nxt._prev = prev  # type: ignore[union-attr]
        self._bucket = self._prev = self._next = None
        state.size -= 1


def _checked_delay(delay_ms: object) -> int:
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int):
        raise TypeError(f"delay_ms must be an int number of milliseconds, got {delay_ms!r}")
    if delay_ms < 0:
        raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
    if delay_ms > MAX_DELAY_MS:
        raise ValueError(f"delay_ms must be <= {MAX_DELAY_MS}, got {delay_ms}")
    return int(delay_ms)


class CallableTask(TimerTask):
    """A timer task that calls ``callback()`` when it fires."""

    __slots__ = ("callback",)

    def __init__(self, delay_ms: int, callback: Callable[[], object]) -> None:
        super().__init__(delay_ms)
        self.callback = callback

    def run(self) -> None:
        self.callback()


class TimerTaskList:
    """One bucket: the sentinel of a circular doubly linked list of tasks.

    ``expiration_ms`` is the start of the bucket's current range (-1 when the bucket is
    not in the queue); ``tick_ms`` is the width of that range.
    """

    __slots__ = ("_next", "_prev", "_state", "expiration_ms", "tick_ms")

    def __init__(self, state: WheelState, tick_ms: int) -> None:
        self._next: TimerTask | TimerTaskList = self
        self._prev: TimerTask | TimerTaskList = self
        self._state = state
        self.tick_ms = tick_ms
        self.expiration_ms = _NO_BUCKET_EXPIRATION

    def __iter__(self) -> Iterator[TimerTask]:
        """Tasks in insertion order; O(k).  Do not mutate the bucket while iterating."""
        node = self._next
        while node is not self:
            assert isinstance(node, TimerTask)
            yield node
            node = node._next  # type: ignore[assignment]

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def link(self, task: TimerTask) -> None:
        """Append ``task`` at the tail.  O(1).  The caller counts it in ``state.size``."""
        tail = self._prev
        task._prev = tail
        task._next = self
        tail._next = task
        self._prev = task
        task._bucket = self

    def detach_all(self) -> TimerTask | None:
        """Empty the bucket in O(1) and return the first task of the detached chain.

        The chain is still walkable through ``_next`` until it reaches this bucket (the
        sentinel); the bucket leaves the queue (``expiration_ms = -1``).
        """
        first = self._next
        self._next = self._prev = self
        self.expiration_ms = _NO_BUCKET_EXPIRATION
        return None if first is self else first  # type: ignore[return-value]


class TimingWheel:
    """One level of the hierarchy; ``add`` walks up to overflow wheels as needed."""

    __slots__ = (
        "buckets",
        "current_time_ms",
        "interval_ms",
        "overflow_wheel",
        "state",
        "tick_ms",
        "wheel_size",
    )

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, state: WheelState) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError(f"need tick_ms >= 1 and wheel_size >= 2, got {tick_ms}, {wheel_size}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_time_ms = start_ms - start_ms % tick_ms
        self.state = state
        self.buckets = [TimerTaskList(state, tick_ms) for _ in range(wheel_size)]
        self.overflow_wheel: TimingWheel | None = None

    def add(self, task: TimerTask) -> bool:
        """Insert ``task`` by its ``expiration_ms``; False if already due (not inserted)."""
        exp = task.expiration_ms
        wheel = self
        if exp < wheel.current_time_ms + wheel.tick_ms:
            return False
        while exp >= wheel.current_time_ms + wheel.interval_ms:
            overflow = wheel.overflow_wheel
            if overflow is None:
                overflow = wheel.overflow_wheel = TimingWheel(
                    wheel.interval_ms, wheel.wheel_size, wheel.current_time_ms, wheel.state
                )
            wheel = overflow
        tick = wheel.tick_ms
        virtual_id = exp // tick
        bucket = wheel.buckets[virtual_id % wheel.wheel_size]
        tail = bucket._prev
        task._prev = tail
        task._next = bucket
        tail._next = task
        bucket._prev = task
        task._bucket = bucket
        state = wheel.state
        state.size += 1
        start = virtual_id * tick
        if bucket.expiration_ms != start:
            bucket.expiration_ms = start
            heappush(state.queue, (start, id(bucket), bucket))
        return True

    def advance_clock(self, time_ms: int) -> None:
        """Move this wheel and its overflow wheels forward to ``time_ms`` (rounded down)."""
        wheel: TimingWheel | None = self
        while wheel is not None and time_ms >= wheel.current_time_ms + wheel.tick_ms:
            time_ms = wheel.current_time_ms = time_ms - time_ms % wheel.tick_ms
            wheel = wheel.overflow_wheel

    def levels(self) -> Iterator[TimingWheel]:
        """This wheel and every overflow wheel above it, finest first."""
        wheel: TimingWheel | None = self
        while wheel is not None:
            yield wheel
            wheel = wheel.overflow_wheel
