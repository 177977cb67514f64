"""The futures ``Producer.send`` and ``send_bulk`` return: ``result()`` and Kafka's ``get()``.

``send`` returns a :class:`RecordFuture`: a light handle (a batch, an index, a
timestamp) on the :class:`BatchResult` its batch shares with every other record of
the batch, as Kafka's Java producer hands out a ``FutureRecordMetadata`` per record
over one ``ProduceRequestResult`` per batch.  The batch is completed once (one lock, one
``Event``, one list of callbacks); a record's :class:`~clients.types.RecordMetadata` is
built only when someone asks for it.  Its methods are those of
:class:`concurrent.futures.Future` that make sense for a send: ``result(timeout)``,
``get(timeout)`` (kafka-python's and Java's spelling), ``exception(timeout)``,
``done()``, ``add_done_callback(fn)`` (``fn(future)`` on the sender thread when the
batch completes, at once when it has; an exception it raises is logged and dropped),
``cancel()`` (always False: a queued record cannot be taken back), ``cancelled()``
and ``running()``.  It is not a ``concurrent.futures.Future``, so
``concurrent.futures.wait`` / ``as_completed`` do not take it; ``flush()`` or callbacks
serve that need.  (A ``Future`` per record cost about 6 us of the ~18 us per-record
``send`` path: its ``Condition`` and lock, and one ``set_result`` each on the sender
thread.)

``send_bulk`` returns a :class:`ProducerFuture`, a real :class:`concurrent.futures.Future`
(one per call) with ``get(timeout)``.

Both ``get`` and ``result`` wait at most ``timeout`` seconds (None: until done) and
raise the send's error, or :class:`SendTimeoutError` (both a
:class:`~clients.protocol.errors.RequestTimedOutError` and a builtin ``TimeoutError``)
when the wait ran out; the send itself goes on.

Costs: a RecordFuture is one small slotted object; ``result`` is an ``Event.wait`` and a
NamedTuple.  A BatchResult costs a lock and an Event per batch; completing it is O(its
callbacks).  Thread safety: completed on the sender thread (once; later calls are
ignored), waited on and given callbacks from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from clients.protocol.errors import RequestTimedOutError
from clients.types import RecordMetadata

T = TypeVar("T")
_log = logging.getLogger(__name__)


class SendTimeoutError(RequestTimedOutError, TimeoutError):
    """``get(timeout)`` ran out before the send completed (the send goes on)."""


class ProducerFuture(Future[T]):
    """``send_bulk``'s future: ``result(timeout)`` or ``get(timeout)`` (see the module)."""

    def get(self, timeout: float | None = None) -> T:
        """The send's result; raises its error, or SendTimeoutError after ``timeout`` s."""
        try:
            return self.result(timeout)
        except FutureTimeout:
            if self.done():  # the send's own error was a TimeoutError
                raise
            raise SendTimeoutError(f"send not completed within {timeout} s") from None


RecordCallback = Callable[["RecordFuture"], object]


class BatchResult:
    """The outcome one batch's records share (Kafka's ``ProduceRequestResult``)."""

    __slots__ = ("_callbacks", "_done", "_event", "_lock", "base_offset", "error",
                 "log_append_time_ms", "partition", "topic")  # fmt: skip

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: BaseException | None = None
        self._done = False
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[tuple[RecordFuture, RecordCallback]] = []

    @property
    def done(self) -> bool:
        return self._done

    def complete(self, base_offset: int, log_append_time_ms: int,
                 error: BaseException | None) -> None:  # fmt: skip
        """Record the outcome and wake every waiter, then run the callbacks (once)."""
        with self._lock:
            if self._done:
                return
            self.base_offset = base_offset
            self.log_append_time_ms = log_append_time_ms
            self.error = error
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
        self._event.set()
        for future, fn in callbacks:
            _call(fn, future)

    def wait(self, timeout: float | None) -> None:
        """Return once done; SendTimeoutError when ``timeout`` seconds pass first."""
        if not self._done and not self._event.wait(timeout):
            raise SendTimeoutError(f"send not completed within {timeout} s")

    def add_callback(self, future: RecordFuture, fn: RecordCallback) -> None:
        with self._lock:
            if not self._done:
                self._callbacks.append((future, fn))
                return
        _call(fn, future)


def _call(fn: RecordCallback, future: RecordFuture) -> None:
    try:
        fn(future)
    except Exception:
        _log.exception("a send callback raised (ignored)")


class RecordFuture:
    """One ``send``'s future: a record's place in its batch (see the module docstring)."""

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch: BatchResult, index: int, timestamp: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp

    def done(self) -> bool:
        return self._batch._done

    def running(self) -> bool:
        return not self._batch._done

    def cancel(self) -> bool:
        """Always False: a record handed to the producer cannot be taken back."""
        return False

    def cancelled(self) -> bool:
        return False

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata; its error, or SendTimeoutError after ``timeout`` s."""
        batch = self._batch
        batch.wait(timeout)
        if batch.error is not None:
            raise batch.error
        base = batch.base_offset
        ts = batch.log_append_time_ms
        return RecordMetadata(batch.topic, batch.partition,
                              base + self._index if base >= 0 else -1,
                              ts if ts >= 0 else self._timestamp)  # fmt: skip

    get = result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The send's error (None on success); SendTimeoutError after ``timeout`` s."""
        self._batch.wait(timeout)
        return self._batch.error

    def add_done_callback(self, fn: RecordCallback) -> None:
        """``fn(self)`` when the send completes (now, if it has)."""
        self._batch.add_callback(self, fn)

    def __repr__(self) -> str:
        batch = self._batch
        state = ("pending" if not batch._done
                 else "failed" if batch.error is not None else "done")  # fmt: skip
        return f"<RecordFuture {batch.topic}-{batch.partition} #{self._index} {state}>"
