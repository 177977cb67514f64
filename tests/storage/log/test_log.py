"""Log: appends (leader/follower, all-or-nothing), reads, timestamps, rolls, truncation,
retention, flush policy, clean reopen, index rebuilds and torn-tail recovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clients.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidConfigError,
    InvalidRecordError,
    MessageTooLargeError,
    MiniKafkaError,
    OffsetOutOfRangeError,
)
from clients.records.batch import TIMESTAMP_TYPE_MASK, iter_batches
from clients.records.record import build_batch, decode_batch
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from storage.config import LogConfig
from storage.errors import StorageError
from storage.log import segment_list
from storage.log.log import Log
from storage.log.recovery import RECOVERY_CUT_MARKER
from storage.segment import segment_file

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=4096)


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(n: int = 3, ts: int = 1000, value: bytes = b"value", base_offset: int = 0,
          epoch: int = -1) -> bytes:
    return build_batch([(None, value + bytes([i]), ts + i, ()) for i in range(n)],
                       base_offset=base_offset, partition_leader_epoch=epoch)


def offsets_of(data: bytes) -> list[int]:
    return [r.offset for _, h in iter_batches(data) for r in decode_batch(data, _)]


def open_log(tmp_path: Path, config: LogConfig = SMALL, **kw: object) -> Log:
    return Log.open(tmp_path / "topic-3", config, **kw)  # type: ignore[arg-type]


# -- config -------------------------------------------------------------------------


def test_config_from_dict_and_errors_name_the_key() -> None:
    cfg = LogConfig.from_dict({"segment.bytes": "2048", "flush.messages": "none",
                               "retention_ms": 5})
    assert (cfg.segment_bytes, cfg.flush_messages, cfg.retention_ms) == (2048, None, 5)
    assert LogConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(InvalidConfigError, match="segment_bytes"):
        LogConfig(segment_bytes=100)
    with pytest.raises(InvalidConfigError, match=r"index\.interval\.bytes"):
        LogConfig.from_dict({"index.interval.bytes": "abc"})
    with pytest.raises(InvalidConfigError, match="index_interval_bytes"):
        LogConfig(index_interval_bytes=0)
    with pytest.raises(InvalidConfigError, match="bogus"):
        LogConfig.from_dict({"bogus": 1})
    with pytest.raises(InvalidConfigError, match="cleanup_policy"):
        LogConfig(cleanup_policy="shred")


# -- append ---------------------------------------------------------------------------


def test_leader_append_assigns_offsets_and_stamps_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.topic_partition == ("topic", 3)
    info = log.append_as_leader(batch(3, base_offset=777) + batch(2), leader_epoch=7)
    assert (info.first_offset, info.last_offset, info.num_batches, info.num_records) == (0, 4, 2, 5)
    assert info.epoch_changes == ((7, 0),)
    assert log.log_end_offset == 5
    data = log.read(0, 10_000).read_bytes()
    headers = [h for _, h in iter_batches(data)]  # validates CRCs too
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 7), (3, 7)]
    assert offsets_of(data) == [0, 1, 2, 3, 4]
    log.check_invariants()
    log.close()


def test_follower_append_keeps_offsets_and_reports_epoch_changes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    req = batch(2, base_offset=0, epoch=1) + batch(2, base_offset=2, epoch=1) + batch(
        1, base_offset=10, epoch=3)
    info = log.append_as_follower(req)
    assert info.epoch_changes == ((1, 0), (3, 10))
    assert log.log_end_offset == 11
    with pytest.raises(InvalidRecordError, match="below the log end offset 11"):
        log.append_as_follower(batch(1, base_offset=5, epoch=3))
    with pytest.raises(InvalidRecordError, match="previous batch"):
        log.append_as_follower(batch(2, base_offset=11, epoch=3) + batch(1, base_offset=12))
    assert log.log_end_offset == 11
    log.check_invariants()
    log.close()


def test_a_follower_check_handed_to_the_append_is_not_run_again(tmp_path: Path) -> None:
    """``follower_check`` reads the fields the append needs (epochs from them): the
    append given its result writes the same log as one that checks itself, and a bad
    request fails the check with the append's own error, before anything is written."""
    log = open_log(tmp_path)
    req = batch(2, base_offset=0, epoch=1) + batch(1, base_offset=2, epoch=3)
    checked = log.follower_check(req)
    assert [(base, epoch) for _p, _s, base, _l, _t, _c, epoch, _h in checked] == [(0, 1), (2, 3)]
    info = log.append_as_follower(req, checked)
    assert info.epoch_changes == ((1, 0), (3, 2)) and log.log_end_offset == 3
    bad = bytearray(batch(1, base_offset=3, epoch=3))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.follower_check(bad)
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append_as_follower(bad)
    assert log.log_end_offset == 3
    log.close()


