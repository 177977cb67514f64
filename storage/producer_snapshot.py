"""Producer-state snapshot files: ``<partition dir>/<20-digit offset>.snapshot``.

A snapshot named ``N`` holds the idempotent-producer state built from every batch below
offset ``N`` (the log end offset when it was taken).  On recovery the partition loads
the latest snapshot at or below its log end offset and replays the batches from ``N``
(:mod:`replication.producer_state_store`).  This module stores plain entries and knows nothing of
the rules (storage does not import replication).

File format (all integers big-endian):

| offset | size | field           | meaning                                              |
|--------|------|-----------------|------------------------------------------------------|
| 0      | 4    | magic           | ``b"MKPS"``                                          |
| 4      | 2    | version         | int16, 1 or 2 (2: entries carry transaction state)   |
| 6      | 8    | offset          | int64, the snapshot offset (equals the file name)    |
| 14     | 4    | producer_count  | uint32                                               |
| 18     | 4    | crc             | uint32 CRC-32C of every byte after this field        |
| 22     | ...  | producers       | ``producer_count`` entries, each:                    |
|        | 8    |   producer_id   | int64 >= 0                                           |
|        | 2    |   epoch         | int16 >= 0                                           |
|        | 8    |   txn_first     | version 2 only: int64 >= -1, first offset of the     |
|        |      |                 | producer's open transaction (-1: none)               |
|        | 4    |   coord_epoch   | version 2 only: int32 >= -1, coordinator epoch of    |
|        |      |                 | its last transaction marker (-1: none)               |
|        | 1    |   batch_count   | uint8, 0..5                                          |
|        | 32 x |   batches       | per batch: first_seq int32, last_seq int32,          |
|        |      |                 | first_offset int64, last_offset int64,               |
|        |      |                 | timestamp_ms int64 (oldest batch first)              |

Version 1 (before transactions) is still read, as entries without transaction state, and
still written when no producer has any (so such files stay readable by older brokers);
version 2 otherwise.

Writes go to ``<name>.tmp`` and are renamed over the final name; a durable write fsyncs
the file before the rename and the directory after it. The broker writes them without
fsync while it runs (on a segment roll and on its checkpoint timer: an fsync per
partition would stall its event loop) and durably at a clean shutdown: a snapshot is
only a shortcut, and one a crash lost or tore is skipped as below. A snapshot that fails
any check (size, magic, version, CRC, offset that does not match its name, counts)
raises :class:`CorruptProducerSnapshotError`; :func:`load_latest_snapshot` logs it (path
and reason), deletes the file and falls back to the next older snapshot, so the state is
rebuilt from the log instead.

Costs: encode/decode O(producers); listing O(files in the partition directory).
Thread/process safety: none; the partition that owns the directory writes it.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from crc32c import crc32c

from clients.protocol.errors import ErrorCode, MiniKafkaError
from storage.file_io import atomic_write_bytes, fsync_dir

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
MAGIC = b"MKPS"
VERSION = 1  # no producer has transaction state
VERSION_TXN = 2  # entries carry txn_first and coord_epoch
MAX_BATCHES = 5
_HEADER = struct.Struct(">4shqII")
_ENTRY = struct.Struct(">qhB")
_ENTRY_TXN = struct.Struct(">qhqiB")
_BATCH = struct.Struct(">iiqqq")
_INT64_MAX = 2**63 - 1


class SnapshotBatch(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


class SnapshotEntry(NamedTuple):
    """An entry of a version-1 file (no transaction state)."""

    producer_id: int
    epoch: int
    batches: tuple[SnapshotBatch, ...]


class SnapshotTxnEntry(NamedTuple):
    """An entry of a version-2 file."""

    producer_id: int
    epoch: int
    batches: tuple[SnapshotBatch, ...]
    current_txn_first_offset: int  # -1: no open transaction
    coordinator_epoch: int  # -1: no marker seen


Snapshot = tuple[int, list[SnapshotEntry | SnapshotTxnEntry]]  # (offset, entries)


class CorruptProducerSnapshotError(MiniKafkaError):
    """A snapshot file cannot be trusted; ``str()`` names the file and the reason."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


