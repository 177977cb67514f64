"""Transaction states of a transactional producer, Kafka's transition table, and errors.

The states are those of Kafka's client ``TransactionManager.State``; a transition is
legal when its source is in the target's set of valid previous states (Kafka's
``isTransitionValid``)::

    target                   valid previous states
    UNINITIALIZED            READY, ABORTABLE_ERROR
    INITIALIZING             UNINITIALIZED, ABORTING_TRANSACTION (epoch bump after abort)
    READY                    INITIALIZING, COMMITTING_TRANSACTION, ABORTING_TRANSACTION
    IN_TRANSACTION           READY
    COMMITTING_TRANSACTION   IN_TRANSACTION
    ABORTING_TRANSACTION     IN_TRANSACTION, ABORTABLE_ERROR
    ABORTABLE_ERROR          IN_TRANSACTION, COMMITTING_TRANSACTION, ABORTABLE_ERROR,
                             INITIALIZING
    FATAL_ERROR              any

Errors (Kafka's exception for each case):

- :class:`IllegalTransactionStateError` (Kafka's ``IllegalStateException``): a method
  called in a state that does not allow it (``begin_transaction`` twice, ``commit``
  before ``begin``, a ``send`` outside a transaction, a transactional method on a
  producer without ``transactional_id``, another operation while one that timed out
  must be retried first).
- :class:`TransactionAbortableError` (Kafka's ``KafkaException`` "Cannot execute
  transactional method because we are in an error state", its cause the abortable
  error): the transaction failed and can only be aborted.
- :class:`TransactionAbortedError` (Kafka's ``TransactionAbortedException``): the future
  of a record that was still queued when its transaction was aborted.
- :class:`~clients.producer.idempotence.ProducerFencedError` (defined with the idempotent
  producer's errors): PRODUCER_FENCED / INVALID_PRODUCER_EPOCH, fatal: a newer producer
  with the same ``transactional_id`` exists; close this one.
- Other fatal errors (INVALID_TXN_STATE, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ...)
  are raised as the broker's code (:func:`~clients.protocol.errors.error_for`).

Costs: O(1).  Thread safety: immutable tables and pure functions.
"""

from __future__ import annotations

from enum import Enum

from clients.protocol.errors import ErrorCode, MiniKafkaError


class TransactionManagerState(Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TransactionManagerState
VALID_PREVIOUS: dict[TransactionManagerState, frozenset[TransactionManagerState]] = {
    S.UNINITIALIZED: frozenset({S.READY, S.ABORTABLE_ERROR}),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION,
                                  S.ABORTABLE_ERROR, S.INITIALIZING}),
    S.FATAL_ERROR: frozenset(TransactionManagerState),
}


def is_transition_valid(source: TransactionManagerState, target: TransactionManagerState) -> bool:
    return source in VALID_PREVIOUS[target]


class IllegalTransactionStateError(MiniKafkaError):
    """A transactional method called when the producer's state does not allow it."""

    code = ErrorCode.INVALID_TXN_STATE


class TransactionAbortableError(MiniKafkaError):
    """The current transaction failed (``__cause__`` is why); only
    ``abort_transaction`` can follow."""

    code = ErrorCode.TRANSACTION_ABORTABLE


class TransactionAbortedError(MiniKafkaError):
    """The record's transaction was aborted before the record was sent."""

    code = ErrorCode.TRANSACTION_ABORTABLE
