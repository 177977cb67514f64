"""verify's pipeline check: topic B (read_committed) equals f(committed records of A),
exactly once.

A consume-transform-produce pipeline (the workload's, :mod:`clients.workload.pipeline`,
or Spark's transactional sink) reads topic A and writes ``f(record)`` to topic B.  With A
and B read read_committed (:func:`read_pipeline_topics`, or any DataFrames with a binary
``value`` column) and ``f`` a DataFrame -> DataFrame function giving each A row's
expected B ``value`` (:func:`workload_transform` mirrors the workload's
:func:`clients.workload.pipeline.transform`), the expected values are counted against
B's values (f must give distinct values for distinct A records, as the workload's does
by embedding A's partition and offset):

==================  ========================================================  =====
check               definition                                                kind
==================  ========================================================  =====
pipeline lost       an expected value (a committed A record's f) not in B     fail
pipeline            a value in B more often than expected; counted as         fail
duplicated          values and as extra copies; each example lists every
                    copy's B partition, offset, transaction tag and that
                    transaction's ledger outcome (commit / abort / unknown)
pipeline phantom    a value in B that is no committed A record's f            fail
pipeline aborted    a B record written by a pipeline transaction that the     fail
read                ledger says aborted (its ``mk-txn`` header)
pipeline torn       a committed (or unknown) pipeline transaction whose B     fail
                    records are partly visible
==================  ========================================================  =====

The last two need the ledger's ``P`` lines (:func:`pipeline_txn_frame`) and B's
``tag`` column (the ``mk-txn`` header); without them (e.g. Spark's sink) they are not
computed and an aborted read shows as a duplicate or a phantom.  Info counts:
``pipeline_expected`` (committed A records), ``pipeline_records`` (B records read),
pipeline transactions committed / aborted / unknown.

Entry points: :func:`verify_pipeline` (counts and examples from DataFrames),
:func:`verify_pipeline_topics` (reads both topics through a bootstrap address).
Costs: one full outer join of A's and B's values (O(records) shuffle), one
aggregation per count group; the examples one more job; reading holds each topic on
the driver (:func:`clients.spark.verify.transactions.read_committed`).  Thread safety:
one job per SparkSession at a time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clients.spark.verify.transactions import read_committed
from clients.workload.pipeline_session import TAG_HEADER

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Transform = Callable[["DataFrame"], "DataFrame"]
PIPELINE_VIOLATIONS = ("pipeline_lost", "pipeline_duplicated", "pipeline_phantom",
                       "pipeline_aborted_read", "pipeline_torn")
PIPELINE_LABELS = {
    "pipeline_expected": "pipeline: f(A) expected", "pipeline_records": "pipeline: B read",
    "pipeline_lost": "pipeline lost", "pipeline_duplicated": "pipeline duplicated",
    "pipeline_duplicate_copies": "  extra copies", "pipeline_phantom": "pipeline phantom",
    "pipeline_aborted_read": "pipeline aborted read", "pipeline_torn": "pipeline torn",
    "pipeline_txn_committed": "pipeline txns committed",
    "pipeline_txn_aborted": "pipeline txns aborted",
    "pipeline_txn_unknown": "pipeline txns unknown outcome",
}
_TORN = "outcome != 'abort' AND visible > 0 AND visible < records"


def workload_transform(a: DataFrame) -> DataFrame:
    """The workload's f as Spark: ``mkp1|<partition>|<offset>|`` + A's value."""
    from pyspark.sql import functions as F

    head = F.concat(F.lit("mkp1|"), F.col("partition").cast("string"), F.lit("|"),
                    F.col("offset").cast("string"), F.lit("|")).cast("binary")
    return a.select(F.concat(head, F.coalesce(F.col("value"), F.lit(b""))).alias("value"))


def read_committed_tagged(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """``topic`` read read_committed now, with its ``tag`` column (``mk-txn`` header)."""
    return read_committed(spark, bootstrap, topic, header=TAG_HEADER)


def read_pipeline_topics(spark: SparkSession, bootstrap: str, topic_a: str,
                         topic_b: str) -> tuple[DataFrame, DataFrame]:
    """A and B read read_committed now; B with its ``tag`` column (``mk-txn`` header)."""
    return read_committed(spark, bootstrap, topic_a), read_committed_tagged(spark, bootstrap,
                                                                          topic_b)


def pipeline_txn_frame(spark: SparkSession, path: str) -> DataFrame:
    """(tag, worker, session, txn, records, outcome): the ledger's ``P`` lines (a line
    whose CRC does not match, i.e. a torn last line, is dropped)."""
    from pyspark.sql import functions as F

    lines = spark.read.text(Path(path).resolve().as_uri())
    body = F.regexp_extract("value", r"^(.*)\t[0-9a-f]{8}$", 1)
    crc = F.regexp_extract("value", r"\t([0-9a-f]{8})$", 1)
    computed = F.lpad(F.lower(F.hex(F.crc32(body.cast("binary")))), 8, "0")
    f = F.col("f")
    return (lines.where((body != "") & (crc == computed))
            .select(F.split(body, "\t").alias("f")).where(f[0] == "P")
            .select(F.concat(F.lit("w"), f[2], F.lit("-s"), f[3], F.lit("-t"), f[4]).alias("tag"),
                    f[2].cast("long").alias("worker"), f[3].cast("long").alias("session"),
                    f[4].cast("long").alias("txn"), f[6].cast("long").alias("records"),
                    f[7].alias("outcome")))


def pipeline_check_frames(a: DataFrame, b: DataFrame, f: Transform,
                          txns: DataFrame | None = None) -> dict[str, DataFrame]:
    """``values`` (value, expected, copies, at) and the violating rows of each check
    (``per_txn`` and the transaction checks only with ``txns`` and a ``tag`` column)."""
    from pyspark.sql import functions as F

    expected = f(a).groupBy("value").agg(F.count(F.lit(1)).alias("expected"))
    tagged = "tag" in b.columns
    # where each copy is: B partition and offset, and the writing transaction's tag
    position = F.struct("partition", "offset", *(["tag"] if tagged else []))
    got = b.groupBy("value").agg(F.count(F.lit(1)).alias("copies"),
                                 F.sort_array(F.collect_list(position)).alias("at"))
    values = expected.join(got, "value", "full_outer")
    shown = F.substring(F.col("value").cast("string"), 1, 80).alias("value_prefix")
    duplicated = values.where("copies > expected").select(shown, "copies", "at")
    if txns is not None and tagged:  # each copy's transaction and its ledger outcome
        outcomes = txns.select("tag", "outcome")
        copies = (duplicated.select("value_prefix", "copies", F.explode("at").alias("copy"))
                  .select("value_prefix", "copies", "copy.*").join(outcomes, "tag", "left"))
        duplicated = copies.groupBy("value_prefix", "copies").agg(F.sort_array(F.collect_list(
            F.struct("partition", "offset", "tag", "outcome"))).alias("at"))
    frames = {
        "values": values,
        "pipeline_lost": values.where("copies IS NULL").select(shown, "expected"),
        "pipeline_duplicated": duplicated,
        "pipeline_phantom": values.where("expected IS NULL").select(shown, "copies", "at"),
    }
    if txns is not None and tagged:
        visible = b.groupBy("tag").agg(F.count(F.lit(1)).alias("visible"))
        per_txn = (txns.join(visible, "tag", "left")
                   .select("*", F.coalesce(F.col("visible"), F.lit(0)).alias("seen"))
                   .drop("visible").withColumnRenamed("seen", "visible"))
        frames["per_txn"] = per_txn
        frames["pipeline_aborted_read"] = (
            b.join(txns.where("outcome = 'abort'").select("tag"), "tag")
            .select("partition", "offset", "tag", shown))
        frames["pipeline_torn"] = per_txn.where(_TORN).select("tag", "records", "visible",
                                                              "outcome")
    return frames


def verify_pipeline(a: DataFrame, b: DataFrame, f: Transform = workload_transform, *,
                    txns: DataFrame | None = None, examples: int = 5,
                    ) -> tuple[dict[str, int], dict[str, list[dict[str, Any]]]]:
    """Every pipeline count (see the module docstring) and up to ``examples`` rows per
    violation.  ``a``, ``b``: DataFrames with ``value`` (binary), ``partition``,
    ``offset`` (``b`` optionally ``tag``); ``f``: A's rows -> their expected ``value``."""
    from pyspark.sql import functions as F

    frames = pipeline_check_frames(a, b, f, txns)
    row = frames["values"].agg(
        F.sum(F.coalesce(F.col("expected"), F.lit(0))).alias("pipeline_expected"),
        F.sum(F.coalesce(F.col("copies"), F.lit(0))).alias("pipeline_records"),
        F.sum(F.when(F.col("copies").isNull(), F.col("expected")).otherwise(0))
        .alias("pipeline_lost"),
        F.sum(F.when(F.col("copies") > F.col("expected"), 1).otherwise(0))
        .alias("pipeline_duplicated"),
        F.sum(F.when(F.col("copies") > F.col("expected"), F.col("copies") - F.col("expected"))
              .otherwise(0)).alias("pipeline_duplicate_copies"),
        F.sum(F.when(F.col("expected").isNull(), F.col("copies")).otherwise(0))
        .alias("pipeline_phantom")).collect()[0]
    counts = {name: int(row[name] or 0) for name in row.asDict()}
    if "per_txn" in frames:
        txn_row = frames["per_txn"].agg(*[
            F.sum(F.when(F.expr(condition), 1).otherwise(0)).alias(name) for name, condition in (
                ("pipeline_txn_committed", "outcome = 'commit'"),
                ("pipeline_txn_aborted", "outcome = 'abort'"),
                ("pipeline_txn_unknown", "outcome = 'unknown'"),
                ("pipeline_torn", _TORN))]).collect()[0]
        counts.update({name: int(txn_row[name] or 0) for name in txn_row.asDict()})
        counts["pipeline_aborted_read"] = frames["pipeline_aborted_read"].count()
    found: dict[str, list[dict[str, Any]]] = {}
    for name in PIPELINE_VIOLATIONS:
        if examples > 0 and counts.get(name, 0) > 0:
            found[name] = [json.loads(r["row"]) for r in frames[name].limit(examples).select(
                F.to_json(F.struct("*")).alias("row")).collect()]
    return counts, found


def verify_pipeline_topics(spark: SparkSession, bootstrap: str, topic_a: str, topic_b: str,
                           f: Transform = workload_transform, *, examples: int = 5,
                           ) -> tuple[dict[str, int], dict[str, list[dict[str, Any]]]]:
    """:func:`verify_pipeline` of topics A and B read read_committed through ``bootstrap``
    (no ledger: the transaction checks are left out)."""
    a, b = read_pipeline_topics(spark, bootstrap, topic_a, topic_b)
    return verify_pipeline(a, b, f, examples=examples)