def test_batches_with_producers_only_skip_the_others(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    plain = build_batch([(None, b"a", 1, ())], base_offset=0)
    idempotent = build_batch([(None, b"b", 1, ())], base_offset=1, producer_id=42,
                             producer_epoch=0, base_sequence=0)
    log.append_as_follower(plain + idempotent
                           + build_batch([(None, b"c", 1, ())], base_offset=2))
    assert [h.base_offset for h, _ in log.batches()] == [0, 1, 2]
    found = list(log.batches(producers_only=True))
    assert [(h.base_offset, h.producer_id) for h, _ in found] == [(1, 42)]
    assert found[0][1] == idempotent
    assert list(log.batches(2, producers_only=True)) == []
    log.close()


def test_follower_append_of_many_batches_keeps_segments_within_segment_bytes(
        tmp_path: Path) -> None:
    """A lagging follower fetches many batches in one response; its segments still keep
    to segment_bytes (split at batch boundaries), as the leader's do."""
    log = open_log(tmp_path)  # segment_bytes 1024
    one = batch(3, value=b"v" * 100, epoch=2)
    log.append_as_follower(one)
    size = len(one)  # ~400 B: two fit in a segment, three do not
    req = b"".join(batch(3, value=b"v" * 100, base_offset=3 * i, epoch=2 if i < 5 else 4)
                   for i in range(1, 9))
    info = log.append_as_follower(req)
    assert (info.first_offset, info.last_offset, info.num_batches, info.num_records) == (
        3, 26, 8, 24)
    assert info.epoch_changes == ((2, 3), (4, 15)) and info.rolled
    assert [s.size for s in log.segments] == [2 * size] * 4 + [size]
    assert max(s.size for s in log.segments) <= SMALL.segment_bytes
    assert offsets_of(log.read(0, 100_000).read_bytes()) == list(range(27))
    log.check_invariants()
    log.close()


def test_leader_append_of_many_batches_keeps_segments_within_segment_bytes(
        tmp_path: Path) -> None:
    """A produce request may carry many batches of a partition (our producer sends up to
    max_request_size of them): the leader cuts it at batch boundaries like a follower,
    with the offsets, epoch and counts of one append."""
    log = open_log(tmp_path)  # segment_bytes 1024
    size = len(batch(3, value=b"v" * 100))  # ~400 B: two fit in a segment, three do not
    info = log.append_as_leader(b"".join(batch(3, value=b"v" * 100) for _ in range(9)), 7)
    assert (info.first_offset, info.last_offset, info.num_batches, info.num_records) == (
        0, 26, 9, 27)
    assert info.epoch_changes == ((7, 0),) and info.rolled
    assert [s.size for s in log.segments] == [2 * size] * 4 + [size]
    assert offsets_of(log.read(0, 100_000).read_bytes()) == list(range(27))
    log.check_invariants()
    log.close()


@pytest.mark.parametrize("leader", [True, False])
def test_a_cut_append_whose_later_write_fails_takes_its_earlier_parts_back_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leader: bool) -> None:
    """All-or-nothing across the cut: a retried request must be appended once."""
    log = open_log(tmp_path)
    log.append_as_leader(batch(3, value=b"v" * 100), 1)
    before = (log.log_end_offset, log.size_in_bytes)
    real_append = segment_list.SegmentList.append
    calls = []

    def failing(self: segment_list.SegmentList, *args: object) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise StorageError("disk full")
        real_append(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(segment_list.SegmentList, "append", failing)
    request = b"".join(batch(3, value=b"v" * 100, base_offset=3 * i, epoch=1)
                       for i in range(1, 6))
    with pytest.raises(StorageError):
        if leader:
            log.append_as_leader(request, 1)
        else:
            log.append_as_follower(request)
    assert len(calls) == 2
    assert (log.log_end_offset, log.size_in_bytes) == before
    monkeypatch.undo()
    info = (log.append_as_leader(request, 1) if leader else log.append_as_follower(request))
    assert (info.first_offset, info.last_offset) == (3, 17)
    assert offsets_of(log.read(0, 100_000).read_bytes()) == list(range(18))
    log.check_invariants()
    log.close()


def test_update_config_reaches_the_active_segment(tmp_path: Path) -> None:
    """A config change (or the topic's config reaching a log opened with the broker's
    defaults) applies to the active segment too: its index interval and its
    preallocated index size; an index with more entries than the new size allows is
    full, so the next append rolls."""
    log = open_log(tmp_path, LogConfig(index_interval_bytes=1 << 20))
    one = batch(3, value=b"v" * 100)
    for _ in range(3):
        log.append_as_leader(one, 0)
    assert log.active.index.entries == 1  # the first batch only
    log.update_config(LogConfig(index_interval_bytes=1, segment_index_bytes=2048))
    assert log.active.index.path.stat().st_size == 2048
    assert log.active.time_index.path.stat().st_size == 2048 // 12 * 12
    for _ in range(2):
        log.append_as_leader(one, 0)
    assert log.active.index.entries == 3  # an entry per batch from now on
    for _ in range(15):
        log.append_as_leader(one, 0)
    assert log.active.index.entries == 18 and len(log.segments) == 1
    log.update_config(LogConfig(index_interval_bytes=1, segment_index_bytes=96))
    assert log.active.index.max_entries == 12 and log.active.index.is_full
    assert log.active.index.path.stat().st_size == 18 * 8  # no entry dropped
    info = log.append_as_leader(one, 0)
    assert info.rolled and len(log.segments) == 2
    assert log.segments[0].index.entries == 18
    assert log.active.index.path.stat().st_size == 96
    log.check_invariants()
    log.close()
    reopened = open_log(tmp_path, LogConfig())
    assert offsets_of(reopened.read(0, 100_000).read_bytes()) == list(range(3 * 21))
    reopened.close()


def test_request_with_one_bad_batch_appends_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(), 0)
    size_before = log.size_in_bytes
    bad = bytearray(batch(3, value=b"abcdefgh"))
    bad[-2] ^= 0xFF  # inside the records: CRC mismatch
    request = batch() + bytes(bad) + batch()
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append_as_leader(request, 0)
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(batch(base_offset=3) + bytes(bad))
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch() + batch()[:-5], 0)  # torn last batch
    magic = bytearray(batch())
    magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        log.append_as_leader(batch() + bytes(magic), 0)
    assert log.log_end_offset == 3 and log.size_in_bytes == size_before
    assert os.path.getsize(log.active.log_path) == size_before
    log.check_invariants()
    log.close()


