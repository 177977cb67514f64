"""The transactional producer's state machine (clients/producer/transactions), no I/O:
every call order Kafka allows works, every other raises Kafka's error; answers move
the state as Kafka's client TransactionManager does."""

from __future__ import annotations

import itertools

import pytest

from clients.producer.idempotence import IdempotenceManager, ProducerFencedError
from clients.producer.transactions.manager import (
    Outcome,
    RequestKind,
    TransactionalResult,
    TransactionManager,
    TxnRequest,
)
from clients.producer.transactions.state import (
    VALID_PREVIOUS,
    IllegalTransactionStateError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionManagerState,
    is_transition_valid,
)
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.types import ConsumerGroupMetadata, OffsetAndMetadata

S = TransactionManagerState
T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)

# Kafka's TransactionManager.State.isTransitionValid, written out independently
KAFKA_TABLE = {
    ("READY", "UNINITIALIZED"), ("ABORTABLE_ERROR", "UNINITIALIZED"),
    ("UNINITIALIZED", "INITIALIZING"), ("ABORTING_TRANSACTION", "INITIALIZING"),
    ("INITIALIZING", "READY"), ("COMMITTING_TRANSACTION", "READY"),
    ("ABORTING_TRANSACTION", "READY"), ("READY", "IN_TRANSACTION"),
    ("IN_TRANSACTION", "COMMITTING_TRANSACTION"), ("IN_TRANSACTION", "ABORTING_TRANSACTION"),
    ("ABORTABLE_ERROR", "ABORTING_TRANSACTION"), ("IN_TRANSACTION", "ABORTABLE_ERROR"),
    ("COMMITTING_TRANSACTION", "ABORTABLE_ERROR"), ("ABORTABLE_ERROR", "ABORTABLE_ERROR"),
    ("INITIALIZING", "ABORTABLE_ERROR"),
} | {(s.value, "FATAL_ERROR") for s in TransactionManagerState}  # fmt: skip


def test_transition_table_is_kafkas() -> None:
    assert set(VALID_PREVIOUS) == set(TransactionManagerState)
    for source, target in itertools.product(TransactionManagerState, repeat=2):
        assert is_transition_valid(source, target) == ((source.value, target.value)
                                                       in KAFKA_TABLE), (source, target)


def manager() -> tuple[TransactionManager, IdempotenceManager]:
    idem = IdempotenceManager()
    txn = TransactionManager("tx", 60_000, idem)
    idem.transaction = txn
    return txn, idem


def take(txn: TransactionManager, kind: RequestKind, incomplete: int = 0) -> TxnRequest:
    request = txn.next_request(incomplete)
    assert request is not None and request.kind is kind, request
    return request


def ready(pid: int = 7, epoch: int = 0) -> tuple[TransactionManager, IdempotenceManager]:
    txn, idem = manager()
    result = txn.initialize()
    request = take(txn, RequestKind.INIT_PRODUCER_ID)
    assert txn.on_init_producer_id(request, 0, pid, epoch, None) is Outcome.DONE
    assert result.done and result.error is None
    txn.op_finished(result)
    assert txn.state is S.READY and (idem.producer_id, idem.producer_epoch) == (pid, epoch)
    return txn, idem


def in_transaction_with(*tps: TopicPartition) -> tuple[TransactionManager, IdempotenceManager]:
    txn, idem = ready()
    txn.begin()
    for tp in tps:
        txn.maybe_add_partition(tp)
    if tps:
        request = take(txn, RequestKind.ADD_PARTITIONS)
        assert request.partitions == frozenset(tps)
        assert txn.on_add_partitions(request, dict.fromkeys(tps, 0)) is Outcome.DONE
    return txn, idem


def finish(txn: TransactionManager, result: TransactionalResult) -> None:
    assert result.done
    txn.op_finished(result)


# ------------------------------------------------------------------ call order
def test_uninitialized_refuses_everything_but_init() -> None:
    txn, _ = manager()
    for call in (txn.begin, txn.begin_commit, txn.begin_abort,
                 lambda: txn.send_offsets({}, ConsumerGroupMetadata("g"))):  # fmt: skip
        with pytest.raises(IllegalTransactionStateError):
            call()
    with pytest.raises(IllegalTransactionStateError, match="init_transactions"):
        txn.maybe_add_partition(T0)
    assert txn.state is S.UNINITIALIZED


