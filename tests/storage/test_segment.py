"""Segment: append through writev, header walks, lookups at boundaries, recover, truncate."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clients.records.batch import iter_batches
from clients.records.record import build_batch
from storage.config import LogConfig
from storage.errors import StorageError
from storage.segment import Segment

BASE = 500
CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=300, segment_index_bytes=4096)


def _batch(offset: int, n: int, ts: int, value_size: int = 40) -> bytes:
    return build_batch([(None, b"v" * value_size, ts, ())] * n, base_offset=offset)


def _filled(tmp_path: Path, batches: int = 30) -> tuple[Segment, list[tuple[int, int, int]]]:
    """A segment holding ``batches`` batches of 3 records; returns (pos, base, size) each."""
    seg = Segment(tmp_path, BASE, CONFIG, create=True, now_ms=0)
    seg.make_active()
    layout = []
    offset = BASE
    for i in range(batches):
        data = _batch(offset, 3, ts=1000 + 10 * i)
        seg.append([data[:16], memoryview(data)[16:]], len(data),
                   [(offset, offset + 2, 1000 + 10 * i, len(data))], now_ms=5)
        layout.append((seg.size - len(data), offset, len(data)))
        offset += 3
    return seg, layout


def test_append_writes_contiguous_batches_and_sparse_index(tmp_path: Path) -> None:
    seg, layout = _filled(tmp_path)
    data = seg.read_bytes(0, seg.size)
    assert [(p, h.base_offset) for p, h in iter_batches(data)] == [(p, b) for p, b, _ in layout]
    assert seg.next_offset == BASE + 90
    assert seg.rolling_ms == 5
    entries = seg.index.to_array()
    assert entries["pos"][0] == 0 and entries["rel"][0] == 0
    # one entry per >= 300 bytes of log
    gaps = entries["pos"][1:] - entries["pos"][:-1]
    assert len(entries) > 3 and (gaps >= 300).all()
    seg.close()


def test_find_batch_at_every_offset(tmp_path: Path) -> None:
    seg, layout = _filled(tmp_path)
    for pos, base, size in layout:
        for offset in (base, base + 1, base + 2):
            found = seg.find_batch(offset)
            assert found is not None
            assert (found.position, found.base_offset, found.size) == (pos, base, size)
    assert seg.find_batch(BASE + 90) is None
    first = seg.find_batch(0)  # below the base: the first batch
    assert first is not None and first.position == 0
    seg.close()


def test_end_position_and_boundaries(tmp_path: Path) -> None:
    seg, layout = _filled(tmp_path)
    assert seg.end_position(BASE + 90) == seg.size
    assert seg.end_position(BASE + 3) == layout[1][0]
    assert seg.end_position(BASE + 4) == layout[1][0]  # batch 1 holds offset 4: excluded
    size = layout[0][2]
    assert seg.boundary_at_or_before(size * 5 + 3, 0) == size * 5
    assert seg.boundary_at_or_before(size * 5, 0) == size * 5
    assert seg.boundary_at_or_before(size - 1, 0) == 0
    seg.close()


def test_find_batch_from_a_known_position_matches_the_indexed_walk(tmp_path: Path) -> None:
    """``from_position`` (a boundary at or before the batch sought, e.g. where a read
    starts) only shortens the walk: the same batch as from the index, max timestamp too."""
    seg, layout = _filled(tmp_path)
    for i, (pos, base, _size) in enumerate(layout):
        for start_pos, _b, _s in layout[: i + 1]:
            for offset in (base, base + 2):
                assert seg.find_batch(offset, start_pos) == seg.find_batch(offset)
                assert seg.find_batch(offset, start_pos).max_timestamp == 1000 + 10 * i
        assert seg.end_position(base, layout[0][0]) == pos
    assert seg.end_position(BASE + 90, layout[-1][0]) == seg.size
    seg.close()


def test_find_batch_raises_at_a_bad_header_it_reaches(tmp_path: Path) -> None:
    seg, layout = _filled(tmp_path, batches=3)
    with open(seg.log_path, "r+b") as f:
        f.seek(layout[1][0] + 16)
        f.write(b"\x07")  # batch 1's magic
    assert seg.find_batch(BASE + 1) is not None  # batch 0: found before the damage
    with pytest.raises(StorageError, match="no batch header"):
        seg.find_batch(BASE + 4)
    seg.close()


def test_find_timestamp(tmp_path: Path) -> None:
    seg, layout = _filled(tmp_path)
    found = seg.find_timestamp(1000 + 10 * 17 - 3)
    assert found is not None and found.base_offset == layout[17][1]
    earliest = seg.find_timestamp(0)
    assert earliest is not None and earliest.base_offset == BASE
    assert seg.find_timestamp(1000 + 10 * 29 + 1) is None
    seg.close()


def test_recover_rebuilds_identical_indexes_and_truncates_torn_tail(tmp_path: Path) -> None:
    seg, layout = _filled(tmp_path)
    seg.close()  # writes the final time entry and trims
    reopened = Segment(tmp_path, BASE, CONFIG, create=False, now_ms=0)
    offsets, times = reopened.index.to_array(), reopened.time_index.to_array()
    scan = reopened.recover(BASE)
    assert scan.error is None and scan.batches == 30
    assert (reopened.index.to_array() == offsets).all()
    assert (reopened.time_index.to_array() == times).all()
    reopened.close()
    # tear the last batch
    torn_at = layout[-1][0] + 20
    os.truncate(tmp_path / f"{BASE:020d}.log", torn_at)
    torn = Segment(tmp_path, BASE, CONFIG, create=False, now_ms=0)
    scan = torn.recover(BASE)
    assert scan.error is not None and "torn" in scan.error
    assert torn.size == layout[-1][0]
    assert torn.next_offset == layout[-1][1]
    torn.close()


def test_truncate_to_mid_batch_drops_whole_batch(tmp_path: Path) -> None:
    seg, layout = _filled(tmp_path)
    dropped = seg.truncate_to(layout[10][1] + 1)
    assert dropped == layout[10][1]
    assert seg.size == layout[10][0]
    assert seg.next_offset == layout[10][1]
    assert seg.max_timestamp == 1000 + 10 * 9
    assert seg.index.last_position < seg.size
    assert seg.truncate_to(10**9) is None
    seg.close()


def test_find_batch_in_the_last_appended_batch_walks_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower's (or a tailing reader's) read starts in the batch last appended: it is
    found without a header walk, and forgotten by a cut and by a rescan."""
    import storage.segment as segment_module

    seg, layout = _filled(tmp_path)
    real_walk = segment_module._walk_to
    walks: list[int] = []

    def counted(s: Segment, offset: int, pos: int) -> object:
        walks.append(offset)
        return real_walk(s, offset, pos)

    monkeypatch.setattr(segment_module, "_walk_to", counted)
    pos, base, size = layout[-1]
    for offset in (base, base + 2):
        found = seg.find_batch(offset)
        assert found is not None and (found.position, found.base_offset, found.size) == (
            pos, base, size)
    assert walks == []
    assert seg.find_batch(layout[-2][1]) is not None and walks == [layout[-2][1]]
    # cut into the last batch: the offsets it held are gone, not served from memory
    seg.truncate_to(base)
    assert seg.find_batch(base) is None
    # appended again at the same offsets, other bytes: the new batch is found
    data = _batch(base, 3, ts=7, value_size=10)
    seg.append([data], len(data), [(base, base + 2, 7, len(data))], now_ms=5)
    found = seg.find_batch(base + 1)
    assert found is not None and (found.position, found.size) == (pos, len(data))
    seg.recover(BASE)
    walks.clear()
    found = seg.find_batch(base + 1)
    assert walks == [base + 1] and found is not None and found.position == pos
    seg.close()
