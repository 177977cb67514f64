"""FollowerFetch: a KRaft follower's fetching from its leader - the request in flight,
when the next one is due, the snapshot being fetched - and what an answer does to the
follower's log (part of :class:`replication.raft.replica.KRaftReplica`, which decides
*whether* it follows and whom).

Rules (KIP-595, KIP-630):

* One request in flight (:attr:`FollowerFetch.pending`); an unanswered one is due again
  after ``request_timeout_ms``, a caught-up follower's next Fetch after
  ``fetch_interval_ms``.  Before a Fetch the log is flushed: the fetch offset reports
  what the follower holds durably.  The Fetch carries the replica's ``observer`` flag (a
  voter whose disk was lost: the leader does not count it).
* A Fetch answer counts only if it answers the pending Fetch (same base offset, and the
  log still ends there with the same last epoch) and carries no error; a FetchSnapshot
  answer only if it answers the pending FetchSnapshot (same snapshot, same position).
* ``diverging``: truncate by the epoch protocol
  (:func:`replication.truncation.decide_truncation`; never below the log start) and
  fetch again.  Entries: append; the high watermark
  becomes ``min(leader's, log end)`` if that is higher; fetch again at once while entries
  come.
* ``snapshot_id`` (the leader's log cannot validate ours any more:
  :func:`~replication.raft.snapshot_fetch.needs_snapshot`): fetch that snapshot in
  chunks (:class:`~replication.raft.snapshot_fetch.SnapshotFetch`), install it through
  the :class:`~replication.raft.snapshot_store.SnapshotStore` (which checks and keeps it
  durably), reset the log to start empty at its end offset (what we held past it
  diverged from the leader, or is in the snapshot: nothing committed is lost), move the
  high watermark there (a snapshot is committed) and fetch the log after it.  A snapshot
  that fails (an error answer, too big, refused by the store) is dropped and the next
  Fetch - after ``fetch_interval_ms``, not in a loop - names the leader's newest one.
* :meth:`FollowerFetch.on_answer` returns a :class:`FetchOutcome`: the new high
  watermark, whether to fetch again now, and how many entries a Fetch answer appended
  (None for a diverging, snapshot or FetchSnapshot answer) - what the replica's rejoin
  check (:mod:`replication.raft.rejoin`) needs.

Costs: O(entries of an answer) per Fetch answer (an append), O(chunk) per FetchSnapshot
answer, O(snapshot) to install it.  Not thread-safe: owned by the replica.
"""

from __future__ import annotations

from typing import NamedTuple

from clients.protocol.errors import ErrorCode
from replication.raft.config import RaftConfig
from replication.raft.messages import (
    QuorumFetchRequest,
    QuorumFetchResponse,
    QuorumFetchSnapshotRequest,
    QuorumFetchSnapshotResponse,
)
from replication.raft.raft_log import RaftLog
from replication.raft.snapshot_fetch import SnapshotFetch, SnapshotFetchState
from replication.raft.snapshot_store import SnapshotStore
from replication.truncation import EpochEndOffset, decide_truncation

__all__ = ["FetchAnswer", "FetchOutcome", "FollowerFetch", "is_resigned_answer"]

FetchAnswer = QuorumFetchResponse | QuorumFetchSnapshotResponse


class FetchOutcome(NamedTuple):
    high_watermark: int
    again: bool  # fetch again now
    entries: int | None = None  # appended by a Fetch answer; None: not an entries answer


