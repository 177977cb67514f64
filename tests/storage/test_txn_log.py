"""The segments' .txnindex in a Log: entries across rolls, collect, truncation, crash
recovery (entries past the log end, a lost file, a damaged file rebuilt equal), retention,
the scrubber, the cleaner and segment repair."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from clients.protocol.topics import TopicPartition
from clients.records.batch import TRANSACTIONAL_MASK, iter_batches, set_base_offset
from clients.records.control import ControlType, build_marker_batch
from clients.records.record import build_batch, decode_batch
from storage.cleaner.cleaner import LogCleaner
from storage.config import LogConfig
from storage.errors import CorruptIndexError, LogInvariantError
from storage.index.txn_index import AbortedTxn
from storage.log.log import Log
from storage.scrubber import LogScrubber
from storage.segment_repair import SegmentRepair
from tests.storage.test_scrubber import run_round
from tests.storage.test_segment_repair import damage, leader_bytes

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=4096,
                   retention_ms=-1)
TP = TopicPartition("t", 0)
FAR = 2**62


class TxnWriter:
    """Appends transactional batches and markers as a partition would, and records each
    aborted transaction that wrote data (Kafka's LSO rule) with Log.append_aborted_txn."""

    def __init__(self, log: Log, seed: int = 0) -> None:
        self.log = log
        self.rng = random.Random(seed)
        self.open: dict[int, int] = {}  # producer id -> first offset of its transaction
        self.aborted: list[AbortedTxn] = []

    def _append(self, data: bytes) -> int:
        buf = bytearray(data)
        base = self.log.log_end_offset
        set_base_offset(buf, base)
        self.log.append_as_follower(buf)
        return base

    def data(self, pid: int, transactional: bool = True, key: bytes = b"k") -> int:
        records = [(key, self.rng.randbytes(self.rng.randrange(10, 80)), 1000, ())
                   for _ in range(self.rng.randrange(1, 4))]
        batch = build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=0,
                            attributes=TRANSACTIONAL_MASK if transactional else 0)
        base = self._append(batch)
        if transactional:
            self.open.setdefault(pid, base)
        return base

    def end(self, pid: int, control_type: ControlType) -> int:
        offset = self._append(build_marker_batch(pid, 0, control_type, 5, 1000))
        first = self.open.pop(pid, None)
        if first is not None and control_type == ControlType.ABORT:
            entry = AbortedTxn(pid, first, offset, min(self.open.values(), default=offset + 1))
            self.log.append_aborted_txn(entry)
            self.aborted.append(entry)
        return offset

    def run(self, steps: int) -> None:
        """A random mix: data of 4 transactional producers, plain batches, commits,
        aborts (some of empty transactions)."""
        for _ in range(steps):
            roll = self.rng.random()
            pid = self.rng.randrange(1, 5)
            if roll < 0.5:
                self.data(pid)
            elif roll < 0.6:
                self.data(-1, transactional=False)
            elif roll < 0.8 or pid not in self.open:
                self.end(pid, ControlType.ABORT if self.rng.random() < 0.6
                         else ControlType.COMMIT)
            else:
                self.end(pid, ControlType.COMMIT)


def expected(aborted: list[AbortedTxn], start: int, upper: int) -> list[AbortedTxn]:
    return sorted((e for e in aborted if e.last_offset >= start and e.first_offset < upper),
                  key=lambda e: e.first_offset)


def all_entries(log: Log) -> list[AbortedTxn]:
    return [e for seg in log.segments for e in seg.txn_index.entries]


def txn_files(log: Log) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.dir.glob("*.txnindex"))}


def written(tmp_path: Path, seed: int = 0, steps: int = 300, config: LogConfig = CONFIG,
            name: str = "t-0") -> tuple[Log, TxnWriter]:
    log = Log.open(tmp_path / name, config)
    writer = TxnWriter(log, seed)
    writer.run(steps)
    return log, writer