def test_init_retried_after_a_timeout_returns_the_same_result_and_blocks_other_calls() -> None:
    txn, _ = manager()
    first = txn.initialize()
    assert txn.state is S.INITIALIZING
    assert txn.initialize() is first  # the caller's wait timed out: it calls again
    with pytest.raises(IllegalTransactionStateError, match="timed out and must be retried"):
        txn.begin()
    with pytest.raises(IllegalTransactionStateError, match="init_transactions"):
        txn.maybe_add_partition(T0)


def test_ready_refuses_commit_abort_offsets_send_and_a_second_init() -> None:
    txn, _ = ready()
    with pytest.raises(IllegalTransactionStateError, match="from state READY to state INIT"):
        txn.initialize()
    with pytest.raises(IllegalTransactionStateError, match="READY to state COMMITTING"):
        txn.begin_commit()
    with pytest.raises(IllegalTransactionStateError, match="READY to state ABORTING"):
        txn.begin_abort()
    with pytest.raises(IllegalTransactionStateError, match="not in progress"):
        txn.send_offsets({T0: OffsetAndMetadata(1)}, ConsumerGroupMetadata("g"))
    with pytest.raises(IllegalTransactionStateError, match="begin_transaction"):
        txn.maybe_add_partition(T0)
    assert txn.state is S.READY


def test_begin_twice_is_illegal() -> None:
    txn, _ = ready()
    txn.begin()
    with pytest.raises(IllegalTransactionStateError, match="IN_TRANSACTION to state IN_TRANS"):
        txn.begin()


def test_partition_drains_only_after_add_partitions_and_adds_are_batched() -> None:
    txn, idem = ready()
    txn.begin()
    txn.maybe_add_partition(T0)
    txn.maybe_add_partition(T1)
    txn.maybe_add_partition(T0)
    assert not txn.may_send(T0) and not idem.can_send(T0, False)
    request = take(txn, RequestKind.ADD_PARTITIONS)
    assert request.partitions == {T0, T1}  # one request for both
    assert txn.next_request(0) is None  # one request at a time
    assert txn.on_add_partitions(request, {T0: 0, T1: ErrorCode.CONCURRENT_TRANSACTIONS}) \
        is Outcome.RETRY
    assert txn.may_send(T0) and idem.can_send(T0, False) and not txn.may_send(T1)
    again = take(txn, RequestKind.ADD_PARTITIONS)
    assert again.partitions == {T1}
    assert txn.on_add_partitions(again, {T1: 0}) is Outcome.DONE
    assert txn.may_send(T1)
    txn.maybe_add_partition(T0)  # already in: nothing to send
    assert txn.next_request(0) is None
    txn.maybe_add_partition(T2)
    adding = take(txn, RequestKind.ADD_PARTITIONS)
    txn.maybe_add_partition(T2)  # more records while it is being added: not named twice
    txn.on_add_partitions(adding, {T2: 0})
    assert txn.next_request(0) is None


def test_commit_waits_for_the_batches_then_ends_and_takes_the_new_epoch() -> None:
    txn, idem = in_transaction_with(T0)
    result = txn.begin_commit()
    assert txn.state is S.COMMITTING_TRANSACTION and not result.done
    assert txn.next_request(incomplete_batches=2) is None  # flush first
    end = take(txn, RequestKind.END_TXN)
    assert end.committed
    assert txn.on_end_txn(end, 0, 7, 1) is Outcome.DONE  # EndTxn v5's new epoch
    finish(txn, result)
    assert result.error is None and txn.state is S.READY
    assert idem.producer_epoch == 1 and not txn.may_send(T0)
    txn.begin()  # the next transaction
    assert txn.state is S.IN_TRANSACTION


def test_commit_or_abort_of_an_empty_transaction_sends_nothing() -> None:
    txn, _ = ready()
    txn.begin()
    result = txn.begin_commit()
    assert txn.next_request(0) is None  # ended by the sender thread, nothing sent
    finish(txn, result)
    assert result.error is None and txn.state is S.READY
    txn.begin()
    txn.maybe_add_partition(T0)  # a record queued, its partition never added
    result = txn.begin_abort()
    assert isinstance(txn.failing_undrained, TransactionAbortedError)
    assert txn.next_request(incomplete_batches=1) is None and not result.done
    assert txn.state is S.ABORTING_TRANSACTION  # until the queued batch has failed
    assert txn.next_request(0) is None
    finish(txn, result)
    assert txn.state is S.READY and txn.failing_undrained is None


def test_abort_fails_queued_batches_and_ends_with_abort() -> None:
    txn, _ = in_transaction_with(T0)
    assert txn.failing_undrained is None
    result = txn.begin_abort()
    assert isinstance(txn.failing_undrained, TransactionAbortedError)
    assert not txn.may_send(T0)
    end = take(txn, RequestKind.END_TXN)
    assert not end.committed
    assert txn.on_end_txn(end, 0, -1, -1) is Outcome.DONE
    finish(txn, result)
    assert result.error is None and txn.state is S.READY


