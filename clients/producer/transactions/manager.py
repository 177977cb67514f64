"""TransactionManager: the state machine of one transactional producer (sans-IO).

Kafka's client ``TransactionManager``, in the parts this producer needs.  It holds the
state (:mod:`~clients.producer.transactions.state`), the partitions of the current
transaction, the queue of coordinator requests and what each answer means; it does no
I/O and reads no clock.  Who does what:

- The user's thread (``Producer.init_transactions`` ... ``abort_transaction``) calls
  :meth:`initialize`, :meth:`begin`, :meth:`begin_commit`, :meth:`begin_abort`,
  :meth:`send_offsets` (each checks the call order and raises Kafka's error) and waits
  on the :class:`TransactionalResult` returned; ``Producer.send`` calls
  :meth:`maybe_add_partition` for each record's partition.
- The sender thread (:mod:`~clients.producer.transactions.coordinator_requests`) takes
  the next request with :meth:`next_request`, sends it and reports the answer with the
  ``on_*`` methods, which return an :class:`Outcome` (done, retry, retry after finding
  the coordinator again).  One request at a time, as Kafka's client does, in Kafka's
  order: InitProducerId first, then AddPartitionsToTxn for every partition that got its
  first record since the last one (one request per drain of the pending set), then
  AddOffsetsToTxn / TxnOffsetCommit in call order, EndTxn last and only once no batch of
  the producer is queued or in flight (``commit_transaction`` flushes).
- The drain (:class:`~clients.producer.idempotence.IdempotenceManager.can_send`) asks
  :meth:`may_send`: a partition's batches go out only after AddPartitionsToTxn named it.

Error handling (Kafka's): COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR -> find the
coordinator again and retry; COORDINATOR_LOAD_IN_PROGRESS / CONCURRENT_TRANSACTIONS /
UNKNOWN_TOPIC_OR_PARTITION -> retry; PRODUCER_FENCED / INVALID_PRODUCER_EPOCH ->
:class:`~clients.producer.idempotence.ProducerFencedError`, fatal; INVALID_TXN_STATE,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_PRODUCER_ID_MAPPING on InitProducerId and
unknown codes -> fatal; TRANSACTION_ABORTABLE, topic/group authorization, the group's
UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / FENCED_INSTANCE_ID and a failed batch ->
abortable (the transaction must be aborted).  Fatal errors are also set on the
:class:`~clients.producer.idempotence.IdempotenceManager`, which makes every queued
record fail and ``send`` raise.  A sequence error (the idempotence manager asks for an
epoch bump) makes the transaction abortable; the abort is then followed by
InitProducerId with the current id and epoch (KIP-360's bump), which restarts sequences.
EndTxn v5 answers a new epoch (KIP-890 part 2), taken at once.

Costs: every method O(1) except the request builders, O(partitions / offsets named).
Thread safety: one lock guards everything here; it is never held while calling out
(results are completed after it is released), so it nests inside the accumulator's and
the sender's locks without an order problem.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from clients.producer.idempotence import IdempotenceManager, ProducerFencedError
from clients.producer.transactions.state import (
    IllegalTransactionStateError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionManagerState,
    is_transition_valid,
)
from clients.protocol.errors import ErrorCode, MiniKafkaError, error_for
from clients.protocol.topics import TopicPartition
from clients.types import ConsumerGroupMetadata, OffsetAndMetadata

S = TransactionManagerState
GROUP_KEY_TYPE = 0  # FindCoordinator key types (Kafka's CoordinatorType)
TRANSACTION_KEY_TYPE = 1


_LOOKUP = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
_RETRY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT})  # fmt: skip
_FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
_ABORTABLE = frozenset({
    ErrorCode.TRANSACTION_ABORTABLE, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.UNKNOWN_MEMBER_ID,
    ErrorCode.ILLEGAL_GENERATION, ErrorCode.FENCED_INSTANCE_ID, ErrorCode.UNKNOWN_PRODUCER_ID,
})  # fmt: skip


def classify(code: int, what: str, transactional_id: str,
             idempotence: IdempotenceManager) -> MiniKafkaError:  # fmt: skip
    """The error a coordinator's ``code`` means (fenced codes as ProducerFencedError)."""
    if code in _FENCED:
        return ProducerFencedError(
            f"TransactionalId {transactional_id}: producer id {idempotence.producer_id} "
            f"epoch {idempotence.producer_epoch} is fenced ({ErrorCode(code).name}): a newer "
            f"producer with the same transactional id exists; close this producer ({what})"
        )
    return error_for(code, f"TransactionalId {transactional_id}: {what}")


