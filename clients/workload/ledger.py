"""The workload's ledger: an append-only text file of what was sent and acknowledged.

``minikafka workload`` writes it, ``minikafka verify`` checks a topic against it.  One
line per record, fields separated by one TAB, UTF-8, ``\\n``-terminated; the last field
of every line is the CRC-32 (IEEE, as ``zlib.crc32`` and Spark's ``crc32``) of the
line's text before that last TAB, as 8 lowercase hex digits::

    kind  fields (after the kind)                                   when
    ----  --------------------------------------------------------  -------------------
    H     version(=2)  run_id  topic  created_ms                    first line, once
    S     run_id  producer  sent_below                              before sending
    A     run_id  producer  sequence  key  topic  partition  offset one per acknowledgment
    B     run_id  producer  txn  first_sequence                     transaction begun
    T     run_id  producer  txn  first_sequence  end_sequence  outcome
                                                                    transaction ended
    P     run_id  worker  session  txn  topic  records  outcome     pipeline transaction
                                                                    ended

    e.g.  A<TAB>7f3a9c01<TAB>2<TAB>41<TAB>p2-k1<TAB>verify<TAB>0<TAB>1534<TAB>9b1c03de

``producer`` is the workload's logical producer number (0..N-1), ``sequence`` the
producer's message number (0, 1, 2, ...), ``key`` the record key as text.  An ``S``
("sent") line announces that producer ``producer`` may send sequences below
``sent_below``: the verifier calls a record of this run *phantom* when its sequence is
at or above the largest announcement of its producer.

Transactions (version 2, written by the workload's transactional mode): logical
producer ``producer`` numbers its transactions ``txn`` = 0, 1, 2, ...; the records of a
transaction are the producer's sequences ``first_sequence <= sequence < end_sequence``
(consecutive: a transaction holds one range).  ``B`` is written when the transaction
begins; ``T`` when its outcome is known, ``outcome`` one of ``commit``
(``commit_transaction`` returned), ``abort`` (it was aborted, or never asked to commit
before its producer was fenced or restarted: it cannot commit) and ``unknown``
(``commit_transaction`` was called and failed: all or nothing may be visible).  A
``B`` without a ``T`` (the workload stopped inside it) is *open*: not judged.  In a
transactional run ``A`` lines are written only for the records of committed
transactions, after ``commit_transaction`` returned (the acknowledged offset is where
the committed record must be).  Version 1 ledgers (no ``B``/``T`` lines) are read as
before; a version 1 file with a ``B``, ``T`` or ``P`` line is rejected.

Pipeline (version 2, written by the workload's consume-transform-produce mode,
:mod:`clients.workload.pipeline`): pipeline worker ``worker``'s session ``session`` (0,
1, ... : a new one after each kill) numbers its transactions ``txn``; ``P`` says that
transaction wrote ``records`` records to ``topic`` (the pipeline's output; the header's
topic is its input) and ended with ``outcome`` (as for ``T``).  Each output record
carries the header ``mk-txn: w<worker>-s<session>-t<txn>``, so verify can tell which
transaction wrote it.

Durability (fsync policy): an ``S`` line is written, flushed and fsync'd before any
sequence it announces is sent, so the announced bound is never behind what reached the
cluster, even after a crash of the workload or of the machine.  ``A`` lines are
buffered (at most ``buffer_bytes``), handed to the OS at least every
``flush_interval_ms`` (checked on each append) and fsync'd on :meth:`LedgerWriter.close`.
Losing the tail of the ``A`` lines in a crash is safe: those records then count as
*unacknowledged but present*, which is allowed; it can never produce a false violation.

Reading: everything up to the last ``\\n`` must be valid; the bytes after it (a torn
last line of a crash: a prefix of a line, or NUL bytes from a file extended but never
written) are ignored and reported as ``torn_tail_bytes``.  A bad line anywhere else
raises :class:`LedgerError` naming the file, the line number and what is wrong.  A
complete last line whose newline was lost (it parses and its CRC matches) is kept.

Costs: append O(line); :func:`scan_ledger` is one streaming pass, O(lines) time and
O(producers) memory; :func:`read_ledger` keeps every record (tests, small files).
Thread safety: one :class:`LedgerWriter` may be used from any number of threads (one
lock; appends are short).  One writer per file; readers may read while it writes (they
see a prefix, possibly with a torn tail).
"""

