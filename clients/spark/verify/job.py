"""``minikafka verify``: a Spark job that checks a topic (or a Parquet sink) against a ledger.

Inputs: the records, read through the ``minikafka`` data source (every partition, from
earliest to the high watermark at planning time) or from a Parquet sink written by
:mod:`clients.spark.stream_to_parquet` (rows of the ledger's topic only); and the
ledger (:mod:`clients.workload.ledger`), validated in one streaming pass on the driver
(precise error on garbage, torn last line ignored) and then read by Spark as text (so
the path must be readable by the executors: local mode or a shared file system).

Every record value is parsed as ``mk1|run|producer|sequence|...``
(:data:`clients.workload.run.VALUE_PATTERN`).  Checks, all Spark DataFrame operations
(joins, aggregations, window functions; only counts and a few examples reach the driver):

==========================  =========================================================  =====
check                       definition                                                 kind
==========================  =========================================================  =====
lost                        acknowledged (ledger A line), its (producer, sequence)    fail
                            nowhere in the records
lost at its offset          acknowledged, present, but not at the acknowledged         fail
                            (partition, offset)
duplicated                  a (producer, sequence) present more than once; counted    fail
                            as messages and as extra copies
reordered (partition)       in a partition, in offset order, a producer's sequence    fail
                            lower than the one before it (first copies only)
reordered (key)             the same for the records of one key, in (partition,        fail
                            offset) order
phantom                     present but never sent by this run: value not a workload  fail
                            message, or producer/sequence beyond the run's ``S``
                            announcements
unacknowledged but present  sent by this run, present, no ack in the ledger            ok
                            (a failed or unconfirmed send that did land)
other runs                  well-formed workload messages of another run id (a        ok
                            reused topic); counted, not checked
==========================  =========================================================  =====

Design choices: a duplicate's later copies are reported as duplicates, not also as
reorders (order is checked on the first copy of each message, by offset); a key is
ordered within (key, producer).  Exit status: 0 when every ``fail`` row is zero, 1
otherwise (and 1 for bad input).  Costs: one read of the records (cached), one read of
the ledger; a handful of shuffles (O(records + acks)); the driver holds O(producers)
plus the examples.  Thread safety: one job per SparkSession at a time.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clients.spark.verify.pipeline import (
    PIPELINE_LABELS,
    PIPELINE_VIOLATIONS,
    pipeline_txn_frame,
    read_committed_tagged,
    verify_pipeline,
)
from clients.spark.verify.progress import reporting_progress
from clients.spark.verify.session import VerifyError, failure_message, verify_session
from clients.spark.verify.transactions import (
    TORN,
    TXN_LABELS,
    TXN_VIOLATIONS,
    read_committed,
    txn_check_frames,
    txn_frame,
)
from clients.workload.ledger import LedgerSummary, scan_ledger
from clients.workload.run import VALUE_PATTERN

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

VIOLATIONS = ("lost", "lost_at_offset", "duplicated", "reordered_partition", "reordered_key",
              "phantom")
LABELS = {
    "acked": "acknowledged (ledger)", "sent": "sent (announced)", "records": "records read",
    "present": "distinct messages present", "lost": "lost", "lost_at_offset":
    "lost at its offset", "duplicated": "duplicated messages", "duplicate_copies":
    "  extra copies", "reordered_partition": "reordered (partition)", "reordered_key":
    "reordered (key)", "phantom": "phantom", "unacked_present": "unacknowledged but present",
    "other_runs": "other runs",
}
@dataclass
class VerifyReport:
    run_id: str
    topic: str
    source: str
    ledger: str
    counts: dict[str, int]
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    ledger_torn_tail_bytes: int = 0

    @property
    def violations(self) -> int:
        return sum(self.counts.get(name, 0)
                   for name in (*VIOLATIONS, *TXN_VIOLATIONS, *PIPELINE_VIOLATIONS))

    @property
    def ok(self) -> bool:
        return self.violations == 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "violations": self.violations, "ok": self.ok}

    def table(self) -> str:
        rows = [f"verify run {self.run_id}, topic {self.topic!r} ({self.source})",
                f"{'check':<30} {'count':>10}  verdict", "-" * 50]
        labels = {**LABELS, **TXN_LABELS, **PIPELINE_LABELS}
        for name, label in labels.items():
            if name not in self.counts:
                continue  # the transactional (pipeline) rows of such a run only
            verdict = ("ok" if self.counts[name] == 0 else "FAIL") \
                if name in (*VIOLATIONS, *TXN_VIOLATIONS, *PIPELINE_VIOLATIONS) \
                else "allowed" if name == "unacked_present" else \
                "ignored" if name == "other_runs" else ""
            rows.append(f"{label:<30} {self.counts[name]:>10}  {verdict}".rstrip())
        rows.append("-" * 50)
        rows.append("result: CLEAN (0 violations)" if self.ok
                    else f"result: {self.violations} VIOLATIONS")
        for name, examples in self.examples.items():
            for example in examples:
                label = labels[name].strip()
                rows.append(f"  e.g. {label}: {json.dumps(example)}")
        if self.ledger_torn_tail_bytes:
            rows.append(f"note: ignored a torn last ledger line ({self.ledger_torn_tail_bytes}"
                        " bytes)")
        return "\n".join(rows)


# -- inputs -------------------------------------------------------------------------------


def read_topic(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    return (spark.read.format("minikafka").option("bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("endingOffsets", "latest").load())


def read_sink_records(spark: SparkSession, sink_dir: str, topic: str) -> DataFrame:
    from pyspark.sql import functions as F

    if not Path(sink_dir).is_dir():
        raise ValueError(f"sink {sink_dir} is not a directory")
    return spark.read.parquet(sink_dir).where(F.col("topic") == topic)


def ledger_frames(spark: SparkSession, path: str,
                  summary: LedgerSummary) -> tuple[DataFrame, DataFrame]:
    """(acks, sent) DataFrames: acks (producer, seq, key, partition, offset) read by
    Spark from the text file; sent (producer, sent_below) from the validated summary."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    lines = spark.read.text(Path(path).resolve().as_uri())
    body = F.regexp_extract("value", r"^(.*)\t[0-9a-f]{8}$", 1)
    crc = F.regexp_extract("value", r"\t([0-9a-f]{8})$", 1)
    computed = F.lpad(F.lower(F.hex(F.crc32(body.cast("binary")))), 8, "0")
    fields = F.split(body, "\t")
    acks = (lines.where((body != "") & (crc == computed))  # drops only a torn last line
            .select(fields.alias("f")).where(F.col("f")[0] == "A")
            .select(F.col("f")[2].cast("long").alias("producer"),
                    F.col("f")[3].cast("long").alias("seq"), F.col("f")[4].alias("key"),
                    F.col("f")[6].cast("int").alias("partition"),
                    F.col("f")[7].cast("long").alias("offset")))
    schema = StructType([StructField("producer", LongType(), False),
                         StructField("sent_below", LongType(), False)])
    sent = spark.createDataFrame(sorted(summary.sent_below.items()), schema)
    return acks, sent


