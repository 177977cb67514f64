"""The transactional Spark sink's rate beside a plain (at-least-once) one (issue 32).

One run against a real local cluster (``broker.cluster``: controller + 3 brokers, topics
with 3 partitions, replication factor 3, min ISR 2) and one local Spark session
(``local[2]``):

* input: ``--records`` (default 50,000) 100 B values, no keys, written once into topic
  ``spark-in`` by our idempotent ``Producer`` (acks=all);
* query (the same for both sinks): ``spark.readStream.format("minikafka")`` from
  earliest, ``maxOffsetsPerTrigger`` = ``--batch-records`` (default 10,000),
  ``select("value")``, ``writeStream.foreachBatch(sink)``, ``Trigger.AvailableNow``, a
  fresh checkpoint, a fresh output topic per query;
* sinks: **transactional** = :class:`clients.spark.transactional_sink.TransactionalSink`
  (one transaction per micro-batch + the batch id as a sink-group offset); **plain** =
  :class:`PlainSink`, the same driver path (``DataFrame.toArrow()`` + one
  ``Producer.send`` per row) with our idempotent producer and a ``flush()`` per batch,
  no transaction (at-least-once, like Spark's own Kafka sink);
* figures: records/s = records / wall time of the whole query (start to termination;
  median of ``--runs``, the order of the two sinks alternating per run) and the median
  time inside the sink per micro-batch; each output topic is read back
  ``read_committed`` and must hold exactly ``--records`` records (checked).

A warm-up query (1,000 records, not timed) starts Spark's Python workers first.
Writes ``bench/results/spark_sink.json``.  Run: ``python -m bench.spark_sink``
(``--quick``: 5,000 records, 1 run).  Every broker process started here is stopped by
PID in ``finally`` (:func:`bench.cluster_lifecycle.running_cluster`); the Spark session
is stopped too.  :func:`time_sink` is the hook another benchmark can call with its own
session and cluster.

Costs: O(records) through the driver's Python for both sinks; Spark's JVM start once.
Not thread-safe; one run at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from bench.cluster_lifecycle import TOPIC_CONFIG, machine_info, running_cluster
from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.spark.source import register_data_source
from clients.spark.transactional_sink import TransactionalSink
from clients.types import NewTopic, TopicPartition

RESULTS = Path(__file__).resolve().parent / "results"
VALUE = b"v" * 100
PARTITIONS = 3
SinkFunction = Callable[[DataFrame, int], None]


class PlainSink:
    """At-least-once ``foreachBatch`` sink: send every row, ``flush()``; no transaction."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(bootstrap_servers, acks="all")

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        for value in batch.toArrow().column("value").to_pylist():
            self.producer.send(self.topic, value)
        self.producer.flush()

    def close(self) -> None:
        self.producer.close()


def time_sink(spark: SparkSession, bootstrap: str, input_topic: str, kind: str, output_topic: str,
              checkpoint: str, batch_records: int) -> dict[str, Any]:
    """Run one AvailableNow query ``input_topic`` -> ``output_topic`` through the
    ``kind`` ("plain" | "transactional") sink; wall time and per-batch sink times."""
    sink: PlainSink | TransactionalSink
    if kind == "plain":
        sink = PlainSink(bootstrap, output_topic)
    else:
        sink = TransactionalSink(bootstrap, output_topic, transactional_id=f"bench-{output_topic}")
    batch_s: list[float] = []

    def timed(batch: DataFrame, batch_id: int) -> None:
        began = time.perf_counter()
        sink(batch, batch_id)
        batch_s.append(time.perf_counter() - began)

    stream = (spark.readStream.format("minikafka").option("bootstrap.servers", bootstrap)
              .option("subscribe", input_topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(batch_records)).load())
    began = time.perf_counter()
    try:
        query = (stream.select("value").writeStream.foreachBatch(timed)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        wall_s = time.perf_counter() - began
    finally:
        sink.close()
    return {"kind": kind, "wall_s": wall_s, "batches": len(batch_s),
            "sink_batch_s_median": statistics.median(batch_s) if batch_s else None}


def committed_count(bootstrap: str, topic: str) -> int:
    """Records a read_committed reader sees in ``topic`` (read to the last stable offsets)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    with Consumer(bootstrap, isolation_level="read_committed",
                  auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        count, deadline = 0, time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: not read to its last stable offsets in 120 s")
            count += sum(len(b) for b in consumer.poll_bulk(500).values())
    return count


def produce_input(bootstrap: str, topic: str, records: int) -> None:
    with Producer(bootstrap, acks="all") as producer:
        for i in range(records):
            producer.send(topic, VALUE, partition=i % PARTITIONS)
        producer.flush()


def new_session() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("minikafka-bench-sink")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.python.worker.reuse", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register_data_source(spark)
    return spark


def run(records: int, batch_records: int, runs: int, root: str) -> dict[str, Any]:
    with running_cluster(root) as state:
        bootstrap = state.bootstrap
        topics = ["spark-in", "spark-warm", "spark-warm-out"] + [
            f"spark-out-{kind}-{r}" for r in range(runs) for kind in ("plain", "transactional")]
        with Admin(bootstrap) as admin:
            admin.create_topics([NewTopic(t, PARTITIONS, 3, dict(TOPIC_CONFIG)) for t in topics])
        produce_input(bootstrap, "spark-in", records)
        produce_input(bootstrap, "spark-warm", 1000)
        spark = new_session()
        try:
            time_sink(spark, bootstrap, "spark-warm", "plain", "spark-warm-out",
                      str(Path(root) / "ckpt-warm"), batch_records)
            results: dict[str, list[dict[str, Any]]] = {"plain": [], "transactional": []}
            for r in range(runs):
                order = ("plain", "transactional") if r % 2 == 0 else ("transactional", "plain")
                for kind in order:
                    out = f"spark-out-{kind}-{r}"
                    result = time_sink(spark, bootstrap, "spark-in", kind, out,
                                       str(Path(root) / f"ckpt-{out}"), batch_records)
                    result["output_records"] = committed_count(bootstrap, out)
                    if result["output_records"] != records:
                        raise RuntimeError(f"{out}: {result['output_records']} records, "
                                           f"expected {records}")
                    results[kind].append(result)
        finally:
            spark.stop()
    summary = {kind: {
        "records_per_s_median": statistics.median(records / x["wall_s"] for x in rs),
        "sink_batch_s_median": statistics.median(x["sink_batch_s_median"] for x in rs),
        "runs": rs} for kind, rs in results.items()}  # fmt: skip
    return {
        "benchmark": "spark_sink",
        "api": "readStream.format('minikafka') -> foreachBatch(TransactionalSink | PlainSink)",
        "input": {"records": records, "value_bytes": len(VALUE), "partitions": PARTITIONS,
                  "replication_factor": 3, "min_insync_replicas": 2},
        "settings": {"maxOffsetsPerTrigger": batch_records, "trigger": "AvailableNow",
                     "spark_master": "local[2]", "producer": "acks=all, linger_ms 5"},
        "results": summary,
        "transactional_over_plain": summary["transactional"]["records_per_s_median"]
        / summary["plain"]["records_per_s_median"],
        "machine": machine_info(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--batch-records", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="5,000 records, 1 run")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.batch_records, args.runs = 5_000, 1_000, 1
    with tempfile.TemporaryDirectory(prefix="bench-spark-sink-") as root:
        report = run(args.records, args.batch_records, args.runs, root)
    RESULTS.mkdir(exist_ok=True)
    name = "spark_sink_quick.json" if args.quick else "spark_sink.json"
    (RESULTS / name).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("results", "transactional_over_plain")},
                     default=str)[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
