"""Sparse offset index of one segment (``<base_offset:020d>.index``) and its mmap base class.

File format (big-endian, no header; the file holds ``entries * 8`` meaningful bytes)::

    offset  size  field             note
    0       4     relative_offset   int32, batch base offset - segment base offset
    4       4     position          int32, byte position of that batch in the .log file
    (repeated; both columns strictly increasing)

One entry is written for the first batch of the segment and then for the first batch
after every ``index_interval_bytes`` of log, so a lookup lands at most ~one interval
before the batch it wants.  The active segment's index file is preallocated (sparse) to
``segment_index_bytes``, the page the next entries go to written out with write(2)
(``make_active``), and memory-mapped read/write; when the segment is rolled or the log
closed it is trimmed to the entries actually written.  Inactive indexes are mapped
read-only on first use.  After a crash the untrimmed zero tail is never trusted: the
segment is rescanned and its index rebuilt (indexes are derived data).

Costs: append O(1) (one ``struct.pack_into`` into the map); lookup O(log n) binary search
over the map with ``struct.unpack_from`` (numpy's searchsorted on a big-endian strided
column copies the column, O(n)); sanity check and truncation O(n) with numpy.

Not thread-safe: owned by the :class:`~storage.log.log.Log` that owns the segment.  Numpy
views over the map are created and dropped inside each method, because a live view makes
``mmap.close``/``resize`` fail with ``BufferError``.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import ClassVar

import numpy as np

from storage.errors import CorruptIndexError, StorageError
from storage.file_io import write_all

_INT32 = struct.Struct(">i")


class MappedIndex:
    """A file of fixed-size big-endian entries, memory-mapped, with a logical length."""

    ENTRY_SIZE: ClassVar[int]
    DTYPE: ClassVar[np.dtype]
    ENTRY: ClassVar[struct.Struct]
    KEY_AT: ClassVar[int]  # byte offset of the search key inside an entry
    KEY: ClassVar[struct.Struct]

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_index_bytes // self.ENTRY_SIZE
        self._mm: mmap.mmap | None = None
        self._writable = False
        self._entries = 0
        if path.exists():
            size = path.stat().st_size
            if size % self.ENTRY_SIZE:
                raise CorruptIndexError(
                    f"{path}: size {size} is not a multiple of the entry size {self.ENTRY_SIZE}"
                )
            self._entries = size // self.ENTRY_SIZE
        else:
            path.touch()
        self._load_last()

    # -- state -------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def is_writable(self) -> bool:
        return self._writable

    def make_active(self) -> None:
        """Preallocate the file to ``max_entries`` and map it read/write."""
        if self._writable:
            return
        self._unmap()
        size = max(self.max_entries, self._entries) * self.ENTRY_SIZE
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, size)
            # The rest of the page the next entries go to is written with write(2) first:
            # the first store through the map into a page of the sparse tail otherwise
            # allocates its block inside a page fault, 1.8 ms per index on the 2-core
            # test machine and ~20 ms while the journal is busy (a topic of 200 new
            # partitions: seconds of a follower's first Fetch answer).  Only bytes past
            # the entries, zeros already, are written.
            used = self._entries * self.ENTRY_SIZE
            page_end = min(size, (used // mmap.PAGESIZE + 1) * mmap.PAGESIZE)
            if page_end > used:
                os.pwrite(fd, bytes(page_end - used), used)
            self._mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
        finally:
            os.close(fd)  # the mmap keeps its own duplicate of the descriptor
        self._writable = True

    def resize(self, max_index_bytes: int) -> None:
        """Take a new ``segment_index_bytes`` (a topic config change, or the topic's
        config reaching a log opened with the broker's defaults): the bound on entries,
        and for the active index the preallocated file and its map (Kafka resizes the
        active segment's indexes the same way at load).  Entries already written stay;
        more than the new bound makes the index full (the log rolls at its next append)."""
        max_entries = max_index_bytes // self.ENTRY_SIZE
        if max_entries == self.max_entries:
            return
        self.max_entries = max_entries
        if self._writable:
            self._unmap()
            self.make_active()

    def trim(self) -> None:
        """Shrink the file to the written entries; later reads map it read-only."""
        self._unmap()
        os.truncate(self.path, self._entries * self.ENTRY_SIZE)

    def flush(self) -> None:
        if self._mm is not None and self._writable:
            self._mm.flush()

    def close(self) -> None:
        """Flush and trim (a clean close leaves exactly ``entries`` on disk)."""
        self.flush()
        self.trim()

    def abandon(self) -> None:
        """Drop the map without flushing or trimming (simulated crash)."""
        self._unmap()

    def delete(self) -> None:
        self._unmap()
        self.path.unlink(missing_ok=True)

    def _unmap(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self._writable = False

    def _map(self) -> mmap.mmap | None:
        """The current map (mapping read-only on first use); None when empty."""
        if self._mm is None and self._entries:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                self._mm = mmap.mmap(fd, self._entries * self.ENTRY_SIZE, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
        return self._mm

    # -- entries -----------------------------------------------------------------------

    def _append_raw(self, *fields: int) -> None:
        if self._entries >= self.max_entries:
            raise StorageError(f"{self.path}: index is full ({self.max_entries} entries)")
        if not self._writable:
            self.make_active()
        assert self._mm is not None
        self.ENTRY.pack_into(self._mm, self._entries * self.ENTRY_SIZE, *fields)
        self._entries += 1

    def entry(self, i: int) -> tuple[int, ...]:
        mm = self._map()
        if mm is None or not 0 <= i < self._entries:
            raise IndexError(f"{self.path}: entry {i} of {self._entries}")
        return self.ENTRY.unpack_from(mm, i * self.ENTRY_SIZE)

    def _floor_slot(self, key: int, strict: bool = False) -> int:
        """Index of the last entry whose key is <= key (< key if strict); -1 if none."""
        mm = self._map()
        if mm is None:
            return -1
        unpack, size, at = self.KEY.unpack_from, self.ENTRY_SIZE, self.KEY_AT
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) >> 1
            k = unpack(mm, mid * size + at)[0]
            if k < key or (k == key and not strict):
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def to_array(self) -> np.ndarray:
        """A native-order copy of the entries (safe to keep)."""
        mm = self._map()
        if mm is None:
            return np.zeros(0, dtype=self.DTYPE.newbyteorder("="))
        view = np.frombuffer(mm, dtype=self.DTYPE, count=self._entries)
        try:
            return view.astype(self.DTYPE.newbyteorder("="))
        finally:
            del view

    def replace_entries(self, arr: np.ndarray) -> None:
        """Rewrite the whole file with ``arr`` (a rebuild); keeps the active/inactive state."""
        was_writable = self._writable
        self._unmap()
        data = np.ascontiguousarray(arr, dtype=self.DTYPE).tobytes()
        if len(data) // self.ENTRY_SIZE > self.max_entries and was_writable:
            raise StorageError(f"{self.path}: {len(arr)} entries exceed {self.max_entries}")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
        self._entries = len(data) // self.ENTRY_SIZE
        self._load_last()
        if was_writable:
            self.make_active()

    def truncate_entries(self, count: int) -> None:
        """Keep the first ``count`` entries."""
        if count >= self._entries:
            return
        if self._writable and self._mm is not None:
            start, end = count * self.ENTRY_SIZE, self._entries * self.ENTRY_SIZE
            self._mm[start:end] = bytes(end - start)
        else:
            self._unmap()
            os.truncate(self.path, count * self.ENTRY_SIZE)
        self._entries = count
        self._load_last()

    def _load_last(self) -> None:
        """Refresh cached fields of the last entry (subclass hook)."""


class OffsetIndex(MappedIndex):
    ENTRY_SIZE = 8
    DTYPE = np.dtype([("rel", ">i4"), ("pos", ">i4")])
    ENTRY = struct.Struct(">ii")
    KEY_AT = 0
    KEY = _INT32

    last_offset: int
    last_position: int

    def _load_last(self) -> None:
        if self._entries:
            rel, pos = self.entry(self._entries - 1)
            self.last_offset, self.last_position = self.base_offset + rel, pos
        else:
            self.last_offset, self.last_position = -1, -1

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def append(self, offset: int, position: int) -> None:
        if self._entries and (offset <= self.last_offset or position <= self.last_position):
            raise CorruptIndexError(
                f"{self.path}: entry ({offset}, {position}) does not follow "
                f"({self.last_offset}, {self.last_position})"
            )
        self._append_raw(offset - self.base_offset, position)
        self.last_offset, self.last_position = offset, position

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or below ``offset``; else (base, 0)."""
        slot = self._floor_slot(offset - self.base_offset)
        if slot < 0:
            return self.base_offset, 0
        rel, pos = self.entry(slot)
        return self.base_offset + rel, pos

    def lookup_position(self, position: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry whose position is <= ``position``."""
        mm = self._map()
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) >> 1
            assert mm is not None
            if _INT32.unpack_from(mm, mid * 8 + 4)[0] <= position:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return self.base_offset, 0
        rel, pos = self.entry(lo - 1)
        return self.base_offset + rel, pos

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        self.truncate_entries(self._floor_slot(offset - self.base_offset, strict=True) + 1)

    def sanity_check(self, log_size: int) -> None:
        """Cheap structural check (no log reads); raises :class:`CorruptIndexError`."""
        if self._entries == 0:
            if log_size:
                raise CorruptIndexError(f"{self.path}: empty index for a non-empty log")
            return
        arr = self.to_array()
        rel, pos = arr["rel"], arr["pos"]
        if rel[0] < 0 or pos[0] != 0:
            raise CorruptIndexError(f"{self.path}: first entry ({rel[0]}, {pos[0]}) is not (_, 0)")
        if len(arr) > 1 and not (bool(np.all(np.diff(rel) > 0)) and bool(np.all(np.diff(pos) > 0))):
            raise CorruptIndexError(f"{self.path}: entries are not strictly increasing")
        if int(pos[-1]) >= log_size:
            raise CorruptIndexError(
                f"{self.path}: last entry position {int(pos[-1])} is past the log end {log_size}"
            )
