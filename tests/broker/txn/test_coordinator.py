"""The transaction coordinator with a fake state log, fake markers and a manual clock:
writes before answers, pending requests, markers then Complete*, loading and finishing
an interrupted commit, timeouts, expiry, and KAFKA-17754 (a delayed EndTxn cannot end the
next transaction)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from broker.txn.coordinator import (
    Done,
    IdAnswer,
    TransactionCoordinator,
    TxnCoordinatorConfig,
)
from broker.txn.markers import MarkersDone, TxnMarker
from broker.txn.records import decode_key, decode_value
from broker.txn.state import TransactionState, TxnMetadata
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from timer.clock import ManualClock

S = TransactionState
TP0, TP1 = TopicPartition("a", 0), TopicPartition("b", 1)


class FakeLog:
    """Holds each write until the test completes it (acks=all), keeps what was written."""

    def __init__(self) -> None:
        self.in_flight: list[tuple[int, list[tuple[bytes, bytes | None]], Done]] = []
        self.written: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.fail_with: ErrorCode | None = None
        self.auto = True

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               done: Done) -> None:
        self.in_flight.append((partition, list(records), done))
        if self.auto:
            self.complete_all()

    def complete_all(self) -> None:
        while self.in_flight:
            partition, records, done = self.in_flight.pop(0)
            if self.fail_with is not None:
                done(self.fail_with, -1)
                continue
            log = self.written.setdefault(partition, [])
            log.extend(records)
            done(ErrorCode.NONE, len(log) - 1)

    def last(self, tid: str) -> TxnMetadata | None:
        for records in self.written.values():
            for key, value in reversed(records):
                if decode_key(key) == tid:
                    return None if value is None else decode_value(tid, value)
        raise KeyError(tid)


class FakeIds:
    def __init__(self) -> None:
        self.next = 1000

    def next_producer_id(self, done: IdAnswer) -> None:
        self.next += 1
        done(self.next, ErrorCode.NONE)


class FakeMarkers:
    def __init__(self) -> None:
        self.sent: list[tuple[TxnMarker, MarkersDone]] = []
        self.cancelled: set[str] = set()

    def send(self, marker: TxnMarker, done: MarkersDone) -> None:
        self.sent.append((marker, done))

    def cancel(self, transactional_ids: set[str]) -> None:
        self.cancelled |= transactional_ids

    def finish(self, written: bool = True) -> TxnMarker:
        marker, done = self.sent.pop(0)
        done(written)
        return marker


class Harness:
    def __init__(self, partitions: int = 1, max_timeout_ms: int = 900_000) -> None:
        self.clock = ManualClock(1_000_000)
        self.log = FakeLog()
        self.ids = FakeIds()
        self.markers = FakeMarkers()
        self.coordinator = self.new_coordinator(partitions, max_timeout_ms)
        self.coordinator.begin_load(0, 5)
        self.coordinator.finish_load(0)

    def new_coordinator(self, partitions: int = 1,
                        max_timeout_ms: int = 900_000) -> TransactionCoordinator:
        return TransactionCoordinator(
            TxnCoordinatorConfig(max_timeout_ms, 7 * 24 * 3600 * 1000), self.clock, self.log,
            self.ids, self.markers, num_partitions=partitions)

    def init(self, tid: str = "tx", timeout_ms: int = 60_000, pid: int = -1,
             epoch: int = -1) -> tuple[ErrorCode, int, int]:
        answers: list[tuple[ErrorCode, int, int]] = []
        self.coordinator.init_producer_id(tid, timeout_ms, pid, epoch,
                                          lambda *a: answers.append(a))
        assert len(answers) == 1
        return answers[0]

    def add(self, pid: int, epoch: int, tps: list[TopicPartition], tid: str = "tx",
            version: int = 0) -> ErrorCode:
        answers: list[ErrorCode] = []
        self.coordinator.add_partitions(tid, pid, epoch, tps, answers.append, version)
        assert len(answers) == 1
        return answers[0]

    def end(self, pid: int, epoch: int, committed: bool, version: int = 0,
            tid: str = "tx") -> tuple[ErrorCode, int, int]:
        answers: list[tuple[ErrorCode, int, int]] = []
        self.coordinator.end_txn(tid, pid, epoch, committed, version,
                                 lambda *a: answers.append(a))
        assert len(answers) == 1
        return answers[0]

    def state(self, tid: str = "tx") -> TransactionState:
        return self.coordinator.entries[tid].meta.state


def test_init_add_commit_writes_every_transition_before_answering() -> None:
    h = Harness()
    h.log.auto = False
    answers: list[tuple[ErrorCode, int, int]] = []
    h.coordinator.init_producer_id("tx", 60_000, -1, -1, lambda *a: answers.append(a))
    assert answers == []  # not written yet: no answer
    other: list[tuple[ErrorCode, int, int]] = []
    h.coordinator.init_producer_id("tx", 60_000, -1, -1, lambda *a: other.append(a))
    assert other == [(ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)]
    h.log.complete_all()
    assert answers == [(ErrorCode.NONE, 1001, 0)]
    h.log.auto = True
    assert h.add(1001, 0, [TP0, TP1]) == ErrorCode.NONE
    assert h.log.last("tx").state is S.ONGOING  # type: ignore[union-attr]
    assert h.end(1001, 0, True) == (ErrorCode.NONE, 1001, 0)
    assert h.log.last("tx").state is S.PREPARE_COMMIT  # type: ignore[union-attr]
    assert h.add(1001, 0, [TP0]) == ErrorCode.CONCURRENT_TRANSACTIONS  # completing
    marker = h.markers.finish()
    assert (marker.producer_id, marker.producer_epoch, marker.committed,
            marker.coordinator_epoch, marker.partitions) == (1001, 0, True, 5,
                                                             frozenset({TP0, TP1}))
    assert h.state() is S.COMPLETE_COMMIT
    assert h.log.last("tx").state is S.COMPLETE_COMMIT  # type: ignore[union-attr]
    assert h.end(1001, 0, True) == (ErrorCode.NONE, 1001, 0)  # a retry after completion


def test_a_failed_write_changes_nothing() -> None:
    h = Harness()
    h.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    assert h.init() == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)
    assert "tx" not in h.coordinator.entries
    h.log.fail_with = None
    _, pid, epoch = h.init()
    h.log.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert h.add(pid, epoch, [TP0]) == ErrorCode.NOT_COORDINATOR
    assert h.state() is S.EMPTY


def test_request_errors() -> None:
    h = Harness(max_timeout_ms=60_000)
    assert h.init(timeout_ms=60_001)[0] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout_ms=0)[0] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert h.init(tid="")[0] == ErrorCode.INVALID_REQUEST
    assert h.add(1, 0, [TP0], tid="never") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    _, pid, epoch = h.init()
    assert h.add(pid + 1, epoch, [TP0]) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert h.add(pid, epoch + 1, [TP0]) == ErrorCode.PRODUCER_FENCED
    assert h.end(pid, epoch, True)[0] == ErrorCode.INVALID_TXN_STATE  # nothing open
    h.coordinator.unload(0)
    assert h.init()[0] == ErrorCode.NOT_COORDINATOR
    h.coordinator.begin_load(0, 6)
    assert h.init()[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def test_a_new_producer_fences_the_open_transaction_then_gets_a_bumped_epoch() -> None:
    h = Harness()
    _, pid, epoch = h.init()
    h.add(pid, epoch, [TP0])
    assert h.init() == (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)
    assert h.state() is S.PREPARE_ABORT
    assert h.init() == (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)  # markers not out yet
    marker = h.markers.finish()
    assert (marker.committed, marker.producer_epoch) == (False, epoch + 1)
    assert h.init() == (ErrorCode.NONE, pid, epoch + 2)
    assert h.add(pid, epoch, [TP0]) == ErrorCode.PRODUCER_FENCED  # the old producer


def test_kip360_resume_keeps_the_producer_id() -> None:
    h = Harness()
    _, pid, epoch = h.init()
    assert h.init(pid=pid, epoch=epoch) == (ErrorCode.NONE, pid, epoch + 1)
    assert h.init(pid=pid, epoch=epoch) == (ErrorCode.NONE, pid, epoch + 1)  # retried
    assert h.init(pid=pid + 5, epoch=0)[0] == ErrorCode.PRODUCER_FENCED


def test_verify_only() -> None:
    h = Harness()
    _, pid, epoch = h.init()
    h.add(pid, epoch, [TP0])
    assert h.coordinator.verify("tx", pid, epoch, [TP0, TP1]) == {
        TP0: ErrorCode.NONE, TP1: ErrorCode.TRANSACTION_ABORTABLE}


def test_kafka_17754_a_delayed_end_txn_cannot_end_the_next_transaction() -> None:
    """EndTxn v5: transaction 1 commits (epoch bumped), transaction 2 begins at the new
    epoch; the first EndTxn's delayed copy (old epoch) arrives: refused, nothing written,
    no marker sent, transaction 2 still Ongoing with its partitions."""
    h = Harness()
    _, pid, epoch = h.init()
    assert h.add(pid, epoch, [TP0], version=2) == ErrorCode.NONE
    assert h.end(pid, epoch, True, version=2) == (ErrorCode.NONE, pid, epoch + 1)
    # the client's retry of the same EndTxn while markers are out: answered, no write
    writes = len(h.log.written[0])
    assert h.end(pid, epoch, True, version=2) == (
        ErrorCode.CONCURRENT_TRANSACTIONS, pid, epoch + 1)
    assert len(h.log.written[0]) == writes
    h.markers.finish()
    assert h.add(pid, epoch + 1, [TP1], version=2) == ErrorCode.NONE  # transaction 2
    before = (h.coordinator.entries["tx"].meta, len(h.log.written[0]), len(h.markers.sent))
    for committed in (True, False):
        code, _, _ = h.end(pid, epoch, committed, version=2)  # the delayed EndTxn
        assert code == ErrorCode.PRODUCER_FENCED
    assert (h.coordinator.entries["tx"].meta, len(h.log.written[0]),
            len(h.markers.sent)) == before
    assert h.state() is S.ONGOING
    assert h.coordinator.entries["tx"].meta.partitions == frozenset({TP1})
    assert h.end(pid, epoch + 1, False, version=2) == (ErrorCode.NONE, pid, epoch + 2)


def test_a_new_coordinator_finishes_an_interrupted_commit() -> None:
    h = Harness()
    _, pid, epoch = h.init()
    h.add(pid, epoch, [TP0, TP1])
    h.end(pid, epoch, True)
    assert h.state() is S.PREPARE_COMMIT and len(h.markers.sent) == 1
    h.coordinator.unload(0)  # the coordinator moves before the markers are written
    assert h.markers.cancelled == {"tx"}
    h.markers.sent.clear()
    new = h.new_coordinator()
    new.begin_load(0, 6)
    for key, value in h.log.written[0]:
        new.load_record(0, key, value)
    new.load_record(0, b"\x00", b"junk")  # skipped
    new.finish_load(0)
    marker, done = h.markers.sent[0]
    assert (marker.committed, marker.coordinator_epoch, marker.partitions) == (
        True, 6, frozenset({TP0, TP1}))
    done(True)
    assert new.entries["tx"].meta.state is S.COMPLETE_COMMIT
    assert h.log.last("tx").state is S.COMPLETE_COMMIT  # type: ignore[union-attr]


def test_markers_of_an_unloaded_partition_write_nothing() -> None:
    h = Harness()
    _, pid, epoch = h.init()
    h.add(pid, epoch, [TP0])
    h.end(pid, epoch, False)
    writes = len(h.log.written[0])
    h.coordinator.unload(0)
    h.markers.finish()
    assert len(h.log.written[0]) == writes


def test_a_fenced_coordinator_gives_up() -> None:
    h = Harness()
    _, pid, epoch = h.init()
    h.add(pid, epoch, [TP0])
    h.end(pid, epoch, True)
    h.markers.finish(written=False)
    assert h.state() is S.PREPARE_COMMIT


def test_complete_write_is_retried_by_tick() -> None:
    h = Harness()
    _, pid, epoch = h.init()
    h.add(pid, epoch, [TP0])
    h.end(pid, epoch, True)
    h.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    h.markers.finish()
    assert h.state() is S.PREPARE_COMMIT
    h.log.fail_with = None
    h.coordinator.tick()
    assert h.state() is S.COMPLETE_COMMIT


def test_a_transaction_past_its_timeout_is_aborted_with_the_epoch_bumped() -> None:
    h = Harness()
    _, pid, epoch = h.init(timeout_ms=10_000)
    h.add(pid, epoch, [TP0])
    h.clock.advance(10_000)
    h.coordinator.tick()
    assert h.state() is S.ONGOING
    h.clock.advance(1)
    h.coordinator.tick()
    assert h.state() is S.PREPARE_ABORT
    marker = h.markers.finish()
    assert (marker.committed, marker.producer_epoch) == (False, epoch + 1)
    assert h.state() is S.COMPLETE_ABORT
    assert h.end(pid, epoch, True)[0] == ErrorCode.PRODUCER_FENCED
    assert h.add(pid, epoch, [TP0]) == ErrorCode.PRODUCER_FENCED


def test_idle_ids_expire() -> None:
    h = Harness()
    h.init()
    h.clock.advance(7 * 24 * 3600 * 1000 - 1)
    h.coordinator.tick()
    assert "tx" in h.coordinator.entries
    h.clock.advance(1)
    h.coordinator.tick()
    assert "tx" not in h.coordinator.entries
    assert h.log.last("tx") is None  # the tombstone


def test_describe_and_list() -> None:
    h = Harness()
    _, pid, epoch = h.init()
    h.add(pid, epoch, [TP1, TP0])
    described = h.coordinator.describe("tx")
    assert (described["error_code"], described["transaction_state"],
            described["producer_id"], described["topics"]) == (
        0, "Ongoing", pid, [{"topic": "a", "partitions": [0]},
                            {"topic": "b", "partitions": [1]}])
    assert h.coordinator.describe("nope")["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert h.coordinator.list_transactions(["Ongoing"], []) == (
        ErrorCode.NONE, [{"transactional_id": "tx", "producer_id": pid,
                          "transaction_state": "Ongoing"}])
    assert h.coordinator.list_transactions(["Empty"], [])[1] == []
    assert h.coordinator.list_transactions([], [pid + 1])[1] == []
    assert h.coordinator.list_transactions([], [], duration_ms=1)[1] == []
    h.clock.advance(5)
    assert len(h.coordinator.list_transactions([], [], duration_ms=5)[1]) == 1


@pytest.mark.parametrize("partitions", [1, 3])
def test_placement_is_kafkas_hash(partitions: int) -> None:
    h = Harness(partitions=partitions)
    from broker.coordination.placement import partition_for
    assert h.coordinator.partition_for("my-txn") == partition_for("my-txn", partitions)


def test_a_v5_abort_before_any_partition_was_added() -> None:
    h = Harness()
    _, pid, epoch = h.init()
    assert h.end(pid, epoch, False, version=2) == (ErrorCode.NONE, pid, epoch + 1)
    marker = h.markers.finish()
    assert marker.partitions == frozenset()
    assert h.state() is S.COMPLETE_ABORT
    assert h.end(pid, epoch, False, version=2) == (ErrorCode.NONE, pid, epoch + 1)  # retry
    assert h.end(pid, epoch + 1, True, version=2)[0] == ErrorCode.INVALID_TXN_STATE
