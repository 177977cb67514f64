"""confluent-kafka's transactional producer behind the calls the transactional workload
makes (``minikafka workload --transactional --client confluent``).

:class:`ConfluentTxnProducer` wraps ``confluent_kafka.Producer`` (librdkafka;
``transactional.id``, ``enable.idempotence``, ``acks=all``) with the methods
:mod:`clients.workload.transactional` calls on our :class:`~clients.producer.Producer`:
``init_transactions``, ``begin_transaction``, ``send`` (a ``concurrent.futures.Future``
of a :class:`~clients.types.RecordMetadata`, resolved by librdkafka's delivery report),
``flush``, ``commit_transaction``, ``abort_transaction``, ``close``, and for the
pipeline ``send_offsets_to_transaction``, record headers and more librdkafka settings
(``librdkafka_config``, e.g. ``debug``).  librdkafka's
``KafkaException`` becomes our errors so the workload's outcome rules apply unchanged:
retriable -> :class:`~clients.protocol.errors.RequestTimedOutError` (the same call is
retried), ``txn_requires_abort`` -> ``TransactionAbortableError``, fatal (fenced) ->
``ProducerFencedError``, anything else -> ``MiniKafkaError``.

confluent-kafka is an optional dependency (the broker's compatibility tests use it): it is
imported when a producer is made.  Costs: librdkafka's; delivery reports are served by
``poll(0)`` after each send and by flush/commit.  Thread safety: one producer per
workload thread (librdkafka's own threads do the I/O).
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future
from typing import Any

from clients.producer.idempotence import ProducerFencedError
from clients.producer.transactions.state import TransactionAbortableError
from clients.protocol.errors import MiniKafkaError, RequestTimedOutError
from clients.types import RecordMetadata

CALL_TIMEOUT_S = 30.0


def translate(exc: Exception) -> MiniKafkaError:
    """Our error for a librdkafka ``KafkaException`` (see the module docstring)."""
    error = exc.args[0] if exc.args else None
    text = f"confluent-kafka: {error}"
    if error is not None and hasattr(error, "fatal"):
        if error.fatal():
            return ProducerFencedError(text)
        if error.txn_requires_abort():
            return TransactionAbortableError(text)
        if error.retriable():
            return RequestTimedOutError(text)
    return MiniKafkaError(text)


class ConfluentTxnProducer:
    """A confluent-kafka transactional producer with our producer's transactional calls."""

    def __init__(self, bootstrap: str, *, transactional_id: str, transaction_timeout_ms: int,
                 client_id: str = "workload", librdkafka_config: dict[str, str] | None = None,
                 **_options: Any) -> None:
        from confluent_kafka import Producer as LibrdkafkaProducer

        self._producer = LibrdkafkaProducer({
            "bootstrap.servers": bootstrap, "transactional.id": transactional_id,
            "transaction.timeout.ms": transaction_timeout_ms, "enable.idempotence": True,
            "acks": "all", "linger.ms": 5, "client.id": client_id,
            **(librdkafka_config or {}),
        })  # fmt: skip

    def _call(self, name: str, *args: Any) -> None:
        from confluent_kafka import KafkaException

        try:
            getattr(self._producer, name)(*args)
        except KafkaException as exc:
            raise translate(exc) from exc

    def init_transactions(self) -> None:
        self._call("init_transactions", CALL_TIMEOUT_S)

    def begin_transaction(self) -> None:
        self._call("begin_transaction")

    def commit_transaction(self) -> None:
        self._call("commit_transaction", CALL_TIMEOUT_S)

    def abort_transaction(self) -> None:
        self._call("abort_transaction", CALL_TIMEOUT_S)

    def send_offsets_to_transaction(self, offsets: list[Any], group_metadata: Any) -> None:
        """``offsets``: confluent_kafka TopicPartitions; ``group_metadata``: the consumer's
        ``consumer_group_metadata()`` (the pipeline, :mod:`clients.workload.pipeline`)."""
        self._call("send_offsets_to_transaction", offsets, group_metadata, CALL_TIMEOUT_S)

    def send(self, topic: str, value: bytes, *, key: bytes,
             headers: list[tuple[str, str | bytes | None]] | None = None) -> Future[RecordMetadata]:
        from confluent_kafka import KafkaException

        future: Future[RecordMetadata] = Future()

        def delivered(error: Any, message: Any) -> None:
            if error is not None:
                future.set_exception(translate(KafkaException(error)))
            else:
                future.set_result(RecordMetadata(message.topic(), message.partition(),
                                                 message.offset(), -1))

        try:
            self._producer.produce(topic, value, key, on_delivery=delivered,
                                   headers=headers or None)
        except (KafkaException, BufferError) as exc:
            raise translate(exc) from exc
        self._producer.poll(0)
        return future

    def flush(self, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self._call("flush", timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Flush what is queued (a fenced producer's error is ignored: nothing is left for
        it to do); librdkafka frees the producer when it is garbage.  confluent-kafka
        2.x's ``flush`` of a fenced producer raises ``SystemError`` ("KafkaException
        returned a result with an exception set"): ignored too."""
        with contextlib.suppress(MiniKafkaError, SystemError):
            self.flush(CALL_TIMEOUT_S if timeout_s is None else timeout_s)
