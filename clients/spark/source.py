"""The ``minikafka`` PySpark data source (Python data source API, Spark >= 4.2).

Usage::

    register_data_source(spark)
    spark.read.format("minikafka").option("bootstrap.servers", "127.0.0.1:9092") \\
        .option("subscribe", "t1,t2").load()
    spark.readStream.format("minikafka").option(...).load()

Options: :mod:`clients.spark.options`.  Columns: :data:`SCHEMA`, exactly those of Spark's
Kafka source; ``headers`` is always included (Spark adds it only with
``includeHeaders=true``; here it costs little, so there is no such option).

Batch: ``partitions()`` (driver) resolves every partition's ``[start, end)`` once with
ListOffsets (end ``latest`` = the high watermark at planning time) and returns one
:class:`OffsetRange` per topic partition, split every ``maxRecordsPerPartition`` records;
``read()`` (executor) reads one range exactly (:mod:`clients.spark.partition_reader`).

Streaming: offsets are ``{"topic": {"partition": next_offset}}``; Spark writes the end
offset of each micro-batch to its checkpoint's offset log before running it, and after a
restart re-plans the last uncommitted batch with the same start/end, so with an
idempotent sink (the file sink) every record lands exactly once.  ``initialOffset`` is
``startingOffsets`` resolved at query start; ``latestOffset`` is the high watermark of
every partition, capped by ``maxOffsetsPerTrigger`` (spread by backlog) and, under
``Trigger.AvailableNow``, by the high watermarks seen when the query started.
``commit`` has nothing to do (no consumer group; the checkpoint is the source of truth).
New partitions of subscribed topics are picked up at the next trigger, from earliest.

Writes: ``writer`` / ``streamWriter`` return the at-least-once sink of
:mod:`clients.spark.sink` (``df.write.format("minikafka")``, ``df.writeStream...``);
the options and columns are checked there.

Costs: planning is a few round trips on the driver per batch / trigger; reading is
O(bytes read).  Thread safety: Spark calls a reader from one thread; the stream reader's
planner consumer lives in Spark's long-running Python process for the source.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from clients.protocol.errors import InvalidConfigError, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.spark.options import EARLIEST, SourceOptions, parse_source_options
from clients.spark.partition_reader import read_range
from clients.spark.ranges import (
    OffsetPlanner,
    OffsetRange,
    cap_offsets,
    from_json_offsets,
    split_range,
    to_json_offsets,
)
from clients.spark.sink.options import parse_sink_options
from clients.spark.sink.writer import MiniKafkaBatchWriter, MiniKafkaStreamWriter, check_sink

__all__ = ["SCHEMA", "MiniKafkaDataSource", "register_data_source"]

SCHEMA = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()),
    StructField("topic", StringType()), StructField("partition", IntegerType()),
    StructField("offset", LongType()), StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
    ]))),
])  # fmt: skip


def register_data_source(spark: SparkSession) -> None:
    """Make ``format("minikafka")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(MiniKafkaDataSource)


class MiniKafkaDataSource(DataSource):
    """Format ``minikafka``: batch and streaming reads of minikafka topics, and the
    at-least-once sink (:mod:`clients.spark.sink`)."""

    @classmethod
    def name(cls) -> str:
        return "minikafka"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return MiniKafkaBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return MiniKafkaStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise InvalidConfigError("Save mode Overwrite not allowed for Kafka. Allowed save "
                                     "modes are Append and ErrorIfExists (default).")
        options = parse_sink_options(self.options)
        return MiniKafkaBatchWriter(options, check_sink(schema, options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_sink_options(self.options)  # complete mode appends, as Spark's sink
        return MiniKafkaStreamWriter(options, check_sink(schema, options))


def _check_schema(schema: StructType) -> None:
    if schema != SCHEMA:
        raise InvalidConfigError(
            f"the minikafka source has a fixed schema ({SCHEMA.simpleString()}); "
            f"a user schema is not supported, got {schema.simpleString()}"
        )


def _plan(options: SourceOptions, start: dict[TopicPartition, int],
          end: dict[TopicPartition, int]) -> list[InputPartition]:
    out: list[InputPartition] = []
    for tp in sorted(end):
        out.extend(split_range(tp, start[tp], end[tp], options.max_records_per_partition))
    return out


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, OffsetRange):
        raise TypeError(f"not a minikafka OffsetRange: {partition!r}")
    return read_range(options, partition)


class MiniKafkaBatchReader(DataSourceReader):
    """``spark.read.format("minikafka")``: a fixed set of ranges planned once."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        planner = OffsetPlanner(self.options)
        try:
            tps = planner.topic_partitions()
            bounds = planner.bounds(tps)
            start = planner.resolve(self.options.starting_offsets, tps, "startingOffsets", bounds)
            end = planner.resolve(self.options.ending_offsets, tps, "endingOffsets", bounds)
        finally:
            planner.close()
        backwards = [f"{tp.topic}-{tp.partition}: {start[tp]} > {end[tp]}"
                     for tp in tps if start[tp] > end[tp]]  # fmt: skip
        if backwards:
            raise InvalidConfigError(
                "startingOffsets is after endingOffsets for " + ", ".join(backwards)
            )
        return _plan(self.options, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class MiniKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("minikafka")``: micro-batches between checkpointed
    offsets (see the module docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner = OffsetPlanner(options)
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow

    def initialOffset(self) -> dict[str, Any]:
        tps = self._planner.topic_partitions()
        bounds = self._planner.bounds(tps)
        start = self._planner.resolve(self.options.starting_offsets, tps, "startingOffsets",
                                      bounds)  # fmt: skip
        return to_json_offsets(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def _latest(self) -> dict[TopicPartition, int]:
        tps = self._planner.topic_partitions()
        return self._planner.list_offsets(tps, -1)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json_offsets(start)
        latest = self._target if self._target is not None else self._latest()
        new = [tp for tp in latest if tp not in begin]
        begin.update(self._planner.list_offsets(new, EARLIEST))
        end = {tp: max(begin[tp], hw) for tp, hw in latest.items()}
        for tp, offset in begin.items():
            end.setdefault(tp, offset)  # a partition no longer listed stays where it was
        if isinstance(limit, ReadMaxRows):
            end = cap_offsets(begin, end, limit.max_rows)
        elif not isinstance(limit, ReadAllAvailable):
            raise InvalidConfigError(f"the minikafka source does not support {limit!r}")
        return to_json_offsets(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """For the query's progress report only: None when the cluster does not answer."""
        try:
            return to_json_offsets(self._latest())
        except MiniKafkaError:
            return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, until = from_json_offsets(start), from_json_offsets(end)
        new = [tp for tp in until if tp not in begin]
        begin.update(self._planner.list_offsets(new, EARLIEST))
        return _plan(self.options, begin, until)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the query's checkpoint records the offsets."""

    def stop(self) -> None:
        self._planner.close()
