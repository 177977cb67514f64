"""Kafka's transaction states and their transitions, as data, and the pure metadata of one
transactional id (Kafka's TransactionState and TransactionMetadata).

States (Kafka's names and ids, which DescribeTransactions/ListTransactions report and the
``__transaction_state`` records store) and Kafka's valid previous states
(:data:`VALID_PREVIOUS_STATES`, a transition from a state not in the set is refused):

| id | state             | valid previous states                 | meaning                     |
|----|-------------------|---------------------------------------|-----------------------------|
| 0  | Empty             | Empty, CompleteCommit, CompleteAbort  | no transaction open         |
| 1  | Ongoing           | Ongoing, Empty, CompleteCommit,       | partitions added, not ended |
|    |                   | CompleteAbort                         |                             |
| 2  | PrepareCommit     | Ongoing                               | committing: markers sent    |
| 3  | PrepareAbort      | Ongoing, PrepareEpochFence, Empty,    | aborting: markers sent      |
|    |                   | CompleteCommit, CompleteAbort (4.0)   |                             |
| 4  | CompleteCommit    | PrepareCommit                         | every COMMIT marker written |
| 5  | CompleteAbort     | PrepareAbort                          | every ABORT marker written  |
| 6  | Dead              | Empty, CompleteCommit, CompleteAbort  | expired: tombstoned         |
| 7  | PrepareEpochFence | Ongoing                               | the open transaction is     |
|    |                   |                                       | fenced (never stored: a     |
|    |                   |                                       | step to PrepareAbort)       |

:class:`TxnMetadata` is one transactional id's metadata as an immutable value (the
stored record's fields plus the id); each ``prepare_*`` function below is Kafka's method of
the same name: it checks the request against the metadata and the table and returns the
metadata the transition leads to (the caller writes it to ``__transaction_state`` and only
then makes it current), or raises :class:`TxnError` with Kafka's error code:

- :func:`prepare_init_producer_id`: InitProducerId (Kafka's
  ``prepareInitProducerIdTransit`` with ``prepareIncrementProducerEpoch``,
  ``prepareProducerIdRotation`` and ``prepareFenceProducerEpoch``): a new id starts at
  epoch 0; KIP-360 resume with the given producer id/epoch bumps (or repeats the answer
  of a retried bump); Ongoing is fenced (epoch + 1) and aborted (:data:`FENCE` result);
  Prepare* -> CONCURRENT_TRANSACTIONS; an exhausted epoch rotates to a new producer id.
- :func:`prepare_add_partitions`: AddPartitionsToTxn/AddOffsetsToTxn -> Ongoing.
- :func:`prepare_end`: EndTxn -> PrepareCommit/PrepareAbort (transaction version 2, EndTxn
  v5: with the epoch bumped, KIP-890 part 2), or the answer of a retry.
- :func:`prepare_timeout_abort`: the coordinator aborts an expired transaction
  (epoch bumped, as Kafka's ``prepareFenceProducerEpoch``).
- :func:`prepare_complete`: PrepareX -> CompleteX once every marker is written.
- :func:`prepare_dead`: an expired idle id -> Dead (tombstone).
- :func:`verify_partitions`: AddPartitionsToTxn v4+ ``verify_only`` (changes nothing).

Pending transitions (a write in flight) are the coordinator's business: it answers
CONCURRENT_TRANSACTIONS meanwhile (:mod:`broker.txn.coordinator`).

Costs: each function O(partitions of the transaction).  Pure and immutable: safe from any
thread or process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767


class TransactionState(Enum):
    """Kafka's states; ``value`` is the (id, name) Kafka stores and reports."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def display_name(self) -> str:
        return self.value[1]


_S = TransactionState

VALID_PREVIOUS_STATES: Mapping[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY,
                                 _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
"""Kafka's ``TransactionState.validPreviousStates``: target -> the states it may follow."""

STATE_BY_ID: Mapping[int, TransactionState] = {s.id: s for s in TransactionState}
STATE_BY_NAME: Mapping[str, TransactionState] = {s.display_name: s for s in TransactionState}
PREPARED = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT})
COMPLETED = frozenset({_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})


