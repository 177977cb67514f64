"""One replica's log kept in step with its leader-epoch cache and its producer state.

The replication half of Kafka's ``UnifiedLog``: :class:`PartitionLog` owns, beside the
:class:`storage.log.log.Log` it was given (storage cannot import replication), the
:class:`~replication.leader_epoch_cache.LeaderEpochCache` and the
:class:`~replication.producer_state_store.ProducerStateStore`, and changes the three
together on every append, truncation and log-start move.  It knows nothing of roles,
high watermarks, ISRs or damage: its owner, :class:`replication.partition.Partition`,
decides *whether* to append or truncate and *where*; this says what else each change
must touch.

* a leader append (:meth:`PartitionLog.append_as_leader`): the producer check first (an
  error raises; a retried batch returns its original offsets with ``num_batches == 0``,
  nothing appended); the epoch opened at the LEO before the append; the producer state
  after it;
* a follower append (:meth:`PartitionLog.append_as_follower`): the batches' epochs assigned
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
Transactions come next and belong here too: the partition-side transaction state (ongoing
transactions, the last stable offset, the aborted-transaction index) is fed from the same
appends and rebuilt on the same truncations as the producer state, as Kafka's
``ProducerStateManager`` and ``UnifiedLog`` do; :class:`Partition` then bounds
READ_COMMITTED reads by the last stable offset as it bounds reads by the HW.

Costs: appends cost the log's append plus O(batches); a truncation the log's plus
O(epochs) plus a producer-state rebuild when the LEO went down; views O(1).  Not
thread-safe: the partition's owner thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clients.protocol.errors import CorruptRecordError, MiniKafkaError
from clients.records.batch import BatchHeader, iter_batches
from replication.leader_epoch_cache import LeaderEpochCache, LeaderEpochCacheError, epoch_changes
from replication.partition_errors import PartitionInvariantError
from replication.producer_state import ProducerStateManager, VerdictKind
from replication.producer_state_store import ProducerStateStore
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT
from storage.log.log import Log
from storage.log.validator import BatchInfo, LogAppendInfo

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

    def append_as_leader(self, batches: bytes | bytearray | memoryview, leader_epoch: int,
                         checked: Sequence[BatchInfo] | None) -> LogAppendInfo:
        """Append a producer's batches in ``leader_epoch`` (``checked``: the log's
        :meth:`~storage.log.log.Log.leader_check` of these bytes, already run; run here
        first otherwise).  The producer-state check reads the headers that validation
        unpacked: each batch header is parsed once per append."""
        if checked is None:  # validated here, before the producer-state check, as the
            checked = self.log.leader_check(keys=False).run(batches)  # Produce handler does
        headers = [BatchHeader(*info[7]) for info in checked]
        verdict = self.producer_state.check_append(headers)
        if verdict.kind is VerdictKind.ERROR:
            raise MiniKafkaError(verdict.message, verdict.error_code)
        if verdict.kind is VerdictKind.DUPLICATE:
            return LogAppendInfo(verdict.first_offset, verdict.last_offset, -1, -1, 0, 0,
                                 0, self.log.log_start_offset, ())
        self.sync_log_start()
        self.leader_epoch_cache.assign(leader_epoch, self.log.log_end_offset)  # O(1) no-op
        info = self.log.append_as_leader(batches, leader_epoch, checked)
        self.producer_store.record_append(headers, info, assigned=True)
        return info

    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches copied from the leader (offsets and epochs kept)."""
        self.leader_epoch_cache.assign_all(epoch_changes(batches))
        try:
            info = self.log.append_as_follower(batches)
        except Exception:
            self.leader_epoch_cache.truncate_from_end(self.log.log_end_offset)
            raise
        self.producer_store.record_append(_headers_or_none(batches), info, assigned=False)
        return info

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """Raise the log start to ``offset`` (not above the LEO) if it is higher."""
        if offset > self.log.log_start_offset:
            self.log.maybe_increment_log_start_offset(min(offset, self.log.log_end_offset))
            self.sync_log_start()

    def check_invariants(self, name: str) -> None:
        """:class:`PartitionInvariantError` unless the log start is at most the LEO and the
        epoch cache is consistent with the LEO.  Reads only (the cache is trimmed to the
        log start lazily, so its first entry may start before the log start here)."""
        leo, start = self.log.log_end_offset, self.log.log_start_offset
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


def _headers_or_none(batches: bytes | bytearray | memoryview) -> list[BatchHeader] | None:
    """Headers of the request's batches, or None if they do not parse (the log's
    validation then raises the precise error).  O(batches)."""
    try:
        return [h for _, h in iter_batches(batches, validate=False)]
    except CorruptRecordError:
        return None
