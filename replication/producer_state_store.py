"""The idempotent-producer state of one replica's log, kept in step with the log and on disk.

:class:`ProducerStateStore` is the producer-state part of a replica's
:class:`replication.partition_log.PartitionLog` (beside its log and leader-epoch cache,
changed together with them).  It owns

* the :class:`~replication.producer_state.ProducerStateManager` (the rules, pure), exposed
  as :attr:`ProducerStateStore.state` for the leader's check before an append;
* the snapshot files ``<log dir>/<offset>.snapshot`` (:mod:`storage.producer_snapshot`)
  and the offset of the newest one written or loaded.

It reads, and never writes, the log it was given: ``log_end_offset``, ``batches(start)``
and ``dir`` (where the snapshot files are).

Who calls what (all from the owning partition, on the broker's event loop):

* :meth:`ProducerStateStore.record_append` after every append, leader or follower: feeds
  the appended batches' headers to the state (a control batch's marker, read from its
  record, ends the producer's transaction: the completed transactions are returned, for
  the caller's ``.txnindex``), and on a segment roll first writes a snapshot at the new
  segment's base (a failed write is logged, the update still happens: the batches are in
  the log, a retry must be answered as a duplicate).
* :meth:`ProducerStateStore.rebuild` at construction and after a truncation that lowered
  the LEO: state = latest snapshot at or below the LEO + a replay of ``log.batches()``
  from the snapshot's offset (markers included: open transactions come back, the
  ``.txnindex`` is the log's own business); snapshots above the LEO are deleted first.  With
  ``discard_snapshots=True`` (the log restarted empty at a new offset) every snapshot is
  deleted, since each describes a history now gone.
* :meth:`ProducerStateStore.take_snapshot` (the broker's checkpoint timer and shutdown,
  through ``Partition.take_producer_snapshot``): a snapshot at the LEO if it moved since
  the last one.  Every write keeps the newest :data:`PRODUCER_SNAPSHOTS_KEPT`, and the
  newest durable one.

Durability: snapshots on a roll and on the checkpoint timer are written without fsync
(an fsync per partition on the broker's event loop stalls every request behind it, and
with many partitions long enough to miss heartbeats); the clean shutdown's are
fsync'd.  A snapshot is only a shortcut: one a power cut lost or tore fails its CRC
and is skipped, and the state is rebuilt from an older snapshot plus the log.  Retention
never deletes the newest durable snapshot (written at a shutdown, or loaded at the
start, so it survived one), so that fallback stays short.

Costs: :meth:`record_append` O(batches) (plus a snapshot write on a roll); a rebuild one
snapshot read plus O(bytes of the log above the snapshot); a snapshot write O(producers)
(plus two fsyncs at a shutdown).  Not thread-safe: owned by the partition, on the
broker's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from clients.protocol.errors import CorruptRecordError, InvalidRecordError
from clients.records.batch import BatchHeader
from clients.records.control import ControlType, parse_marker
from clients.records.record import decode_batch
from replication.producer_state import CompletedTxn, ProducerStateManager
from storage.log.log import Log
from storage.log.validator import LogAppendInfo
from storage.producer_snapshot import (
    delete_snapshots_above,
    load_latest_snapshot,
    retain_latest_snapshots,
    write_snapshot,
)

__all__ = ["PRODUCER_SNAPSHOTS_KEPT", "ProducerStateStore"]

logger = logging.getLogger(__name__)
PRODUCER_SNAPSHOTS_KEPT = 3


class ProducerStateStore:
    """Producer state of one log, its snapshots and its rebuild (see the module docstring)."""

    def __init__(self, name: str, log: Log) -> None:
        self.state = ProducerStateManager(name)
        self._log = log
        self._snapshot_dir = Path(log.dir)
        self._snapshot_offset = -1  # offset of the newest snapshot written or loaded
        # the newest snapshot known to be on disk for good (written durably, or loaded at
        # start): kept through retention while newer ones may be lost to a power cut
        self._durable_offset = -1
        self.rebuild()

    def record_append(self, headers: Sequence[BatchHeader] | None, info: LogAppendInfo,
                      *, assigned: bool,
                      records: bytes | bytearray | memoryview | None = None
                      ) -> list[CompletedTxn]:
        """Feed appended batches to the state (snapshot first on a roll); the
        transactions their markers completed.

        ``assigned``: the log assigned the offsets (a leader append), so the batches
        start at ``info.first_offset``; otherwise the headers' base offsets are kept.
        ``headers`` None: the batches did not parse before the append (not reached: the
        log's validation raises first).  ``records``: the appended bytes, where a
        control batch's marker is read (without them control batches are skipped).
        """
        if info.rolled:
            try:
                self._write_snapshot(info.first_offset, durable=False)
            except OSError as exc:
                logger.warning("%s: producer snapshot at %d failed: %s", self.state.name,
                               info.first_offset, exc)
        completed: list[CompletedTxn] = []
        if not headers:
            return completed
        state = self.state
        offset = info.first_offset
        pos = 0
        for h in headers:
            if h.producer_id >= 0:
                first = offset if assigned else h.base_offset
                if h.is_control:
                    marker = None if records is None else marker_at(records, pos)
                    if marker is not None:
                        done = state.update_marker(h.producer_id, h.producer_epoch, marker[1],
                                                   first, marker[0] is ControlType.ABORT)
                        if done is not None:
                            completed.append(done)
                else:
                    state.update(h.producer_id, h.producer_epoch, h.base_sequence,
                                 h.last_sequence, first, first + h.last_offset_delta,
                                 h.max_timestamp, is_transactional=h.is_transactional)
            offset += h.last_offset_delta + 1
            pos += h.size_in_bytes
        return completed

    def rebuild(self, *, discard_snapshots: bool = False) -> None:
        """State = latest snapshot <= LEO + replay of the log from its offset.

        Snapshots above the LEO (a truncated or crash-shortened log) are deleted first;
        every snapshot if ``discard_snapshots``.  Cost: one snapshot read plus O(bytes of
        the log above the snapshot).
        """
        state = self.state
        state.clear()
        leo = self._log.log_end_offset
        start: int | None = None
        self._snapshot_offset = self._durable_offset = -1
        directory = self._snapshot_dir
        delete_snapshots_above(directory, -1 if discard_snapshots else leo)
        found = load_latest_snapshot(directory, leo)
        if found is not None:
            offset, entries = found
            state.load(entries)
            start = self._snapshot_offset = self._durable_offset = offset
        if start == leo:
            return
        # (a batch without a producer id changes no producer's state: passed over)
        for header, data in self._log.batches(start, producers_only=True):
            if not header.is_control:
                state.update_from_batch(header, is_transactional=header.is_transactional)
            elif header.producer_id >= 0:
                marker = marker_at(data, 0)
                if marker is not None:
                    state.update_marker(header.producer_id, header.producer_epoch, marker[1],
                                        header.base_offset, marker[0] is ControlType.ABORT)

    def take_snapshot(self, *, durable: bool = False) -> bool:
        """Snapshot the state at the LEO if the LEO moved since the last one (fsync'd
        only when ``durable``: a clean shutdown; see the module docstring).

        An empty state is snapshotted too: the next start then replays only the log
        above it instead of the whole log (a topic without idempotent producers).
        """
        leo = self._log.log_end_offset
        if leo == 0 or (leo == self._snapshot_offset
                        and (not durable or leo == self._durable_offset)):
            return False
        return self._write_snapshot(leo, durable=durable)

    def _write_snapshot(self, offset: int, *, durable: bool) -> bool:
        directory = self._snapshot_dir
        write_snapshot(directory, offset, self.state.snapshot(), durable=durable)
        self._snapshot_offset = max(self._snapshot_offset, offset)
        if durable:
            self._durable_offset = offset
        retain_latest_snapshots(directory, PRODUCER_SNAPSHOTS_KEPT, keep=self._durable_offset,
                                durable=durable)
        return True

    def __repr__(self) -> str:
        return (f"ProducerStateStore({self.state.name}, producers={len(self.state)}, "
                f"snapshot_offset={self._snapshot_offset})")


def marker_at(records: bytes | bytearray | memoryview, pos: int
              ) -> tuple[ControlType, int] | None:
    """``(type, coordinator_epoch)`` of the transaction marker in the control batch at
    ``pos`` of ``records``, or None when its record is not one (another control type,
    junk that the leader's check would not have let in: logged and skipped)."""
    try:
        found = decode_batch(records, pos, validate=False)
        if len(found) != 1:
            raise InvalidRecordError(f"{len(found)} records in a control batch, expected 1")
        return parse_marker(found[0].key, found[0].value)
    except (CorruptRecordError, InvalidRecordError) as exc:
        logger.warning("control batch at position %d is not a transaction marker: %s", pos,
                       exc)
        return None
