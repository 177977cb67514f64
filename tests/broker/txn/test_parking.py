"""AddPartitionsToTxn parked while the previous transaction completes
(:mod:`broker.txn.parking`), on the coordinator with a manual clock and timer: parked,
answered once Complete* is written; the timeout and the bound answer
CONCURRENT_TRANSACTIONS; a fenced producer is never parked; an unload answers
NOT_COORDINATOR; a parked request is checked again when it runs (KAFKA-17754)."""

from __future__ import annotations

from broker.txn.coordinator import TransactionCoordinator, TxnCoordinatorConfig
from broker.txn.records import decode_value
from broker.txn.state import TransactionState
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from tests.broker.txn.test_coordinator import TP0, TP1, Harness
from timer.system_timer import SystemTimer

S = TransactionState
TIMEOUT_MS = 5_000


class ParkingHarness(Harness):
    def __init__(self, max_parked: int = 10) -> None:
        self.max_parked = max_parked
        super().__init__(partitions=1)

    def new_coordinator(self, partitions: int = 1,
                        max_timeout_ms: int = 900_000) -> TransactionCoordinator:
        self.timer = SystemTimer(self.clock)
        return TransactionCoordinator(
            TxnCoordinatorConfig(max_timeout_ms, 7 * 24 * 3600 * 1000,
                                 max_parked_add_partitions=self.max_parked,
                                 parked_add_partitions_timeout_ms=TIMEOUT_MS),
            self.clock, self.log, self.ids, self.markers, num_partitions=partitions,
            timer=self.timer)

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.timer.advance_clock()

    def add_async(self, pid: int, epoch: int, tps: list[TopicPartition], tid: str = "tx",
                  version: int = 0) -> list[ErrorCode]:
        answers: list[ErrorCode] = []
        self.coordinator.add_partitions(tid, pid, epoch, tps, answers.append, version)
        return answers

    def committing(self, tid: str = "tx", version: int = 0) -> tuple[int, int]:
        """A transaction of ``tid`` in PrepareCommit (markers not written yet); the
        (producer id, epoch) of its next transaction."""
        _, pid, epoch = self.init(tid)
        assert self.add(pid, epoch, [TP0], tid=tid, version=version) == ErrorCode.NONE
        code, pid, epoch = self.end(pid, epoch, True, version=version, tid=tid)
        assert code == ErrorCode.NONE
        assert self.state(tid) is S.PREPARE_COMMIT
        return pid, epoch


def test_parked_add_partitions_is_answered_once_the_commit_completes() -> None:
    h = ParkingHarness()
    pid, epoch = h.committing()
    answers = h.add_async(pid, epoch, [TP1])
    assert answers == []  # parked, not CONCURRENT_TRANSACTIONS
    assert h.coordinator.parked is not None and h.coordinator.parked.parked == 1
    h.markers.finish()  # markers written -> CompleteCommit written -> the request runs
    assert answers == [ErrorCode.NONE]
    assert h.state() is S.ONGOING
    assert h.coordinator.entries["tx"].meta.partitions == frozenset({TP1})
    states = [r[1] for r in h.log.written[0]]
    assert h.log.last("tx").state is S.ONGOING  # type: ignore[union-attr]
    assert len(states) == 5  # Empty, Ongoing, PrepareCommit, CompleteCommit, Ongoing
    assert h.coordinator.parked.parked == 0
    h.advance(TIMEOUT_MS)  # the timer entry left with the completion: no second answer
    assert answers == [ErrorCode.NONE]


def test_parked_behind_a_pending_complete_write() -> None:
    h = ParkingHarness()
    pid, epoch = h.committing(version=2)  # v5: the epoch bumped for the next one
    h.log.auto = False
    h.markers.finish()  # CompleteCommit in flight
    answers = h.add_async(pid, epoch, [TP1], version=2)
    assert answers == []
    h.log.complete_all()  # CompleteCommit, then the parked request's Ongoing
    assert answers == [ErrorCode.NONE]
    assert h.state() is S.ONGOING


def test_a_parked_request_times_out_with_concurrent_transactions() -> None:
    h = ParkingHarness()
    pid, epoch = h.committing()
    answers = h.add_async(pid, epoch, [TP1])
    h.advance(TIMEOUT_MS - 1)
    assert answers == []
    h.advance(1)
    assert answers == [ErrorCode.CONCURRENT_TRANSACTIONS]  # the client retries later
    h.markers.finish()
    assert answers == [ErrorCode.CONCURRENT_TRANSACTIONS]  # answered once
    assert h.state() is S.COMPLETE_COMMIT
    assert h.add(pid, epoch, [TP1]) == ErrorCode.NONE  # the client's retry


def test_the_bound_answers_concurrent_transactions_at_once() -> None:
    h = ParkingHarness(max_parked=1)
    first = h.add_async(*h.committing("a"), [TP1], tid="a")
    second = h.add_async(*h.committing("b"), [TP1], tid="b")
    assert first == []
    assert second == [ErrorCode.CONCURRENT_TRANSACTIONS]  # over the bound: Kafka's answer
    h.markers.finish()
    assert first == [ErrorCode.NONE]
    h.markers.finish()
    third = h.add_async(*h.committing("c"), [TP1], tid="c")
    assert third == []  # the slot was given back