def test_batch_above_max_message_bytes_is_rejected(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(max_message_bytes=200))
    with pytest.raises(MessageTooLargeError, match="max_message_bytes 200"):
        log.append_as_leader(batch(1, value=b"x" * 300), 0)
    assert log.log_end_offset == 0
    log.close()


def test_oversized_request_goes_alone_into_a_fresh_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(), 0)
    big = batch(1, value=b"x" * 3000)
    info = log.append_as_leader(big, 0)
    assert info.rolled and len(log.segments) == 2 and log.active.size == len(big)
    log.check_invariants()
    log.close()


# -- read -----------------------------------------------------------------------------


def fill(log: Log, batches: int, records: int = 3, clock: Clock | None = None) -> list[int]:
    """Append ``batches`` batches; return their base offsets."""
    bases = []
    for i in range(batches):
        ts = clock.now if clock else 1000 + i * 10
        bases.append(log.append_as_leader(batch(records, ts=ts), 1).first_offset)
    return bases


def test_read_at_every_offset_including_segment_boundaries(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    bases = fill(log, 60)
    assert len(log.segments) > 5
    boundaries = [s.base_offset for s in log.segments]
    for offset in range(log.log_end_offset):
        fetched = log.read(offset, 1)  # min_one_batch: exactly the batch holding offset
        data = fetched.read_bytes()
        [(_, header)] = list(iter_batches(data))
        assert header.base_offset <= offset <= header.last_offset
    for base in boundaries[1:]:
        data = log.read(base - 1, 1).read_bytes()
        assert next(iter_batches(data))[1].last_offset == base - 1
        assert next(iter_batches(log.read(base, 1).read_bytes()))[1].base_offset == base
    everything = log.read(0, 10**9)
    assert len(everything.regions) == len(log.segments)
    assert offsets_of(everything.read_bytes()) == list(range(bases[-1] + 3))
    log.close()


def test_read_bounds_max_bytes_and_max_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 20)
    size = len(log.read(0, 1).read_bytes())
    fetched = log.read(0, size * 2 + size // 2)
    assert fetched.size_in_bytes == size * 2  # whole batches only
    assert log.read(0, size - 1).size_in_bytes == size  # min_one_batch
    assert log.read(0, size - 1, min_one_batch=False).size_in_bytes == 0
    assert offsets_of(log.read(0, 10**9, max_offset=9).read_bytes()) == list(range(9))
    assert offsets_of(log.read(0, 10**9, max_offset=8).read_bytes()) == list(range(6))
    assert log.read(6, 10**9, max_offset=8).size_in_bytes == 0  # batch 6..8 not below HW
    assert log.read(60, 100).regions == ()  # start == LEO: empty
    with pytest.raises(OffsetOutOfRangeError):
        log.read(61, 100)
    log.maybe_increment_log_start_offset(10)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(9, 100)
    log.close()


def test_region_invalidated_by_truncation_is_a_storage_error(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 30)
    region = log.read(45, 10**6).regions[-1]
    log.truncate_to(3)
    with pytest.raises(StorageError):
        region.read_bytes()
    log.close()


# -- timestamps -------------------------------------------------------------------------


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 40)  # batch i holds timestamps 1000+10i .. 1000+10i+2
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1001) == (1, 1001)
    assert log.offset_for_timestamp(1003) == (3, 1010)  # next batch's first record
    assert log.offset_for_timestamp(1000 + 10 * 25 + 2) == (77, 1252)
    assert log.offset_for_timestamp(1000 + 10 * 39 + 3) is None
    # a late batch with an old timestamp does not hide later answers
    log.append_as_leader(batch(1, ts=500), 1)
    assert log.offset_for_timestamp(400) == (0, 1000)
    log.close()
    reopened = open_log(tmp_path, had_clean_shutdown=True)
    assert reopened.offset_for_timestamp(1000 + 10 * 25 + 2) == (77, 1252)
    reopened.close()


