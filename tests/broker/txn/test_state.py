"""The transaction state table (Kafka's valid previous states) and the pure transitions of
one transactional id's metadata: every legal transition, every illegal one refused with
Kafka's error."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from broker.txn.records import TxnRecordError, decode_key, decode_value, encode_key, encode_value
from broker.txn.state import (
    FENCE,
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    VALID_PREVIOUS_STATES,
    TransactionState,
    TxnError,
    TxnMetadata,
    check_transition,
    new_metadata,
    prepare_add_partitions,
    prepare_complete,
    prepare_dead,
    prepare_end,
    prepare_init_producer_id,
    prepare_timeout_abort,
    verify_partitions,
)
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition

S = TransactionState
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
PID, EPOCH = 7, 3

# Kafka's TransactionState.validPreviousStates, written out once more by hand
KAFKA_TABLE = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    # Kafka 4.0 (KIP-890 part 2): a TV2 client may abort with no partition added
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT,
                      S.COMPLETE_ABORT},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


def meta(state: TransactionState, **changes: object) -> TxnMetadata:
    base = TxnMetadata("tx", PID, EPOCH, 60_000, state,
                       partitions=frozenset({TP0}) if state in (
                           S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT) else frozenset(),
                       txn_start_timestamp_ms=100, txn_last_update_timestamp_ms=100)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_the_table_is_kafkas() -> None:
    assert {k: set(v) for k, v in VALID_PREVIOUS_STATES.items()} == KAFKA_TABLE
    assert [s.id for s in S] == list(range(8))
    assert [s.display_name for s in S] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
        "CompleteAbort", "Dead", "PrepareEpochFence"]


@pytest.mark.parametrize(("current", "target"), list(itertools.product(S, S)))
def test_every_pair_is_allowed_or_refused_with_invalid_txn_state(
        current: TransactionState, target: TransactionState) -> None:
    if current in KAFKA_TABLE[target]:
        check_transition("tx", current, target)
        assert meta(current).to(target, 5).state is target
    else:
        with pytest.raises(TxnError) as err:
            meta(current).to(target, 5)
        assert err.value.code == ErrorCode.INVALID_TXN_STATE


# -- InitProducerId ------------------------------------------------------------------------

def test_a_new_id_starts_at_epoch_0() -> None:
    first, fence = prepare_init_producer_id(new_metadata("tx", PID, 1000, 1), 1000, None, 2)
    assert (first.state, first.producer_id, first.producer_epoch, fence) == (S.EMPTY, PID, 0, None)


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_init_bumps_the_epoch_of_an_idle_id(state: TransactionState) -> None:
    after, fence = prepare_init_producer_id(meta(state), 30_000, None, 9)
    assert (after.state, after.producer_epoch, after.last_producer_epoch, fence) == (
        S.EMPTY, EPOCH + 1, NO_PRODUCER_EPOCH, None)
    assert after.transaction_timeout_ms == 30_000 and after.partitions == frozenset()


def test_init_fences_and_aborts_an_ongoing_transaction() -> None:
    after, fence = prepare_init_producer_id(meta(S.ONGOING), 60_000, None, 9)
    assert fence == FENCE
    assert (after.state, after.producer_epoch, after.partitions) == (
        S.PREPARE_ABORT, EPOCH + 1, frozenset({TP0}))


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_init_while_completing_is_concurrent(state: TransactionState) -> None:
    with pytest.raises(TxnError) as err:
        prepare_init_producer_id(meta(state), 60_000, None, 9)
    assert err.value.code == ErrorCode.CONCURRENT_TRANSACTIONS


def test_kip360_resume_bumps_and_a_retry_gets_the_same_epoch() -> None:
    after, _ = prepare_init_producer_id(meta(S.COMPLETE_ABORT), 60_000, (PID, EPOCH), 9)
    assert (after.producer_epoch, after.last_producer_epoch) == (EPOCH + 1, EPOCH)
    retried, _ = prepare_init_producer_id(after, 60_000, (PID, EPOCH), 10)
    assert retried.producer_epoch == EPOCH + 1


def test_kip360_with_an_old_epoch_or_another_id_is_fenced() -> None:
    for expected in [(PID, EPOCH - 2), (PID + 1, EPOCH)]:
        with pytest.raises(TxnError) as err:
            prepare_init_producer_id(meta(S.EMPTY), 60_000, expected, 9)
        assert err.value.code == ErrorCode.PRODUCER_FENCED


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    old = meta(S.EMPTY, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    after, _ = prepare_init_producer_id(old, 60_000, None, 9, new_producer_id=99)
    assert (after.producer_id, after.producer_epoch, after.previous_producer_id) == (99, 0, PID)


# -- AddPartitionsToTxn, verify --------------------------------------------------------------

@pytest.mark.parametrize("state", [S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_add_partitions_leads_to_ongoing(state: TransactionState) -> None:
    after = prepare_add_partitions(meta(state), PID, EPOCH, [TP1], 500)
    assert after is not None and after.state is S.ONGOING and TP1 in after.partitions
    assert after.txn_start_timestamp_ms == (100 if state is S.ONGOING else 500)


def test_adding_partitions_already_in_the_transaction_writes_nothing() -> None:
    assert prepare_add_partitions(meta(S.ONGOING), PID, EPOCH, [TP0], 500) is None


@pytest.mark.parametrize(("state", "pid", "epoch", "code"), [
    (S.PREPARE_COMMIT, PID, EPOCH, ErrorCode.CONCURRENT_TRANSACTIONS),
    (S.PREPARE_ABORT, PID, EPOCH, ErrorCode.CONCURRENT_TRANSACTIONS),
    (S.ONGOING, PID + 1, EPOCH, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
    (S.ONGOING, PID, EPOCH - 1, ErrorCode.PRODUCER_FENCED),
    (S.EMPTY, PID, EPOCH + 1, ErrorCode.PRODUCER_FENCED),
])
def test_add_partitions_refused(state: TransactionState, pid: int, epoch: int,
                                code: ErrorCode) -> None:
    with pytest.raises(TxnError) as err:
        prepare_add_partitions(meta(state), pid, epoch, [TP1], 500)
    assert err.value.code == code


def test_verify_only() -> None:
    assert verify_partitions(meta(S.ONGOING), PID, EPOCH, [TP0, TP1]) == {
        TP0: ErrorCode.NONE, TP1: ErrorCode.TRANSACTION_ABORTABLE}
    assert verify_partitions(meta(S.COMPLETE_COMMIT), PID, EPOCH, [TP0]) == {
        TP0: ErrorCode.TRANSACTION_ABORTABLE}
    for m, pid, epoch, code in [(None, PID, EPOCH, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
                                (meta(S.ONGOING), PID, EPOCH + 1, ErrorCode.PRODUCER_FENCED),
                                (meta(S.PREPARE_COMMIT), PID, EPOCH,
                                 ErrorCode.CONCURRENT_TRANSACTIONS)]:
        with pytest.raises(TxnError) as err:
            verify_partitions(m, pid, epoch, [TP0])
        assert err.value.code == code


# -- EndTxn ----------------------------------------------------------------------------------

@pytest.mark.parametrize("committed", [True, False])
def test_end_of_an_ongoing_transaction_prepares(committed: bool) -> None:
    decision = prepare_end(meta(S.ONGOING), PID, EPOCH, committed, 500)
    assert decision.write is not None and decision.error == ErrorCode.NONE
    assert decision.write.state is (S.PREPARE_COMMIT if committed else S.PREPARE_ABORT)
    assert decision.write.producer_epoch == EPOCH  # v0-4: no bump


@pytest.mark.parametrize(("state", "committed", "code"), [
    (S.COMPLETE_COMMIT, True, ErrorCode.NONE),  # a retry
    (S.COMPLETE_ABORT, False, ErrorCode.NONE),
    (S.PREPARE_COMMIT, True, ErrorCode.CONCURRENT_TRANSACTIONS),
    (S.PREPARE_ABORT, False, ErrorCode.CONCURRENT_TRANSACTIONS),
])
def test_end_answered_without_a_write(state: TransactionState, committed: bool,
                                      code: ErrorCode) -> None:
    decision = prepare_end(meta(state), PID, EPOCH, committed, 500)
    assert (decision.write, decision.error) == (None, code)


@pytest.mark.parametrize(("state", "committed"), [
    (S.EMPTY, True), (S.EMPTY, False), (S.COMPLETE_COMMIT, False), (S.COMPLETE_ABORT, True),
    (S.PREPARE_COMMIT, False), (S.PREPARE_ABORT, True)])
def test_end_in_the_wrong_state_is_invalid_txn_state(state: TransactionState,
                                                     committed: bool) -> None:
    with pytest.raises(TxnError) as err:
        prepare_end(meta(state), PID, EPOCH, committed, 500)
    assert err.value.code == ErrorCode.INVALID_TXN_STATE


def test_end_v5_bumps_the_epoch_and_a_retry_gets_it() -> None:
    decision = prepare_end(meta(S.ONGOING), PID, EPOCH, True, 500, transaction_version=2)
    assert decision.write is not None
    assert (decision.producer_epoch, decision.write.last_producer_epoch) == (EPOCH + 1, EPOCH)
    prepared = decision.write
    retry = prepare_end(prepared, PID, EPOCH, True, 600, transaction_version=2)
    assert (retry.write, retry.error, retry.producer_epoch) == (
        None, ErrorCode.CONCURRENT_TRANSACTIONS, EPOCH + 1)
    done = prepare_complete(prepared, 700)
    retry = prepare_end(done, PID, EPOCH, True, 800, transaction_version=2)
    assert (retry.write, retry.error, retry.producer_epoch) == (None, ErrorCode.NONE, EPOCH + 1)


def test_kafka_17754_a_delayed_v5_end_cannot_end_the_next_transaction() -> None:
    first = prepare_end(meta(S.ONGOING), PID, EPOCH, False, 500, transaction_version=2).write
    assert first is not None
    second = prepare_add_partitions(prepare_complete(first, 600), PID, EPOCH + 1, [TP1], 700,
                                    client_transaction_version=2)
    assert second is not None and second.state is S.ONGOING
    for committed in (True, False):  # the first EndTxn (epoch 3) arrives late
        with pytest.raises(TxnError) as err:
            prepare_end(second, PID, EPOCH, committed, 800, transaction_version=2)
        assert err.value.code == ErrorCode.PRODUCER_FENCED


def test_end_with_a_wrong_producer() -> None:
    for pid, epoch, code in [(PID + 1, EPOCH, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
                             (PID, EPOCH + 1, ErrorCode.PRODUCER_FENCED)]:
        with pytest.raises(TxnError) as err:
            prepare_end(meta(S.ONGOING), pid, epoch, True, 500)
        assert err.value.code == code


# -- complete, timeout, expiry -----------------------------------------------------------------

def test_complete_follows_prepare_only() -> None:
    assert prepare_complete(meta(S.PREPARE_COMMIT), 5).state is S.COMPLETE_COMMIT
    assert prepare_complete(meta(S.PREPARE_ABORT), 5).partitions == frozenset()
    for state in set(S) - {S.PREPARE_COMMIT, S.PREPARE_ABORT}:
        with pytest.raises(TxnError) as err:
            prepare_complete(meta(state), 5)
        assert err.value.code == ErrorCode.INVALID_TXN_STATE


def test_timeout_abort_fences_the_producer() -> None:
    after = prepare_timeout_abort(meta(S.ONGOING), 5)
    assert (after.state, after.producer_epoch) == (S.PREPARE_ABORT, EPOCH + 1)
    with pytest.raises(TxnError):
        prepare_timeout_abort(meta(S.EMPTY), 5)


def test_dead_only_from_idle_states() -> None:
    for state in S:
        if state in KAFKA_TABLE[S.DEAD]:
            assert prepare_dead(meta(state), 5).state is S.DEAD
        else:
            with pytest.raises(TxnError):
                prepare_dead(meta(state), 5)


# -- stored records --------------------------------------------------------------------------

@pytest.mark.parametrize("state", [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_ABORT])
def test_records_round_trip(state: TransactionState) -> None:
    m = meta(state, partitions=frozenset({TP0, TP1, TopicPartition("u", 4)}),
             client_transaction_version=2, last_producer_epoch=2)
    assert decode_value("tx", encode_value(m)) == m
    assert decode_key(encode_key("tx")) == "tx"


@pytest.mark.parametrize("data", [b"", b"\x00", b"\xff\xff\x90", b"\x00\x00\xc1",
                                  b"\x00\x00\x91\x01"])
def test_junk_records_raise_the_record_error(data: bytes) -> None:
    for decode in (decode_key, lambda d: decode_value("tx", d)):
        with pytest.raises(TxnRecordError):
            decode(data)


def test_record_dataclasses_match_their_schemas() -> None:
    from broker.metadata.msgpack_form import check_conforms
    from broker.txn.records import (
        TXN_KEY,
        TXN_PARTITIONS,
        TXN_VALUE,
        TxnKey,
        TxnPartitions,
        TxnValue,
    )
    names = {TXN_PARTITIONS: "TxnPartitions"}
    check_conforms(TxnKey, TXN_KEY, 0, names)
    check_conforms(TxnPartitions, TXN_PARTITIONS, 0, names)
    check_conforms(TxnValue, TXN_VALUE, 0, names)


def test_end_v5_at_an_exhausted_epoch_rotates_after_the_markers() -> None:
    old = meta(S.ONGOING, producer_epoch=MAX_PRODUCER_EPOCH - 1, client_transaction_version=2)
    decision = prepare_end(old, PID, MAX_PRODUCER_EPOCH - 1, True, 5, transaction_version=2,
                           new_producer_id=99)
    assert decision.write is not None
    assert (decision.producer_id, decision.producer_epoch) == (99, 0)
    assert (decision.write.producer_id, decision.write.producer_epoch) == (PID, MAX_PRODUCER_EPOCH)
    done = prepare_complete(decision.write, 6)
    assert (done.producer_id, done.producer_epoch, done.previous_producer_id) == (99, 0, PID)
    retry = prepare_end(done, PID, MAX_PRODUCER_EPOCH - 1, True, 7, transaction_version=2)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (ErrorCode.NONE, 99, 0)


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_a_v5_abort_with_no_partition_added_bumps_the_epoch(state: TransactionState) -> None:
    decision = prepare_end(meta(state), PID, EPOCH, False, 5, transaction_version=2)
    assert decision.write is not None
    assert (decision.write.state, decision.write.partitions, decision.producer_epoch) == (
        S.PREPARE_ABORT, frozenset(), EPOCH + 1)
    done = prepare_complete(decision.write, 6)
    retry = prepare_end(done, PID, EPOCH, False, 7, transaction_version=2)
    assert (retry.write, retry.error, retry.producer_epoch) == (None, ErrorCode.NONE, EPOCH + 1)
    with pytest.raises(TxnError) as err:  # a commit of nothing stays refused
        prepare_end(meta(state), PID, EPOCH, True, 5, transaction_version=2)
    assert err.value.code in (ErrorCode.INVALID_TXN_STATE,)
