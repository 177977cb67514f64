"""The workload ledger: round trip, torn tails tolerated, garbage elsewhere rejected."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from clients.workload.ledger import (
    MAX_LINE_BYTES,
    Ack,
    LedgerError,
    LedgerHeader,
    LedgerWriter,
    Sent,
    TxnBegin,
    TxnEnd,
    crc_hex,
    format_record,
    parse_line,
    read_ledger,
    scan_ledger,
)

RUN = "run-1"


def write_sample(path: Path) -> list[Ack]:
    acks = [Ack(RUN, p, s, f"p{p}-k{s % 2}", "orders", p, 10 * s + p)
            for p in range(2) for s in range(3)]
    with LedgerWriter(path, RUN, "orders") as ledger:
        ledger.sent(0, 2)
        ledger.sent(1, 3)
        ledger.sent(0, 3)
        for ack in acks:
            ledger.ack(*ack[1:])
    return acks


def test_round_trip_and_summary(tmp_path: Path) -> None:
    path = tmp_path / "ledger.tsv"
    acks = write_sample(path)
    records = read_ledger(path)
    assert isinstance(records[0], LedgerHeader) and records[0].run_id == RUN
    assert records[0].topic == "orders"
    assert records[1:4] == [Sent(RUN, 0, 2), Sent(RUN, 1, 3), Sent(RUN, 0, 3)]
    assert records[4:] == acks
    summary = scan_ledger(path)
    assert (summary.acks, summary.sent_below, summary.torn_tail_bytes) == (6, {0: 3, 1: 3}, 0)
    assert summary.sent == 6


def test_every_torn_prefix_of_the_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "ledger.tsv"
    write_sample(path)
    data = path.read_bytes()
    last_start = data.rindex(b"\n", 0, len(data) - 1) + 1
    for cut in range(last_start + 1, len(data) - 1):
        path.write_bytes(data[:cut])
        summary = scan_ledger(path)
        assert summary.acks == 5, cut
        assert summary.torn_tail_bytes == cut - last_start
    path.write_bytes(data[:-1])  # only the newline lost: the line is complete, kept
    assert scan_ledger(path).acks == 6


def test_a_long_tail_of_nul_bytes_is_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "ledger.tsv"
    write_sample(path)
    with open(path, "ab") as f:
        f.write(b"A\t" + b"\0" * (3 * MAX_LINE_BYTES))
    summary = scan_ledger(path)
    assert summary.acks == 6 and summary.torn_tail_bytes == 2 + 3 * MAX_LINE_BYTES


@pytest.mark.parametrize(("damage", "message"), [
    (lambda lines: lines.__setitem__(3, lines[3].replace(b"\t0\t", b"\t7\t", 1)),
     "4: CRC mismatch"),
    (lambda lines: lines.insert(2, b"hello world\n"), "3: no CRC field"),
    (lambda lines: lines.insert(2, b"\n"), "3: no CRC field"),
    (lambda lines: lines.pop(0), "1: the first line must be the H"),
    (lambda lines: lines.insert(2, lines[0]), "3: a second H"),
    (lambda lines: lines.insert(5, b"A" * (MAX_LINE_BYTES + 10) + b"\n"), "6: line longer"),
    (lambda lines: lines.insert(2, b"\xff\xfe\n"), "3: 'utf-8' codec"),
])
def test_garbage_before_the_last_line_is_a_precise_error(tmp_path: Path, damage: object,
                                                         message: str) -> None:
    path = tmp_path / "ledger.tsv"
    write_sample(path)
    lines = path.read_bytes().splitlines(keepends=True)
    damage(lines)  # type: ignore[operator]
    path.write_bytes(b"".join(lines))
    with pytest.raises(LedgerError, match=f"ledger.tsv:{message}"):
        scan_ledger(path)


def test_records_are_checked_field_by_field() -> None:
    def line(*fields: str) -> str:
        body = "\t".join(fields)
        return f"{body}\t{crc_hex(body)}"

    assert parse_line(line("S", RUN, "0", "5")) == Sent(RUN, 0, 5)
    for fields, message in [(("S", RUN, "-1", "5"), "producer '-1' is not a non-negative"),
                            (("S", RUN, "01", "5"), "producer '01'"),
                            (("S", RUN, "0"), "S line has 3 fields, expected 4"),
                            (("X", RUN), "unknown record kind 'X'"),
                            (("S", "bad run", "0", "5"), "bad run_id"),
                            (("H", "3", RUN, "t", "0"), "unsupported ledger version '3'"),
                            (("A", RUN, "0", "0", "k", "bad/topic", "0", "0"), "bad topic")]:
        with pytest.raises(ValueError, match=message):
            parse_line(line(*fields))


def test_other_run_ids_empty_and_missing_files_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "ledger.tsv"
    write_sample(path)
    with open(path, "a") as f:
        f.write(format_record(Ack("run-2", 0, 9, "k", "orders", 0, 99)))
    with pytest.raises(LedgerError, match="run id 'run-2' differs from the header's 'run-1'"):
        scan_ledger(path)
    empty = tmp_path / "empty.tsv"
    empty.write_bytes(b"")
    with pytest.raises(LedgerError, match="empty"):
        scan_ledger(empty)
    with pytest.raises(LedgerError, match="does not exist"):
        scan_ledger(tmp_path / "nope.tsv")


def test_writer_rejects_bad_values_reuse_and_use_after_close(tmp_path: Path) -> None:
    path = tmp_path / "ledger.tsv"
    ledger = LedgerWriter(path, RUN, "orders")
    with pytest.raises(LedgerError, match="key 'a\\\\tb' cannot be written"):
        ledger.ack(0, 0, "a\tb", "orders", 0, 0)
    with pytest.raises(LedgerError, match="offset must be an int"):
        ledger.ack(0, 0, "k", "orders", 0, -1)
    ledger.close()
    with pytest.raises(LedgerError, match="closed"):
        ledger.sent(0, 1)
    with pytest.raises(LedgerError, match="already exists"):
        LedgerWriter(path, RUN, "orders")
    with pytest.raises(LedgerError, match="run_id"):
        LedgerWriter(tmp_path / "other.tsv", "no spaces", "orders")
    assert scan_ledger(path).acks == 0


def test_sent_lines_are_on_disk_at_once_acks_after_the_flush_interval(tmp_path: Path) -> None:
    path = tmp_path / "ledger.tsv"
    now = [0.0]
    ledger = LedgerWriter(path, RUN, "orders", flush_interval_ms=1000, clock=lambda: now[0])
    ledger.sent(0, 10)
    assert scan_ledger(path).sent_below == {0: 10}
    ledger.ack(0, 0, "k", "orders", 0, 0)
    assert scan_ledger(path).acks == 0  # buffered
    now[0] = 1.5
    ledger.ack(0, 1, "k", "orders", 0, 1)
    assert scan_ledger(path).acks == 2  # the interval passed: handed to the OS
    ledger.close()


def test_concurrent_appends_give_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "ledger.tsv"
    with LedgerWriter(path, RUN, "orders", flush_interval_ms=0) as ledger:
        def append(producer: int) -> None:
            for s in range(500):
                ledger.ack(producer, s, f"p{producer}", "orders", producer, s)

        threads = [threading.Thread(target=append, args=(p,)) for p in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    acks = [r for r in read_ledger(path) if isinstance(r, Ack)]
    assert sorted((a.producer, a.sequence) for a in acks) == [
        (p, s) for p in range(4) for s in range(500)]


def test_transaction_lines_round_trip_and_are_summarised(tmp_path: Path) -> None:
    path = tmp_path / "ledger.tsv"
    with LedgerWriter(path, RUN, "orders") as ledger:
        ledger.sent(0, 10)
        ledger.begin(0, 0, 0)
        ledger.ack(0, 0, "p0-k0", "orders", 1, 7)
        ledger.end(0, 0, 0, 3, "commit")
        ledger.begin(0, 1, 3)
        ledger.end(0, 1, 3, 5, "abort")
        ledger.begin(0, 2, 5)
        ledger.end(0, 2, 5, 6, "unknown")
        ledger.begin(0, 3, 6)  # the run stopped inside it: open
    records = read_ledger(path)
    assert isinstance(records[0], LedgerHeader) and records[0].version == 2
    assert records[2:5] == [TxnBegin(RUN, 0, 0, 0), Ack(RUN, 0, 0, "p0-k0", "orders", 1, 7),
                            TxnEnd(RUN, 0, 0, 0, 3, "commit")]
    assert records[-1] == TxnBegin(RUN, 0, 3, 6)
    summary = scan_ledger(path)
    assert summary.transactional and summary.begun == 4 and summary.open_transactions == 1
    assert summary.outcomes == {"commit": 1, "abort": 1, "unknown": 1}
    with pytest.raises(LedgerError, match="outcome must be one of"):
        format_record(TxnEnd(RUN, 0, 0, 0, 3, "maybe"))
    with pytest.raises(LedgerError, match="outcome must be one of"):
        format_record(TxnEnd(RUN, 0, 0, 3, 2, "commit"))


def test_transaction_lines_are_checked_field_by_field() -> None:
    def line(*fields: str) -> str:
        body = "\t".join(fields)
        return f"{body}\t{crc_hex(body)}"

    assert parse_line(line("B", RUN, "1", "4", "40")) == TxnBegin(RUN, 1, 4, 40)
    assert parse_line(line("T", RUN, "1", "4", "40", "45", "abort")) == \
        TxnEnd(RUN, 1, 4, 40, 45, "abort")
    for fields, message in [(("T", RUN, "1", "4", "40", "39", "commit"), "bad transaction end"),
                            (("T", RUN, "1", "4", "40", "45", "maybe"), "bad transaction end"),
                            (("T", RUN, "1", "4", "40", "45"), "T line has 6 fields"),
                            (("B", RUN, "1", "x", "40"), "txn 'x' is not a non-negative")]:
        with pytest.raises(ValueError, match=message):
            parse_line(line(*fields))


def test_a_version_1_ledger_is_read_and_may_not_hold_transaction_lines(tmp_path: Path) -> None:
    path = tmp_path / "v1.tsv"
    lines = [format_record(LedgerHeader(RUN, "orders", 5, version=1)),
             format_record(Sent(RUN, 0, 2)), format_record(Ack(RUN, 0, 0, "k", "orders", 0, 0))]
    path.write_text("".join(lines))
    summary = scan_ledger(path)
    assert (summary.header.version, summary.acks, summary.transactional) == (1, 1, False)
    path.write_text("".join(lines) + format_record(TxnBegin(RUN, 0, 0, 1)))
    with pytest.raises(LedgerError, match=r"v1\.tsv:4: a transaction line in a version 1 ledger"):
        scan_ledger(path)
