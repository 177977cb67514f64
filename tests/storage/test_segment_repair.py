"""Repairing one damaged closed segment in place (storage/segment_repair.py).

Two logs are built from the same seed (byte-identical: a leader's copy and a
replica's); the replica's segment gets a flipped byte where the scrubber finds it, and
the repair is fed the leader's bytes.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from clients.protocol.errors import CorruptRecordError
from clients.protocol.topics import TopicPartition
from clients.records.batch import iter_batches
from clients.records.record import build_batch
from storage.errors import StorageError
from storage.log.log import Log
from storage.scrubber import DamagedRange, LogScrubber
from storage.segment import DAMAGE_MARK_SUFFIX
from storage.segment_repair import SegmentRepair, SegmentRepairError
from tests.storage.test_scrubber import CONFIG, fill, run_round

TP = TopicPartition("t", 0)


def flip(path: Path, at: int, mask: int = 0x20) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ mask]))


def damage(log: Log, index: int, rng: random.Random) -> DamagedRange:
    """Flip a CRC-covered byte of a random batch of closed segment ``index``; the
    scrubber's finding."""
    segment = log.segments[index]
    batches = list(iter_batches(segment.read_bytes(0, segment.size)))
    pos, header = rng.choice(batches)
    flip(segment.log_path, rng.randrange(pos + 16, pos + header.size_in_bytes))
    found = run_round(LogScrubber(log.dir / "scrub-cp", step_bytes=4096), {TP: log})
    assert len(found) == 1 and found[0].segment_base_offset == segment.base_offset
    return found[0]


def repair_of(path: Path, seed: int, index: int) -> tuple[Log, SegmentRepair]:
    """A log built from ``seed`` with rot in closed segment ``index``, and its repair."""
    replica = fill(path, 60, seed)
    found = damage(replica, index, random.Random(seed))
    return replica, SegmentRepair(replica, found.segment_base_offset, found.position)


def leader_bytes(leader: Log, start: int, end: int) -> bytes:
    """The leader's batches holding offsets [start, end), as its segments store them."""
    out = bytearray()
    for segment in leader.segments:
        data = segment.read_bytes(0, segment.size)
        for pos, header in iter_batches(data):
            if header.last_offset >= start and header.base_offset < end:
                out += data[pos:pos + header.size_in_bytes]
    return bytes(out)


def files(log: Log) -> dict[int, tuple[int, bytes]]:
    return {s.base_offset: (os.stat(s.log_path).st_ino, s.log_path.read_bytes())
            for s in log.segments}


