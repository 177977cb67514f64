"""The transactional Spark sink's rate beside the plain (at-least-once) ones (issues 32, 33).

One run against a real local cluster (``broker.cluster``: controller + 3 brokers, topics
with 3 partitions, replication factor 3, min ISR 2) and one local Spark session
(``local[2]``):

* input: ``--records`` (default 50,000) 100 B values, no keys, written once into topic
  ``spark-in`` by our idempotent ``Producer`` (acks=all);
* query (the same for every sink): ``spark.readStream.format("minikafka")`` from
  earliest, ``maxOffsetsPerTrigger`` = ``--batch-records`` (default 10,000),
  ``select("value")``, ``Trigger.AvailableNow``, a fresh checkpoint, a fresh output
  topic per query;
* sinks (:data:`KINDS`): **transactional** = ``writeStream.foreachBatch(``
  :class:`clients.spark.transactional_sink.TransactionalSink` ``)`` (one transaction
  per micro-batch + the batch id as a sink-group offset; rows through the driver:
  ``DataFrame.toArrow()`` + one ``Producer.send`` per row); **foreach_plain** =
  ``foreachBatch(`` :class:`PlainSink` ``)``, the same driver path with our idempotent
  producer and a ``flush()`` per batch, no transaction; **format** =
  ``writeStream.format("minikafka")`` (:mod:`clients.spark.sink`: Spark's Kafka sink
  API, each Spark task sends its rows with its own idempotent producer on an executor,
  at-least-once like Spark's own Kafka sink);
* figures: records/s = records / wall time of the whole query (start to termination;
  median of ``--runs``, the order of the sinks rotating per run) and the median of
  Spark's ``addBatch`` time per micro-batch (the time in the sink, from the query's
  progress reports); each output topic is read back ``read_committed`` and must hold
  exactly ``--records`` records (checked).

A warm-up query (1,000 records, not timed) per sink starts Spark's Python workers first.
Writes ``bench/results/spark_sink.json`` and ``spark_sink.png`` (if matplotlib is
installed).  Run: ``nice -n 10 python -m bench.spark_sink`` (``--quick``: 5,000 records,
1 run, ``spark_sink_quick.json``).  Every broker process started here is stopped by PID
in ``finally`` (:func:`bench.cluster_lifecycle.running_cluster`); the Spark session is
stopped too.  :func:`time_sink` is the hook another benchmark can call with its own
session and cluster.

Costs: O(records) through Python for every sink (the driver's for the foreachBatch
ones, the executors' for ``format``); Spark's JVM start once.  Not thread-safe; one run
at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from bench.cluster_lifecycle import TOPIC_CONFIG, machine_info, running_cluster
from bench.plotting import figure, save
from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.spark.source import register_data_source
from clients.spark.transactional_sink import TransactionalSink
from clients.types import NewTopic, TopicPartition

RESULTS = Path(__file__).resolve().parent / "results"
VALUE = b"v" * 100
PARTITIONS = 3
KINDS = ("transactional", "foreach_plain", "format")


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
    ``kind`` (one of :data:`KINDS`) sink; wall time and per-batch ``addBatch`` times."""
    stream = (spark.readStream.format("minikafka").option("bootstrap.servers", bootstrap)
              .option("subscribe", input_topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(batch_records)).load()).select("value")
    sink: PlainSink | TransactionalSink | None = None
    if kind == "format":
        writer = (stream.writeStream.format("minikafka")
                  .option("kafka.bootstrap.servers", bootstrap).option("topic", output_topic))
    else:
        if kind == "foreach_plain":
            sink = PlainSink(bootstrap, output_topic)
        elif kind == "transactional":
            sink = TransactionalSink(bootstrap, output_topic,
                                     transactional_id=f"bench-{output_topic}")
        else:
            raise ValueError(f"unknown sink kind {kind!r}; one of {KINDS}")
        writer = stream.writeStream.foreachBatch(sink)
    began = time.perf_counter()
    try:
        query = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        query.awaitTermination()
        wall_s = time.perf_counter() - began
    finally:
        if sink is not None:
            sink.close()
    add_batch_s = [p["durationMs"]["addBatch"] / 1000 for p in query.recentProgress
                   if p["numInputRows"] > 0 and "addBatch" in p["durationMs"]]
    return {"kind": kind, "wall_s": wall_s, "batches": len(add_batch_s),
            "add_batch_s_median": statistics.median(add_batch_s) if add_batch_s else None}


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
        topics = ["spark-in", "spark-warm"] + [f"spark-warm-{kind}" for kind in KINDS] + [
            f"spark-out-{kind}-{r}" for r in range(runs) for kind in KINDS]
        with Admin(bootstrap) as admin:
            admin.create_topics([NewTopic(t, PARTITIONS, 3, dict(TOPIC_CONFIG)) for t in topics])
        produce_input(bootstrap, "spark-in", records)
        produce_input(bootstrap, "spark-warm", 1000)
        spark = new_session()
        try:
            for kind in KINDS:
                time_sink(spark, bootstrap, "spark-warm", kind, f"spark-warm-{kind}",
                          str(Path(root) / f"ckpt-warm-{kind}"), batch_records)
            results: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
            for r in range(runs):
                for kind in KINDS[r % len(KINDS):] + KINDS[:r % len(KINDS)]:
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
        "add_batch_s_median": statistics.median(x["add_batch_s_median"] for x in rs),
        "runs": rs} for kind, rs in results.items()}  # fmt: skip
    rate = {kind: summary[kind]["records_per_s_median"] for kind in KINDS}
    return {
        "benchmark": "spark_sink",
        "api": {"transactional": "readStream.format('minikafka') -> "
                                 "writeStream.foreachBatch(TransactionalSink)",
                "foreach_plain": "readStream.format('minikafka') -> "
                                 "writeStream.foreachBatch(PlainSink)",
                "format": "readStream.format('minikafka') -> "
                          "writeStream.format('minikafka')"},
        "input": {"records": records, "value_bytes": len(VALUE), "partitions": PARTITIONS,
                  "replication_factor": 3, "min_insync_replicas": 2},
        "settings": {"maxOffsetsPerTrigger": batch_records, "trigger": "AvailableNow",
                     "spark_master": "local[2]", "runs": runs,
                     "producer": "idempotent, acks=all, linger_ms 5 (every sink)"},
        "results": summary,
        "transactional_over_foreach_plain": rate["transactional"] / rate["foreach_plain"],
        "transactional_over_format": rate["transactional"] / rate["format"],
        "machine": machine_info(),
    }


