"""kafka-python's transactional producer behind the calls the transactional workload makes
(``minikafka workload --transactional --client kafka-python``).

:class:`KafkaPythonTxnProducer` wraps ``kafka.KafkaProducer`` (``transactional_id``,
idempotent, ``acks=all``) with the methods :mod:`clients.workload.transactional` calls on
our :class:`~clients.producer.Producer`: ``init_transactions``, ``begin_transaction``,
``send`` (a ``concurrent.futures.Future`` of a :class:`~clients.types.RecordMetadata`,
resolved by kafka-python's callbacks), ``flush``, ``commit_transaction``,
``abort_transaction`` and ``close``.  kafka-python's errors become ours so the
workload's outcome rules apply unchanged (:func:`translate`): ``KafkaTimeoutError`` ->
:class:`~clients.protocol.errors.RequestTimedOutError` (except from ``init_transactions``,
whose timeout is a plain ``MiniKafkaError``: see below),
fenced (``ProducerFencedError``, ``InvalidProducerEpochError``,
``TransactionCoordinatorFencedError``) -> ``ProducerFencedError``, anything else ->
``MiniKafkaError``.

kafka-python 3.0.12's ``commit_transaction``/``abort_transaction`` wait with no timeout
(``TransactionalRequestResult.wait()``) and cannot be called again while one is under
way, so each is run on a daemon thread and given :data:`CALL_TIMEOUT_S`: past it the call
fails with :class:`CallAbandonedError` (REQUEST_TIMED_OUT, but not retried; a commit's
outcome is then unknown to the workload, which restarts the producer) and the thread is
left to end with the producer.  After that, the producer's ``commit_transaction`` and
``abort_transaction`` fail at once (the abandoned request may be lost: waiting again
would only cost another :data:`CALL_TIMEOUT_S`) and ``close`` does not wait for a flush
(kafka-python's ``close`` would wait its whole timeout on a producer that cannot
drain).  This happens under faults: when the transaction coordinator was just killed,
kafka-python's sender (``kafka/producer/sender.py`` ``_maybe_send_pending_request``)
gets a connection error from ``await_ready`` with ``target_node`` already set, so the
handler is neither sent nor retried and the request never completes (a kafka-python bug;
seen about once per kill-coordinator run).  The same loss hits ``init_transactions``'s
InitProducerId: kafka-python's documented retry after its ``KafkaTimeoutError`` "waits for
the prior request", which was lost, so it would wait until the workload's
``INIT_DEADLINE_S`` (180 s: this made the faulted kafka-python test take ~190 s).  A
timed-out ``init_transactions`` therefore fails with a plain ``MiniKafkaError``: the
workload closes this producer and makes a new one, whose InitProducerId is sent afresh.
:data:`CALL_TIMEOUT_S` (also ``max_block_ms``) is 10 s, not kafka-python's 60 s: the
workload runs against a local cluster where a killed coordinator is replaced in ~2-4 s
(``broker_session_timeout_ms`` 2 s) and a healthy commit takes milliseconds, so a call
still waiting after 10 s has lost its request, and each such loss costs 10 s, not 30.
A constructor that cannot reach a broker (kafka-python bootstraps in ``__init__``)
raises ``MiniKafkaError`` too.

kafka-python is an optional dependency (the broker's compatibility tests use it): it is
imported when a producer is made.  Costs: kafka-python's; one extra thread per commit or
abort.  Thread safety: one producer per workload thread (kafka-python's sender thread
does the I/O).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from clients.producer.idempotence import ProducerFencedError
from clients.protocol.errors import ErrorCode, MiniKafkaError, RequestTimedOutError
from clients.types import RecordMetadata

CALL_TIMEOUT_S = 10.0
FENCED = ("ProducerFencedError", "InvalidProducerEpochError",
          "TransactionCoordinatorFencedError")


class CallAbandonedError(MiniKafkaError):
    """A kafka-python call still waiting after its deadline (:func:`call_with_deadline`):
    its request may be lost; it is not retried."""

    code = ErrorCode.REQUEST_TIMED_OUT


def translate(exc: BaseException) -> MiniKafkaError:
    """Our error for a kafka-python exception (see the module docstring)."""
    name = type(exc).__name__
    text = f"kafka-python: {name}: {exc}"
    if name in FENCED:
        return ProducerFencedError(text)
    if name == "KafkaTimeoutError":
        return RequestTimedOutError(text)
    return MiniKafkaError(text)


def call_with_deadline(call: Callable[[], Any], timeout_s: float, what: str) -> None:
    """Run ``call`` on a daemon thread; its exception is raised here, translated, and a
    call still running after ``timeout_s`` raises :class:`CallAbandonedError`."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=run, name=f"kafka-python-{what}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise CallAbandonedError(f"kafka-python: {what} did not finish in {timeout_s:.0f} s")
    if failure:
        raise translate(failure[0]) from failure[0]