from __future__ import annotations

import os
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, NamedTuple

VERSION = 2
READABLE_VERSIONS = ("1", "2")
OUTCOMES = ("commit", "abort", "unknown")
MAX_LINE_BYTES = 4096
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_KEY = re.compile(r"^[^\t\r\n]{0,1024}$")
_CRC = re.compile(r"^[0-9a-f]{8}$")
_INT = re.compile(r"^(0|[1-9][0-9]{0,17})$")  # non-negative, fits an int64


class LedgerError(ValueError):
    """A ledger file is malformed (where and what), or a value cannot be written."""


class LedgerHeader(NamedTuple):
    run_id: str
    topic: str
    created_ms: int
    version: int = VERSION


class Sent(NamedTuple):
    """Producer ``producer`` may have sent every sequence below ``sent_below``."""

    run_id: str
    producer: int
    sent_below: int


class Ack(NamedTuple):
    run_id: str
    producer: int
    sequence: int
    key: str
    topic: str
    partition: int
    offset: int


class TxnBegin(NamedTuple):
    """Producer ``producer`` began its transaction ``txn`` at sequence ``first_sequence``."""

    run_id: str
    producer: int
    txn: int
    first_sequence: int


class TxnEnd(NamedTuple):
    """Transaction ``txn`` of ``producer`` holds sequences [first, end) and ended with
    ``outcome`` (one of :data:`OUTCOMES`)."""

    run_id: str
    producer: int
    txn: int
    first_sequence: int
    end_sequence: int
    outcome: str


class PipelineTxn(NamedTuple):
    """Transaction ``txn`` of pipeline worker ``worker``'s session ``session`` wrote
    ``records`` records to ``topic`` and ended with ``outcome`` (one of :data:`OUTCOMES`)."""

    run_id: str
    worker: int
    session: int
    txn: int
    topic: str
    records: int
    outcome: str


LedgerRecord = LedgerHeader | Sent | Ack | TxnBegin | TxnEnd | PipelineTxn


def crc_hex(body: str) -> str:
    return f"{zlib.crc32(body.encode()) & 0xFFFFFFFF:08x}"


def _line(fields: list[str]) -> str:
    body = "\t".join(fields)
    return f"{body}\t{crc_hex(body)}\n"


def format_record(record: LedgerRecord) -> str:
    """The line (with its newline) for one record; values are checked first."""
    if isinstance(record, LedgerHeader):
        _check(_RUN_ID, record.run_id, "run_id")
        _check(_NAME, record.topic, "topic")
        return _line(["H", str(record.version), record.run_id, record.topic,
                      str(record.created_ms)])
    if isinstance(record, Sent):
        _check(_RUN_ID, record.run_id, "run_id")
        return _line(["S", record.run_id, _nat(record.producer, "producer"),
                      _nat(record.sent_below, "sent_below")])
    _check(_RUN_ID, record.run_id, "run_id")
    if isinstance(record, TxnBegin):
        return _line(["B", record.run_id, _nat(record.producer, "producer"),
                      _nat(record.txn, "txn"), _nat(record.first_sequence, "first_sequence")])
    if isinstance(record, TxnEnd):
        if record.outcome not in OUTCOMES or record.end_sequence < record.first_sequence:
            raise LedgerError(f"transaction outcome must be one of {OUTCOMES} and "
                              f"end_sequence >= first_sequence, got {record!r}")
        return _line(["T", record.run_id, _nat(record.producer, "producer"),
                      _nat(record.txn, "txn"), _nat(record.first_sequence, "first_sequence"),
                      _nat(record.end_sequence, "end_sequence"), record.outcome])
    if isinstance(record, PipelineTxn):
        _check(_NAME, record.topic, "topic")
        if record.outcome not in OUTCOMES:
            raise LedgerError(f"pipeline outcome must be one of {OUTCOMES}, got {record!r}")
        return _line(["P", record.run_id, _nat(record.worker, "worker"),
                      _nat(record.session, "session"), _nat(record.txn, "txn"), record.topic,
                      _nat(record.records, "records"), record.outcome])
    _check(_KEY, record.key, "key")
    _check(_NAME, record.topic, "topic")
    return _line(["A", record.run_id, _nat(record.producer, "producer"),
                  _nat(record.sequence, "sequence"), record.key, record.topic,
                  _nat(record.partition, "partition"), _nat(record.offset, "offset")])


