"""ProducerStateManager's transaction rules (6-11 of replication.producer_state), pure."""

from __future__ import annotations

from pathlib import Path

from clients.protocol.errors import ErrorCode
from replication.producer_state import (
    CompletedTxn,
    ProducerStateManager,
    Verdict,
    VerdictKind,
)
from storage.producer_snapshot import decode_snapshot, encode_snapshot, write_snapshot


def data(state: ProducerStateManager, pid: int, epoch: int, seq: int, offset: int,
         count: int = 1, *, txn: bool = True) -> None:
    """A batch the log accepted (trusted update)."""
    state.update(pid, epoch, seq, seq + count - 1, offset, offset + count - 1, 1_000,
                 is_transactional=txn)


def code(verdict: Verdict) -> ErrorCode:
    assert verdict.kind is VerdictKind.ERROR, verdict
    return verdict.error_code


def test_a_transactional_batch_opens_a_transaction_and_a_marker_ends_it() -> None:
    state = ProducerStateManager("t-0")
    assert state.first_unstable_offset() is None
    data(state, 7, 0, 0, 10, 3)
    data(state, 7, 0, 3, 13)  # continues it: the first offset stays 10
    entry = state.entry(7)
    assert entry is not None and entry.current_txn_first_offset == 10
    assert state.first_unstable_offset() == 10
    assert state.ongoing_transactions() == [(7, 10)]
    done = state.update_marker(7, 0, 4, offset=14, is_aborted=False)
    assert done == CompletedTxn(7, 10, 14, is_aborted=False)
    assert entry.current_txn_first_offset == -1 and entry.coordinator_epoch == 4
    assert state.first_unstable_offset() == 10  # until the HW passes the marker
    state.on_high_watermark_updated(14)
    assert state.first_unstable_offset() == 10
    state.on_high_watermark_updated(15)
    assert state.first_unstable_offset() is None
    # a marker with nothing open (an empty transaction, a retry) completes nothing
    assert state.update_marker(7, 0, 4, offset=15, is_aborted=True) is None


def test_the_oldest_open_transaction_is_the_first_unstable_offset() -> None:
    state = ProducerStateManager("t-0")
    data(state, 1, 0, 0, 0)
    data(state, 2, 0, 0, 1)
    data(state, 3, 0, 0, 2, txn=False)  # idempotent only: never unstable
    assert state.first_unstable_offset() == 0
    aborted = state.update_marker(1, 0, 0, offset=3, is_aborted=True)
    assert aborted is not None
    assert state.last_stable_offset_after(aborted) == 1  # producer 2's is still open
    state.on_high_watermark_updated(4)
    assert state.first_unstable_offset() == 1
    done = state.update_marker(2, 0, 0, offset=4, is_aborted=True)
    assert done is not None and state.last_stable_offset_after(done) == 5  # none open
    state.on_high_watermark_updated(5)
    assert state.first_unstable_offset() is None


def test_rule_6_no_plain_batch_inside_a_transaction() -> None:
    state = ProducerStateManager("t-0")
    assert state.check_txn_batch(7, 0, False).kind is VerdictKind.APPEND
    data(state, 7, 0, 0, 0)
    assert code(state.check_txn_batch(7, 0, False)) == ErrorCode.INVALID_TXN_STATE
    state.update_marker(7, 0, 0, offset=1, is_aborted=False)
    assert state.check_txn_batch(7, 0, False).kind is VerdictKind.APPEND


def test_rule_7_verification_guards() -> None:
    state = ProducerStateManager("t-0")
    # no verifier: accepted
    assert state.check_txn_batch(7, 0, True).kind is VerdictKind.APPEND
    assert state.needs_verification(7, 0)
    # with a verifier, the guard taken before asking is required
    assert code(state.check_txn_batch(7, 0, True, verification_required=True)) \
        == ErrorCode.INVALID_TXN_STATE
    guard = state.verification_guard(7)
    assert state.verification_guard(7) is guard  # one per producer until used or dropped
    assert state.check_txn_batch(7, 0, True, guard, verification_required=True).kind \
        is VerdictKind.APPEND
    # a marker written while the coordinator was asked drops the guard (KAFKA-17754's race)
    state.update_marker(7, 0, 0, offset=0, is_aborted=True)
    assert code(state.check_txn_batch(7, 0, True, guard, verification_required=True)) \
        == ErrorCode.INVALID_TXN_STATE
    fresh = state.verification_guard(7)
    assert fresh is not guard
    data(state, 7, 0, 0, 1)  # the append uses the guard up
    assert not state.needs_verification(7, 0)
    assert state.check_txn_batch(7, 0, True, None, verification_required=True).kind \
        is VerdictKind.APPEND  # continues its open transaction: nothing to verify
    assert state.needs_verification(7, 1)  # another epoch: Kafka's hasOngoingTransaction
    # the guard was used up by the append that opened the transaction
    assert code(state.check_txn_batch(7, 1, True, fresh, verification_required=True)) \
        == ErrorCode.INVALID_TXN_STATE
    assert code(state.check_txn_batch(-1, -1, True)) == ErrorCode.INVALID_RECORD