class TxnError(MiniKafkaError):
    """A request the transaction's metadata refuses, with Kafka's error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def check_transition(transactional_id: str, current: TransactionState,
                     target: TransactionState) -> None:
    """Raise INVALID_TXN_STATE unless ``target`` may follow ``current`` (the table)."""
    if current not in VALID_PREVIOUS_STATES[target]:
        raise TxnError(ErrorCode.INVALID_TXN_STATE,
                       f"transaction {transactional_id!r}: {current.display_name} -> "
                       f"{target.display_name} is not a valid transition")


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's metadata (Kafka's TransactionMetadata, immutable)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState = _S.EMPTY
    previous_producer_id: int = NO_PRODUCER_ID  # the id before a rotation
    next_producer_id: int = NO_PRODUCER_ID  # reserved by a TV2 end that exhausts the epoch
    last_producer_epoch: int = NO_PRODUCER_EPOCH  # the epoch before the last bump
    partitions: frozenset[TopicPartition] = frozenset()
    txn_start_timestamp_ms: int = -1
    txn_last_update_timestamp_ms: int = -1
    client_transaction_version: int = 0  # 2: EndTxn v5+ (epoch bumped per transaction)

    def to(self, state: TransactionState, now_ms: int, **changes: object) -> TxnMetadata:
        """This metadata in ``state`` (checked against the table) with ``changes``."""
        check_transition(self.transactional_id, self.state, state)
        return dataclasses.replace(self, state=state, txn_last_update_timestamp_ms=now_ms,
                                   **changes)  # type: ignore[arg-type]

    @property
    def epoch_exhausted(self) -> bool:
        """Kafka keeps one epoch in reserve for the coordinator's own fence."""
        return self.producer_epoch >= MAX_PRODUCER_EPOCH - 1


def new_metadata(transactional_id: str, producer_id: int, transaction_timeout_ms: int,
                 now_ms: int) -> TxnMetadata:
    """The metadata of a transactional id seen for the first time (not yet stored)."""
    return TxnMetadata(transactional_id, producer_id, NO_PRODUCER_EPOCH,
                       transaction_timeout_ms, _S.EMPTY,
                       txn_last_update_timestamp_ms=now_ms)


def _is_valid_producer_id(meta: TxnMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Kafka's ``isValidProducerId`` for a KIP-360 InitProducerId."""
    return (meta.producer_epoch == NO_PRODUCER_EPOCH or producer_id == meta.producer_id
            or (producer_id == meta.previous_producer_id
                and producer_epoch >= MAX_PRODUCER_EPOCH - 1))


FENCE = "fence"
""":func:`prepare_init_producer_id`'s marker that the answer is an abort to write first."""


def prepare_init_producer_id(meta: TxnMetadata, transaction_timeout_ms: int,
                             expected: tuple[int, int] | None, now_ms: int,
                             new_producer_id: int | None = None
                             ) -> tuple[TxnMetadata, str | None]:
    """InitProducerId on existing metadata; ``expected`` is the request's (producer id,
    epoch) when it gave one (KIP-360).  Returns (the metadata to write, FENCE when it is a
    PrepareAbort of the fenced open transaction: answer CONCURRENT_TRANSACTIONS once
    written).  ``new_producer_id`` is used when the epoch is exhausted (rotation); the
    caller passes one when :attr:`TxnMetadata.epoch_exhausted`."""
    if expected is not None and not _is_valid_producer_id(meta, *expected):
        raise TxnError(ErrorCode.PRODUCER_FENCED,
                       f"producer {expected[0]} is not {meta.transactional_id!r}'s producer "
                       f"{meta.producer_id}")
    state = meta.state
    if state in PREPARED:
        raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS,
                       f"{meta.transactional_id!r} is completing a transaction "
                       f"({state.display_name})")
    if state is _S.ONGOING:
        fenced = prepare_fence_producer_epoch(meta, now_ms)
        return prepare_abort_of_fence(fenced, now_ms), FENCE
    if state not in (_S.EMPTY, *COMPLETED):
        raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS,
                       f"{meta.transactional_id!r} is {state.display_name}")
    if meta.epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
        if new_producer_id is None:
            raise TxnError(ErrorCode.UNKNOWN_SERVER_ERROR, "epoch exhausted: a new producer "
                           "id is needed")
        return meta.to(_S.EMPTY, now_ms, producer_id=new_producer_id, producer_epoch=0,
                       previous_producer_id=meta.producer_id, next_producer_id=NO_PRODUCER_ID,
                       last_producer_epoch=(meta.producer_epoch if expected is not None
                                            else NO_PRODUCER_EPOCH),
                       transaction_timeout_ms=transaction_timeout_ms,
                       partitions=frozenset(), txn_start_timestamp_ms=-1), None
    bumped = meta.producer_epoch + 1
    if expected is None:
        epoch, last = bumped, NO_PRODUCER_EPOCH
    elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == meta.producer_epoch:
        epoch, last = bumped, meta.producer_epoch
    elif expected[1] == meta.last_producer_epoch:
        epoch, last = meta.producer_epoch, meta.last_producer_epoch  # a retried bump
    else:
        raise TxnError(ErrorCode.PRODUCER_FENCED,
                       f"epoch {expected[1]} of producer {expected[0]} is fenced (current "
                       f"{meta.producer_epoch})")
    return meta.to(_S.EMPTY, now_ms, producer_epoch=epoch, last_producer_epoch=last,
                   transaction_timeout_ms=transaction_timeout_ms, partitions=frozenset(),
                   txn_start_timestamp_ms=-1), None


