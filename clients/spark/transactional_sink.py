"""A transactional Spark sink: each micro-batch's rows reach a minikafka topic in one
Kafka transaction that also records the batch id, so a restarted query neither loses
nor repeats output (Spark's own Kafka sink is at-least-once).

Usage (a ``foreachBatch`` function; the DataFrame has ``value`` and optionally ``key``
and ``partition`` columns, string or binary, as Spark's Kafka sink)::

    sink = TransactionalSink(bootstrap, "out", transactional_id="orders-to-out")
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()
    ...
    sink.close()

How the batch id and the commit are tied:

1. One transactional producer on the driver, ``transactional.id`` given by the user and
   stable for the query (one id per checkpoint: two queries with the same id fence each
   other).  ``init_transactions`` at the first batch of a run fences an older run's
   producer and aborts its open transaction (a crash before the Kafka commit).
2. The sink's *progress* is a consumer-group offset: group ``transactional_id`` (the
   "sink group"), partition 0 of the output topic, offset = last committed batch id + 1.
   It is written with ``send_offsets_to_transaction`` inside the batch's transaction, so
   the rows and the progress commit or abort together (Kafka's exactly-once
   consume-transform-produce, with Spark's batch id as the "input offset").
3. Before its first batch (and after a failed one) the sink reads the group's committed
   offset (after ``init_transactions``, which completes or aborts any transaction of
   ours still pending, so the offset is final); later batches of the run use the value
   it committed itself (Spark runs batches in order; a failed batch fails the query).
   If it is > N, batch N was committed to Kafka but Spark crashed before its
   checkpoint's ``commits/N``: Spark replays N with the same id (its offset log fixes
   the input), the sink skips it.  Otherwise it writes the rows, commits offset N + 1
   and the transaction.
4. Readers must read the output with ``read_committed`` (an aborted attempt's rows stay
   in the log as aborted records).

Failure points: a crash before ``commit_transaction`` returns leaves an open (or
prepared) transaction: the next run's ``init_transactions`` aborts it (or finishes a
prepared commit, which the committed offset then shows), and the replayed batch is
written again or skipped accordingly.  Two hooks mark the failure points for tests:
``before_commit(batch_id)`` runs once the batch's rows are in the log (flushed) and its
progress offset is sent, before ``commit_transaction`` (the transaction is open);
``on_committed(batch_id)`` runs right after the Kafka commit and before Spark's
checkpoint commit (``commits/N``).  Tests raise from them, or SIGKILL the driver process
while it waits in one, to crash the query exactly there; benchmarks may time with them.

Covered failure points (tests/clients/spark/test_transactions.py): the driver process
SIGKILLed with a batch's transaction open, and SIGKILLed after a batch's Kafka commit
but before Spark's ``commits/N`` (also: the query failing there by an exception, and a
crashed run's open transaction aborted by the next run).  A kill anywhere else falls
into one of these two cases or is Spark's own (before ``offsets/N`` is written the
batch is not planned yet; after ``commits/N`` it is done).  Not covered: two queries
running at once with one ``transactional_id`` (they fence each other: the older fails),
and a checkpoint deleted or reset while the sink group keeps its offset (the sink then
skips batch ids it has seen: give a new checkpoint a new ``transactional_id``).

Costs: every row passes through the driver: ``DataFrame.toArrow()`` (one Spark job per
micro-batch; the whole micro-batch in driver memory, so bound it with the source's
``maxOffsetsPerTrigger``), then one ``Producer.send`` per row: throughput is one Python
producer's, plus per batch the AddOffsetsToTxn + TxnOffsetCommit and EndTxn round trips (and one
OffsetFetch per run).  Not thread-safe: Spark calls a ``foreachBatch`` function from one thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame

from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.errors import InvalidConfigError
from clients.protocol.topics import TopicPartition
from clients.types import OffsetAndMetadata

__all__ = ["SinkStats", "TransactionalSink"]


@dataclass
class SinkStats:
    """What this sink object did since it was made (for tests and benchmarks)."""

    batches_written: int = 0
    batches_skipped: int = 0
    records_written: int = 0


class TransactionalSink:
    """A ``foreachBatch`` function writing each micro-batch in one transaction (see the
    module docstring for the contract)."""

    def __init__(
        self, bootstrap_servers: str, topic: str, transactional_id: str, *,
        transaction_timeout_ms: int = 60_000, request_timeout_ms: int = 30_000,
        linger_ms: int = 5, on_committed: Callable[[int], None] | None = None,
        before_commit: Callable[[int], None] | None = None,
    ) -> None:  # fmt: skip
        if not transactional_id:
            raise InvalidConfigError("TransactionalSink needs a non-empty transactional_id")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.linger_ms = linger_ms
        self.on_committed = on_committed
        self.before_commit = before_commit
        self.stats = SinkStats()
        self._progress_tp = TopicPartition(topic, 0)
        self._producer: Producer | None = None
        self._reader: Consumer | None = None
        self._next_batch_id: int | None = None  # None: not read from Kafka in this run

    @property
    def sink_group(self) -> str:
        """The consumer group whose offset records the next batch id to write."""
        return self.transactional_id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        producer = self._ensure_producer()
        if self._next_batch_id is None:
            self._next_batch_id = self.next_batch_id()
        if batch_id < self._next_batch_id:
            self.stats.batches_skipped += 1  # committed to Kafka before a crash: a replay
            return
        columns = set(batch.columns)
        if "value" not in columns:
            raise InvalidConfigError(
                f"the transactional sink needs a 'value' column, got {batch.columns}"
            )
        has_key, has_partition = "key" in columns, "partition" in columns
        producer.begin_transaction()
        try:
            table = batch.toArrow()  # one Spark job; the micro-batch in driver memory
            values = _column(table, "value")
            keys = _column(table, "key") if has_key else [None] * len(values)
            partitions = (
                table.column("partition").to_pylist() if has_partition else [None] * len(values)
            )
            for value, key, partition in zip(values, keys, partitions, strict=True):
                producer.send(self.topic, value, key=key, partition=partition)
            sent = len(values)
            producer.send_offsets_to_transaction(
                {self._progress_tp: OffsetAndMetadata(batch_id + 1, f"spark batch {batch_id}")},
                self.sink_group,
            )
            if self.before_commit is not None:
                producer.flush()  # the rows are in the log, uncommitted, when the hook runs
                self.before_commit(batch_id)
            producer.commit_transaction()
        except BaseException:
            self._next_batch_id = None  # read it again from Kafka before the next batch
            self._abort_quietly(producer)
            raise
        self._next_batch_id = batch_id + 1
        self.stats.batches_written += 1
        self.stats.records_written += sent
        if self.on_committed is not None:
            self.on_committed(batch_id)

    def next_batch_id(self) -> int:
        """The sink group's committed offset: the first batch id not yet in Kafka."""
        if self._reader is None:
            self._reader = Consumer(
                self.bootstrap_servers,
                group_id=self.sink_group,
                enable_auto_commit=False,
                request_timeout_ms=self.request_timeout_ms,
                client_id=f"minikafka-spark-sink-{self.transactional_id}",
            )
        committed = self._reader.committed([self._progress_tp]).get(self._progress_tp)
        return 0 if committed is None else committed.offset

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _ensure_producer(self) -> Producer:
        if self._producer is None:
            producer = Producer(
                self.bootstrap_servers,
                transactional_id=self.transactional_id,
                transaction_timeout_ms=self.transaction_timeout_ms,
                request_timeout_ms=self.request_timeout_ms,
                linger_ms=self.linger_ms,
            )
            try:
                producer.init_transactions()
            except BaseException:
                producer.close()
                raise
            self._producer = producer
        return self._producer

    def _abort_quietly(self, producer: Producer) -> None:
        """Abort after a failed batch; if even that fails, drop the producer so the next
        batch (or run) starts over with ``init_transactions``, which aborts for us."""
        try:
            producer.abort_transaction()
        except Exception:
            producer.close()
            self._producer = None


def _column(table: pa.Table, name: str) -> list[bytes | None]:
    """A string or binary column as bytes (Spark's Kafka sink accepts both)."""
    column = table.column(name)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if v is None else v.encode() for v in column.to_pylist()]
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column.to_pylist()  # type: ignore[no-any-return]
    raise InvalidConfigError(
        f"the transactional sink writes string or binary columns; {name!r} is {column.type}"
    )