@pytest.mark.parametrize("seed", range(4))
def test_entries_go_to_the_segment_of_their_marker_and_collect_across_rolls(
        tmp_path: Path, seed: int) -> None:
    log, writer = written(tmp_path, seed)
    assert len(log.segments) > 10 and len(writer.aborted) > 10
    for seg, nxt in zip(log.segments, [*log.segments[1:], None], strict=True):
        end = log.log_end_offset if nxt is None else nxt.base_offset
        assert all(seg.base_offset <= e.last_offset < end for e in seg.txn_index.entries)
        assert seg.txn_index.path.exists() == bool(seg.txn_index.entries)  # lazily created
    assert all_entries(log) == writer.aborted
    log.check_invariants()
    rng = random.Random(seed)
    leo = log.log_end_offset
    for _ in range(200):
        start = rng.randrange(0, leo + 1)
        upper = rng.randrange(start, leo + 2)
        assert log.collect_aborted_transactions(start, upper) == expected(
            writer.aborted, start, upper)
    log.close()
    again = Log.open(log.dir, CONFIG, had_clean_shutdown=True)
    assert all_entries(again) == writer.aborted
    assert again.collect_aborted_transactions(0, FAR) == expected(writer.aborted, 0, FAR)
    again.close()


def test_an_entry_must_end_inside_the_log(tmp_path: Path) -> None:
    log, writer = written(tmp_path, steps=50)
    with pytest.raises(ValueError, match="ends outside the log"):
        log.append_aborted_txn(AbortedTxn(1, 0, log.log_end_offset, log.log_end_offset + 1))
    with pytest.raises(ValueError, match="increasing last_offset"):
        log.append_aborted_txn(writer.aborted[-1])
    log.close()


