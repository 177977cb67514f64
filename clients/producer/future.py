"""The futures ``Producer.send`` and ``send_bulk`` return: ``result()`` and Kafka's ``get()``.

:class:`ProducerFuture` is a :class:`concurrent.futures.Future` (``result``,
``add_done_callback``, ``exception``, ``as_completed`` all work) with ``get(timeout)``
as kafka-python's and Java's producers spell it.  ``get`` waits at most ``timeout``
seconds (None: until done) and raises the send's error, or :class:`SendTimeoutError`
(both a :class:`~clients.protocol.errors.RequestTimedOutError` and a builtin
``TimeoutError``) when the wait ran out; the send itself goes on.

Costs: those of ``Future``.  Thread safety: as ``Future`` (resolved on the sender thread,
waited on from any).
"""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from clients.protocol.errors import RequestTimedOutError

T = TypeVar("T")


class SendTimeoutError(RequestTimedOutError, TimeoutError):
    """``get(timeout)`` ran out before the send completed (the send goes on)."""


class ProducerFuture(Future[T]):
    """A send's future: ``result(timeout)`` or ``get(timeout)`` (see the module)."""

    def get(self, timeout: float | None = None) -> T:
        """The send's result; raises its error, or SendTimeoutError after ``timeout`` s."""
        try:
            return self.result(timeout)
        except FutureTimeout:
            if self.done():  # the send's own error was a TimeoutError
                raise
            raise SendTimeoutError(f"send not completed within {timeout} s") from None
