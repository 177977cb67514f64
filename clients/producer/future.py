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
    """The outcome one batch's records share (Kafka's ``ProduceRequestResult``).

    A batch the broker refused as too large is split (:mod:`clients.producer.split`)
    and its result *chained* to the parts' results (:meth:`chain`): it is done when
    every part is, and each record's outcome is that of the part holding it
    (:meth:`locate`), so the futures ``send`` handed out stay valid.
    """

    __slots__ = ("_callbacks", "_done", "_event", "_lock", "_parent", "_parts", "_pending",
                 "base_offset", "error", "log_append_time_ms", "partition", "topic")  # fmt: skip

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
        self._parts: list[tuple[int, BatchResult]] | None = None  # (first index, part)
        self._pending = 0  # parts not yet done
        self._parent: BatchResult | None = None  # the result this one is a part of

    @property
    def done(self) -> bool:
        return self._done

    @property
    def chained(self) -> bool:
        """Its records travel in parts now (a split batch)."""
        return self._parts is not None

    def complete(self, base_offset: int, log_append_time_ms: int,
                 error: BaseException | None) -> None:  # fmt: skip
        """Record the outcome and wake every waiter, then run the callbacks (once)."""
        with self._lock:
            if self._done or self._parts is not None:
                return
            self.base_offset = base_offset
            self.log_append_time_ms = log_append_time_ms
            self.error = error
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
        self._finished(callbacks)

    def chain(self, parts: list[tuple[int, BatchResult]]) -> None:
        """The records now travel in ``parts`` (first record index, part result), in
        index order; call before any part can complete."""
        if not parts or parts[0][0] != 0:
            raise ValueError("parts must start at record 0")
        with self._lock:
            if self._done or self._parts is not None:
                raise RuntimeError("a completed or already split batch cannot be split")
            self._parts = parts
            self._pending = len(parts)
        for _, part in parts:
            part._parent = self

    def locate(self, index: int) -> tuple[BatchResult, int]:
        """The result holding record ``index`` and its index there (through splits)."""
        result = self
        while result._parts is not None:
            for first, part in reversed(result._parts):
                if index >= first:
                    result, index = part, index - first
                    break
        return result, index

    def _part_done(self) -> None:
        with self._lock:
            self._pending -= 1
            if self._pending > 0 or self._done:
                return
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
        self._finished(callbacks)

    def _finished(self, callbacks: list[tuple[RecordFuture, RecordCallback]]) -> None:
        self._event.set()
        for future, fn in callbacks:
            _call(fn, future)
        if self._parent is not None:
            self._parent._part_done()

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
        self._batch.wait(timeout)
        batch, index = self._batch.locate(self._index)
        if batch.error is not None:
            raise batch.error
        base = batch.base_offset
        ts = batch.log_append_time_ms
        return RecordMetadata(batch.topic, batch.partition,
                              base + index if base >= 0 else -1,
                              ts if ts >= 0 else self._timestamp)  # fmt: skip

    get = result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The send's error (None on success); SendTimeoutError after ``timeout`` s."""
        self._batch.wait(timeout)
        return self._batch.locate(self._index)[0].error

    def add_done_callback(self, fn: RecordCallback) -> None:
        """``fn(self)`` when the send completes (now, if it has)."""
        self._batch.add_callback(self, fn)

    def __repr__(self) -> str:
        batch = self._batch
        state = ("pending" if not batch._done
                 else "failed" if self.exception(0) is not None else "done")  # fmt: skip
        return f"<RecordFuture {batch.topic}-{batch.partition} #{self._index} {state}>"