def plot(path: Path, report: dict[str, Any]) -> bool:
    """Records/s per sink: the median as a bar, every run as a dot."""
    drawn = figure(figsize=(6, 4))
    if drawn is None:
        return False
    plt, fig, ax = drawn
    results = report["results"]
    for i, kind in enumerate(KINDS):
        ax.bar(i, results[kind]["records_per_s_median"], color="tab:blue", alpha=0.6)
        rates = [report["input"]["records"] / x["wall_s"] for x in results[kind]["runs"]]
        ax.plot([i] * len(rates), rates, "k.")
    ax.set_xticks(range(len(KINDS)), ["foreachBatch\nTransactionalSink",
                                      "foreachBatch\nPlainSink", "format('minikafka')"])
    ax.set_ylabel("records/s (whole query)")
    settings = report["settings"]
    ax.set_title(f"Spark sinks: {report['input']['records']:,} x 100 B, "
                 f"{settings['maxOffsetsPerTrigger']:,}/batch, {settings['spark_master']}",
                 fontsize=9)
    return save(plt, fig, path)


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
    name = "spark_sink_quick" if args.quick else "spark_sink"
    report["png"] = f"{name}.png" if plot(RESULTS / f"{name}.png", report) else None
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    for kind in KINDS:
        result = report["results"][kind]
        print(f"{kind:<14} {result['records_per_s_median']:>9,.0f} records/s  "
              f"addBatch median {result['add_batch_s_median']:.2f} s")
    print(f"transactional / foreach_plain {report['transactional_over_foreach_plain']:.2f}, "
          f"transactional / format {report['transactional_over_format']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
