"""The pipeline worker's loop (clients/workload/pipeline.py ``run_worker``) with stand-in
sessions: a session whose producer is fenced (its abort fails too, as librdkafka's
abort_transaction does after a fatal error) is replaced, not reused.

Found in a 200k faulted confluent run: a worker kept one fenced session, each
transaction failing at send_offsets (TxnOffsetCommit answered INVALID_PRODUCER_EPOCH,
fatal in librdkafka) and counted as aborted, thousands of times, so the group never
consumed topic A to its end.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from clients.producer.idempotence import ProducerFencedError
from clients.protocol.errors import MiniKafkaError
from clients.workload import pipeline
from clients.workload.ledger import LedgerWriter
from clients.workload.pipeline_session import SourceRecord


class FencedSession:
    """Every transaction fails at send_offsets; abort fails as on a fenced producer."""

    def __init__(self, opened: list[object], stop: threading.Event, fenced: bool) -> None:
        self.fenced = fenced
        self.stop = stop
        self.sends = 0
        self.offset = 0
        opened.append(self)

    def poll(self, timeout_s: float, max_records: int) -> list[SourceRecord]:
        self.offset += 1
        return [SourceRecord(0, self.offset - 1, b"k", b"v")]

    def positions(self) -> dict[int, int]:
        return {0: self.offset}

    def begin(self) -> None:
        pass

    def send(self, topic: str, key: bytes | None, value: bytes, tag: bytes) -> None:
        pass

    def send_offsets(self, positions: dict[int, int]) -> None:
        self.sends += 1
        if self.sends >= 50:  # a worker that never leaves this session: end the test
            self.stop.set()
        if self.fenced:
            raise ProducerFencedError("INVALID_PRODUCER_EPOCH: fenced")
        self.stop.set()  # a healthy session: the loop went on, enough

    def commit(self) -> None:
        pass

    def abort(self) -> None:
        if self.fenced:
            raise ProducerFencedError("fenced: abort_transaction refused")

    def rewind(self) -> None:
        pass

    def crash(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_fenced_session_is_replaced_not_reused(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    opened: list[object] = []
    # the first session is fenced, its successor is healthy
    monkeypatch.setattr(pipeline, "open_session", lambda plan, worker, stop_: FencedSession(
        opened, stop, fenced=not opened))
    plan = pipeline.PipelinePlan("127.0.0.1:1", "a", "b", "run", abort_ratio=0.0,
                                 kill_ratio=0.0)
    events: list[tuple[str, str]] = []
    ledger = LedgerWriter(tmp_path / "ledger.tsv", "run", "a")
    try:
        pipeline.run_worker(plan, 0, ledger, lambda kind, name: events.append((kind, name)),
                            stop)
    finally:
        ledger.close()
    first = opened[0]
    assert isinstance(first, FencedSession)
    assert first.sends == 1, "the fenced session was used again after its abort failed"
    assert len(opened) == 2
    assert events == [("txn", "pipeline_abort"), ("txn", "pipeline_commit")]


def test_an_abortable_failure_keeps_the_session(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure the producer can abort (TransactionAbortableError and the like) keeps the
    session: aborted, rewound, the next transaction on the same producer."""
    stop = threading.Event()
    opened: list[FencedSession] = []

    class Abortable(FencedSession):
        def send_offsets(self, positions: dict[int, int]) -> None:
            self.sends += 1
            if self.sends >= 3:
                self.stop.set()
            raise MiniKafkaError("TRANSACTION_ABORTABLE: try again")

        def abort(self) -> None:
            pass

    monkeypatch.setattr(pipeline, "open_session", lambda plan, worker, stop_: Abortable(
        opened, stop, fenced=False))  # type: ignore[arg-type]
    plan = pipeline.PipelinePlan("127.0.0.1:1", "a", "b", "run", abort_ratio=0.0,
                                 kill_ratio=0.0)
    ledger = LedgerWriter(tmp_path / "ledger.tsv", "run", "a")
    try:
        pipeline.run_worker(plan, 0, ledger, lambda kind, name: None, stop)
    finally:
        ledger.close()
    assert len(opened) == 1 and opened[0].sends == 3
