"""Sparse time index of one segment (``<base_offset:020d>.timeindex``).

File format (big-endian, no header; ``entries * 12`` meaningful bytes)::

    offset  size  field             note
    0       8     timestamp         int64 ms, the largest batch max_timestamp so far
    8       4     relative_offset   int32, base offset (minus segment base) of the first
                                    batch that reached that timestamp
    (repeated; both columns strictly increasing)

An entry is added at the same index points as the offset index (first batch, then every
``index_interval_bytes``), and once more when the segment is rolled or closed, but only
when the running maximum timestamp has grown since the last entry.  Hence every batch
before an entry's offset has a max timestamp below the entry's timestamp, which makes
"first batch with max_timestamp >= t" a floor search (:meth:`TimeIndex.lookup`) followed
by a short forward scan of the log.  The last entry is the segment's largest timestamp
(used by time retention) once the segment is inactive.

One slot is always kept free for the final entry written at roll/close, so the index is
"full" at ``max_entries - 1``.  Mapping, trimming and costs are those of
:class:`~storage.index.offset_index.MappedIndex` (append O(1), lookup O(log n)).  Not
thread-safe: owned by the Log that owns the segment.
"""

from __future__ import annotations

import struct

import numpy as np

from storage.errors import CorruptIndexError
from storage.index.offset_index import MappedIndex

NO_TIMESTAMP = -1


class TimeIndex(MappedIndex):
    ENTRY_SIZE = 12
    DTYPE = np.dtype([("ts", ">i8"), ("rel", ">i4")])
    ENTRY = struct.Struct(">qi")
    KEY_AT = 0
    KEY = struct.Struct(">q")

    last_timestamp: int
    last_offset: int

    def _load_last(self) -> None:
        if self._entries:
            ts, rel = self.entry(self._entries - 1)
            self.last_timestamp, self.last_offset = ts, self.base_offset + rel
        else:
            self.last_timestamp, self.last_offset = NO_TIMESTAMP, -1

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries - 1

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Append ``(timestamp, offset)`` if ``timestamp`` beats the last entry."""
        if timestamp <= self.last_timestamp:
            return False
        if self._entries and offset <= self.last_offset:
            raise CorruptIndexError(
                f"{self.path}: offset {offset} of timestamp {timestamp} does not follow "
                f"{self.last_offset}"
            )
        self._append_raw(timestamp, offset - self.base_offset)
        self.last_timestamp, self.last_offset = timestamp, offset
        return True

    def lookup(self, timestamp: int) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the last entry with timestamp < ``timestamp``."""
        slot = self._floor_slot(timestamp, strict=True)
        if slot < 0:
            return None
        ts, rel = self.entry(slot)
        return ts, self.base_offset + rel

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset`` (offsets increase with slots)."""
        count = self._entries
        while count and self.entry(count - 1)[1] + self.base_offset >= offset:
            count -= 1
        self.truncate_entries(count)

    def sanity_check(self, next_offset: int) -> None:
        """Entries strictly increasing and below ``next_offset``; else CorruptIndexError."""
        if self._entries == 0:
            return
        arr = self.to_array()
        ts, rel = arr["ts"], arr["rel"]
        if rel[0] < 0:
            raise CorruptIndexError(f"{self.path}: negative relative offset {rel[0]}")
        if len(arr) > 1 and not (bool(np.all(np.diff(ts) > 0)) and bool(np.all(np.diff(rel) > 0))):
            raise CorruptIndexError(f"{self.path}: entries are not strictly increasing")
        if self.base_offset + int(rel[-1]) >= next_offset:
            raise CorruptIndexError(
                f"{self.path}: last entry offset {self.base_offset + int(rel[-1])} is at or "
                f"past the segment end {next_offset}"
            )
