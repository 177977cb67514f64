"""Checkpoint files: round trips, atomic replace, precise errors for corrupt files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.protocol.errors import ErrorCode
from storage.checkpoint import (
    INT32_MAX,
    INT64_MAX,
    CorruptCheckpointError,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
)

TOPIC_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
topics = st.text(TOPIC_ALPHABET, min_size=1, max_size=249).filter(lambda t: t not in (".", ".."))
offset_maps = st.dictionaries(
    st.tuples(topics, st.integers(0, INT32_MAX)), st.integers(0, INT64_MAX), max_size=30
)


@st.composite
def epoch_entries(draw: st.DrawFn) -> list[tuple[int, int]]:
    epochs = sorted(draw(st.sets(st.integers(0, INT32_MAX), max_size=20)))
    starts = sorted(draw(st.lists(st.integers(0, INT64_MAX), min_size=len(epochs),
                                  max_size=len(epochs))))
    return list(zip(epochs, starts, strict=True))


@settings(max_examples=60, deadline=None)
@given(offsets=offset_maps)
def test_offset_checkpoint_round_trip(tmp_path_factory: pytest.TempPathFactory,
                                      offsets: dict[tuple[str, int], int]) -> None:
    path = tmp_path_factory.mktemp("ckpt") / "recovery-point-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write(offsets)
    assert checkpoint.read() == offsets
    assert not path.with_name(path.name + ".tmp").exists()


@settings(max_examples=60, deadline=None)
@given(entries=epoch_entries())
def test_leader_epoch_checkpoint_round_trip(tmp_path_factory: pytest.TempPathFactory,
                                            entries: list[tuple[int, int]]) -> None:
    path = tmp_path_factory.mktemp("ckpt") / "leader-epoch-checkpoint"
    checkpoint = LeaderEpochCheckpointFile(path)
    checkpoint.write(entries)
    assert checkpoint.read() == entries


def test_text_format_is_versioned_counted_and_sorted(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    OffsetCheckpointFile(path).write({("b-x", 1): 5, ("a", 10): 3, ("a", 2): 0})
    assert path.read_text() == "0\n3\na 2 0\na 10 3\nb-x 1 5\n"
    epochs = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(epochs).write([(0, 0), (3, 17), (4, 17)])
    assert epochs.read_text() == "0\n3\n0 0\n3 17\n4 17\n"


def test_missing_file_reads_as_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "nope").read() == {}
    assert LeaderEpochCheckpointFile(tmp_path / "nope").read() == []


def test_stray_temp_file_from_a_crash_is_ignored_and_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({("t", 0): 7})
    # A crash between writing the temp file and the rename leaves a half-written temp.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("0\n5\nt 0 9")
    assert checkpoint.read() == {("t", 0): 7}
    checkpoint.write({("t", 0): 8})
    assert checkpoint.read() == {("t", 0): 8}
    assert not tmp.exists()


def test_failure_before_rename_keeps_the_old_file(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({("t", 0): 1, ("t", 1): 2})

    def crash(src: object, dst: object) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        checkpoint.write({("t", 0): 100})
    monkeypatch.undo()
    assert checkpoint.read() == {("t", 0): 1, ("t", 1): 2}
    assert path.with_name(path.name + ".tmp").read_text() == "0\n1\nt 0 100\n"


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        (b"", 1, "empty"),
        (b"1\n0\n", 1, "unsupported version '1'"),
        (b"0\n", 2, "missing entry count"),
        (b"0\nx\n", 2, "entry count 'x' is not a non-negative integer"),
        (b"0\n-1\n", 2, "not a non-negative integer"),
        (b"0\n2\nt 0 1\n", 4, "count line says 2 entries but the file has 1"),
        (b"0\n1\nt 0 1\nt 1 2\n", 4, "count line says 1 entries but the file has 2"),
        (b"0\n2\nt 0 1\nt 0 2\n", 4, "duplicate entry for t-0"),
        (b"0\n1\nt 0 abc\n", 3, "offset 'abc' is not a non-negative integer"),
        (b"0\n1\nt 0 -5\n", 3, "offset '-5' is not a non-negative integer"),
        (b"0\n1\nt x 5\n", 3, "partition 'x'"),
        (b"0\n1\nt 0\n", 3, "expected 3 space-separated fields"),
        (b"0\n1\nt  0 1\n", 3, "expected 3 space-separated fields"),
        (b"0\n1\nt/x 0 1\n", 3, "outside [a-zA-Z0-9._-]"),
        (b"0\n1\nt 0 99999999999999999999\n", 3, "exceeds"),
        (b"0\n1\nt 0 1\n\xff\n", 4, "not valid UTF-8"),
    ],
)
def test_corrupt_offset_checkpoint_names_file_and_line(
    tmp_path: Path, content: bytes, line: int, reason: str
) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as info:
        OffsetCheckpointFile(path).read()
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert info.value.path == str(path)
    assert info.value.line == line
    assert f"{path}:{line}: " in str(info.value)
    assert reason in str(info.value)


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        (b"0\n2\n1 0\n1 5\n", 4, "duplicate entry for epoch 1"),
        (b"0\n2\n2 0\n1 5\n", 4, "epoch 1 follows epoch 2"),
        (b"0\n2\n1 10\n2 5\n", 4, "epoch 2 starts at 5, before epoch 1"),
        (b"0\n1\n1 2 3\n", 3, "expected 2 space-separated fields"),
        (b"0\n1\n1.5 0\n", 3, "epoch '1.5'"),
    ],
)
def test_corrupt_leader_epoch_checkpoint_names_file_and_line(
    tmp_path: Path, content: bytes, line: int, reason: str
) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as info:
        LeaderEpochCheckpointFile(path).read()
    assert str(info.value).startswith(f"KAFKA_STORAGE_ERROR: {path}:{line}: ")
    assert reason in str(info.value)


@pytest.mark.parametrize(
    ("offsets", "match"),
    [
        ({("has space", 0): 1}, "outside"),
        ({("", 0): 1}, "empty"),
        ({("t", -1): 1}, "partition"),
        ({("t", 0): -1}, "offset"),
        ({("t", 0): True}, "offset"),
    ],
)
def test_offset_write_rejects_what_it_could_not_read_back(
    tmp_path: Path, offsets: dict[tuple[str, int], int], match: str
) -> None:
    path = tmp_path / "c"
    with pytest.raises(ValueError, match=match):
        OffsetCheckpointFile(path).write(offsets)
    assert not path.exists()


@pytest.mark.parametrize(
    "entries", [[(1, 0), (1, 5)], [(2, 0), (1, 5)], [(1, 9), (2, 5)], [(-1, 0)], [(0, -3)]]
)
def test_leader_epoch_write_rejects_unordered_or_negative(
    tmp_path: Path, entries: list[tuple[int, int]]
) -> None:
    with pytest.raises(ValueError):
        LeaderEpochCheckpointFile(tmp_path / "e").write(entries)
