"""The log a KRaft replica replicates: a ``RaftLog`` protocol and an in-memory reference.

Offsets start at 0; entry ``i`` is at offset ``i``.  Every entry carries the epoch of the
leader that appended it; a :class:`replication.leader_epoch_cache.LeaderEpochCache`
(in memory, rebuilt from the entries) maps epochs to start offsets and answers the
divergence question of Fetch (``end_offset_for``).

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
from replication.raft.messages import Entry

__all__ = ["MemoryRaftLog", "RaftLog"]


class RaftLog(Protocol):
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


class MemoryRaftLog:
    """A RaftLog in a list, with the durable copy of its last flush."""

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self._entries: list[Entry] = []
        self._cache = LeaderEpochCache()
        self.append(entries)
        self._durable: tuple[Entry, ...] = tuple(self._entries)
        self._flushed_end = len(self._entries)  # live entries below it are durable

    @property
    def end_offset(self) -> int:
        return len(self._entries)

    @property
    def flushed_end_offset(self) -> int:
        return self._flushed_end

    @property
    def last_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    @property
    def epoch_cache(self) -> LeaderEpochCache:
        return self._cache

    def entry_at(self, offset: int) -> Entry:
        return self._entries[offset]

    def entries_from(self, offset: int, max_entries: int) -> Sequence[Entry]:
        return self._entries[offset:offset + max_entries]

    def append(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            if entry.epoch < self.last_epoch:
                raise ValueError(f"entry of epoch {entry.epoch} after epoch {self.last_epoch}")
            if entry.epoch != self.last_epoch:
                self._cache.assign(entry.epoch, len(self._entries))
            self._entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        if offset < len(self._entries):
            del self._entries[offset:]
            self._cache.truncate_from_end(offset)
            self._flushed_end = min(self._flushed_end, offset)

    def flush(self) -> None:
        if self._flushed_end != len(self._entries) or len(self._durable) != len(self._entries):
            self._durable = tuple(self._entries)
            self._flushed_end = len(self._entries)

    def durable_entries(self) -> tuple[Entry, ...]:
        """What survives a crash now (the log at its last flush)."""
        return self._durable
