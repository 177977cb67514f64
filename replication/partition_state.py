"""A partition replica's fields and views, and its idempotent-producer state.

:class:`PartitionState` is the base :class:`replication.partition.Partition` is built
from (with :class:`replication.partition_follower.PartitionFollower`).  It holds the
replica's fields (role, epochs, HW, followers, ISR state, leader-epoch cache), the
read-only views of them, and the producer state kept alongside the log.

Idempotent producers (:mod:`replication.producer_state`): every appended batch, leader or
follower, updates the state (:meth:`PartitionState._after_append`).  The state is rebuilt
at construction and after every truncation from the latest snapshot at or below the LEO
(``<log dir>/<offset>.snapshot``, :mod:`storage.producer_snapshot`) plus a replay of
``Log.batches()`` from the snapshot's offset; snapshots above a truncation point are
deleted.  :meth:`PartitionState.take_producer_snapshot` (the broker's checkpoint timer and
shutdown) and every segment roll write one, keeping the newest
:data:`PRODUCER_SNAPSHOTS_KEPT`.  Logs that are not a :class:`storage.log.Log` (the
simulation's in-memory log) get the state without snapshot files.

Costs: views O(1) (``isr``/``maximal_isr`` copy O(|ISR|)); ``_after_append``
O(batches); a rebuild one snapshot read plus O(bytes of the log above the snapshot); a
snapshot write O(producers) plus an fsync.  Not thread-safe: owned by the broker's event
loop.
"""

from __future__ import annotations

import logging
from pathlib import Path

from clients.protocol.errors import CorruptRecordError
from clients.records.batch import BatchHeader, iter_batches
from replication.isr import UNKNOWN_OFFSET, AlterPartitionProposal, IsrState, ReplicaState
from replication.leader_epoch_cache import LeaderEpochCache
from replication.producer_state import ProducerStateManager
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT
from storage.log.log import Log, LogAppendInfo
from storage.producer_snapshot import (
    delete_snapshots_above,
    load_latest_snapshot,
    retain_latest_snapshots,
    write_snapshot,
)

__all__ = ["NO_LEADER", "PRODUCER_SNAPSHOTS_KEPT", "PartitionState"]

# the logger keeps the name it had before the split (one logger for the whole replica)
log = logging.getLogger("replication.partition")
NO_LEADER = -1
PRODUCER_SNAPSHOTS_KEPT = 3


