"""LeaderEpochCache: assign rules, OffsetsForLeaderEpoch answers, truncation, checkpoint."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from replication.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    EpochEntry,
    LeaderEpochCache,
    LeaderEpochCacheError,
    epoch_changes,
)
from storage.checkpoint import CorruptCheckpointError, LeaderEpochCheckpointFile
from tests.replication.helpers import RecordingCheckpoint, batch


def cache_of(*entries: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(entries=entries)


def test_assign_appends_new_epochs_and_ignores_repeats() -> None:
    c = LeaderEpochCache()
    assert c.latest_epoch == UNDEFINED_EPOCH
    assert c.assign(0, 0)
    assert not c.assign(0, 5)  # same epoch, later offset: nothing new
    assert c.assign(2, 10)
    assert c.entries == (EpochEntry(0, 0), EpochEntry(2, 10))
    assert c.latest_epoch == 2 and c.earliest_epoch == 0


def test_assign_same_epoch_lower_offset_replaces_it() -> None:
    c = cache_of((0, 0), (2, 10))
    assert c.assign(2, 8)
    assert c.entries == (EpochEntry(0, 0), EpochEntry(2, 8))


def test_assign_newer_epoch_removes_empty_epochs_at_or_after_its_start() -> None:
    c = cache_of((0, 0), (3, 10))  # epoch 3 was opened at 10 and wrote nothing
    assert c.assign(5, 10)
    assert c.entries == (EpochEntry(0, 0), EpochEntry(5, 10))


def test_assign_older_epoch_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    c = cache_of((0, 0), (3, 10))
    with caplog.at_level(logging.WARNING):
        assert not c.assign(2, 20)
    assert "older than the latest" in caplog.text
    assert c.entries == (EpochEntry(0, 0), EpochEntry(3, 10))


@pytest.mark.parametrize("epoch, offset", [(-1, 0), (0, -1), (2**31, 0)])
def test_assign_rejects_bad_values(epoch: int, offset: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        LeaderEpochCache().assign(epoch, offset)


def test_constructor_rejects_unordered_entries() -> None:
    with pytest.raises(ValueError, match="out of order"):
        cache_of((3, 0), (1, 10))


@pytest.mark.parametrize("requested, expected", [
    (-1, (-1, -1)),      # undefined request
    (0, (0, 20)),        # below the first epoch: it ends where the first one starts
    (1, (1, 100)),       # epoch 1 ends where epoch 3 starts
    (2, (1, 100)),       # unknown epoch between: the largest epoch <= 2 is 1
    (3, (3, 250)),
    (4, (3, 250)),
    (5, (5, 400)),       # the latest epoch ends at the LEO
    (6, (-1, -1)),       # newer than anything known
])
def test_end_offset_for(requested: int, expected: tuple[int, int]) -> None:
    c = cache_of((1, 20), (3, 100), (5, 250))
    assert c.end_offset_for(requested, 400) == expected


def test_end_offset_for_empty_cache_is_undefined() -> None:
    assert LeaderEpochCache().end_offset_for(3, 10) == (-1, -1)


def test_truncate_from_end_drops_epochs_starting_at_or_after() -> None:
    c = cache_of((1, 0), (3, 100), (5, 250))
    assert c.truncate_from_end(250)
    assert c.entries == (EpochEntry(1, 0), EpochEntry(3, 100))
    assert not c.truncate_from_end(300)
    assert c.truncate_from_end(50)
    assert c.entries == (EpochEntry(1, 0),)


def test_truncate_from_start_keeps_the_epoch_covering_the_new_start() -> None:
    c = cache_of((1, 0), (3, 100), (5, 250))
    assert c.truncate_from_start(120)
    assert c.entries == (EpochEntry(3, 120), EpochEntry(5, 250))
    assert not c.truncate_from_start(120)
    assert c.truncate_from_start(250)
    assert c.entries == (EpochEntry(5, 250),)
    assert c.end_offset_for(3, 300) == (3, 250)  # gone here: ends where epoch 5 starts


def test_epoch_for_offset() -> None:
    c = cache_of((1, 10), (3, 100))
    assert [c.epoch_for_offset(o) for o in (5, 10, 99, 100, 500)] == [-1, 1, 1, 3, 3]
    assert c.start_offset_of(3) == 100 and c.start_offset_of(2) is None


def test_every_change_is_checkpointed_and_load_fits_the_log(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    c = LeaderEpochCache(LeaderEpochCheckpointFile(path))
    c.assign(0, 0)
    c.assign(2, 40)
    c.assign(4, 90)
    assert LeaderEpochCheckpointFile(path).read() == [(0, 0), (2, 40), (4, 90)]
    c.truncate_from_end(90)
    assert LeaderEpochCheckpointFile(path).read() == [(0, 0), (2, 40)]
    c.assign(4, 90)
    # the data of epoch 4 was lost in a crash (LEO 60) and retention moved the start to 10
    loaded = LeaderEpochCache.load(path, 10, 60)
    assert loaded.entries == (EpochEntry(0, 10), EpochEntry(2, 40))
    assert LeaderEpochCheckpointFile(path).read() == [(0, 10), (2, 40)]


def test_load_rebuilds_a_missing_checkpoint_from_the_batches(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    loaded = LeaderEpochCache.load(path, 0, 30, batches=[(0, 0), (0, 10), (3, 20)])
    assert loaded.entries == (EpochEntry(0, 0), EpochEntry(3, 20))
    assert LeaderEpochCheckpointFile(path).read() == [(0, 0), (3, 20)]


def test_a_corrupt_checkpoint_is_logged_and_rebuilt_from_the_batches(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Its writes are not fsync'd (below): a power cut can leave it damaged."""
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n2\n3 10\n1 20\n")
    with pytest.raises(CorruptCheckpointError, match="leader-epoch-checkpoint"):
        LeaderEpochCheckpointFile(path).read()
    with caplog.at_level(logging.WARNING):
        loaded = LeaderEpochCache.load(path, 0, 100, batches=[(1, 0), (3, 50)])
    assert "leader-epoch-checkpoint" in caplog.text
    assert loaded.entries == (EpochEntry(1, 0), EpochEntry(3, 50))
    assert LeaderEpochCheckpointFile(path).read() == [(1, 0), (3, 50)]


