"""Transactions on a partition: the LSO, markers, aborted transactions, followers, restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.records.batch import TRANSACTIONAL_MASK, iter_batches
from clients.records.control import ControlType
from clients.records.record import build_batch
from replication.append_origin import AppendOrigin
from replication.partition import Partition
from replication.partition_errors import NotLeaderError
from tests.replication.helpers import make_partition


def txn(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    return build_batch([(None, v, 1_000, ()) for v in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, attributes=TRANSACTIONAL_MASK)


def leader(root: Path, broker_id: int = 1) -> Partition:
    p = make_partition(root, broker_id)
    p.make_leader(1, [broker_id], [broker_id])
    return p


def marker(p: Partition, pid: int, control: ControlType, epoch: int = 0,
           coordinator_epoch: int = 0) -> int:
    return p.append_txn_marker(pid, epoch, control, coordinator_epoch,
                               timestamp_ms=2_000).last_offset


def committed_read(p: Partition, offset: int = 0) -> tuple[int, list[int]]:
    """(LSO, base offsets of the batches a READ_COMMITTED consumer gets from ``offset``)."""
    data = p.read_records(offset, 1 << 20, for_follower=False, read_committed=True)
    return p.last_stable_offset, [h.base_offset for _, h in iter_batches(data.read_bytes())]


def test_an_open_transaction_holds_the_lso_until_its_marker_is_replicated(
        tmp_path: Path) -> None:
    p = leader(tmp_path)  # alone in its ISR: the HW follows the LEO
    p.append_records_as_leader(txn(7, 0, 0, b"a", b"b"))  # offsets 0-1
    p.append_records_as_leader(build_batch([(None, b"plain", 1_000, ())]))  # offset 2
    assert (p.high_watermark, p.last_stable_offset) == (3, 0)
    assert p.partition_log.first_unstable_offset == 0
    assert committed_read(p) == (0, [])  # nothing stable yet
    assert p.read_records(0, 1 << 20, for_follower=False).size_in_bytes > 0  # uncommitted
    assert marker(p, 7, ControlType.COMMIT) == 3
    assert committed_read(p) == (4, [0, 2, 3])
    assert p.partition_log.first_unstable_offset is None


def test_the_lso_waits_for_the_marker_to_reach_the_isr(tmp_path: Path) -> None:
    p = make_partition(tmp_path, 1)
    p.make_leader(1, [1, 2], [1, 2])
    p.append_records_as_leader(txn(7, 0, 0, b"a"))
    p.update_follower_fetch(2, 1, now_ms=0)
    assert (p.high_watermark, p.last_stable_offset) == (1, 0)
    marker(p, 7, ControlType.ABORT)  # at offset 1, not replicated yet
    assert (p.high_watermark, p.last_stable_offset) == (1, 0)  # its outcome is not final
    p.update_follower_fetch(2, 2, now_ms=0)
    assert (p.high_watermark, p.last_stable_offset) == (2, 2)


def test_an_abort_is_listed_in_the_aborted_transactions(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append_records_as_leader(txn(7, 0, 0, b"x"))  # 0: aborted below
    p.append_records_as_leader(txn(8, 0, 0, b"y"))  # 1: producer 8 stays open for a while
    assert marker(p, 7, ControlType.ABORT) == 2
    assert p.last_stable_offset == 1
    assert marker(p, 8, ControlType.COMMIT) == 3
    data = p.read_records(0, 1 << 20, for_follower=False, read_committed=True)
    aborted = p.partition_log.aborted_transactions(0, data, p.last_stable_offset)
    assert [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
            for t in aborted] == [(7, 0, 2, 1)]  # LSO after it: producer 8's open txn
    later = p.read_records(3, 1 << 20, for_follower=False, read_committed=True)
    assert p.partition_log.aborted_transactions(3, later, p.last_stable_offset) == []


def test_stale_markers_and_plain_batches_inside_a_transaction_are_refused(
        tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append_records_as_leader(txn(7, 1, 0, b"a"))
    with pytest.raises(MiniKafkaError) as plain:
        p.append_records_as_leader(build_batch([(None, b"b", 1_000, ())], producer_id=7,
                                               producer_epoch=1, base_sequence=1))
    assert plain.value.code == ErrorCode.INVALID_TXN_STATE
    with pytest.raises(MiniKafkaError) as old_epoch:
        marker(p, 7, ControlType.COMMIT, epoch=0)
    assert old_epoch.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    marker(p, 7, ControlType.COMMIT, epoch=1, coordinator_epoch=3)
    with pytest.raises(MiniKafkaError) as zombie:
        marker(p, 7, ControlType.ABORT, epoch=1, coordinator_epoch=2)
    assert zombie.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert p.log_end_offset == 2  # nothing refused was written
    follower = make_partition(tmp_path / "f", 2)
    follower.make_follower(1, 1, [1, 2])
    with pytest.raises(NotLeaderError):
        marker(follower, 7, ControlType.COMMIT, epoch=1, coordinator_epoch=3)


def test_a_verifier_guard_must_be_current(tmp_path: Path) -> None:
    p = leader(tmp_path)
    with pytest.raises(MiniKafkaError) as unverified:
        p.append_records_as_leader(txn(7, 0, 0, b"a"), verification_required=True)
    assert unverified.value.code == ErrorCode.INVALID_TXN_STATE
    guard = p.producer_state.verification_guard(7)
    marker(p, 7, ControlType.ABORT)  # written while the coordinator was being asked
    with pytest.raises(MiniKafkaError) as stale:
        p.append_records_as_leader(txn(7, 0, 0, b"a"), guard=guard, verification_required=True)
    assert stale.value.code == ErrorCode.INVALID_TXN_STATE
    guard = p.producer_state.verification_guard(7)
    assert p.append_records_as_leader(txn(7, 0, 0, b"a"), guard=guard,
                                      verification_required=True).first_offset == 1


def test_a_follower_knows_the_open_transactions_and_the_aborts(tmp_path: Path) -> None:
    lead = leader(tmp_path / "a", 1)
    lead.append_records_as_leader(txn(7, 0, 0, b"a"))
    marker(lead, 7, ControlType.ABORT)
    lead.append_records_as_leader(txn(8, 0, 0, b"b"))  # open at offset 2
    follower = make_partition(tmp_path / "b", 2)
    follower.make_follower(1, 1, [1, 2])
    follower.append_records_as_follower(lead.read_records(0, 1 << 20, for_follower=True)
                                        .read_bytes(), leader_high_watermark=3)
    assert follower.partition_log.first_unstable_offset == 2
    assert follower.log.collect_aborted_transactions(0, 3) == \
        lead.log.collect_aborted_transactions(0, 3)
    follower.make_leader(2, [1, 2], [2])  # it leads now: the open transaction holds the LSO
    assert follower.last_stable_offset == 2
    marker(follower, 8, ControlType.COMMIT)
    assert follower.last_stable_offset == 4


def test_a_restart_and_a_truncation_rebuild_the_open_transactions(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append_records_as_leader(txn(7, 0, 0, b"a"))  # 0
    marker(p, 7, ControlType.ABORT)  # 1
    p.append_records_as_leader(txn(8, 0, 0, b"b"))  # 2: open
    assert p.take_producer_snapshot()  # a snapshot at 3 holds producer 8's transaction
    p.append_records_as_leader(txn(9, 0, 0, b"c"))  # 3: open, only in the log
    p.log.close()
    reopened = make_partition(tmp_path, 1)  # snapshot + replay
    reopened.high_watermark = 4
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in
            reopened.log.collect_aborted_transactions(0, 4)] == [(7, 0, 1)]
    assert reopened.partition_log.first_unstable_offset == 2
    assert reopened.producer_state.ongoing_transactions() == [(8, 2), (9, 3)]
    reopened.make_follower(5, 2, [1, 5])
    reopened.truncate_to(3)  # producer 9's batch goes
    assert reopened.producer_state.ongoing_transactions() == [(8, 2)]
    reopened.truncate_to(2)
    assert reopened.partition_log.first_unstable_offset is None
    entry = reopened.producer_state.entry(7)
    assert entry is not None and entry.current_txn_first_offset == -1


def test_the_first_unstable_offset_is_never_below_the_log_start(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append_records_as_leader(txn(7, 0, 0, b"a"))  # 0: open
    p.append_records_as_leader(build_batch([(None, b"b", 1_000, ())]))  # 1
    p.partition_log.maybe_increment_log_start_offset(1)  # (DeleteRecords, retention)
    assert (p.partition_log.first_unstable_offset, p.last_stable_offset) == (1, 1)


def test_a_retried_tv2_marker_is_recognised_and_waits_for_replication(
        tmp_path: Path) -> None:
    """Transaction version 2: the coordinator resends a marker whose answer it did not
    get (the leader waits for acks=all; the request timed out).  The leader already
    appended it, so the resend is refused by rule 8 (same epoch); it is a retry, and the
    answer must wait until the first copy is replicated: answered "written" at once, the
    coordinator completes the transaction while the marker may still be lost with this
    leader (simulation seed 6 of the ``transactions`` mode: a committed transaction then
    aborted on that partition)."""
    p = make_partition(tmp_path, 1)
    p.make_leader(1, [1, 2], [1, 2])
    p.append_records_as_leader(txn(7, 0, 0, b"a"))          # 0
    p.update_follower_fetch(2, 1, now_ms=0)
    p.append_txn_marker(7, 1, ControlType.COMMIT, 3, timestamp_ms=2_000,
                        strict_epoch=True)                  # 1, not replicated
    assert p.high_watermark == 1
    with pytest.raises(MiniKafkaError) as refused:
        p.append_txn_marker(7, 1, ControlType.COMMIT, 3, timestamp_ms=2_000,
                            strict_epoch=True)
    assert refused.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert p.log_end_offset == 2  # nothing written twice
    retry = p.partition_log.txn_marker_retry_offset
    assert retry(7, 1, 3) == 2  # answered once the HW reaches 2
    assert retry(7, 1, 2) is None  # an older coordinator's (a zombie)
    assert retry(7, 1, 4) == 2  # a newer coordinator finishing the same transaction
    assert retry(7, 0, 3) is None  # an older epoch: a late marker
    p.append_records_as_leader(txn(7, 1, 0, b"b"))          # the next transaction opens
    assert retry(7, 1, 3) is None  # a late marker now: refused


def test_a_coordinators_append_is_checked_for_its_epoch_not_its_sequence(
        tmp_path: Path) -> None:
    p = leader(tmp_path)
    # a coordinator writes each TxnOffsetCommit at base sequence 0 (as Kafka): every one
    # is appended, none taken for a retry of the first
    for offset in range(3):
        info = p.append_records_as_leader(txn(7, 2, 0, b"offsets"),
                                          origin=AppendOrigin.COORDINATOR)
        assert (info.first_offset, info.num_batches) == (offset, 1)
    # the same batch from a client is a duplicate of the last one (its original offset)
    retried = p.append_records_as_leader(txn(7, 2, 0, b"offsets"))
    assert (retried.first_offset, retried.num_batches) == (0, 0)
    assert p.log_end_offset == 3
    with pytest.raises(MiniKafkaError) as fenced:  # the epoch is still checked
        p.append_records_as_leader(txn(7, 1, 0, b"old"), origin=AppendOrigin.COORDINATOR)
    assert fenced.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(MiniKafkaError) as out_of_order:  # a client's sequence is checked
        p.append_records_as_leader(txn(7, 2, 5, b"gap"))
    assert out_of_order.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # so is an unknown producer's first sequence, for a client only
    with pytest.raises(MiniKafkaError) as unknown:
        p.append_records_as_leader(txn(8, 0, 4, b"client"))
    assert unknown.value.code == ErrorCode.UNKNOWN_PRODUCER_ID
    assert p.append_records_as_leader(txn(8, 0, 4, b"coordinator"),
                                      origin=AppendOrigin.COORDINATOR).first_offset == 3
    with pytest.raises(ValueError):  # a replicated batch is a follower's append
        p.append_records_as_leader(txn(8, 0, 5, b"x"), origin=AppendOrigin.REPLICATION)
