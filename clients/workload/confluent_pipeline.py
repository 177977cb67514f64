"""confluent-kafka's consumer and transactional producer as a pipeline worker's session
(``minikafka workload --transactional --pipeline-workers K --client confluent``).

:class:`ConfluentSession` implements :class:`~clients.workload.pipeline_session.
PipelineSession` with ``confluent_kafka.Consumer`` (``group.id``,
``isolation.level=read_committed``, ``enable.auto.commit=false``,
``auto.offset.reset=earliest``) and :class:`~clients.workload.confluent_txn.
ConfluentTxnProducer` (``send_offsets_to_transaction`` with the consumer's
``consumer_group_metadata()``, as Kafka's exactly-once examples do).  librdkafka's
errors become ours (:func:`clients.workload.confluent_txn.translate`).  Positions are
``Consumer.position`` (librdkafka moves them past the control batches it skips) of the
partitions that delivered a record since they were last assigned (or sought); the others
are left out.  librdkafka keeps a partition's position across a revoke and a later
re-assignment until a record is delivered again.  Committing such a stale position (the
worker commits every assigned partition's, also in an offsets-only transaction) breaks
exactly-once both ways: below the group's committed offset (another member owned the
partition meanwhile and committed further) it moves the offset *back*, and the next
reader (a rewind after an abort, a new owner) processes those records again:
duplicates in B; above it (records read in a transaction that aborted while the
partition was away, so the rewind did not seek it) it skips them: lost.  Both were seen
(a crash test printed stale 1293 against committed 1290).  ``on_assign`` /
``on_revoke`` / ``on_lost`` therefore forget the partitions they name until their next
record.

The clients' ids are ``<transactional id>-producer`` / ``-consumer``.
``MINIKAFKA_LIBRDKAFKA_DEBUG`` (e.g. ``cgrp,eos,protocol``), when set, is librdkafka's
``debug`` for both clients of every session (its log goes to stderr): to see which
request a stalled worker waits for.

Costs: librdkafka's.  Thread safety: one session per worker thread.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from clients.protocol.errors import MiniKafkaError
from clients.workload.confluent_txn import CALL_TIMEOUT_S, ConfluentTxnProducer, translate
from clients.workload.pipeline_session import TAG_HEADER, SourceRecord

DEBUG_ENV = "MINIKAFKA_LIBRDKAFKA_DEBUG"


def debug_options() -> dict[str, str]:
    """librdkafka's ``debug`` from :data:`DEBUG_ENV` (none when unset)."""
    contexts = os.environ.get(DEBUG_ENV, "").strip()
    return {"debug": contexts} if contexts else {}


class ConfluentSession:
    """confluent-kafka's pair (see the module docstring)."""

    def __init__(self, bootstrap: str, source_topic: str, group_id: str,
                 transactional_id: str, transaction_timeout_ms: int,
                 producer_options: dict[str, Any]) -> None:
        from confluent_kafka import Consumer

        self.source_topic = source_topic
        # partitions that delivered a record since their last assignment or seek: only
        # their positions are this session's (see the module docstring)
        self._live: set[int] = set()
        self._producer = ConfluentTxnProducer(
            bootstrap, transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            client_id=producer_options.get("client_id", f"{transactional_id}-producer"),
            librdkafka_config=debug_options())
        self._consumer: Any = None
        try:
            self._producer.init_transactions()
            self._consumer = Consumer({
                "bootstrap.servers": bootstrap, "group.id": group_id,
                "isolation.level": "read_committed", "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "session.timeout.ms": 6_000,
                "client.id": f"{transactional_id}-consumer", **debug_options(),
            })  # fmt: skip
            self._consumer.subscribe([source_topic], on_assign=self._forget,
                                     on_revoke=self._forget, on_lost=self._forget)
        except BaseException:
            self.close()
            raise

    def _forget(self, _consumer: Any, partitions: list[Any]) -> None:
        """A rebalance callback (run inside ``consume``; confluent-kafka then assigns or
        unassigns itself): these partitions' positions are stale until a record."""
        self._live.difference_update(tp.partition for tp in partitions)

    def _consumer_call(self, name: str, *args: Any) -> Any:
        from confluent_kafka import KafkaException

        if self._consumer is None:
            raise MiniKafkaError("the session's consumer is gone (crashed)")
        try:
            return getattr(self._consumer, name)(*args)
        except KafkaException as exc:
            raise translate(exc) from exc

    def poll(self, timeout_s: float, max_records: int) -> list[SourceRecord]:
        messages = self._consumer_call("consume", max_records, timeout_s)
        out = []
        for m in messages:
            if m.error() is not None:
                continue  # partition EOF and transient errors: librdkafka retries
            out.append(SourceRecord(m.partition(), m.offset(), m.key(), m.value()))
            self._live.add(m.partition())
        return out

    def positions(self) -> dict[int, int]:
        assigned = self._consumer_call("assignment")
        if not assigned:
            return {}
        return {tp.partition: tp.offset for tp in self._consumer_call("position", assigned)
                if tp.offset >= 0 and tp.partition in self._live}

    def begin(self) -> None:
        self._producer.begin_transaction()

    def send(self, topic: str, key: bytes | None, value: bytes, tag: bytes) -> None:
        self._producer.send(topic, value, key=key or b"", headers=[(TAG_HEADER, tag)])

    def send_offsets(self, positions: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        metadata = self._consumer_call("consumer_group_metadata")
        self._producer.send_offsets_to_transaction(
            [TopicPartition(self.source_topic, p, o) for p, o in sorted(positions.items())],
            metadata)

    def commit(self) -> None:
        self._producer.commit_transaction()

    def abort(self) -> None:
        self._producer.abort_transaction()

    def rewind(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING

        assigned = self._consumer_call("assignment")
        if not assigned:
            return
        for tp in self._consumer_call("committed", assigned, CALL_TIMEOUT_S):
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            self._consumer_call("seek", tp)
            self._live.discard(tp.partition)

    def crash(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            with contextlib.suppress(Exception):  # one that cannot leave is gone all the same
                consumer.close()

    def close(self) -> None:
        self.crash()
        self._producer.close(5.0)
