"""Compaction of transactional data (storage/cleaner/txn_filter.py), Kafka's rules on
hand-built logs: aborted data goes, committed data compacts by key, a marker stays
while its transaction has data and goes delete_retention_ms after it has none, nothing
at or above the bound (the LSO) is touched, and a read_committed reader's view (the
latest committed value of every key, with the .txnindex entries it is given) is the
same before and after every pass."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from clients.records.batch import CONTROL_MASK
from clients.records.control import ControlType, parse_marker
from clients.records.record import build_batch, decode_batch
from storage.cleaner.batch_filter import DELETE_HORIZON_MASK
from storage.cleaner.cleaner import LogCleaner
from storage.cleaner.config import CleanerConfig
from storage.cleaner.offset_map import ENTRY_OVERHEAD_BYTES
from storage.config import LogConfig
from storage.errors import CorruptIndexError
from storage.log.log import Log
from tests.storage.test_txn_log import TP, TxnWriter, damage_file

RETENTION_MS = 1000
CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=4096,
                   cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                   delete_retention_ms=RETENTION_MS)

View = dict[bytes, bytes | None]


class Now:
    def __init__(self) -> None:
        self.ms = 10**7

    def __call__(self) -> int:
        return self.ms


def read_committed(log: Log) -> tuple[list[tuple[int, bytes | None, bytes | None]], View]:
    """What a read_committed consumer of the whole log gets (Kafka's client filter fed
    with the log's aborted transactions), and the latest value of each key in it."""
    aborted = log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset)
    i, active = 0, set()
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for header, data in log.batches():
        while i < len(aborted) and aborted[i].first_offset <= header.last_offset:
            active.add(aborted[i].producer_id)
            i += 1
        records = decode_batch(data)
        if header.attributes & CONTROL_MASK:
            if records and parse_marker(records[0].key, records[0].value)[0] == ControlType.ABORT:
                active.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in active:
            continue
        out += [(r.offset, r.key, r.value) for r in records]
    return out, {k: v for _, k, v in out if k is not None}


def uncommitted_values(log: Log) -> set[bytes | None]:
    return {r.value for h, data in log.batches() if not h.attributes & CONTROL_MASK
            for r in decode_batch(data)}


def markers(log: Log) -> dict[int, tuple[int, bool]]:
    """offset -> (producer id, stamped with a delete horizon) of every marker."""
    return {h.base_offset: (h.producer_id, bool(h.attributes & DELETE_HORIZON_MASK))
            for h, _ in log.batches() if h.attributes & CONTROL_MASK and h.record_count}


def txn_data(w: TxnWriter, pid: int, key: bytes, value: bytes) -> int:
    """One transactional record ``key=value`` of ``pid`` (TxnWriter.data, chosen value)."""
    batch = build_batch([(key, value, 1000, ())], producer_id=pid, producer_epoch=0,
                        base_sequence=0, attributes=0x10)
    base = w._append(batch)
    w.open.setdefault(pid, base)
    return base


def plain(w: TxnWriter, key: bytes, value: bytes | None) -> int:
    return w._append(build_batch([(key, value, 1000, ())]))


def test_aborted_data_goes_committed_data_compacts_and_the_view_is_kept(
        tmp_path: Path) -> None:
    now = Now()
    log = Log.open(tmp_path / "t-0", CONFIG, clock_ms=now)
    w = TxnWriter(log)
    txn_data(w, 1, b"a", b"a-committed-old")
    txn_data(w, 2, b"a", b"a-aborted")  # must not supersede a's committed value
    txn_data(w, 2, b"b", b"b-aborted")
    w.end(1, ControlType.COMMIT)
    plain(w, b"b", b"b-plain")
    w.end(2, ControlType.ABORT)
    txn_data(w, 1, b"c", b"c-committed")
    txn_data(w, 1, b"a", b"a-committed-new")
    w.end(1, ControlType.COMMIT)
    txn_data(w, 2, b"c", b"c-aborted-late")  # aborted after a committed value of c
    w.end(2, ControlType.ABORT)
    plain(w, b"later", b"x")  # each producer has a later batch: no marker is its last
    log.roll()
    before, view = read_committed(log)
    cleaner = LogCleaner(clock_ms=now)
    assert cleaner.clean_until_idle({TP: log}) >= 1
    after, view_after = read_committed(log)
    assert view_after == view == {b"a": b"a-committed-new", b"b": b"b-plain",
                                  b"c": b"c-committed", b"later": b"x"}
    assert uncommitted_values(log) == {b"a-committed-new", b"b-plain", b"c-committed", b"x"}
    assert cleaner.stats.aborted_dropped == 3
    assert set(after) < set(before)
    log.check_invariants()
    log.close()