def test_rule_7_a_higher_epoch_continues_the_open_transaction() -> None:
    state = ProducerStateManager("t-0")
    data(state, 7, 0, 0, 5)
    data(state, 7, 1, 0, 6)  # (the coordinator fences with a marker; the log is trusted)
    entry = state.entry(7)
    assert entry is not None and entry.epoch == 1 and entry.current_txn_first_offset == 5


def test_rules_8_and_9_stale_markers_are_refused() -> None:
    state = ProducerStateManager("t-0")
    assert state.check_marker(7, 0, 0).kind is VerdictKind.APPEND  # unknown producer
    assert code(state.check_marker(-1, 0, 0)) == ErrorCode.INVALID_REQUEST
    data(state, 7, 2, 0, 0)
    state.update_marker(7, 2, 5, offset=1, is_aborted=False)
    assert code(state.check_marker(7, 1, 5)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert code(state.check_marker(7, 2, 4)) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert state.check_marker(7, 2, 5).kind is VerdictKind.APPEND
    assert state.check_marker(7, 3, 6).kind is VerdictKind.APPEND
    # transaction version 2: every transaction ends with a bumped epoch, so a marker of
    # the producer's current epoch is a late one of an earlier transaction
    assert code(state.check_marker(7, 2, 5, strict_epoch=True)) \
        == ErrorCode.INVALID_PRODUCER_EPOCH
    assert state.check_marker(7, 3, 5, strict_epoch=True).kind is VerdictKind.APPEND


def test_rule_10_a_higher_marker_epoch_becomes_the_producers() -> None:
    state = ProducerStateManager("t-0")
    data(state, 7, 0, 0, 0, 2)
    done = state.update_marker(7, 1, 0, offset=2, is_aborted=False)
    entry = state.entry(7)
    assert done == CompletedTxn(7, 0, 2, False)
    assert entry is not None and entry.epoch == 1 and not entry.batches
    assert state.check(7, 1, 0, 0).kind is VerdictKind.APPEND  # the new epoch at seq 0
    # rule 11: a replicated marker with an older epoch is applied, never lowers it
    state.update_marker(7, 0, 0, offset=3, is_aborted=True)
    assert entry.epoch == 1


def test_open_transactions_are_never_expired_nor_evicted() -> None:
    state = ProducerStateManager("t-0", max_producers=2, producer_id_expiration_ms=10)
    data(state, 1, 0, 0, 0)  # open
    data(state, 2, 0, 0, 1, txn=False)
    data(state, 3, 0, 0, 2, txn=False)  # evicts 2, not 1
    assert 1 in state and 2 not in state and 3 in state
    state.remove_expired(0)
    assert state.remove_expired(100) == 1  # 3 only
    assert 1 in state and state.first_unstable_offset() == 0


def test_snapshots_keep_open_transactions_and_coordinator_epochs(tmp_path: Path) -> None:
    state = ProducerStateManager("t-0")
    data(state, 1, 0, 0, 5)
    data(state, 2, 0, 0, 3)  # (a snapshot lists producers by write, not by offset)
    data(state, 3, 0, 0, 6, txn=False)
    state.update_marker(3, 0, 9, offset=7, is_aborted=False)
    offset, entries = decode_snapshot(encode_snapshot(8, state.snapshot()))
    assert offset == 8
    copy = ProducerStateManager("t-0")
    copy.load(entries)
    assert copy.snapshot() == state.snapshot()
    assert copy.ongoing_transactions() == [(2, 3), (1, 5)]  # oldest first
    assert copy.first_unstable_offset() == 3
    third = copy.entry(3)
    assert third is not None and third.coordinator_epoch == 9
    # a version-1 file (before transactions) still loads, as no transaction state
    write_snapshot(tmp_path, 4, [(5, 1, [(0, 0, 0, 0, 1_000)])])
    raw = (tmp_path / f"{4:020d}.snapshot").read_bytes()
    assert raw[4:6] == b"\x00\x01"
    old = ProducerStateManager("t-0")
    old.load(decode_snapshot(raw)[1])
    entry = old.entry(5)
    assert entry is not None and entry.current_txn_first_offset == -1
    assert old.first_unstable_offset() is None