def test_log_append_time_stamps_each_batch_with_the_leaders_clock(tmp_path: Path) -> None:
    clock = Clock(now=5_000_000)
    log = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"), clock_ms=clock)
    far_future = clock.now + 10 * 3600 * 1000  # INVALID_TIMESTAMP under CreateTime
    log.append_as_leader(batch(3, ts=far_future) + batch(2, ts=7), 0)
    clock.now += 1000
    compressed = build_batch([(b"k", b"v" * 50, 1, ())] * 4, compression=1)  # gzip
    log.append_as_leader(compressed, 0)
    data = log.read(0, 100_000).read_bytes()
    headers = [(p, h) for p, h in iter_batches(data)]  # every CRC valid again
    assert [h.max_timestamp for _, h in headers] == [5_000_000, 5_000_000, 5_001_000]
    assert all(h.attributes & TIMESTAMP_TYPE_MASK for _, h in headers)
    stamps = [r.timestamp for p, _ in headers for r in decode_batch(data, p)]
    assert stamps == [5_000_000] * 5 + [5_001_000] * 4  # readers use the batch's time
    assert log.offset_for_timestamp(5_000_500) == (5, 5_001_000)
    with pytest.raises(InvalidConfigError, match="message_timestamp_type"):
        LogConfig.from_dict({"message.timestamp.type": "WallClock"})
    create_time = open_log(tmp_path / "other", clock_ms=clock)
    with pytest.raises(MiniKafkaError) as refused:
        create_time.append_as_leader(batch(1, ts=far_future), 0)
    assert refused.value.code == ErrorCode.INVALID_TIMESTAMP
    log.close()
    create_time.close()


# -- rolls, truncation, retention --------------------------------------------------------


def test_roll_by_segment_ms_uses_injected_clock(tmp_path: Path) -> None:
    clock = Clock()
    cfg = LogConfig(segment_ms=1000)
    log = open_log(tmp_path, cfg, clock_ms=clock)
    log.append_as_leader(batch(ts=clock.now), 0)
    clock.now += 1000
    assert not log.append_as_leader(batch(ts=clock.now), 0).rolled
    clock.now += 1
    assert log.append_as_leader(batch(ts=clock.now), 0).rolled
    assert [s.base_offset for s in log.segments] == [0, 6]
    log.close()


