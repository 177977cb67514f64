"""The ``minikafka`` PySpark data source (Python data source API, Spark >= 4.2).

Usage::

    register_data_source(spark)
    spark.read.format("minikafka").option("bootstrap.servers", "127.0.0.1:9092") \\
        .option("subscribe", "t1,t2").load()
    spark.readStream.format("minikafka").option(...).load()

Options: :mod:`clients.spark.options`.  Columns: :data:`SCHEMA`, exactly those of Spark's
Kafka source; ``headers`` only with ``includeHeaders=true`` (:func:`source_schema`), as
in Spark.

Batch: ``partitions()`` (driver) resolves every partition's ``[start, end)`` once with
ListOffsets (end ``latest`` = the high watermark at planning time; by timestamp when a
timestamp option is given) and returns one :class:`OffsetRange` per topic partition,
split every ``maxRecordsPerPartition`` records and then up to ``minPartitions``
(:func:`clients.spark.ranges.min_partitions_split`); ``read()`` (executor) reads one
range exactly (:mod:`clients.spark.partition_reader`).

Streaming: offsets are ``{"topic": {"partition": next_offset}}``; Spark writes the end
offset of each micro-batch to its checkpoint's offset log before running it, and after a
restart re-plans the last uncommitted batch with the same start/end, so with an
idempotent sink (the file sink) every record lands exactly once.  ``initialOffset`` is
``startingOffsets`` resolved at query start; ``latestOffset`` is the high watermark of
every partition, capped by ``maxOffsetsPerTrigger`` (spread by backlog) and, under
``Trigger.AvailableNow``, by the high watermarks seen when the query started.  With
``minOffsetsPerTrigger`` a trigger whose backlog is smaller returns the start offsets
(no micro-batch) until ``maxTriggerDelay`` has passed since the last micro-batch (the
first trigger of a query always runs; ``Trigger.AvailableNow`` ignores the minimum),
as Spark's Kafka source; the delay is measured on an injected monotonic clock.
``commit`` has nothing to do (no consumer group; the checkpoint is the source of truth).
New partitions of subscribed topics are picked up at the next trigger, from earliest.
Partitions that are gone (a deleted topic) fail the query with Spark's "... are gone.
Some data may have been missed" under ``failOnDataLoss=true``; with ``false`` they are
logged once as a warning and left where they were (no more rows from them).

Writes: ``writer`` / ``streamWriter`` return the at-least-once sink of
:mod:`clients.spark.sink` (``df.write.format("minikafka")``, ``df.writeStream...``);
the options and columns are checked there.

Costs: planning is a few round trips on the driver per batch / trigger; reading is
O(bytes read).  Thread safety: Spark calls a reader from one thread; the stream reader's
planner consumer lives in Spark's long-running Python process for the source.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
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

from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.spark.options import EARLIEST, SourceOptions, parse_source_options, wants_headers
from clients.spark.partition_reader import read_range
from clients.spark.ranges import (
    OffsetPlanner,
    OffsetRange,
    cap_offsets,
    from_json_offsets,
    min_partitions_split,
    split_range,
    to_json_offsets,
)
from clients.spark.sink.options import parse_sink_options
from clients.spark.sink.writer import MiniKafkaBatchWriter, MiniKafkaStreamWriter, check_sink

__all__ = ["SCHEMA", "MiniKafkaDataSource", "register_data_source", "source_schema"]

log = logging.getLogger(__name__)

SCHEMA = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()),
    StructField("topic", StringType()), StructField("partition", IntegerType()),
    StructField("offset", LongType()), StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
    ]))),
])  # fmt: skip


def source_schema(include_headers: bool) -> StructType:
    """:data:`SCHEMA`, without ``headers`` unless ``includeHeaders=true`` (Spark's rule)."""
    if include_headers:
        return SCHEMA
    return StructType([f for f in SCHEMA.fields if f.name != "headers"])


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
        return source_schema(wants_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_source_options(self.options, streaming=False)
        _check_schema(schema, options)
        return MiniKafkaBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_source_options(self.options, streaming=True)
        _check_schema(schema, options)
        return MiniKafkaStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise InvalidConfigError("Save mode Overwrite not allowed for Kafka. Allowed save "
                                     "modes are Append and ErrorIfExists (default).")
        options = parse_sink_options(self.options)
        return MiniKafkaBatchWriter(options, check_sink(schema, options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_sink_options(self.options)  # complete mode appends, as Spark's sink
        return MiniKafkaStreamWriter(options, check_sink(schema, options))


def _check_schema(schema: StructType, options: SourceOptions) -> None:
    fixed = source_schema(options.include_headers)
    if schema != fixed:
        raise InvalidConfigError(
            f"the minikafka source has a fixed schema ({fixed.simpleString()}); "
            f"a user schema is not supported, got {schema.simpleString()}"
        )


def _plan(options: SourceOptions, start: dict[TopicPartition, int],
          end: dict[TopicPartition, int]) -> list[InputPartition]:
    ranges: list[OffsetRange] = []
    for tp in sorted(end):
        ranges.extend(split_range(tp, start[tp], end[tp], options.max_records_per_partition))
    if options.min_partitions is not None:
        ranges = min_partitions_split(ranges, options.min_partitions)
    return list(ranges)


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, OffsetRange) and getattr(partition, "value", 0) is None:
        return iter(())  # nothing planned: Spark reads one placeholder InputPartition(None)
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
            start = planner.starting(tps, bounds)
            end = planner.ending(tps, bounds)
        finally:
            planner.close()
        backwards = [f"{tp.topic}-{tp.partition}: {start[tp]} > {end[tp]}"
                     for tp in tps if start[tp] > end[tp]]  # fmt: skip
        if backwards:
            raise InvalidConfigError(
                "the starting offset is after the ending offset for " + ", ".join(backwards)
            )
        return _plan(self.options, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class MiniKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("minikafka")``: micro-batches between checkpointed
    offsets (see the module docstring)."""

    def __init__(self, options: SourceOptions,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self._planner = OffsetPlanner(options)
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow
        self._clock = clock  # seconds; for maxTriggerDelay
        self._last_trigger_s: float | None = None  # None: no micro-batch yet
        self._gone: set[TopicPartition] = set()  # already reported (failOnDataLoss=false)

    def initialOffset(self) -> dict[str, Any]:
        tps = self._planner.topic_partitions()
        return to_json_offsets(self._planner.starting(tps, self._planner.bounds(tps)))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def _latest(self) -> dict[TopicPartition, int]:
        tps = self._planner.topic_partitions(missing_ok=True)
        return self._planner.list_offsets(tps, -1)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json_offsets(start)
        latest = self._target if self._target is not None else self._latest()
        new = [tp for tp in latest if tp not in begin]
        begin.update(self._planner.list_offsets(new, EARLIEST))
        end = {tp: max(begin[tp], hw) for tp, hw in latest.items()}
        self._check_gone([tp for tp in begin if tp not in latest])
        for tp, offset in begin.items():
            end.setdefault(tp, offset)  # a partition no longer listed stays where it was
        if self._delay_batch(begin, end):
            return to_json_offsets(begin)
        if isinstance(limit, ReadMaxRows):
            end = cap_offsets(begin, end, limit.max_rows)
        elif not isinstance(limit, ReadAllAvailable):
            raise InvalidConfigError(f"the minikafka source does not support {limit!r}")
        return to_json_offsets(end)

    def _check_gone(self, gone: list[TopicPartition]) -> None:
        """Spark's rule for partitions that disappeared (their topic was deleted)."""
        new = sorted(set(gone) - self._gone)
        if not new:
            return
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in new)
        if self.options.fail_on_data_loss:
            raise MiniKafkaError(
                f"{names} are gone. Some data may have been missed. If you want your "
                "streaming query to go on in such cases, set the source option "
                "'failOnDataLoss' to 'false'.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        log.warning("%s are gone (topic deleted?). Some data may have been missed; going on "
                    "because failOnDataLoss=false.", names)
        self._gone.update(new)

    def _delay_batch(self, begin: dict[TopicPartition, int],
                     end: dict[TopicPartition, int]) -> bool:
        """Spark's minOffsetsPerTrigger rule: too few new records and the last
        micro-batch less than maxTriggerDelay ago (see the module docstring)."""
        minimum = self.options.min_offsets_per_trigger
        if minimum is None or self._target is not None:
            return False
        now = self._clock()
        new_records = sum(end[tp] - begin.get(tp, end[tp]) for tp in end)
        if (new_records < minimum and self._last_trigger_s is not None
                and (now - self._last_trigger_s) * 1000 < self.options.max_trigger_delay_ms):
            return True
        self._last_trigger_s = now
        return False

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