def _check(pattern: re.Pattern[str], value: str, what: str) -> None:
    if not isinstance(value, str) or not pattern.match(value):
        raise LedgerError(f"{what} {value!r} cannot be written to a ledger "
                          f"(must match {pattern.pattern})")


def _nat(value: int, what: str) -> str:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 10**18:
        raise LedgerError(f"{what} must be an int in [0, 1e18), got {value!r}")
    return str(value)


# -- parsing ------------------------------------------------------------------------------


def parse_line(text: str) -> LedgerRecord:
    """One line without its newline; raises ValueError saying what is wrong (B and T
    lines parse in any file; :func:`iter_ledger` refuses them in a version 1 ledger)."""
    body, tab, crc = text.rpartition("\t")
    if not tab or not _CRC.match(crc):
        raise ValueError("no CRC field (8 lowercase hex digits after the last TAB)")
    if crc_hex(body) != crc:
        raise ValueError(f"CRC mismatch (stored {crc}, computed {crc_hex(body)})")
    fields = body.split("\t")
    kind, expected = fields[0], {"H": 5, "S": 4, "A": 8, "B": 5, "T": 7, "P": 8}.get(fields[0])
    if expected is None:
        raise ValueError(f"unknown record kind {kind!r} (expected H, S, A, B, T or P)")
    if len(fields) != expected:
        raise ValueError(f"{kind} line has {len(fields)} fields, expected {expected}")
    if kind == "H":
        if fields[1] not in READABLE_VERSIONS:
            raise ValueError(f"unsupported ledger version {fields[1]!r} (this reader: "
                             f"{', '.join(READABLE_VERSIONS)})")
        _field(_RUN_ID, fields[2], "run_id")
        _field(_NAME, fields[3], "topic")
        return LedgerHeader(fields[2], fields[3], _int(fields[4], "created_ms"),
                            int(fields[1]))
    _field(_RUN_ID, fields[1], "run_id")
    if kind == "S":
        return Sent(fields[1], _int(fields[2], "producer"), _int(fields[3], "sent_below"))
    if kind == "B":
        return TxnBegin(fields[1], _int(fields[2], "producer"), _int(fields[3], "txn"),
                        _int(fields[4], "first_sequence"))
    if kind == "T":
        first, end = _int(fields[4], "first_sequence"), _int(fields[5], "end_sequence")
        if end < first or fields[6] not in OUTCOMES:
            raise ValueError(f"bad transaction end: range [{first}, {end}), outcome "
                             f"{fields[6]!r} (expected one of {', '.join(OUTCOMES)})")
        return TxnEnd(fields[1], _int(fields[2], "producer"), _int(fields[3], "txn"), first,
                      end, fields[6])
    if kind == "P":
        _field(_NAME, fields[5], "topic")
        if fields[7] not in OUTCOMES:
            raise ValueError(f"bad pipeline outcome {fields[7]!r} (expected one of "
                             f"{', '.join(OUTCOMES)})")
        return PipelineTxn(fields[1], _int(fields[2], "worker"), _int(fields[3], "session"),
                           _int(fields[4], "txn"), fields[5], _int(fields[6], "records"),
                           fields[7])
    _field(_KEY, fields[4], "key")
    _field(_NAME, fields[5], "topic")
    return Ack(fields[1], _int(fields[2], "producer"), _int(fields[3], "sequence"), fields[4],
               fields[5], _int(fields[6], "partition"), _int(fields[7], "offset"))


def _field(pattern: re.Pattern[str], value: str, what: str) -> None:
    if not pattern.match(value):
        raise ValueError(f"bad {what} {value!r}")


def _int(value: str, what: str) -> int:
    if not _INT.match(value):
        raise ValueError(f"{what} {value!r} is not a non-negative integer")
    return int(value)