def test_truncate_to_and_truncate_fully(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 40)
    segments_before = len(log.segments)
    log.truncate_to(50)  # batch 48..50 is dropped whole: LEO = 48
    assert log.log_end_offset == 48
    assert len(log.segments) < segments_before
    log.check_invariants()
    log.append_as_leader(batch(), 2)
    assert offsets_of(log.read(45, 10**6).read_bytes()) == list(range(45, 51))
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (1000, 1000, 1)
    assert log.append_as_leader(batch(), 2).first_offset == 1000
    log.check_invariants()
    log.close()


def test_time_and_size_retention(tmp_path: Path) -> None:
    clock = Clock()
    cfg = LogConfig(segment_bytes=1024, retention_ms=10_000, index_interval_bytes=128)
    log = open_log(tmp_path, cfg, clock_ms=clock)
    fill(log, 20, clock=clock)
    clock.now += 5_000
    fill(log, 20, clock=clock)
    assert log.delete_old_segments() == 0
    clock.now += 5_003  # the first 20 batches (max timestamp t0 + 2) are 10_001 ms old
    deleted = log.delete_old_segments()
    assert deleted > 0
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert all(s.max_timestamp >= clock.now - 10_000 for s in log.segments[:-1])
    assert log.recovery_point >= log.log_start_offset
    log.check_invariants()
    log.close()
    sized = Log.open(tmp_path / "sized-0", LogConfig(segment_bytes=1024, retention_bytes=2048,
                                                      retention_ms=-1))
    fill(sized, 60)
    assert sized.delete_old_segments() == 3  # 6 x 1000 bytes -> keep 3000 (> 2048)
    assert sized.size_in_bytes - sized.segments[0].size < 2048 <= sized.size_in_bytes
    assert sized.log_start_offset == sized.segments[0].base_offset == 90
    sized.close()


def test_retention_never_deletes_at_or_above_the_high_watermark(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, LogConfig(segment_bytes=1024, retention_ms=10_000,
                                       retention_bytes=1024, index_interval_bytes=128),
                   clock_ms=clock)
    fill(log, 60, clock=clock)
    clock.now += 60_000  # every rolled segment expired, and over retention_bytes
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 4
    high_watermark = bases[2] + 1  # a follower lags: the HW is inside the third segment
    assert log.delete_old_segments(high_watermark) == 2  # only segments wholly below it
    assert log.log_start_offset == bases[2] <= high_watermark
    assert log.delete_old_segments(high_watermark) == 0
    assert log.delete_old_segments(log.log_end_offset) == len(bases) - 3  # HW caught up
    log.check_invariants()
    log.close()


def test_log_start_offset_retention_never_deletes_active(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 40)
    log.maybe_increment_log_start_offset(log.log_end_offset)
    assert log.delete_old_segments() > 0
    assert len(log.segments) == 1 and log.log_start_offset == log.log_end_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(log.log_end_offset + 1)
    log.close()


# -- flush policy ---------------------------------------------------------------------------


def test_flush_policies(tmp_path: Path) -> None:
    clock = Clock()
    every = Log.open(tmp_path / "a-0", LogConfig(flush_messages=1), clock_ms=clock)
    every.append_as_leader(batch(), 0)
    assert every.recovery_point == 3
    every.close()
    by_ms = Log.open(tmp_path / "b-0", LogConfig(flush_ms=100), clock_ms=clock)
    by_ms.append_as_leader(batch(), 0)
    assert by_ms.recovery_point == 0
    clock.now += 100
    by_ms.maybe_flush()
    assert by_ms.recovery_point == 3
    by_ms.close()
    default = Log.open(tmp_path / "c-0", SMALL, clock_ms=clock)
    fill(default, 20)
    assert default.recovery_point == 0  # replication is the durability
    default.maybe_flush()  # flushes the rolled segments only
    assert default.recovery_point == default.active.base_offset > 0
    default.close()


# -- reopen and recovery ---------------------------------------------------------------------


def test_clean_reopen_does_not_rescan(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 50)
    expected = log.read(0, 10**9).read_bytes()
    leo = log.log_end_offset
    log.close()
    reopened = open_log(tmp_path, had_clean_shutdown=True)
    report = reopened.recovery_report
    assert (report.segments_rescanned, report.indexes_rebuilt, report.bytes_rescanned) == (0, 0, 0)
    assert report.segments_loaded == len(reopened.segments) >= 5
    assert reopened.log_end_offset == reopened.recovery_point == leo
    assert reopened.read(0, 10**9).read_bytes() == expected
    reopened.check_invariants()
    assert reopened.append_as_leader(batch(), 3).first_offset == leo
    reopened.check_invariants()
    reopened.close()


