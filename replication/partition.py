"""One partition replica on this broker: its role, epochs, high watermark and ISR.

A pure core (sans-IO): every input is a method call with explicit values (``now_ms``,
offsets, the leader's answers); it never sends, sleeps or spawns.  The broker's handlers
(leader side) and replica fetcher / controller client (follower side, AlterPartition)
drive it.  :class:`Partition` is the owner that decides and applies, as Kafka's
``Partition`` does; each concept with a contract of its own is a part it owns or a rule
it asks (Kafka's split in brackets):

=================================================  ========================================
part                                               holds / decides
=================================================  ========================================
:class:`~replication.partition_log.PartitionLog`   the log with its leader-epoch cache and
(``UnifiedLog``)                                   producer state, changed together on
                                                   every append, truncation and log-start
                                                   move
:class:`~replication.isr.LeaderIsr`                the leader's view of its followers
(``Replica``, ``PartitionState``)                  (progress) and the ISR with its pending
                                                   AlterPartition proposal; the HW rule
                                                   (:func:`~replication.isr.leader_high_watermark`)
                                                   and the shrink/expand rules, pure
:mod:`replication.leadership`                      what new metadata means (stale, update,
(``makeLeader`` / ``makeFollower``)                new leadership); leader-epoch fencing
:mod:`replication.truncation`                      where a follower cuts its log for the
(``getOffsetTruncationState``)                     leader's OffsetsForLeaderEpoch answer
:class:`~replication.damage_marks.DamageMarks`     the ranges a CRC check found bad (never
                                                   served) and the one repair under way
=================================================  ========================================

The errors it raises are in :mod:`replication.partition_errors`.  What :class:`Partition`
itself keeps: the role (``leader_id``, ``leader_epoch``, ``partition_epoch``,
``replicas``), the high watermark, the leader epoch's start offset, and which part runs
when (only a leader appends producer batches, serves reads and tracks followers; only a
follower truncates, copies batches or feeds a repair: :class:`NotLeaderError` otherwise).

Roles and epochs: :meth:`Partition.make_leader` with a *new* leader epoch opens it in the
epoch cache at the LEO, forgets every follower's progress and keeps the HW it had; with
the same epoch it is a metadata update (follower progress kept).
:meth:`Partition.make_follower` returns True with a new leader or epoch: the replica then
runs the truncation handshake before fetching (send
OffsetsForLeaderEpoch(:attr:`Partition.truncation_request_epoch`), pass the answer to
:meth:`Partition.truncate_on_leader_answer`, repeat until the decision is
``completed``).  A leader the controller reports fenced (FENCED_LEADER_EPOCH to an
AlterPartition) resigns: ``leader_id = -1`` (:data:`NO_LEADER`), no writes, no HW
movement, until metadata arrives.

HW rules: on the leader HW = min LEO over the *maximal* ISR (:mod:`replication.isr`),
never above the leader's LEO, never backwards while this replica leads (the floor
:meth:`Partition.check_invariants` checks); on a follower HW = min(leader's HW from the
last fetch, own LEO), cut to the LEO by every truncation.  acks=all completes when
``high_watermark >= required_offset`` (:meth:`Partition.acked_by_isr`); callers should
also fail the wait when ``leader_epoch`` changed since the append.  Reads: consumers up
to the HW, followers up to the LEO, neither into nor across a damaged range.

Idempotent producers: the leader's append checks every request's batches against the
producer state first (:meth:`PartitionLog.append_as_leader`; a retried batch is answered
with its *original* offsets and ``num_batches == 0``, nothing appended, so acks=all
waits for the original to be committed).

Damage (see :mod:`replication.damage` for what finding it does): the damaged segment is
repaired in place from the leader's batches (:meth:`Partition.feed_repair`, a follower);
batches that do not fit make the follower cut its log before the damage and fetch the
rest again (the fallback).  The log cleaner stops below :attr:`Partition.compaction_bound`.

Transactions: the open transactions live in the producer state of :class:`PartitionLog`
(fed by the same appends, leader and follower, and rebuilt on the same truncations).
:attr:`Partition.last_stable_offset` = min(first unstable offset, HW) (Kafka's LSO);
every change of the HW (a property) tells the partition log, so a transaction whose
marker is replicated stops holding the LSO.  READ_COMMITTED reads
(:meth:`Partition.read_records` with ``read_committed``) stop at the LSO;
:meth:`PartitionLog.aborted_transactions` lists the aborted transactions a fetch's data
overlaps (the ``.txnindex``).  :meth:`Partition.append_txn_marker` writes a
WriteTxnMarkers marker as leader (NotLeaderError otherwise; acks=all like a produce:
the caller waits for the HW to pass ``last_offset + 1``).

Costs: views O(1) (``isr``/``maximal_isr`` copy O(|ISR|)); appends cost the log's append
plus O(batches) plus O(|ISR|); a follower fetch update O(|ISR|); ISR checks
O(|replicas|); truncation decisions O(epochs) plus the log's truncation.  Not
thread-safe: owned by the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Sequence

from clients.protocol.errors import ErrorCode
from clients.records.control import ControlType
from replication.append_origin import AppendOrigin
from replication.damage_marks import DamageMarks
from replication.isr import UNKNOWN_OFFSET, AlterPartitionProposal, LeaderIsr
from replication.leader_epoch_cache import LeaderEpochCache
from replication.leadership import RoleChange, fence_leader_epoch, follower_change, leader_change
from replication.partition_errors import (
    NotEnoughReplicasError,
    NotLeaderError,
    PartitionInvariantError,
)
from replication.partition_log import PartitionLog
from replication.producer_state import ProducerStateManager, VerificationGuard
from replication.truncation import (
    EpochEndOffset,
    TruncationDecision,
    TruncationPolicy,
    decide_truncation,
)
from storage.log.log import Log
from storage.log.reader import FetchDataInfo
from storage.log.validator import BatchInfo, LogAppendInfo
from storage.segment_repair import SegmentRepair, SegmentRepairError

__all__ = ["NO_LEADER", "Partition"]

NO_LEADER = -1


class Partition:
    """Replica state of one partition (see the module docstring)."""

    def __init__(self, topic: str, index: int, log: Log, local_broker_id: int, *,
                 leader_epoch_cache: LeaderEpochCache | None = None) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.local_broker_id = local_broker_id
        self._name = f"{topic}-{index}@{local_broker_id}"  # for invariant errors
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self._high_watermark = 0
        self.leader_isr = LeaderIsr(local_broker_id)  # followers' progress, ISR, proposal
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self._leader_hw_floor = 0  # HW when this leadership began: never go below
        self.damage = DamageMarks(log)  # ranges never served, and their repair
        # the log with its epoch cache and producer state, changed together
        self.partition_log = PartitionLog(f"{topic}-{index}", log, leader_epoch_cache)

    # -- views -----------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:  # (completed transactions stop at the HW)
        self._high_watermark = offset
        self.partition_log.on_high_watermark_updated(offset)

    @property
    def last_stable_offset(self) -> int:
        """min(first unstable offset, HW): where READ_COMMITTED reads stop (the LSO)."""
        first = self.partition_log.first_unstable_offset
        return self._high_watermark if first is None else min(first, self._high_watermark)

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
        return list(self.leader_isr.state.isr)

    @property
    def maximal_isr(self) -> list[int]:
        """Committed ISR plus replicas a pending proposal adds (used for the HW)."""
        return list(self.leader_isr.state.maximal_isr)

    @property
    def pending_alter_partition(self) -> AlterPartitionProposal | None:
        """The proposal awaiting an answer (to resend), None if none or blocked."""
        state = self.leader_isr.state
        return None if state.blocked else state.pending

    @property
    def damaged_ranges(self) -> list[tuple[int, int]]:
        """``[first bad offset, end of its segment)`` ranges never served, ascending."""
        return self.damage.ranges

    @property
    def damaged(self) -> tuple[int, int] | None:
        """The lowest damaged range, or None."""
        return self.damage.ranges[0] if self.damage.ranges else None

    @property
    def repair(self) -> SegmentRepair | None:
        """The damaged segment being written again from the leader's copy, if any."""
        return self.damage.repair

    @property
    def compaction_bound(self) -> int | None:
        """Where the log cleaner stops: the LSO (Kafka's: <= HW, and every transaction
        below it has ended, so the cleaner knows which aborted), or None while damaged or
        under repair (the cleaner would rewrite the same segments)."""
        return None if self.damage.blocks_compaction else self.last_stable_offset

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        return self.partition_log.leader_epoch_cache

    @property
    def truncation_request_epoch(self) -> int:
        """The epoch a follower asks the leader about: its latest (-1 = none)."""
        return self.leader_epoch_cache.latest_epoch

    @property
    def producer_state(self) -> ProducerStateManager:
        """The idempotent-producer state (rules in :mod:`replication.producer_state`)."""
        return self.partition_log.producer_state

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower(of {self.leader_id})"
        return (f"Partition({self.topic}-{self.index}@{self.local_broker_id} {role} "
                f"epoch={self.leader_epoch} hw={self.high_watermark} "
                f"leo={self.log_end_offset} isr={list(self.leader_isr.state.isr)})")

    # -- log start and producer state --------------------------------------------------

    def sync_log_start(self) -> None:
        """Trim the epoch cache after the log start moved (retention, DeleteRecords)."""
        self.partition_log.sync_log_start()

    def take_producer_snapshot(self, *, durable: bool = False) -> bool:
        """Snapshot the producer state at the LEO if the LEO moved since the last one
        (the broker's checkpoint timer; ``durable`` at its shutdown)."""
        return self.partition_log.producer_store.take_snapshot(durable=durable)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Sweep producers idle for ``producer_id_expiration_ms`` (the caller's clock)."""
        return self.producer_state.remove_expired(now_ms)

    # -- role changes ----------------------------------------------------------------

    def make_leader(self, leader_epoch: int, replicas: Sequence[int], isr: Sequence[int],
                    partition_epoch: int = 0, *, now_ms: int = 0) -> bool:
        """Lead ``leader_epoch``; True if this starts a new leadership (new epoch).

        Stale metadata (an older epoch, or an older partition epoch within the current
        epoch) is ignored and returns False.
        """
        if self.local_broker_id not in isr:
            raise ValueError(f"{self.topic}-{self.index}: leader {self.local_broker_id} "
                             f"is not in the ISR {list(isr)}")
        change = leader_change(self.leader_epoch, self.partition_epoch, self.is_leader,
                               leader_epoch, partition_epoch)
        if change is RoleChange.STALE:
            return False
        self.replicas, self.partition_epoch = list(replicas), partition_epoch
        self.leader_isr.assign(replicas, isr, now_ms, new_epoch=change is RoleChange.NEW)
        if change is RoleChange.NEW:
            self.leader_id, self.leader_epoch = self.local_broker_id, leader_epoch
            leo = self.log_end_offset
            self.leader_epoch_cache.assign(leader_epoch, leo)
            self.leader_epoch_start_offset = leo
            self.high_watermark = self._leader_hw_floor = max(0, min(self.high_watermark, leo))
        self.maybe_increment_high_watermark()
        return change is RoleChange.NEW

    def make_follower(self, leader_id: int, leader_epoch: int, replicas: Sequence[int],
                      partition_epoch: int = 0, isr: Sequence[int] = ()) -> bool:
        """Follow ``leader_id`` (-1: no leader yet) in ``leader_epoch``.

        True when the leader or epoch changed: run the truncation handshake before the
        next fetch.  Stale metadata is ignored (False).
        """
        if leader_id == self.local_broker_id:
            raise ValueError(f"{self.topic}-{self.index}: make_follower with itself as leader")
        change = follower_change(self.leader_id, self.leader_epoch, self.partition_epoch,
                                 leader_id, leader_epoch, partition_epoch)
        if change is RoleChange.STALE:
            return False
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.leader_isr.forget(isr)
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        return change is RoleChange.NEW

    def resign(self) -> None:
        """Stop leading (the controller says our epoch is stale); wait for metadata."""
        if self.is_leader:
            self.leader_id = NO_LEADER
            self.leader_isr.forget(self.leader_isr.state.isr)

    # -- leader path -----------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fence a request that carries another view of the leader epoch (-1 = none;
        :func:`~replication.leadership.fence_leader_epoch`)."""
        fence_leader_epoch(f"{self.topic}-{self.index}", current_leader_epoch, self.leader_epoch)

    def _require_leader(self, min_insync_replicas: int = 0) -> None:
        if not self.is_leader:
            raise NotLeaderError(f"broker {self.local_broker_id} is not the leader of "
                                 f"{self.topic}-{self.index}")
        if len(self.leader_isr.state.isr) < min_insync_replicas:
            raise NotEnoughReplicasError(f"{self.topic}-{self.index}: ISR {self.isr} is smaller "
                                         f"than min_insync_replicas {min_insync_replicas}")

    def append_records_as_leader(self, batches: bytes | bytearray | memoryview,
                                 required_acks: int = -1, min_insync_replicas: int = 1,
                                 checked: Sequence[BatchInfo] | None = None, *,
                                 guard: VerificationGuard | None = None,
                                 verification_required: bool = False,
                                 origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """Append a producer's batches as leader (:meth:`PartitionLog.append_as_leader`:
        ``checked`` is the log's check of these bytes if already run; ``guard``: KIP-890;
        ``origin``: who appends, which decides the producer checks)."""
        self._require_leader(min_insync_replicas if required_acks == -1 else 0)
        info = self.partition_log.append_as_leader(
            batches, self.leader_epoch, checked, guard=guard,
            verification_required=verification_required, origin=origin)
        self.maybe_increment_high_watermark()
        return info

    def append_txn_marker(self, producer_id: int, producer_epoch: int, control_type: ControlType,
                          coordinator_epoch: int, *, timestamp_ms: int,
                          min_insync_replicas: int = 1, strict_epoch: bool = False
                          ) -> LogAppendInfo:
        """Write a marker as leader, acks=all (:meth:`PartitionLog.append_marker`)."""
        self._require_leader(min_insync_replicas)
        info = self.partition_log.append_marker(producer_id, producer_epoch, control_type,
                                                coordinator_epoch, self.leader_epoch, timestamp_ms,
                                                strict_epoch=strict_epoch)
        self.maybe_increment_high_watermark()
        return info

    def read_records(self, fetch_offset: int, max_bytes: int, *, for_follower: bool,
                     min_one_batch: bool = True, read_committed: bool = False) -> FetchDataInfo:
        """Batches from ``fetch_offset`` up to the LEO (follower), HW or LSO (committed)."""
        self._require_leader()
        upper = (self.log_end_offset if for_follower else self.last_stable_offset
                 if read_committed else self.high_watermark)
        upper = self.damage.read_bound(f"{self.topic}-{self.index}", fetch_offset, upper)
        return self.log.read(fetch_offset, max_bytes, max_offset=upper,
                             min_one_batch=min_one_batch)


    # -- damaged segments (see "Damage" in the module docstring) -------------------------

    def feed_repair(self, records: bytes | bytearray | memoryview, now_ms: int) -> bool:
        """Follower: write the leader's batches for the range under repair; True once the
        repaired segment is swapped in (:meth:`DamageMarks.feed_repair`).  Batches that do
        not fit the range (the replicas' batches differ there) make this replica cut its
        log before the damage and fetch everything after it again (the fallback)."""
        self._require_not_leader("repair from the leader")
        repair = self.damage.repair
        if repair is None:
            return False
        try:
            return self.damage.feed_repair(records, now_ms)
        except SegmentRepairError:
            self.truncate_to(repair.first_bad_offset)  # aborts the repair
            raise

    def abort_repair(self) -> None:
        """Drop the repair under way (its file is removed; the damage mark stays)."""
        self.damage.abort_repair()

    def update_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """Record a follower's fetch at ``fetch_offset``; True when the HW moved.  An ISR
        member fetching from below the HW is out of sync at once (replication.isr): the
        caller asks :meth:`maybe_shrink_isr` right away."""
        self._require_leader()
        self.leader_isr.record_fetch(f"{self.topic}-{self.index}", replica_id, fetch_offset,
                                     self.log_end_offset, now_ms)
        return self.maybe_increment_high_watermark()

    def acked_by_isr(self, required_offset: int) -> bool:
        """True once every ISR member has everything below ``required_offset``."""
        return self.high_watermark >= required_offset

    def maybe_increment_high_watermark(self) -> bool:
        """HW = min LEO over the maximal ISR (unknown LEO: no move); True if it moved."""
        new_hw = self.leader_isr.high_watermark(self.log_end_offset) if self.is_leader else None
        if new_hw is not None and new_hw > self.high_watermark:
            self.high_watermark = self._leader_hw_floor = new_hw
            return True
        return False

    def last_offset_for_leader_epoch(self, current_leader_epoch: int,
                                     requested_epoch: int) -> EpochEndOffset:
        """Answer OffsetsForLeaderEpoch (leader only; fenced by ``current_leader_epoch``)."""
        self._require_leader()
        self.check_leader_epoch(current_leader_epoch)
        return EpochEndOffset(*self.partition_log.end_offset_for(requested_epoch))

    # -- ISR (leader) ----------------------------------------------------------------

    def maybe_shrink_isr(self, now_ms: int,
                         replica_lag_time_max_ms: int) -> AlterPartitionProposal | None:
        """Propose dropping ISR members not caught up within the lag bound."""
        if not self.is_leader:
            return None
        return self._propose(self.leader_isr.shrunk_isr(
            self.log_end_offset, now_ms, replica_lag_time_max_ms, self.high_watermark))

    def maybe_expand_isr(self, replica_id: int) -> AlterPartitionProposal | None:
        """Propose adding ``replica_id`` if it caught up to the HW in this epoch."""
        if not self.is_leader:
            return None
        return self._propose(self.leader_isr.expanded_isr(
            replica_id, self.high_watermark, self.leader_epoch_start_offset))

    def propose_isr(self, new_isr: tuple[int, ...]) -> AlterPartitionProposal | None:
        """Propose ``new_isr`` (leader only; None while a proposal is pending).  A leader
        proposes an ISR without itself to resign (broker.controller.state)."""
        if not self.is_leader:
            return None
        return self._propose(new_isr)

    def _propose(self, new_isr: tuple[int, ...] | None) -> AlterPartitionProposal | None:
        if new_isr is None:
            return None
        return self.leader_isr.state.propose(AlterPartitionProposal(
            self.topic, self.index, self.local_broker_id, self.leader_epoch,
            self.partition_epoch, new_isr))

    def on_alter_partition_response(self, proposal: AlterPartitionProposal, error_code: int,
                                    isr: Sequence[int] | None = None,
                                    partition_epoch: int | None = None) -> bool:
        """Apply the controller's answer to ``proposal``; True if the ISR was committed."""
        if not self.is_leader or proposal.leader_epoch != self.leader_epoch:
            return False
        committed = self.leader_isr.state.on_response(proposal, error_code, isr)
        if committed and self.local_broker_id not in self.leader_isr.state.isr:
            self.resign()  # it proposed an ISR without itself: another replica leads now
        elif committed:
            self.partition_epoch = (proposal.partition_epoch + 1 if partition_epoch is None
                                    else partition_epoch)
            self.maybe_increment_high_watermark()
        elif error_code == ErrorCode.FENCED_LEADER_EPOCH:
            self.resign()
        return committed

    # -- follower path ---------------------------------------------------------------

    def _require_not_leader(self, what: str) -> None:
        if self.is_leader:
            raise NotLeaderError(f"{self.topic}-{self.index}: the leader cannot {what}")

    def truncate_on_leader_answer(
        self, answer: EpochEndOffset,
        policy: TruncationPolicy = TruncationPolicy.LEADER_EPOCH,
    ) -> TruncationDecision:
        """Truncate per the leader's OffsetsForLeaderEpoch answer; ask again unless
        the returned decision is ``completed``."""
        self._require_not_leader("truncate")
        decision = decide_truncation(answer, self.leader_epoch_cache, self.log_end_offset,
                                     self.log_start_offset, self.high_watermark, policy)
        self.truncate_to(decision.truncate_to)
        return decision

    def truncate_to(self, offset: int) -> None:
        """Follower: drop everything at or after ``offset`` (batch boundary at or below)."""
        self._require_not_leader("truncate")
        self.partition_log.truncate_to(self.damage.cut_point(offset))
        self.damage.forget_outside(self.log_start_offset, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Follower behind the leader's log start: restart the log empty at ``offset``."""
        self._require_not_leader("truncate")
        self.damage.clear()
        self.partition_log.truncate_fully_and_start_at(offset)
        self.high_watermark = offset

    def append_records_as_follower(self, batches: bytes | bytearray | memoryview,
                                   leader_high_watermark: int,
                                   leader_log_start_offset: int | None = None
                                   ) -> LogAppendInfo | None:
        """Append copied batches (offsets/epochs kept); HW = min(leader HW, own LEO).

        ``batches`` may be empty (a fetch that only carried the HW): returns None.
        """
        self._require_not_leader("append as a follower")
        info = self.partition_log.append_as_follower(batches) if len(batches) else None
        if leader_log_start_offset is not None:
            self.partition_log.maybe_increment_log_start_offset(leader_log_start_offset)
        self.high_watermark = max(0, min(leader_high_watermark, self.log_end_offset))
        return info

    # -- invariants ------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise :class:`PartitionInvariantError` if this replica's state is inconsistent.

        Pure: it reads the state and changes nothing (the epoch cache is trimmed to the
        log start lazily, by :meth:`sync_log_start`, so its first entry may start before
        the log start here)."""
        name, leo, hw = self._name, self.log.log_end_offset, self._high_watermark
        if not 0 <= hw <= leo:
            raise PartitionInvariantError(f"{name}: HW {hw} outside [0, {leo}]")
        self.partition_log.check_invariants(name, leo)
        if self.leader_id != self.local_broker_id:  # (is_leader, read once)
            return
        self.leader_isr.check_invariants(name, leo)
        if hw < self._leader_hw_floor:
            raise PartitionInvariantError(
                f"{name}: HW {hw} fell below {self._leader_hw_floor} while leading")
        if self.leader_epoch_cache.latest_epoch != self.leader_epoch:
            raise PartitionInvariantError(
                f"{name}: leading epoch {self.leader_epoch} but the epoch cache's latest is "
                f"{self.leader_epoch_cache.latest_epoch}")

