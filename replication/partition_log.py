"""One replica's log kept in step with its leader-epoch cache and its producer state.

The replication half of Kafka's ``UnifiedLog``: :class:`PartitionLog` owns, beside the
:class:`storage.log.log.Log` it was given (storage cannot import replication), the
:class:`~replication.leader_epoch_cache.LeaderEpochCache` and the
:class:`~replication.producer_state_store.ProducerStateStore`, and changes the three
together on every append, truncation and log-start move.  It knows nothing of roles,
high watermarks, ISRs or damage: its owner, :class:`replication.partition.Partition`,
decides *whether* to append or truncate and *where*; this says what else each change
must touch.

* a leader append (:meth:`PartitionLog.append_as_leader`): the producer check first, with
  the rules of the append's :class:`~replication.append_origin.AppendOrigin` (a client's
  Produce: epoch, sequence and duplicates; a coordinator's write to its internal topic:
  the epoch only) (an error raises; a retried batch returns its original offsets with
  ``num_batches == 0``, nothing appended); the epoch opened at the LEO before the append;
  the producer state after it;
* a follower append (:meth:`PartitionLog.append_as_follower`, origin REPLICATION: no
  producer check): the batches' epochs assigned
  before the append (trimmed back if it fails); the producer state after it;
* the log start raised (:meth:`PartitionLog.maybe_increment_log_start_offset`): the epoch
  cache trimmed to it (also lazily on each append and answer, or
  :meth:`PartitionLog.sync_log_start`: retention and DeleteRecords move it from outside);
* a truncation (:meth:`PartitionLog.truncate_to`): the epoch cache trimmed to the new LEO;
  the producer state rebuilt if the LEO went down;
* a restart at an offset (:meth:`PartitionLog.truncate_fully_and_start_at`): the epoch
  cache cleared; the producer state rebuilt and every snapshot discarded (each describes
  a history now gone).

The epoch cache is made durable before the records it names (``log.before_flush``).

Transactions (as Kafka's ``UnifiedLog``): the producer state tracks each producer's open
transaction (:mod:`replication.producer_state`, rules 6-11), fed by the same appends and
rebuilt on the same truncations; :attr:`PartitionLog.first_unstable_offset` is the first
offset of the oldest open (or not yet replicated) transaction, from which
:class:`Partition` derives the last stable offset.  A leader writes a COMMIT/ABORT marker
with :meth:`PartitionLog.append_marker` (rules 8-9 checked first); every append, leader
or follower, that completes an aborted transaction adds it to the log's ``.txnindex``
(:meth:`storage.log.log.Log.append_aborted_txn`, with the LSO after it), so a follower has
the same index and open transactions as its leader.  A leader's transactional batch that
would start a transaction carries the KIP-890 verification guard
(:meth:`PartitionLog.append_as_leader`).

Costs: appends cost the log's append plus O(batches); a truncation the log's plus
O(epochs) plus a producer-state rebuild when the LEO went down; views O(1).  Not
thread-safe: the partition's owner thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.records.batch import BatchHeader
from clients.records.control import ControlType, build_marker_batch
from replication.append_origin import AppendOrigin
from replication.leader_epoch_cache import LeaderEpochCache, LeaderEpochCacheError
from replication.partition_errors import PartitionInvariantError
from replication.producer_state import (
    CompletedTxn,
    ProducerStateManager,
    Verdict,
    VerdictKind,
    VerificationGuard,
)
from replication.producer_state_store import ProducerStateStore
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT
from storage.index.txn_index import AbortedTxn
from storage.log.log import Log
from storage.log.reader import FetchDataInfo
from storage.log.validator import BatchInfo, LogAppendInfo, validate_append_batches

__all__ = ["PartitionLog"]


class PartitionLog:
    """A log with its leader-epoch cache and producer state (see the module docstring)."""

    def __init__(self, name: str, log: Log,
                 leader_epoch_cache: LeaderEpochCache | None = None) -> None:
        self.log = log
        if leader_epoch_cache is None:
            leader_epoch_cache = LeaderEpochCache.load(
                Path(log.dir) / LEADER_EPOCH_CHECKPOINT, log.log_start_offset,
                log.log_end_offset,
                batches=((h.partition_leader_epoch, h.base_offset) for h, _ in log.batches()),
            )
        self.leader_epoch_cache = leader_epoch_cache
        log.before_flush = leader_epoch_cache.sync  # durable before the records it names
        self.producer_store = ProducerStateStore(name, log)

    @property
    def producer_state(self) -> ProducerStateManager:
        """The idempotent-producer state (rules in :mod:`replication.producer_state`)."""
        return self.producer_store.state

    def sync_log_start(self) -> None:
        """Trim the epoch cache after the log start moved (retention, DeleteRecords)."""
        entries = self.leader_epoch_cache.entries
        if entries and entries[0].start_offset < self.log.log_start_offset:
            self.leader_epoch_cache.truncate_from_start(self.log.log_start_offset)

    def end_offset_for(self, requested_epoch: int) -> tuple[int, int]:
        """The largest epoch <= ``requested_epoch`` and where it ends (the cache's rule)."""
        self.sync_log_start()
        return self.leader_epoch_cache.end_offset_for(requested_epoch, self.log.log_end_offset)

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest transaction open or ended by a marker the HW has
        not passed (None: none; see :meth:`on_high_watermark_updated`), at least the log
        start offset (Kafka's clamp: retention may delete an open transaction's start)."""
        first = self.producer_state.first_unstable_offset()
        return None if first is None else max(first, self.log.log_start_offset)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """The owner's HW moved (or was set): completed transactions whose marker is
        below it stop holding the LSO."""
        self.producer_state.on_high_watermark_updated(high_watermark)

    def append_as_leader(self, batches: bytes | bytearray | memoryview, leader_epoch: int,
                         checked: Sequence[BatchInfo] | None, *,
                         guard: VerificationGuard | None = None,
                         verification_required: bool = False,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """Append a producer's batches in ``leader_epoch`` (``checked``: the log's
        :meth:`~storage.log.log.Log.leader_check` of these bytes, already run; run here
        first otherwise).  The producer-state check reads the headers that validation
        unpacked: each batch header is parsed once per append; ``origin`` (CLIENT or
        COORDINATOR) picks its rules.  ``guard`` / ``verification_required``: rule 7 of
        :mod:`replication.producer_state` for a transactional batch that starts a
        transaction (KIP-890)."""
        if origin is AppendOrigin.REPLICATION:
            raise ValueError("a replicated batch is appended with append_as_follower")
        if checked is None:  # validated here, before the producer-state check, as the
            checked = self.log.leader_check(keys=False).run(batches)  # Produce handler does
        headers = [BatchHeader(*info[7]) for info in checked]
        state = self.producer_state
        verdict = (state.check_append(headers) if origin is AppendOrigin.CLIENT
                   else _check_epochs(state, headers))
        if verdict.kind is VerdictKind.ERROR:
            raise MiniKafkaError(verdict.message, verdict.error_code)
        if verdict.kind is VerdictKind.DUPLICATE:
            return LogAppendInfo(verdict.first_offset, verdict.last_offset, -1, -1, 0, 0,
                                 0, self.log.log_start_offset, ())
        for h in headers:
            if h.producer_id >= 0 or h.is_transactional:
                txn = state.check_txn_batch(h.producer_id, h.producer_epoch, h.is_transactional,
                                            guard, verification_required=verification_required)
                if txn.kind is VerdictKind.ERROR:
                    raise MiniKafkaError(txn.message, txn.error_code)
        self.sync_log_start()
        self.leader_epoch_cache.assign(leader_epoch, self.log.log_end_offset)  # O(1) no-op
        info = self.log.append_as_leader(batches, leader_epoch, checked)
        self._index_aborted(self.producer_store.record_append(headers, info, assigned=True,
                                                              records=batches))
        return info

    def append_marker(self, producer_id: int, producer_epoch: int, control_type: ControlType,
                      coordinator_epoch: int, leader_epoch: int, timestamp_ms: int, *,
                      strict_epoch: bool = False) -> LogAppendInfo:
        """Write a COMMIT/ABORT marker for ``producer_id`` as leader (WriteTxnMarkers):
        rules 8-9 first (MiniKafkaError INVALID_PRODUCER_EPOCH /
        TRANSACTION_COORDINATOR_FENCED; ``strict_epoch``: transaction version 2), then one
        control batch at the LEO; an ABORT that ends an open transaction goes to the
        ``.txnindex``."""
        verdict = self.producer_state.check_marker(producer_id, producer_epoch,
                                                   coordinator_epoch, strict_epoch=strict_epoch)
        if verdict.kind is VerdictKind.ERROR:
            raise MiniKafkaError(verdict.message, verdict.error_code)
        try:
            batch = build_marker_batch(producer_id, producer_epoch, control_type,
                                       coordinator_epoch, timestamp_ms)
        except ValueError as exc:
            raise MiniKafkaError(f"{self.producer_state.name}: {exc}",
                                 ErrorCode.INVALID_REQUEST) from None
        checked = validate_append_batches(memoryview(batch), len(batch), require_records=False)
        headers = [BatchHeader(*info[7]) for info in checked]
        self.sync_log_start()
        self.leader_epoch_cache.assign(leader_epoch, self.log.log_end_offset)
        info = self.log.append_as_leader(batch, leader_epoch, checked)
        self._index_aborted(self.producer_store.record_append(headers, info, assigned=True,
                                                              records=batch))
        return info

    def txn_marker_retry_offset(self, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int) -> int | None:
        """Transaction version 2: a marker rule 8 refused (its epoch is the producer's)
        that this leader already wrote (same producer epoch, no transaction opened since,
        from the same coordinator or a newer one finishing that prepared transaction) is
        a retry whose first answer was lost: the offset the HW must reach before it is
        answered as written (the LEO: the first copy lies below), else None (a late
        marker of an earlier transaction, or a zombie coordinator's)."""
        entry = self.producer_state.entry(producer_id)
        if (entry is None or entry.epoch != producer_epoch
                or coordinator_epoch < entry.coordinator_epoch
                or entry.current_txn_first_offset >= 0):
            return None
        return self.log.log_end_offset

    def aborted_transactions(self, fetch_offset: int, data: FetchDataInfo,
                             last_stable_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a READ_COMMITTED fetch's ``data`` (read from
        ``fetch_offset``) overlaps: upper bound the end of the last segment it read from,
        at most the LSO (Kafka bounds by the fetched data's end likewise; listing more is
        harmless).  Cost: the ``.txnindex`` lookups of the segments in range."""
        if not data.regions:
            return []
        upper = last_stable_offset
        last_path = data.regions[-1].path
        for seg in self.log.segments:
            if str(seg.log_path) == last_path:
                upper = min(upper, seg.next_offset)
                break
        return self.log.collect_aborted_transactions(fetch_offset, upper)

    def _index_aborted(self, completed: list[CompletedTxn]) -> None:
        """Add the aborted ones of ``completed`` to the log's ``.txnindex``."""
        state = self.producer_state
        for txn in completed:
            if txn.is_aborted:
                self.log.append_aborted_txn(AbortedTxn(
                    txn.producer_id, txn.first_offset, txn.last_offset,
                    state.last_stable_offset_after(txn)))

    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches copied from the leader (offsets and epochs kept).  Each batch
        header is parsed once: the log's check of the bytes (run first: invalid bytes
        change nothing) gives the epochs, the append and the producer state their
        fields."""
        checked = self.log.follower_check(batches)
        self.leader_epoch_cache.assign_all(_epoch_changes(checked))
        try:
            info = self.log.append_as_follower(batches, checked)
        except Exception:
            self.leader_epoch_cache.truncate_from_end(self.log.log_end_offset)
            raise
        self._index_aborted(self.producer_store.record_append(
            [BatchHeader(*i[7]) for i in checked], info, assigned=False, records=batches))
        return info

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """Raise the log start to ``offset`` (not above the LEO) if it is higher."""
        if offset > self.log.log_start_offset:
            self.log.maybe_increment_log_start_offset(min(offset, self.log.log_end_offset))
            self.sync_log_start()

    def check_invariants(self, name: str, log_end_offset: int | None = None) -> None:
        """:class:`PartitionInvariantError` unless the log start is at most the LEO and the
        epoch cache is consistent with the LEO (``log_end_offset``: the log's, when the
        caller read it already).  Reads only (the cache is trimmed to the log start
        lazily, so its first entry may start before the log start here)."""
        log = self.log
        leo = log.log_end_offset if log_end_offset is None else log_end_offset
        start = log.log_start_offset
        if start > leo:
            raise PartitionInvariantError(f"{name}: log start {start} > LEO {leo}")
        try:
            self.leader_epoch_cache.check_invariants(None, leo)
        except LeaderEpochCacheError as exc:
            raise PartitionInvariantError(f"{name}: {exc}") from exc

    def truncate_to(self, offset: int) -> None:
        """Drop everything at or after ``offset`` (batch boundary at or below)."""
        leo = self.log.log_end_offset
        self.log.truncate_to(offset)
        self.leader_epoch_cache.truncate_from_end(self.log.log_end_offset)
        if self.log.log_end_offset < leo:
            self.producer_store.rebuild()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Restart the log empty at ``offset``."""
        self.log.truncate_fully_and_start_at(offset)
        self.leader_epoch_cache.clear()
        self.producer_store.rebuild(discard_snapshots=True)


def _epoch_changes(checked: Sequence[BatchInfo]) -> list[tuple[int, int]]:
    """``(epoch, base_offset)`` of the first batch and of each epoch change among the
    checked batches (:func:`replication.leader_epoch_cache.epoch_changes`, from the
    fields the check read)."""
    changes: list[tuple[int, int]] = []
    for _pos, _size, base, _lod, _ts, _count, epoch, _header in checked:
        if not changes or changes[-1][0] != epoch:
            changes.append((epoch, base))
    return changes


def _check_epochs(state: ProducerStateManager, headers: Sequence[BatchHeader]) -> Verdict:
    """A coordinator's append (:mod:`replication.append_origin`): rule 2 of
    :mod:`replication.producer_state` only, no sequence or duplicate check."""
    for h in headers:
        entry = state.entry(h.producer_id) if h.producer_id >= 0 else None
        if h.producer_id >= 0 and h.producer_epoch < 0:
            return Verdict(VerdictKind.ERROR, ErrorCode.INVALID_RECORD, f"{state.name}: "
                           f"producer {h.producer_id}: a negative epoch {h.producer_epoch}")
        if entry is not None and h.producer_epoch < entry.epoch:
            return Verdict(VerdictKind.ERROR, ErrorCode.INVALID_PRODUCER_EPOCH,
                           f"{state.name}: producer {h.producer_id}: epoch {h.producer_epoch} "
                           f"is older than the current epoch {entry.epoch} (fenced)")
    return Verdict(VerdictKind.APPEND)