def test_retriable_answers_are_retried_and_coordinator_errors_rediscover() -> None:
    txn, _ = in_transaction_with(T0)
    result = txn.begin_commit()
    end = take(txn, RequestKind.END_TXN)
    assert txn.on_end_txn(end, ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1) is Outcome.RETRY
    end = take(txn, RequestKind.END_TXN)
    assert txn.on_end_txn(end, ErrorCode.NOT_COORDINATOR, -1, -1) is Outcome.LOOKUP
    end = take(txn, RequestKind.END_TXN)
    txn.request_failed(end)  # connection lost: sent again
    end = take(txn, RequestKind.END_TXN)
    assert txn.on_end_txn(end, 0, -1, -1) is Outcome.DONE
    finish(txn, result)
    assert result.error is None


# ------------------------------------------------------------------ errors
def test_abortable_error_allows_only_abort() -> None:
    txn, _ = in_transaction_with(T0)
    txn.maybe_add_partition(T1)
    request = take(txn, RequestKind.ADD_PARTITIONS)
    txn.on_add_partitions(request, {T1: ErrorCode.TRANSACTION_ABORTABLE})
    assert txn.state is S.ABORTABLE_ERROR
    assert txn.failing_undrained is not None and txn.failing_undrained.code == (
        ErrorCode.TRANSACTION_ABORTABLE)
    with pytest.raises(TransactionAbortableError) as info:
        txn.begin_commit()
    assert isinstance(info.value.__cause__, MiniKafkaError)
    for call in (txn.begin, lambda: txn.maybe_add_partition(T0),
                 lambda: txn.send_offsets({}, ConsumerGroupMetadata("g"))):  # fmt: skip
        with pytest.raises(TransactionAbortableError):
            call()
    result = txn.begin_abort()
    end = take(txn, RequestKind.END_TXN)
    assert not end.committed
    txn.on_end_txn(end, 0, -1, -1)
    finish(txn, result)
    assert result.error is None and txn.state is S.READY and txn.last_error is None


def test_a_failed_batch_makes_the_transaction_abortable() -> None:
    txn, _ = in_transaction_with(T0)
    txn.on_batch_failed(T0, MiniKafkaError("boom", ErrorCode.MESSAGE_TOO_LARGE))
    assert txn.state is S.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError, match="boom"):
        txn.begin_commit()


def test_abortable_error_during_commit_fails_the_commit() -> None:
    txn, _ = in_transaction_with(T0)
    result = txn.begin_commit()
    txn.on_batch_failed(T0, MiniKafkaError("lost", ErrorCode.REQUEST_TIMED_OUT))
    assert txn.next_request(0) is None
    assert isinstance(result.error, TransactionAbortableError)
    finish(txn, result)
    txn.begin_abort()
    assert take(txn, RequestKind.END_TXN).committed is False


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
def test_fenced_is_fatal(code: ErrorCode) -> None:
    txn, idem = in_transaction_with(T0)
    result = txn.begin_commit()
    end = take(txn, RequestKind.END_TXN)
    assert txn.on_end_txn(end, code, -1, -1) is Outcome.DONE
    assert txn.state is S.FATAL_ERROR
    assert isinstance(result.error, ProducerFencedError)
    assert idem.fatal_error is result.error  # every queued record fails, send raises
    assert txn.failing_undrained is result.error
    finish(txn, result)
    for call in (txn.begin_abort, txn.begin, txn.begin_commit, txn.initialize,
                 lambda: txn.maybe_add_partition(T0)):  # fmt: skip
        with pytest.raises(ProducerFencedError):
            call()


def test_invalid_txn_state_is_fatal_with_kafkas_code() -> None:
    txn, _ = in_transaction_with()
    txn.maybe_add_partition(T0)
    request = take(txn, RequestKind.ADD_PARTITIONS)
    txn.on_add_partitions(request, {T0: ErrorCode.INVALID_TXN_STATE})
    assert txn.state is S.FATAL_ERROR
    assert txn.last_error is not None and txn.last_error.code == ErrorCode.INVALID_TXN_STATE
    with pytest.raises(MiniKafkaError) as info:
        txn.begin_abort()
    assert info.value.code == ErrorCode.INVALID_TXN_STATE