@pytest.mark.parametrize("damage", ["delete", "garbage", "partial"])
def test_damaged_index_is_rebuilt_identically(tmp_path: Path, damage: str) -> None:
    log = open_log(tmp_path)
    fill(log, 50)
    victim = log.segments[2]
    log.close()
    original = victim.index.path.read_bytes()
    original_time = victim.time_index.path.read_bytes()
    assert len(original) >= 16
    if damage == "delete":
        victim.index.path.unlink()
    elif damage == "garbage":
        victim.index.path.write_bytes(original[:8] + b"\x00\x00\x00\x01\x7f\xff\xff\xff"
                                      + original[16:])
    else:
        victim.index.path.write_bytes(original[:-3])
    reopened = open_log(tmp_path, had_clean_shutdown=True)
    assert reopened.recovery_report.indexes_rebuilt == 1
    assert reopened.recovery_report.truncated_bytes == 0
    reopened.check_invariants()
    base = victim.base_offset
    assert next(iter_batches(reopened.read(base + 4, 1).read_bytes()))[1].base_offset == base + 3
    reopened.close()
    assert victim.index.path.read_bytes() == original
    assert victim.time_index.path.read_bytes() == original_time


def test_torn_tail_is_truncated_on_unclean_open(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 30)
    log.flush()
    fill(log, 3)
    flushed, leo = log.recovery_point, log.log_end_offset
    tail = log.read(leo - 3, 10**6).regions[0]  # the last batch
    log.abandon()
    os.truncate(tail.path, tail.position + tail.length - 7)
    reopened = open_log(tmp_path, recovery_point=flushed)
    report = reopened.recovery_report
    assert report.truncated_bytes == tail.length - 7
    assert report.truncated_at_offset == reopened.log_end_offset == leo - 3
    assert report.segments_rescanned >= 1
    assert reopened.recovery_point == flushed
    assert offsets_of(reopened.read(0, 10**9).read_bytes()) == list(range(leo - 3))
    reopened.check_invariants()
    reopened.close()