# -- the checks ---------------------------------------------------------------------------


def classify(records: DataFrame, sent: DataFrame, run_id: str) -> DataFrame:
    """Records with (partition, offset, key, run, producer, seq, class), class one of
    valid / phantom / other_run."""
    from pyspark.sql import functions as F

    text = F.coalesce(F.col("value").cast("string"), F.lit(""))
    parsed = records.select(
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("key").cast("string").alias("key"),
        F.substring(text, 1, 80).alias("value_prefix"),
        F.regexp_extract(text, VALUE_PATTERN, 1).alias("run"),
        F.regexp_extract(text, VALUE_PATTERN, 2).alias("producer_text"),
        F.regexp_extract(text, VALUE_PATTERN, 3).alias("seq_text"))
    parsed = parsed.select(
        "*", F.when(F.col("run") != "", F.col("producer_text").cast("long")).alias("producer"),
        F.when(F.col("run") != "", F.col("seq_text").cast("long")).alias("seq"))
    joined = parsed.join(F.broadcast(sent), "producer", "left")
    cls = (F.when(F.col("run") == "", "phantom")
           .when(F.col("run") != run_id, "other_run")
           .when(F.col("sent_below").isNull() | (F.col("seq") >= F.col("sent_below")),
                 "phantom")
           .otherwise("valid"))
    return joined.select("partition", "offset", "key", "value_prefix", "run", "producer",
                         "seq", cls.alias("class"))