def abortable_error(transactional_id: str,
                    cause: MiniKafkaError | None) -> TransactionAbortableError:  # fmt: skip
    """Kafka's "cannot execute transactional method because we are in an error state"."""
    error = TransactionAbortableError(
        f"TransactionalId {transactional_id}: the transaction cannot commit, abort it ({cause})")
    error.__cause__ = cause
    return error


class TransactionalResult:
    """What a user call waits for; completed (maybe with an error) by the sender thread."""

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self.error: BaseException | None = None
        self._event = threading.Event()

    def complete(self, error: BaseException | None = None) -> None:
        if not self._event.is_set():
            self.error = error
            self._event.set()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout_s: float | None) -> bool:
        return self._event.wait(timeout_s)


class PendingCall:
    """Kafka's pending-result rule for the user's calls: an operation whose wait timed out
    is retried by calling it again (the same result); any other operation meanwhile is
    refused.  Guarded by the manager's lock."""

    def __init__(self) -> None:
        self._pending: tuple[str, TransactionalResult] | None = None

    def start(self, operation: str) -> TransactionalResult:
        result = TransactionalResult(operation)
        self._pending = (operation, result)
        return result

    def retry_of(self, operation: str) -> TransactionalResult | None:
        """The pending result of ``operation`` (a retried call), or None to start anew."""
        pending = self._pending
        if pending is not None and pending[0] == operation:
            return pending[1]
        self.check(operation)
        self._pending = None
        return None

    def check(self, operation: str) -> None:
        pending = self._pending
        if pending is not None and not pending[1].done:
            raise IllegalTransactionStateError(
                f"cannot attempt operation `{operation}` because the previous call to "
                f"`{pending[0]}` timed out and must be retried"
            )

    def finished(self, result: TransactionalResult) -> None:
        if self._pending is not None and self._pending[1] is result:
            self._pending = None


class RequestKind(Enum):
    INIT_PRODUCER_ID = "InitProducerId"
    ADD_PARTITIONS = "AddPartitionsToTxn"
    ADD_OFFSETS = "AddOffsetsToTxn"
    TXN_OFFSET_COMMIT = "TxnOffsetCommit"
    END_TXN = "EndTxn"


class Outcome(Enum):
    DONE = "done"
    RETRY = "retry"  # after retry_backoff_ms, same coordinator
    LOOKUP = "lookup"  # find the coordinator again, then retry


@dataclass
class TxnRequest:
    """One coordinator request of the queue (the body is built when it is sent)."""

    kind: RequestKind
    result: TransactionalResult | None = None
    committed: bool = False  # END_TXN
    group: ConsumerGroupMetadata | None = None  # ADD_OFFSETS, TXN_OFFSET_COMMIT
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    partitions: frozenset[TopicPartition] = frozenset()  # ADD_PARTITIONS: those sent
    bump: bool = False  # INIT_PRODUCER_ID: bump the current (id, epoch), KIP-360

    @property
    def coordinator(self) -> tuple[int, str]:
        """(FindCoordinator key type, key) of the coordinator this request goes to."""
        if self.kind is RequestKind.TXN_OFFSET_COMMIT:
            assert self.group is not None
            return GROUP_KEY_TYPE, self.group.group_id
        return TRANSACTION_KEY_TYPE, ""  # the manager's transactional id


