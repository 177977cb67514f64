"""DelayedOperation: a timer task that completes early when its condition is met.

Kafka's ``DelayedOperation``: a request parked until a condition holds (acks=all: all
ISR replicas have the batch; fetch: ``min_bytes`` available; join: all members joined)
or until ``delay_ms`` passes.  Subclasses implement

- ``try_complete()``: check the condition; if it holds, ``return self.force_complete()``,
  otherwise return False.  Called by the purgatory on watch-key events.
- ``on_complete()``: build and send the result.  Runs exactly once per operation,
  whoever completes it (a watch-key check, expiration, or an explicit
  ``force_complete``).
- ``on_expiration()``: extra work when the operation timed out (metrics, logging);
  runs after ``on_complete`` and only for the timer's completion.

``force_complete()`` returns True only for the caller that completed the operation; it
also cancels the operation's timer entry so completed work leaves the wheel at once.

Costs: ``force_complete`` O(1): one flag test-and-set under a module-wide lock, an O(1)
unlink, then ``on_complete``.  Memory: the ``TimerTask`` slots plus one flag.

Thread-safety: completion is safe against races, e.g. the timer's expiration on the
owner thread against ``force_complete`` from another thread: the flag flip is guarded
by ``_COMPLETION_LOCK``, held only for the test-and-set (never while user code runs),
so exactly one caller wins and ``on_complete`` runs once.  The timer entry is then
cancelled (deferred to the owner thread when the timer is bound to one).
``try_complete`` itself is called by the purgatory on its owner thread; subclasses
that also call it from other threads guard their own condition state.
"""

from __future__ import annotations

import threading
from abc import abstractmethod

from timer.timing_wheel import TimerTask

#: One lock for all operations: the critical section is two bytecodes (test, set), so a
#: shared lock costs no per-operation memory and sees negligible contention.
_COMPLETION_LOCK = threading.Lock()


class DelayedOperation(TimerTask):
    """Base class of purgatory operations; see the module docstring for the contract."""

    __slots__ = ("_completed",)

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self._completed = False

    @abstractmethod
    def try_complete(self) -> bool:
        """Return ``self.force_complete()`` if the operation can complete, else False."""

    @abstractmethod
    def on_complete(self) -> None:
        """Complete the operation (build the response); runs exactly once."""

    @abstractmethod
    def on_expiration(self) -> None:
        """Called after ``on_complete`` when the operation completed by timing out."""

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now if nobody did yet; True only for the caller that completed it."""
        with _COMPLETION_LOCK:
            if self._completed:
                return False
            self._completed = True
        self.cancel()
        self.on_complete()
        return True

    def run(self) -> None:
        """Timer expiry: complete the operation and, if this call did, report expiration."""
        if self.force_complete():
            self.on_expiration()
