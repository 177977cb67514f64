"""Partition: leader/follower roles, HW rules, epoch fencing, ISR proposals, truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

import clients.records.batch as batch_module
import storage.log.validator
import storage.segment
from clients.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    MiniKafkaError,
    OffsetOutOfRangeError,
)
from replication.leader_epoch_cache import EpochEntry, LeaderEpochCache
from replication.partition import Partition
from replication.partition_errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderError,
    PartitionInvariantError,
    UnknownLeaderEpochError,
)
from replication.truncation import EpochEndOffset
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from storage.segment_repair import SegmentRepairError
from tests.replication.helpers import (
    RecordingCheckpoint,
    batch,
    epochs_in,
    make_partition,
    open_log,
    values,
)


def replicate(leader: Partition, follower: Partition, now_ms: int = 0) -> bool:
    """One follower fetch round; returns whether the leader's HW moved."""
    offset = follower.log_end_offset
    data = leader.read_records(offset, 1 << 20, for_follower=True).read_bytes()
    moved = leader.update_follower_fetch(follower.local_broker_id, offset, now_ms)
    follower.append_records_as_follower(data, leader.high_watermark)
    return moved


def handshake(leader: Partition, follower: Partition) -> None:
    """OffsetsForLeaderEpoch rounds until the follower's truncation is complete."""
    for _ in range(10):
        answer = leader.last_offset_for_leader_epoch(leader.leader_epoch,
                                                     follower.truncation_request_epoch)
        if follower.truncate_on_leader_answer(answer).completed:
            return
    raise AssertionError("truncation did not complete")


@pytest.fixture
def trio(tmp_path: Path) -> tuple[Partition, Partition, Partition]:
    leader, f2, f3 = (make_partition(tmp_path, b) for b in (1, 2, 3))
    assert leader.make_leader(0, [1, 2, 3], [1, 2, 3], partition_epoch=0, now_ms=0)
    for f in (f2, f3):
        assert f.make_follower(1, 0, [1, 2, 3], partition_epoch=0, isr=[1, 2, 3])
        handshake(leader, f)
    return leader, f2, f3


def test_make_leader_opens_the_epoch_at_leo_and_checkpoints_it(tmp_path: Path) -> None:
    p = make_partition(tmp_path, 1)
    p.make_leader(0, [1], [1])
    p.append_records_as_leader(batch(b"a", b"b"))
    assert p.make_leader(3, [1], [1], partition_epoch=4)
    assert p.leader_epoch_cache.entries == (EpochEntry(0, 0), EpochEntry(3, 2))
    assert p.leader_epoch_start_offset == 2
    ckpt = LeaderEpochCheckpointFile(Path(p.log.dir) / LEADER_EPOCH_CHECKPOINT)
    assert ckpt.read() == [(0, 0), (3, 2)]
    p.append_records_as_leader(batch(b"c"))
    assert epochs_in(b"".join(d for _, d in p.log.batches())) == [(0, 0), (3, 2)]
    p.check_invariants()


def test_the_epoch_checkpoint_is_durable_before_the_log_flushes_records_of_its_epochs(
        tmp_path: Path) -> None:
    """Epoch changes are written without fsync; the log's flush syncs the checkpoint
    first (log recovery checks the unflushed tail against it), and only when the
    recovery point moves."""
    ckpt = RecordingCheckpoint()
    log = open_log(tmp_path / "b1", "t-0")
    p = Partition("t", 0, log, 1, leader_epoch_cache=LeaderEpochCache(ckpt))
    p.make_leader(4, [1], [1])
    p.append_records_as_leader(batch(b"a", b"b"))
    assert ckpt.writes == [([(4, 0)], False)]
    log.flush()
    assert ckpt.writes[-1] == ([(4, 0)], True) and log.recovery_point == 2
    log.flush()  # the recovery point does not move: no sync
    assert len(ckpt.writes) == 2
    assert p.make_leader(6, [1], [1], partition_epoch=1)
    p.append_records_as_leader(batch(b"c"))
    assert ckpt.writes[-1] == ([(4, 0), (6, 2)], False)
    log.flush()
    assert ckpt.writes[-1] == ([(4, 0), (6, 2)], True)
    assert p.make_follower(2, 7, [1, 2], partition_epoch=2, isr=[1, 2])
    p.truncate_to(2)  # nothing left to flush, yet a clean stop leaves it durable
    assert ckpt.writes[-1] == ([(4, 0)], False)
    log.close()
    assert ckpt.writes[-1] == ([(4, 0)], True)