def test_a_marker_stays_while_its_data_does_and_goes_delete_retention_ms_after(
        tmp_path: Path) -> None:
    now = Now()
    log = Log.open(tmp_path / "t-0", CONFIG, clock_ms=now)
    w = TxnWriter(log)
    txn_data(w, 1, b"k", b"v1")  # committed, superseded below
    commit_gone = w.end(1, ControlType.COMMIT)
    txn_data(w, 2, b"k", b"aborted")
    abort = w.end(2, ControlType.ABORT)
    txn_data(w, 3, b"stays", b"s")  # committed, never superseded
    commit_stays = w.end(3, ControlType.COMMIT)
    plain(w, b"k", b"v2")
    for pid in (1, 2, 3):  # later transactions: none of the markers above is a last batch
        txn_data(w, pid, b"p%d" % pid, b"later")
        w.end(pid, ControlType.COMMIT)
    log.roll()
    (entry,) = log.collect_aborted_transactions(0, log.log_end_offset)
    cleaner = LogCleaner(clock_ms=now)
    cleaner.clean_until_idle({TP: log})
    # the data is gone or compacted; the markers without data are stamped, not removed
    assert markers(log)[commit_gone] == (1, True) and markers(log)[abort] == (2, True)
    assert markers(log)[commit_stays] == (3, False)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [entry]
    view = read_committed(log)[1]
    now.ms += RETENTION_MS - 1
    assert cleaner.clean_until_idle({TP: log}) == 0  # not due yet
    assert commit_gone in markers(log) and abort in markers(log)
    now.ms += 1
    assert cleaner.clean_until_idle({TP: log}) == 1  # the horizon makes the log due
    assert commit_gone not in markers(log) and abort not in markers(log)
    assert markers(log)[commit_stays] == (3, False)  # its data is still there
    assert cleaner.stats.markers_dropped == 2
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []  # with its marker
    assert read_committed(log)[1] == view == {b"k": b"v2", b"stays": b"s", b"p1": b"later",
                                              b"p2": b"later", b"p3": b"later"}
    log.check_invariants()
    log.close()
    again = Log.open(log.dir, CONFIG, had_clean_shutdown=True)
    assert again.collect_aborted_transactions(0, again.log_end_offset) == []
    again.close()


def test_the_marker_of_a_producers_last_batch_stays(tmp_path: Path) -> None:
    """Kafka keeps an empty batch there (the producer's state must survive a rebuild
    from the log); here the marker stays whole."""
    now = Now()
    log = Log.open(tmp_path / "t-0", CONFIG, clock_ms=now)
    w = TxnWriter(log)
    txn_data(w, 1, b"k", b"aborted")
    abort = w.end(1, ControlType.ABORT)
    plain(w, b"k", b"v")
    log.roll()
    cleaner = LogCleaner(clock_ms=now)
    cleaner.clean_until_idle({TP: log})
    now.ms += 10 * RETENTION_MS
    cleaner.clean_until_idle({TP: log})
    assert markers(log) == {abort: (1, False)}
    assert uncommitted_values(log) == {b"v"}
    log.close()


def test_nothing_at_or_above_the_last_stable_offset_is_cleaned(tmp_path: Path) -> None:
    now = Now()
    log = Log.open(tmp_path / "t-0", CONFIG, clock_ms=now)
    w = TxnWriter(log)
    txn_data(w, 1, b"k", b"aborted")
    w.end(1, ControlType.ABORT)
    for i in range(20):
        plain(w, b"k", b"old-%d" % i)
    log.roll()
    lso = txn_data(w, 2, b"k", b"open")  # an open transaction: the LSO is its first offset
    for i in range(20):
        plain(w, b"k", b"new-%d" % i)  # would supersede everything above, were it cleaned
    log.roll()
    plain(w, b"k", b"active")
    unstable = [(h.base_offset, d) for h, d in log.batches() if h.base_offset >= lso]
    cleaner = LogCleaner(clock_ms=now)
    while cleaner.clean_step({TP: log}, high_watermarks={TP: lso}).topic_partition:
        pass
    assert [(h.base_offset, d) for h, d in log.batches() if h.base_offset >= lso] == unstable
    values = [r.value for h, d in log.batches() if h.base_offset < lso
              and not h.attributes & CONTROL_MASK for r in decode_batch(d)]
    assert values == [b"old-19"]  # below it: aborted data gone, k compacted
    log.close()


@pytest.mark.parametrize(("seed", "map_bytes"), [(0, 2**20), (1, 2**20), (2, 2**20),
                                                (3, 3 * ENTRY_OVERHEAD_BYTES)])