def test_changes_are_written_at_once_without_fsync_and_sync_makes_them_durable() -> None:
    ckpt = RecordingCheckpoint()
    c = LeaderEpochCache(ckpt)
    c.assign(0, 0)
    c.assign(2, 40)
    assert ckpt.writes == [([(0, 0)], False), ([(0, 0), (2, 40)], False)]
    assert c.durable_entries == ()  # a power cut now: the file as it was
    c.sync()
    assert ckpt.writes[-1] == ([(0, 0), (2, 40)], True)
    assert c.durable_entries == (EpochEntry(0, 0), EpochEntry(2, 40))
    c.sync()  # nothing changed since: no write, no fsync
    assert len(ckpt.writes) == 3
    c.truncate_from_end(40)
    assert ckpt.writes[-1] == ([(0, 0)], False)
    assert c.durable_entries == (EpochEntry(0, 0), EpochEntry(2, 40))
    c.sync()
    assert ckpt.writes[-1] == ([(0, 0)], True) and len(ckpt.writes) == 5


def test_check_invariants_against_the_log() -> None:
    c = cache_of((1, 10), (3, 100))
    c.check_invariants(10, 100)
    with pytest.raises(LeaderEpochCacheError, match="past the log end"):
        c.check_invariants(0, 99)
    with pytest.raises(LeaderEpochCacheError, match="before the log start"):
        c.check_invariants(11, 200)


@pytest.mark.parametrize("edit", ["append", "pop then append", "trim start", "clear"])
def test_the_incremental_order_check_reads_every_pair_the_list_changed(edit: str) -> None:
    """check_invariants reads only the pairs since its last pass: an entry out of order
    that gets in after a pass (here planted behind the API, as a bug would) is still
    found, whatever edit came before it."""
    c = cache_of((1, 10), (3, 100), (5, 200))
    c.check_invariants()
    if edit == "pop then append":
        c.truncate_from_end(100)  # (1, 10) left
    elif edit == "trim start":
        c.truncate_from_start(150)  # (3, 150), (5, 200)
    elif edit == "clear":
        c.clear()
        c.assign(7, 300)
    c._entries.append(EpochEntry(0, 5))  # an older epoch, an earlier start: out of order
    with pytest.raises(LeaderEpochCacheError, match="out of order"):
        c.check_invariants()


def test_epoch_changes_scans_batch_headers() -> None:
    data = (batch(b"a", base_offset=0, epoch=1) + batch(b"b", b"c", base_offset=1, epoch=1)
            + batch(b"d", base_offset=3, epoch=4))
    assert epoch_changes(data) == [(1, 0), (4, 3)]