@pytest.mark.parametrize("seed", range(3))
def test_truncation_drops_the_entries_of_what_it_cuts(tmp_path: Path, seed: int) -> None:
    log, writer = written(tmp_path, seed)
    cut = writer.aborted[len(writer.aborted) // 2].last_offset  # that marker goes
    log.truncate_to(cut)
    kept = [e for e in writer.aborted if e.last_offset < cut]
    assert all_entries(log) == kept
    assert log.collect_aborted_transactions(0, FAR) == expected(kept, 0, FAR)
    names = {s.txn_index.path.name for s in log.segments if s.txn_index.entries}
    assert set(txn_files(log)) == names  # the cut segments' files went with them
    # appends go on after the cut, into the active segment's index
    writer.aborted, writer.open = kept, {}
    writer.run(100)
    assert all_entries(log) == writer.aborted
    log.close()
    assert all_entries(Log.open(log.dir, CONFIG, had_clean_shutdown=True)) == writer.aborted


def test_after_a_crash_entries_past_the_recovered_end_are_dropped(tmp_path: Path) -> None:
    log, writer = written(tmp_path, 1)
    log.flush()
    point = log.log_end_offset
    writer.run(60)  # unflushed: the tail a power cut may lose
    active = log.active
    lost = next(e for e in writer.aborted if e.last_offset >= max(point, active.base_offset))
    marker = active.find_batch(lost.last_offset)
    assert marker is not None
    log.abandon()
    os.truncate(active.log_path, marker.position)  # the log lost its tail, the index not
    again = Log.open(log.dir, CONFIG, recovery_point=point)
    kept = [e for e in writer.aborted if e.last_offset < again.log_end_offset]
    assert len(kept) < len(writer.aborted)
    assert all_entries(again) == kept
    again.check_invariants()
    assert any("at or past the segment's end" in p for p in again.recovery_report.problems)
    again.close()


def test_after_a_crash_a_lost_file_of_a_rescanned_segment_is_rebuilt(tmp_path: Path) -> None:
    log, writer = written(tmp_path, 2)
    before = txn_files(log)
    target = next(s for s in log.segments[3:] if s.txn_index.entries)
    point = target.base_offset
    log.abandon()
    target.txn_index.path.unlink()
    again = Log.open(log.dir, CONFIG, recovery_point=point)
    assert all_entries(again) == writer.aborted
    assert txn_files(again) == before
    assert any("have no entry" in p for p in again.recovery_report.problems)
    again.check_invariants()
    again.close()


def damage_file(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "size":
        path.write_bytes(data + b"\x01")
    elif how == "version":
        path.write_bytes(b"\x00\x07" + data[2:])
    else:  # order: the last entry first
        path.write_bytes(data[-34:] + data[:-34])


@pytest.mark.parametrize("how", ["size", "version", "order"])
def test_a_damaged_file_is_rebuilt_equal_to_the_original(tmp_path: Path, how: str) -> None:
    log, writer = written(tmp_path, 3)
    before = txn_files(log)
    target = next(s for s in log.segments[2:] if len(s.txn_index.entries) >= 2)
    log.close()
    damage_file(target.txn_index.path, how)
    again = Log.open(log.dir, CONFIG, had_clean_shutdown=True)
    assert txn_files(again) == before
    assert all_entries(again) == writer.aborted
    assert any("rebuilding the transaction index" in p
               for p in again.recovery_report.problems)
    again.close()


@pytest.mark.parametrize("seed", range(4, 8))
def test_every_file_rebuilt_from_the_log_equals_what_was_written(tmp_path: Path,
                                                                 seed: int) -> None:
    """All lost at once (a crash from the first segment on): the rebuild from the log
    start gives back every entry, LSOs included; empty aborts give none."""
    log, writer = written(tmp_path, seed, steps=400)
    assert any(e.last_stable_offset <= e.last_offset for e in writer.aborted)  # overlaps
    bases = [seg.base_offset for seg in log.segments]
    assert any(any(e.first_offset < b <= e.last_offset for b in bases)
               for e in writer.aborted)  # and transactions across a roll
    before = txn_files(log)
    log.abandon()
    for path in log.dir.glob("*.txnindex"):
        path.unlink()
    again = Log.open(log.dir, CONFIG, recovery_point=0)
    assert txn_files(again) == before
    assert all_entries(again) == writer.aborted
    again.close()


def test_retention_deletes_the_files_with_their_segments(tmp_path: Path) -> None:
    log, writer = written(tmp_path, 5)
    gone = log.segments[:4]
    paths = [s.txn_index.path for s in gone if s.txn_index.entries]
    assert paths
    log.maybe_increment_log_start_offset(log.segments[4].base_offset)
    assert log.delete_old_segments() == 4
    assert not any(p.exists() for p in paths)
    start = log.log_start_offset
    assert log.collect_aborted_transactions(start, FAR) == expected(
        [e for e in writer.aborted if e.last_offset >= gone[-1].next_offset], start, FAR)
    log.close()


def test_the_scrubber_rebuilds_a_lost_file_recovery_did_not_see(tmp_path: Path) -> None:
    log, writer = written(tmp_path, 6)
    before = txn_files(log)
    target = next(s for s in log.segments[1:-1] if s.txn_index.entries)
    log.close()
    target.txn_index.path.unlink()
    again = Log.open(log.dir, CONFIG, had_clean_shutdown=True)  # a clean load: not seen
    assert txn_files(again) != before
    scrubber = LogScrubber(tmp_path / "scrubber-checkpoint", step_bytes=700)
    assert run_round(scrubber, {TP: again}) == []
    assert scrubber.txn_indexes_rebuilt == 1
    assert txn_files(again) == before and all_entries(again) == writer.aborted
    assert run_round(scrubber, {TP: again}) == [] and scrubber.txn_indexes_rebuilt == 1
    again.close()


@pytest.mark.parametrize("from_start", [True, False])
def test_the_scrubber_rebuilds_a_damaged_file(tmp_path: Path, from_start: bool) -> None:
    """Read from the log's start, the scrubber rewrites the index from what it tracked;
    a round that starts mid-log rebuilds it from the log."""
    log, writer = written(tmp_path, 7)
    before = txn_files(log)
    target = next(s for s in log.segments[2:-1] if s.txn_index.entries)
    damage_file(target.txn_index.path, "size")
    scrubber = LogScrubber(tmp_path / "scrubber-checkpoint", step_bytes=4096)
    if not from_start:
        scrubber.cursor = (TP, target.base_offset, 0)
    assert run_round(scrubber, {TP: log}) == []
    assert scrubber.txn_indexes_rebuilt == 1 and txn_files(log) == before
    assert all_entries(log) == writer.aborted
    log.close()


def test_the_cleaner_removes_aborted_data_and_carries_the_entries_of_kept_markers(
        tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=4096,
                       cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log = Log.open(tmp_path / "t-0", config)
    writer = TxnWriter(log, 8)
    for i in range(300):  # few keys: plain batches compact, transactional ones stay
        pid = writer.rng.randrange(1, 4)
        if i % 3 == 0:
            writer.data(-1, transactional=False, key=b"k%d" % (i % 4))
        elif pid in writer.open and writer.rng.random() < 0.3:
            writer.end(pid, ControlType.ABORT if i % 2 else ControlType.COMMIT)
        else:
            writer.data(pid, key=b"k%d" % (i % 4))
    for pid in list(writer.open):  # the cleaner's bound is the LSO: past every transaction
        writer.end(pid, ControlType.COMMIT)
    segments_before = len(log.segments)

    def txn_batches() -> dict[int, bytes]:
        out = {}
        for header, data in log.batches():
            if header.is_transactional:
                out[header.base_offset] = data
        return out

    log.update_config(LogConfig(**{**config.__dict__, "segment_bytes": 8192}))
    before = txn_batches()
    plain_before = sum(1 for h, _ in log.batches() if not h.is_transactional)
    assert LogCleaner(clock_ms=lambda: 10**7).clean_until_idle({TP: log}) >= 1
    assert len(log.segments) < segments_before
    assert sum(1 for h, _ in log.batches() if not h.is_transactional) < plain_before
    after = txn_batches()
    assert len(after) < len(before)  # aborted data removed, committed data compacted
    markers = {o for o, d in before.items() if d[22] & 0x20}
    assert markers <= set(after)  # within delete_retention_ms of their data going
    assert all_entries(log) == writer.aborted
    log.check_invariants()
    for seg, nxt in zip(log.segments, [*log.segments[1:], None], strict=True):
        end = log.log_end_offset if nxt is None else nxt.base_offset
        assert all(seg.base_offset <= e.last_offset < end for e in seg.txn_index.entries)
    log.close()
    again = Log.open(log.dir, config, had_clean_shutdown=True)
    assert all_entries(again) == writer.aborted
    assert not again.recovery_report.problems
    again.close()


@pytest.mark.parametrize("index_damaged", [False, True])
def test_a_repaired_segment_keeps_its_entries(tmp_path: Path, index_damaged: bool) -> None:
    """Carried as they are; a damaged index of the repaired segment is rebuilt."""
    leader, writer = written(tmp_path, 9, name="leader-0")
    leader.close()
    shutil.copytree(leader.dir, tmp_path / "t-0")
    leader = Log.open(tmp_path / "leader-0", CONFIG, had_clean_shutdown=True)
    replica = Log.open(tmp_path / "t-0", CONFIG, had_clean_shutdown=True)
    index = next(i for i, s in enumerate(replica.segments[:-1])
                 if len(s.txn_index.entries) >= 2 and i > 0)
    before = txn_files(replica)
    found = damage(replica, index, random.Random(9))
    repair = SegmentRepair(replica, found.segment_base_offset, found.position)
    if index_damaged:  # found damaged (by the scrubber, say) before the repair ends
        damage_file(replica.segments[index].txn_index.path, "version")
        with pytest.raises(CorruptIndexError):
            replica.segments[index].txn_index.sanity_check()
    repair.append(leader_bytes(leader, repair.next_offset, repair.end_offset))
    repair.commit(0)
    assert txn_files(replica) == before
    assert all_entries(replica) == writer.aborted
    assert [d for _, d in replica.batches()] == [d for _, d in leader.batches()]
    assert list(iter_batches(replica.segments[index].read_bytes(
        0, replica.segments[index].size)))
    leader.close()
    replica.close()


def test_the_scrubber_leaves_entries_alone_after_retention_cut_their_start(
        tmp_path: Path) -> None:
    """Retention deleted the first batches of a transaction whose marker is kept: the
    scrubber knows a later first offset than the writer did, and rewrites nothing."""
    log, writer = written(tmp_path, 10)
    k = next(i for i, s in enumerate(log.segments[1:-1], 1)
             if any(e.first_offset < s.base_offset <= e.last_offset for e in writer.aborted))
    log.maybe_increment_log_start_offset(log.segments[k].base_offset)
    log.delete_old_segments()
    before = txn_files(log)
    scrubber = LogScrubber(tmp_path / "scrubber-checkpoint", step_bytes=4096)
    assert run_round(scrubber, {TP: log}) == []
    assert scrubber.txn_indexes_rebuilt == 0 and txn_files(log) == before
    log.close()


def test_the_log_invariants_check_the_transaction_index(tmp_path: Path) -> None:
    log, _ = written(tmp_path, 11, steps=100)
    log.check_invariants()
    seg = next(s for s in log.segments[:-1] if s.txn_index.entries)
    entry = seg.txn_index.entries[-1]
    seg.txn_index.truncate_to(entry.last_offset)
    seg.txn_index.append(entry._replace(last_offset=seg.next_offset))  # the next segment's
    with pytest.raises(LogInvariantError, match="does not end at a batch"):
        log.check_invariants()
    seg.txn_index.path.write_bytes(b"\x00" * 35)
    with pytest.raises(LogInvariantError, match="not a multiple"):
        log.check_invariants()
    log.abandon()


class _Crash(Exception):
    pass


def _txn_swap_scenario(directory: Path, config: LogConfig) -> tuple[Log, TxnWriter]:
    """Three closed segments with aborted transactions (one cleaner group), flushed."""
    log = Log.open(directory, config)
    writer = TxnWriter(log, 12)
    for _ in range(3):
        while log.active.size < 900:
            pid = writer.rng.randrange(1, 4)
            if pid in writer.open and writer.rng.random() < 0.3:
                writer.end(pid, ControlType.ABORT)
            else:
                writer.data(pid, key=b"k")
            writer.data(-1, transactional=False, key=b"k")  # compacts away
        log.roll()
    writer.data(-1, transactional=False, key=b"k")
    log.flush()
    return log, writer


def test_a_crash_at_every_swap_step_keeps_the_transaction_index(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=4096, index_interval_bytes=128, segment_index_bytes=4096,
                       cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log, writer = _txn_swap_scenario(tmp_path / "ref" / "t-0", config)
    assert sum(1 for s in log.segments[:3] if s.txn_index.entries) >= 2
    steps: list[str] = []
    cleaner = LogCleaner(clock_ms=lambda: 10**7)
    cleaner.swap_hook = steps.append
    cleaner.clean_until_idle({TP: log})
    assert len(log.segments) == 2 and all_entries(log) == writer.aborted
    assert any(".txnindex" in step for step in steps)
    log.close()
    for k, label in enumerate(steps):
        directory = tmp_path / f"crash-{k}" / "t-0"
        log, writer = _txn_swap_scenario(directory, config)
        calls = iter(range(len(steps)))

        def hook(step: str, k: int = k, calls: object = calls) -> None:
            if next(calls) == k:  # type: ignore[call-overload]
                raise _Crash(step)

        cleaner = LogCleaner(clock_ms=lambda: 10**7)
        cleaner.swap_hook = hook
        with pytest.raises(_Crash):
            cleaner.clean_until_idle({TP: log})
        log.abandon()
        reopened = Log.open(directory, config, recovery_point=log.recovery_point)
        try:
            # carried as they are, or (after the commit point) rebuilt from a log whose
            # aborted data is gone: no entry then
            assert all_entries(reopened) in (writer.aborted, []), label
            reopened.check_invariants()
            assert not [p.name for p in directory.iterdir()
                        if p.name.endswith((".cleaned", ".swap", ".deleted"))], label
        finally:
            reopened.close()
        shutil.rmtree(directory.parent)


def test_a_tombstone_after_a_transactional_value_goes_with_it(tmp_path: Path) -> None:
    """The committed transactional record is compacted like any other: the tombstone
    that supersedes it removes it, then goes after its horizon (the old value never
    comes back)."""
    now = [10**7]
    config = LogConfig(segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=4096,
                       cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                       delete_retention_ms=1000)
    log = Log.open(tmp_path / "t-0", config, clock_ms=lambda: now[0])
    writer = TxnWriter(log, 13)
    writer.data(7, key=b"gone")  # a committed transactional value of "gone"
    writer.end(7, ControlType.COMMIT)
    for i in range(30):  # a plain tombstone of "gone", and plain tombstones of others
        key = b"gone" if i == 10 else b"other-%d" % i
        tomb = build_batch([(key, None, 1000, ())])
        writer._append(tomb)
        writer.data(-1, transactional=False, key=b"filler-%d" % i)
    log.roll()

    def tombstones() -> set[bytes]:
        return {r.key for h, data in log.batches() if not h.is_transactional
                for r in decode_batch(data) if r.value is None and r.key is not None}

    cleaner = LogCleaner(clock_ms=lambda: now[0])
    cleaner.clean_until_idle({TP: log})  # stamps the horizons
    assert b"gone" in tombstones() and b"other-3" in tombstones()
    now[0] += 5000
    cleaner.clean_until_idle({TP: log})  # past the horizon
    assert tombstones() == set()
    assert not [r for _, data in log.batches() for r in decode_batch(data) if r.key == b"gone"]
    assert cleaner.clean_until_idle({TP: log}) == 0  # and no pass is due for it
    log.close()
