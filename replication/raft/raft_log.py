"""The log a KRaft replica replicates: a ``RaftLog`` protocol and an in-memory reference.

Entry ``i`` is at offset ``i``; the log holds the entries from its ``start_offset`` (0
until a snapshot replaced the entries below it, KIP-630) to its ``end_offset``.  Every
entry carries the epoch of the leader that appended it; a
:class:`replication.leader_epoch_cache.LeaderEpochCache` (in memory, rebuilt from the
entries) maps epochs to start offsets and answers the divergence question of Fetch
(``end_offset_for``); after a snapshot its first epoch starts at the log start, and a log
reset to a snapshot has that snapshot's epoch as its ``last_epoch`` while it is empty.

Snapshots: ``start_snapshot`` is the id of the snapshot the log starts at (None while it
starts at 0); :meth:`RaftLog.advance_start_offset` drops the entries below an offset the
application snapshotted (committed: never below it again); :meth:`RaftLog.reset_to_snapshot`
(a follower installed a fetched snapshot) drops every entry and restarts the log empty at
the snapshot's end offset, durable on return.  Neither is ever asked below the log
start, nor does :meth:`RaftLog.truncate_to` go below it (committed entries).

Durability: :meth:`RaftLog.append` and :meth:`RaftLog.truncate_to` change the log; only
:meth:`RaftLog.flush` makes it durable.  ``flushed_end_offset`` is how far a crash now
would keep.  The replica flushes before it reports its end offset to anyone (a Fetch, a
vote request, the leader's own count toward the high watermark).

:class:`MemoryRaftLog` keeps the entries in a list and its durable copy as the list at the
last flush (:meth:`MemoryRaftLog.durable_entries`): the simulation rebuilds a crashed
voter from it, losing what was not flushed.  The controller's metadata log on disk
implements the same protocol (:mod:`broker.controller.quorum.file_raft_log`).

Costs: append O(entries), truncate O(removed), flush O(entries since the last flush) here
(an fsync in a file-backed log), ``entries_from`` O(returned).  Not thread-safe: owned by
the replica's driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from replication.leader_epoch_cache import UNDEFINED_EPOCH, LeaderEpochCache
from replication.raft.messages import Entry, OffsetAndEpoch

__all__ = ["MemoryRaftLog", "RaftLog"]


class RaftLog(Protocol):
    @property
    def start_offset(self) -> int: ...

    @property
    def start_snapshot(self) -> OffsetAndEpoch | None: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def flushed_end_offset(self) -> int: ...

    @property
    def last_epoch(self) -> int: ...

    @property
    def epoch_cache(self) -> LeaderEpochCache: ...

    def entries_from(self, offset: int, max_entries: int) -> Sequence[Entry]: ...

    def append(self, entries: Iterable[Entry]) -> None: ...

    def truncate_to(self, offset: int) -> None: ...

    def flush(self) -> None: ...

    def advance_start_offset(self, offset: int) -> None: ...

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None: ...


class MemoryRaftLog:
    """A RaftLog in a list, with the durable copy of its last flush; ``snapshot``: the
    log starts empty at that snapshot's end (as a restarted voter's after it)."""

    def __init__(self, entries: Iterable[Entry] = (), snapshot: OffsetAndEpoch | None = None
                 ) -> None:
        self._entries: list[Entry] = []
        self._cache = LeaderEpochCache()
        self._start = 0
        self._snapshot: OffsetAndEpoch | None = None
        if snapshot is not None:
            self._start_at(snapshot)
        self.append(entries)
        self._durable: tuple[Entry, ...] = tuple(self._entries)
        self._durable_snapshot: OffsetAndEpoch | None = self._snapshot
        self._flushed_end = self.end_offset  # live entries below it are durable

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def start_snapshot(self) -> OffsetAndEpoch | None:
        """The snapshot the log starts at (None: it starts at 0)."""
        return self._snapshot

    @property
    def end_offset(self) -> int:
        return self._start + len(self._entries)

    @property
    def flushed_end_offset(self) -> int:
        return self._flushed_end

    @property
    def last_epoch(self) -> int:
        return self._cache.latest_epoch if self.end_offset else UNDEFINED_EPOCH

    @property
    def epoch_cache(self) -> LeaderEpochCache:
        return self._cache

    def entry_at(self, offset: int) -> Entry:
        if offset < self._start:
            raise IndexError(f"offset {offset} is below the log start {self._start}")
        return self._entries[offset - self._start]

    def entries_from(self, offset: int, max_entries: int) -> Sequence[Entry]:
        if offset < self._start:
            raise ValueError(f"offset {offset} is below the log start {self._start}")
        return self._entries[offset - self._start:offset - self._start + max_entries]

    def append(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            if entry.epoch < self.last_epoch:
                raise ValueError(f"entry of epoch {entry.epoch} after epoch {self.last_epoch}")
            if entry.epoch != self.last_epoch:
                self._cache.assign(entry.epoch, self.end_offset)
            self._entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        if offset < self._start:
            raise ValueError(f"cannot truncate to {offset}, below the log start {self._start}")
        if offset < self.end_offset:
            del self._entries[offset - self._start:]
            if offset > self._start or self._snapshot is None:
                self._cache.truncate_from_end(offset)
            else:  # empty again at the snapshot: its epoch is the last one
                self._cache.clear()
                self._cache.assign(self._snapshot.epoch, self._start)
            self._flushed_end = min(self._flushed_end, offset)

    def flush(self) -> None:
        if (self._flushed_end != self.end_offset or len(self._durable) != len(self._entries)
                or self._durable_snapshot != self._snapshot):
            self._durable = tuple(self._entries)
            self._durable_snapshot = self._snapshot
            self._flushed_end = self.end_offset

    def advance_start_offset(self, offset: int) -> None:
        """Drop the entries below ``offset`` (a snapshot holds them); durable at the next
        flush, as :meth:`durable_entries` then starts at it."""
        if not self._start <= offset <= self.end_offset:
            raise ValueError(f"log start {offset} outside [{self._start}, {self.end_offset}]")
        if offset == self._start:
            return
        snapshot = OffsetAndEpoch(offset, self._cache.epoch_for_offset(offset - 1))
        del self._entries[:offset - self._start]
        self._start, self._snapshot = offset, snapshot
        if self._entries:
            self._cache.truncate_from_start(offset)
        else:
            self._cache.clear()
            self._cache.assign(snapshot.epoch, offset)
        self._flushed_end = max(self._flushed_end, offset)

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Every entry dropped; the log restarts empty at the snapshot's end (durable)."""
        self._entries.clear()
        self._start_at(snapshot_id)
        self._durable, self._durable_snapshot = (), snapshot_id
        self._flushed_end = self._start

    def _start_at(self, snapshot_id: OffsetAndEpoch) -> None:
        self._start, self._snapshot = snapshot_id.end_offset, snapshot_id
        self._cache.clear()
        self._cache.assign(snapshot_id.epoch, snapshot_id.end_offset)

    def durable_entries(self) -> tuple[Entry, ...]:
        """What survives a crash now (the log at its last flush, from
        :meth:`durable_snapshot`'s end offset, else from 0)."""
        return self._durable

    def durable_snapshot(self) -> OffsetAndEpoch | None:
        """The snapshot the durable log starts at (None: it starts at 0)."""
        return self._durable_snapshot
