"""Producer state of one partition: per producer id, its epoch, last batches and transaction.

Pure (sans-IO): no files, no clock.  A
:class:`~replication.producer_state_store.ProducerStateStore` owns one
:class:`ProducerStateManager` per replica: it feeds every appended batch (leader and
follower alike, and the log replay after a restart or a truncation) to
:meth:`ProducerStateManager.update` and persists :meth:`snapshot` through
:mod:`storage.producer_snapshot`.  The :class:`~replication.partition.Partition` asks
:meth:`ProducerStateManager.check_append` before a leader append.

State per producer id (Kafka's ``ProducerStateEntry``): the current producer epoch and
the metadata of its last :data:`MAX_BATCHES_PER_PRODUCER` (5) batches of that epoch, each
``(first_seq, last_seq, first_offset, last_offset, timestamp_ms)``.  Batches whose
producer id is -1 are not idempotent and are never tracked.

Rules of :meth:`ProducerStateManager.check` for a batch ``(producer_id, epoch, first_seq,
last_seq)`` (sequences are int32 that wrap from 2**31-1 to 0):

1. unknown producer id: ``first_seq == 0`` -> APPEND, otherwise UNKNOWN_PRODUCER_ID (59);
   the client resets its sequence (and bumps its epoch with InitProducerId).
2. ``epoch < current``: INVALID_PRODUCER_EPOCH (47), the producer is fenced.
3. ``epoch == current`` and ``(first_seq, last_seq)`` equals one of the last 5 batches:
   DUPLICATE carrying that batch's original ``first_offset``/``last_offset``; the
   produce is answered with error 0 and the original base offset, nothing is appended.
4. ``epoch > current``: ``first_seq`` must be 0 (a new epoch restarts the sequence),
   otherwise OUT_OF_ORDER_SEQUENCE_NUMBER (45).
5. ``epoch == current``: ``first_seq`` must be ``last_seq`` of the last batch + 1
   (2**31-1 + 1 wraps to 0), otherwise OUT_OF_ORDER_SEQUENCE_NUMBER (45).  A retry of a
   batch older than the last 5 is therefore OUT_OF_ORDER too (the client gives up on it).

An idempotent batch with ``epoch < 0`` or ``first_seq < 0`` is INVALID_RECORD (87).

:meth:`check_append` applies the rules to every batch of one request in order (a later
batch of the request continues the sequence of an earlier one); a request whose batches
are all duplicates is a DUPLICATE spanning their original offsets, a request that mixes
duplicates with new batches is INVALID_REQUEST (42): a real producer never builds one.

:meth:`update` trusts its input (the log is the truth): a higher epoch replaces the
entry's batches, a batch is appended to the last 5.  It never rejects.

Transactions (Kafka's ``ProducerAppendInfo``).  Each producer also has the first offset
of its ongoing transaction on this partition (-1: none) and the coordinator epoch of the
last marker written for it (-1: none).  Rules of :meth:`~ProducerStateManager.check_txn_batch`
(a data batch the rules above let in), :meth:`check_marker` (a WriteTxnMarkers marker)
and of the updates:

6. a non-transactional batch while the producer's transaction is open: INVALID_TXN_STATE.
7. a transactional batch with no transaction open for the producer *in that epoch*
   (Kafka's ``hasOngoingTransaction``) starts one at its first offset; with a verifier
   configured (KIP-890 part 1) the caller passes the guard it took with
   :meth:`verification_guard` before asking the coordinator; a missing or other guard (a
   marker for the producer, written meanwhile, drops it) is INVALID_TXN_STATE (48).  A
   higher epoch's transactional batch while an older epoch's transaction is open
   continues it (Kafka: only a marker ends a transaction).
8. a marker whose producer epoch is older than the producer's (with transaction version
   2, ``strict_epoch``: not newer, as each TV2 transaction ends with a bumped epoch):
   INVALID_PRODUCER_EPOCH (47, Kafka's ``checkProducerEpoch``, not PRODUCER_FENCED).
9. a marker whose coordinator epoch is older than the last one seen for the producer:
   TRANSACTION_COORDINATOR_FENCED (52): a zombie coordinator.
10. a marker ends the producer's open transaction: :meth:`update_marker` returns its
    :class:`CompletedTxn` (``last_offset``: the marker's); with none open (an empty
    transaction, a retried marker) None, only the epochs change.  Markers have no sequence.
11. replicated batches and the log replay trust their input (rules 6-9 are the leader's),
    so a follower, then a new leader, knows every open transaction.

:meth:`first_unstable_offset`: the first offset of the oldest transaction open or ended by
a marker the HW has not passed (Kafka's ``unreplicatedTxns``); the partition's LSO is
``min(first unstable offset, HW)``; an aborted transaction's ``.txnindex`` LSO is
:meth:`last_stable_offset_after`.  A producer with an open transaction is never expired
nor evicted (its transaction would vanish from the LSO).


Design choices (where Kafka's documents are silent or differ):

* The state of a producer survives the log start offset moving past its batches
  (retention, DeleteRecords), as since Kafka's KIP-360: a duplicate whose original
  batch was deleted is still answered with the original offsets.  Producers leave the
  state only by :meth:`remove_expired` (no batch for ``producer_id_expiration_ms``,
  Kafka's ``producer.id.expiration.ms``, default 1 day) or, least recently written
  first, when more than ``max_producers`` are tracked.
* Expiry is measured on the *broker's* clock, not the batches' timestamps (Kafka uses
  the latter, so a producer whose clock is days behind expires at once and then gets
  UNKNOWN_PRODUCER_ID): each sweep stamps producers written since the previous sweep
  with the sweep's ``now_ms`` and removes those stamped more than the expiration ago.
  This keeps the core clock-free; the error is one sweep interval.  After a restart
  every producer counts as just seen.
* A snapshot keeps all 5 batches of every producer (Kafka keeps only the last), so
  duplicate detection after a restart is as good as before it; it also keeps each
  producer's open transaction and coordinator epoch, not the completed transactions
  whose marker is above the HW (as Kafka: after a restart only open ones hold the LSO).
* Verification guards (rule 7) live in memory only: after a restart or a leader change
  a producer's first transactional batch is verified again.

Costs: ``check``/``update`` and the transaction rules O(1) (at most 5 entries compared);
``first_unstable_offset`` O(completed transactions above the HW); ``snapshot``/``load``
O(producers) (plus a sort of open transactions); ``remove_expired`` O(producers).
Memory: O(producers), at most ``max_producers`` x 5 batches.  Not thread-safe.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, Protocol

from clients.protocol.errors import ErrorCode

__all__ = [
    "DEFAULT_MAX_PRODUCERS",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "MAX_BATCHES_PER_PRODUCER",
    "BatchHeaderFields",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerEntry",
    "ProducerSnapshotEntry",
    "ProducerStateManager",
    "Verdict",
    "VerdictKind",
    "VerificationGuard",
    "next_sequence",
]

MAX_BATCHES_PER_PRODUCER = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 24 * 60 * 60 * 1000
DEFAULT_MAX_PRODUCERS = 100_000
NO_PRODUCER_ID = -1
NO_TXN = -1  # no ongoing transaction / no marker seen (first offset, coordinator epoch)
_INT32_MAX = 2**31 - 1


def next_sequence(sequence: int) -> int:
    """The sequence after ``sequence`` (int32 wrap: 2**31-1 -> 0)."""
    return 0 if sequence >= _INT32_MAX else sequence + 1


class BatchMetadata(NamedTuple):
    """What the state remembers of one appended batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


