"""The transaction coordinator (Kafka's TransactionCoordinator and
TransactionStateManager), sans-IO: the metadata of the transactional ids of the
``__transaction_state`` partitions it owns, every client request on them, and the
writes that come before every answer.

Contract:

- **Placement**: a transactional id lives in state partition
  ``abs(javaStringHash(id)) % partitions`` (:func:`broker.coordination.placement.partition_for`,
  Kafka's formula); its coordinator is that partition's leader.  An empty id is
  INVALID_REQUEST; a partition not owned here NOT_COORDINATOR; one loading
  COORDINATOR_LOAD_IN_PROGRESS.
- **Write before acting**: every transition (:mod:`broker.txn.state`) is first written to
  the id's state partition through the injected :class:`TxnLog` (acks=all: ``done`` once
  the high watermark passed it); only then does the cache take it and the request get its
  answer (or the markers go out).  While a write is in flight the id is *pending*: any
  other request on it gets CONCURRENT_TRANSACTIONS (retriable).  A failed write changes
  nothing and answers Kafka's mapping (:func:`write_error`).
- **Markers**: once PrepareCommit/PrepareAbort is written, the EndTxn is answered and the
  :class:`MarkerChannel` sends the markers (producer id, the epoch of the prepare,
  coordinator epoch = the state partition's leader epoch when it was loaded); when every
  partition has its marker, CompleteCommit/CompleteAbort is written (retried on the next
  :meth:`TransactionCoordinator.tick` if that write fails).  A coordinator fenced by the
  leaders gives up: the next coordinator finishes the transaction.
- **Parking** (:mod:`broker.txn.parking`, when a timer is given): an AddPartitionsToTxn
  or AddOffsetsToTxn that arrives while the id is in PrepareCommit/PrepareAbort, from the
  producer the completing transaction will accept next (its id and epoch, or those a v5
  EndTxn answered), is parked and run again from the start as soon as Complete* is
  written (or the id is unloaded: NOT_COORDINATOR), instead of CONCURRENT_TRANSACTIONS
  and a client backoff.  When the markers are written, the parked requests that pass
  against the CompleteCommit/CompleteAbort metadata ride in the Complete* write: one
  batch of two records, Complete* then the Ongoing they lead to (both valid transitions;
  the load takes the last), answered once it is replicated; one replicated write fewer
  per back-to-back transaction.  At most ``max_parked_add_partitions`` per coordinator, each for
  ``parked_add_partitions_timeout_ms``; beyond either, CONCURRENT_TRANSACTIONS as in
  Kafka.  InitProducerId and EndTxn are never parked (Kafka's answers).
- **Loading** (:meth:`begin_load`, :meth:`load_record`, :meth:`finish_load`): the latest
  record per id wins, a tombstone removes it; after the load every id in PrepareCommit or
  PrepareAbort gets its markers sent again, then its Complete* written (a coordinator that
  died between the two is finished by the next).  :meth:`unload` forgets a partition's
  ids and cancels their markers; writes completing for an unloaded or reloaded partition
  are ignored (NOT_COORDINATOR to their requests).
- **Timers** (:meth:`tick`, called by the glue every ``abort_check_interval_ms``): an
  Ongoing transaction older than its ``transaction_timeout_ms`` is aborted by the
  coordinator with the epoch bumped (the producer's next request is fenced); an idle id
  (Empty, CompleteCommit, CompleteAbort) not updated for ``transactional_id_expiration_ms``
  is tombstoned and forgotten.

KAFKA-17754 (a delayed EndTxn or marker ends a *later* transaction), why it cannot happen
here:

- EndTxn v5 (transaction version 2, our client; KIP-890 part 2): each EndTxn bumps the
  producer epoch in its PrepareX record and the answer carries the new epoch, which the
  producer uses for its next transaction.  A delayed copy of the EndTxn carries the old
  epoch: while the old transaction is still completing it is recognised as a retry (same
  result, epoch = ``last_producer_epoch``) and answered without any write; once the next
  transaction began (Ongoing at the new epoch) it is PRODUCER_FENCED and changes nothing
  (tests/broker/txn/test_coordinator.py).  Its markers carry the bumped epoch too, and a
  partition leader refuses a transaction-version-2 marker whose epoch is not above the
  producer's epoch there (INVALID_PRODUCER_EPOCH): a delayed marker of transaction N
  cannot complete transaction N+1's data, written at N's bumped epoch.
- Markers carry the coordinator epoch: after a coordinator move, the old coordinator's
  late markers are refused (TRANSACTION_COORDINATOR_FENCED) by leaders that saw the new
  one's, and the old coordinator cannot write its Complete* any more (it no longer leads
  the state partition: its write fails, :meth:`unload` dropped the id).
- Clients on EndTxn v0-4 (transaction version 0/1: librdkafka, kafka-python, the Java
  client before 4.0) keep one epoch for every transaction of a session, as in Kafka: a
  copy of their EndTxn delayed past the start of their next transaction (on another
  connection; one connection's requests are answered in order) is indistinguishable from
  a fresh one and would end that transaction.  This is Kafka's own exposure for these
  clients; closing it needs the client to take part (transaction version 2).  Their
  markers are still fenced by coordinator epoch and by epoch bumps from InitProducerId
  and timeouts.

A parked request adds nothing to KAFKA-17754's exposure: it is checked against the state
when it runs again, exactly as the client's own retry at that instant would be.

Costs: a request O(its partitions + the transaction's partitions); :meth:`tick`
O(cached ids); loading O(records).  Not thread-safe: the broker's event loop (or a test's
thread) owns it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from broker.coordination.placement import partition_for
from broker.txn.listing import described, listed
from broker.txn.markers import MarkersDone, TxnMarker
from broker.txn.parking import AddRequest, ParkedAdds, fold_parked, parkable
from broker.txn.records import TxnRecordError, decode_key, decode_value, encode_key, encode_value
from broker.txn.state import (
    COMPLETED,
    FENCE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    TransactionState,
    TxnError,
    TxnMetadata,
    new_metadata,
    prepare_add_partitions,
    prepare_complete,
    prepare_dead,
    prepare_end,
    prepare_init_producer_id,
    prepare_timeout_abort,
    verify_partitions,
)
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    DescribeTransactionsResponseTransactionState,
    ListTransactionsResponseTransactionState,
)
from clients.protocol.topics import TopicPartition
from timer.clock import Clock
from timer.purgatory import TimerLike

log = logging.getLogger(__name__)

Done = Callable[[ErrorCode, int], None]
InitAnswer = Callable[[ErrorCode, int, int], None]  # (error, producer id, epoch)
Answer = Callable[[ErrorCode], None]
IdAnswer = Callable[[int | None, ErrorCode], None]  # (new id or None, error)


class TxnLog(Protocol):
    """Where the coordinator writes: the state partitions it leads (acks=all)."""

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               done: Done) -> None: ...


class ProducerIdSource(Protocol):
    """New producer ids (:mod:`broker.producer_ids`), answered now or later."""

    def next_producer_id(self, done: IdAnswer) -> None: ...


class MarkerChannel(Protocol):
    """The marker sender (:class:`broker.txn.markers.MarkerSender`)."""

    def send(self, marker: TxnMarker, done: MarkersDone) -> None: ...

    def cancel(self, transactional_ids: set[str]) -> None: ...


@dataclass(frozen=True)
class TxnCoordinatorConfig:
    """Kafka's transaction.max.timeout.ms and transactional.id.expiration.ms; the bounds
    of the parked AddPartitionsToTxn/AddOffsetsToTxn (:mod:`broker.txn.parking`)."""

    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    max_parked_add_partitions: int = 1_000  # per coordinator; beyond: CONCURRENT_TRANSACTIONS
    parked_add_partitions_timeout_ms: int = 5_000  # then CONCURRENT_TRANSACTIONS

    def __post_init__(self) -> None:
        if self.max_parked_add_partitions < 0 or self.parked_add_partitions_timeout_ms <= 0:
            raise ValueError("max_parked_add_partitions must be >= 0 and "
                             "parked_add_partitions_timeout_ms > 0")


def write_error(code: ErrorCode) -> ErrorCode:
    """What a failed state write means to a client (Kafka's TransactionStateManager)."""
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR,
                ErrorCode.FENCED_LEADER_EPOCH):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code if code == ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR


