"""SnapshotStore: where a KRaft replica finds the snapshots it serves with FetchSnapshot
and installs the ones it fetches (KIP-630), and an in-memory reference.

A snapshot is the application's state after every entry below its
:class:`~replication.raft.messages.OffsetAndEpoch`'s ``end_offset``, as opaque bytes; only
committed state is ever snapshotted, so a snapshot never has to be undone.  The
application writes its own snapshots (and then may raise the log start,
:meth:`RaftLog.advance_start_offset`); the replica only reads them (the leader, for a
follower below its log start) and installs fetched ones (a follower).

Contract:

* :meth:`SnapshotStore.latest_id` - the newest snapshot the store holds (None: none).
* :meth:`SnapshotStore.size` / :meth:`SnapshotStore.read` - its size, and ``max_bytes``
  of it from ``position`` (None: the store does not hold that snapshot).
* :meth:`SnapshotStore.install` - a fetched snapshot, whole: the store checks it (the
  application decodes it) and keeps it durably before returning True; False when the
  bytes are not a valid snapshot of that id (nothing is kept).

:class:`MemorySnapshotStore` keeps them in a dict (``contents``: one the owner passes in
and keeps across a crash, as the simulation's disk does: writes are durable on return)
and checks with an optional ``validate``.

Costs: O(bytes) per read and install here; a file store fsyncs on install.  Not
thread-safe: one owner (the replica's driver).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from replication.raft.messages import OffsetAndEpoch

__all__ = ["MemorySnapshotStore", "SnapshotStore"]


class SnapshotStore(Protocol):
    def latest_id(self) -> OffsetAndEpoch | None: ...

    def size(self, snapshot_id: OffsetAndEpoch) -> int | None: ...

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes | None: ...

    def install(self, snapshot_id: OffsetAndEpoch, data: bytes) -> bool: ...


class MemorySnapshotStore:
    """Snapshots in a dict; ``validate(snapshot_id, data)`` decides what install keeps."""

    def __init__(self, validate: Callable[[OffsetAndEpoch, bytes], bool] | None = None,
                 contents: dict[OffsetAndEpoch, bytes] | None = None) -> None:
        self._snapshots = {} if contents is None else contents
        self._validate = validate

    def latest_id(self) -> OffsetAndEpoch | None:
        return max(self._snapshots, default=None)

    def size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        data = self._snapshots.get(snapshot_id)
        return None if data is None else len(data)

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes | None:
        data = self._snapshots.get(snapshot_id)
        return None if data is None else data[position:position + max_bytes]

    def install(self, snapshot_id: OffsetAndEpoch, data: bytes) -> bool:
        if self._validate is not None and not self._validate(snapshot_id, data):
            return False
        self._snapshots[snapshot_id] = bytes(data)
        return True

    def write(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """The application's own snapshot (durable on return)."""
        self._snapshots[snapshot_id] = bytes(data)
