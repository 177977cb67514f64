"""verify's transactional checks on hand-made histories: a clean one passes, each
violation kind (aborted read, torn, reordered within a transaction) is caught, and an
unknown outcome may resolve either way but not in part."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from clients.spark.verify.job import VIOLATIONS, VerifyReport, ledger_frames, verify_frames
from clients.spark.verify.transactions import RECORD_COLUMNS, TXN_VIOLATIONS, txn_frame
from clients.workload.ledger import LedgerWriter, scan_ledger
from clients.workload.run import encode_value

pytestmark = [pytest.mark.spark]

RUN = "txrun"
TOPIC = "tx"
# producer 0's transactions: (first, end, outcome) and where each record lands
TXNS = [(0, 3, "commit"), (3, 5, "abort"), (5, 7, "unknown"), (7, 9, "commit")]
PLACES = {0: (0, 0), 1: (1, 0), 2: (0, 1), 3: (0, 2), 4: (1, 1), 5: (0, 3), 6: (1, 2),
          7: (0, 4), 8: (1, 3)}  # seq -> (partition, offset), as written
Row = tuple[bytes, bytes, str, int, int]


def row(seq: int, partition: int, offset: int) -> Row:
    return (f"p0-k{partition}".encode(), encode_value(RUN, 0, seq, 30), TOPIC, partition,
            offset)


def write_ledger(path: Path) -> str:
    with LedgerWriter(path, RUN, TOPIC) as ledger:
        ledger.sent(0, 9)
        for txn, (first, end, outcome) in enumerate(TXNS):
            ledger.begin(0, txn, first)
            if outcome == "commit":
                for seq in range(first, end):
                    ledger.ack(0, seq, f"p0-k{PLACES[seq][0]}", TOPIC, *PLACES[seq])
            ledger.end(0, txn, first, end, outcome)
        ledger.begin(0, len(TXNS), 9)  # open: the run stopped inside it
    return str(path)


def check(spark: SparkSession, rows: list[Row], tmp_path: Path) -> tuple[dict[str, int],
                                                                          dict[str, Any]]:
    ledger = write_ledger(tmp_path / "ledger.tsv")
    acks, sent = ledger_frames(spark, ledger, scan_ledger(ledger))
    return verify_frames(spark.createDataFrame(rows, RECORD_COLUMNS), acks, sent, RUN,
                         txns=txn_frame(spark, ledger))


def committed(*, unknown_visible: bool) -> dict[int, Row]:
    seqs = [0, 1, 2, 7, 8] + ([5, 6] if unknown_visible else [])
    return {seq: row(seq, *PLACES[seq]) for seq in seqs}


@pytest.mark.parametrize("unknown_visible", [True, False])
def test_a_clean_history_passes(spark: SparkSession, tmp_path: Path,
                                unknown_visible: bool) -> None:
    counts, examples = check(spark, list(committed(unknown_visible=unknown_visible).values()),
                             tmp_path)
    assert {name: counts[name] for name in (*VIOLATIONS, *TXN_VIOLATIONS)} == dict.fromkeys(
        (*VIOLATIONS, *TXN_VIOLATIONS), 0)
    assert (counts["txn_committed"], counts["txn_aborted"], counts["txn_unknown"]) == (2, 1, 1)
    assert (counts["unknown_visible"], counts["unknown_invisible"]) == (
        (1, 0) if unknown_visible else (0, 1))
    assert counts["unacked_present"] == (2 if unknown_visible else 0)
    assert examples == {}
    report = VerifyReport(RUN, TOPIC, "test", "ledger", counts)
    assert report.ok and "torn transactions" in report.table()


def test_each_transactional_violation_is_caught(spark: SparkSession, tmp_path: Path) -> None:
    rows = committed(unknown_visible=False)
    rows[3] = row(3, *PLACES[3])  # aborted read: a record of the aborted transaction
    del rows[8]  # torn: committed transaction 3 without its second record (and it is lost)
    rows[5] = row(5, *PLACES[5])  # torn: unknown transaction 2 half visible
    rows[0], rows[2] = row(0, 0, 1), row(2, 0, 0)  # transaction 0 reordered in partition 0
    counts, examples = check(spark, list(rows.values()), tmp_path)
    assert {name: counts[name] for name in TXN_VIOLATIONS} == {
        "aborted_read": 1, "torn": 2, "txn_reordered": 1}
    # the same damage as the non-transactional checks see it: seq 8 lost, seqs 0 and 2
    # not at their acknowledged offsets, and out of order in their partition and key
    assert (counts["lost"], counts["lost_at_offset"], counts["reordered_partition"],
            counts["reordered_key"]) == (1, 2, 1, 1)
    assert examples["aborted_read"] == [{"partition": 0, "offset": 2, "producer": 0,
                                         "seq": 3, "txn": 1}]
    assert sorted((e["txn"], e["outcome"], e["size"], e["visible"])
                  for e in examples["torn"]) == [(2, "unknown", 2, 1), (3, "commit", 2, 1)]
    assert examples["txn_reordered"] == [{"partition": 0, "offset": 1, "producer": 0,
                                          "txn": 0, "seq": 0, "previous_in_txn": 2}]
    report = VerifyReport(RUN, TOPIC, "test", "ledger", counts, examples)
    assert report.violations == 4 + 5 and "aborted read" in report.table()


def test_a_run_without_transactions_has_no_transactional_rows(tmp_path: Path) -> None:
    counts = {name: 0 for name in ("acked", "lost")}
    assert "torn" not in VerifyReport(RUN, TOPIC, "test", "ledger", counts).table()