def test_single_replica_hw_follows_leo(tmp_path: Path) -> None:
    p = make_partition(tmp_path, 1)
    p.make_leader(0, [1], [1])
    p.append_records_as_leader(batch(b"a", b"b", b"c"), required_acks=-1, min_insync_replicas=1)
    assert p.high_watermark == 3 == p.log_end_offset
    assert p.acked_by_isr(3) and not p.acked_by_isr(4)


def test_hw_is_min_leo_over_isr_and_never_moves_back(trio: tuple[Partition, ...]) -> None:
    leader, f2, f3 = trio
    leader.append_records_as_leader(batch(b"a", b"b"))
    assert leader.high_watermark == 0
    replicate(leader, f2)             # f2 fetches at 0: HW still 0
    replicate(leader, f3)
    assert leader.high_watermark == 0
    assert replicate(leader, f2) is False  # f2 at 2, f3 known at 0
    assert replicate(leader, f3) is True   # both at 2
    assert leader.high_watermark == 2
    replicate(leader, f2)
    assert f2.high_watermark == 2 and f2.log_end_offset == 2
    assert values(f2.log) == values(leader.log) == [(0, b"a"), (1, b"b")]
    # a follower reporting an older offset cannot lower the HW
    leader.update_follower_fetch(2, 1, now_ms=1)
    assert leader.high_watermark == 2
    for p in trio:
        p.check_invariants()


def test_follower_hw_is_min_of_leader_hw_and_own_leo(trio: tuple[Partition, ...]) -> None:
    leader, f2, _ = trio
    leader.append_records_as_leader(batch(b"a", b"b", b"c"))
    f2.append_records_as_follower(b"", leader_high_watermark=3)
    assert f2.high_watermark == 0   # own LEO is 0
    replicate(leader, f2)
    assert f2.log_end_offset == 3 and f2.high_watermark == 0


def test_new_leader_waits_for_every_isr_member_to_fetch_in_its_epoch(
        trio: tuple[Partition, ...]) -> None:
    leader, f2, f3 = trio
    leader.append_records_as_leader(batch(b"a"))
    replicate(leader, f2)
    replicate(leader, f3)
    # f2 becomes leader in epoch 1; it knows follower 3 reached offset 1 earlier, but not now
    assert f2.make_leader(1, [1, 2, 3], [2, 3, 1], partition_epoch=1, now_ms=10)
    assert all(s.log_end_offset == -1 for s in f2.leader_isr.followers.values())
    f2.append_records_as_leader(batch(b"b"))
    f3.make_follower(2, 1, [1, 2, 3], partition_epoch=1)
    leader.make_follower(2, 1, [1, 2, 3], partition_epoch=1)
    handshake(f2, f3)
    replicate(f2, f3)
    replicate(f2, f3)
    assert f2.high_watermark == 0   # broker 1 has not fetched in epoch 1 yet
    handshake(f2, leader)
    replicate(f2, leader)
    replicate(f2, leader)
    assert f2.high_watermark == 2


def test_fencing_by_leader_epoch(trio: tuple[Partition, ...]) -> None:
    leader, _, _ = trio
    leader.make_leader(2, [1, 2, 3], [1, 2, 3], partition_epoch=1)
    leader.check_leader_epoch(2)
    leader.check_leader_epoch(-1)
    with pytest.raises(FencedLeaderEpochError, match="older"):
        leader.check_leader_epoch(1)
    with pytest.raises(UnknownLeaderEpochError, match="newer"):
        leader.check_leader_epoch(3)
    with pytest.raises(FencedLeaderEpochError):
        leader.last_offset_for_leader_epoch(1, 0)


def test_deposed_leader_refuses_writes_and_cannot_advance_hw(trio: tuple[Partition, ...]) -> None:
    leader = trio[0]
    leader.append_records_as_leader(batch(b"a"))
    assert leader.make_follower(2, 1, [1, 2, 3], partition_epoch=1)
    with pytest.raises(NotLeaderError):
        leader.append_records_as_leader(batch(b"b"))
    with pytest.raises(NotLeaderError):
        leader.update_follower_fetch(2, 1, now_ms=0)
    assert not leader.maybe_increment_high_watermark()
    assert leader.high_watermark == 0