def verify_frames(records: DataFrame, acks: DataFrame, sent: DataFrame, run_id: str, *,
                  examples: int = 5, txns: DataFrame | None = None,
                  ) -> tuple[dict[str, int], dict[str, list[dict[str, Any]]]]:
    """All counts (see the module docstring) and up to ``examples`` rows per violation;
    with ``txns`` (:func:`clients.spark.verify.transactions.txn_frame`) also the transactional
    checks and counts (:mod:`clients.spark.verify.transactions`).

    Plan: the records are classified (cached: the source is read once); the valid ones
    are grouped by (producer, seq) into *messages* (copies, sorted positions, key of
    the first copy), full-outer-joined with the acks on (producer, seq) (cached); the
    order checks are two window functions over the first copies.  Two Spark jobs: one
    for every count (a union of aggregates), one for the examples (only when needed).
    """
    from pyspark.sql import functions as F

    classified = classify(records, sent, run_id).cache()
    joined = _messages_and_acks(classified, acks).cache()
    try:
        frames = _check_frames(classified, joined)
        counts = dict.fromkeys(LABELS, 0)
        metrics = _metrics(classified, joined, sent, frames["ordered"])
        if txns is not None:
            frames.update(txn_check_frames(classified, frames["ordered"], txns))
            counts.update(dict.fromkeys(TXN_LABELS, 0))
            metrics = _union([metrics, _txn_metrics(frames)])
        for row in metrics.collect():
            counts[row["name"]] += int(row["value"] or 0)
        wanted = [name for name in (*VIOLATIONS, *TXN_VIOLATIONS)
                  if counts.get(name, 0) > 0] if examples > 0 else []
        found: dict[str, list[dict[str, Any]]] = {}
        if wanted:
            parts = [frames[name].limit(examples).select(
                F.lit(name).alias("kind"), F.to_json(F.struct("*")).alias("row"))
                for name in wanted]
            for row in _union(parts).collect():
                found.setdefault(row["kind"], []).append(json.loads(row["row"]))
        return counts, found
    finally:
        classified.unpersist()
        joined.unpersist()


