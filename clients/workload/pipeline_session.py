"""One pipeline worker's session: a read_committed group consumer and a transactional
producer of one transactional id, driven by :mod:`clients.workload.pipeline`.

:class:`PipelineSession` is the calls the worker loop makes; :class:`MinikafkaSession`
implements them with our :class:`~clients.consumer.Consumer` (``group_id``,
``isolation_level="read_committed"``, no auto commit, ``auto_offset_reset="earliest"``)
and :class:`~clients.producer.Producer` (``transactional_id``); confluent-kafka's pair is
:class:`clients.workload.confluent_pipeline.ConfluentSession`.  Contract of each call:

- ``poll``: the records fetched (at most ``max_records``), read_committed;
- ``positions``: partition -> next offset to consume, for the assigned partitions whose
  position is known (past control batches: a partition whose last batches are markers
  has its position after them);
- ``begin`` / ``send`` (with the ``mk-txn`` header) / ``send_offsets`` (the positions,
  with the consumer's group metadata: generation and member id, KIP-447) / ``commit`` /
  ``abort``: the transaction;
- ``rewind``: after an abort, every assigned partition back to the group's committed
  offset (the log start when none), as Kafka's consume-transform-produce loop does;
- ``crash``: the worker dies: its consumer leaves the group without committing (a
  simulated death: the group rebalances at once instead of after the session timeout),
  its producer stays as it is, transaction open, until :meth:`close`;
- ``close``: both, without committing anything.

Errors are :class:`~clients.protocol.errors.MiniKafkaError` (timeouts
:class:`~clients.protocol.errors.RequestTimedOutError`).  Costs: the clients'.  Thread
safety: one session per worker thread.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.topics import TopicPartition

TAG_HEADER = "mk-txn"


class SourceRecord(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class PipelineSession(Protocol):
    def poll(self, timeout_s: float, max_records: int) -> list[SourceRecord]: ...

    def positions(self) -> dict[int, int]: ...

    def begin(self) -> None: ...

    def send(self, topic: str, key: bytes | None, value: bytes, tag: bytes) -> None: ...

    def send_offsets(self, positions: dict[int, int]) -> None: ...

    def commit(self) -> None: ...

    def abort(self) -> None: ...

    def rewind(self) -> None: ...

    def crash(self) -> None: ...

    def close(self) -> None: ...


class MinikafkaSession:
    """Our client's consumer and transactional producer (see the module docstring)."""

    def __init__(self, bootstrap: str, source_topic: str, group_id: str,
                 transactional_id: str, transaction_timeout_ms: int,
                 producer_options: dict[str, Any]) -> None:
        self.source_topic = source_topic
        self._producer = Producer(bootstrap, transactional_id=transactional_id,
                                  transaction_timeout_ms=transaction_timeout_ms,
                                  **producer_options)
        self._consumer: Consumer | None = None
        try:
            self._producer.init_transactions()
            self._consumer = Consumer(
                bootstrap, group_id=group_id, isolation_level="read_committed",
                enable_auto_commit=False, auto_offset_reset="earliest",
                client_id=f"{transactional_id}-consumer", session_timeout_ms=6_000,
                heartbeat_interval_ms=1_000, request_timeout_ms=10_000)
            self._consumer.subscribe([source_topic])
        except BaseException:
            self.close()
            raise

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            raise RuntimeError("the session's consumer is gone (crashed)")
        return self._consumer

    def poll(self, timeout_s: float, max_records: int) -> list[SourceRecord]:
        fetched = self.consumer.poll(int(timeout_s * 1000), max_records=max_records)
        return [SourceRecord(tp.partition, r.offset, r.key, r.value)
                for tp, records in fetched.items() for r in records]

    def positions(self) -> dict[int, int]:
        return {tp.partition: self.consumer.position(tp) for tp in self.consumer.assignment()}

    def begin(self) -> None:
        self._producer.begin_transaction()

    def send(self, topic: str, key: bytes | None, value: bytes, tag: bytes) -> None:
        self._producer.send(topic, value, key=key, headers=[(TAG_HEADER, tag)])

    def send_offsets(self, positions: dict[int, int]) -> None:
        self._producer.send_offsets_to_transaction(
            {TopicPartition(self.source_topic, p): o for p, o in positions.items()},
            self.consumer.group_metadata())

    def commit(self) -> None:
        self._producer.commit_transaction()

    def abort(self) -> None:
        self._producer.abort_transaction()

    def rewind(self) -> None:
        consumer = self.consumer
        assigned = consumer.assignment()
        committed = consumer.committed(assigned)
        for tp in assigned:
            meta = committed.get(tp)
            if meta is None:
                consumer.seek_to_beginning([tp])
            else:
                consumer.seek(tp, meta.offset)

    def crash(self) -> None:
        if self._consumer is not None:
            self._consumer.close(5_000)
            self._consumer = None

    def close(self) -> None:
        self.crash()
        self._producer.close(5.0)