class FollowerFetch:
    def __init__(self, node_id: int, log: RaftLog, config: RaftConfig,
                 snapshots: SnapshotStore | None) -> None:
        self.node_id = node_id
        self.log = log
        self.config = config
        self.snapshots = snapshots
        self.pending: QuorumFetchRequest | QuorumFetchSnapshotRequest | None = None
        self.snapshot: SnapshotFetch | None = None
        self.sent_ms = 0
        self.next_ms = 0

    def reset(self) -> None:
        """A new leader or role: nothing in flight, no snapshot in progress."""
        self.pending = self.snapshot = None

    def deadline_ms(self) -> int:
        return (self.next_ms if self.pending is None
                else self.sent_ms + self.config.request_timeout_ms)

    def due(self, now_ms: int) -> bool:
        return now_ms >= self.deadline_ms()

    def request(self, epoch: int, now_ms: int, observer: bool = False
                ) -> QuorumFetchRequest | QuorumFetchSnapshotRequest:
        """The next request to the leader (it becomes the pending one)."""
        self.sent_ms = now_ms
        if self.snapshot is not None:
            self.pending = self.snapshot.request(epoch, self.node_id)
            return self.pending
        self.log.flush()  # the fetch offset reports what we hold durably
        self.pending = QuorumFetchRequest(epoch, self.node_id, self.log.end_offset,
                                          self.log.last_epoch, observer)
        return self.pending

    def answers_pending(self, resp: FetchAnswer) -> bool:
        """``resp`` is the answer to the request in flight (not late, duplicated, or a
        Fetch error: the timer re-sends)."""
        pending = self.pending
        if isinstance(resp, QuorumFetchSnapshotResponse):
            return (self.snapshot is not None and pending is self.snapshot.pending
                    and self.snapshot.answers_pending(resp))
        return (isinstance(pending, QuorumFetchRequest) and not resp.error
                and resp.epoch == pending.epoch
                and resp.base_offset == pending.fetch_offset
                and self.log.end_offset == pending.fetch_offset
                and self.log.last_epoch == pending.last_fetched_epoch)

    def on_answer(self, resp: FetchAnswer, high_watermark: int, now_ms: int
                  ) -> FetchOutcome:
        """Apply the pending request's answer."""
        self.pending = None
        if isinstance(resp, QuorumFetchSnapshotResponse):
            return self._on_snapshot_chunk(resp, high_watermark, now_ms)
        if resp.snapshot_id is not None:
            if self.snapshots is None or resp.snapshot_id.end_offset < high_watermark:
                self.next_ms = now_ms + self.config.fetch_interval_ms
                return FetchOutcome(high_watermark, False)  # we hold more committed
            self.snapshot = SnapshotFetch(resp.snapshot_id, self.config.max_snapshot_bytes)
            return FetchOutcome(high_watermark, True)
        if resp.diverging is not None:
            decision = decide_truncation(EpochEndOffset(*resp.diverging), self.log.epoch_cache,
                                         self.log.end_offset, self.log.start_offset,
                                         high_watermark)
            self.log.truncate_to(decision.truncate_to)
            return FetchOutcome(high_watermark, True)
        self.log.append(resp.entries)
        high_watermark = max(high_watermark, min(resp.high_watermark, self.log.end_offset))
        if not resp.entries:
            self.next_ms = now_ms + self.config.fetch_interval_ms
        return FetchOutcome(high_watermark, bool(resp.entries), len(resp.entries))

    def _on_snapshot_chunk(self, resp: QuorumFetchSnapshotResponse, high_watermark: int,
                           now_ms: int) -> FetchOutcome:
        fetch = self.snapshot
        assert fetch is not None  # answers_pending checked it
        state = fetch.accept(resp)
        if state is SnapshotFetchState.MORE:
            return FetchOutcome(high_watermark, True)
        self.snapshot = None
        snapshot_id = fetch.snapshot_id
        if (state is SnapshotFetchState.DONE and self.snapshots is not None
                and snapshot_id.end_offset >= high_watermark
                and self.snapshots.install(snapshot_id, bytes(fetch.data))):
            self.log.reset_to_snapshot(snapshot_id)
            return FetchOutcome(max(high_watermark, snapshot_id.end_offset), True)
        self.next_ms = now_ms + self.config.fetch_interval_ms
        return FetchOutcome(high_watermark, False)


def is_resigned_answer(resp: FetchAnswer, epoch: int) -> bool:
    """Our leader of ``epoch`` says it is not the leader (it restarted and resigned)."""
    return resp.error is ErrorCode.NOT_LEADER_OR_FOLLOWER and resp.epoch == epoch