def test_random_transactions_keep_the_read_committed_view_pass_after_pass(
        tmp_path: Path, seed: int, map_bytes: int) -> None:
    """(A small offset map: passes that stop at map_end, batches above it copied.)"""
    now = Now()
    log = Log.open(tmp_path / "t-0", CONFIG, clock_ms=now)
    w = TxnWriter(log, seed)
    rng = random.Random(seed)
    cleaner = LogCleaner(CleanerConfig(dedupe_buffer_bytes=map_bytes), clock_ms=now)
    for round_ in range(4):
        for _ in range(120):
            pid = rng.randrange(1, 5)
            roll = rng.random()
            key = b"k%d" % rng.randrange(6)
            if roll < 0.45:
                txn_data(w, pid, key, b"%d-%d" % (round_, rng.randrange(10**6)))
            elif roll < 0.6:
                plain(w, key, None if rng.random() < 0.2 else b"p%d" % rng.randrange(10**6))
            else:
                w.end(pid, ControlType.ABORT if rng.random() < 0.5 else ControlType.COMMIT)
        for pid in list(w.open):  # the cleaner's bound (the LSO) is past every one
            w.end(pid, ControlType.COMMIT)
        log.roll()
        view = read_committed(log)[1]
        cleaner.clean_until_idle({TP: log})
        now.ms += rng.choice([0, RETENTION_MS // 2, 2 * RETENTION_MS])
        cleaner.clean_until_idle({TP: log})
        after = read_committed(log)[1]
        # tombstones may expire: every other key keeps its latest committed value
        assert {k: v for k, v in after.items() if v is not None} == \
            {k: v for k, v in view.items() if v is not None}
        entries = log.collect_aborted_transactions(0, log.log_end_offset)
        marker_at = markers(log)
        assert all(marker_at.get(e.last_offset, (None,))[0] == e.producer_id
                   for e in entries)  # every entry still ends at its ABORT marker
        # an emptied transactional batch (a group's last) keeps no producer: it would
        # read as the start of a transaction once its marker is gone
        assert not [h for h, _ in log.batches() if h.is_transactional and not h.record_count]
        log.check_invariants()
    assert cleaner.stats.aborted_dropped > 0 and cleaner.stats.markers_dropped > 0
    log.close()


def test_a_cleaned_log_rebuilds_an_equivalent_txnindex_after_a_crash(tmp_path: Path) -> None:
    """Entries whose data the cleaner removed may be dropped by a rebuild from the log
    (it finds no data before their marker): the read_committed view stays the same."""
    now = Now()
    log = Log.open(tmp_path / "t-0", CONFIG, clock_ms=now)
    w = TxnWriter(log, 5)
    rng = random.Random(5)
    for _ in range(200):
        pid = rng.randrange(1, 4)
        if rng.random() < 0.6:
            txn_data(w, pid, b"k%d" % rng.randrange(4), b"%d" % rng.randrange(10**6))
        else:
            w.end(pid, ControlType.ABORT if rng.random() < 0.5 else ControlType.COMMIT)
    for pid in list(w.open):
        w.end(pid, ControlType.COMMIT)
    plain(w, b"last", b"x")
    log.roll()
    cleaner = LogCleaner(clock_ms=now)
    cleaner.clean_until_idle({TP: log})
    assert cleaner.stats.aborted_dropped > 0
    before, view = read_committed(log)
    log.close()
    for index in log.dir.glob("*.txnindex"):
        index.unlink()
    again = Log.open(log.dir, CONFIG, recovery_point=0, clock_ms=now)  # unclean: rescanned
    try:
        assert read_committed(again) == (before, view)
        again.check_invariants()
    finally:
        again.close()


def test_past_its_producer_bound_the_cleaner_forgets_producers_and_keeps_their_markers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("storage.cleaner.cleaner.MAX_PRODUCERS_REMEMBERED", 1)
    now = Now()
    log = Log.open(tmp_path / "t-0", CONFIG, clock_ms=now)
    w = TxnWriter(log)
    txn_data(w, 1, b"k", b"aborted")
    abort = w.end(1, ControlType.ABORT)
    txn_data(w, 2, b"j", b"aborted")
    w.end(2, ControlType.ABORT)
    for pid in (1, 2):
        txn_data(w, pid, b"p%d" % pid, b"later")
        w.end(pid, ControlType.COMMIT)
    log.roll()
    cleaner = LogCleaner(clock_ms=now)
    cleaner.clean_until_idle({TP: log})  # stamps (both producers' later batches: dirty)
    assert markers(log)[abort] == (1, True)
    now.ms += RETENTION_MS
    cleaner.clean_until_idle({TP: log})  # 2 producers > 1: none remembered, none dropped
    assert markers(log)[abort] == (1, True) and cleaner.stats.markers_dropped == 0
    log.close()


def test_a_damaged_txnindex_is_rebuilt_from_the_log_not_a_reason_to_stop_cleaning(
        tmp_path: Path) -> None:
    now = Now()
    log = Log.open(tmp_path / "t-0", CONFIG, clock_ms=now)
    w = TxnWriter(log, 3)
    w.run(200)
    for pid in list(w.open):
        w.end(pid, ControlType.COMMIT)
    log.roll()
    view = read_committed(log)[1]
    damaged = next(s for s in log.segments if s.txn_index.entries)
    damage_file(damaged.txn_index.path, "version")
    with pytest.raises(CorruptIndexError):  # found damaged (by the scrubber, say)
        damaged.txn_index.sanity_check()
    cleaner = LogCleaner(clock_ms=now)
    assert cleaner.clean_until_idle({TP: log}) >= 1
    assert cleaner.uncleanable() == {} and cleaner.stats.aborted_dropped > 0
    assert read_committed(log)[1] == view
    log.check_invariants()
    log.close()
