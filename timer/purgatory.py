"""Purgatory: delayed operations watched by keys and timed out by a timer.

Kafka's ``DelayedOperationPurgatory``.  An operation that cannot complete yet (a
produce with acks=all waiting for followers, a fetch waiting for ``min_bytes``, a
group join waiting for members) is *watched* under one or more keys (a partition, a
group) and added to a timer.  When something changes for a key, the owner calls
``check_and_complete(key)``, which retries every operation watched under that key.
Whichever comes first, the condition or the timeout, completes the operation once.

A completed operation leaves the timer at once (``force_complete`` cancels its entry)
and leaves the watch list of the key that completed it; it may still sit in the lists
of its other keys.  Those stale entries are purged in one sweep whenever the estimated
number of completed-but-listed operations exceeds ``purge_interval`` (estimated as in
Kafka: operations watched since the last purge minus ``timer.size``), so watch-list
memory stays O(live operations + purge_interval), not O(work ever done).

Costs: ``try_complete_else_watch`` O(k) for k keys plus two ``try_complete`` calls and
one timer add; ``check_and_complete(key)`` O(w) for the w operations under the key;
purge O(total watch entries), at most once per ``purge_interval`` watched operations
(amortised O(1 + live/purge_interval) per operation); ``watched`` and ``delayed`` O(1).

The timer should be dedicated to the purgatory (as in Kafka).  A shared timer is
allowed: ``delayed`` then counts the other tasks too, and purges happen later (after
``purge_interval`` plus the foreign task count completions), still bounded.

Thread-safety: not thread-safe; the owner (the broker's event loop, or a driver's
executor thread) makes every call.  Operations may still be force-completed from other
threads (see ``DelayedOperation``); the lists drop them at the next check or purge.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, Protocol, TypeVar

from timer.delayed_operation import DelayedOperation
from timer.errors import TimerShutdownError
from timer.timing_wheel import TimerTask


class TimerLike(Protocol):
    """What a purgatory needs from a timer: ``SystemTimer`` and the drivers fit."""

    def add(self, task: TimerTask) -> bool: ...

    @property
    def size(self) -> int: ...


OpT = TypeVar("OpT", bound=DelayedOperation)


class Purgatory(Generic[OpT]):
    """Watch lists by key plus a timer; see the module docstring."""

    __slots__ = (
        "_estimated_total",
        "_shut_down",
        "_timer",
        "_watched",
        "_watchers",
        "name",
        "purge_interval",
    )

    def __init__(self, name: str, timer: TimerLike, purge_interval: int = 1000) -> None:
        if isinstance(purge_interval, bool) or not isinstance(purge_interval, int):
            raise TypeError(f"purge_interval must be an int, got {purge_interval!r}")
        if purge_interval < 1:
            raise ValueError(f"purge_interval must be >= 1, got {purge_interval}")
        self.name = name
        self.purge_interval = purge_interval
        self._timer = timer
        self._watchers: dict[Hashable, list[OpT]] = {}
        self._watched = 0
        self._estimated_total = 0
        self._shut_down = False

    # -- parking and completing -----------------------------------------------------
    def try_complete_else_watch(self, op: OpT, watch_keys: Iterable[Hashable]) -> bool:
        """Try ``op``; if it cannot complete, watch it under every key, try once more
        (closing the race with an event between the first try and the watch) and add
        it to the timer.  Returns True if the operation completed here."""
        if self._shut_down:
            raise TimerShutdownError(f"purgatory {self.name!r} is shut down")
        keys = watch_keys if isinstance(watch_keys, (list, tuple)) else list(watch_keys)
        if not keys:
            raise ValueError("watch_keys must not be empty")
        if len(keys) > 1:
            keys = list(dict.fromkeys(keys))
        if op._completed:
            raise ValueError(f"operation {op!r} is already completed")
        if op.try_complete():
            return True
        watchers = self._watchers
        for key in keys:
            if op._completed:
                break
            ops = watchers.get(key)
            if ops is None:
                watchers[key] = [op]
            else:
                ops.append(op)
            self._watched += 1
        self._estimated_total += 1
        if op.try_complete():
            return True
        if not op._completed:
            self._timer.add(op)
            if op._completed:  # completed concurrently while being added
                op.cancel()
        if self._estimated_total - self._timer.size > self.purge_interval:
            self.purge_completed()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Retry every operation watched under ``key``; returns how many completed now.

        Completed operations leave the key's list; the key disappears when its list
        empties.  Operations watched under ``key`` by callbacks during the check are
        kept (and not tried in this pass).
        """
        watchers = self._watchers
        ops = watchers.pop(key, None)
        if ops is None:
            return 0
        self._watched -= len(ops)
        survivors: list[OpT] = []
        completed = 0
        tried = 0
        try:
            for op in ops:
                tried += 1
                if op._completed:
                    continue
                try:
                    done = op.try_complete()
                except BaseException:
                    if not op._completed:
                        survivors.append(op)
                    raise
                if done:
                    completed += 1
                elif not op._completed:
                    survivors.append(op)
        finally:
            survivors.extend(op for op in ops[tried:] if not op._completed)
            added = watchers.pop(key, None)
            if added:
                self._watched -= len(added)
                survivors.extend(added)
            if survivors:
                watchers[key] = survivors
                self._watched += len(survivors)
        return completed

    def cancel_for_key(self, key: Hashable) -> list[OpT]:
        """Stop watching ``key``; cancel the timer entries of its uncompleted operations
        and return those operations (not completed: the caller decides their fate)."""
        ops = self._watchers.pop(key, None)
        if ops is None:
            return []
        self._watched -= len(ops)
        cancelled = [op for op in ops if not op._completed]
        for op in cancelled:
            op.cancel()
        return cancelled

    def purge_completed(self) -> int:
        """Drop completed operations from every watch list; returns how many entries
        were dropped.  O(total watch entries)."""
        self._estimated_total = self._timer.size
        purged = 0
        watchers = self._watchers
        for key in list(watchers):
            ops = watchers[key]
            live = [op for op in ops if not op._completed]
            dropped = len(ops) - len(live)
            if dropped:
                purged += dropped
                if live:
                    watchers[key] = live
                else:
                    del watchers[key]
        self._watched -= purged
        return purged

    # -- introspection and lifecycle ------------------------------------------------
    @property
    def watched(self) -> int:
        """Watch-list entries (an operation counts once per key), completed ones included
        until purged."""
        return self._watched

    @property
    def delayed(self) -> int:
        """Operations waiting in the timer (all of the timer's tasks if it is shared)."""
        return self._timer.size

    @property
    def num_keys(self) -> int:
        return len(self._watchers)

    def watched_for(self, key: Hashable) -> int:
        ops = self._watchers.get(key)
        return 0 if ops is None else len(ops)

    def shutdown(self) -> None:
        """Refuse new operations, cancel the timer entries of watched operations and drop
        all watch lists; parked operations are neither completed nor expired."""
        self._shut_down = True
        for key in list(self._watchers):
            self.cancel_for_key(key)
