"""``cleanup_policy="compact,delete"``: time and size retention delete whole old segments
(never the active one) and the cleaner compacts what is left (latest per key, tombstones
kept until their horizon); ``compact`` alone is exempt from retention, ``delete`` alone is
never compacted.  Injected clock throughout."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clients.protocol.errors import InvalidConfigError
from storage.cleaner.cleaner import LogCleaner
from storage.config import LogConfig
from storage.log.log import Log
from storage.log_manager import LogManager
from tests.storage.cleaner.test_cleaner import (
    RETENTION_MS,
    TP,
    Clock,
    append,
    compact_config,
    fill,
    horizons_of,
    records_of,
)

BOTH = "compact,delete"
RETAIN_MS = 10_000


def both_config(**overrides: object) -> LogConfig:
    return compact_config(**{"cleanup_policy": BOTH, "retention_ms": RETAIN_MS, **overrides})


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_log(tmp_path: Path, clock: Clock) -> Iterator[Callable[[LogConfig], Log]]:
    """Opens logs on the test's clock; abandons them after the test."""
    opened: list[Log] = []

    def make(config: LogConfig) -> Log:
        opened.append(Log.open(tmp_path / f"t-{len(opened)}", config, clock_ms=clock))
        return opened[-1]

    yield make
    for log in opened:
        if not log.closed:
            log.abandon()


def test_the_policy_is_a_normalized_set() -> None:
    for value in ("compact,delete", "delete,compact", " delete , compact,delete"):
        cfg = LogConfig.from_dict({"cleanup.policy": value})
        assert (cfg.cleanup_policy, cfg.compact, cfg.delete) == (BOTH, True, True), value
    assert (LogConfig(cleanup_policy="compact").compact,
            LogConfig(cleanup_policy="compact").delete) == (True, False)
    assert (LogConfig().compact, LogConfig().delete) == (False, True)
    for bad in ("", ",", "compact,nope", "Compact"):
        with pytest.raises(InvalidConfigError, match="cleanup_policy"):
            LogConfig(cleanup_policy=bad)


def old_then_new(log: Log, clock: Clock) -> tuple[int, int]:
    """Old segments (keys a, b at t0), then, RETAIN_MS + 1 later, new ones: a, c, a
    tombstone for b, a newer a; then an active segment holding one record.  Returns
    (base offset of the first new segment, base offset of the active segment)."""
    for i in range(4):
        append(log, [(b"a", f"old-{i}".encode()), (b"b", f"old-{i}".encode())], clock.now)
        log.roll()
    clock.now += RETAIN_MS + 1
    first_new = append(log, [(b"a", b"new-1"), (b"c", b"new-1")], clock.now)
    append(log, [(b"b", None)], clock.now)
    log.roll()
    append(log, [(b"a", b"new-2")], clock.now)
    log.roll()
    active = append(log, [(b"a", b"active")], clock.now)
    return first_new, active


def test_retention_deletes_old_segments_and_the_cleaner_compacts_the_rest(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log(both_config())
    first_new, active = old_then_new(log, clock)
    assert log.delete_old_segments() == 4  # the four expired segments, nothing newer
    assert log.log_start_offset == first_new == log.segments[0].base_offset
    cleaner = LogCleaner(clock_ms=clock)
    assert cleaner.clean_until_idle({TP: log}) == 1
    assert [(k, v) for _, k, v, _ in records_of(log)] == [
        (b"c", b"new-1"), (b"b", None), (b"a", b"new-2"), (b"a", b"active")]
    tombstone = next(o for o, k, _, _ in records_of(log) if k == b"b")
    assert horizons_of(log)[tombstone] == clock.now + RETENTION_MS
    clock.now += RETENTION_MS  # the tombstone's horizon passes: the next pass drops it
    append(log, [(b"c", b"new-2")], clock.now)  # fresh dirt, and the active one rolled
    log.roll()
    assert cleaner.clean_until_idle({TP: log}) == 1
    assert [(k, v) for _, k, v, _ in records_of(log)] == [(b"a", b"active"), (b"c", b"new-2")]
    assert cleaner.stats.tombstones_dropped == 1
    log.check_invariants()
    assert active < log.active.base_offset


def test_the_active_segment_is_never_deleted_however_old(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log(both_config(retention_bytes=0))
    _, active = old_then_new(log, clock)
    clock.now += 10 * RETAIN_MS  # everything expired, and over retention.bytes
    inactive = len(log.segments) - 1
    assert log.delete_old_segments() == inactive == 6
    assert [s.base_offset for s in log.segments] == [active]
    assert log.log_start_offset == active
    assert [(k, v) for _, k, v, _ in records_of(log)] == [(b"a", b"active")]
    assert log.delete_old_segments() == 0


def test_retention_bytes_applies_to_a_compacted_and_deleted_log(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log(both_config(retention_ms=-1, retention_bytes=2048))
    fill(log, clock, 80, keys=1000)  # distinct keys: compaction would keep every one
    log.roll()
    assert log.size_in_bytes > 4096
    deleted = log.delete_old_segments()
    assert deleted > 0 and log.size_in_bytes - log.segments[0].size < 2048 <= log.size_in_bytes


@pytest.mark.parametrize(("policy", "retained", "compacted"), [
    ("compact", False, True), ("delete", True, False), (BOTH, True, True)])
def test_each_policy_applies_only_its_half(make_log: Callable[..., Log], clock: Clock,
                                           policy: str, retained: bool,
                                           compacted: bool) -> None:
    log = make_log(both_config(cleanup_policy=policy))
    old_then_new(log, clock)
    segments, appended = len(log.segments), records_of(log)
    assert (log.delete_old_segments() > 0) == retained
    assert len(log.segments) == (segments - 4 if retained else segments)
    LogCleaner(clock_ms=clock).clean_until_idle({TP: log})
    kept = records_of(log)
    assert (kept != appended[8 if retained else 0:]) == compacted
    assert (b"a", b"old-0") not in {(k, v) for _, k, v, _ in kept}  # by either half


def test_a_pass_whose_segments_retention_deletes_is_aborted_and_redone(
        make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log(both_config())
    old_then_new(log, clock)
    clock.now -= RETAIN_MS  # the old segments are not expired yet
    cleaner = LogCleaner(clock_ms=clock)
    assert cleaner.clean_step({TP: log}, max_bytes=1).topic_partition == TP  # pass begun
    clock.now += RETAIN_MS
    assert log.delete_old_segments() == 4  # under the pass
    assert not cleaner.clean_step({TP: log}).pass_done
    assert cleaner.stats.passes_aborted == 1
    assert cleaner.clean_until_idle({TP: log}) == 1
    assert [(k, v) for _, k, v, _ in records_of(log)] == [
        (b"c", b"new-1"), (b"b", None), (b"a", b"new-2"), (b"a", b"active")]
    log.check_invariants()


def test_log_manager_applies_retention_and_compaction_to_one_log(
        tmp_path: Path, clock: Clock) -> None:
    configs = {"both": both_config()}
    manager = LogManager(tmp_path, config_for=configs.__getitem__, clock_ms=clock)
    manager.startup()
    try:
        log = manager.create_log("both", 0)
        first_new, _ = old_then_new(log, clock)
        assert manager.run_retention() == 4
        assert manager.clean_until_idle() == 1
        assert manager.cleaner.first_dirty_offset(("both", 0)) == log.active.base_offset
        assert log.log_start_offset == first_new
    finally:
        manager.shutdown()