def prepare_fence_producer_epoch(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Ongoing -> PrepareEpochFence at epoch + 1 (never stored; see
    :func:`prepare_abort_of_fence`)."""
    if meta.producer_epoch >= MAX_PRODUCER_EPOCH:
        raise TxnError(ErrorCode.UNKNOWN_SERVER_ERROR, "cannot fence an exhausted epoch")
    return meta.to(_S.PREPARE_EPOCH_FENCE, now_ms, producer_epoch=meta.producer_epoch + 1,
                   last_producer_epoch=NO_PRODUCER_EPOCH)


def prepare_abort_of_fence(fenced: TxnMetadata, now_ms: int) -> TxnMetadata:
    """PrepareEpochFence -> PrepareAbort (markers at the fenced epoch)."""
    return fenced.to(_S.PREPARE_ABORT, now_ms)


def prepare_timeout_abort(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """The coordinator aborts an Ongoing transaction past its timeout: fence (epoch + 1,
    so the producer's next request is fenced) then PrepareAbort, as Kafka does."""
    return prepare_abort_of_fence(prepare_fence_producer_epoch(meta, now_ms), now_ms)


def _check_producer(meta: TxnMetadata, producer_id: int, producer_epoch: int) -> None:
    if producer_id != meta.producer_id:
        raise TxnError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                       f"producer {producer_id} is not {meta.transactional_id!r}'s producer "
                       f"{meta.producer_id}")
    if producer_epoch != meta.producer_epoch:
        raise TxnError(ErrorCode.PRODUCER_FENCED,
                       f"epoch {producer_epoch} of producer {producer_id} is fenced "
                       f"(current {meta.producer_epoch})")


def prepare_add_partitions(meta: TxnMetadata, producer_id: int, producer_epoch: int,
                           partitions: Iterable[TopicPartition], now_ms: int,
                           client_transaction_version: int = 0) -> TxnMetadata | None:
    """AddPartitionsToTxn / AddOffsetsToTxn: the Ongoing metadata holding ``partitions``,
    or None when they are all in the Ongoing transaction already (answer at once)."""
    _check_producer(meta, producer_id, producer_epoch)
    if meta.state in PREPARED:
        raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS,
                       f"{meta.transactional_id!r} is completing a transaction")
    wanted = frozenset(partitions)
    if meta.state is _S.ONGOING and wanted <= meta.partitions:
        return None
    start = now_ms if meta.state is not _S.ONGOING else meta.txn_start_timestamp_ms
    version = max(meta.client_transaction_version, client_transaction_version) \
        if meta.state is _S.ONGOING else client_transaction_version
    return meta.to(_S.ONGOING, now_ms, partitions=meta.partitions | wanted,
                   txn_start_timestamp_ms=start, client_transaction_version=version)


def verify_partitions(meta: TxnMetadata | None, producer_id: int, producer_epoch: int,
                      partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    """AddPartitionsToTxn v4+ ``verify_only`` (Kafka's
    ``handleVerifyPartitionsInTransaction``): NONE for each partition in the ongoing
    transaction, TRANSACTION_ABORTABLE for the others; raises for a wrong producer."""
    if meta is None:
        raise TxnError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, "unknown transactional id")
    _check_producer(meta, producer_id, producer_epoch)
    if meta.state in PREPARED:
        raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS,
                       f"{meta.transactional_id!r} is completing a transaction")
    inside = meta.partitions if meta.state is _S.ONGOING else frozenset()
    return {tp: ErrorCode.NONE if tp in inside else ErrorCode.TRANSACTION_ABORTABLE
            for tp in partitions}


@dataclass(frozen=True, slots=True)
class EndDecision:
    """What an EndTxn leads to: ``write`` the metadata to store (None: nothing to write,
    answer ``error`` at once), the (producer id, epoch) a v5 answer carries."""

    write: TxnMetadata | None
    error: ErrorCode
    producer_id: int
    producer_epoch: int