def test_stale_metadata_is_ignored(trio: tuple[Partition, ...]) -> None:
    leader = trio[0]
    leader.make_leader(3, [1, 2, 3], [1, 2, 3], partition_epoch=5)
    assert not leader.make_leader(2, [1, 2, 3], [1, 2, 3], partition_epoch=6)
    assert not leader.make_follower(2, 2, [1, 2, 3], partition_epoch=6)
    assert leader.is_leader and leader.leader_epoch == 3
    # same epoch, newer partition epoch: an ISR update that keeps follower progress
    leader.update_follower_fetch(2, 0, now_ms=7)
    assert not leader.make_leader(3, [1, 2, 3], [1, 2], partition_epoch=6)
    assert leader.isr == [1, 2] and leader.leader_isr.followers[2].log_end_offset == 0
    assert not leader.make_leader(3, [1, 2, 3], [1], partition_epoch=4)
    assert leader.isr == [1, 2]


def test_min_insync_replicas_for_acks_all(trio: tuple[Partition, ...]) -> None:
    leader, _, _ = trio
    leader.make_leader(0, [1, 2, 3], [1], partition_epoch=1)
    with pytest.raises(NotEnoughReplicasError, match="min_insync_replicas 2"):
        leader.append_records_as_leader(batch(b"a"), required_acks=-1, min_insync_replicas=2)
    leader.append_records_as_leader(batch(b"a"), required_acks=1, min_insync_replicas=2)


def test_follower_fetch_errors(trio: tuple[Partition, ...]) -> None:
    leader, _, _ = trio
    with pytest.raises(NotLeaderError, match="not a follower"):
        leader.update_follower_fetch(9, 0, now_ms=0)
    with pytest.raises(OffsetOutOfRangeError):
        leader.update_follower_fetch(2, 5, now_ms=0)
    with pytest.raises(NotLeaderError):
        trio[1].read_records(0, 100, for_follower=True)


def test_isr_shrink_then_expand_through_alter_partition(trio: tuple[Partition, ...]) -> None:
    leader, f2, f3 = trio
    leader.append_records_as_leader(batch(b"a"))
    replicate(leader, f2, now_ms=100)
    replicate(leader, f2, now_ms=200)
    assert leader.maybe_shrink_isr(now_ms=400, replica_lag_time_max_ms=500) is None
    proposal = leader.maybe_shrink_isr(now_ms=800, replica_lag_time_max_ms=500)
    assert proposal is not None and proposal.new_isr == (1, 2)
    assert proposal.partition_epoch == 0 and proposal.leader_epoch == 0
    assert leader.maybe_shrink_isr(now_ms=900, replica_lag_time_max_ms=500) is None  # pending
    assert leader.pending_alter_partition == proposal
    # while pending, HW still waits for 3 (maximal ISR)
    leader.append_records_as_leader(batch(b"b"))
    replicate(leader, f2, now_ms=850)
    assert leader.high_watermark == 0
    assert leader.on_alter_partition_response(proposal, ErrorCode.NONE, [1, 2], 1)
    assert leader.isr == [1, 2] and leader.partition_epoch == 1
    assert leader.high_watermark == 1   # f2 confirmed offset 1 so far
    replicate(leader, f2, now_ms=860)
    assert leader.high_watermark == 2
    # 3 comes back: it joins once it reached the HW in this epoch
    replicate(leader, f3, now_ms=900)
    assert leader.maybe_expand_isr(3) is None          # fetched at 0 < HW 2
    replicate(leader, f3, now_ms=950)
    grow = leader.maybe_expand_isr(3)
    assert grow is not None and grow.new_isr == (1, 2, 3)
    assert leader.maximal_isr == [1, 2, 3]
    leader.append_records_as_leader(batch(b"c"))
    replicate(leader, f2, now_ms=960)
    replicate(leader, f2, now_ms=961)
    assert leader.high_watermark == 2                   # pending addition counts for the HW
    assert leader.on_alter_partition_response(grow, ErrorCode.NONE, [1, 2, 3], 2)
    assert leader.isr == [1, 2, 3]


def test_a_committed_isr_without_the_leader_ends_its_leadership(
        trio: tuple[Partition, ...]) -> None:
    # a damaged leader resigns by proposing the ISR without itself: once the controller
    # commits it, another replica leads; this one waits for the metadata to follow it
    leader, _, _ = trio
    leader.append_records_as_leader(batch(b"a"))
    proposal = leader.propose_isr((2, 3))
    assert proposal is not None
    assert leader.on_alter_partition_response(proposal, ErrorCode.NONE, [2, 3], 1)
    assert not leader.is_leader
    leader.check_invariants()  # not a leader outside its own ISR
    with pytest.raises(NotLeaderError):
        leader.append_records_as_leader(batch(b"b"))
    assert leader.make_follower(2, 1, [1, 2, 3], partition_epoch=2, isr=[2, 3])


