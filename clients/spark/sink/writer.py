"""The ``minikafka`` sink's writers: ``df.write.format("minikafka")`` (batch) and
``df.writeStream.format("minikafka")`` (streaming), at-least-once as Spark's Kafka sink.

Contract (Spark's Kafka sink's): each Spark task sends its rows with one producer of
its own (idempotent, ``acks=all`` unless ``kafka.*`` options say otherwise), flushes and
fails if any send failed, so a task that succeeds has every row acknowledged.  A failed
task is retried by Spark and a failed micro-batch re-run after a restart: rows sent
before the failure are then written again (duplicates, never loss).  ``commit`` /
``abort`` have nothing to do: nothing is staged.  For exactly-once output use
:class:`clients.spark.transactional_sink.TransactionalSink`.

Per row: ``topic`` = the ``topic`` option, else the row's ``topic`` (null: Spark's
error); ``partition`` = the row's ``partition`` when not null, else the producer's
partitioner (key hash, or sticky for null keys); ``key`` / ``value`` as bytes (strings
UTF-8 encoded; null stays null); ``headers`` as (key, value) pairs; the record
timestamp is the producer's (Spark's sink does not write the ``timestamp`` column).

Save mode (a batch write must say ``.mode("append")``; Spark decides this, not the sink).
Spark's Kafka sink takes ``ErrorIfExists`` (the default) and ``Append`` alike for a
batch write and refuses ``Overwrite`` / ``Ignore`` (``KafkaSourceProvider.createRelation``:
"Save mode ... not allowed for Kafka. Allowed save modes are Append and ErrorIfExists
(default).").  A Python data source never sees the default mode: Spark 4.3.0's
``DataFrameWriter.saveCommand`` (DataFrameWriter.scala:242, reached from ``save``) plans
``Append`` / ``Overwrite`` for a V2 ``TableProvider`` (a Python data source is one,
``PythonTableProvider``), and for ``ErrorIfExists`` / ``Ignore`` creates a table only
through a provider with ``SupportsCatalogOptions``, which a Python data source cannot
have; any other provider whose table supports batch writes gets
``QueryCompilationErrors.writeWithSaveModeUnsupportedBySourceError``:
``[UNSUPPORTED_DATA_SOURCE_SAVE_MODE] The data source "minikafka" cannot be written in the
"ErrorIfExists" mode. Please use either the "Append" or "Overwrite" mode instead.
SQLSTATE: 0A000`` - before ``DataSource.writer(schema, overwrite)`` is called (that API
only hears ``overwrite``).  Listing the source in ``spark.sql.sources.useV1SourceList``
does not help (the same error: there is no V1 writer to fall back to).  So the default
mode cannot be accepted from here; ``overwrite`` is refused in
:meth:`clients.spark.source.MiniKafkaDataSource.writer` with Spark's Kafka message, and
``ignore`` is refused by Spark as above.

The writer objects are built on the driver (``writer(schema, overwrite)`` checks the
columns and options there, so a bad job fails before any task runs) and pickled to
the executors, where ``write`` runs once per task with Arrow record batches.

Costs: one Producer per task (a metadata round trip and InitProducerId before the
first send; at most ``kafka.buffer.memory`` bytes queued); per row one ``send`` and one
done-callback.  Not shared between threads: Spark calls ``write`` once per task.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from clients.producer.future import RecordFuture
from clients.producer.producer import Producer
from clients.protocol.errors import InvalidConfigError
from clients.spark.sink.options import SinkColumns, SinkOptions, sink_columns

__all__ = ["MiniKafkaBatchWriter", "MiniKafkaStreamWriter", "SinkCommitMessage",
           "check_sink", "write_batches"]  # fmt: skip

NULL_TOPIC = ("null topic present in the data. Use the topic option for setting a "
              "default topic.")  # fmt: skip


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task wrote: its record count."""

    records: int


def check_sink(schema: StructType, options: SinkOptions) -> SinkColumns:
    """The DataFrame's sink columns, checked as Spark's Kafka sink checks them."""
    types = {field.name: field.dataType.simpleString() for field in schema.fields}
    return sink_columns(types, options.topic)


class _FirstError:
    """Done-callback target: remembers the first failed send (called on the sender
    thread; a single reference assignment, so no lock)."""

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def __call__(self, future: RecordFuture) -> None:
        if self.error is None:
            self.error = future.exception(0)

    def raise_if_any(self) -> None:
        if self.error is not None:
            raise self.error


def write_batches(options: SinkOptions, columns: SinkColumns,
                  batches: Iterable[pa.RecordBatch]) -> SinkCommitMessage:  # fmt: skip
    """Send every row of ``batches`` with a new producer; return once all are
    acknowledged, or raise the first send's error."""
    producer = Producer(options.bootstrap_servers, **dict(options.producer_config))
    failed = _FirstError()
    records = 0
    try:
        for batch in batches:
            for topic, value, key, headers, partition in _rows(options, columns, batch):
                if topic is None:
                    raise InvalidConfigError(NULL_TOPIC)
                future = producer.send(topic, value, key=key, headers=headers,
                                       partition=partition)  # fmt: skip
                future.add_done_callback(failed)
                records += 1
            failed.raise_if_any()  # fail early, as Spark's writer checks between rows
        producer.flush()
        failed.raise_if_any()
    except BaseException:
        producer.close(timeout_s=0)
        raise
    producer.close()
    return SinkCommitMessage(records)


def _rows(options: SinkOptions, columns: SinkColumns,
          batch: pa.RecordBatch) -> Iterator[tuple[Any, ...]]:  # fmt: skip
    n = batch.num_rows
    values = _bytes_column(batch, "value")
    keys = _bytes_column(batch, "key") if columns.key else repeat(None, n)
    topics = batch.column("topic").to_pylist() if columns.topic else repeat(options.topic, n)
    partitions = batch.column("partition").to_pylist() if columns.partition else repeat(None, n)
    headers: Iterable[Any] = repeat(None, n)
    if columns.headers:
        headers = ([(h["key"], h["value"]) for h in row] if row else None
                   for row in batch.column("headers").to_pylist())  # fmt: skip
    return zip(topics, values, keys, headers, partitions, strict=False)


def _bytes_column(batch: pa.RecordBatch, name: str) -> list[bytes | None]:
    column = batch.column(name)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if v is None else v.encode() for v in column.to_pylist()]
    return column.to_pylist()  # type: ignore[no-any-return]  # binary (checked on the driver)


class MiniKafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("minikafka")``: each task sends its rows (see the module
    docstring); Spark allows only ``mode("append")`` for a batch write to a Python data
    source (module docstring: the save mode), and ``overwrite`` is refused as Spark's
    Kafka sink refuses it."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_batches(self.options, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing staged: every row was acknowledged by its task."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: rows already sent stay (at-least-once, as Spark's sink)."""


class MiniKafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("minikafka")``: every micro-batch as a batch write;
    a micro-batch re-run after a failure writes its rows again (at-least-once)."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_batches(self.options, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing staged: every row was acknowledged by its task."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: rows already sent stay (at-least-once)."""
