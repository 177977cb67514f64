"""A Spark-to-Spark exactly-once pipeline in its own driver process, so that a test can
SIGKILL the driver (its JVM and Python workers too) at a chosen point.

The pipeline (:func:`start_pipeline`): ``readStream.format("minikafka")`` from topic A,
``kafka.isolation.level=read_committed``, ``maxOffsetsPerTrigger``, ``Trigger.AvailableNow``;
``f`` = :func:`transform` (key = A's value, value = ``b"f-" + A's value``); written to
topic B by :class:`clients.spark.transactional_sink.TransactionalSink` in
``foreachBatch``.  The test runs the same function in its own session for the last run.

Run: ``python -m tests.clients.spark.txpipe_driver BOOTSTRAP A B CHECKPOINT TXN_ID
--stop-at {before-commit,after-commit} --batch N --marker FILE``: at batch N's hook it
writes ``FILE`` and waits forever (to be killed there).  If the query ends first it
exits 3.  Costs: one Spark JVM (``local[2]``, 512 MiB driver).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from clients.spark.source import register_data_source
from clients.spark.transactional_sink import TransactionalSink

PREFIX = b"f-"


def f(value: bytes) -> bytes:
    """The pipeline's transform on one value, in Python (the test's oracle)."""
    return PREFIX + value


def transform(df: DataFrame) -> DataFrame:
    """The pipeline's transform in Spark: key = the input value, value = f(value)."""
    return df.select(F.col("value").alias("key"),
                     F.concat(F.lit(PREFIX), F.col("value")).alias("value"))  # fmt: skip


def start_pipeline(spark: SparkSession, bootstrap: str, source: str, checkpoint: str,
                   sink: TransactionalSink, max_offsets: int = 20) -> StreamingQuery:  # fmt: skip
    stream = (spark.readStream.format("minikafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
              .option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed")
              .option("maxOffsetsPerTrigger", str(max_offsets)).load())  # fmt: skip
    return (transform(stream).writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


def _stop_at(batch: int, marker: Path) -> Callable[[int], None]:
    def hook(batch_id: int) -> None:
        if batch_id == batch:
            marker.write_text(str(batch_id))
            threading.Event().wait()  # until SIGKILL

    return hook


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("bootstrap", "source", "sink", "checkpoint", "transactional_id"):
        parser.add_argument(name)
    parser.add_argument("--stop-at", choices=("before-commit", "after-commit"), required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--marker", type=Path, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("txpipe-driver")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "512m").getOrCreate())  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    register_data_source(spark)
    hook = _stop_at(args.batch, args.marker)
    sink = TransactionalSink(
        args.bootstrap, args.sink, args.transactional_id,
        before_commit=hook if args.stop_at == "before-commit" else None,
        on_committed=hook if args.stop_at == "after-commit" else None,
    )  # fmt: skip
    query = start_pipeline(spark, args.bootstrap, args.source, args.checkpoint, sink)
    query.awaitTermination()
    return 3  # the hook's batch never came


if __name__ == "__main__":
    sys.exit(main())