class KafkaPythonTxnProducer:
    """A kafka-python transactional producer with our producer's transactional calls."""

    def __init__(self, bootstrap: str, *, transactional_id: str, transaction_timeout_ms: int,
                 client_id: str = "workload", **_options: Any) -> None:
        from kafka import KafkaProducer

        try:
            self._producer = KafkaProducer(
                bootstrap_servers=bootstrap, transactional_id=transactional_id,
                transaction_timeout_ms=transaction_timeout_ms, acks="all", linger_ms=5,
                client_id=client_id, max_block_ms=int(CALL_TIMEOUT_S * 1000))
        except Exception as exc:  # no broker reachable while bootstrapping
            raise translate(exc) from exc
        self._abandoned = ""  # the commit or abort left running past its deadline

    def _call(self, name: str, *args: Any) -> Any:
        from kafka.errors import KafkaError

        try:
            return getattr(self._producer, name)(*args)
        except KafkaError as exc:
            raise translate(exc) from exc

    def init_transactions(self) -> None:
        """Bounded by ``max_block_ms``; a timeout is not retryable here (its request may
        be lost: see the module docstring), so it is a plain ``MiniKafkaError``."""
        try:
            self._call("init_transactions")
        except RequestTimedOutError as exc:
            raise MiniKafkaError(f"{exc} (not retried on this producer: its "
                                 "InitProducerId may be lost)") from exc

    def begin_transaction(self) -> None:
        self._call("begin_transaction")

    def _complete(self, call: Callable[[], Any], what: str) -> None:
        if self._abandoned:
            raise MiniKafkaError(f"kafka-python: no {what}: this producer's {self._abandoned} "
                                 "did not finish (its request may be lost)")
        try:
            call_with_deadline(call, CALL_TIMEOUT_S, what)
        except CallAbandonedError:
            self._abandoned = what
            raise

    def commit_transaction(self) -> None:
        self._complete(self._producer.commit_transaction, "commit")

    def abort_transaction(self) -> None:
        self._complete(self._producer.abort_transaction, "abort")

    def send(self, topic: str, value: bytes, *, key: bytes) -> Future[RecordMetadata]:
        future: Future[RecordMetadata] = Future()
        sent = self._call("send", topic, value, key)
        sent.add_callback(lambda m: future.set_result(
            RecordMetadata(m.topic, m.partition, m.offset, m.timestamp)))
        sent.add_errback(lambda exc: future.set_exception(translate(exc)))
        return future

    def flush(self, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self._call("flush", timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Close the producer; its errors are ignored (nothing is left for it to do).
        kafka-python 3.0.12's ``close`` flushes first and raises when that times out
        (batches of partitions never added to the transaction cannot drain), before it
        force-closes its sender: the sender thread would then spin forever, so it is
        force-closed here (``_sender.force_close``, the call ``close`` would have made).
        After an abandoned commit or abort it does not wait at all."""
        if timeout_s is None:
            timeout_s = CALL_TIMEOUT_S
        try:
            self._producer.close(timeout=0 if self._abandoned else timeout_s)
        except Exception:  # kafka-python raises what its flush or last request failed with
            sender = getattr(self._producer, "_sender", None)
            if sender is not None and sender.is_alive():
                sender.force_close()
