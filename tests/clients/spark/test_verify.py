"""The verifier on hand-made records and ledgers: a clean run passes, each violation counts.

Two producers (0, 1) of run ``r1`` send sequences 0..5, keys ``p<p>-k<seq % 2>``;
producer p's records are in partition p at offset = sequence.  The violations are
injected into disjoint records so each kind is counted exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from clients.spark.verify.job import (
    VIOLATIONS,
    ledger_frames,
    run_verify,
    verify_frames,
    write_report,
)
from clients.workload.ledger import LedgerWriter, scan_ledger
from clients.workload.run import decode_value, encode_value

pytestmark = pytest.mark.spark

RUN = "r1"
TOPIC = "orders"
SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                     StructField("topic", StringType()), StructField("partition", IntegerType()),
                     StructField("offset", LongType())])

Row = tuple[bytes | None, bytes | None, str, int, int]


def key(producer: int, seq: int) -> str:
    return f"p{producer}-k{seq % 2}"


def message(producer: int, seq: int, partition: int, offset: int, run: str = RUN) -> Row:
    return (key(producer, seq).encode(), encode_value(run, producer, seq, 30), TOPIC, partition,
            offset)


def clean_run() -> tuple[dict[tuple[int, int], Row], dict[tuple[int, int], tuple[int, int]]]:
    """Records by (producer, seq) and acks (producer, seq) -> (partition, offset)."""
    records = {(p, s): message(p, s, p, s) for p in range(2) for s in range(6)}
    acks = {ps: (r[3], r[4]) for ps, r in records.items() if ps != (1, 5)}  # (1, 5) unacked
    return records, acks


def write_ledger(path: Path, acks: dict[tuple[int, int], tuple[int, int]]) -> str:
    with LedgerWriter(path, RUN, TOPIC) as ledger:
        ledger.sent(0, 6)
        ledger.sent(1, 6)
        for (p, s), (partition, offset) in sorted(acks.items()):
            ledger.ack(p, s, key(p, s), TOPIC, partition, offset)
    return str(path)


def check(spark: SparkSession, rows: list[Row], ledger: str) -> tuple[dict[str, int],
                                                                       dict[str, Any]]:
    records: DataFrame = spark.createDataFrame(rows, SCHEMA)
    acks, sent = ledger_frames(spark, ledger, scan_ledger(ledger))
    return verify_frames(records, acks, sent, RUN)


def other_run() -> Row:
    return (b"k", encode_value("zz", 0, 0), TOPIC, 1, 6)


def test_value_encoding_round_trips() -> None:
    assert decode_value(encode_value(RUN, 3, 41, 100)) == (RUN, 3, 41)
    assert len(encode_value(RUN, 3, 41, 100)) == 100
    assert decode_value(b"mk1|r1|3|x|") is None and decode_value(None) is None


def test_a_clean_run_passes(spark: SparkSession, tmp_path: Path) -> None:
    records, acks = clean_run()
    counts, examples = check(spark, [*records.values(), other_run()],
                             write_ledger(tmp_path / "ledger.tsv", acks))
    assert counts == {"acked": 11, "sent": 12, "records": 13, "present": 12, "lost": 0,
                      "lost_at_offset": 0, "duplicated": 0, "duplicate_copies": 0,
                      "reordered_partition": 0, "reordered_key": 0, "phantom": 0,
                      "unacked_present": 1, "other_runs": 1}
    assert examples == {}


def test_each_violation_kind_is_caught(spark: SparkSession, tmp_path: Path) -> None:
    records, acks = clean_run()
    del records[(0, 1)]  # lost: acknowledged at p0/1, gone
    acks[(1, 0)] = (1, 9)  # lost at its offset: acknowledged at p1/9, present at p1/0
    duplicate = message(0, 2, 0, 6)  # duplicated: a second copy of (0, 2)
    records[(1, 2)], records[(1, 3)] = message(1, 2, 1, 3), message(1, 3, 1, 2)
    acks[(1, 2)], acks[(1, 3)] = (1, 3), (1, 2)  # reordered in partition 1 (keys differ)
    records[(0, 0)] = message(0, 0, 1, 7)  # reordered key: p0-k0 has seq 0 after seq 4
    acks[(0, 0)] = (1, 7)
    phantoms = [(b"k", b"garbage", TOPIC, 0, 7), (b"k", encode_value(RUN, 0, 6), TOPIC, 0, 8),
                (b"k", encode_value(RUN, 5, 0), TOPIC, 0, 9)]  # unparseable, unsent, unknown
    rows = [*records.values(), duplicate, other_run(), *phantoms]
    counts, examples = check(spark, rows, write_ledger(tmp_path / "ledger.tsv", acks))
    assert {name: counts[name] for name in VIOLATIONS} == {
        "lost": 1, "lost_at_offset": 1, "duplicated": 1, "reordered_partition": 1,
        "reordered_key": 1, "phantom": 3}
    assert (counts["duplicate_copies"], counts["unacked_present"], counts["other_runs"]) == (
        1, 1, 1)
    assert examples["lost"] == [{"producer": 0, "seq": 1, "key": "p0-k1", "partition": 0,
                                 "offset": 1}]
    assert examples["lost_at_offset"] == [{"producer": 1, "seq": 0, "key": "p1-k0",
                                           "partition": 1, "offset": 9,
                                           "at": [{"partition": 1, "offset": 0}]}]
    assert examples["duplicated"] == [{"producer": 0, "seq": 2, "copies": 2, "at": [
        {"partition": 0, "offset": 2}, {"partition": 0, "offset": 6}]}]
    assert examples["reordered_partition"] == [{"partition": 1, "offset": 3, "producer": 1,
                                                "seq": 2, "previous_in_partition": 3}]
    assert examples["reordered_key"] == [{"key": "p0-k0", "partition": 1, "offset": 7,
                                          "producer": 0, "seq": 0, "previous_in_key": 4}]
    assert sorted(e["offset"] for e in examples["phantom"]) == [7, 8, 9]


def test_a_parquet_sink_with_a_row_removed_and_a_torn_ledger(spark: SparkSession,
                                                            tmp_path: Path) -> None:
    records, acks = clean_run()
    ledger = write_ledger(tmp_path / "ledger.tsv", acks)
    with open(ledger, "a") as f:
        f.write("A\tr1\t0\t9\tp0-k1\torders\t0\t")  # a crash mid-line: ignored
    rows = [r for ps, r in records.items() if ps != (1, 4)]  # tampered copy: (1, 4) removed
    rows.append((b"k", b"other topic", "elsewhere", 0, 0))  # not this topic: not read
    sink = str(tmp_path / "sink")
    spark.createDataFrame(rows, SCHEMA).write.parquet(sink)
    report = run_verify(spark, ledger, sink=sink)
    assert (report.run_id, report.topic, report.ledger_torn_tail_bytes) == (RUN, TOPIC, 24)
    assert report.counts["lost"] == 1 and report.violations == 1 and not report.ok
    assert report.counts["records"] == 11 and report.counts["phantom"] == 0
    table = report.table()
    assert "lost" in table and "result: 1 VIOLATIONS" in table and "torn" in table
    write_report(report, str(tmp_path / "out" / "report.json"))
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["ok"] is False and saved["counts"]["lost"] == 1
    assert saved["examples"]["lost"][0]["seq"] == 4
    with pytest.raises(ValueError, match="exactly one of"):
        run_verify(spark, ledger)