def snapshot_path(directory: str | Path, offset: int) -> Path:
    return Path(directory) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


# (producer_id, epoch, batches) or (producer_id, epoch, batches, current_txn_first_offset,
# coordinator_epoch), as replication.producer_state's snapshot() gives them
EntryTuple = Sequence[Any]


def encode_snapshot(offset: int, entries: Iterable[EntryTuple]) -> bytes:
    """The file bytes for ``entries`` (:data:`EntryTuple`; version 2 if one has
    transaction state); bad values raise ValueError (a bug in the caller, never input
    from disk)."""
    if not 0 <= offset <= _INT64_MAX:
        raise ValueError(f"snapshot offset must be in [0, 2**63-1], got {offset}")
    rows = [(e[0], e[1], e[2], *(e[3:5] if len(e) >= 5 else (-1, -1))) for e in entries]
    version = VERSION_TXN if any(r[3] != -1 or r[4] != -1 for r in rows) else VERSION
    body = bytearray()
    for producer_id, epoch, batches, txn_first, coordinator_epoch in rows:
        if len(batches) > MAX_BATCHES:
            raise ValueError(f"producer {producer_id}: {len(batches)} batches, at most "
                             f"{MAX_BATCHES}")
        try:
            body += (_ENTRY_TXN.pack(producer_id, epoch, txn_first, coordinator_epoch,
                                     len(batches)) if version == VERSION_TXN
                     else _ENTRY.pack(producer_id, epoch, len(batches)))
            for b in batches:
                body += _BATCH.pack(*b)
        except struct.error as exc:
            raise ValueError(f"producer {producer_id}: {exc}") from None
    return _HEADER.pack(MAGIC, version, offset, len(rows), crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes | bytearray | memoryview, *, where: str = "snapshot",
                    expected_offset: int | None = None) -> Snapshot:
    """``(offset, entries)`` of a snapshot file's bytes; anything wrong raises
    :class:`CorruptProducerSnapshotError` naming ``where`` and the reason."""
    def bad(reason: str) -> CorruptProducerSnapshotError:
        return CorruptProducerSnapshotError(f"{where}: {reason}")

    if len(data) < _HEADER.size:
        raise bad(f"{len(data)} bytes, shorter than the {_HEADER.size}-byte header")
    magic, version, offset, count, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise bad(f"magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version not in (VERSION, VERSION_TXN):
        raise bad(f"version {version}, expected {VERSION} or {VERSION_TXN}")
    if expected_offset is not None and offset != expected_offset:
        raise bad(f"header offset {offset} does not match the file name's {expected_offset}")
    actual = crc32c(memoryview(data)[_HEADER.size:])
    if actual != crc:
        raise bad(f"CRC-32C mismatch (stored {crc:#010x}, computed {actual:#010x})")
    entries: list[SnapshotEntry | SnapshotTxnEntry] = []
    pos, end = _HEADER.size, len(data)
    entry = _ENTRY_TXN if version == VERSION_TXN else _ENTRY
    txn_first = coordinator_epoch = -1
    for i in range(count):
        if end - pos < entry.size:
            raise bad(f"entry {i} of {count} is cut off at byte {pos}")
        if version == VERSION_TXN:
            producer_id, epoch, txn_first, coordinator_epoch, n = entry.unpack_from(data, pos)
        else:
            producer_id, epoch, n = entry.unpack_from(data, pos)
        pos += entry.size
        if producer_id < 0 or epoch < 0 or n > MAX_BATCHES:
            raise bad(f"entry {i}: producer id {producer_id}, epoch {epoch}, {n} batches "
                      f"(need id >= 0, epoch >= 0, at most {MAX_BATCHES} batches)")
        if txn_first < -1 or coordinator_epoch < -1:
            raise bad(f"entry {i}: transaction first offset {txn_first}, coordinator epoch "
                      f"{coordinator_epoch} (need >= -1)")
        if end - pos < n * _BATCH.size:
            raise bad(f"entry {i}: {n} batches cut off at byte {pos}")
        batches = tuple(SnapshotBatch(*_BATCH.unpack_from(data, pos + k * _BATCH.size))
                        for k in range(n))
        pos += n * _BATCH.size
        entries.append(SnapshotTxnEntry(producer_id, epoch, batches, txn_first,
                                        coordinator_epoch) if version == VERSION_TXN
                       else SnapshotEntry(producer_id, epoch, batches))
    if pos != end:
        raise bad(f"{end - pos} bytes after the last of {count} entries")
    return offset, entries


def write_snapshot(directory: str | Path, offset: int, entries: Iterable[EntryTuple], *,
                   durable: bool = True) -> Path:
    """Write the snapshot for ``offset`` (temp file, rename; fsync'd with its directory
    when ``durable``)."""
    path = snapshot_path(directory, offset)
    atomic_write_bytes(path, encode_snapshot(offset, entries), durable=durable)
    return path


def read_snapshot(path: str | Path) -> Snapshot:
    path = Path(path)
    expected = _offset_of(path.name)
    return decode_snapshot(path.read_bytes(), where=str(path), expected_offset=expected)


def _offset_of(name: str) -> int | None:
    stem = name[: -len(SNAPSHOT_SUFFIX)] if name.endswith(SNAPSHOT_SUFFIX) else ""
    if len(stem) != 20 or not stem.isascii() or not stem.isdigit():
        return None
    return int(stem)


def list_snapshot_offsets(directory: str | Path) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending (other files ignored)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(o for o in map(_offset_of, names) if o is not None)


def delete_snapshots(directory: str | Path, offsets: Iterable[int], *,
                     durable: bool = True) -> int:
    """Delete the snapshots at ``offsets`` (fsyncing the directory once when ``durable``:
    an old snapshot that comes back after a crash is still valid); returns count."""
    deleted = 0
    for offset in offsets:
        try:
            snapshot_path(directory, offset).unlink()
            deleted += 1
        except FileNotFoundError:
            pass
    if deleted and durable:
        fsync_dir(directory)
    return deleted


def delete_snapshots_above(directory: str | Path, offset: int) -> int:
    """Delete every snapshot whose offset is > ``offset`` (after a truncation)."""
    return delete_snapshots(directory, [o for o in list_snapshot_offsets(directory)
                                        if o > offset])


def retain_latest_snapshots(directory: str | Path, count: int, *, keep: int = -1,
                            durable: bool = True) -> int:
    """Keep the ``count`` newest snapshots and the one at offset ``keep`` (the newest known
    to be durable, while newer ones may not be), delete the older ones; returns deleted."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    offsets = list_snapshot_offsets(directory)
    return delete_snapshots(directory, [o for o in offsets[:-count] if o != keep],
                            durable=durable)


def load_latest_snapshot(directory: str | Path, max_offset: int
                         ) -> Snapshot | None:
    """The newest readable snapshot with offset <= ``max_offset``, or None.

    A corrupt or unreadable one is logged with its path and reason, deleted, and the next
    older one is tried (the caller rebuilds the rest from the log).
    """
    for offset in reversed(list_snapshot_offsets(directory)):
        if offset > max_offset:
            continue
        path = snapshot_path(directory, offset)
        try:
            return read_snapshot(path)
        except (CorruptProducerSnapshotError, OSError) as exc:
            log.warning("ignoring producer snapshot %s (%s); rebuilding producer state from "
                        "the log", path, exc)
            delete_snapshots(directory, [offset])
    return None