@pytest.mark.parametrize("seed", range(12))
def test_a_damaged_segment_is_rewritten_and_every_other_one_kept(
        tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    leader, replica = fill(tmp_path / "leader", 90, seed), fill(tmp_path / "t-0", 90, seed)
    assert files(leader).keys() == files(replica).keys()
    index = rng.randrange(len(replica.segments) - 1)
    before = files(replica)
    found = damage(replica, index, rng)
    repair = SegmentRepair(replica, found.segment_base_offset, found.position)
    assert repair.first_bad_offset == found.first_bad_offset
    assert repair.end_offset == replica.segments[index + 1].base_offset
    for _ in range(1000):  # fetch answers from the next missing offset, of any size,
        #                    whole batches then perhaps a partial one (as Kafka's may end)
        data = leader_bytes(leader, repair.next_offset, repair.end_offset + 50)
        first = next(iter_batches(data))[1].size_in_bytes
        repair.append(data[:max(first, rng.randrange(100, 3000))])
        if repair.done:
            break
    assert repair.done
    repair.commit(now_ms=0)
    after = files(replica)
    assert {b: f[1] for b, f in after.items()} == {b: f[1] for b, f in files(leader).items()}
    assert after[found.segment_base_offset][0] != before[found.segment_base_offset][0]
    assert {b: f for b, f in after.items() if b != found.segment_base_offset} == {
        b: f for b, f in before.items() if b != found.segment_base_offset}
    replica.check_invariants()
    assert run_round(LogScrubber(tmp_path / "again", step_bytes=4096), {TP: replica}) == []
    end = replica.log_end_offset
    replica.close()
    reopened = Log.open(tmp_path / "t-0", CONFIG)
    assert reopened.log_end_offset == end
    assert [h.base_offset for h, _ in reopened.batches()] == [
        h.base_offset for h, _ in leader.batches()]
    reopened.close()
    leader.close()


def test_the_active_segment_is_not_repaired_in_place(tmp_path: Path) -> None:
    log = fill(tmp_path / "t-0", 60)
    with pytest.raises(SegmentRepairError, match="the active one"):
        SegmentRepair(log, log.segments[-1].base_offset, 0)
    with pytest.raises(SegmentRepairError, match="not in the log"):
        SegmentRepair(log, 10**9, 0)
    log.close()


def test_a_bad_batch_from_the_other_replica_is_never_written(tmp_path: Path) -> None:
    leader = fill(tmp_path / "leader", 60, 7)
    replica, repair = repair_of(tmp_path / "t-0", 7, 0)
    good = leader_bytes(leader, repair.first_bad_offset, repair.end_offset)
    bad = bytearray(good)
    bad[30] ^= 0x01  # inside the first batch's CRC-covered bytes
    with pytest.raises(CorruptRecordError):
        repair.append(bytes(bad))
    assert repair.next_offset == repair.first_bad_offset and not repair.done
    repair.append(good)
    repair.commit(now_ms=0)
    assert files(replica)[0][1] == files(leader)[0][1]
    leader.close()
    replica.close()


def test_batches_that_straddle_the_range_are_refused(tmp_path: Path) -> None:
    replica, repair = repair_of(tmp_path / "t-0", 3, 1)
    # one batch over [first_bad - 1, first_bad + 1]: the replicas' batches differ here
    other = build_batch([(b"k", b"v", 1, ())] * 3)
    straddling = bytearray(other)
    straddling[:8] = (repair.first_bad_offset - 1).to_bytes(8, "big")
    if repair.first_bad_offset > repair.segment.base_offset:
        with pytest.raises(SegmentRepairError, match="straddles"):
            repair.append(bytes(straddling))
    straddling[:8] = (repair.end_offset - 1).to_bytes(8, "big")
    repair.next_offset = repair.end_offset - 1
    with pytest.raises(SegmentRepairError, match="straddles"):
        repair.append(bytes(straddling))
    repair.abort()
    replica.close()


def test_an_unfinished_repair_leaves_the_old_segment_after_a_crash(tmp_path: Path) -> None:
    rng = random.Random(11)
    leader, replica = fill(tmp_path / "leader", 60, 11), fill(tmp_path / "t-0", 60, 11)
    replica.flush()  # the recovery point at the end: the reopen rescans only the active one
    found = damage(replica, 1, rng)
    damaged_files = files(replica)
    repair = SegmentRepair(replica, found.segment_base_offset, found.position)
    data = leader_bytes(leader, repair.first_bad_offset, repair.end_offset)
    repair.append(data[:len(data) // 2])
    assert list(tmp_path.glob("t-0/*.cleaned"))
    point = replica.recovery_point
    replica.abandon()  # the process dies: descriptors dropped, nothing flushed or renamed
    reopened = Log.open(tmp_path / "t-0", CONFIG, recovery_point=point)
    assert reopened.recovery_report.segments_deleted == 0
    assert not list(tmp_path.glob("t-0/*.cleaned"))
    assert {b: f[1] for b, f in files(reopened).items()} == {
        b: f[1] for b, f in damaged_files.items()}
    reopened.close()
    leader.close()


def test_a_segment_that_changed_under_the_repair_ends_it(tmp_path: Path) -> None:
    replica, repair = repair_of(tmp_path / "t-0", 5, 0)
    replica.maybe_increment_log_start_offset(replica.segments[1].base_offset)
    replica.delete_old_segments()  # retention took the damaged segment
    assert not repair.valid
    with pytest.raises(SegmentRepairError, match="changed"):
        repair.append(b"")
    repair.abort()
    assert not list(tmp_path.glob("t-0/*.cleaned"))
    replica.close()


def _garble_last_offset_delta(log: Log, index: int, mask: int) -> tuple[int, int]:
    """Flip bits of the high byte of the last offset delta of closed segment ``index``'s
    last batch (under the CRC; 0x80: the header now ends the batch before it starts,
    0x20: far past it); that batch's (position, base offset)."""
    segment = log.segments[index]
    pos, header = list(iter_batches(segment.read_bytes(0, segment.size)))[-1]
    flip(segment.log_path, pos + 23, mask)  # lastOffsetDelta is bytes 23..26
    return pos, header.base_offset


def test_a_garbled_last_offset_never_pulls_the_bad_batch_into_a_read(tmp_path: Path) -> None:
    """The reader stops before a bad batch whose header claims offsets it does not have
    (found by the simulation: a leader served one to a consumer reading up to the damaged
    range)."""
    log = fill(tmp_path / "t-0", 60, 9)
    _, bad = _garble_last_offset_delta(log, 1, 0x80)
    read = log.read(log.segments[1].base_offset, 1 << 20, max_offset=bad)
    served = list(iter_batches(read.read_bytes()))  # every batch served passes its CRC
    assert served and served[-1][1].last_offset == bad - 1
    log.close()


def test_a_segment_whose_last_batch_is_garbled_is_repaired_after_a_restart(
        tmp_path: Path) -> None:
    """After a restart the segment's next offset comes from that garbled header; the repair
    must not take it for a changed segment (found by the simulation: it never finished)."""
    leader, replica = fill(tmp_path / "leader", 60, 9), fill(tmp_path / "t-0", 60, 9)
    replica.flush()
    _garble_last_offset_delta(replica, 1, 0x20)  # a clean load takes it as the end
    replica.close()
    replica = Log.open(tmp_path / "t-0", CONFIG, had_clean_shutdown=True)
    found = run_round(LogScrubber(tmp_path / "cp", step_bytes=4096), {TP: replica})
    assert [f.segment_base_offset for f in found] == [replica.segments[1].base_offset]
    repair = SegmentRepair(replica, found[0].segment_base_offset, found[0].position)
    assert repair.valid
    repair.append(leader_bytes(leader, repair.next_offset, repair.end_offset + 1))
    repair.commit(now_ms=0)
    assert {b: f[1] for b, f in files(replica).items()} == {
        b: f[1] for b, f in files(leader).items()}
    leader.close()
    replica.close()


def test_a_bad_batch_whose_offsets_look_out_of_range_only_makes_the_repair_wait(
        tmp_path: Path) -> None:
    """The other replica's batch with a garbled last offset delta (under its CRC) would
    look like it straddles the range's end; read before the CRC check, that made the
    replica cut its own log.  It is a bad batch: CorruptRecordError, nothing written."""
    leader = fill(tmp_path / "leader", 60, 7)
    replica, repair = repair_of(tmp_path / "t-0", 7, 0)
    good = leader_bytes(leader, repair.first_bad_offset, repair.end_offset)
    bad = bytearray(good)
    bad[23] ^= 0x20  # lastOffsetDelta's high byte: far past the segment's end
    with pytest.raises(CorruptRecordError):
        repair.append(bytes(bad))
    assert repair.next_offset == repair.first_bad_offset and not repair.done
    repair.append(good)
    repair.commit(now_ms=0)
    leader.close()
    replica.close()


def _segment_bytes(log: Log) -> dict[int, bytes]:
    return {s.base_offset: s.log_path.read_bytes() for s in log.segments}


@pytest.mark.parametrize("seed", range(8))
def test_recovery_keeps_damage_in_place_and_a_repair_makes_the_replica_whole(
        tmp_path: Path, seed: int) -> None:
    """Flipped bytes in one or two durable closed segments (below the recovery point),
    found by recovery because their index files are gone (so they are rescanned), after
    a crash: every segment stays, intact or not, the log end does not move, reads and
    walks stop before each damaged range, and repairs from the leader's copy make the
    replica byte-identical to it again."""
    rng = random.Random(seed)
    leader, replica = fill(tmp_path / "leader", 90, seed), fill(tmp_path / "t-0", 90, seed)
    replica.flush()
    end, bases = replica.log_end_offset, [s.base_offset for s in replica.segments]
    point = replica.recovery_point
    victims = sorted(rng.sample(range(len(bases) - 1), rng.choice((1, 2))))
    for index in victims:
        segment = replica.segments[index]
        batches = list(iter_batches(segment.read_bytes(0, segment.size)))
        pos, header = rng.choice(batches)
        flip(segment.log_path, rng.randrange(pos + 16, pos + header.size_in_bytes))
        segment.index.path.unlink()
    replica.abandon()  # a crash: the restart is unclean
    reopened = Log.open(tmp_path / "t-0", CONFIG, recovery_point=point)
    report = reopened.recovery_report
    assert [s.base_offset for s in reopened.segments] == bases  # nothing cut or moved
    assert reopened.log_end_offset == end and report.truncated_bytes == 0
    assert [d[0] for d in report.damaged] == [bases[i] for i in victims]
    assert not list((tmp_path / "t-0").glob("quarantine-*"))
    for base, position, first_bad, until in report.damaged:
        assert until == bases[bases.index(base) + 1]
        segment = next(s for s in reopened.segments if s.base_offset == base)
        assert segment.damage == (position, first_bad) and segment.next_offset == until
        # a read stops before the damage; one that starts inside it is refused (never
        # the next segment's batches in its place)
        if position:
            data = reopened.read(base, 10**9).read_bytes()
            assert all(h.last_offset < first_bad for _, h in iter_batches(data))
        for inside in (first_bad, until - 1):
            with pytest.raises(StorageError, match=f"offsets \\[{first_bad}, {until}\\)"):
                reopened.read(inside, 10**6)
        assert next(iter_batches(reopened.read(until, 10**6).read_bytes()))[1].base_offset \
            == until
    walked = [h.base_offset for h, _ in reopened.batches()]  # skips the damaged ranges
    assert not any(first_bad <= o < until for _, _, first_bad, until in report.damaged
                   for o in walked)
    reopened.check_invariants()
    for base, position, _first_bad, _until in report.damaged:
        repair = SegmentRepair(reopened, base, position)
        repair.append(leader_bytes(leader, repair.first_bad_offset, repair.end_offset))
        assert repair.done
        repair.commit(now_ms=0)
    assert _segment_bytes(reopened) == _segment_bytes(leader)
    assert all(s.damage is None for s in reopened.segments)
    reopened.check_invariants()
    assert run_round(LogScrubber(tmp_path / "again", step_bytes=4096), {TP: reopened}) == []
    reopened.close()
    leader.close()


def test_a_truncation_into_a_damaged_range_cuts_where_the_damage_starts(
        tmp_path: Path) -> None:
    replica = fill(tmp_path / "t-0", 60, 3)
    replica.flush()
    point = replica.recovery_point
    victim = replica.segments[1]
    pos, header = list(iter_batches(victim.read_bytes(0, victim.size)))[2]
    flip(victim.log_path, pos + 40)
    victim.index.path.unlink()
    replica.abandon()
    reopened = Log.open(tmp_path / "t-0", CONFIG, recovery_point=point)
    ((base, position, first_bad, until),) = reopened.recovery_report.damaged
    assert (base, position, first_bad) == (victim.base_offset, pos, header.base_offset)
    reopened.truncate_to(until - 1)  # inside the damaged range: cut where it starts
    assert reopened.log_end_offset == first_bad
    assert reopened.segments[-1].damage is None and reopened.segments[-1].size == position
    reopened.check_invariants()
    reopened.close()


def test_recovery_keeps_a_segment_whose_first_header_is_damaged(tmp_path: Path) -> None:
    """The magic byte of a durable segment's first batch flipped (its index lost, so it is
    rescanned): the damage starts at byte 0 and no walk of the segment reads past it."""
    replica = fill(tmp_path / "t-0", 60, 4)
    replica.flush()
    point, end = replica.recovery_point, replica.log_end_offset
    victim = replica.segments[1]
    flip(victim.log_path, 16, 0x01)  # magic 2 -> 3
    victim.index.path.unlink()
    replica.abandon()
    reopened = Log.open(tmp_path / "t-0", CONFIG, recovery_point=point)
    assert reopened.recovery_report.damaged == [
        (victim.base_offset, 0, victim.base_offset, reopened.segments[2].base_offset)]
    assert reopened.log_end_offset == end
    reopened.check_invariants()
    reopened.close()


def _marks(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob(f"*{DAMAGE_MARK_SUFFIX}"))


@pytest.mark.parametrize("clean", [True, False])
def test_a_damage_mark_makes_a_restart_find_the_damage_again(tmp_path: Path,
                                                              clean: bool) -> None:
    """Rot the scrubber found (a flipped record byte: the index files stay valid) and
    marked on the segment is found again by the next start's recovery, clean or not,
    although the segment sits below the recovery point; without the mark the start does
    not see it.  The repair's swap removes the mark."""
    leader, replica = fill(tmp_path / "leader", 90, 5), fill(tmp_path / "t-0", 90, 5)
    found = damage(replica, 1, random.Random(5))
    victim = replica.segments[1]
    replica.flush()
    point, end = replica.recovery_point, replica.log_end_offset
    assert point > replica.segments[2].base_offset  # the damaged segment is durable
    (replica.close if clean else replica.abandon)()
    unmarked = Log.open(tmp_path / "t-0", CONFIG, recovery_point=point)
    assert unmarked.recovery_report.damaged == []  # the index check cannot see it
    unmarked.close()
    unmarked.segments[1].write_damage_mark(found.position, found.first_bad_offset)
    assert _marks(tmp_path / "t-0") == [victim.damage_mark_path.name]
    reopened = Log.open(tmp_path / "t-0", CONFIG, recovery_point=point)
    assert reopened.recovery_report.damaged == [
        (victim.base_offset, found.position, found.first_bad_offset,
         reopened.segments[2].base_offset)]
    assert reopened.log_end_offset == end
    assert _marks(tmp_path / "t-0") == [victim.damage_mark_path.name]  # still there
    reopened.close()
    again = Log.open(tmp_path / "t-0", CONFIG, recovery_point=point)  # a second restart
    assert [d[0] for d in again.recovery_report.damaged] == [victim.base_offset]
    repair = SegmentRepair(again, found.segment_base_offset, found.position)
    repair.append(leader_bytes(leader, repair.first_bad_offset, repair.end_offset))
    repair.commit(now_ms=0)
    assert _marks(tmp_path / "t-0") == []
    again.close()
    healed = Log.open(tmp_path / "t-0", CONFIG, recovery_point=point)
    assert healed.recovery_report.damaged == [] and healed.log_end_offset == end
    assert _segment_bytes(healed) == _segment_bytes(leader)
    healed.close()
    leader.close()


def test_a_damage_mark_goes_with_the_damage(tmp_path: Path) -> None:
    """A mark is removed when the log is cut at or below it, with its segment, when its
    segment rescans intact, and when it has no segment; a cut above it keeps it."""
    log = fill(tmp_path / "t-0", 90, 6)
    directory = tmp_path / "t-0"
    first, second, third = log.segments[1], log.segments[2], log.segments[3]
    third.write_damage_mark(100, third.base_offset + 1)
    second.write_damage_mark(0, second.base_offset)  # bytes that are intact
    (directory / f"{99999:020d}{DAMAGE_MARK_SUFFIX}").write_text("0 99999\n")  # no segment
    log.close()
    log = Log.open(directory, CONFIG)
    problems = " ".join(log.recovery_report.problems)
    assert "no damage left" in problems and "without a .log" in problems
    assert log.recovery_report.damaged == [] and _marks(directory) == []
    log.segments[1].write_damage_mark(200, first.base_offset + 2)
    log.truncate_to(log.segments[3].base_offset)  # later segments only: the mark stays
    assert _marks(directory) == [first.damage_mark_path.name]
    log.truncate_to(log.segments[1].base_offset + 1)  # at or below it: gone
    assert _marks(directory) == []
    log.segments[0].write_damage_mark(50, 1)
    log.truncate_fully_and_start_at(log.log_end_offset + 10)  # deleted with its segment
    assert _marks(directory) == []
    log.close()
