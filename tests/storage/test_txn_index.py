"""TxnIndex (storage.index.txn_index): Kafka's .txnindex file, lazily created, append in
last-offset order, collect by range, truncation, and the sanity check of a damaged file."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from storage.errors import CorruptIndexError
from storage.index.txn_index import ENTRY, AbortedTxn, TxnIndex

# as a partition writes them: each LSO is the first offset of the earliest other open
# transaction (producer 8's from 105, then producer 7's second from 115), else last + 1
ENTRIES = [
    AbortedTxn(producer_id=7, first_offset=100, last_offset=110, last_stable_offset=105),
    AbortedTxn(producer_id=8, first_offset=105, last_offset=120, last_stable_offset=115),
    AbortedTxn(producer_id=7, first_offset=115, last_offset=130, last_stable_offset=131),
]


def filled(tmp_path: Path) -> TxnIndex:
    index = TxnIndex(tmp_path / "00000000000000000100.txnindex", 100)
    for entry in ENTRIES:
        index.append(entry)
    return index


def test_the_file_appears_with_the_first_entry_in_kafkas_format(tmp_path: Path) -> None:
    index = TxnIndex(tmp_path / "00000000000000000100.txnindex", 100)
    assert index.entries == [] and not index.path.exists()
    index.append(ENTRIES[0])
    data = index.path.read_bytes()
    assert len(data) == 34
    assert data == struct.pack(">hqqqq", 0, 7, 100, 110, 105)
    index.close()
    assert TxnIndex(index.path, 100).entries == [ENTRIES[0]]


def test_entries_survive_a_reopen_and_a_flush(tmp_path: Path) -> None:
    index = filled(tmp_path)
    index.flush()
    index.close()
    again = TxnIndex(index.path, 100)
    again.sanity_check()
    assert again.entries == ENTRIES
    assert len(index.path.read_bytes()) == 3 * ENTRY.size


@pytest.mark.parametrize("entry", [
    AbortedTxn(9, 125, 130, 131),  # last offset not above the last entry's
    AbortedTxn(9, 140, 135, 141),  # first after last
])
def test_appends_out_of_order_are_refused(tmp_path: Path, entry: AbortedTxn) -> None:
    index = filled(tmp_path)
    with pytest.raises(ValueError, match="increasing last_offset"):
        index.append(entry)
    assert index.entries == ENTRIES and len(index.path.read_bytes()) == 3 * ENTRY.size


def test_an_entry_below_the_segment_base_is_refused(tmp_path: Path) -> None:
    index = TxnIndex(tmp_path / "x.txnindex", 100)
    with pytest.raises(ValueError):
        index.append(AbortedTxn(1, 90, 99, 100))


def test_collect_by_range_and_completeness(tmp_path: Path) -> None:
    index = filled(tmp_path)
    # last_offset >= fetch offset and first_offset < upper bound
    assert index.collect(0, 100) == ([], True)  # the first entry's LSO 105 >= 100
    assert index.collect(111, 1000) == (ENTRIES[1:], False)
    assert index.collect(110, 106) == (ENTRIES[:2], True)  # the second's LSO 115 >= 106
    assert index.collect(121, 116) == (ENTRIES[2:], True)
    assert index.collect(131, 200) == ([], False)


def test_truncate_to_drops_entries_ending_at_or_after(tmp_path: Path) -> None:
    index = filled(tmp_path)
    index.truncate_to(121)
    assert index.entries == ENTRIES[:2]
    assert len(index.path.read_bytes()) == 2 * ENTRY.size
    index.append(AbortedTxn(9, 121, 125, 126))  # appends go on after the cut
    assert TxnIndex(index.path, 100).entries == [*ENTRIES[:2], AbortedTxn(9, 121, 125, 126)]
    index.truncate_to(100)
    assert index.entries == [] and not index.path.exists()


def test_replace_entries_and_delete(tmp_path: Path) -> None:
    index = filled(tmp_path)
    index.replace_entries(ENTRIES[1:])
    assert TxnIndex(index.path, 100).entries == ENTRIES[1:]
    index.replace_entries([])
    assert not index.path.exists()
    index.append(ENTRIES[0])
    index.delete()
    assert not index.path.exists() and index.entries == []


@pytest.mark.parametrize(("damage", "message"), [
    (lambda data: data + b"\x00", "not a multiple of the entry size 34"),
    (lambda data: data[:34] + b"\x00\x01" + data[36:], "entry 1 has version 1"),
    (lambda data: data[34:68] + data[:34] + data[68:], "entry 1 .* out of order"),
    (lambda data: struct.pack(">hqqqq", 0, 1, 50, 99, 100) + data, "entry 0 .* out of order"),
    (lambda data: struct.pack(">hqqqq", 0, 1, 105, 104, 100), "entry 0 .* out of order"),
])
def test_the_sanity_check_finds_a_damaged_file(tmp_path: Path, damage, message: str) -> None:
    index = filled(tmp_path)
    index.close()
    index.path.write_bytes(damage(index.path.read_bytes()))
    with pytest.raises(CorruptIndexError, match=message):
        TxnIndex(index.path, 100).sanity_check()
    with pytest.raises(CorruptIndexError):
        index.sanity_check()