class _Entry:
    """One cached transactional id: its stored metadata and the write in flight."""

    __slots__ = ("complete_due", "meta", "partition", "pending", "stored")

    def __init__(self, meta: TxnMetadata, partition: int, stored: bool) -> None:
        self.meta = meta
        self.partition = partition
        self.pending: TxnMetadata | None = None
        self.stored = stored  # False: a new id whose first record is not written yet
        self.complete_due = False  # markers written, Complete* write to (re)try


class TransactionCoordinator:
    """The transactional ids of the owned state partitions; see the module docstring."""

    def __init__(self, config: TxnCoordinatorConfig, clock: Clock, log_: TxnLog,
                 producer_ids: ProducerIdSource, markers: MarkerChannel,
                 num_partitions: int = 0, timer: TimerLike | None = None) -> None:
        self.config = config
        self.clock = clock
        self.log = log_
        self.producer_ids = producer_ids
        self.markers = markers
        self.num_partitions = num_partitions  # of __transaction_state; 0 = no topic yet
        self.owned: dict[int, int] = {}  # partition -> coordinator epoch
        self.loading: dict[int, tuple[int, dict[str, TxnMetadata | None]]] = {}
        self.entries: dict[str, _Entry] = {}
        # no timer: nothing is parked (CONCURRENT_TRANSACTIONS at once, Kafka's answer)
        self.parked = None if timer is None else ParkedAdds(
            timer, config.max_parked_add_partitions, config.parked_add_partitions_timeout_ms)

    # -- ownership -------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        if self.num_partitions <= 0:
            return ErrorCode.NOT_COORDINATOR
        index = self.partition_for(transactional_id)
        if index in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None if index in self.owned else ErrorCode.NOT_COORDINATOR

    def epochs(self) -> dict[int, int]:
        """Owned and loading partitions and their coordinator epochs."""
        return {**self.owned, **{p: e for p, (e, _) in self.loading.items()}}

    def loading_epoch(self, partition: int) -> int | None:
        """The coordinator epoch ``partition`` is being loaded in (None: not loading)."""
        loading = self.loading.get(partition)
        return None if loading is None else loading[0]

    def begin_load(self, partition: int, coordinator_epoch: int) -> None:
        self.unload(partition)
        self.loading[partition] = (coordinator_epoch, {})

    def load_record(self, partition: int, key: bytes | None, value: bytes | None) -> None:
        if partition not in self.loading or key is None:
            return
        records = self.loading[partition][1]
        try:
            tid = decode_key(key)
            records[tid] = decode_value(tid, value) if value is not None else None
        except TxnRecordError as exc:
            log.warning("__transaction_state-%d: skipped a record: %s", partition, exc)

    def finish_load(self, partition: int) -> None:
        """The partition is owned: its ids enter the cache; transactions that were being
        completed get their markers sent again."""
        if partition not in self.loading:
            return
        epoch, records = self.loading.pop(partition)
        self.owned[partition] = epoch
        for tid, meta in records.items():
            if meta is None:
                continue
            entry = self.entries[tid] = _Entry(meta, partition, stored=True)
            if meta.state in PREPARED:
                log.info("transaction %r: finishing %s after a coordinator move", tid,
                         meta.state.display_name)
                self._send_markers(entry)

    def unload(self, partition: int) -> None:
        self.owned.pop(partition, None)
        self.loading.pop(partition, None)
        gone = {tid for tid, e in self.entries.items() if e.partition == partition}
        for tid in gone:
            del self.entries[tid]
        if gone:
            self.markers.cancel(gone)
        for tid in gone:  # parked requests run again: NOT_COORDINATOR now
            self._wake(tid)

    def _wake(self, transactional_id: str) -> None:
        if self.parked is not None:
            self.parked.wake(transactional_id)

    # -- writes ----------------------------------------------------------------------

    def _is_current(self, entry: _Entry, epoch: int) -> bool:
        return (self.entries.get(entry.meta.transactional_id) is entry
                and self.owned.get(entry.partition) == epoch)

    def _write(self, entry: _Entry, new: TxnMetadata, then: Answer,
               before: TxnMetadata | None = None) -> None:
        """Write ``new`` for ``entry`` (after ``before`` in the same batch, if given: a
        step it passes through); the cache takes ``new`` once written; ``then(error)``."""
        epoch = self.owned[entry.partition]
        entry.pending = new
        tid = new.transactional_id
        value = None if new.state is TransactionState.DEAD else encode_value(new)
        records = [(encode_key(tid), value)]
        if before is not None:
            records.insert(0, (encode_key(tid), encode_value(before)))

        def written(code: ErrorCode, _offset: int) -> None:
            if not self._is_current(entry, epoch):
                then(ErrorCode.NOT_COORDINATOR)
                return
            entry.pending = None
            if code != ErrorCode.NONE:
                log.info("transaction %r: writing %s failed: %s", tid,
                         new.state.display_name, code.name)
                if not entry.stored:
                    del self.entries[tid]
                then(write_error(code))
                return
            entry.meta, entry.stored = new, True
            if new.state is TransactionState.DEAD:
                del self.entries[tid]
            then(ErrorCode.NONE)
            self._wake(tid)  # a Complete* written: the parked AddPartitionsToTxn go on

        self.log.append(entry.partition, records, written)

    def _send_markers(self, entry: _Entry) -> None:
        meta, epoch = entry.meta, self.owned[entry.partition]
        marker = TxnMarker(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                           meta.state is TransactionState.PREPARE_COMMIT, epoch,
                           meta.client_transaction_version, meta.partitions)

        def markers_done(written: bool) -> None:
            if written and self._is_current(entry, epoch):
                entry.complete_due = True
                self._complete(entry)

        self.markers.send(marker, markers_done)

    def _complete(self, entry: _Entry) -> None:
        if entry.pending is not None or entry.meta.state not in PREPARED:
            return
        entry.complete_due = False
        now = self.clock.now_ms()
        done = prepare_complete(entry.meta, now)
        new, folded = (done, []) if self.parked is None else fold_parked(
            done, self.parked.waiting(done.transactional_id), now)

        def completed(code: ErrorCode) -> None:
            if code != ErrorCode.NONE and self.entries.get(done.transactional_id) is entry:
                entry.complete_due = True  # retried by tick()
            for request in folded:
                request.respond(code)

        if not folded:
            self._write(entry, done, completed)
            return
        assert self.parked is not None
        self.parked.take(done.transactional_id, len(folded))
        self._write(entry, new, completed, before=done)

    # -- requests --------------------------------------------------------------------

    def _entry(self, transactional_id: str) -> _Entry:
        code = self.coordinator_error(transactional_id)
        if code is not None:
            raise TxnError(code, f"not the coordinator of {transactional_id!r}")
        entry = self.entries.get(transactional_id)
        if entry is None:
            raise TxnError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                           f"unknown transactional id {transactional_id!r}")
        if entry.pending is not None:
            raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS,
                           f"{transactional_id!r} has a state change in flight")
        return entry

    def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                         producer_id: int, producer_epoch: int, respond: InitAnswer) -> None:
        """InitProducerId with a transactional id; ``respond(error, id, epoch)`` once."""
        def fail(code: ErrorCode) -> None:
            respond(code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)

        code = self.coordinator_error(transactional_id)
        if code is not None:
            fail(code)
            return
        if not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            fail(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
            return
        expected = None if (producer_id, producer_epoch) == (-1, -1) else (
            producer_id, producer_epoch)
        entry = self.entries.get(transactional_id)
        if entry is not None and entry.pending is not None:
            fail(ErrorCode.CONCURRENT_TRANSACTIONS)
            return
        needs_id = entry is None or (entry.meta.epoch_exhausted
                                     and entry.meta.state not in PREPARED)
        if not needs_id:
            assert entry is not None
            self._init(entry, transaction_timeout_ms, expected, None, respond)
            return

        def with_id(new_id: int | None, error: ErrorCode) -> None:
            if new_id is None:
                fail(error)
                return
            code = self.coordinator_error(transactional_id)
            if code is not None:
                fail(code)
                return
            current = self.entries.get(transactional_id)
            if current is None:
                now = self.clock.now_ms()
                current = self.entries[transactional_id] = _Entry(
                    new_metadata(transactional_id, new_id, transaction_timeout_ms, now),
                    self.partition_for(transactional_id), stored=False)
            elif current.pending is not None:
                fail(ErrorCode.CONCURRENT_TRANSACTIONS)
                return
            self._init(current, transaction_timeout_ms, expected, new_id, respond)

        self.producer_ids.next_producer_id(with_id)

    def _init(self, entry: _Entry, timeout_ms: int, expected: tuple[int, int] | None,
              new_id: int | None, respond: InitAnswer) -> None:
        try:
            new, fence = prepare_init_producer_id(entry.meta, timeout_ms, expected,
                                                  self.clock.now_ms(), new_id)
        except TxnError as exc:
            respond(exc.code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return

        def written(code: ErrorCode) -> None:
            if code != ErrorCode.NONE:
                respond(code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            elif fence == FENCE:  # the open transaction is being aborted: retry later
                self._send_markers(entry)
                respond(ErrorCode.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            else:
                respond(ErrorCode.NONE, new.producer_id, new.producer_epoch)

        self._write(entry, new, written)

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition], respond: Answer,
                       client_transaction_version: int = 0) -> None:
        """AddPartitionsToTxn v0-3 and AddOffsetsToTxn: ``respond(error)`` once the
        partitions are stored in the Ongoing transaction.  During the producer's previous
        transaction's PrepareCommit/PrepareAbort, the request is parked and run again the
        moment it completes (:mod:`broker.txn.parking`) instead of CONCURRENT_TRANSACTIONS
        (still the answer when the bound or the timeout is reached)."""
        partitions = frozenset(partitions)
        if self._park(AddRequest(transactional_id, producer_id, producer_epoch, partitions,
                                 client_transaction_version, respond)):
            return
        try:
            entry = self._entry(transactional_id)
            new = prepare_add_partitions(entry.meta, producer_id, producer_epoch, partitions,
                                         self.clock.now_ms(), client_transaction_version)
        except TxnError as exc:
            respond(exc.code)
            return
        if new is None:
            respond(ErrorCode.NONE)
            return
        self._write(entry, new, respond)

    def _park(self, request: AddRequest) -> bool:
        """Park the request if :func:`parkable` (True if parked)."""
        tid = request.transactional_id
        entry = self.entries.get(tid)
        if (self.parked is None or entry is None or self.coordinator_error(tid) is not None
                or not parkable(entry.meta, request)):
            return False
        return self.parked.park(request, lambda: not self._completing(tid), self._rerun)

    def _completing(self, transactional_id: str) -> bool:
        entry = self.entries.get(transactional_id)  # Prepare* until Complete* is stored
        return entry is not None and entry.meta.state in PREPARED

    def _rerun(self, request: AddRequest) -> None:
        self.add_partitions(request.transactional_id, request.producer_id,
                            request.producer_epoch, request.partitions, request.respond,
                            request.client_transaction_version)

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ ``verify_only``; raises :class:`TxnError` for an error
        of the whole transaction.  Changes nothing (a pending write is not waited for:
        the leader's append checks again, as in Kafka)."""
        code = self.coordinator_error(transactional_id)
        if code is not None:
            raise TxnError(code, f"not the coordinator of {transactional_id!r}")
        entry = self.entries.get(transactional_id)
        return verify_partitions(entry.meta if entry is not None else None, producer_id,
                                 producer_epoch, partitions)

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                committed: bool, transaction_version: int, respond: InitAnswer) -> None:
        """EndTxn; ``respond(error, producer id, epoch)`` once the PrepareX is written
        (the id and epoch matter to v5: the epoch bumped for the next transaction)."""
        def fail(code: ErrorCode) -> None:
            respond(code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)

        try:
            entry = self._entry(transactional_id)
        except TxnError as exc:
            fail(exc.code)
            return
        meta = entry.meta
        if (transaction_version >= 2 and meta.epoch_exhausted
                and (meta.state is TransactionState.ONGOING or not committed)):
            def with_id(new_id: int | None, error: ErrorCode) -> None:
                if new_id is None:
                    fail(error)
                elif self.entries.get(transactional_id) is not entry or entry.pending:
                    fail(ErrorCode.CONCURRENT_TRANSACTIONS)
                else:
                    self._end(entry, producer_id, producer_epoch, committed,
                              transaction_version, new_id, respond)
            self.producer_ids.next_producer_id(with_id)
            return
        self._end(entry, producer_id, producer_epoch, committed, transaction_version, None,
                  respond)

    def _end(self, entry: _Entry, producer_id: int, producer_epoch: int, committed: bool,
             transaction_version: int, new_id: int | None, respond: InitAnswer) -> None:
        try:
            decision = prepare_end(entry.meta, producer_id, producer_epoch, committed,
                                   self.clock.now_ms(), transaction_version, new_id)
        except TxnError as exc:
            respond(exc.code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return
        new = decision.write
        if new is None:
            respond(decision.error, decision.producer_id, decision.producer_epoch)
            return

        def written(code: ErrorCode) -> None:
            if code != ErrorCode.NONE:
                respond(code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
                return
            self._send_markers(entry)
            respond(ErrorCode.NONE, decision.producer_id, decision.producer_epoch)

        self._write(entry, new, written)

    # -- describe and list (broker/txn/listing.py) ------------------------------------

    def describe(self, transactional_id: str) -> DescribeTransactionsResponseTransactionState:
        code = self.coordinator_error(transactional_id)
        entry = self.entries.get(transactional_id) if code is None else None
        return described(transactional_id, code, None if entry is None else entry.meta)

    def list_transactions(self, states: Sequence[str], producer_ids: Sequence[int],
                          duration_ms: int = -1
                          ) -> tuple[ErrorCode, list[ListTransactionsResponseTransactionState]]:
        """Kafka's ListTransactions over the owned partitions (:func:`listed`)."""
        return listed((e.meta for e in self.entries.values()), states, producer_ids,
                      duration_ms, self.clock.now_ms(), bool(self.loading))

    # -- timers ----------------------------------------------------------------------

    def tick(self) -> None:
        """Abort timed-out transactions, expire idle ids, retry Complete* writes."""
        now = self.clock.now_ms()
        expiration = self.config.transactional_id_expiration_ms
        for entry in list(self.entries.values()):
            meta = entry.meta
            if entry.pending is not None or entry.partition not in self.owned:
                continue
            if entry.complete_due:
                self._complete(entry)
            elif (meta.state is TransactionState.ONGOING
                  and now - meta.txn_start_timestamp_ms > meta.transaction_timeout_ms):
                log.info("transaction %r of producer %d timed out after %d ms; aborting",
                         meta.transactional_id, meta.producer_id, meta.transaction_timeout_ms)
                self._abort_timed_out(entry)
            elif ((meta.state is TransactionState.EMPTY or meta.state in COMPLETED)
                  and now - meta.txn_last_update_timestamp_ms >= expiration):
                log.info("transactional id %r expired; removing it", meta.transactional_id)
                self._write(entry, prepare_dead(meta, now), lambda _code: None)

    def shutdown(self) -> None:
        """Drop the parked requests unanswered (the broker stops: their connections go)."""
        if self.parked is not None:
            self.parked.shutdown()

    def _abort_timed_out(self, entry: _Entry) -> None:
        try:
            new = prepare_timeout_abort(entry.meta, self.clock.now_ms())
        except TxnError as exc:
            log.warning("cannot abort %r: %s", entry.meta.transactional_id, exc)
            return

        def written(code: ErrorCode) -> None:
            if code == ErrorCode.NONE:
                self._send_markers(entry)

        self._write(entry, new, written)
