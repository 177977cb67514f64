"""LeaderEpochCache: for one partition replica, the first offset written in each leader epoch.

Every batch carries the leader epoch it was written in.  The cache keeps one entry per
epoch that has data (or that a leader opened at its LEO), in increasing epoch and
non-decreasing start-offset order::

    epoch  start_offset      meaning
    0      0                 offsets [0, 120) were written by the leader of epoch 0
    2      120               offsets [120, 300) by the leader of epoch 2 (epoch 1 wrote nothing)
    5      300               offsets [300, LEO) by the leader of epoch 5 (the latest epoch)

It answers OffsetsForLeaderEpoch (:meth:`end_offset_for`), which is what a follower uses to
find where its log diverges from the leader's (see :mod:`replication.truncation`).

Persistence: every change is written at once with
:class:`storage.checkpoint.LeaderEpochCheckpointFile` (``<partition dir>/leader-epoch-
checkpoint``; text: version ``0``, count, then ``"<epoch> <start_offset>"`` lines; atomic
temp-file + rename), without fsync: the owner's event loop does not wait for the disk at
every election or epoch change (Kafka's KAFKA-15046).  :meth:`sync` makes the last write
durable; the log calls it before its recovery point advances (``Log.before_flush``), so
the durable file never misses an epoch of the flushed records.  The owner assigns an
epoch *before* appending the batches that carry it (Kafka's order), so after a process
crash the file may name epochs past the log end but never misses one that the log holds;
after a power cut it may lag the unflushed tail (log recovery then cuts the tail from the
first batch of an epoch it does not know, as it cuts any unflushed tail it cannot vouch
for), or be missing or damaged (then :meth:`load` rebuilds it from the log's batches).
:meth:`load` trims it to the log.

Rules (Kafka's ``LeaderEpochFileCache``):

* :meth:`assign` ignores an entry for the latest epoch at or after its start offset
  (nothing new).  A newer epoch, or the latest epoch with a lower start offset, first
  removes entries whose start offset is >= the new one (epochs that wrote nothing), then is
  appended.  **Choice:** an epoch *lower* than the latest is ignored with a logged warning
  and ``assign`` returns ``False``: it can only come from a log that was not truncated
  before a copy, and rewriting history in the cache would hide that.
* :meth:`truncate_from_end` after the log is truncated: drops entries starting at or past
  the new end.  :meth:`truncate_from_start` after retention moves the log start: drops
  entries that end before it and moves the first kept entry's start up to it.

Costs: entries are few (one per leader change that wrote data); every operation is
O(entries) time, plus a file write per change when a checkpoint file is attached, and two
fsyncs per :meth:`sync` after a change.
Not thread-safe: owned by the partition's owner (the broker's event loop).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

from clients.records.batch import iter_batches
from storage.checkpoint import CorruptCheckpointError, LeaderEpochCheckpointFile

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochCheckpoint",
    "EpochEntry",
    "LeaderEpochCache",
    "LeaderEpochCacheError",
]

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCacheError(AssertionError):
    """An invariant of the cache (or of the cache against its log) does not hold."""


class EpochCheckpoint(Protocol):
    """Where the cache persists itself (a LeaderEpochCheckpointFile, or a test double)."""

    def write(self, entries: Sequence[tuple[int, int]], *, durable: bool = True
              ) -> None: ...

    def read(self) -> list[tuple[int, int]]: ...


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Epoch -> start offset map of one replica, optionally checkpointed to a file."""

    def __init__(self, checkpoint: EpochCheckpoint | None = None,
                 entries: Iterable[tuple[int, int]] = ()) -> None:
        self._checkpoint = checkpoint
        self._synced = True  # the checkpoint's last write was durable (or none was made)
        self._entries: list[EpochEntry] = []
        # entries[:_checked] were found in order by check_invariants; the list changes
        # only by appends and pops at its end (which lower this to what is left) or by a
        # rewrite of its head (which resets it), so a check reads only the pairs since
        self._checked = 0
        for epoch, start in entries:
            self._check_args(epoch, start)
            if self._entries and (epoch <= self._entries[-1].epoch
                                  or start < self._entries[-1].start_offset):
                raise ValueError(f"entries out of order at ({epoch}, {start}): {self._entries}")
            self._entries.append(EpochEntry(epoch, start))
        self._durable = tuple(self._entries)  # what the checkpoint held when last synced

    @classmethod
    def load(cls, path: str | Path | EpochCheckpoint | None, log_start_offset: int,
             log_end_offset: int, *, batches: Iterable[tuple[int, int]] | None = None
             ) -> LeaderEpochCache:
        """Read the checkpoint at ``path`` (a file path, an :class:`EpochCheckpoint`, or
        None = in memory only) and fit it to the log.

        Entries at or past ``log_end_offset`` are dropped (assigned before a crash lost
        the data) and the first kept entry is moved up to ``log_start_offset``.  When
        the file yields nothing but the log is not empty and ``batches`` (``(epoch,
        base_offset)`` of every batch in log order, e.g. from ``Log.batches()``) is given,
        the cache is rebuilt from it (a missing file, e.g. a replaced disk).
        """
        checkpoint: EpochCheckpoint | None = (
            LeaderEpochCheckpointFile(path) if isinstance(path, str | Path) else path)
        try:
            entries = checkpoint.read() if checkpoint is not None else []
        except CorruptCheckpointError as exc:  # a write a power cut tore: rebuilt below
            log.warning("leader epoch checkpoint: %s; rebuilding it from the log", exc)
            entries = []
        cache = cls(checkpoint, entries)
        changed = cache._truncate_end(log_end_offset) | cache._truncate_start(log_start_offset)
        if not cache._entries and log_end_offset > log_start_offset and batches is not None:
            log.warning("leader epoch checkpoint %s is empty for a non-empty log: rebuilding", path)
            for epoch, base in batches:
                if base >= log_start_offset and (not cache._entries
                                                 or epoch > cache._entries[-1].epoch):
                    cache._entries.append(EpochEntry(epoch, base))
            changed = True
        if changed:
            cache._synced = False
            cache.sync()  # one durable write: what the log recovered may be flushed
        return cache

    # -- queries ---------------------------------------------------------------------

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The largest epoch known, or UNDEFINED_EPOCH (-1) when empty."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    @property
    def earliest_epoch(self) -> int:
        return self._entries[0].epoch if self._entries else UNDEFINED_EPOCH

    def start_offset_of(self, epoch: int) -> int | None:
        """Start offset of exactly ``epoch``, or None."""
        i = bisect.bisect_left(self._entries, (epoch, -1))
        if i < len(self._entries) and self._entries[i].epoch == epoch:
            return self._entries[i].start_offset
        return None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: ``(largest epoch <= requested, its end offset)``.

        The end offset is the start offset of the next larger epoch, or
        ``log_end_offset`` when that epoch is the latest.  Below the first known epoch
        (its data is gone here, e.g. by retention) the answer is ``(requested_epoch,
        start of the first known epoch)``, as in Kafka: the asking follower keeps what it
        has below that offset instead of dropping its whole log - a follower that dropped
        records below the high watermark could be elected and lose them.  ``(-1, -1)``
        (undefined) when ``requested_epoch`` is undefined, the cache is empty, or it is
        above the latest epoch (a newer epoch than this replica knows).
        """
        undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if requested_epoch < 0 or not self._entries:
            return undefined
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, log_end_offset
        if requested_epoch > self._entries[-1].epoch:
            return undefined
        if requested_epoch < self._entries[0].epoch:
            return requested_epoch, self._entries[0].start_offset
        i = bisect.bisect_right(self._entries, (requested_epoch, 2**63)) - 1
        return self._entries[i].epoch, self._entries[i + 1].start_offset

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that wrote ``offset`` (-1 if before the first entry)."""
        starts = [e.start_offset for e in self._entries]
        i = bisect.bisect_right(starts, offset) - 1
        return self._entries[i].epoch if i >= 0 else UNDEFINED_EPOCH

    # -- updates ---------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed."""
        self._check_args(epoch, start_offset)
        if self._entries:
            latest = self._entries[-1]
            if epoch < latest.epoch:
                log.warning("ignoring leader epoch %d at offset %d: older than the latest "
                            "epoch %s", epoch, start_offset, latest)
                return False
            if epoch == latest.epoch and start_offset >= latest.start_offset:
                return False
        while self._entries and self._entries[-1].start_offset >= start_offset:
            removed = self._entries.pop()
            if removed.epoch != epoch:
                log.info("leader epoch %s removed: epoch %d starts at %d", removed, epoch,
                         start_offset)
        self._checked = min(self._checked, len(self._entries))
        self._entries.append(EpochEntry(epoch, start_offset))
        self._flush()
        return True

    def assign_all(self, changes: Sequence[tuple[int, int]]) -> bool:
        """Assign each ``(epoch, start_offset)`` in order (a LogAppendInfo's epoch_changes)."""
        changed = False
        for epoch, start in changes:
            changed |= self._assign_quiet(epoch, start)
        if changed:
            self._flush()
        return changed

    def _assign_quiet(self, epoch: int, start: int) -> bool:
        checkpoint, self._checkpoint = self._checkpoint, None
        try:
            return self.assign(epoch, start)
        finally:
            self._checkpoint = checkpoint

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log now ends at ``end_offset``: drop entries starting at or after it."""
        changed = self._truncate_end(end_offset)
        if changed:
            self._flush()
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: keep the epoch covering it, from it."""
        changed = self._truncate_start(start_offset)
        if changed:
            self._flush()
        return changed

    def clear(self) -> None:
        """Forget everything (the log was truncated fully)."""
        if self._entries:
            self._entries.clear()
            self._checked = 0
            self._flush()

    def _truncate_end(self, end_offset: int) -> bool:
        changed = False
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
            changed = True
        self._checked = min(self._checked, len(self._entries))
        return changed

    def _truncate_start(self, start_offset: int) -> bool:
        starts = [e.start_offset for e in self._entries]
        i = bisect.bisect_right(starts, start_offset) - 1
        if i < 0:
            return False
        changed = i > 0
        self._checked = 0
        del self._entries[:i]
        if self._entries[0].start_offset < start_offset:
            self._entries[0] = EpochEntry(self._entries[0].epoch, start_offset)
            changed = True
        return changed

    def _flush(self) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write(list(self._entries), durable=False)
            self._synced = False

    def sync(self) -> None:
        """Make the checkpoint durable if a change since the last sync is not (two fsyncs;
        nothing otherwise).  Called before records whose epochs it names are flushed."""
        if not self._synced and self._checkpoint is not None:
            self._checkpoint.write(list(self._entries))
            self._synced, self._durable = True, tuple(self._entries)

    @property
    def durable_entries(self) -> tuple[EpochEntry, ...]:
        """What the checkpoint would hold after a power cut now (tests): the last
        durable write, or what was read at load."""
        return tuple(self._entries) if self._synced else self._durable

    # -- invariants ------------------------------------------------------------------

    def check_invariants(self, log_start_offset: int | None = None,
                         log_end_offset: int | None = None) -> None:
        """Raise :class:`LeaderEpochCacheError` unless epochs increase, start offsets do
        not decrease and (when given) every entry starts inside [log start, log end].
        Incremental: the order of the pairs a previous call found in order is not read
        again (entries are immutable and the list only changes at its end or by a
        rewrite that makes the next call read it all: ``_checked``), so a call after no
        change is O(1)."""
        entries = self._entries
        n = len(entries)
        if self._checked != n:
            for i in range(max(self._checked, 1), n):
                prev, cur = entries[i - 1], entries[i]
                if cur.epoch <= prev.epoch or cur.start_offset < prev.start_offset:
                    raise LeaderEpochCacheError(f"entries out of order: {prev} then {cur}")
            self._checked = n
        if not n:
            return
        if log_end_offset is not None and entries[-1].start_offset > log_end_offset:
            raise LeaderEpochCacheError(
                f"epoch {entries[-1]} starts past the log end offset {log_end_offset}")
        if log_start_offset is not None and entries[0].start_offset < log_start_offset:
            raise LeaderEpochCacheError(
                f"epoch {entries[0]} starts before the log start offset {log_start_offset}")

    @staticmethod
    def _check_args(epoch: int, start_offset: int) -> None:
        if not isinstance(epoch, int) or not 0 <= epoch <= 2**31 - 1:
            raise ValueError(f"leader epoch must be in [0, 2**31 - 1], got {epoch!r}")
        if not isinstance(start_offset, int) or start_offset < 0:
            raise ValueError(f"start offset must be >= 0, got {start_offset!r}")

    def __repr__(self) -> str:
        return f"LeaderEpochCache({[tuple(e) for e in self._entries]})"


def epoch_changes(batches: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
    """``(epoch, base_offset)`` of the first batch and of each epoch change in a buffer of
    consecutive batches (headers only; no CRC check)."""
    changes: list[tuple[int, int]] = []
    for _, header in iter_batches(batches, validate=False):
        if not changes or changes[-1][0] != header.partition_leader_epoch:
            changes.append((header.partition_leader_epoch, header.base_offset))
    return changes