def _union(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionAll(frame)
    return out


def _messages_and_acks(classified: DataFrame, acks: DataFrame) -> DataFrame:
    """One row per (producer, seq) present or acknowledged: copies (null when absent),
    at (sorted (partition, offset) of the copies), key (of the first copy), and the ack's
    ack_key / ack_partition / ack_offset (null when not acknowledged)."""
    from pyspark.sql import functions as F

    position = F.struct("partition", "offset")
    messages = classified.where(F.col("class") == "valid").groupBy("producer", "seq").agg(
        F.count(F.lit(1)).alias("copies"), F.sort_array(F.collect_list(position)).alias("at"),
        F.min_by("key", position).alias("key"))
    acked = acks.select("producer", "seq", F.col("key").alias("ack_key"),
                        F.col("partition").alias("ack_partition"),
                        F.col("offset").alias("ack_offset"))
    return messages.join(acked, ["producer", "seq"], "full_outer")


def _check_frames(classified: DataFrame, joined: DataFrame) -> dict[str, DataFrame]:
    """The rows that violate each check, plus ``ordered`` (first copies with the
    sequence before them in their partition and in their key)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    first = joined.where(F.col("copies").isNotNull()).select(
        F.col("at")[0]["partition"].alias("partition"), F.col("at")[0]["offset"].alias("offset"),
        "key", "producer", "seq")
    in_partition = Window.partitionBy("partition", "producer").orderBy("offset")
    in_key = Window.partitionBy("key", "producer").orderBy("partition", "offset")
    ordered = first.select(
        "*", F.lag("seq").over(in_partition).alias("previous_in_partition"),
        F.lag("seq").over(in_key).alias("previous_in_key"))
    ack = [F.col("producer"), F.col("seq"), F.col("ack_key").alias("key"),
           F.col("ack_partition").alias("partition"), F.col("ack_offset").alias("offset")]
    return {
        "ordered": ordered,
        "lost": joined.where(_LOST).select(*ack),
        "lost_at_offset": joined.where(_LOST_AT_OFFSET).select(*ack, "at"),
        "duplicated": joined.where(F.col("copies") > 1).select("producer", "seq", "copies",
                                                                "at"),
        "reordered_partition": ordered.where(_BACK_IN_PARTITION)
        .select("partition", "offset", "producer", "seq", "previous_in_partition"),
        "reordered_key": ordered.where(_BACK_IN_KEY)
        .select("key", "partition", "offset", "producer", "seq", "previous_in_key"),
        "phantom": classified.where(F.col("class") == "phantom")
        .select("partition", "offset", "value_prefix"),
    }


_LOST = "copies IS NULL"
_LOST_AT_OFFSET = ("copies IS NOT NULL AND ack_partition IS NOT NULL AND NOT "
                   "array_contains(at, named_struct('partition', ack_partition, 'offset', "
                   "ack_offset))")
_BACK_IN_PARTITION = "seq < previous_in_partition"
_BACK_IN_KEY = "seq < previous_in_key"


def stack(frame: DataFrame, **values: Column) -> DataFrame:
    """(name, value) rows of one aggregation of ``frame``."""
    from pyspark.sql import functions as F

    pairs = [F.struct(F.lit(name).alias("name"), value.cast("long").alias("value"))
             for name, value in values.items()]
    return frame.agg(F.array(*pairs).alias("m")).select(F.explode("m").alias("m")) \
        .select("m.name", "m.value")


def count_where(condition: str) -> Column:
    from pyspark.sql import functions as F

    return F.sum(F.when(F.expr(condition), 1).otherwise(0))


def _txn_metrics(frames: dict[str, DataFrame]) -> DataFrame:
    from pyspark.sql import functions as F

    return _union([
        stack(frames["per_txn"], txn_committed=count_where("outcome = 'commit'"),
              txn_aborted=count_where("outcome = 'abort'"),
              txn_unknown=count_where("outcome = 'unknown'"),
              unknown_visible=count_where("outcome = 'unknown' AND visible = size"),
              unknown_invisible=count_where("outcome = 'unknown' AND visible = 0"),
              torn=count_where(TORN)),
        stack(frames["aborted_read"], aborted_read=F.count(F.lit(1))),
        stack(frames["txn_reordered"], txn_reordered=F.count(F.lit(1))),
    ])


def _metrics(classified: DataFrame, joined: DataFrame, sent: DataFrame,
             ordered: DataFrame) -> DataFrame:
    """(name, value) rows: every count of the report, from one union of aggregates."""
    from pyspark.sql import functions as F

    return _union([
        stack(classified, records=F.count(F.lit(1)), phantom=count_where("class = 'phantom'"),
              other_runs=count_where("class = 'other_run'")),
        stack(sent, sent=F.sum("sent_below")),
        stack(joined, acked=count_where("ack_partition IS NOT NULL"),
              present=count_where("copies IS NOT NULL"), lost=count_where(_LOST),
              lost_at_offset=count_where(_LOST_AT_OFFSET),
              duplicated=count_where("copies > 1"),
              duplicate_copies=F.sum(F.when(F.col("copies") > 1, F.col("copies") - 1)),
              unacked_present=count_where("copies IS NOT NULL AND ack_partition IS NULL")),
        stack(ordered, reordered_partition=count_where(_BACK_IN_PARTITION),
              reordered_key=count_where(_BACK_IN_KEY)),
    ])


def run_verify(spark: SparkSession, ledger_path: str, *, bootstrap: str | None = None,
               sink: str | None = None, examples: int = 5) -> VerifyReport:
    """Verify the ledger's topic (through ``bootstrap``) or a Parquet ``sink``."""
    if (bootstrap is None) == (sink is None):
        raise ValueError("give exactly one of a bootstrap address and a sink directory")
    summary = scan_ledger(ledger_path)
    topic = summary.header.topic
    if sink is not None:
        records, source = read_sink_records(spark, sink, topic), f"Parquet sink {sink}"
    elif summary.transactional:
        assert bootstrap is not None
        records = read_committed(spark, bootstrap, topic)
        source = f"topic via {bootstrap}, read_committed"
    else:
        assert bootstrap is not None
        records, source = read_topic(spark, bootstrap, topic), f"topic via {bootstrap}"
    acks, sent = ledger_frames(spark, ledger_path, summary)
    txns = txn_frame(spark, ledger_path) if summary.transactional else None
    counts, found = verify_frames(records, acks, sent, summary.header.run_id, examples=examples,
                                  txns=txns)
    if summary.pipeline_topic and bootstrap is not None and sink is None:
        output = read_committed_tagged(spark, bootstrap, summary.pipeline_topic)
        more, more_found = verify_pipeline(records, output,
                                           txns=pipeline_txn_frame(spark, ledger_path),
                                           examples=examples)
        counts.update(more)
        found.update(more_found)
        source += f"; pipeline {topic} -> {summary.pipeline_topic}, read_committed"
    if counts["acked"] != summary.acks:
        raise ValueError(f"ledger {ledger_path} changed while verifying ({summary.acks} acks "
                         f"validated, {counts['acked']} read by Spark)")
    return VerifyReport(summary.header.run_id, topic, source, os.fspath(ledger_path), counts,
                        found, summary.torn_tail_bytes)


def write_report(report: VerifyReport, path: str) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    os.replace(tmp, target)


def verify_job(ledger_path: str, *, bootstrap: str | None = None, sink: str | None = None,
               master: str = "local[*]", examples: int = 5,
               report_path: str | None = None, spark_log: str | None = None) -> VerifyReport:
    """The whole CLI job: own SparkSession on ``master``, verify, write the report, stop."""
    report = verify_ledgers([ledger_path], bootstrap=bootstrap, sink=sink, master=master,
                            examples=examples, spark_log=spark_log)[0]
    if report_path:
        write_report(report, report_path)
    return report


def verify_ledgers(ledger_paths: list[str], *, bootstrap: str | None = None,
                   sink: str | None = None, master: str = "local[*]", examples: int = 5,
                   spark_log: str | None = None) -> list[VerifyReport]:
    """Verify several ledgers in one SparkSession on ``master`` (one JVM start; the
    demo's idempotent and transactional runs), stopped at the end; Spark failures are
    :class:`VerifyError`.  The running stages' progress goes to stderr
    (:mod:`clients.spark.verify.progress`)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    for path in ledger_paths:
        scan_ledger(path)  # bad input fails before Spark starts
    if sink is not None and not Path(sink).is_dir():
        raise ValueError(f"sink {sink} is not a directory")
    spark = verify_session(master, spark_log=spark_log)
    try:
        with reporting_progress(spark, sys.stderr):  # stage progress, at most once a second
            return [run_verify(spark, path, bootstrap=bootstrap, sink=sink, examples=examples)
                    for path in ledger_paths]
    except (PySparkException, Py4JError) as exc:
        raise VerifyError("Spark job failed: " + failure_message(str(exc))) from exc
    finally:
        spark.stop()
