"""Aborted-transaction index of one segment (``<base_offset:020d>.txnindex``), Kafka's format.

Every transaction that a producer aborted and that wrote data to this partition gets one
entry, in the segment that holds its ABORT marker (the entry's ``last_offset``).  A
``read_committed`` fetch returns the entries that overlap what it reads, so the consumer
can drop those producers' records between ``first_offset`` and ``last_offset``.

File format (big-endian, no header; ``entries * 34`` bytes, entries in the order they
were appended, which is increasing ``last_offset``)::

    offset  size  field               note
    0       2     version             int16, 0
    2       8     producer_id         int64
    10      8     first_offset        int64, the transaction's first offset here
    18      8     last_offset         int64, its ABORT marker's offset
    26      8     last_stable_offset  int64, the LSO right after the marker: the first
                                      offset of the earliest other ongoing transaction,
                                      else ``last_offset + 1`` (Kafka's rule)
    (repeated)

The file is created on the first entry (most segments never have one, and then have no
file), appended with ``write(2)`` (a process crash keeps what was written; a power cut
may lose what was not fsync'd, as for the ``.log``: :meth:`TxnIndex.flush` with the
segment), truncated with the segment (:meth:`TxnIndex.truncate_to`) and deleted with it.
Entries are derived data: a file lost or damaged is rebuilt from the log by
:mod:`storage.log.txn_rebuild`.  :meth:`TxnIndex.sanity_check` finds a damaged file: a
size that is not a multiple of 34, a version other than 0, ``first_offset >
last_offset``, a ``last_offset`` below the segment's base offset or not increasing.

:meth:`TxnIndex.collect` answers Kafka's ``collectAbortedTxns``: the entries with
``last_offset >= fetch_offset`` and ``first_offset < upper_bound_offset``, and whether
the search is complete (an entry whose ``last_stable_offset >= upper_bound_offset``:
no later-aborted transaction can start below the bound, so later segments need not be
read).

Costs: the file is read once, on first use (O(entries)), and the entries kept in memory
(34 bytes of file, one small tuple each); append O(1) + one ``write``; collect O(log n +
answer) (bisect on ``last_offset``); truncate O(log n) + one ``ftruncate``; sanity check
O(entries).  Not thread-safe: owned by the segment that owns it (one log's thread).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
from pathlib import Path
from typing import NamedTuple

from storage.errors import CorruptIndexError, StorageError
from storage.file_io import atomic_write_bytes, write_all

__all__ = ["ENTRY", "TXN_INDEX_VERSION", "AbortedTxn", "TxnIndex"]

ENTRY = struct.Struct(">hqqqq")
TXN_INDEX_VERSION = 0
assert ENTRY.size == 34


class AbortedTxn(NamedTuple):
    """One ``.txnindex`` entry: an aborted transaction of ``producer_id`` (see above)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndex:
    """The aborted transactions of the segment based at ``base_offset`` (file at ``path``)."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None  # None: the file is not read yet
        self._last_offsets: list[int] = []
        self._fd = -1
        self._dirty = False

    # -- reading -----------------------------------------------------------------------

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry, in ``last_offset`` order (read the file on first use; a damaged
        file raises :class:`CorruptIndexError`).  Read it, never change it."""
        if self._entries is None:
            self._entries = self._read()
            self._last_offsets = [e.last_offset for e in self._entries]
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"{self.path}: cannot read: {exc}") from exc
        if len(data) % ENTRY.size:
            raise CorruptIndexError(
                f"{self.path}: size {len(data)} is not a multiple of the entry size {ENTRY.size}")
        out: list[AbortedTxn] = []
        last = self.base_offset - 1
        for i, (version, *fields) in enumerate(ENTRY.iter_unpack(data)):
            entry = AbortedTxn(*fields)
            if version != TXN_INDEX_VERSION:
                raise CorruptIndexError(f"{self.path}: entry {i} has version {version}, "
                                        f"expected {TXN_INDEX_VERSION}")
            if entry.first_offset > entry.last_offset or entry.last_offset <= last:
                raise CorruptIndexError(
                    f"{self.path}: entry {i} {tuple(entry)} is out of order (the previous "
                    f"last offset, or the segment's base - 1, is {last})")
            last = entry.last_offset
            out.append(entry)
        return out

    def sanity_check(self) -> None:
        """Read the file again and raise :class:`CorruptIndexError` if it is damaged (the
        rules in the module docstring).  O(entries)."""
        self._entries = None
        _ = self.entries

    def collect(self, fetch_offset: int, upper_bound_offset: int
                ) -> tuple[list[AbortedTxn], bool]:
        """The entries with ``last_offset >= fetch_offset`` and ``first_offset <
        upper_bound_offset``, and whether the search is complete (module docstring)."""
        entries = self.entries
        found: list[AbortedTxn] = []
        for entry in entries[bisect.bisect_left(self._last_offsets, fetch_offset):]:
            if entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    # -- writing -----------------------------------------------------------------------

    def append(self, entry: AbortedTxn) -> None:
        """Add ``entry`` (its ``last_offset`` above every entry's and at or above the
        segment's base, ``first_offset <= last_offset``: else ValueError); creates the
        file on the first entry."""
        entries = self.entries
        last = entries[-1].last_offset if entries else self.base_offset - 1
        if entry.last_offset <= last or entry.first_offset > entry.last_offset:
            raise ValueError(f"{self.path}: cannot append {entry} after last offset {last} "
                             "(entries go in increasing last_offset, first <= last)")
        data = ENTRY.pack(TXN_INDEX_VERSION, *entry)
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                               0o644)
        try:
            write_all(self._fd, data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, len(entries) * ENTRY.size)
            raise StorageError(f"append to {self.path} failed: {exc}") from exc
        entries.append(entry)
        self._last_offsets.append(entry.last_offset)
        self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with ``last_offset >= offset`` (the segment was cut there)."""
        entries = self.entries
        keep = bisect.bisect_left(self._last_offsets, offset)
        if keep == len(entries):
            return
        del entries[keep:]
        del self._last_offsets[keep:]
        self._close_fd()
        if keep:
            os.truncate(self.path, keep * ENTRY.size)
            self._dirty = True
        else:
            self.path.unlink(missing_ok=True)

    def replace_entries(self, entries: list[AbortedTxn]) -> None:
        """Replace the file with ``entries`` (a rebuild; written atomically and fsync'd;
        none: no file)."""
        self._close_fd()
        if entries:
            atomic_write_bytes(self.path, b"".join(ENTRY.pack(TXN_INDEX_VERSION, *e)
                                                   for e in entries))
        else:
            self.path.unlink(missing_ok=True)
        self._entries = list(entries)
        self._last_offsets = [e.last_offset for e in entries]
        self._dirty = False

    # -- lifecycle ---------------------------------------------------------------------

    def flush(self) -> None:
        """fsync what was appended since the last flush."""
        if self._dirty:
            if self._fd >= 0:
                os.fsync(self._fd)
            elif self.path.exists():
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self._dirty = False

    def close(self) -> None:
        """Close the descriptor (the segment flushed first, if it had to)."""
        self._close_fd()

    def delete(self) -> None:
        self._close_fd()
        self.path.unlink(missing_ok=True)
        self._entries, self._last_offsets, self._dirty = [], [], False

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __repr__(self) -> str:
        count = "?" if self._entries is None else len(self._entries)
        return f"TxnIndex({self.path.name}, entries={count})"
