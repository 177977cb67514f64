"""FetchSnapshot's two ends (KIP-630) for the KRaft replica: the leader serving a chunk
of a snapshot (:func:`serve_snapshot_chunk`) and a follower's progress through one
snapshot (:class:`SnapshotFetch`).

A leader names its newest snapshot (:func:`snapshot_reaching`) to a follower its log can
no longer validate (:func:`needs_snapshot`) and answers ``max_bytes`` of the snapshot
from the request's position, with the snapshot's size; SNAPSHOT_NOT_FOUND when its store
no longer holds that snapshot, POSITION_OUT_OF_RANGE for a position past the size.

A follower's :class:`SnapshotFetch` asks from the bytes it holds (one request in flight:
:attr:`SnapshotFetch.pending`), appends each answer that continues exactly there, and is
*done* once it holds ``size`` bytes.  It *fails* (the replica drops it and Fetches again,
which names the leader's newest snapshot) on an error answer, a size past
``max_snapshot_bytes`` (the bound of what it holds in memory), a size that changed
between chunks, an empty chunk before the end, or more bytes than the size.

Costs: a chunk is O(bytes) (a copy); the follower holds at most ``max_snapshot_bytes``.
Not thread-safe: owned by the replica.
"""

from __future__ import annotations

import enum

from clients.protocol.errors import ErrorCode
from replication.raft.messages import (
    OffsetAndEpoch,
    QuorumFetchSnapshotRequest,
    QuorumFetchSnapshotResponse,
)
from replication.raft.snapshot_store import SnapshotStore

__all__ = ["SnapshotFetch", "SnapshotFetchState", "needs_snapshot", "serve_snapshot_chunk",
           "snapshot_reaching"]


def needs_snapshot(start: OffsetAndEpoch | None, fetch_offset: int,
                   last_fetched_epoch: int) -> bool:
    """Kafka's rule (``KafkaRaftLog.validateOffsetAndEpoch``) for a leader whose log starts
    at the snapshot ``start`` (None: at 0): the follower must fetch a snapshot when its
    fetch offset is below the log start, at it with another epoch, or its last epoch is
    older than the snapshot's (where it diverges is no longer in the leader's log: the
    epoch cache only knows epochs from the log start)."""
    return start is not None and (
        fetch_offset < start.end_offset or last_fetched_epoch < start.epoch
        or (fetch_offset == start.end_offset and last_fetched_epoch != start.epoch))


def snapshot_reaching(store: SnapshotStore | None, log_start_offset: int) -> OffsetAndEpoch:
    """The leader's newest snapshot, named to a follower below its log start; one must
    reach the log start (else the application cut the log without a snapshot: a bug)."""
    snapshot_id = store.latest_id() if store is not None else None
    if snapshot_id is None or snapshot_id.end_offset < log_start_offset:
        raise RuntimeError(f"log start {log_start_offset} without a snapshot reaching it "
                           f"({snapshot_id})")
    return snapshot_id


def serve_snapshot_chunk(store: SnapshotStore | None, snapshot_id: OffsetAndEpoch,
                         position: int, max_bytes: int) -> tuple[ErrorCode, int, bytes]:
    """``(error, size, data)`` of the leader's answer to a FetchSnapshot."""
    size = store.size(snapshot_id) if store is not None else None
    if store is None or size is None:
        return ErrorCode.SNAPSHOT_NOT_FOUND, 0, b""
    if not 0 <= position <= size:
        return ErrorCode.POSITION_OUT_OF_RANGE, size, b""
    data = store.read(snapshot_id, position, max_bytes)
    if data is None:
        return ErrorCode.SNAPSHOT_NOT_FOUND, 0, b""
    return ErrorCode.NONE, size, data


class SnapshotFetchState(enum.Enum):
    MORE = "more"  # ask for the next chunk
    DONE = "done"  # every byte held: install it
    FAILED = "failed"  # drop it; Fetch again


class SnapshotFetch:
    def __init__(self, snapshot_id: OffsetAndEpoch, max_snapshot_bytes: int) -> None:
        self.snapshot_id = snapshot_id
        self.max_snapshot_bytes = max_snapshot_bytes
        self.data = bytearray()
        self.size: int | None = None
        self.pending: QuorumFetchSnapshotRequest | None = None

    def request(self, epoch: int, replica_id: int) -> QuorumFetchSnapshotRequest:
        self.pending = QuorumFetchSnapshotRequest(epoch, replica_id, self.snapshot_id,
                                                  len(self.data))
        return self.pending

    def answers_pending(self, resp: QuorumFetchSnapshotResponse) -> bool:
        """The answer to the request in flight (not a late or duplicated one)."""
        return (self.pending is not None and resp.epoch == self.pending.epoch
                and resp.snapshot_id == self.snapshot_id
                and resp.position == self.pending.position)

    def accept(self, resp: QuorumFetchSnapshotResponse) -> SnapshotFetchState:
        """Take the answer to the pending request (:meth:`answers_pending`)."""
        self.pending = None
        if (resp.error is not ErrorCode.NONE or resp.size > self.max_snapshot_bytes
                or (self.size is not None and resp.size != self.size)
                or (not resp.data and resp.position < resp.size)
                or resp.position + len(resp.data) > resp.size):
            return SnapshotFetchState.FAILED
        self.size = resp.size
        self.data += resp.data
        return SnapshotFetchState.DONE if len(self.data) == resp.size else SnapshotFetchState.MORE