@dataclass
class LedgerSummary:
    """What one pass over a ledger found (see :func:`scan_ledger`)."""

    path: str
    header: LedgerHeader
    acks: int = 0
    sent_below: dict[int, int] = field(default_factory=dict)  # producer -> bound
    torn_tail_bytes: int = 0
    begun: int = 0  # B lines
    outcomes: dict[str, int] = field(default_factory=dict)  # T lines per outcome
    pipeline_topic: str = ""  # the P lines' output topic ("" : no pipeline ran)
    pipeline_outcomes: dict[str, int] = field(default_factory=dict)  # P lines per outcome

    @property
    def transactional(self) -> bool:
        """A run of the workload's transactional mode (it began a transaction)."""
        return self.begun > 0

    @property
    def open_transactions(self) -> int:
        return self.begun - sum(self.outcomes.values())

    @property
    def sent(self) -> int:
        return sum(self.sent_below.values())


def iter_ledger(path: str | os.PathLike[str]) -> Iterator[LedgerRecord]:
    """Every record in file order (header first); see the module docstring for errors."""
    yield from _records(path, None)


def _records(path: str | os.PathLike[str],
             on_torn: Callable[[int], None] | None) -> Iterator[LedgerRecord]:
    name = os.fspath(path)
    try:
        handle = open(name, "rb")  # noqa: SIM115 - closed below, generator
    except FileNotFoundError:
        raise LedgerError(f"ledger {name} does not exist") from None
    header: LedgerHeader | None = None
    with handle:
        number = 0
        while True:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            number += 1
            complete = raw.endswith(b"\n")
            if not complete and len(raw) > MAX_LINE_BYTES:
                torn_bytes = _torn_tail_length(handle, len(raw))
                if torn_bytes is None:
                    raise LedgerError(f"{name}:{number}: line longer than {MAX_LINE_BYTES} "
                                      "bytes")
                if on_torn is not None:
                    on_torn(torn_bytes)
                break
            try:
                record = parse_line(raw.rstrip(b"\n").decode())
            except (ValueError, UnicodeDecodeError) as exc:
                if complete:
                    raise LedgerError(f"{name}:{number}: {exc}") from None
                if on_torn is not None:
                    on_torn(len(raw))  # the torn last line of a crash: ignored
                break
            if number == 1 and not isinstance(record, LedgerHeader):
                raise LedgerError(f"{name}:1: the first line must be the H (header) line")
            if number > 1 and isinstance(record, LedgerHeader):
                raise LedgerError(f"{name}:{number}: a second H (header) line")
            if header is not None and record.run_id != header.run_id:
                raise LedgerError(f"{name}:{number}: run id {record.run_id!r} differs from "
                                  f"the header's {header.run_id!r}")
            if isinstance(record, LedgerHeader):
                header = record
            elif (isinstance(record, TxnBegin | TxnEnd | PipelineTxn) and header is not None
                  and header.version < 2):
                raise LedgerError(f"{name}:{number}: a transaction line in a version "
                                  f"{header.version} ledger")
            yield record
    if header is None:
        raise LedgerError(f"ledger {name} is empty (no header line)")


def _torn_tail_length(handle: BinaryIO, already: int) -> int | None:
    """Bytes to the end of the file if no newline follows (a long torn tail), else None."""
    total = already
    while chunk := handle.read(1 << 16):
        if b"\n" in chunk:
            return None
        total += len(chunk)
    return total


def scan_ledger(path: str | os.PathLike[str]) -> LedgerSummary:
    """Validate the whole file in one pass; count acks and collect sent bounds."""
    torn = [0]
    summary: LedgerSummary | None = None
    for record in _records(path, lambda n: torn.__setitem__(0, n)):
        if isinstance(record, LedgerHeader):
            summary = LedgerSummary(os.fspath(path), record)
        elif summary is None:  # pragma: no cover - _records checks line 1
            raise LedgerError(f"{path}: no header")
        elif isinstance(record, Sent):
            previous = summary.sent_below.get(record.producer, 0)
            summary.sent_below[record.producer] = max(previous, record.sent_below)
        elif isinstance(record, TxnBegin):
            summary.begun += 1
        elif isinstance(record, TxnEnd):
            summary.outcomes[record.outcome] = summary.outcomes.get(record.outcome, 0) + 1
        elif isinstance(record, PipelineTxn):
            if summary.pipeline_topic not in ("", record.topic):
                raise LedgerError(f"{path}: pipeline transactions to two topics "
                                  f"({summary.pipeline_topic!r}, {record.topic!r})")
            summary.pipeline_topic = record.topic
            outcomes = summary.pipeline_outcomes
            outcomes[record.outcome] = outcomes.get(record.outcome, 0) + 1
        else:
            summary.acks += 1
    assert summary is not None  # _records raises on an empty file
    summary.torn_tail_bytes = torn[0]
    return summary


