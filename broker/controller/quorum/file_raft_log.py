"""FileRaftLog: the KRaft replica's :class:`~replication.raft.raft_log.RaftLog` on the
controller's metadata log files (``<data_dir>/__cluster_metadata-0/``, a
:class:`storage.log.log.Log`).

Entries are records, one epoch per batch (:mod:`.entry_batches`); entry ``i`` is at log
offset ``i``.  The epoch cache (epoch -> start offset) is in memory, rebuilt from the
batch headers at construction.

Log start (KIP-630): :meth:`advance_start_offset` (the voter snapshotted everything below
it) raises the ``Log``'s start offset and deletes the segments wholly below it;
:meth:`reset_to_snapshot` (a fetched snapshot was installed) deletes every segment and
restarts the log empty at the snapshot's end, fsync'd on return.  The start offset is
not written anywhere of its own: at open the owner passes the snapshot the log continues
(:meth:`start_at_snapshot`, from the newest valid snapshot file), and a log that starts
past 0 without one is refused (``ValueError``).

Durability (the RaftLog contract): :meth:`append` and :meth:`truncate_to` write to the
files without fsync; :meth:`flush` fsyncs them (``Log.flush``: the segments and, after a
segment came or went, the directory).  ``flushed_end_offset`` is how far a crash now would
keep.  The log must be opened without a flush policy of its own
(:data:`RAFT_LOG_CONFIG`), so that only :meth:`flush` decides.  At construction the log
(already recovered by ``Log.open``: a torn tail cut) is fsync'd once, so what it holds then
counts as flushed.

Truncation by the epoch protocol may fall inside a batch (a follower received several
entries of one epoch in one Fetch answer; the new leader ended that epoch earlier): the
batch is cut out whole and the entries of it that stay are appended again, so the end
offset is exactly the one asked for.  Those re-appended entries are not durable until the
next :meth:`flush`.

Costs: append O(entries + bytes) (one write); flush one fsync per segment + maybe the
directory; ``entries_from`` reads and decodes the batches from the offset up to
``max_entries``; construction reads every batch header once (the metadata log is small).
Not thread-safe: owned by the replica's driver (the controller's event loop).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from broker.controller.quorum.entry_batches import batches_to_entries, entries_to_batches
from replication.leader_epoch_cache import UNDEFINED_EPOCH, LeaderEpochCache
from replication.raft.messages import Entry, OffsetAndEpoch
from storage.config import LogConfig
from storage.log.log import Log

__all__ = ["RAFT_LOG_CONFIG", "FileRaftLog"]

# No flush policy: the replica flushes (fsync) before it reports its end offset.  No
# retention: only segments below the log start (a snapshot holds them) are deleted.
RAFT_LOG_CONFIG = LogConfig(max_message_bytes=16 * 1024 * 1024, retention_ms=-1)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class FileRaftLog:
    """A RaftLog over an open metadata :class:`Log` (the caller opens and closes it)."""

    def __init__(self, log: Log, *, max_batch_records: int = 1000,
                 clock_ms: Callable[[], int] = _wall_clock_ms) -> None:
        if max_batch_records < 1:
            raise ValueError("max_batch_records must be >= 1")
        self._log = log
        self._max_batch_records = max_batch_records
        self._clock_ms = clock_ms
        self._cache = LeaderEpochCache()
        for header, _data in log.batches(log.log_start_offset):
            if header.partition_leader_epoch != self._cache.latest_epoch:
                self._cache.assign(header.partition_leader_epoch,
                                   max(header.base_offset, log.log_start_offset))
        log.flush()
        self._flushed_end = log.log_end_offset
        self._dirty = False
        self._snapshot: OffsetAndEpoch | None = None  # the one the log continues

    @property
    def start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def start_snapshot(self) -> OffsetAndEpoch | None:
        """The snapshot the log starts at (None: it starts at 0)."""
        return self._snapshot

    def start_at_snapshot(self, snapshot_id: OffsetAndEpoch | None) -> None:
        """At open: the log continues ``snapshot_id`` (the newest valid snapshot), or
        starts at 0 (None).  A snapshot past the log end resets the log to it."""
        if snapshot_id is None or snapshot_id.end_offset < self.start_offset:
            if self.start_offset > 0:
                raise ValueError(f"the metadata log starts at {self.start_offset} but no "
                                 f"valid snapshot reaches it (newest: {snapshot_id})")
            return
        if snapshot_id.end_offset > self.end_offset:
            self.reset_to_snapshot(snapshot_id)
        else:
            self.advance_start_offset(snapshot_id.end_offset, snapshot_id.epoch)

    @property
    def end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def flushed_end_offset(self) -> int:
        return self._flushed_end

    @property
    def last_epoch(self) -> int:
        return self._cache.latest_epoch if self.end_offset else UNDEFINED_EPOCH

    @property
    def epoch_cache(self) -> LeaderEpochCache:
        return self._cache

    def entries_from(self, offset: int, max_entries: int) -> Sequence[Entry]:
        if offset < self.start_offset:
            raise ValueError(f"offset {offset} is below the log start {self.start_offset}")
        if offset >= self.end_offset or max_entries <= 0:
            return []
        out: list[Entry] = []
        for _header, data in self._log.batches(offset):
            out.extend(e for _o, e in batches_to_entries(data, offset, max_entries - len(out)))
            if len(out) >= max_entries:
                break
        return out

    def append(self, entries: Iterable[Entry]) -> None:
        items = list(entries)
        if not items:
            return
        last = self.last_epoch
        for entry in items:
            if entry.epoch < last:
                raise ValueError(f"entry of epoch {entry.epoch} after epoch {last}")
            last = entry.epoch
        base = self.end_offset
        data = entries_to_batches(base, items, self._clock_ms(), self._max_batch_records)
        self._log.append_as_follower(data)  # offsets and epochs as built
        offset, last = base, self.last_epoch
        for entry in items:
            if entry.epoch != last:
                self._cache.assign(entry.epoch, offset)
                last = entry.epoch
            offset += 1
        self._dirty = True

    def truncate_to(self, offset: int) -> None:
        if offset < self.start_offset:
            raise ValueError(f"cannot truncate to {offset}, below the log start "
                             f"{self.start_offset}")
        if offset >= self.end_offset:
            return
        if offset == self.start_offset and self._snapshot is not None:
            self.reset_to_snapshot(self._snapshot)  # nothing after the snapshot stays
            return
        kept: list[Entry] = []
        for header, data in self._log.batches(offset):
            if header.base_offset < offset:  # the cut falls inside this batch
                kept = [e for o, e in batches_to_entries(data) if o < offset]
                offset = header.base_offset
            break
        self._log.truncate_to(offset)
        self._cache.truncate_from_end(offset)
        self._flushed_end = min(self._flushed_end, offset)
        self._dirty = True
        self.append(kept)

    def flush(self) -> None:
        if self._dirty:
            self._log.flush()
            self._dirty = False
        self._flushed_end = self.end_offset

    def advance_start_offset(self, offset: int, epoch: int | None = None) -> None:
        """Drop the entries below ``offset`` (a snapshot holds them; ``epoch``: the epoch
        of the entry before it, known from the snapshot when the log lacks it)."""
        if not self.start_offset <= offset <= self.end_offset:
            raise ValueError(f"log start {offset} outside [{self.start_offset}, "
                             f"{self.end_offset}]")
        if epoch is None:
            epoch = self._cache.epoch_for_offset(offset - 1)
        self._snapshot = OffsetAndEpoch(offset, epoch)
        if offset == self.start_offset and self._cache.entries:
            return
        self._log.maybe_increment_log_start_offset(offset)
        self._log.delete_old_segments()  # whole segments below the start (no retention)
        if offset < self.end_offset:
            self._cache.truncate_from_start(offset)
        else:
            self._cache.clear()
            self._cache.assign(epoch, offset)

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Every entry dropped; the log restarts empty at the snapshot's end (fsync'd)."""
        self._log.truncate_fully_and_start_at(snapshot_id.end_offset)
        self._log.flush()
        self._cache.clear()
        self._cache.assign(snapshot_id.epoch, snapshot_id.end_offset)
        self._snapshot = snapshot_id
        self._flushed_end = self.end_offset
        self._dirty = False
