"""verify's pipeline check on hand-made topics and ledgers: a clean B = f(A) passes, and
each violation (lost, duplicated, phantom, aborted read, torn) is reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from clients.spark.verify.job import VerifyReport
from clients.spark.verify.pipeline import (
    PIPELINE_VIOLATIONS,
    pipeline_txn_frame,
    verify_pipeline,
    workload_transform,
)
from clients.spark.verify.transactions import RECORD_COLUMNS
from clients.workload.ledger import LedgerWriter, scan_ledger
from clients.workload.pipeline import transform

pytestmark = [pytest.mark.spark]

RUN = "piperun"
A = [(p, o, f"a-{p}-{o}".encode()) for p in (0, 1) for o in range(4)]  # committed A records
# pipeline transactions: tag -> (A records it wrote, outcome)
TXNS = {"w0-s0-t0": (A[0:3], "commit"), "w0-s0-t1": (A[3:5], "abort"),
        "w0-s1-t0": (A[3:6], "commit"), "w1-s0-t0": (A[6:8], "commit")}
B_COLUMNS = RECORD_COLUMNS + ", tag string"


def b_row(tag: str, index: int, record: tuple[int, int, bytes]) -> tuple[Any, ...]:
    partition, offset, value = record
    return (b"k", transform(partition, offset, value), "b", index % 2, index, tag)


def clean_b() -> list[tuple[Any, ...]]:
    return [b_row(tag, i, r) for i, (tag, r) in enumerate(
        (tag, r) for tag, (records, outcome) in TXNS.items() if outcome == "commit"
        for r in records)]


def check(spark: SparkSession, tmp_path: Path, b: list[tuple[Any, ...]]) -> tuple[
        dict[str, int], dict[str, list[dict[str, Any]]]]:
    path = tmp_path / "ledger.tsv"
    with LedgerWriter(path, RUN, "a") as ledger:
        for tag, (records, outcome) in TXNS.items():
            worker, session, txn = (int(part[1:]) for part in tag.split("-"))
            ledger.pipeline(worker, session, txn, "b", len(records), outcome)
    assert scan_ledger(path).pipeline_outcomes == {"commit": 3, "abort": 1}
    a = spark.createDataFrame([(b"k", v, "a", p, o) for p, o, v in A], RECORD_COLUMNS)
    return verify_pipeline(a, spark.createDataFrame(b, B_COLUMNS),
                           txns=pipeline_txn_frame(spark, str(path)))


def violations(counts: dict[str, int]) -> dict[str, int]:
    return {name: counts[name] for name in PIPELINE_VIOLATIONS if counts[name]}


def test_the_spark_transform_is_the_workloads(spark: SparkSession) -> None:
    a = spark.createDataFrame([(None, v, "a", p, o) for p, o, v in A], RECORD_COLUMNS)
    assert sorted(r.value for r in workload_transform(a).collect()) == sorted(
        transform(p, o, v) for p, o, v in A)


def test_a_clean_pipeline_passes(spark: SparkSession, tmp_path: Path) -> None:
    counts, examples = check(spark, tmp_path, clean_b())
    assert violations(counts) == {} and examples == {}
    assert (counts["pipeline_expected"], counts["pipeline_records"]) == (8, 8)
    assert (counts["pipeline_txn_committed"], counts["pipeline_txn_aborted"]) == (3, 1)
    report = VerifyReport(RUN, "a", "test", "ledger", counts)
    assert report.ok and "pipeline aborted read" in report.table()


def test_a_missing_output_is_lost_and_tears_its_transaction(spark: SparkSession,
                                                            tmp_path: Path) -> None:
    b = clean_b()
    del b[1]  # second record of w0-s0-t0
    counts, examples = check(spark, tmp_path, b)
    assert violations(counts) == {"pipeline_lost": 1, "pipeline_torn": 1}
    assert examples["pipeline_torn"] == [{"tag": "w0-s0-t0", "records": 3, "visible": 2,
                                          "outcome": "commit"}]
    assert examples["pipeline_lost"][0]["value_prefix"] == "mkp1|0|1|a-0-1"
    assert not VerifyReport(RUN, "a", "test", "ledger", counts).ok


def test_duplicates_and_phantoms_are_reported(spark: SparkSession, tmp_path: Path) -> None:
    b = clean_b()
    b.append(b_row("w1-s0-t0", 20, A[7]))  # the same transaction's output twice
    b.append(b_row("w1-s0-t0", 21, (0, 99, b"a-0-99")))  # no A record at 0/99
    counts, examples = check(spark, tmp_path, b)
    assert violations(counts) == {"pipeline_duplicated": 1, "pipeline_phantom": 1}
    assert counts["pipeline_duplicate_copies"] == 1
    assert examples["pipeline_duplicated"][0]["copies"] == 2
    assert examples["pipeline_phantom"][0]["value_prefix"] == "mkp1|0|99|a-0-99"


def test_an_aborted_transactions_output_is_an_aborted_read(spark: SparkSession,
                                                           tmp_path: Path) -> None:
    b = clean_b() + [b_row("w0-s0-t1", 30 + i, r) for i, r in enumerate(A[3:5])]
    counts, examples = check(spark, tmp_path, b)
    # the aborted copies repeat what w0-s1-t0 committed: duplicates as well
    assert violations(counts) == {"pipeline_aborted_read": 2, "pipeline_duplicated": 2}
    assert {e["tag"] for e in examples["pipeline_aborted_read"]} == {"w0-s0-t1"}
    # each duplicated value names its copies' transactions and their ledger outcomes
    copies = {e["value_prefix"]: sorted((c["tag"], c["outcome"]) for c in e["at"])
              for e in examples["pipeline_duplicated"]}
    assert copies == {transform(p, o, v).decode(): [("w0-s0-t1", "abort"),
                                                     ("w0-s1-t0", "commit")]
                      for p, o, v in A[3:5]}