def test_a_fenced_or_foreign_producer_is_not_parked() -> None:
    h = ParkingHarness()
    _, pid, old = h.init()
    h.add(pid, old, [TP0], version=2)
    code, pid, epoch = h.end(pid, old, True, version=2)
    assert code == ErrorCode.NONE
    assert epoch == old + 1
    assert h.add_async(pid, old, [TP1], version=2) == [ErrorCode.PRODUCER_FENCED]
    assert h.add_async(pid + 7, epoch, [TP1], version=2) == [
        ErrorCode.INVALID_PRODUCER_ID_MAPPING]
    assert h.coordinator.parked is not None and h.coordinator.parked.parked == 0


def test_init_producer_id_and_end_txn_are_not_parked() -> None:
    h = ParkingHarness()
    pid, epoch = h.committing()
    assert h.init() == (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)
    assert h.end(pid, epoch, True)[0] == ErrorCode.CONCURRENT_TRANSACTIONS


def test_unload_answers_a_parked_request_not_coordinator() -> None:
    h = ParkingHarness()
    pid, epoch = h.committing()
    answers = h.add_async(pid, epoch, [TP1])
    h.coordinator.unload(0)
    assert answers == [ErrorCode.NOT_COORDINATOR]
    assert h.coordinator.parked is not None and h.coordinator.parked.parked == 0


def test_a_parked_request_is_checked_again_when_it_runs() -> None:
    """The producer is fenced while its request is parked (a new producer with the same
    transactional id): the request runs against the state then and is refused."""
    h = ParkingHarness()
    pid, epoch = h.committing()
    answers = h.add_async(pid, epoch, [TP1])
    h.coordinator.unload(0)  # a coordinator move: the request is answered, nothing kept
    assert answers == [ErrorCode.NOT_COORDINATOR]
    h.coordinator.begin_load(0, 6)
    for partition, records in h.log.written.items():
        for key, value in records:
            h.coordinator.load_record(partition, key, value)
    h.coordinator.finish_load(0)  # PrepareCommit again: markers resent
    late = h.add_async(pid, epoch, [TP1])
    assert late == []
    assert h.init()[0] == ErrorCode.CONCURRENT_TRANSACTIONS  # a new producer waits too
    h.markers.finish()  # the first coordinator's marker (cancelled for it) ...
    h.markers.finish()  # ... and the resent one: CompleteCommit, then the parked request
    assert late == [ErrorCode.NONE]
    assert h.init() == (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)  # fences the Ongoing
    h.markers.finish()
    assert h.add(pid, epoch, [TP0]) == ErrorCode.PRODUCER_FENCED  # the fenced producer


def test_parked_requests_ride_in_the_complete_write() -> None:
    """The Complete* write carries the parked requests: one batch, CompleteCommit then
    Ongoing (each a valid transition), one replicated write fewer per transaction."""
    h = ParkingHarness()
    pid, epoch = h.committing(version=2)
    first = h.add_async(pid, epoch, [TP1], version=2)
    second = h.add_async(pid, epoch, [TP0], version=2)
    h.log.auto = False
    h.markers.finish()
    assert len(h.log.in_flight) == 1  # one append
    _, records, _ = h.log.in_flight[0]
    states = [decode_value("tx", v).state for _, v in records]  # type: ignore[arg-type]
    assert states == [S.COMPLETE_COMMIT, S.ONGOING]
    assert first == second == []  # answered once written
    h.log.complete_all()
    assert first == second == [ErrorCode.NONE]
    meta = h.coordinator.entries["tx"].meta
    assert (meta.state, meta.partitions, meta.producer_epoch) == (
        S.ONGOING, frozenset({TP0, TP1}), epoch)
    assert h.log.in_flight == []  # nothing else written
    assert h.coordinator.parked is not None and h.coordinator.parked.parked == 0
    h.advance(TIMEOUT_MS)
    assert first == second == [ErrorCode.NONE]  # no timeout answer after


def test_a_failed_complete_write_answers_the_requests_it_carried() -> None:
    h = ParkingHarness()
    pid, epoch = h.committing()
    answers = h.add_async(pid, epoch, [TP1])
    h.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    h.markers.finish()
    assert answers == [ErrorCode.COORDINATOR_NOT_AVAILABLE]  # retriable: the client retries
    assert h.state() is S.PREPARE_COMMIT
    h.log.fail_with = None
    h.coordinator.tick()  # the Complete* write is retried
    assert h.state() is S.COMPLETE_COMMIT
    assert answers == [ErrorCode.COORDINATOR_NOT_AVAILABLE]


def test_after_shutdown_nothing_is_parked() -> None:
    h = ParkingHarness()
    pid, epoch = h.committing()
    h.coordinator.shutdown()
    assert h.add_async(pid, epoch, [TP1]) == [ErrorCode.CONCURRENT_TRANSACTIONS]