class BatchHeaderFields(Protocol):
    """The batch-header fields the state reads (:class:`clients.records.batch.BatchHeader`
    has them; tests pass lighter fakes)."""

    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def last_sequence(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...


class CompletedTxn(NamedTuple):
    """A transaction a marker (at ``last_offset``) ended (Kafka's ``CompletedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class VerificationGuard:
    """Taken before the coordinator verifies a producer's first transactional batch (rule
    7): the append goes ahead only if it is still the producer's guard (identity)."""

    __slots__ = ("producer_id",)

    def __init__(self, producer_id: int) -> None:
        self.producer_id = producer_id

    def __repr__(self) -> str:
        return f"VerificationGuard(producer {self.producer_id}, {id(self):#x})"


# (producer_id, epoch, batches, current_txn_first_offset, coordinator_epoch): a snapshot
# entry (storage.producer_snapshot stores it; a 3-tuple loads as no transaction state)
ProducerSnapshotEntry = tuple[int, int, tuple[BatchMetadata, ...], int, int]


class VerdictKind(Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer of :meth:`ProducerStateManager.check`.

    DUPLICATE carries the original ``first_offset``/``last_offset``; ERROR carries the
    ``error_code`` and a message naming the producer and the sequences involved.
    """

    kind: VerdictKind
    error_code: ErrorCode = ErrorCode.NONE
    message: str = ""
    first_offset: int = -1
    last_offset: int = -1


APPEND = Verdict(VerdictKind.APPEND)


def _error(code: ErrorCode, message: str) -> Verdict:
    return Verdict(VerdictKind.ERROR, code, message)


class ProducerEntry:
    """One producer's epoch and its last batches of that epoch (oldest first)."""

    __slots__ = ("batches", "coordinator_epoch", "current_txn_first_offset", "epoch",
                 "last_seen_ms", "producer_id")

    def __init__(self, producer_id: int, epoch: int,
                 batches: Iterable[BatchMetadata] = (), *,
                 current_txn_first_offset: int = NO_TXN,
                 coordinator_epoch: int = NO_TXN) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(batches, maxlen=MAX_BATCHES_PER_PRODUCER)
        self.last_seen_ms: int | None = None  # first sweep after the last write (None: since)
        self.current_txn_first_offset = current_txn_first_offset  # -1: none open
        self.coordinator_epoch = coordinator_epoch  # of the last marker (-1: none yet)

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def __repr__(self) -> str:
        return (f"ProducerEntry({self.producer_id}, epoch={self.epoch}, {list(self.batches)}, "
                f"txn={self.current_txn_first_offset})")


class ProducerStateManager:
    """Producer ids, epochs and last batches of one partition (see the module docstring)."""

    def __init__(self, name: str = "", *, max_producers: int = DEFAULT_MAX_PRODUCERS,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        if max_producers < 1:
            raise ValueError(f"max_producers must be >= 1, got {max_producers}")
        if producer_id_expiration_ms < 1:
            raise ValueError("producer_id_expiration_ms must be >= 1, got "
                             f"{producer_id_expiration_ms}")
        self.name = name
        self.max_producers = max_producers
        self.producer_id_expiration_ms = producer_id_expiration_ms
        # least recently written first (eviction order when max_producers is exceeded)
        self._producers: OrderedDict[int, ProducerEntry] = OrderedDict()
        self.evicted = 0
        # producer id -> first offset of its open transaction, oldest transaction first
        # (transactions start in offset order, so the first item is the oldest)
        self._ongoing: OrderedDict[int, int] = OrderedDict()
        # transactions a marker ended whose marker the HW has not passed, in marker order
        self._unreplicated: deque[CompletedTxn] = deque()
        self._guards: dict[int, VerificationGuard] = {}  # producer id -> rule 7's guard

    # -- views -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._producers)

    def __contains__(self, producer_id: object) -> bool:
        return producer_id in self._producers

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def entries(self) -> list[ProducerEntry]:
        return list(self._producers.values())

    # -- checking ----------------------------------------------------------------------

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> Verdict:
        """Apply the rules of the module docstring to one batch (no state change)."""
        if producer_id < 0:
            return APPEND
        entry = self._producers.get(producer_id)
        return self._check(producer_id, epoch, first_seq, last_seq,
                           None if entry is None else entry.epoch,
                           None if entry is None or not entry.batches
                           else entry.batches[-1].last_seq,
                           entry)

    def _check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
               current_epoch: int | None, current_last_seq: int | None,
               entry: ProducerEntry | None) -> Verdict:
        if current_epoch is not None and epoch == current_epoch and current_last_seq is not None \
                and first_seq == next_sequence(current_last_seq) and last_seq >= 0:
            return APPEND  # the common case first: the next batch in sequence
        who = f"{self.name}: producer {producer_id}"
        if epoch < 0 or first_seq < 0 or last_seq < 0:
            return _error(ErrorCode.INVALID_RECORD,
                          f"{who}: an idempotent batch needs producer_epoch >= 0 and "
                          f"base_sequence >= 0, got epoch {epoch} sequence {first_seq}")
        if current_epoch is None:
            if first_seq == 0:
                return APPEND
            return _error(ErrorCode.UNKNOWN_PRODUCER_ID,
                          f"{who} is unknown here and its batch starts at sequence "
                          f"{first_seq}, not 0 (reset the producer)")
        if epoch < current_epoch:
            return _error(ErrorCode.INVALID_PRODUCER_EPOCH,
                          f"{who}: epoch {epoch} is older than the current epoch "
                          f"{current_epoch} (fenced)")
        if epoch == current_epoch and entry is not None:
            original = entry.find_duplicate(first_seq, last_seq)
            if original is not None:
                return Verdict(VerdictKind.DUPLICATE, first_offset=original.first_offset,
                               last_offset=original.last_offset)
        if epoch > current_epoch:
            if first_seq == 0:
                return APPEND
            return _error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                          f"{who}: new epoch {epoch} (was {current_epoch}) must start at "
                          f"sequence 0, got {first_seq}")
        expected = 0 if current_last_seq is None else next_sequence(current_last_seq)
        if first_seq == expected:
            return APPEND
        return _error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                      f"{who} epoch {epoch}: expected sequence {expected}, got {first_seq} "
                      f"(last appended sequence {current_last_seq})")

    def check_append(self, batches: Sequence[BatchHeaderFields]) -> Verdict:
        """Check every batch of one leader append, in order (see the module docstring)."""
        if len(batches) == 1:  # what producers send: one batch per partition
            b = batches[0]
            return self.check(b.producer_id, b.producer_epoch, b.base_sequence,
                              b.last_sequence)
        seen: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last_seq) so far
        duplicates: list[Verdict] = []
        fresh = 0
        for b in batches:
            pid = b.producer_id
            if pid < 0:
                fresh += 1
                continue
            if pid in seen:
                epoch, last_seq = seen[pid]
                verdict = self._check(pid, b.producer_epoch, b.base_sequence, b.last_sequence,
                                      epoch, last_seq, None)
            else:
                verdict = self.check(pid, b.producer_epoch, b.base_sequence, b.last_sequence)
            if verdict.kind is VerdictKind.ERROR:
                return verdict
            if verdict.kind is VerdictKind.DUPLICATE:
                duplicates.append(verdict)
            else:
                fresh += 1
                seen[pid] = (b.producer_epoch, b.last_sequence)
        if not duplicates:
            return APPEND
        if fresh:
            return _error(ErrorCode.INVALID_REQUEST,
                          f"{self.name}: a produce request mixes {len(duplicates)} retried "
                          f"(duplicate) batches with {fresh} new ones")
        return Verdict(VerdictKind.DUPLICATE, first_offset=duplicates[0].first_offset,
                       last_offset=duplicates[-1].last_offset)

    # -- updating ----------------------------------------------------------------------

    def update(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
               first_offset: int, last_offset: int, timestamp_ms: int, *,
               is_transactional: bool = False) -> None:
        """Record an appended batch (trusted: from this leader's append or the log); a
        transactional one starts the producer's transaction if none is open (rule 7)."""
        if producer_id < 0:
            return
        entry = self._write(producer_id, epoch)
        entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset,
                                           timestamp_ms))
        if is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self._ongoing[producer_id] = first_offset
            self._guards.pop(producer_id, None)  # used: the transaction is open now

    def _write(self, producer_id: int, epoch: int) -> ProducerEntry:
        """The entry of a producer being written (created, or marked recently written;
        a new epoch forgets the old epoch's batches)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id, epoch)
            self._producers[producer_id] = entry
            self._evict()
        else:
            self._producers.move_to_end(producer_id)
            entry.last_seen_ms = None
            if epoch != entry.epoch:  # the log says a new epoch began: forget the old one
                entry.epoch = epoch
                entry.batches.clear()
        return entry

    def _evict(self) -> None:
        """Forget the least recently written producers beyond ``max_producers``, except
        those with an open transaction (which would vanish from the LSO)."""
        over = len(self._producers) - self.max_producers
        if over <= 0:
            return
        victims: list[int] = []
        for pid, entry in self._producers.items():
            if len(victims) == over:
                break
            if entry.current_txn_first_offset < 0:
                victims.append(pid)
        for pid in victims:
            del self._producers[pid]
            self._guards.pop(pid, None)
        self.evicted += len(victims)

    def update_from_batch(self, batch: BatchHeaderFields, *,
                          is_transactional: bool = False) -> None:
        """:meth:`update` from a stored data batch header (offsets are the header's)."""
        if batch.producer_id >= 0:
            self.update(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                        batch.last_sequence, batch.base_offset, batch.last_offset,
                        batch.max_timestamp, is_transactional=is_transactional)

    # -- transactions (rules 6-11) -----------------------------------------------------

    def check_txn_batch(self, producer_id: int, epoch: int, is_transactional: bool,
                        guard: VerificationGuard | None = None, *,
                        verification_required: bool = False) -> Verdict:
        """Rules 6 and 7 for a leader's data batch (no state change).  ``guard``: what
        the caller took with :meth:`verification_guard` before the coordinator verified
        the batch; required (``verification_required``) when a verifier is configured."""
        if producer_id < 0:
            if is_transactional:
                return _error(ErrorCode.INVALID_RECORD, f"{self.name}: a transactional batch "
                              "needs a producer id")
            return APPEND
        entry = self._producers.get(producer_id)
        first = NO_TXN if entry is None else entry.current_txn_first_offset
        if not is_transactional:
            if first >= 0:
                return _error(ErrorCode.INVALID_TXN_STATE, f"{self.name}: producer "
                              f"{producer_id} wrote a non-transactional batch while its "
                              f"transaction (from offset {first}) is open")
            return APPEND
        if first >= 0 and entry is not None and entry.epoch == epoch:
            return APPEND  # continues its ongoing transaction
        if verification_required and (guard is None or self._guards.get(producer_id)
                                      is not guard):
            return _error(ErrorCode.INVALID_TXN_STATE,
                          f"{self.name}: producer {producer_id} epoch {epoch} has no ongoing "
                          "transaction here and the batch was not verified by the "
                          "coordinator (or a marker ended the transaction meanwhile)")
        return APPEND

    def needs_verification(self, producer_id: int, epoch: int) -> bool:
        """Whether a transactional batch of ``producer_id`` in ``epoch`` would start a
        transaction here (Kafka's ``!hasOngoingTransaction``): the coordinator must
        verify it first (KIP-890 part 1)."""
        entry = self._producers.get(producer_id)
        return not (entry is not None and entry.current_txn_first_offset >= 0
                    and entry.epoch == epoch)

    def verification_guard(self, producer_id: int) -> VerificationGuard:
        """The producer's guard for rule 7 (created if need be), for the append."""
        guard = self._guards.get(producer_id)
        if guard is None:
            guard = self._guards[producer_id] = VerificationGuard(producer_id)
        return guard

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int, *,
                     strict_epoch: bool = False) -> Verdict:
        """Rules 8 and 9 for a marker the leader is asked to write (no state change)."""
        if producer_id < 0 or epoch < 0:
            return _error(ErrorCode.INVALID_REQUEST,
                          f"{self.name}: a marker needs producer id >= 0 and epoch >= 0, got "
                          f"{producer_id} epoch {epoch}")
        entry = self._producers.get(producer_id)
        if entry is None:
            return APPEND
        if epoch < entry.epoch or (strict_epoch and epoch == entry.epoch):
            return _error(ErrorCode.INVALID_PRODUCER_EPOCH,
                          f"{self.name}: marker for producer {producer_id} has epoch {epoch}, "
                          f"{'not above' if strict_epoch else 'older than'} its epoch "
                          f"{entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            return _error(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                          f"{self.name}: marker for producer {producer_id} comes from "
                          f"coordinator epoch {coordinator_epoch}, older than "
                          f"{entry.coordinator_epoch} (a zombie coordinator)")
        return APPEND

    def update_marker(self, producer_id: int, epoch: int, coordinator_epoch: int,
                      offset: int, is_aborted: bool) -> CompletedTxn | None:
        """Record a marker appended at ``offset`` (trusted: rule 10); the transaction it
        ended, if one was open."""
        entry = self._producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self._write(producer_id, epoch)
        else:  # an older epoch (replicated despite rule 8) does not lower the producer's
            self._producers.move_to_end(producer_id)
            entry.last_seen_ms = None
        entry.coordinator_epoch = coordinator_epoch
        self._guards.pop(producer_id, None)  # a verification asked before this is stale
        first = entry.current_txn_first_offset
        if first < 0:
            return None
        entry.current_txn_first_offset = NO_TXN
        self._ongoing.pop(producer_id, None)
        completed = CompletedTxn(producer_id, first, offset, is_aborted)
        self._unreplicated.append(completed)
        return completed

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """An aborted transaction's ``.txnindex`` LSO (Kafka's ``lastStableOffset``): the
        first offset of the oldest transaction still open, else just after the marker."""
        first = next(iter(self._ongoing.values()), None)
        return completed.last_offset + 1 if first is None else first

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below ``high_watermark``."""
        unreplicated = self._unreplicated
        while unreplicated and unreplicated[0].last_offset < high_watermark:
            unreplicated.popleft()

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open (or not yet replicated) transaction."""
        first = next(iter(self._ongoing.values()), None)
        for txn in self._unreplicated:
            if first is None or txn.first_offset < first:
                first = txn.first_offset
        return first

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of every open transaction, oldest first."""
        return list(self._ongoing.items())

    def clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._guards.clear()

    def remove_expired(self, now_ms: int) -> int:
        """Sweep: forget producers with no batch for ``producer_id_expiration_ms`` of the
        caller's clock (see the module docstring); returns how many were removed."""
        expired = []
        for pid, entry in self._producers.items():
            if entry.current_txn_first_offset >= 0:
                continue  # an open transaction keeps its producer (Kafka's rule)
            if entry.last_seen_ms is None:
                entry.last_seen_ms = now_ms
            elif now_ms - entry.last_seen_ms >= self.producer_id_expiration_ms:
                expired.append(pid)
        for pid in expired:
            del self._producers[pid]
            self._guards.pop(pid, None)
        return len(expired)

    # -- snapshots ---------------------------------------------------------------------

    def snapshot(self) -> list[ProducerSnapshotEntry]:
        """Plain ``(producer_id, epoch, batches, current_txn_first_offset,
        coordinator_epoch)`` tuples, least recently written first."""
        return [(e.producer_id, e.epoch, tuple(e.batches), e.current_txn_first_offset,
                 e.coordinator_epoch) for e in self._producers.values()]

    def load(self, entries: Iterable[Sequence[Any]]) -> None:
        """Replace the state with snapshot entries (as :meth:`snapshot` returns them; a
        3-tuple ``(producer_id, epoch, batches)`` has no transaction state)."""
        self.clear()
        for producer_id, epoch, batches, *txn in entries:
            first, coordinator_epoch = txn if txn else (NO_TXN, NO_TXN)
            self._producers[producer_id] = ProducerEntry(
                producer_id, epoch, (BatchMetadata(*b) for b in batches),
                current_txn_first_offset=first, coordinator_epoch=coordinator_epoch)
        for pid, first in sorted(((e.producer_id, e.current_txn_first_offset)
                                  for e in self._producers.values()
                                  if e.current_txn_first_offset >= 0),
                                 key=lambda item: item[1]):
            self._ongoing[pid] = first
        self._evict()

    def __repr__(self) -> str:
        return f"ProducerStateManager({self.name}, producers={len(self._producers)})"
