"""Responses that wait for shared-memory pool room without blocking the main event loop.

Every response travels to its network process in a pool buffer.  When the pool is full
(slow clients not reading their fetches, say), the main process used to wait for memory
inside ``pool.allocate`` for up to a second, on the event loop: no heartbeat, no other
request, no replication meanwhile - with a 2 s broker session that can fence a healthy
broker.  Now a response that finds no memory is *parked*: :class:`ResponseParking` keeps
parked responses in arrival order (a later one never overtakes an earlier one, so the
pool's memory goes to them first come, first served), and the response sender
(:mod:`broker.requests.responses`) retries them every few milliseconds from a loop
timer.  One that waited ``timeout_ms`` is given up (its connection is closed, as
before, and the client retries); at most ``max_parked`` wait,
beyond that a new one is given up at once.  A connection has at most one request with
the main process at a time, so parking never reorders one connection's answers.

Sans-IO: the caller supplies ``try_deliver(item) -> bool`` (False: no memory now) and
``give_up(item, why)``; the clock is injected.  Costs: O(1) per response; a retry is
O(responses delivered + 1).  Not thread-safe: the main event loop owns it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["ResponseParking"]

T = TypeVar("T")


class ResponseParking(Generic[T]):
    def __init__(self, *, max_parked: int, timeout_ms: int,
                 clock_ms: Callable[[], float]) -> None:
        if max_parked < 1 or timeout_ms < 0:
            raise ValueError("max_parked must be >= 1 and timeout_ms >= 0")
        self.max_parked = max_parked
        self.timeout_ms = timeout_ms
        self._clock_ms = clock_ms
        self._parked: deque[tuple[float, T]] = deque()  # (deadline ms, item)
        self.parked_total = 0
        self.given_up_total = 0

    def __len__(self) -> int:
        return len(self._parked)

    def offer(self, item: T, try_deliver: Callable[[T], bool],
              give_up: Callable[[T, str], None]) -> None:
        """Deliver ``item`` now if nothing waits before it and memory allows; else park
        it (or give it up when ``max_parked`` already wait)."""
        if not self._parked and try_deliver(item):
            return
        if len(self._parked) >= self.max_parked:
            self.given_up_total += 1
            give_up(item, f"{self.max_parked} responses already wait for pool memory")
            return
        self.parked_total += 1
        self._parked.append((self._clock_ms() + self.timeout_ms, item))

    def retry(self, try_deliver: Callable[[T], bool],
              give_up: Callable[[T, str], None]) -> None:
        """Deliver parked responses in order while memory allows; give up the ones at
        the head whose time ran out."""
        parked = self._parked
        while parked:
            deadline, item = parked[0]
            if try_deliver(item):
                parked.popleft()
            elif self._clock_ms() >= deadline:
                parked.popleft()
                self.given_up_total += 1
                give_up(item, f"no pool memory for a response within {self.timeout_ms} ms")
            else:
                return
