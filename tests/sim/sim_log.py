"""Simulated disk for the simulation: an in-memory log with the Log API the Partition uses.

Batches are kept as bytes (the leader stamps base offset and epoch like ``Log``); what was
not flushed is lost by :meth:`MemoryLog.crash` (a power cut).  Prefix sums of a per-batch
hash (of its base offset and bytes) let the invariant checker compare two replicas over
an offset range in O(log n).  Retention (:meth:`MemoryLog.delete_old_batches`, bounded by
the HW like ``Log.delete_old_segments``) moves the log start up to a batch boundary; the
batches below stay in memory but are gone for every reader.

``MemoryCheckpoint`` stands in for the fsync'd leader-epoch checkpoint file (it survives
crashes; every write is durable, like the real file's temp+fsync+rename).
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from clients.protocol.errors import InvalidRecordError, OffsetOutOfRangeError
from clients.records.batch import (
    BatchHeader,
    iter_batches,
    read_header,
    set_base_offset,
    set_partition_leader_epoch,
)
from storage.log.recovery import RecoveryReport
from storage.log.validator import MAX_BATCH_DECOMPRESSED_BYTES, MAX_BATCH_RECORDS, LeaderCheck

_MOD = 1 << 64


@dataclass(frozen=True)
class MemoryAppendInfo:
    first_offset: int
    last_offset: int
    num_batches: int
    rolled: bool = False  # a memory log has no segments to roll (LogAppendInfo.rolled)


@dataclass(frozen=True)
class MemoryFetchData:
    data: bytes

    @property
    def size_in_bytes(self) -> int:
        return len(self.data)

    def read_bytes(self) -> bytes:
        return self.data

    @property
    def regions(self) -> tuple[MemoryFetchData, ...]:
        """Itself as the one "file region" a fetch answer carries (read_bytes reads it)."""
        return (self,)


class MemoryCheckpoint:
    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []
        self.durable: list[tuple[int, int]] = []  # what the last durable write held
        self.writes = 0

    def write(self, entries: Sequence[tuple[int, int]], *, durable: bool = True) -> None:
        self.entries = list(entries)
        self.writes += 1
        if durable:
            self.durable = list(entries)

    def crash(self) -> None:
        """Power cut: the last write that was not durable is lost."""
        self.entries = list(self.durable)

    def read(self) -> list[tuple[int, int]]:
        return list(self.entries)


class MemoryLog:
    """One replica's log on a simulated disk (see module docstring)."""

    def __init__(self, name: str, *, flush_every_append: bool) -> None:
        self.dir = name
        self.flush_every_append = flush_every_append
        self._bases: list[int] = []
        self._headers: list[BatchHeader] = []
        self._data: list[bytes] = []
        self._sums: list[int] = []    # sum of the batch hashes up to and including i
        self._start = 0
        self._end = 0
        self._recovery_point = 0
        self.on_truncate: Callable[[MemoryLog, list[BatchHeader]], None] | None = None
        self.restarts = 0  # truncate_fully_and_start_at calls (behind a leader's log start)
        self.topic_id: int | None = None  # what a real log keeps in partition.metadata
        self.before_flush: Callable[[], None] | None = None  # as storage.log.Log's
        # what the last open's recovery did (storage.log.Log's attribute): a torn tail
        # (:meth:`tear_tail`) is found by the next open only (MemoryDisk.open_log)
        self.recovery_report: RecoveryReport | None = None
        self.torn: RecoveryReport | None = None

    # -- views ---------------------------------------------------------------------

    @property
    def segments(self) -> tuple[()]:
        """No segment files (so no damage kept by recovery: Partition reads this)."""
        return ()

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._end

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    def batch_at(self, offset: int) -> BatchHeader | None:
        i = bisect.bisect_right(self._bases, offset) - 1
        if offset >= self._start and i >= 0 and self._headers[i].last_offset >= offset:
            return self._headers[i]
        return None

    def range_digest(self, low: int, below: int) -> tuple[int, int]:
        """(number of batches, hash of their offsets and bytes) of the batches starting in
        ``[low, below)``."""
        lo = bisect.bisect_left(self._bases, low)
        hi = max(lo, bisect.bisect_left(self._bases, below))
        total = (self._sums[hi - 1] if hi else 0) - (self._sums[lo - 1] if lo else 0)
        return hi - lo, total % _MOD

    def batches(self, start_offset: int | None = None) -> Iterator[tuple[BatchHeader, bytes]]:
        start = self._start if start_offset is None else start_offset
        for h, d in zip(self._headers, self._data, strict=True):
            if h.last_offset >= start:
                yield h, d

    # -- writes --------------------------------------------------------------------

    def _add(self, data: bytes) -> None:
        h = read_header(data)
        self._bases.append(h.base_offset)
        self._headers.append(h)
        self._data.append(data)
        one = (h.base_offset * 0x9E3779B97F4A7C15 + zlib.crc32(data) * 0xC2B2AE3D27D4EB4F) % _MOD
        self._sums.append((self._sums[-1] if self._sums else 0) + one)
        self._end = h.next_offset

    def require_keys(self, batches: bytes | bytearray | memoryview) -> None:
        """Not a compacted log: every record may go without a key (as ``Log``)."""

    def leader_check(self, *, keys: bool = True, max_batch_records: int = MAX_BATCH_RECORDS,
                     max_decompressed_bytes: int = MAX_BATCH_DECOMPRESSED_BYTES
                     ) -> LeaderCheck:
        """The Produce handler's record check, as ``Log``'s (no size or time limit)."""
        return LeaderCheck(1 << 30, None, None, max_batch_records, max_decompressed_bytes)

    def append_as_leader(self, batches: bytes | bytearray | memoryview,
                         leader_epoch: int, checked: object = None) -> MemoryAppendInfo:
        buf = bytes(batches)
        parts = [(pos, h) for pos, h in iter_batches(buf, validate=True)]
        first = self._end
        offset = first
        for pos, h in parts:
            one = bytearray(buf[pos:pos + h.size_in_bytes])
            set_base_offset(one, offset)
            set_partition_leader_epoch(one, leader_epoch)
            self._add(bytes(one))
            offset += h.last_offset_delta + 1
        self._after_append()
        return MemoryAppendInfo(first, offset - 1, len(parts))

    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> MemoryAppendInfo:
        buf = bytes(batches)
        parts = [(pos, h) for pos, h in iter_batches(buf, validate=True)]
        expected = self._end
        for _, h in parts:
            if h.base_offset < expected:
                raise InvalidRecordError(f"base offset {h.base_offset} below {expected}")
            expected = h.next_offset
        first = self._end
        for pos, h in parts:
            self._add(buf[pos:pos + h.size_in_bytes])
        self._after_append()
        return MemoryAppendInfo(first, self._end - 1, len(parts))

    def _after_append(self) -> None:
        if self.flush_every_append:
            self.flush()

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> MemoryFetchData:
        if not self._start <= start_offset <= self._end:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} outside [{self._start}, {self._end}] of {self.dir}")
        bound = self._end if max_offset is None else min(max_offset, self._end)
        i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        out: list[bytes] = []
        size = 0
        while i < len(self._headers):
            h = self._headers[i]
            if h.last_offset < start_offset:
                i += 1
                continue
            if h.last_offset >= bound:
                break
            if size + len(self._data[i]) > max_bytes and (out or not min_one_batch):
                break
            out.append(self._data[i])
            size += len(self._data[i])
            i += 1
        return MemoryFetchData(b"".join(out))

    def truncate_to(self, offset: int) -> None:
        if offset >= self._end:
            return
        n = bisect.bisect_left(self._bases, offset)
        i = bisect.bisect_right(self._bases, offset) - 1
        if i >= 0 and self._headers[i].last_offset >= offset:
            n = i  # drop the batch containing the offset too (boundary at or below)
        removed = self._headers[n:]
        del self._bases[n:], self._headers[n:], self._data[n:], self._sums[n:]
        self._end = self._headers[-1].next_offset if self._headers else min(offset, self._start)
        self._start = min(self._start, self._end)
        self._recovery_point = min(self._recovery_point, self._end)
        if self.on_truncate is not None and removed:
            self.on_truncate(self, removed)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.restarts += 1
        removed = list(self._headers)
        self._bases, self._headers, self._data, self._sums = [], [], [], []
        self._start = self._end = self._recovery_point = offset
        if self.on_truncate is not None and removed:
            self.on_truncate(self, removed)

    def delete_old_batches(self, high_watermark: int, keep: int) -> int:
        """Retention: move the log start to the first of the last ``keep`` batches that
        lie wholly below ``high_watermark`` (never further); returns the log start."""
        first = bisect.bisect_right(self._bases, self._start) - 1
        below = bisect.bisect_left(self._bases, high_watermark)  # batches starting below
        while below > 0 and self._headers[below - 1].last_offset >= high_watermark:
            below -= 1
        cut = below - keep
        if cut > max(first, 0):
            self._start = max(self._start, self._bases[cut])
        return self._start

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        if offset > self._end:
            raise OffsetOutOfRangeError(f"log start {offset} past LEO {self._end}")
        self._start = max(self._start, offset)

    def flush(self, up_to_offset: int | None = None) -> None:
        target = self._end if up_to_offset is None else min(up_to_offset, self._end)
        if self.before_flush is not None and target > self._recovery_point:
            self.before_flush()  # as storage.log.Log: the epoch checkpoint first
        self._recovery_point = max(self._recovery_point, target)

    def crash(self) -> int:
        """Power cut: lose every batch not below the recovery point; returns bytes lost."""
        n = bisect.bisect_left(self._bases, self._recovery_point)
        i = bisect.bisect_right(self._bases, self._recovery_point) - 1
        if i >= 0 and self._headers[i].last_offset >= self._recovery_point:
            n = i
        lost = sum(len(d) for d in self._data[n:])
        hook, self.on_truncate = self.on_truncate, None   # losses are not truncations
        try:
            self.truncate_to(self._bases[n] if n < len(self._bases) else self._end)
        finally:
            self.on_truncate = hook
        return lost

    def tear_tail(self, batches: int) -> int:
        """Damage of the stopped log's tail (a torn write in its active segment): its last
        ``batches`` batches go, as the next open's recovery cuts a torn batch and what
        follows (reported then, :attr:`recovery_report`); returns the bytes lost."""
        n = max(0, len(self._headers) - batches)
        lost = sum(len(d) for d in self._data[n:])
        if not lost:
            return 0
        hook, self.on_truncate = self.on_truncate, None  # damage, not a truncation
        try:
            self.truncate_to(self._bases[n])
        finally:
            self.on_truncate = hook
        self.torn = RecoveryReport(had_clean_shutdown=False, truncated_bytes=lost,
                                   truncated_at_offset=self._end)
        return lost

    def __repr__(self) -> str:
        return (f"MemoryLog({self.dir}, start={self._start}, end={self._end}, "
                f"rp={self._recovery_point})")


def batch_at(log: Any, offset: int) -> BatchHeader | None:
    """The header of the batch holding ``offset`` in a MemoryLog or a storage Log."""
    if isinstance(log, MemoryLog):
        return log.batch_at(offset)
    for header, _ in log.batches(offset):
        return header if header.base_offset <= offset else None
    return None
