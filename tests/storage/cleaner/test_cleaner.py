"""Log compaction: LogCleaner against a model, crash at every swap step, reads across
holes, bounded steps, tombstone lifetime on an injected clock, LogManager hook."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from clients.protocol.errors import InvalidConfigError, InvalidRecordError
from clients.records.batch import iter_batches
from clients.records.compression import compress_batch
from clients.records.record import build_batch, decode_batch
from storage.cleaner.batch_filter import DELETE_HORIZON_MASK
from storage.cleaner.cleaner import LogCleaner
from storage.cleaner.config import CleanerConfig
from storage.cleaner.offset_map import ENTRY_OVERHEAD_BYTES, OffsetMap
from storage.config import LogConfig
from storage.log.log import Log
from storage.log_manager import LogManager

TP = ("t", 0)
RETENTION_MS = 1000
EPOCH = 7
Rec = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def compact_config(**overrides: object) -> LogConfig:
    settings_: dict[str, object] = dict(
        segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=4096,
        cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=RETENTION_MS)
    settings_.update(overrides)
    return LogConfig(**settings_)  # type: ignore[arg-type]


def append(log: Log, items: list[tuple[bytes | None, bytes | None]], ts: int,
           **batch_fields: int) -> int:
    """Append one batch; returns its base offset."""
    data = build_batch([(k, v, ts, ()) for k, v in items], **batch_fields)
    return log.append_as_leader(data, EPOCH).first_offset


def records_of(log: Log) -> list[Rec]:
    """Every record, each batch CRC-validated on the way."""
    out: list[Rec] = []
    for _header, data in log.batches():
        out.extend((r.offset, r.key, r.value, r.timestamp) for r in decode_batch(data))
    return out


def horizons_of(log: Log) -> dict[int, int]:
    """offset -> delete horizon of every record whose batch carries one."""
    out: dict[int, int] = {}
    for header, data in log.batches():
        if header.attributes & DELETE_HORIZON_MASK:
            for r in decode_batch(data):
                out[r.offset] = header.base_timestamp
    return out


def expected_after_full_clean(appended: list[Rec], active_base: int,
                              expired: Callable[[int], bool]) -> list[Rec]:
    latest: dict[bytes, Rec] = {}
    for rec in appended:
        if rec[0] < active_base and rec[1] is not None:
            latest[rec[1]] = rec
    below = [r for r in latest.values() if not (r[2] is None and expired(r[0]))]
    return sorted(below) + [r for r in appended if r[0] >= active_base]


def fill(log: Log, clock: Clock, n_batches: int, keys: int, *, tombstone_every: int = 0,
         per_batch: int = 3) -> list[Rec]:
    appended: list[Rec] = []
    i = 0
    for _ in range(n_batches):
        items: list[tuple[bytes | None, bytes | None]] = []
        for _ in range(per_batch):
            key = f"key-{i % keys}".encode()
            tomb = tombstone_every and i % tombstone_every == tombstone_every - 1
            items.append((key, None if tomb else f"value-{i}".encode()))
            i += 1
        base = append(log, items, clock.now)
        appended.extend((base + j, k, v, clock.now) for j, (k, v) in enumerate(items))
        clock.now += 1
    return appended


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_log(tmp_path: Path, clock: Clock) -> Iterator[Callable[..., Log]]:
    opened: list[Log] = []

    def make(config: LogConfig | None = None, name: str = "t-0") -> Log:
        log = Log.open(tmp_path / name, config or compact_config(), clock_ms=clock)
        opened.append(log)
        return log

    yield make
    for log in opened:
        if not log.closed:
            log.abandon()


# -- configs and the offset map ------------------------------------------------------------


def test_compaction_configs_are_validated_with_precise_errors() -> None:
    cfg = LogConfig.from_dict({"cleanup.policy": "compact", "delete.retention.ms": "5",
                               "min.cleanable.dirty.ratio": "0.25",
                               "min.compaction.lag.ms": "7"})
    assert (cfg.compact, cfg.delete_retention_ms, cfg.min_cleanable_dirty_ratio,
            cfg.min_compaction_lag_ms) == (True, 5, 0.25, 7)
    assert LogConfig().delete_retention_ms == 24 * 3600 * 1000
    with pytest.raises(InvalidConfigError, match="delete_retention_ms must be >= 0"):
        LogConfig(delete_retention_ms=-1)
    with pytest.raises(InvalidConfigError, match=r"min\.cleanable\.dirty\.ratio"):
        LogConfig.from_dict({"min.cleanable.dirty.ratio": "1.5"})
    with pytest.raises(InvalidConfigError, match="min_cleanable_dirty_ratio"):
        LogConfig.from_dict({"min_cleanable_dirty_ratio": "nan"})
    with pytest.raises(InvalidConfigError, match="min_compaction_lag_ms"):
        LogConfig(min_compaction_lag_ms=-5)
    with pytest.raises(InvalidConfigError, match="dedupe_buffer_bytes"):
        CleanerConfig(dedupe_buffer_bytes=10)
    with pytest.raises(InvalidConfigError, match="step_bytes"):
        CleanerConfig(step_bytes=0)


def test_offset_map_refuses_a_batch_past_its_budget_all_or_nothing() -> None:
    m = OffsetMap(capacity_bytes=4 * (ENTRY_OVERHEAD_BYTES + 2))
    assert m.try_put_batch([b"k1", b"k2", b"k1"], [0, 1, 2])
    assert (m.get(b"k1"), m.get(b"k2"), len(m)) == (2, 1, 2)
    assert m.try_put_batch([b"k1"], [3])  # a known key costs nothing more
    assert not m.try_put_batch([b"k3", b"k4", b"k5"], [4, 5, 6])
    assert (m.get(b"k3"), len(m), m.get(b"k1")) == (None, 2, 3)
    with pytest.raises(ValueError, match="capacity_bytes"):
        OffsetMap(10)


# -- what a clean does ---------------------------------------------------------------------


def test_keeps_latest_per_key_offsets_epochs_and_crcs(make_log: Callable[..., Log],
                                                      clock: Clock) -> None:
    log = make_log()
    appended = fill(log, clock, 120, keys=10)
    log.roll()
    tail = fill(log, clock, 2, keys=10)  # the active segment: never touched
    before_active = log.active.base_offset
    cleaner = LogCleaner(clock_ms=clock)
    assert cleaner.clean_until_idle({TP: log}) >= 1
    log.check_invariants()
    assert log.active.base_offset == before_active
    assert records_of(log) == expected_after_full_clean(appended + tail, before_active,
                                                        lambda _o: False)
    for header, data in log.batches():
        assert header.partition_leader_epoch == EPOCH
        list(iter_batches(data, validate=True))  # CRCs valid
    assert log.size_in_bytes < 0.2 * (120 * 3 * 40)
    assert log.log_end_offset == appended[-1][0] + 1 + len(tail)


def test_tombstones_live_delete_retention_ms_after_their_first_clean(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log()
    append(log, [(b"a", b"1"), (b"b", b"1")], clock.now)
    append(log, [(b"a", None)], clock.now)  # tombstone for a
    log.roll()
    append(log, [(b"c", b"1")], clock.now)
    cleaner = LogCleaner(clock_ms=clock)
    clock.now += 5000  # age before the first clean does not count
    cleaner.clean_until_idle({TP: log})
    assert [(o, k, v) for o, k, v, _ in records_of(log)] == [
        (1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    assert horizons_of(log)[2] == clock.now + RETENTION_MS
    clock.now += RETENTION_MS - 1
    cleaner.clean_until_idle({TP: log})
    assert 2 in {r[0] for r in records_of(log)}
    clock.now += 1  # the horizon is reached: the next clean drops the tombstone
    assert cleaner.clean_until_idle({TP: log}) == 1
    assert [r[0] for r in records_of(log)] == [1, 3]
    assert cleaner.stats.tombstones_dropped == 1
    log.check_invariants()


def test_keyless_records_are_dropped_below_the_active_segment(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log()
    append(log, [(None, b"x"), (b"k", b"1"), (None, b"y")], clock.now)
    log.roll()
    append(log, [(None, b"z")], clock.now)
    cleaner = LogCleaner(clock_ms=clock)
    cleaner.clean_until_idle({TP: log})
    assert [(r[0], r[1]) for r in records_of(log)] == [(1, b"k"), (3, None)]
    assert cleaner.stats.keyless_dropped == 2


def test_an_emptied_producer_batch_keeps_its_header_only_if_it_is_the_last(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log()
    pid = 42
    b0 = append(log, [(b"k", b"1")], clock.now, producer_id=pid, producer_epoch=0,
                base_sequence=0)
    b1 = append(log, [(b"k", b"2"), (b"j", b"1")], clock.now, producer_id=pid,
                producer_epoch=0, base_sequence=1)
    append(log, [(b"k", b"3"), (b"j", b"2")], clock.now)  # supersedes both, not idempotent
    append(log, [(b"z", b"1")], clock.now)
    log.roll()
    append(log, [(b"z", b"2")], clock.now)
    LogCleaner(clock_ms=clock).clean_until_idle({TP: log})
    headers = {h.base_offset: h for h, _ in log.batches()}
    assert b0 not in headers  # not the producer's last batch: gone
    empty = headers[b1]
    assert (empty.record_count, empty.last_offset_delta, empty.base_sequence,
            empty.producer_id, empty.last_sequence) == (0, 1, 1, pid, 2)
    log.check_invariants()


def test_the_last_batch_of_a_cleaned_segment_is_kept_as_an_empty_header(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log()
    append(log, [(b"a", b"1" * 400)], clock.now)
    append(log, [(b"b", b"1" * 400)], clock.now)
    log.roll()
    append(log, [(b"a", b"2" * 100), (b"b", b"2" * 100)], clock.now)
    log.roll()  # the two segments are too big to share a group
    append(log, [(b"x", b"1")], clock.now)
    # the whole first segment is superseded: it survives as one empty header, so the
    # cleaned segment still ends where it ended (next offset 2)
    LogCleaner(clock_ms=clock).clean_until_idle({TP: log})
    assert [(h.base_offset, h.record_count) for h, _ in log.batches()] == [
        (1, 0), (2, 2), (4, 1)]
    log.check_invariants()


def test_reads_across_holes_return_the_next_surviving_batch(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log()
    fill(log, clock, 150, keys=7, tombstone_every=5)
    log.roll()
    fill(log, clock, 3, keys=7)
    LogCleaner(clock_ms=clock).clean_until_idle({TP: log})
    bases = [(h.base_offset, h.last_offset) for h, _ in log.batches()]
    assert len(bases) < 150  # there are holes
    for offset in range(log.log_start_offset, log.log_end_offset):
        data = log.read(offset, 10_000).read_bytes()
        first = next(iter_batches(data))[1]
        assert (first.base_offset, first.last_offset) == next(
            b for b in bases if b[1] >= offset)
        bounded = log.read(offset, 1).read_bytes()  # min one batch
        assert next(iter_batches(bounded))[1].base_offset == first.base_offset


def test_reopen_after_cleaning_needs_no_rescan(tmp_path: Path, clock: Clock) -> None:
    log = Log.open(tmp_path / "t-0", compact_config(), clock_ms=clock)
    fill(log, clock, 100, keys=9)
    log.roll()
    LogCleaner(clock_ms=clock).clean_until_idle({TP: log})
    want = records_of(log)
    log.close()
    again = Log.open(tmp_path / "t-0", compact_config(), clock_ms=clock,
                     had_clean_shutdown=True)
    try:
        report = again.recovery_report
        assert (report.segments_rescanned, report.indexes_rebuilt, report.problems) == (0, 0, [])
        assert records_of(again) == want
        again.check_invariants()
    finally:
        again.close()


def test_an_unclean_reopen_after_cleaning_keeps_every_record(
        make_log: Callable[..., Log], tmp_path: Path, clock: Clock) -> None:
    """A restart after a crash rescans every segment above the recovery point and cuts
    a segment whose batches end before the next one starts (a lost unflushed tail,
    storage/log/recovery.py).  Cleaned segments keep their last batch (as an empty
    header if need be), so they always end where the next segment starts."""
    log = make_log()
    fill(log, clock, 60, keys=5)
    log.roll()
    fill(log, clock, 4, keys=5)  # newer values for every key: each group's last batch goes
    size = log.size_in_bytes
    LogCleaner(clock_ms=clock).clean_until_idle({TP: log})
    assert log.size_in_bytes < size / 3
    kept = records_of(log)
    log.close()
    reopened = Log.open(tmp_path / "t-0", compact_config(), recovery_point=0,
                        had_clean_shutdown=False, clock_ms=clock)
    try:
        assert reopened.recovery_report.truncated_bytes == 0, reopened.recovery_report.problems
        assert records_of(reopened) == kept
    finally:
        reopened.close()


def test_each_step_reads_at_most_its_budget_plus_one_batch(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log(compact_config(segment_bytes=4096))
    fill(log, clock, 200, keys=13)
    log.roll()
    largest = max(h.size_in_bytes for h, _ in log.batches())
    cleaner = LogCleaner(CleanerConfig(step_bytes=300), clock_ms=clock)
    steps = 0
    while True:
        result = cleaner.clean_step({TP: log})
        if result.topic_partition is None:
            break
        assert result.bytes_read < 300 + largest
        steps += 1
    assert steps > 20
    log.check_invariants()


def test_small_segments_are_grouped_into_one(make_log: Callable[..., Log],
                                             clock: Clock) -> None:
    log = make_log(compact_config(segment_bytes=2048))
    for _ in range(6):
        fill(log, clock, 4, keys=3)
        log.roll()
    fill(log, clock, 1, keys=3)
    assert len(log.segments) == 7
    sizes = [s.size for s in log.segments[:-1]]
    assert sum(sizes[:4]) <= 2048 < sum(sizes[:5])  # inputs of a group fit segment_bytes
    cleaner = LogCleaner(clock_ms=clock)
    cleaner.clean_until_idle({TP: log})
    assert len(log.segments) == 3  # two groups + the active segment
    log.roll()
    fill(log, clock, 1, keys=3)
    cleaner.clean_until_idle({TP: log})  # now the small cleaned segments share a group
    assert len(log.segments) == 2
    log.check_invariants()


def test_dirty_ratio_and_compaction_lag_gate_cleaning(make_log: Callable[..., Log],
                                                      clock: Clock) -> None:
    log = make_log(compact_config(min_cleanable_dirty_ratio=0.9, min_compaction_lag_ms=500))
    fill(log, clock, 60, keys=5)
    log.roll()
    cleaner = LogCleaner(clock_ms=clock)
    assert cleaner.clean_step({TP: log}).topic_partition is None  # every segment too young
    clock.now += 1000
    assert cleaner.clean_until_idle({TP: log}) == 1
    fill(log, clock, 5, keys=5)
    log.roll()
    clock.now += 1000
    first_dirty, end, dirty, cleanable = cleaner.cleanable_range(TP, log)
    assert 0 < dirty / cleanable < 0.9 and first_dirty < end
    assert cleaner.clean_step({TP: log}).topic_partition is None  # not dirty enough


def test_a_small_offset_map_cleans_in_several_passes(make_log: Callable[..., Log],
                                                     clock: Clock) -> None:
    log = make_log()
    appended = fill(log, clock, 100, keys=40)
    log.roll()
    cleaner = LogCleaner(CleanerConfig(dedupe_buffer_bytes=10 * (ENTRY_OVERHEAD_BYTES + 6)),
                         clock_ms=clock)
    assert cleaner.clean_until_idle({TP: log}) > 3
    assert records_of(log) == expected_after_full_clean(appended, log.active.base_offset,
                                                        lambda _o: False)


def test_a_corrupt_batch_makes_the_log_uncleanable_untouched(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log()
    fill(log, clock, 30, keys=4)
    log.roll()
    seg = log.segments[0]
    with open(seg.log_path, "r+b") as f:  # flip a byte inside the first batch's records
        f.seek(70)
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 0xFF]))
    size_before = log.size_in_bytes
    cleaner = LogCleaner(clock_ms=clock)
    cleaner.clean_until_idle({TP: log})
    assert "CRC-32C mismatch" in cleaner.uncleanable()[TP]
    assert log.size_in_bytes == size_before
    assert not list(log.dir.glob("*.cleaned"))


def test_a_pass_is_aborted_when_its_log_is_truncated_or_reopened(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log()
    fill(log, clock, 60, keys=6)
    log.roll()
    fill(log, clock, 1, keys=6)
    cleaner = LogCleaner(CleanerConfig(step_bytes=200), clock_ms=clock)
    while not list(log.dir.glob("*.log.cleaned")):
        assert cleaner.clean_step({TP: log}).topic_partition == TP
    log.truncate_to(3)  # below the segment being cleaned
    cleaner.clean_step({TP: log})
    assert cleaner.stats.passes_aborted == 1
    assert not list(log.dir.glob("*.cleaned"))
    log.check_invariants()
    assert [r[0] for r in records_of(log)] == [0, 1, 2]


# -- crash safety of the swap --------------------------------------------------------------


class _Crash(Exception):
    pass


def _swap_scenario(directory: Path, clock: Clock) -> Log:
    log = Log.open(directory, compact_config(segment_bytes=4096), clock_ms=clock)
    for _ in range(3):  # three small segments: one group, one swap
        fill(log, clock, 6, keys=4, tombstone_every=7)
        log.roll()
    fill(log, clock, 1, keys=4)
    log.flush()
    return log


def test_a_crash_at_every_swap_step_is_completed_or_rolled_back(tmp_path: Path) -> None:
    clock = Clock()
    log = _swap_scenario(tmp_path / "ref" / "t-0", clock)
    before = records_of(log)
    steps: list[str] = []
    cleaner = LogCleaner(clock_ms=clock)
    cleaner.swap_hook = steps.append
    cleaner.clean_until_idle({TP: log})
    after = records_of(log)
    log.close()
    assert after != before and len(steps) == 4 + 9 + 3 + 9  # S0, S1 x3, S2 x9, S3 x3, S4 x9
    for k, label in enumerate(steps):
        clock = Clock()
        directory = tmp_path / f"crash-{k}" / "t-0"
        log = _swap_scenario(directory, clock)
        assert records_of(log) == before
        calls = iter(range(len(steps)))

        def hook(step: str, k: int = k, calls: object = calls) -> None:
            if next(calls) == k:  # type: ignore[call-overload]
                raise _Crash(step)

        cleaner = LogCleaner(clock_ms=clock)
        cleaner.swap_hook = hook
        with pytest.raises(_Crash):
            cleaner.clean_until_idle({TP: log})
        log.abandon()
        reopened = Log.open(directory, compact_config(segment_bytes=4096), clock_ms=clock,
                            recovery_point=log.recovery_point)
        try:
            committed = not (label.startswith("S0") or label.startswith("S1 .index")
                             or label.startswith("S1 .timeindex"))
            assert records_of(reopened) == (after if committed else before), label
            reopened.check_invariants()
            leftovers = [p.name for p in directory.iterdir()
                         if p.name.endswith((".cleaned", ".swap", ".deleted"))]
            assert leftovers == [], label
            LogCleaner(clock_ms=clock).clean_until_idle({TP: reopened})
            assert records_of(reopened) == after, label
        finally:
            reopened.close()
        shutil.rmtree(directory.parent)


# -- LogManager hook -----------------------------------------------------------------------


def test_log_manager_cleans_compacted_logs_only_and_checkpoints_first_dirty(
        tmp_path: Path, clock: Clock) -> None:
    configs = {"c": compact_config(retention_ms=1, retention_bytes=100),
               "d": compact_config(cleanup_policy="delete", retention_ms=-1)}
    manager = LogManager(tmp_path, config_for=configs.__getitem__, clock_ms=clock)
    manager.startup()
    try:
        compacted = manager.create_log("c", 0)
        deleting = manager.create_log("d", 0)
        for log in (compacted, deleting):
            fill(log, clock, 60, keys=5)
            log.roll()
        d_size = deleting.size_in_bytes
        c_segments = len(compacted.segments)
        clock.now += 10_000
        assert manager.run_retention() == 0  # compact: exempt from time and size retention
        assert len(compacted.segments) == c_segments
        assert manager.clean_until_idle() == 1
        assert deleting.size_in_bytes == d_size
        assert compacted.size_in_bytes < d_size / 3
        first_dirty = manager.cleaner.first_dirty_offset(("c", 0))
        assert first_dirty == compacted.active.base_offset
    finally:
        manager.shutdown()
    again = LogManager(tmp_path, config_for=configs.__getitem__, clock_ms=clock)
    again.startup()
    try:
        assert again.cleaner.first_dirty_offset(("c", 0)) == first_dirty
        assert again.run_cleaner_step().topic_partition is None  # nothing dirty
        assert again.delete_log("c", 0)
        assert again.cleaner.first_dirty_offset(("c", 0)) is None
    finally:
        again.shutdown()


def test_broker_core_compacts_a_compacted_topic_on_its_scheduled_step(
        tmp_path: Path, clock: Clock) -> None:
    from broker.config import BrokerConfig
    from broker.core import BrokerCore
    from timer.clock import ManualClock
    from timer.system_timer import SystemTimer

    manual = ManualClock()
    core = BrokerCore(BrokerConfig(node_id=0, data_dir=str(tmp_path / "b0"),
                                   log_cleaner_step_bytes=4096), manual, SystemTimer(manual))
    core.startup()
    try:
        core.create_topic(core.validate_new_topic(
            "offsets", 1, 1, {"cleanup.policy": "compact", "segment.bytes": "1024",
                              "min.cleanable.dirty.ratio": "0.1"}))
        core.log_manager.cleaner.set_clock(clock)
        log = core.log_manager.get_log("offsets", 0)
        assert log is not None and log.config.compact
        appended = fill(log, clock, 80, keys=4)
        log.roll()
        core.run_log_cleaner()  # one bounded step (the server's periodic job)
        assert core.log_manager.cleaner.stats.bytes_read <= 4096 + 1024
        core.log_manager.clean_until_idle()  # the deterministic hook
        assert records_of(log) == expected_after_full_clean(
            appended, log.active.base_offset, lambda _o: False)
    finally:
        core.shutdown()


# -- the model ----------------------------------------------------------------------------

KEYS = [f"k{i}".encode() for i in range(10)]
record_st = st.tuples(st.integers(0, len(KEYS)), st.integers(0, 3))  # len(KEYS): no key; 0: null


class CleanerMachine(RuleBasedStateMachine):
    """Appends, rolls, clock moves, bounded steps, full cleans, clean and crash reopens.

    After every step: the log's invariants hold, every surviving record is the appended
    one (offset, key, value, timestamp), the active segment is intact, and each key's
    latest record is present (a tombstone only until its horizon).  After a full clean
    the log is exactly "latest per key below the active segment (expired tombstones and
    keyless records gone) + the active segment".
    """

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="cleansm-"))
        self.clock = Clock()
        self.config = compact_config(segment_bytes=1024)
        self.log = Log.open(self.tmp / "t-0", self.config, clock_ms=self.clock)
        self.cleaner = LogCleaner(CleanerConfig(dedupe_buffer_bytes=6 * ENTRY_OVERHEAD_BYTES + 12),
                                  clock_ms=self.clock)
        self.appended: list[Rec] = []
        self.horizon: dict[int, int] = {}

    def teardown(self) -> None:
        if not self.log.closed:
            self.log.abandon()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(batches=st.lists(st.lists(record_st, min_size=1, max_size=4), min_size=1,
                           max_size=6), then_roll=st.booleans())
    def append(self, batches: list[list[tuple[int, int]]], then_roll: bool) -> None:
        for records in batches:
            items = [(KEYS[k] if k < len(KEYS) else None, None if v == 0 else b"v%d" % v)
                     for k, v in records]
            base = append(self.log, items, self.clock.now)
            self.appended.extend((base + i, k, v, self.clock.now)
                                 for i, (k, v) in enumerate(items))
        if then_roll:
            self.log.roll()

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(ms=st.integers(0, 2 * RETENTION_MS))
    def advance(self, ms: int) -> None:
        self.clock.now += ms

    @rule(budget=st.integers(1, 3000))
    def step(self, budget: int) -> None:
        self.cleaner.clean_step({TP: self.log}, budget)
        self.observe()

    @rule()
    def clean_fully(self) -> None:
        for _ in range(10_000):
            result = self.cleaner.clean_step({TP: self.log})
            self.observe()
            if result.topic_partition is None:
                break
        now = self.clock.now
        want = expected_after_full_clean(
            self.appended, self.log.active.base_offset,
            lambda o: o in self.horizon and self.horizon[o] <= now)
        assert records_of(self.log) == want
        active_base = self.log.active.base_offset
        for offset, _k, value, _ts in want:
            if value is None and offset < active_base:
                assert self.horizon[offset] > now  # stamped, not yet expired
        stats = self.cleaner.stats
        event(f"tombstones dropped: {stats.tombstones_dropped > 0}")
        event(f"keyless dropped: {stats.keyless_dropped > 0}")
        event(f"passes aborted: {stats.passes_aborted > 0}")
        event(f"several passes: {stats.passes_completed > 1}")

    @precondition(lambda self: self.appended)
    @rule(crash=st.booleans())
    def reopen(self, crash: bool) -> None:
        point = self.log.recovery_point
        if crash:
            self.log.abandon()
        else:
            self.log.close()
        self.log = Log.open(self.tmp / "t-0", self.config, clock_ms=self.clock,
                            recovery_point=point, had_clean_shutdown=not crash)
        assert not [p for p in self.log.dir.iterdir() if p.name.endswith(".cleaned")]

    def observe(self) -> None:
        for offset, h in horizons_of(self.log).items():
            ts = next(r[3] for r in self.appended if r[0] == offset)
            assert ts + RETENTION_MS <= h <= self.clock.now + RETENTION_MS
            assert self.horizon.setdefault(offset, h) == h  # a horizon never moves

    @invariant()
    def consistent(self) -> None:
        self.log.check_invariants()
        got = records_of(self.log)
        by_offset = {r[0]: r for r in self.appended}
        assert all(by_offset[r[0]] == r for r in got)
        offsets = {r[0] for r in got}
        active_base = self.log.active.base_offset
        assert all(r[0] in offsets for r in self.appended if r[0] >= active_base)
        latest: dict[bytes, Rec] = {}
        for r in self.appended:
            if r[1] is not None:
                latest[r[1]] = r
        for offset, _k, value, _ts in latest.values():
            if offset not in offsets:
                assert value is None and self.horizon.get(offset, 1 << 62) <= self.clock.now


TestCleanerMachine = CleanerMachine.TestCase
TestCleanerMachine.settings = settings(
    max_examples=30, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def test_no_stray_files_in_a_fresh_directory(tmp_path: Path) -> None:
    os.makedirs(tmp_path / "t-0")
    (tmp_path / "t-0" / "00000000000000000000.index.swap").write_bytes(b"")
    log = Log.open(tmp_path / "t-0", compact_config())
    try:
        assert any("uncommitted cleaner swap" in p for p in log.recovery_report.problems)
        assert not (tmp_path / "t-0" / "00000000000000000000.index.swap").exists()
    finally:
        log.close()


# -- compressed batches --------------------------------------------------------------------


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_cleaned_and_stay_compressed(
        make_log: Callable[..., Log], clock: Clock, codec: int) -> None:
    log = make_log(compact_config(segment_bytes=4096))
    appended: list[Rec] = []
    for i in range(60):  # 5 records per batch over 7 keys, every 4th a tombstone
        items: list[tuple[bytes | None, bytes | None]] = [
            (f"key-{(5 * i + j) % 7}".encode(),
             None if (5 * i + j) % 4 == 3 else f"value-{5 * i + j}".encode() * 3)
            for j in range(5)]
        data = compress_batch(build_batch([(k, v, clock.now, ()) for k, v in items]), codec)
        base = log.append_as_leader(data, EPOCH).first_offset
        appended.extend((base + j, k, v, clock.now) for j, (k, v) in enumerate(items))
        clock.now += 1
    log.roll()
    active = log.active.base_offset
    assert LogCleaner(clock_ms=clock).clean_until_idle({TP: log}) >= 1
    log.check_invariants()
    assert records_of(log) == expected_after_full_clean(appended, active, lambda _o: False)
    codecs = {header.attributes & 7 for header, _ in log.batches() if header.record_count}
    assert codecs == {codec}  # rewritten batches are compressed again with their codec
    assert any(header.attributes & DELETE_HORIZON_MASK for header, _ in log.batches())


@pytest.mark.parametrize("codec", [0, 1, 4], ids=["none", "gzip", "zstd"])
def test_a_keyless_record_in_a_compressed_batch_is_refused_on_a_compacted_log(
        make_log: Callable[..., Log], codec: int) -> None:
    log = make_log()
    batch = build_batch([(b"k", b"v", 1, ()), (None, b"keyless", 1, ())])
    data = compress_batch(batch, codec) if codec else batch
    with pytest.raises(InvalidRecordError, match="without a key"):
        log.require_keys(data)
    keyed = build_batch([(b"k", b"v", 1, ()), (b"k2", b"v2", 1, ())])
    log.require_keys(compress_batch(keyed, codec) if codec else keyed)  # accepted


def test_nothing_at_or_above_the_high_watermark_is_compacted(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log()
    appended = fill(log, clock, 120, keys=10)
    log.roll()
    bases = [s.base_offset for s in log.segments]
    high_watermark = bases[len(bases) // 2] + 1  # followers lag: HW inside a middle segment
    end = max(b for b in bases if b <= high_watermark)  # segments wholly below the HW
    cleaner = LogCleaner(clock_ms=clock)
    for _ in range(10_000):
        if cleaner.clean_step({TP: log}, high_watermarks={TP: high_watermark}
                              ).topic_partition is None:
            break
    else:
        raise AssertionError("the cleaner never went idle")
    log.check_invariants()
    kept = records_of(log)
    assert [r for r in kept if r[0] >= end] == [r for r in appended if r[0] >= end]
    assert len([r for r in kept if r[0] < end]) < len([r for r in appended if r[0] < end])
    assert cleaner.clean_step({TP: log}, high_watermarks={}).topic_partition is None  # no HW
