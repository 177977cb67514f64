"""The real :class:`storage.log.log.Log`, observed by the simulation's checks.

:class:`SimLog` is ``Log`` with every method doing what ``Log``'s does (each override
calls it first), keeping beside it what the invariant checks read after every step: the
header of every stored batch and prefix sums of a per-batch hash (of its base offset and
bytes), so :meth:`SimLog.batch_at` is one bisect and :meth:`SimLog.range_digest` (count
and hash of the batches starting in a range, to compare two replicas) two, instead of a
walk of the segment files each time.  It also reports what a truncation removed
(:attr:`SimLog.on_truncate`: the cluster's check that no acknowledged record is
truncated) and counts restarts (``truncate_fully_and_start_at``).

The shadow follows the log's own changes: appends (the bytes just written, read back
from the segment files), truncations, restarts, segment swaps (cleaner, repair: read
again) and the open's recovery (read at construction).  Bytes the simulation changes
behind the log's back (rot, a torn tail: :mod:`tests.sim.disk`) are read again with
:meth:`SimLog.reindex`.  Retention moves the log start first: the batches below stay in
the shadow, invisible to :meth:`batch_at` and never in a digest's range, until their
segments are deleted.

What the shadow keeps of a batch is a :class:`StoredBatch` (base and last offset, CRC,
partition leader epoch, size), read from the header's fields
(:func:`storage.records.walk.header_fields`): building a
:class:`~clients.records.batch.BatchHeader` (a frozen dataclass of 13 fields) cost more
than the rest of the walk, and the shadow reads every batch at every open.

Costs: an append reads back its own bytes and walks their headers; a truncation is a
bisect; a swap or an open walks the log's files once.  Single-threaded, like the whole
simulation.
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from clients.protocol.errors import CorruptRecordError
from clients.records.batch import LOG_OVERHEAD
from storage.log.log import Log
from storage.log.validator import LogAppendInfo
from storage.records.walk import header_fields
from storage.segment import Segment

_MOD = 1 << 64
_OFFSET_MIX, _CRC_MIX = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F  # a batch's hash (_add)


class StoredBatch(NamedTuple):
    """What the checks read of one stored batch (its header's fields, as written)."""

    base_offset: int
    last_offset: int
    crc: int
    partition_leader_epoch: int
    size_in_bytes: int


def stored_batches(data: bytes | memoryview) -> Iterator[tuple[int, StoredBatch]]:
    """``(position, batch)`` of each batch in ``data`` (consecutive batches from a batch
    boundary), headers only, no CRC check; fails as ``iter_batches(data,
    validate=False)`` does (:func:`storage.records.walk.header_fields`)."""
    for pos, f in header_fields(data):
        # base offset, last offset (+ delta), crc, partition leader epoch, size
        yield pos, StoredBatch(f[0], f[0] + f[6], f[4], f[2], f[1] + LOG_OVERHEAD)


class SimLog(Log):
    """One replica's log (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_truncate: Callable[[SimLog, list[StoredBatch]], None] | None = None
        self.restarts = 0  # truncate_fully_and_start_at calls (behind a leader's log start)
        self._bases: list[int] = []
        self._headers: list[StoredBatch] = []
        self._sums: list[int] = []  # sum of the batch hashes up to and including i
        self._sum_base = 0  # the sum before the first entry (retention deleted the rest)
        self.version = 0  # moves whenever the shadow changes (the checks skip what did not)
        self.reindex()

    # -- the shadow --------------------------------------------------------------------

    def reindex(self) -> None:
        """Read every stored batch again (after the open, a swap, or bytes changed on disk
        by the simulation): what ``_add`` of each batch of :meth:`_stored` keeps, in one
        loop (every open of every replica runs it)."""
        bases: list[int] = []
        headers: list[StoredBatch] = []
        sums: list[int] = []
        total = 0
        for seg in list(self.segments):
            data = seg.read_bytes(0, seg.trusted_size)
            view = memoryview(data)
            try:
                for pos, f in header_fields(data):
                    size = f[1] + LOG_OVERHEAD
                    bases.append(f[0])
                    headers.append(StoredBatch(f[0], f[0] + f[6], f[4], f[2], size))
                    total += (f[0] * _OFFSET_MIX + zlib.crc32(view[pos:pos + size])
                              * _CRC_MIX) % _MOD
                    sums.append(total)
            except CorruptRecordError:
                continue  # as _stored: rot ends the segment's walk
        self._bases, self._headers, self._sums, self._sum_base = bases, headers, sums, 0
        self.version += 1 + len(headers)

    def _stored(self) -> Iterator[tuple[StoredBatch, memoryview]]:
        """Every batch in the segment files, as ``Log.batches(0)``, except that a header
        made unreadable by rot ends its segment's walk instead of raising (the scrubber
        finds it; until then the replica is left out of the checks that read this)."""
        for seg in list(self.segments):
            data = seg.read_bytes(0, seg.trusted_size)
            view = memoryview(data)  # a batch's bytes without a copy (only hashed)
            try:
                for pos, header in stored_batches(data):
                    yield header, view[pos:pos + header.size_in_bytes]
            except CorruptRecordError:
                continue

    def _add(self, h: StoredBatch, data: bytes | memoryview) -> None:
        self.version += 1
        self._bases.append(h.base_offset)
        self._headers.append(h)
        one = (h.base_offset * _OFFSET_MIX + zlib.crc32(data) * _CRC_MIX) % _MOD
        self._sums.append((self._sums[-1] if self._sums else self._sum_base) + one)

    def _read_appended(self, first: Segment, size: int) -> None:
        """Add the batches written after byte ``size`` of segment ``first`` (the active
        one before the append) and in every segment rolled after it."""
        segments = self.segments
        for seg in segments[next(i for i, s in enumerate(segments) if s is first):]:
            start = size if seg is first else 0
            data = seg.read_bytes(start, seg.size - start)
            view = memoryview(data)
            for pos, h in stored_batches(data):
                self._add(h, view[pos:pos + h.size_in_bytes])

    def _cut(self, offset: int) -> list[StoredBatch]:
        """Drop the batches with last offset >= ``offset`` from the shadow; returns them."""
        n = bisect.bisect_left(self._bases, offset)
        if n and self._headers[n - 1].last_offset >= offset:
            n -= 1  # the batch holding the offset goes too
        removed = self._headers[n:]
        del self._bases[n:], self._headers[n:], self._sums[n:]
        self.version += 1
        return removed

    def batch_at(self, offset: int) -> StoredBatch | None:
        """The header of the batch holding ``offset`` (None: none, or below the log start)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if offset >= self.log_start_offset and i >= 0 and self._headers[i].last_offset >= offset:
            return self._headers[i]
        return None

    def range_digest(self, low: int, below: int) -> tuple[int, int]:
        """(number of batches, hash of their offsets and bytes) of the batches starting in
        ``[low, below)``."""
        lo = bisect.bisect_left(self._bases, low)
        hi = max(lo, bisect.bisect_left(self._bases, below))
        total = ((self._sums[hi - 1] if hi else self._sum_base)
                 - (self._sums[lo - 1] if lo else self._sum_base))
        return hi - lo, total % _MOD

    def check_shadow(self) -> str | None:
        """What differs between the shadow and the files (None: nothing); a walk of the
        whole log."""
        files = [h for h, _ in self._stored()]
        if files != self._headers:
            return f"shadow of {self.dir} has {len(self._headers)} batches, files {len(files)}"
        return None

    # -- Log, observed -----------------------------------------------------------------

    def append_as_leader(self, batches: bytes | bytearray | memoryview, leader_epoch: int,
                         checked: Sequence[Any] | None = None) -> LogAppendInfo:
        active, size = self.active, self.active.size
        info = super().append_as_leader(batches, leader_epoch, checked)
        self._read_appended(active, size)
        return info

    def append_as_follower(self, batches: bytes | bytearray | memoryview,
                           checked: Sequence[Any] | None = None) -> LogAppendInfo:
        active, size = self.active, self.active.size
        info = super().append_as_follower(batches, checked)
        self._read_appended(active, size)
        return info

    def truncate_to(self, offset: int) -> None:
        if not self.segments[0].base_offset <= offset < self.log_end_offset:
            super().truncate_to(offset)  # nothing, or a restart (below)
            return
        super().truncate_to(offset)
        removed = self._cut(offset)
        if self.on_truncate is not None and removed:
            self.on_truncate(self, removed)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        super().truncate_fully_and_start_at(offset)
        self.restarts += 1
        removed = self._headers
        self._bases, self._headers, self._sums, self._sum_base = [], [], [], 0
        self.version += 1
        if self.on_truncate is not None and removed:
            self.on_truncate(self, removed)

    def delete_old_segments(self, high_watermark: int | None = None) -> int:
        deleted = super().delete_old_segments(high_watermark)
        if deleted:  # the prefix sums stay valid: a digest is a difference of two
            n = bisect.bisect_left(self._bases, self.segments[0].base_offset)
            if n:
                self._sum_base = self._sums[n - 1]
            del self._bases[:n], self._headers[:n], self._sums[:n]
            self.version += 1
        return deleted

    def replace_segments(self, old: list[Segment], new: Segment) -> None:
        super().replace_segments(old, new)
        self.reindex()

    def __repr__(self) -> str:
        return (f"SimLog({self.dir.parent.name}/{self.dir.name}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, rp={self.recovery_point})")