def read_ledger(path: str | os.PathLike[str]) -> list[LedgerRecord]:
    return list(iter_ledger(path))


# -- writing ------------------------------------------------------------------------------


class LedgerWriter:
    """Appends records to a new ledger file (see the module docstring for durability)."""

    def __init__(self, path: str | os.PathLike[str], run_id: str, topic: str, *,
                 flush_interval_ms: int = 200, buffer_bytes: int = 64 * 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if flush_interval_ms < 0 or buffer_bytes < MAX_LINE_BYTES:
            raise LedgerError("flush_interval_ms must be >= 0 and buffer_bytes >= "
                              f"{MAX_LINE_BYTES}")
        self.path = os.fspath(path)
        self.run_id = run_id
        self.topic = topic
        header = format_record(LedgerHeader(run_id, topic, int(time.time() * 1000)))
        try:
            self._file = open(self.path, "x", encoding="utf-8",  # noqa: SIM115 - closed in close()
                              buffering=buffer_bytes)
        except FileExistsError:
            raise LedgerError(f"ledger {self.path} already exists; a ledger belongs to one "
                              "run (choose another path or delete it)") from None
        self._lock = threading.Lock()
        self._clock = clock
        self._flush_interval_s = flush_interval_ms / 1000
        self._last_flush = clock()
        self._closed = False
        self.acks = 0
        self._file.write(header)
        self._sync()

    def sent(self, producer: int, sent_below: int) -> None:
        """Announce sequences below ``sent_below``; durable when this returns."""
        line = format_record(Sent(self.run_id, producer, sent_below))
        with self._lock:
            self._check_open()
            self._file.write(line)
            self._sync()

    def ack(self, producer: int, sequence: int, key: str, topic: str, partition: int,
            offset: int) -> None:
        line = format_record(Ack(self.run_id, producer, sequence, key, topic, partition, offset))
        with self._lock:
            self._check_open()
            self._file.write(line)
            self.acks += 1
            now = self._clock()
            if now - self._last_flush >= self._flush_interval_s:
                self._file.flush()
                self._last_flush = now

    def begin(self, producer: int, txn: int, first_sequence: int) -> None:
        """Transaction ``txn`` of ``producer`` begins (buffered like an ack)."""
        self._buffered(format_record(TxnBegin(self.run_id, producer, txn, first_sequence)))

    def end(self, producer: int, txn: int, first_sequence: int, end_sequence: int,
            outcome: str) -> None:
        """Transaction ``txn`` of ``producer`` ended (buffered like an ack)."""
        self._buffered(format_record(TxnEnd(self.run_id, producer, txn, first_sequence,
                                            end_sequence, outcome)))

    def pipeline(self, worker: int, session: int, txn: int, topic: str, records: int,
                 outcome: str) -> None:
        """A pipeline transaction ended (buffered like an ack)."""
        self._buffered(format_record(PipelineTxn(self.run_id, worker, session, txn, topic,
                                                 records, outcome)))

    def _buffered(self, line: str) -> None:
        with self._lock:
            self._check_open()
            self._file.write(line)
            now = self._clock()
            if now - self._last_flush >= self._flush_interval_s:
                self._file.flush()
                self._last_flush = now

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._sync()
                self._file.close()
                self._closed = True

    def _sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._last_flush = self._clock()

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerError(f"ledger {self.path} is closed")

    def __enter__(self) -> LedgerWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_ledger_path(directory: str | os.PathLike[str], run_id: str) -> Path:
    return Path(directory) / f"ledger-{run_id}.tsv"