class PartitionState:
    """Fields, views and producer state of one partition replica."""

    def __init__(self, topic: str, index: int, log: Log, local_broker_id: int, *,
                 leader_epoch_cache: LeaderEpochCache | None = None) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.local_broker_id = local_broker_id
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.high_watermark = 0
        self.followers: dict[int, ReplicaState] = {}
        self.isr_state = IsrState()
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self._leader_hw_floor = 0  # HW when this leadership began: never go below
        if leader_epoch_cache is None:
            leader_epoch_cache = LeaderEpochCache.load(
                Path(log.dir) / LEADER_EPOCH_CHECKPOINT, log.log_start_offset,
                log.log_end_offset,
                batches=((h.partition_leader_epoch, h.base_offset) for h, _ in log.batches()),
            )
        self.leader_epoch_cache = leader_epoch_cache
        self.producer_state = ProducerStateManager(f"{topic}-{index}")
        self._snapshot_dir: Path | None = Path(log.dir) if isinstance(log, Log) else None
        self._snapshot_offset = -1  # offset of the newest snapshot written or loaded
        self.rebuild_producer_state()

    # -- views -----------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def isr(self) -> list[int]:
        """The committed ISR (what the controller accepted)."""
        return list(self.isr_state.isr)

    @property
    def maximal_isr(self) -> list[int]:
        """Committed ISR plus replicas a pending proposal adds (used for the HW)."""
        return list(self.isr_state.maximal_isr)

    @property
    def pending_alter_partition(self) -> AlterPartitionProposal | None:
        """The proposal awaiting an answer (to resend), None if none or blocked."""
        return None if self.isr_state.blocked else self.isr_state.pending

    @property
    def truncation_request_epoch(self) -> int:
        """The epoch a follower asks the leader about: its latest (-1 = none)."""
        return self.leader_epoch_cache.latest_epoch

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower(of {self.leader_id})"
        return (f"Partition({self.topic}-{self.index}@{self.local_broker_id} {role} "
                f"epoch={self.leader_epoch} hw={self.high_watermark} "
                f"leo={self.log_end_offset} isr={list(self.isr_state.isr)})")

    # -- log start -------------------------------------------------------------------

    def sync_log_start(self) -> None:
        """Trim the epoch cache after the log start moved (retention, DeleteRecords)."""
        entries = self.leader_epoch_cache.entries
        if entries and entries[0].start_offset < self.log_start_offset:
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    # -- producer state --------------------------------------------------------------

    def _after_append(self, headers: list[BatchHeader] | None, info: LogAppendInfo,
                      *, assigned: bool) -> None:
        """Feed appended batches to the producer state (snapshot first on a roll)."""
        if getattr(info, "rolled", False):
            # the state below the new segment; the batches are in the log already, so a
            # failed snapshot must not skip the update below (a retry would be appended)
            try:
                self._write_producer_snapshot(info.first_offset)
            except OSError as exc:
                log.warning("%s-%d: producer snapshot at %d failed: %s", self.topic,
                            self.index, info.first_offset, exc)
        if not headers:
            return
        state = self.producer_state
        offset = info.first_offset
        for h in headers:
            if h.producer_id >= 0:
                first = offset if assigned else h.base_offset
                last = first + h.last_offset_delta
                state.update(h.producer_id, h.producer_epoch, h.base_sequence,
                             h.last_sequence, first, last, h.max_timestamp)
            offset += h.last_offset_delta + 1

    def rebuild_producer_state(self) -> None:
        """Producer state = latest snapshot <= LEO + replay of the log from its offset.

        Snapshots above the LEO (a truncated or crash-shortened log) are deleted first.
        Cost: one snapshot read plus O(bytes of the log above the snapshot).
        """
        state = self.producer_state
        state.clear()
        leo = self.log_end_offset
        start: int | None = None
        self._snapshot_offset = -1
        directory = self._snapshot_dir
        if directory is not None:
            delete_snapshots_above(directory, leo)
            found = load_latest_snapshot(directory, leo)
            if found is not None:
                offset, entries = found
                state.load(entries)
                start = self._snapshot_offset = offset
        if start == leo:
            return
        for header, _data in self.log.batches(start):
            state.update_from_batch(header)

    def take_producer_snapshot(self) -> bool:
        """Snapshot the producer state at the LEO if the LEO moved since the last one.

        An empty state is snapshotted too: the next start then replays only the log
        above it instead of the whole log (a topic without idempotent producers).
        """
        leo = self.log_end_offset
        if leo == self._snapshot_offset or leo == 0:
            return False
        return self._write_producer_snapshot(leo)

    def _write_producer_snapshot(self, offset: int) -> bool:
        directory = self._snapshot_dir
        if directory is None:
            return False
        write_snapshot(directory, offset, self.producer_state.snapshot())
        self._snapshot_offset = max(self._snapshot_offset, offset)
        retain_latest_snapshots(directory, PRODUCER_SNAPSHOTS_KEPT)
        return True

    def remove_expired_producers(self, now_ms: int) -> int:
        """Sweep producers idle for ``producer_id_expiration_ms`` (the caller's clock)."""
        return self.producer_state.remove_expired(now_ms)


def _headers_or_none(batches: bytes | bytearray | memoryview) -> list[BatchHeader] | None:
    """Headers of the request's batches, or None if they do not parse (the log's
    validation then raises the precise error).  O(batches)."""
    try:
        return [h for _, h in iter_batches(batches, validate=False)]
    except CorruptRecordError:
        return None