def test_init_errors() -> None:
    txn, _ = manager()
    result = txn.initialize()
    request = take(txn, RequestKind.INIT_PRODUCER_ID)
    assert txn.on_init_producer_id(request, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1, -1,
                                   None) is Outcome.RETRY  # fmt: skip
    request = take(txn, RequestKind.INIT_PRODUCER_ID)
    txn.on_init_producer_id(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1,
                            "no")  # fmt: skip
    assert txn.state is S.FATAL_ERROR and result.error is not None
    assert result.error.code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # type: ignore[attr-defined]


def test_sequence_error_aborts_then_bumps_the_epoch() -> None:
    txn, idem = in_transaction_with(T0)
    idem.request_epoch_bump("OUT_OF_ORDER_SEQUENCE_NUMBER for t-0")
    txn.poll()
    assert txn.state is S.ABORTABLE_ERROR
    result = txn.begin_abort()
    end = take(txn, RequestKind.END_TXN)
    txn.on_end_txn(end, 0, -1, -1)
    assert not result.done and txn.state is S.INITIALIZING
    bump = take(txn, RequestKind.INIT_PRODUCER_ID)
    assert bump.bump and bump.result is result
    txn.on_init_producer_id(bump, 0, 7, 1, None)
    finish(txn, result)
    assert result.error is None and txn.state is S.READY and idem.ready
    assert idem.producer_epoch == 1


def test_send_offsets_adds_the_group_then_commits_its_offsets() -> None:
    txn, _ = in_transaction_with()
    group = ConsumerGroupMetadata("g", 3, "m-1", None)
    result = txn.send_offsets({T0: OffsetAndMetadata(10), T1: OffsetAndMetadata(4)}, group)
    add = take(txn, RequestKind.ADD_OFFSETS)
    assert add.coordinator == (1, "")  # the transaction coordinator
    assert txn.on_add_offsets(add, 0) is Outcome.DONE and not result.done
    commit = take(txn, RequestKind.TXN_OFFSET_COMMIT)
    assert commit.coordinator == (0, "g") and commit.group == group
    assert txn.on_txn_offset_commit(commit, {T0: 0, T1: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}) \
        is Outcome.RETRY
    again = take(txn, RequestKind.TXN_OFFSET_COMMIT)
    assert set(again.offsets) == {T1}  # only what failed
    assert txn.on_txn_offset_commit(again, {T1: 0}) is Outcome.DONE
    finish(txn, result)
    assert result.error is None
    commit_result = txn.begin_commit()  # offsets alone start the transaction: EndTxn
    assert take(txn, RequestKind.END_TXN).committed
    assert not commit_result.done


def test_a_fenced_group_member_makes_the_transaction_abortable() -> None:
    txn, _ = in_transaction_with()
    result = txn.send_offsets({T0: OffsetAndMetadata(1)}, ConsumerGroupMetadata("g", 1, "m"))
    txn.on_add_offsets(take(txn, RequestKind.ADD_OFFSETS), 0)
    txn.on_txn_offset_commit(take(txn, RequestKind.TXN_OFFSET_COMMIT),
                             {T0: ErrorCode.ILLEGAL_GENERATION})  # fmt: skip
    assert txn.state is S.ABORTABLE_ERROR
    assert isinstance(result.error, TransactionAbortableError)


def test_abort_while_the_first_add_is_refused_sends_no_end_txn() -> None:
    # the coordinator still completes the previous transaction: CONCURRENT_TRANSACTIONS;
    # nothing of this one reached it, so an EndTxn would be INVALID_TXN_STATE there
    txn, _ = ready()
    txn.begin()
    txn.maybe_add_partition(T0)
    adding = take(txn, RequestKind.ADD_PARTITIONS)
    result = txn.begin_abort()
    assert not result.done  # the add may still reach the coordinator
    txn.on_add_partitions(adding, {T0: ErrorCode.CONCURRENT_TRANSACTIONS})
    assert txn.next_request(0) is None  # no add retried, no EndTxn
    finish(txn, result)
    assert result.error is None and txn.state is S.READY


def test_abort_after_a_lost_add_resends_it_then_ends() -> None:
    txn, _ = ready()
    txn.begin()
    txn.maybe_add_partition(T0)
    adding = take(txn, RequestKind.ADD_PARTITIONS)
    result = txn.begin_abort()
    txn.request_failed(adding)  # the answer was lost: the add may have been applied
    again = take(txn, RequestKind.ADD_PARTITIONS)
    assert again.partitions == {T0}
    txn.on_add_partitions(again, {T0: 0})
    end = take(txn, RequestKind.END_TXN)
    assert not end.committed
    txn.on_end_txn(end, 0, -1, -1)
    finish(txn, result)
    assert result.error is None and txn.state is S.READY
