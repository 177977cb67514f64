"""The transactional checks of ``minikafka verify`` and the read_committed read they need.

A transactional run's ledger (:mod:`clients.workload.ledger` version 2) names each
transaction's sequence range and outcome (``T`` lines).  Its records are read with
``isolation_level="read_committed"`` (:func:`read_committed`: our
:class:`~clients.consumer.Consumer` on the driver, every partition from its log start to
its last stable offset, into a DataFrame with the source's key/value/topic/partition/
offset columns; the ``minikafka`` Spark source reads read_uncommitted).  Then, as Spark
DataFrame operations over the classified records (:func:`clients.spark.verify.job.classify`)
and the ledger's transactions expanded to one row per (producer, sequence):

==============  ===========================================================  =====
check           definition                                                   kind
==============  ===========================================================  =====
aborted read    a record of an aborted transaction visible to read_committed fail
torn            a committed (or unknown-outcome) transaction partly visible:  fail
                some of its records present, some not
txn reordered   in one partition, a transaction's records (first copies) in  fail
                an offset order other than their sequence order
txn committed   transactions that ended ``commit`` / ``abort`` / ``unknown``  info
/ aborted /     (unknown: all or nothing may be visible; counted as resolved
unknown         ``unknown_visible`` or ``unknown_invisible``)
==============  ===========================================================  =====

Committed records missing are the ``lost`` of :mod:`clients.spark.verify.job` (a
transactional run writes ``A`` lines only for committed transactions), and duplicates,
order, phantoms are checked there as for any run.

Costs: :func:`read_committed` holds the records on the driver (O(records) memory; a
verification topic of a few hundred thousand small records); the checks are one
explode (O(records in the ledger)), one join, one aggregation and one window.
Thread safety: one job per SparkSession at a time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clients.consumer.consumer import Consumer
from clients.protocol.errors import RequestTimedOutError
from clients.protocol.topics import TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TXN_VIOLATIONS = ("aborted_read", "torn", "txn_reordered")
TXN_LABELS = {
    "txn_committed": "transactions committed", "txn_aborted": "transactions aborted",
    "txn_unknown": "transactions unknown outcome", "unknown_visible": "  resolved visible",
    "unknown_invisible": "  resolved invisible", "aborted_read": "aborted read",
    "torn": "torn transactions", "txn_reordered": "reordered (transaction)",
}
RECORD_COLUMNS = "key binary, value binary, topic string, partition int, offset long"


def read_committed(spark: SparkSession, bootstrap: str, topic: str, *,
                   timeout_s: float = 120.0, header: str | None = None) -> DataFrame:
    """Every record of ``topic`` visible to read_committed, read now (see the module
    docstring); fails with REQUEST_TIMED_OUT when a partition stops making progress.
    With ``header``: one more column, ``tag`` (string), that header's value (the
    pipeline's transaction tag, :mod:`clients.spark.verify.pipeline`)."""
    rows: list[tuple[Any, ...]] = []
    consumer = Consumer(bootstrap, isolation_level="read_committed", auto_offset_reset="none",
                        enable_auto_commit=False, client_id=f"minikafka-verify-{topic}")
    try:
        partitions = consumer.partitions_for(topic) or []
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            raise ValueError(f"topic {topic!r} has no partitions (does it exist?)")
        consumer.assign(tps)
        start = consumer.beginning_offsets(tps)
        end = _settled_end_offsets(bootstrap, consumer, tps, timeout_s)
        for tp in tps:
            consumer.seek(tp, start[tp])
        progress_at, positions = time.monotonic(), dict(start)
        while any(positions[tp] < end[tp] for tp in tps):
            for tp, records in consumer.poll(500, max_records=10_000).items():
                rows.extend((r.key, r.value, topic, tp.partition, r.offset,
                             *([_header(r.headers, header)] if header else []))
                            for r in records if r.offset < end[tp])
            moved = {tp: consumer.position(tp) for tp in tps}
            if moved != positions:
                positions, progress_at = moved, time.monotonic()
            elif time.monotonic() - progress_at > timeout_s:
                raise RequestTimedOutError(f"reading {topic} read_committed: stuck at "
                                           f"{positions} (ends {end}) for {timeout_s:.0f} s")
    finally:
        consumer.close()
    return spark.createDataFrame(rows, RECORD_COLUMNS + (", tag string" if header else ""))


