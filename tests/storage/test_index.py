"""Offset and time index files: append, lookups, truncation, trimming, sanity checks."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest

from storage.errors import CorruptIndexError, StorageError
from storage.index.offset_index import OffsetIndex
from storage.index.time_index import TimeIndex

BASE = 1000


def _offset_index(tmp_path: Path, max_bytes: int = 800) -> OffsetIndex:
    idx = OffsetIndex(tmp_path / "x.index", BASE, max_bytes)
    idx.make_active()
    return idx


def test_the_page_the_next_entries_go_to_is_written_not_left_sparse(tmp_path: Path) -> None:
    # a first store through the map into a hole allocates its block inside a page
    # fault (ms each; seconds for a new topic of many partitions): make_active writes
    # that page with write(2), past the entries only
    idx = OffsetIndex(tmp_path / "x.index", BASE, 10 * 1024 * 1024)
    idx.make_active()
    assert idx.path.stat().st_blocks * 512 >= mmap.PAGESIZE  # sparse before the change
    for i in range(3):
        idx.append(BASE + i, 10 * i)
    idx.close()  # trimmed to its three entries
    again = OffsetIndex(idx.path, BASE, 10 * 1024 * 1024)
    again.make_active()  # reactivated: the entries stay, the rest of their page is zeros
    again.append(BASE + 3, 30)
    assert [again.entry(i) for i in range(4)] == [(i, 10 * i) for i in range(4)]
    with open(idx.path, "rb") as f:
        assert f.read(mmap.PAGESIZE)[32:] == bytes(mmap.PAGESIZE - 32)
    again.close()


def test_offset_lookup_floor_semantics(tmp_path: Path) -> None:
    idx = _offset_index(tmp_path)
    assert idx.lookup(BASE + 7) == (BASE, 0)  # empty index -> segment start
    for i in range(10):
        idx.append(BASE + 10 * i, 100 * i)
    assert idx.lookup(BASE) == (BASE, 0)
    assert idx.lookup(BASE + 9) == (BASE, 0)
    assert idx.lookup(BASE + 10) == (BASE + 10, 100)
    assert idx.lookup(BASE + 95) == (BASE + 90, 900)
    assert idx.lookup(BASE + 10**6) == (BASE + 90, 900)
    assert idx.lookup(BASE - 5) == (BASE, 0)
    assert idx.lookup_position(0) == (BASE, 0)
    assert idx.lookup_position(250) == (BASE + 20, 200)
    assert idx.lookup_position(300) == (BASE + 30, 300)
    idx.close()


def test_offset_index_rejects_non_increasing_and_full(tmp_path: Path) -> None:
    idx = _offset_index(tmp_path, max_bytes=96)
    idx.append(BASE + 5, 0)
    with pytest.raises(CorruptIndexError, match="does not follow"):
        idx.append(BASE + 5, 10)
    with pytest.raises(CorruptIndexError):
        idx.append(BASE + 6, 0)
    for i in range(1, 12):
        idx.append(BASE + 5 + i, i)
    assert idx.is_full
    with pytest.raises(StorageError, match="full"):
        idx.append(BASE + 100, 100)
    idx.close()


def test_preallocate_trim_and_reopen(tmp_path: Path) -> None:
    idx = _offset_index(tmp_path, max_bytes=803)
    assert idx.path.stat().st_size == 800  # rounded down to whole entries
    for i in range(5):
        idx.append(BASE + i, 10 * i)
    idx.close()
    assert idx.path.stat().st_size == 5 * 8
    again = OffsetIndex(idx.path, BASE, 800)
    assert again.entries == 5
    assert (again.last_offset, again.last_position) == (BASE + 4, 40)
    assert again.lookup(BASE + 3) == (BASE + 3, 30)
    again.sanity_check(log_size=41)
    with pytest.raises(CorruptIndexError, match="past the log end"):
        again.sanity_check(log_size=40)
    again.close()


def test_truncate_to_offset_and_continue(tmp_path: Path) -> None:
    idx = _offset_index(tmp_path)
    for i in range(10):
        idx.append(BASE + 10 * i, 100 * i)
    idx.truncate_to_offset(BASE + 45)
    assert idx.entries == 5 and idx.last_offset == BASE + 40
    idx.truncate_to_offset(BASE + 40)
    assert idx.entries == 4 and idx.last_offset == BASE + 30
    idx.append(BASE + 31, 301)
    assert idx.lookup(BASE + 35) == (BASE + 31, 301)
    idx.close()
    assert idx.path.stat().st_size == 5 * 8


def test_open_rejects_partial_entry_file(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(b"\x00" * 12)
    with pytest.raises(CorruptIndexError, match="not a multiple"):
        OffsetIndex(path, BASE, 800)


def test_sanity_check_detects_non_monotonic_entries(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    # (0, 0), (5, 100), (3, 200): offsets go backwards
    path.write_bytes(bytes.fromhex("00000000 00000000 00000005 00000064 00000003 000000c8"))
    idx = OffsetIndex(path, BASE, 800)
    with pytest.raises(CorruptIndexError, match="strictly increasing"):
        idx.sanity_check(log_size=10_000)
    idx.close()


def test_untrimmed_preallocated_zero_tail_fails_sanity_check(tmp_path: Path) -> None:
    idx = _offset_index(tmp_path)
    idx.append(BASE, 0)
    idx.append(BASE + 3, 50)
    idx.abandon()  # crash: file stays preallocated with zeros after the entries
    again = OffsetIndex(idx.path, BASE, 800)
    assert again.entries == 100
    with pytest.raises(CorruptIndexError):
        again.sanity_check(log_size=1000)
    again.close()


def test_time_index_append_and_lookup(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "x.timeindex", BASE, 12 * 20)
    idx.make_active()
    assert idx.lookup(5) is None
    assert idx.maybe_append(100, BASE)
    assert not idx.maybe_append(100, BASE + 1)  # not larger: skipped
    assert not idx.maybe_append(50, BASE + 2)
    assert idx.maybe_append(200, BASE + 10)
    assert idx.maybe_append(300, BASE + 20)
    assert idx.lookup(100) is None  # strictly below
    assert idx.lookup(101) == (100, BASE)
    assert idx.lookup(300) == (200, BASE + 10)
    assert idx.lookup(10**12) == (300, BASE + 20)
    with pytest.raises(CorruptIndexError):
        idx.maybe_append(400, BASE + 20)
    idx.truncate_to_offset(BASE + 10)
    assert (idx.entries, idx.last_timestamp, idx.last_offset) == (1, 100, BASE)
    idx.sanity_check(next_offset=BASE + 1)
    with pytest.raises(CorruptIndexError, match="past the segment end"):
        idx.sanity_check(next_offset=BASE)
    idx.close()
    assert idx.path.stat().st_size == 12


def test_time_index_keeps_one_slot_for_the_final_entry(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "x.timeindex", BASE, 12 * 8)
    idx.make_active()
    for i in range(7):
        idx.maybe_append(i + 1, BASE + i)
    assert idx.is_full and idx.entries == 7
    assert idx.maybe_append(100, BASE + 50)  # the reserved slot still takes the final entry
    idx.close()