def test_rejected_proposal_waits_for_metadata_fenced_resigns(
        trio: tuple[Partition, ...]) -> None:
    leader, _, _ = trio
    p = leader.maybe_shrink_isr(now_ms=10_000, replica_lag_time_max_ms=500)
    assert p is not None
    assert not leader.on_alter_partition_response(p, ErrorCode.INVALID_UPDATE_VERSION)
    assert leader.pending_alter_partition is None
    assert leader.maybe_shrink_isr(now_ms=20_000, replica_lag_time_max_ms=500) is None
    leader.make_leader(0, [1, 2, 3], [1, 2, 3], partition_epoch=3)  # metadata unblocks
    p = leader.maybe_shrink_isr(now_ms=30_000, replica_lag_time_max_ms=500)
    assert p is not None and p.partition_epoch == 3
    assert not leader.on_alter_partition_response(p, ErrorCode.FENCED_LEADER_EPOCH)
    assert not leader.is_leader
    with pytest.raises(NotLeaderError):
        leader.append_records_as_leader(batch(b"x"))


def test_divergent_follower_truncates_to_the_epoch_boundary(tmp_path: Path) -> None:
    a, b = make_partition(tmp_path, 1), make_partition(tmp_path, 2)
    a.make_leader(0, [1, 2], [1, 2])
    b.make_follower(1, 0, [1, 2])
    a.append_records_as_leader(batch(b"m0"))
    replicate(a, b)
    a.append_records_as_leader(batch(b"a1", b"a2"))   # epoch 0, never replicated
    # b becomes leader in epoch 1 and writes its own offsets 1..3
    b.make_leader(1, [1, 2], [2], partition_epoch=1)
    b.append_records_as_leader(batch(b"b1", b"b2", b"b3"))
    a.make_follower(2, 1, [1, 2], partition_epoch=1)
    answer = b.last_offset_for_leader_epoch(1, a.truncation_request_epoch)
    assert answer == EpochEndOffset(0, 1)
    decision = a.truncate_on_leader_answer(answer)
    assert decision.completed and decision.truncate_to == 1
    assert a.leader_epoch_cache.entries == (EpochEntry(0, 0),)
    replicate(b, a)
    assert values(a.log) == values(b.log) == [(0, b"m0"), (1, b"b1"), (2, b"b2"), (3, b"b3")]
    assert a.leader_epoch_cache.entries == b.leader_epoch_cache.entries
    a.check_invariants()
    b.check_invariants()


def test_multi_round_truncation_when_the_leader_skipped_our_epoch(tmp_path: Path) -> None:
    a, b = make_partition(tmp_path, 1), make_partition(tmp_path, 2)
    b.make_leader(0, [1, 2], [1, 2])
    a.make_follower(2, 0, [1, 2])
    b.append_records_as_leader(batch(b"x0", b"x1"))
    replicate(b, a)
    a.make_leader(1, [1, 2], [1], partition_epoch=1)  # a writes in epoch 1, b never sees it
    a.append_records_as_leader(batch(b"a2"))
    b.make_leader(2, [1, 2], [2], partition_epoch=2)  # b returns as leader of epoch 2
    b.append_records_as_leader(batch(b"b2", b"b3"))
    a.make_follower(2, 2, [1, 2], partition_epoch=2)
    handshake(b, a)
    replicate(b, a)
    assert values(a.log) == values(b.log)


def test_follower_append_updates_cache_and_restart_reloads_it(tmp_path: Path) -> None:
    a, b = make_partition(tmp_path, 1), make_partition(tmp_path, 2)
    a.make_leader(0, [1, 2], [1, 2])
    b.make_follower(1, 0, [1, 2])
    a.append_records_as_leader(batch(b"a"))
    a.make_leader(4, [1, 2], [1, 2], partition_epoch=1)
    a.append_records_as_leader(batch(b"b"))
    replicate(a, b)
    assert b.leader_epoch_cache.entries == (EpochEntry(0, 0), EpochEntry(4, 1))
    b.log.close()
    reopened = make_partition(tmp_path, 2)
    assert reopened.leader_epoch_cache.entries == (EpochEntry(0, 0), EpochEntry(4, 1))
    reopened.check_invariants()