def prepare_end(meta: TxnMetadata, producer_id: int, producer_epoch: int, committed: bool,
                now_ms: int, transaction_version: int = 0,
                new_producer_id: int | None = None) -> EndDecision:
    """EndTxn (Kafka's ``endTransaction`` from a client).

    Transaction version 2 (EndTxn v5+, KIP-890 part 2): the prepare bumps the epoch
    (``last_producer_epoch`` keeps the old one, so a retry of this same EndTxn, which
    carries the old epoch, is recognised and answered with the new epoch); an exhausted
    epoch rotates to ``new_producer_id``.  Any other request at an epoch that is not the
    current one is PRODUCER_FENCED, so an EndTxn delayed past the next transaction's start
    cannot end it (KAFKA-17754; :mod:`broker.txn.coordinator`).  As in Kafka 4.0, a
    transaction-version-2 abort is also accepted when no partition was added (Empty,
    CompleteCommit, CompleteAbort): the epoch is bumped and there are no markers."""
    tid, state = meta.transactional_id, meta.state
    target = _S.PREPARE_COMMIT if committed else _S.PREPARE_ABORT
    done = _S.COMPLETE_COMMIT if committed else _S.COMPLETE_ABORT
    if transaction_version >= 2 and state in (target, done) \
            and meta.client_transaction_version >= 2 \
            and producer_epoch == meta.last_producer_epoch \
            and producer_id in (meta.producer_id, meta.previous_producer_id):
        # a retry of the EndTxn that bumped the epoch: answer it with the new epoch
        code = ErrorCode.CONCURRENT_TRANSACTIONS if state is target else ErrorCode.NONE
        return EndDecision(None, code, *answered_producer(meta))
    _check_producer(meta, producer_id, producer_epoch)
    empty_abort = (not committed and transaction_version >= 2
                   and state in (_S.EMPTY, *COMPLETED))
    if state is _S.ONGOING or empty_abort:
        if meta.client_transaction_version >= 2 or transaction_version >= 2:
            next_id = NO_PRODUCER_ID
            if meta.epoch_exhausted:  # markers at the last epoch, then the next id
                if new_producer_id is None:
                    raise TxnError(ErrorCode.UNKNOWN_SERVER_ERROR, "epoch exhausted: a new "
                                   "producer id is needed")
                next_id = new_producer_id
            # an abort before any partition was added (KIP-890 part 2 lets a TV2 client
            # abort in Empty/Complete*): no partitions, so no markers, but the bump
            moved = meta.to(target, now_ms, producer_epoch=producer_epoch + 1,
                            last_producer_epoch=producer_epoch, next_producer_id=next_id,
                            client_transaction_version=2,
                            **({"partitions": frozenset()} if empty_abort else {}))
            if next_id != NO_PRODUCER_ID:
                return EndDecision(moved, ErrorCode.NONE, next_id, 0)
        else:
            moved = meta.to(target, now_ms)
        return EndDecision(moved, ErrorCode.NONE, moved.producer_id, moved.producer_epoch)
    if state is done and transaction_version < 2:
        return EndDecision(None, ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
    if state is target:
        return EndDecision(None, ErrorCode.CONCURRENT_TRANSACTIONS, meta.producer_id,
                           meta.producer_epoch)
    raise TxnError(ErrorCode.INVALID_TXN_STATE,
                   f"{tid!r}: cannot {'commit' if committed else 'abort'} in state "
                   f"{state.display_name}")


def prepare_complete(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort: every marker is
    written; the transaction's partitions are forgotten."""
    if meta.state is _S.PREPARE_COMMIT:
        target = _S.COMPLETE_COMMIT
    elif meta.state is _S.PREPARE_ABORT:
        target = _S.COMPLETE_ABORT
    else:
        raise TxnError(ErrorCode.INVALID_TXN_STATE,
                       f"{meta.transactional_id!r}: nothing to complete in "
                       f"{meta.state.display_name}")
    if meta.next_producer_id != NO_PRODUCER_ID:  # a TV2 end rotated the producer id
        return meta.to(target, now_ms, partitions=frozenset(),
                       producer_id=meta.next_producer_id, producer_epoch=0,
                       previous_producer_id=meta.producer_id,
                       next_producer_id=NO_PRODUCER_ID)
    return meta.to(target, now_ms, partitions=frozenset())


def answered_producer(meta: TxnMetadata) -> tuple[int, int]:
    """The (producer id, epoch) an EndTxn v5 answer carries for ``meta``: the next id at
    epoch 0 while a rotation is pending, else the current ones."""
    if meta.next_producer_id != NO_PRODUCER_ID:
        return meta.next_producer_id, 0
    return meta.producer_id, meta.producer_epoch


def prepare_dead(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """An idle id past ``transactional.id.expiration.ms`` -> Dead (its tombstone)."""
    return meta.to(_S.DEAD, now_ms, partitions=frozenset())
