"""Structured Streaming job: a minikafka topic into a Parquet sink, exactly once.

::

    python -m clients.spark.stream_to_parquet --bootstrap 127.0.0.1:9092 --topic t1 \\
        --sink /data/sink --checkpoint /data/ckpt [--trigger-available-now | --run-for-s N]

Why exactly once across stops, restarts and broker kills:

1. Before running micro-batch N, Spark writes its end offsets (``{"t1": {"0": 812}}``) to
   ``<checkpoint>/offsets/N``; the minikafka source reads exactly ``[start, end)`` of every
   partition (:mod:`clients.spark.partition_reader`), so re-running batch N reads the
   same records.
2. The file sink writes batch N's Parquet files, then records them atomically in
   ``<sink>/_spark_metadata/N``; only files listed there are part of the sink.  A batch
   already listed is skipped when re-run, so a crash between the sink commit and
   ``<checkpoint>/commits/N`` does not duplicate, and a crash before it leaves orphan
   files that readers ignore.
3. A restarted query resumes from the last offsets in the checkpoint; a broker kill only
   delays fetches (the consumers follow the new leader) or fails the query, which is then
   restarted the same way.

Read the sink back with ``spark.read.parquet(sink)`` (it honours ``_spark_metadata``);
:func:`read_sink` does that.  The sink keeps the source's columns (key, value, topic,
partition, offset, timestamp, timestampType, headers).

Costs: one micro-batch per trigger (default every second, or as many as needed to reach
the high watermarks seen at start with ``--trigger-available-now``); each batch writes at
most one Parquet file per input partition.  Not thread-safe: one query per call.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from clients.spark.source import SCHEMA, register_data_source

__all__ = ["StreamRun", "error_summary", "main", "read_sink", "stream_to_parquet"]


@dataclass(frozen=True)
class StreamRun:
    """What one run of the query did (from its progress reports)."""

    batches: int
    input_rows: int
    last_offsets: dict[str, Any] | None


def stream_to_parquet(
    spark: SparkSession,
    bootstrap_servers: str,
    topics: str,
    sink_dir: str,
    checkpoint_dir: str,
    *,
    available_now: bool = True,
    run_for_s: float | None = None,
    trigger_interval_s: float = 1.0,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    source_options: dict[str, str] | None = None,
) -> StreamRun:
    """Run the query until it has caught up (``available_now``) or for ``run_for_s``
    seconds (processing-time trigger every ``trigger_interval_s``), then stop it.
    ``run_for_s`` counts from the query's start: the first micro-batch of a fresh JVM
    includes Python worker start-up (seconds, tens on a loaded machine), and stopping
    mid-batch is safe (the batch is re-run by the next start).

    ``starting_offsets`` only applies to a fresh checkpoint; a restarted query resumes
    from its checkpointed offsets.  A failed query raises its error."""
    if available_now == (run_for_s is not None):
        raise ValueError("give exactly one of available_now=True and run_for_s")
    if run_for_s is not None and run_for_s <= 0:
        raise ValueError(f"run_for_s must be > 0, got {run_for_s}")
    register_data_source(spark)
    reader = (
        spark.readStream.format("minikafka")
        .option("bootstrap.servers", bootstrap_servers)
        .option("subscribe", topics)
        .option("startingOffsets", starting_offsets)
        .option("includeHeaders", "true")  # the sink keeps every column of the source
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    for key, value in (source_options or {}).items():
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", sink_dir)
        .option("checkpointLocation", checkpoint_dir)
        .outputMode("append")
    )
    if available_now:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = writer.trigger(processingTime=f"{trigger_interval_s} seconds").start()
        try:
            assert run_for_s is not None
            query.awaitTermination(math.ceil(run_for_s))  # whole seconds
        finally:
            query.stop()
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"streaming query failed: {error_summary(error)}") from error
    progress = [p for p in query.recentProgress if p.get("numInputRows") is not None]
    ran = [p for p in progress if p.get("batchId") is not None and p.get("sources")]
    last = ran[-1]["sources"][0].get("endOffset") if ran else None
    return StreamRun(
        batches=len({p["batchId"] for p in ran if p["numInputRows"] > 0}),
        input_rows=sum(int(p["numInputRows"]) for p in ran),
        last_offsets=json.loads(last) if isinstance(last, str) else last,
    )


_PYTHON_ERROR = re.compile(r"^\s*((?:clients|pyspark)\.[\w.]+(?:Error|Exception)): (.+)$", re.M)


def error_summary(error: BaseException) -> str:
    """The Python error inside a Spark failure (its text embeds the worker's traceback
    and a Java stack), else the first line."""
    text = str(error)
    found = _PYTHON_ERROR.findall(text)
    if found:
        name, message = found[-1]
        return f"{name}: {message}"
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def read_sink(spark: SparkSession, sink_dir: str) -> DataFrame:
    """The sink's committed rows (files listed in ``_spark_metadata`` only); empty when
    no batch was committed yet (the schema is given, not inferred from files)."""
    local = re.match(r"^[A-Za-z][\w+.-]*:", sink_dir) is None  # no URI scheme
    if local and not Path(sink_dir).exists():
        return spark.createDataFrame([], SCHEMA)
    return spark.read.schema(SCHEMA).parquet(sink_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m clients.spark.stream_to_parquet",
        description="Stream minikafka topics into a Parquet sink with a checkpoint.",
    )
    parser.add_argument("--bootstrap", required=True, help="host:port[,host:port...]")
    parser.add_argument("--topic", required=True, help="topic, or a comma list of topics")
    parser.add_argument("--sink", required=True, help="Parquet sink directory")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--trigger-available-now", action="store_true",
                      help="read everything below the high watermarks at start, then stop")
    mode.add_argument("--run-for-s", type=float, help="run micro-batches this long, then stop")
    parser.add_argument("--trigger-interval-s", type=float, default=1.0)
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--max-offsets-per-trigger", type=int)
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args(argv)
    spark = (
        SparkSession.builder.master(args.master)
        .appName("minikafka-stream-to-parquet")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        run = stream_to_parquet(
            spark, args.bootstrap, args.topic, args.sink, args.checkpoint,
            available_now=args.trigger_available_now, run_for_s=args.run_for_s,
            trigger_interval_s=args.trigger_interval_s,
            starting_offsets=args.starting_offsets,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
        )  # fmt: skip
        rows = read_sink(spark, args.sink).count()
    except Exception as e:  # the CLI reports any failure as one line and exit code 1
        print(f"stream_to_parquet failed: {error_summary(e)}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(json.dumps({"batches": run.batches, "input_rows": run.input_rows,
                      "sink_rows": rows, "last_offsets": run.last_offsets}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