def test_invalid_follower_append_leaves_cache_consistent(tmp_path: Path) -> None:
    b = make_partition(tmp_path, 2)
    b.make_follower(1, 3, [1, 2])
    bad = bytearray(batch(b"v", base_offset=0, epoch=3))
    bad[-1] ^= 0xFF   # CRC mismatch
    with pytest.raises(CorruptRecordError, match=r"(?i)crc"):
        b.append_records_as_follower(bytes(bad), 1)
    assert b.leader_epoch_cache.entries == ()
    b.check_invariants()


def test_a_follower_append_parses_each_batch_header_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The log's check of the fetched bytes unpacks every header; the epoch cache, the
    append and the producer state read its fields (issue 31: the follower parsed them
    three times).  Counted by wrapping ``HEADER`` where the path could unpack it."""
    b = make_partition(tmp_path, 2)
    b.make_follower(1, 3, [1, 2])
    data = b"".join(batch(b"v%d" % i, base_offset=i, epoch=2 + i // 2) for i in range(5))
    unpacks = []
    real = batch_module.HEADER

    class Counting:
        size = real.size

        def unpack_from(self, buffer: bytes, offset: int = 0) -> tuple[int, ...]:
            unpacks.append(offset)
            return real.unpack_from(buffer, offset)

    for module in (storage.log.validator, batch_module, storage.segment):
        monkeypatch.setattr(module, "HEADER", Counting())
    b.append_records_as_follower(data, 5)
    assert len(unpacks) == 5
    assert b.leader_epoch_cache.entries == (EpochEntry(2, 0), EpochEntry(3, 2),
                                            EpochEntry(4, 4))
    assert b.log_end_offset == 5


def test_follower_behind_leader_log_start_restarts_there(tmp_path: Path) -> None:
    b = make_partition(tmp_path, 2)
    b.make_follower(1, 0, [1, 2])
    b.append_records_as_follower(batch(b"x", base_offset=0, epoch=0), 1)
    b.truncate_fully_and_start_at(50)
    assert b.log_start_offset == b.log_end_offset == 50 == b.high_watermark
    assert b.leader_epoch_cache.entries == ()
    b.append_records_as_follower(batch(b"y", base_offset=50, epoch=2), 51,
                                 leader_log_start_offset=50)
    assert b.leader_epoch_cache.entries == (EpochEntry(2, 50),)


def test_leader_cannot_truncate(trio: tuple[Partition, ...]) -> None:
    with pytest.raises(NotLeaderError, match="cannot truncate"):
        trio[0].truncate_to(0)


def test_check_invariants_names_the_broken_rule(trio: tuple[Partition, ...]) -> None:
    leader, f1, f2 = trio
    leader.append_records_as_leader(batch(b"a"))
    for _ in range(2):  # the second fetch reports what the first one copied
        replicate(leader, f1)
        replicate(leader, f2)
    assert leader.high_watermark == 1  # moved by the followers' fetches
    leader.check_invariants()
    leader.high_watermark = 5
    with pytest.raises(PartitionInvariantError, match="HW 5 outside"):
        leader.check_invariants()
    leader.high_watermark = 0
    with pytest.raises(PartitionInvariantError, match="fell below"):
        leader.check_invariants()
    with pytest.raises(PartitionInvariantError, match="fell below"):
        leader.check_invariants()  # checking changed nothing: still broken


def two_epochs_then_start_at_3(tmp_path: Path) -> Partition:
    """A leader with a, b in epoch 0 and c, d in epoch 1, its log start moved to 3."""
    p = make_partition(tmp_path, 1)
    p.make_leader(0, [1], [1])
    p.append_records_as_leader(batch(b"a", b"b"))
    p.make_leader(1, [1], [1], partition_epoch=1)
    p.append_records_as_leader(batch(b"c", b"d"))
    p.log.maybe_increment_log_start_offset(3)       # DeleteRecords / retention
    return p


def test_check_invariants_changes_nothing(tmp_path: Path) -> None:
    p = two_epochs_then_start_at_3(tmp_path)
    before = p.leader_epoch_cache.entries
    p.check_invariants()
    assert p.leader_epoch_cache.entries == before  # not trimmed by the check


def test_log_start_moves_trim_the_epoch_cache(tmp_path: Path) -> None:
    p = two_epochs_then_start_at_3(tmp_path)
    answer = p.last_offset_for_leader_epoch(1, 0)   # epoch 0 is gone from this log:
    assert answer == EpochEndOffset(0, 3)           # it ended where epoch 1 now starts
    assert p.leader_epoch_cache.entries == (EpochEntry(1, 3),)
    p.check_invariants()


def _follower_with_a_damaged_segment(tmp_path: Path) -> tuple[Partition, bytes]:
    """A follower over several segments whose second one is to be repaired from its first
    byte on; the batches of that range, as the leader holds them."""
    follower = make_partition(tmp_path, 2)
    follower.make_follower(1, 0, [1, 2], partition_epoch=0, isr=[1, 2])
    for i in range(40):
        follower.append_records_as_follower(
            batch(b"v%03d" % i + bytes(300), base_offset=i, epoch=0), leader_high_watermark=i)
    second = follower.log.segments[1]
    assert len(follower.log.segments) > 3
    copy = second.read_bytes(0, second.size)
    follower.damage.begin_repair(second.base_offset, 0)
    return follower, copy


def test_a_repaired_segment_ends_the_damage_mark(tmp_path: Path) -> None:
    follower, copy = _follower_with_a_damaged_segment(tmp_path)
    repair = follower.repair
    assert repair is not None
    assert follower.damaged == (repair.first_bad_offset, repair.end_offset)
    leo, expected = follower.log_end_offset, values(follower.log)
    assert follower.feed_repair(copy, now_ms=0)
    assert follower.repair is None and follower.damaged is None
    assert follower.log_end_offset == leo and values(follower.log) == expected


def test_batches_that_do_not_fit_fall_back_to_cutting_the_log(tmp_path: Path) -> None:
    # the leader's batches straddle the range's start (the replicas compacted it
    # differently): the follower cuts before the damage and fetches everything again
    follower, _ = _follower_with_a_damaged_segment(tmp_path)
    repair = follower.repair
    assert repair is not None
    straddling = batch(b"a", b"b", b"c", base_offset=repair.first_bad_offset - 1, epoch=0)
    with pytest.raises(SegmentRepairError, match="straddles"):
        follower.feed_repair(straddling, now_ms=0)
    assert follower.repair is None and follower.damaged is None
    assert follower.log_end_offset == repair.first_bad_offset


def test_a_cut_into_the_segment_under_repair_ends_the_repair_before_the_damage(
        tmp_path: Path) -> None:
    follower, _ = _follower_with_a_damaged_segment(tmp_path)
    repair = follower.repair
    assert repair is not None
    follower.truncate_to(repair.first_bad_offset + 2)  # a truncation decision inside it
    assert follower.repair is None and follower.damaged is None
    assert follower.log_end_offset == repair.first_bad_offset
    assert not list(follower.log.dir.glob("*.cleaned"))


def test_a_leader_serves_around_its_damaged_range(tmp_path: Path) -> None:
    follower, _ = _follower_with_a_damaged_segment(tmp_path)
    repair = follower.repair
    assert repair is not None
    follower.make_leader(1, [1, 2], [2], partition_epoch=1)
    follower.high_watermark = follower.log_end_offset
    below = follower.read_records(0, 1 << 20, for_follower=False)
    assert below.size_in_bytes > 0
    with pytest.raises(MiniKafkaError) as raised:
        follower.read_records(repair.first_bad_offset + 1, 1 << 20, for_follower=False)
    assert raised.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    above = follower.read_records(repair.end_offset, 1 << 20, for_follower=True)
    assert above.size_in_bytes > 0


def test_a_second_damaged_segment_stays_unserved_while_the_first_is_repaired(
        tmp_path: Path) -> None:
    follower, copy = _follower_with_a_damaged_segment(tmp_path)
    repair = follower.repair
    assert repair is not None
    third = follower.log.segments[2]
    follower.damage.mark(third.base_offset, follower.log.segments[3].base_offset)
    assert follower.damage.begin_repair(third.base_offset, 0) is None  # one repair at a time
    assert follower.feed_repair(copy, now_ms=0)
    assert follower.damaged_ranges == [(third.base_offset, follower.log.segments[3].base_offset)]
    follower.make_leader(1, [1, 2], [2], partition_epoch=1)
    follower.high_watermark = follower.log_end_offset
    served = follower.read_records(repair.first_bad_offset, 1 << 20, for_follower=False)
    assert served.size_in_bytes > 0  # the repaired range is served again
    with pytest.raises(MiniKafkaError) as raised:
        follower.read_records(third.base_offset, 1 << 20, for_follower=False)
    assert raised.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    follower.damage.mark(third.base_offset + 1, follower.log.segments[3].base_offset)
    assert len(follower.damaged_ranges) == 1  # found again: one range