def test_a_cut_is_recorded_before_it_is_made_and_reported_until_acknowledged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30, item 11: a process killed after recovery cut its log and before its
    owner recorded the cut must not come back with a clean log and no trace of it."""
    log = open_log(tmp_path)
    fill(log, 30)
    flushed = log.recovery_point
    fill(log, 3)
    tail = log.read(log.log_end_offset - 3, 10**6).regions[0]
    log.abandon()
    os.truncate(tail.path, tail.position + tail.length - 7)
    marker = tmp_path / "topic-3" / RECOVERY_CUT_MARKER
    truncate = os.ftruncate
    seen: list[bool] = []

    def watched(fd: int, length: int) -> None:
        seen.append(marker.exists())
        truncate(fd, length)

    monkeypatch.setattr(os, "ftruncate", watched)
    cut = open_log(tmp_path, recovery_point=flushed)
    monkeypatch.undo()
    assert cut.recovery_report.truncated_bytes and seen and all(seen)  # durable first
    cut.abandon()  # killed before the owner recorded the cut
    again = open_log(tmp_path, recovery_point=flushed)
    assert again.recovery_report.truncated_bytes == 0  # nothing left to cut
    assert again.recovery_report.cut_unacknowledged  # still reported
    again.acknowledge_recovery_cut()
    assert not marker.exists() and not again.recovery_report.cut_unacknowledged
    again.abandon()
    assert not open_log(tmp_path, recovery_point=flushed).recovery_report.cut_unacknowledged


def test_corruption_in_an_old_segment_drops_everything_after_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 40)
    victim = log.segments[1]
    corrupt_at = victim.size // 2
    log.abandon()
    _flip_header_byte(victim.log_path, corrupt_at, 0)  # (any byte: mid-segment)
    reopened = open_log(tmp_path, recovery_point=0)
    report = reopened.recovery_report
    assert report.segments_deleted > 0 and len(reopened.segments) == 2
    assert report.quarantine is not None  # the later segments moved, intact, not deleted
    kept = sorted(report.quarantine.glob("*.log"))
    assert len(kept) == report.segments_deleted
    assert sum(p.stat().st_size for p in kept) > 0
    assert all(h.base_offset > victim.base_offset
               for p in kept for _, h in iter_batches(p.read_bytes()))  # CRCs valid
    assert reopened.active.base_offset == victim.base_offset
    assert reopened.active.size <= corrupt_at
    data = reopened.read(0, 10**9).read_bytes()
    assert offsets_of(data) == list(range(reopened.log_end_offset))
    reopened.check_invariants()
    reopened.close()


@pytest.mark.parametrize("clean", [True, False])
def test_corruption_in_a_durable_old_segment_keeps_it_and_everything_after_it(
        tmp_path: Path, clean: bool) -> None:
    """Never destroy what is intact: damage below the recovery point (bytes that were
    fsync'd: rot, not a lost tail) that recovery finds, here because the segment's index
    file is gone and it is rescanned, keeps its segment (marked from the bad batch on,
    to be repaired from another replica) and every later segment; the log end stays."""
    log = open_log(tmp_path)
    fill(log, 40)
    log.flush()
    bases, end, point = [s.base_offset for s in log.segments], log.log_end_offset, \
        log.recovery_point
    victim = log.segments[1]
    corrupt_at = victim.size // 2
    if clean:
        log.close()
    else:
        log.abandon()
    _flip_header_byte(victim.log_path, corrupt_at, 0)  # (any byte: mid-segment)
    segment_file(tmp_path / "topic-3", victim.base_offset, ".index").unlink()
    reopened = open_log(tmp_path, recovery_point=point, had_clean_shutdown=clean)
    report = reopened.recovery_report
    assert [s.base_offset for s in reopened.segments] == bases
    assert reopened.log_end_offset == end and report.truncated_bytes == 0
    assert report.quarantine is None and report.segments_deleted == 0
    ((base, position, first_bad, until),) = report.damaged
    assert (base, until) == (victim.base_offset, bases[2]) and position <= corrupt_at
    assert report.intact_end_offset == first_bad
    assert "kept with every later segment" in "; ".join(report.problems)
    data = reopened.read(0, 10**9).read_bytes()  # stops before the damage
    assert offsets_of(data) == list(range(first_bad))
    assert offsets_of(reopened.read(until, 10**9).read_bytes()) == list(range(until, end))
    walked = [h.base_offset for h, _ in reopened.batches()]  # walks skip the damage
    assert until in walked and not [o for o in walked if first_bad <= o < until]
    reopened.check_invariants()
    reopened.close()


def test_unclean_open_keeps_intact_unflushed_data(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 30)
    leo = log.log_end_offset
    log.abandon()  # page cache survives a process crash
    reopened = open_log(tmp_path, recovery_point=0)
    assert reopened.log_end_offset == leo
    assert reopened.recovery_point == 0
    assert reopened.recovery_report.truncated_bytes == 0
    reopened.check_invariants()
    reopened.delete()
    assert not (tmp_path / "topic-3").exists()


def _flip_header_byte(path: Path, position: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ (1 << bit)]))


def test_an_unflushed_batch_claiming_an_unknown_epoch_is_cut(tmp_path: Path) -> None:
    """The partition leader epoch is outside the CRC: recovery checks each unflushed
    batch's against the leader-epoch checkpoint (written before any batch of an epoch),
    so a flipped bit cannot make a replica claim an epoch no leader had."""
    log = open_log(tmp_path)
    for epoch in (3, 5):
        for _ in range(2):
            log.append_as_leader(batch(), epoch)
    LeaderEpochCheckpointFile(log.dir / LEADER_EPOCH_CHECKPOINT).write([(3, 0), (5, 6)])
    log.flush(6)
    last = log.read(9, 10**6).regions[0]
    log.abandon()
    _flip_header_byte(last.path, last.position + 12, 4)  # the last batch: epoch 5 + 2**28
    reopened = open_log(tmp_path, recovery_point=6)
    assert reopened.log_end_offset == 9
    assert "the leader-epoch checkpoint says 5" in "; ".join(reopened.recovery_report.problems)
    reopened.check_invariants()
    reopened.close()
    # below the recovery point nothing is rechecked; without a checkpoint nothing is known
    (tmp_path / "topic-3" / LEADER_EPOCH_CHECKPOINT).unlink()
    again = open_log(tmp_path, recovery_point=0)
    assert again.log_end_offset == 9 and again.recovery_report.truncated_bytes == 0
    again.close()


def test_a_batch_reaching_into_the_next_segment_is_cut(tmp_path: Path) -> None:
    """A base offset flipped upwards in a closed segment passes the CRC; the next
    segment's base (its file name) bounds it."""
    log = open_log(tmp_path)
    fill(log, 30)
    closed = log.segments[0]
    last = log.read(closed.next_offset - 1, 10**6).regions[0]
    log.abandon()
    _flip_header_byte(last.path, last.position + 7, 6)  # base offset + 64
    reopened = open_log(tmp_path, recovery_point=0)
    report = reopened.recovery_report
    assert "at or past the next segment's base" in "; ".join(report.problems)
    assert reopened.log_end_offset < closed.next_offset
    assert offsets_of(reopened.read(0, 10**9).read_bytes()) == list(
        range(reopened.log_end_offset))
    reopened.check_invariants()
    reopened.close()


def test_a_rolled_segment_that_lost_its_tail_at_a_batch_boundary_is_cut(
        tmp_path: Path) -> None:
    """A power cut can drop a rolled segment's unflushed last batches while the next
    segment's first batches survive: every batch left has a valid CRC, but the offsets
    between them are gone.  Recovery cuts at the hole and moves the later segments
    aside (the replica fetches the range again) instead of serving a log with a hole."""
    log = open_log(tmp_path)
    fill(log, 30)
    torn = log.segments[1]
    lost = log.read(torn.next_offset - 1, 10**6).regions[0]  # its last batch
    log.abandon()
    os.truncate(torn.log_path, lost.position)
    reopened = open_log(tmp_path, recovery_point=0)
    report = reopened.recovery_report
    assert "an unflushed tail was lost" in "; ".join(report.problems)
    assert reopened.log_end_offset == reopened.segments[-1].next_offset < torn.next_offset
    assert report.quarantine is not None and report.segments_deleted >= 1
    assert offsets_of(reopened.read(0, 10**9).read_bytes()) == list(
        range(reopened.log_end_offset))
    reopened.check_invariants()
    reopened.close()
    # below the recovery point the boundary is not rechecked (that data was flushed)
    log = open_log(tmp_path / "flushed")
    fill(log, 30)
    torn = log.segments[1]
    log.flush()
    recovery_point = log.recovery_point
    lost = log.read(torn.next_offset - 1, 10**6).regions[0]
    log.abandon()
    os.truncate(torn.log_path, lost.position)
    again = open_log(tmp_path / "flushed", recovery_point=recovery_point)
    assert again.recovery_report.truncated_bytes == 0 and again.recovery_report.quarantine is None
    again.close()


def test_a_follower_roll_over_a_compacted_gap_starts_the_segment_at_the_log_end(
        tmp_path: Path) -> None:
    """A follower copying a compacted leader rolls where the next batch starts above
    its LEO: the new segment is based at the LEO (the gap lies inside it), so an unclean
    restart, which checks that rescanned segments meet, keeps every batch."""
    log = open_log(tmp_path)
    one = batch(3, value=b"v" * 100, epoch=2)
    log.append_as_follower(one)
    log.append_as_follower(batch(3, value=b"v" * 100, base_offset=3, epoch=2))
    info = log.append_as_follower(batch(3, value=b"v" * 100, base_offset=50, epoch=2))
    assert info.rolled
    assert [s.base_offset for s in log.segments] == [0, 6]
    assert log.log_end_offset == 53
    assert offsets_of(log.read(10, 10**6).read_bytes()) == [50, 51, 52]  # inside the gap
    log.check_invariants()
    log.abandon()
    reopened = open_log(tmp_path, recovery_point=0)
    assert reopened.recovery_report.truncated_bytes == 0, reopened.recovery_report.problems
    assert reopened.log_end_offset == 53
    reopened.check_invariants()
    reopened.close()


def test_segments_a_truncation_deleted_stay_deleted_after_the_next_flush(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A deletion is durable only once the directory is fsync'd: the next flush does it,
    so a power cut cannot bring a deleted segment back under newer offsets (recovery
    would then cut the newer, flushed batches that reach into its range)."""
    log = open_log(tmp_path)
    fill(log, 30)
    log.flush()
    synced: list[Path] = []
    monkeypatch.setattr(segment_list, "fsync_dir", synced.append)
    assert len(log.segments) > 2
    log.truncate_to(log.segments[1].base_offset + 1)
    fill(log, 1)
    log.flush()
    assert synced == [log.dir]
    log.close()
