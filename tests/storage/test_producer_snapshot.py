"""Producer-state snapshot files: format, atomic writes, corruption handling, retention."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.producer_snapshot import (
    CorruptProducerSnapshotError,
    SnapshotBatch,
    SnapshotEntry,
    decode_snapshot,
    delete_snapshots_above,
    encode_snapshot,
    list_snapshot_offsets,
    load_latest_snapshot,
    read_snapshot,
    retain_latest_snapshots,
    snapshot_path,
    write_snapshot,
)

ENTRIES = [
    SnapshotEntry(7, 2, (SnapshotBatch(0, 4, 100, 104, 1_000),
                         SnapshotBatch(5, 5, 105, 105, 1_001))),
    SnapshotEntry(2**40, 0, ()),
]

BATCH = st.builds(SnapshotBatch, st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1),
                  st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1),
                  st.integers(-(2**63), 2**63 - 1))
ENTRY = st.builds(SnapshotEntry, st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1),
                  st.lists(BATCH, max_size=5).map(tuple))


def test_layout_is_the_documented_byte_table() -> None:
    data = encode_snapshot(42, ENTRIES)
    magic, version, offset, count, _crc = struct.unpack_from(">4shqII", data)
    assert (magic, version, offset, count) == (b"MKPS", 1, 42, 2)
    assert struct.unpack_from(">qhB", data, 22) == (7, 2, 2)
    assert struct.unpack_from(">iiqqq", data, 33) == (0, 4, 100, 104, 1_000)
    assert len(data) == 22 + 11 + 2 * 32 + 11


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**63 - 1), st.lists(ENTRY, max_size=8))
def test_round_trip(offset: int, entries: list[SnapshotEntry]) -> None:
    assert decode_snapshot(encode_snapshot(offset, entries)) == (offset, entries)


def test_encode_refuses_values_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="at most 5"):
        encode_snapshot(0, [(1, 0, [(0, 0, 0, 0, 0)] * 6)])
    with pytest.raises(ValueError, match="producer 1"):
        encode_snapshot(0, [(1, 2**15, [])])
    with pytest.raises(ValueError, match="offset"):
        encode_snapshot(-1, [])


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda d: d[:10], "shorter than the 22-byte header"),
    (lambda d: b"XXXX" + d[4:], "magic"),
    (lambda d: d[:4] + b"\x00\x09" + d[6:], "version 9"),
    (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "CRC-32C mismatch"),
    (lambda d: d[:-5], "CRC-32C mismatch"),
])
def test_corruption_is_named(damage, reason: str) -> None:
    with pytest.raises(CorruptProducerSnapshotError, match=reason):
        decode_snapshot(damage(encode_snapshot(5, ENTRIES)), where="f.snapshot")


def test_bad_counts_behind_a_valid_crc_are_named() -> None:
    body = struct.pack(">qhB", 1, 0, 9)  # 9 batches: more than 5
    data = struct.pack(">4shqII", b"MKPS", 1, 0, 1, crc32c(body)) + body
    with pytest.raises(CorruptProducerSnapshotError, match="9 batches"):
        decode_snapshot(data)
    body = struct.pack(">qhB", 1, 0, 0)
    data = struct.pack(">4shqII", b"MKPS", 1, 0, 2, crc32c(body)) + body
    with pytest.raises(CorruptProducerSnapshotError, match="entry 1 of 2 is cut off"):
        decode_snapshot(data)


def test_files_are_named_by_offset_and_written_atomically(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path, 1234, ENTRIES)
    assert path == snapshot_path(tmp_path, 1234)
    assert path.name == "00000000000000001234.snapshot"
    assert not list(tmp_path.glob("*.tmp"))
    assert read_snapshot(path) == (1234, ENTRIES)
    (tmp_path / "00000000000000000099.snapshot.tmp").write_bytes(b"torn")  # crash leftover
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n0\n")
    assert list_snapshot_offsets(tmp_path) == [1234]
    path.rename(snapshot_path(tmp_path, 99))  # a header that does not match its name
    with pytest.raises(CorruptProducerSnapshotError, match="does not match the file name"):
        read_snapshot(snapshot_path(tmp_path, 99))


def test_latest_at_or_below_wins_and_corrupt_ones_are_skipped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for offset in (10, 20, 30):
        write_snapshot(tmp_path, offset, [(offset, 0, [])])
    assert load_latest_snapshot(tmp_path, 25) == (20, [SnapshotEntry(20, 0, ())])
    assert load_latest_snapshot(tmp_path, 9) is None
    bad = snapshot_path(tmp_path, 30)
    bad.write_bytes(bad.read_bytes()[:-1])
    with caplog.at_level(logging.WARNING, logger="storage.producer_snapshot"):
        assert load_latest_snapshot(tmp_path, 100) == (20, [SnapshotEntry(20, 0, ())])
    assert f"ignoring producer snapshot {bad}" in caplog.text
    assert "CRC-32C mismatch" in caplog.text
    assert list_snapshot_offsets(tmp_path) == [10, 20]  # the corrupt one is gone


def test_truncation_and_retention_delete_the_right_files(tmp_path: Path) -> None:
    for offset in (0, 5, 10, 15, 20):
        write_snapshot(tmp_path, offset, [])
    assert delete_snapshots_above(tmp_path, 10) == 2
    assert list_snapshot_offsets(tmp_path) == [0, 5, 10]
    assert retain_latest_snapshots(tmp_path, 2) == 1
    assert list_snapshot_offsets(tmp_path) == [5, 10]
    assert list_snapshot_offsets(tmp_path / "missing") == []
    with pytest.raises(ValueError):
        retain_latest_snapshots(tmp_path, 0)