class TransactionManager:
    """State machine of one transactional producer (see the module docstring)."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int,
                 idempotence: IdempotenceManager) -> None:  # fmt: skip
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._idem = idempotence
        self._lock = threading.Lock()
        self.state = S.UNINITIALIZED
        self.last_error: MiniKafkaError | None = None
        self._partitions: set[TopicPartition] = set()  # added to the coordinator's txn
        self._new_partitions: set[TopicPartition] = set()  # first record seen, not added
        self._queue: deque[TxnRequest] = deque()
        self._in_flight: TxnRequest | None = None
        self._transaction_started = False  # something was added: EndTxn is needed
        self._calls = PendingCall()

    # ------------------------------------------------------------ user thread
    def initialize(self) -> TransactionalResult:
        """``init_transactions``: InitProducerId with the transactional id."""
        with self._lock:
            again = self._calls.retry_of("init_transactions")
            if again is not None:
                return again
            self._fail_if_error()
            self._transition(S.INITIALIZING)
            result = self._calls.start("init_transactions")
            self._queue.append(TxnRequest(RequestKind.INIT_PRODUCER_ID, result))
            return result

    def begin(self) -> None:
        """``begin_transaction``: local only (the coordinator learns of it from the first
        AddPartitionsToTxn / AddOffsetsToTxn)."""
        with self._lock:
            self._calls.check("begin_transaction")
            self._fail_if_error()
            self._transition(S.IN_TRANSACTION)

    def begin_commit(self) -> TransactionalResult:
        with self._lock:
            again = self._calls.retry_of("commit_transaction")
            if again is not None:
                return again
            self._fail_if_error()
            self._transition(S.COMMITTING_TRANSACTION)
            return self._complete_transaction("commit_transaction", committed=True)

    def begin_abort(self) -> TransactionalResult:
        with self._lock:
            again = self._calls.retry_of("abort_transaction")
            if again is not None:
                return again
            if self.state is not S.ABORTABLE_ERROR:
                self._fail_if_error()
            self._transition(S.ABORTING_TRANSACTION)
            self._new_partitions.clear()  # never added: nothing of them will be sent
            # requests of the failed transaction still queued are dropped
            for request in self._queue:
                if request.result is not None:
                    request.result.complete(TransactionAbortableError(
                        f"{request.kind.value} dropped: the transaction is being aborted"))
            self._queue.clear()
            return self._complete_transaction("abort_transaction", committed=False)

    def send_offsets(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                     group: ConsumerGroupMetadata) -> TransactionalResult:  # fmt: skip
        """``send_offsets_to_transaction``: AddOffsetsToTxn, then TxnOffsetCommit."""
        with self._lock:
            again = self._calls.retry_of("send_offsets_to_transaction")
            if again is not None:
                return again
            self._fail_if_error()
            if self.state is not S.IN_TRANSACTION:
                raise IllegalTransactionStateError(
                    f"TransactionalId {self.transactional_id}: cannot send offsets if a "
                    f"transaction is not in progress (currentState={self.state.value})"
                )
            result = self._calls.start("send_offsets_to_transaction")
            self._queue.append(TxnRequest(RequestKind.ADD_OFFSETS, result, group=group,
                                          offsets=dict(offsets)))  # fmt: skip
            return result

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        """A record for ``tp`` is about to be queued (raises unless in a transaction)."""
        with self._lock:
            if self.state is S.IN_TRANSACTION and (
                    tp in self._partitions or tp in self._new_partitions
                    or (self._in_flight is not None and tp in self._in_flight.partitions)):
                return  # added, or being added
            self._fail_if_error()
            if self.state is S.UNINITIALIZED or self.state is S.INITIALIZING:
                raise IllegalTransactionStateError(
                    "cannot perform a 'send' before completing a call to "
                    "init_transactions when transactions are enabled")  # fmt: skip
            if self.state is not S.IN_TRANSACTION:
                raise IllegalTransactionStateError(
                    f"TransactionalId {self.transactional_id}: cannot call send in state "
                    f"{self.state.value} (call begin_transaction first)")  # fmt: skip
            self._new_partitions.add(tp)

    def op_finished(self, result: TransactionalResult) -> None:
        """The user saw ``result``'s outcome: a new operation may start."""
        with self._lock:
            self._calls.finished(result)

    # ------------------------------------------------------------ drain (sender thread)
    def may_send(self, tp: TopicPartition) -> bool:
        """TransactionGate: ``tp``'s batches may be drained (AddPartitionsToTxn named it)."""
        with self._lock:
            return tp in self._partitions and (
                self.state is S.IN_TRANSACTION or self.state is S.COMMITTING_TRANSACTION)

    def on_batch_failed(self, tp: TopicPartition, error: BaseException) -> None:
        """TransactionGate: a batch of the transaction failed for good: it cannot commit."""
        with self._lock:
            if self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
                cause = error if isinstance(error, MiniKafkaError) else MiniKafkaError(str(error))
                self._abortable(cause)

    # ------------------------------------------------------------ requests (sender thread)
    def poll(self) -> None:
        """Take in what the idempotence manager decided (fenced, epoch bump needed)."""
        with self._lock:
            fatal = self._idem.fatal_error
            if fatal is not None and self.state is not S.FATAL_ERROR:
                self._fatal(fatal)
            elif self._idem.bump_reason is not None and self.state in (
                    S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):  # fmt: skip
                self._abortable(MiniKafkaError(
                    f"the producer epoch must be bumped ({self._idem.bump_reason})",
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER))  # fmt: skip

    @property
    def failing_undrained(self) -> MiniKafkaError | None:
        """The error queued batches must fail with now (aborting, abortable or fatal)."""
        with self._lock:
            if self.state is S.ABORTING_TRANSACTION:
                return TransactionAbortedError("failing batch since the transaction was aborted")
            if self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
                return self.last_error
            return None

    def next_request(self, incomplete_batches: int) -> TxnRequest | None:
        """The request to send now (None: nothing, or waiting); marks it in flight."""
        failed: list[tuple[TransactionalResult, BaseException | None]] = []
        with self._lock:
            request = self._next_request(incomplete_batches, failed)
            if request is not None:
                self._in_flight = request
        for result, error in failed:
            result.complete(error)
        return request

    def _next_request(self, incomplete: int,
                      failed: list[tuple[TransactionalResult, BaseException | None]],
                      ) -> TxnRequest | None:  # fmt: skip
        if self._in_flight is not None:
            return None
        if self.state is S.FATAL_ERROR or self.state is S.ABORTABLE_ERROR:
            assert self.last_error is not None
            error = (self.last_error if self.state is S.FATAL_ERROR
                     else self._abortable_error())  # fmt: skip
            while self._queue:
                request = self._queue.popleft()
                if request.result is not None:
                    failed.append((request.result, error))
            return None
        if self._queue and self._queue[0].kind is RequestKind.INIT_PRODUCER_ID:
            return self._queue.popleft()
        if self._new_partitions and self.state in (
                S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION):  # fmt: skip
            added = frozenset(self._new_partitions)
            self._new_partitions.clear()
            return TxnRequest(RequestKind.ADD_PARTITIONS, partitions=added)
        if not self._queue:
            return None
        head = self._queue[0]
        if head.kind is RequestKind.END_TXN and incomplete > 0:
            return None  # flush first: every batch of the transaction is acknowledged
        if head.kind is RequestKind.END_TXN and not self._transaction_started:
            self._queue.popleft()  # nothing reached the coordinator (adds refused, retried)
            if not self._finish_transaction(head) and head.result is not None:
                failed.append((head.result, None))
            return self._next_request(incomplete, failed)
        return self._queue.popleft()

    def request_failed(self, request: TxnRequest) -> None:
        """``request`` got no answer (connection lost, no coordinator): resend it (an
        AddPartitionsToTxn too while aborting: it may have been applied, and then the
        coordinator holds a transaction that only the EndTxn ends)."""
        self.retry(request)

    def retry(self, request: TxnRequest) -> None:
        with self._lock:
            self._in_flight = None
            if request.kind is RequestKind.ADD_PARTITIONS:
                self._new_partitions |= request.partitions - self._partitions
            else:
                self._queue.appendleft(request)

    def on_init_producer_id(self, request: TxnRequest, code: int, producer_id: int,
                            producer_epoch: int, message: str | None) -> Outcome:  # fmt: skip
        done = self._answer(request, code, message, {ErrorCode.INVALID_PRODUCER_ID_MAPPING})
        if done is not None:
            return done
        with self._lock:
            self._idem.set_producer_id(producer_id, producer_epoch)
            self._transaction_started = False
            self._partitions.clear()
            self._transition(S.READY)
        if request.result is not None:
            request.result.complete()
        return Outcome.DONE

    def on_add_partitions(self, request: TxnRequest,
                          codes: Mapping[TopicPartition, int]) -> Outcome:  # fmt: skip
        """Per-partition codes; partitions missing from the answer are retried."""
        outcome = Outcome.DONE
        error: MiniKafkaError | None = None
        with self._lock:
            self._in_flight = None
            for tp in request.partitions:
                code = codes.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED)
                if code == ErrorCode.NONE:
                    self._partitions.add(tp)
                    self._transaction_started = True
                    continue
                if code in _LOOKUP or code in _RETRY or code == ErrorCode.OPERATION_NOT_ATTEMPTED:
                    if self.state is not S.ABORTING_TRANSACTION:  # not added: not needed now
                        self._new_partitions.add(tp)
                    if code in _LOOKUP:
                        outcome = Outcome.LOOKUP
                    elif outcome is Outcome.DONE:
                        outcome = Outcome.RETRY
                    continue
                error = error or self._classify(code, f"AddPartitionsToTxn for {tp} failed")
            if error is not None:
                self._new_partitions.difference_update(request.partitions)
                self._error(error)
        return Outcome.DONE if error is not None else outcome

    def on_add_offsets(self, request: TxnRequest, code: int) -> Outcome:
        done = self._answer(request, code, None, set())
        if done is not None:
            return done
        with self._lock:
            self._transaction_started = True
            aborting = self.state is S.ABORTING_TRANSACTION
            if not aborting:  # the TxnOffsetCommit goes next, before anything queued since
                self._queue.appendleft(TxnRequest(RequestKind.TXN_OFFSET_COMMIT, request.result,
                                                  group=request.group, offsets=request.offsets))
        if aborting and request.result is not None:
            request.result.complete(TransactionAbortedError("the transaction was aborted"))
        return Outcome.DONE

    def on_txn_offset_commit(self, request: TxnRequest,
                             codes: Mapping[TopicPartition, int]) -> Outcome:  # fmt: skip
        """Per-partition codes: the partitions to retry stay in the request."""
        worst = int(ErrorCode.NONE)  # a final error, else a lookup, else a retry
        for tp in list(request.offsets):
            code = codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
            if code == ErrorCode.NONE:
                del request.offsets[tp]
                continue
            final = code not in _LOOKUP and code not in _RETRY
            if final or worst == ErrorCode.NONE or (code in _LOOKUP and worst in _RETRY):
                worst = code
        if worst == ErrorCode.REQUEST_TIMED_OUT:
            worst = ErrorCode.COORDINATOR_NOT_AVAILABLE  # Kafka: find the group's again
        what = f"TxnOffsetCommit for group {request.group.group_id if request.group else ''}"
        done = self._answer(request, worst, what + " failed", set())
        if done is not None:
            return done
        if request.result is not None:
            request.result.complete()
        return Outcome.DONE

    def on_end_txn(self, request: TxnRequest, code: int, producer_id: int,
                   producer_epoch: int) -> Outcome:  # fmt: skip
        done = self._answer(request, code, None, set())
        if done is not None:
            return done
        with self._lock:
            if producer_id >= 0 and producer_epoch >= 0:  # EndTxn v5: the new epoch
                self._idem.set_producer_id(producer_id, producer_epoch)
            bump = self._finish_transaction(request)
        if not bump and request.result is not None:
            request.result.complete()
        return Outcome.DONE

    # ------------------------------------------------------------ internals (lock held)
    def _complete_transaction(self, operation: str, committed: bool) -> TransactionalResult:
        """Queue the EndTxn; the sender thread sends it once no batch is left (an abort
        fails the queued ones first), or ends the transaction locally when nothing of it
        reached the coordinator (Kafka's shortcut), so the abort's batches are failed
        before the next transaction can begin."""
        result = self._calls.start(operation)
        self._queue.append(TxnRequest(RequestKind.END_TXN, result, committed=committed))
        return result

    def _finish_transaction(self, request: TxnRequest) -> bool:
        """The transaction ended: READY, or (an abort that needs an epoch bump) True
        and INITIALIZING with InitProducerId(id, epoch) queued for ``request``'s result."""
        self._partitions.clear()
        self._new_partitions.clear()
        self._transaction_started = False
        if request.committed or self._idem.bump_reason is None:
            self._transition(S.READY)
            return False
        self._transition(S.INITIALIZING)
        self._queue.appendleft(TxnRequest(RequestKind.INIT_PRODUCER_ID, request.result,
                                          bump=True))  # fmt: skip
        return True

    def _answer(self, request: TxnRequest, code: int, message: str | None,
                fatal: set[ErrorCode]) -> Outcome | None:
        """Common answer handling: None on success, else the outcome (error applied)."""
        with self._lock:
            self._in_flight = None
            if code == ErrorCode.NONE:
                return None
            if code in _LOOKUP or code in _RETRY:
                self._queue.appendleft(request)
                return Outcome.LOOKUP if code in _LOOKUP else Outcome.RETRY
            what = message or f"{request.kind.value} failed"
            error = (error_for(code, what) if code in fatal
                     else self._classify(code, what))  # fmt: skip
            self._error(error)
            failure = (self._abortable_error() if self.state is S.ABORTABLE_ERROR
                       else error)  # fmt: skip
        if request.result is not None:
            request.result.complete(failure)
        return Outcome.DONE

    def _classify(self, code: int, what: str) -> MiniKafkaError:
        return classify(code, what, self.transactional_id, self._idem)

    def _error(self, error: MiniKafkaError) -> None:
        if error.code not in _ABORTABLE:
            self._fatal(error)
        elif self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR):
            self._abortable(error)
        elif self.state is not S.ABORTING_TRANSACTION:  # aborting anyway: nothing to add
            self._fatal(error)

    def _abortable(self, error: MiniKafkaError) -> None:
        self.last_error = error
        self._transition(S.ABORTABLE_ERROR)

    def _fatal(self, error: MiniKafkaError) -> None:
        self.last_error = error
        self.state = S.FATAL_ERROR
        self._idem.set_fatal(error)

    def _abortable_error(self) -> TransactionAbortableError:
        return abortable_error(self.transactional_id, self.last_error)

    def _fail_if_error(self) -> None:
        """Kafka's maybeFailWithError: fatal errors as they are, abortable ones wrapped."""
        if self.state is S.FATAL_ERROR:
            assert self.last_error is not None
            raise self.last_error
        if self.state is S.ABORTABLE_ERROR:
            raise self._abortable_error()

    def _transition(self, target: TransactionManagerState) -> None:
        if not is_transition_valid(self.state, target):
            raise IllegalTransactionStateError(
                f"TransactionalId {self.transactional_id}: invalid transition attempted "
                f"from state {self.state.value} to state {target.value}"
            )
        self.state = target
        if target is not S.ABORTABLE_ERROR and target is not S.FATAL_ERROR:
            self.last_error = None