def _header(headers: tuple[tuple[str, bytes | None], ...], name: str) -> str | None:
    value = next((v for k, v in headers if k == name), None)
    return None if value is None else value.decode("utf-8", "replace")


def _settled_end_offsets(bootstrap: str, consumer: Consumer, tps: list[TopicPartition],
                         timeout_s: float) -> dict[TopicPartition, int]:
    """The read_committed end offsets once every transaction the workload ended has its
    markers in place: EndTxn is answered before the coordinator's markers reach the
    leaders (as in Kafka), so right after the run the last stable offset can still sit
    below the high watermark and the last committed records would look lost.  Waits until
    the LSO equals the high watermark on every partition (checked every 0.2 s), at most
    ``timeout_s`` (a transaction left open ends by its timeout); then reads what is stable."""
    deadline = time.monotonic() + timeout_s
    with Consumer(bootstrap, enable_auto_commit=False,
                  client_id="minikafka-verify-high-watermarks") as plain:
        while True:
            stable = consumer.end_offsets(tps)
            if stable == plain.end_offsets(tps) or time.monotonic() > deadline:
                return stable
            time.sleep(0.2)


def txn_frame(spark: SparkSession, path: str) -> DataFrame:
    """(producer, txn, first, end, outcome): the ledger's ``T`` lines, read by Spark
    (lines whose CRC does not match, i.e. a torn last line, are dropped)."""
    from pyspark.sql import functions as F

    lines = spark.read.text(Path(path).resolve().as_uri())
    body = F.regexp_extract("value", r"^(.*)\t[0-9a-f]{8}$", 1)
    crc = F.regexp_extract("value", r"\t([0-9a-f]{8})$", 1)
    computed = F.lpad(F.lower(F.hex(F.crc32(body.cast("binary")))), 8, "0")
    fields = F.split(body, "\t")
    return (lines.where((body != "") & (crc == computed))
            .select(fields.alias("f")).where(F.col("f")[0] == "T")
            .select(F.col("f")[2].cast("long").alias("producer"),
                    F.col("f")[3].cast("long").alias("txn"),
                    F.col("f")[4].cast("long").alias("first"),
                    F.col("f")[5].cast("long").alias("end"), F.col("f")[6].alias("outcome")))


def txn_check_frames(classified: DataFrame, ordered: DataFrame,
                     txns: DataFrame) -> dict[str, DataFrame]:
    """The violating rows of each check (``aborted_read``, ``torn``, ``txn_reordered``)
    and ``per_txn`` (producer, txn, outcome, size, visible), from the classified records
    and ``ordered`` (first copies: partition, offset, producer, seq)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    members = txns.where(F.col("end") > F.col("first")).select(
        "producer", "txn", "outcome",
        F.explode(F.sequence(F.col("first"), F.col("end") - 1)).alias("seq"))
    visible = classified.where(F.col("class") == "valid").join(members, ["producer", "seq"])
    present = visible.select("producer", "seq").distinct().withColumn("seen", F.lit(1))
    per_txn = (members.join(present, ["producer", "seq"], "left")
               .groupBy("producer", "txn", "outcome")
               .agg(F.count(F.lit(1)).alias("size"), F.count("seen").alias("visible")))
    in_txn = Window.partitionBy("producer", "txn", "partition").orderBy("offset")
    firsts = ordered.select("partition", "offset", "producer", "seq").join(
        members.select("producer", "seq", "txn"), ["producer", "seq"])
    reordered = firsts.select("*", F.lag("seq").over(in_txn).alias("previous_in_txn"))
    return {
        "per_txn": per_txn,
        "aborted_read": visible.where(F.col("outcome") == "abort")
        .select("partition", "offset", "producer", "seq", "txn"),
        "torn": per_txn.where(TORN),
        "txn_reordered": reordered.where(F.col("seq") < F.col("previous_in_txn"))
        .select("partition", "offset", "producer", "txn", "seq", "previous_in_txn"),
    }


TORN = "outcome != 'abort' AND visible > 0 AND visible < size"
