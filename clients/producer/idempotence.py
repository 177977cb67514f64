"""Idempotent producer bookkeeping: producer id and epoch, per-partition sequences.

A pure state machine (no I/O, no clock, no threads) owned by the producer's sender.
It decides *when* a partition may send, *which* sequence a batch gets and *what to do*
with a produce error; the sender and the accumulator carry the decisions out.

What the broker sees: every batch of an idempotent producer carries, in its header
(:mod:`clients.records`, bytes 43-56; the CRC covers them)::

    offset  size  field            value
    43      8     producer_id      from InitProducerId (API 22)
    51      2     producer_epoch   from InitProducerId; bumped to recover (below)
    53      4     base_sequence    per (producer, partition): 0, then previous + count,
                                   wrapping from 2**31 - 1 to 0 as Kafka does

The broker keeps the last 5 batches of each producer per partition: a batch equal to
one of them is a duplicate (answered with error 0 and its original base offset), a
sequence that does not follow the last one is OUT_OF_ORDER_SEQUENCE_NUMBER (45), an
old epoch is INVALID_PRODUCER_EPOCH (47), and a producer it has no state for (unless
the sequence is 0) is UNKNOWN_PRODUCER_ID (59).

Rules kept here (design choices where Kafka leaves room are marked *choice*):

- **Sequences are assigned when a batch is drained**, so they follow send order; a
  retried batch keeps its sequence and its bytes.
- **At most ``max_in_flight`` batches in flight per partition** (Kafka's 5: the broker
  remembers 5 batches, so a retried batch is still recognised), in one request or in
  several.
- **Retries go one at a time, in sequence order**: a batch with a sequence at the head
  of its queue (a retry) is sent only when nothing of the partition is in flight, and
  no new batch is sent while one of the partition's batches awaits a retry (*choice*:
  a little slower than Kafka after an error, but a retried batch can never fall out of
  the broker's 5-batch window because newer batches overtook it).
- **Error classification** (:meth:`IdempotenceManager.classify`): INVALID_PRODUCER_EPOCH
  and PRODUCER_FENCED are fatal (another producer owns the id: the producer stops).
  OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID are retried when an earlier
  batch of the partition is still unresolved (the gap is ours and closes when that
  batch is retried); otherwise the broker lost track of us and the epoch is bumped.
  DUPLICATE_SEQUENCE_NUMBER counts as success.  Other errors retry or fail as usual.
- **A sequenced batch that fails for good leaves a gap**, so the epoch is bumped.
- **Epoch bump** (KIP-360 style, *choice*): sending stops on every partition until no
  batch is in flight; then each batch still holding a sequence is either *restamped*
  (it will get a sequence under the new epoch) when every attempt of it was rejected
  by the broker, or *abandoned* (its future fails with :class:`SequenceAbandonedError`)
  when an attempt's outcome is unknown (lost connection, request timeout, dropped
  response): resending it under a new epoch could duplicate it.  Then InitProducerId
  with the current (id, epoch) bumps the epoch and every partition restarts at 0.

Transactions: a transactional producer passes a :class:`TransactionGate` (its
:class:`~clients.producer.transactions.manager.TransactionManager`): a partition's batches
are drained only once the gate allows it (AddPartitionsToTxn named the partition), they
carry the transactional attribute (bit 4), and every batch that fails for good is
reported to the gate (the transaction can then only be aborted).  The producer id comes
from the transaction manager's InitProducerId, not from the sender's lazy one.

Costs: every method is O(1) except :meth:`IdempotenceManager.classify` and the
removal of a resolved sequence, O(batches unresolved in the partition) <= a handful.
Memory: one small record per partition produced to.

Thread safety: none.  The sender owns the manager and calls it (and lets the
accumulator call it) only while holding the sender lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import (
    RETRIABLE,
    ErrorCode,
    MiniKafkaError,
    UnsupportedVersionError,
    error_for,
)
from clients.protocol.message_types import InitProducerIdRequest, InitProducerIdResponse
from clients.protocol.registry import APIS
from clients.protocol.topics import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
SEQUENCE_MODULUS = 1 << 31  # sequences are int32 >= 0 and wrap to 0
MAX_IN_FLIGHT_PER_PARTITION = 5  # the broker remembers this many batches per producer

_FATAL = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED})
_SEQUENCE_ERRORS = frozenset(
    {ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID}
)


class ProducerFencedError(MiniKafkaError):
    """The broker saw a newer epoch of this producer id: this producer is fenced (fatal)."""

    code = ErrorCode.INVALID_PRODUCER_EPOCH


class SequenceAbandonedError(MiniKafkaError):
    """The batch's outcome is unknown and its sequence was given up on an epoch bump.

    Its records may or may not be in the log; they were not resent, so they are never
    duplicated.
    """

    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class IdempotenceUnsupportedError(UnsupportedVersionError):
    """A broker does not serve InitProducerId, which the idempotent producer needs."""


def increment_sequence(sequence: int, count: int) -> int:
    """``sequence + count`` in the int32 sequence space (wraps to 0, as in Kafka)."""
    return (sequence + count) % SEQUENCE_MODULUS


class TransactionGate(Protocol):
    """What the idempotence manager asks of a transactional producer's transaction
    manager (implemented by
    :class:`~clients.producer.transactions.manager.TransactionManager`)."""

    def may_send(self, tp: TopicPartition) -> bool:
        """``tp`` belongs to the ongoing transaction: its batches may be drained."""
        ...

    def on_batch_failed(self, tp: TopicPartition, error: BaseException) -> None:
        """A batch of ``tp`` failed for good."""
        ...


class Action(Enum):
    """What the sender does with a batch whose produce attempt returned an error."""

    RETRY = "retry"  # back to the head of its queue, same sequence (if attempts allow)
    FAIL = "fail"  # fail its future with the error (a gap: an epoch bump follows)
    FATAL = "fatal"  # fail everything, the producer stops
    BUMP_EPOCH = "bump_epoch"  # back to the queue; resent under a new epoch


@dataclass(slots=True)
class PartitionSequences:
    """Sequence state of one partition under the current (producer id, epoch)."""

    next_sequence: int = 0
    in_flight: int = 0
    # base sequences assigned and not yet resolved (acked or failed), in send order
    unresolved: deque[int] = field(default_factory=deque)
    # unresolved base sequences that have had a failed attempt (awaiting a retry)
    retrying: set[int] = field(default_factory=set)
    next_acked_offset: int = -1  # offset after the last acknowledged batch


class IdempotenceManager:
    """Producer id/epoch and per-partition sequences (see the module docstring)."""

    def __init__(self, max_in_flight: int = MAX_IN_FLIGHT_PER_PARTITION,
                 transaction: TransactionGate | None = None) -> None:  # fmt: skip
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT_PER_PARTITION:
            raise ValueError(
                f"max_in_flight must be in 1..{MAX_IN_FLIGHT_PER_PARTITION}, got {max_in_flight}"
            )
        self.max_in_flight = max_in_flight
        self.transaction = transaction  # set for a transactional producer
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.fatal_error: MiniKafkaError | None = None
        self.bump_reason: str | None = None  # set while an epoch bump is pending
        self.epoch_bumps = 0
        self.duplicates = 0
        self._partitions: dict[TopicPartition, PartitionSequences] = {}
        self._in_flight_total = 0

    # ------------------------------------------------------------ producer id
    @property
    def ready(self) -> bool:
        """Batches may be sent: an id is known, no bump pending, not fenced."""
        return (
            self.producer_id >= 0 and self.bump_reason is None and self.fatal_error is None
        )

    @property
    def needs_producer_id(self) -> bool:
        """InitProducerId must be sent now (none yet, or a bump with nothing in flight)."""
        if self.fatal_error is not None:
            return False
        if self.producer_id < 0:
            return True
        return self.bump_reason is not None and self._in_flight_total == 0

    @property
    def in_flight_total(self) -> int:
        return self._in_flight_total

    def init_request(self) -> InitProducerIdRequest:
        """The InitProducerId body: a new id, or a bump of the current (id, epoch)."""
        return {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch}

    def on_api_versions(self, served: Mapping[int, tuple[int, int]], address: str) -> None:
        """A broker's versions ({api key: (min, max)}, from its ApiVersions answer): no
        InitProducerId at a version we speak is fatal.  (Below v3 the request cannot
        carry the current id and epoch, so a bump gets a fresh id instead: every
        partition restarts at sequence 0 either way.)"""
        ours = APIS[ApiKey.INIT_PRODUCER_ID]
        theirs = served.get(int(ApiKey.INIT_PRODUCER_ID))
        why = None
        if theirs is None:
            why = "does not serve InitProducerId"
        elif min(theirs[1], ours.max_version) < max(theirs[0], ours.min_version):
            why = (f"serves InitProducerId v{theirs[0]}-{theirs[1]} only, we speak "
                   f"v{ours.min_version}-{ours.max_version}")
        if why is not None:
            self.set_fatal(IdempotenceUnsupportedError(
                f"the broker at {address} {why} (API {int(ApiKey.INIT_PRODUCER_ID)}), which "
                "the idempotent producer needs: create the Producer with "
                "enable_idempotence=False (or acks=1) to produce without idempotence"
            ))  # fmt: skip

    def on_init_response(self, body: InitProducerIdResponse) -> bool:
        """An InitProducerId answer; True when it should be retried after a backoff.

        Success sets the id; a retriable code asks for a retry; anything else is fatal
        (INVALID_PRODUCER_EPOCH / PRODUCER_FENCED as :class:`ProducerFencedError`).
        """
        code = body["error_code"]
        if code == ErrorCode.NONE:
            self.set_producer_id(body["producer_id"], body["producer_epoch"])
            return False
        if code in RETRIABLE:
            return True
        message = body.get("error_message") or "InitProducerId failed"
        error = error_for(code, message)
        if code in _FATAL:
            error = ProducerFencedError(
                f"producer id {self.producer_id} epoch {self.producer_epoch}: {message}"
            )
        self.set_fatal(error)
        return False

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new id or epoch from InitProducerId: every partition restarts at sequence 0."""
        if producer_id < 0 or producer_epoch < 0:
            raise MiniKafkaError(
                f"InitProducerId returned producer id {producer_id}, epoch {producer_epoch}"
            )
        if self.producer_id >= 0:
            self.epoch_bumps += 1
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.bump_reason = None
        self._partitions.clear()
        self._in_flight_total = 0

    def request_epoch_bump(self, reason: str) -> None:
        if self.bump_reason is None and self.fatal_error is None:
            self.bump_reason = reason

    def set_fatal(self, error: MiniKafkaError) -> None:
        if self.fatal_error is None:
            self.fatal_error = error

    # ------------------------------------------------------------ drain side
    def can_send(self, tp: TopicPartition, head_has_sequence: bool) -> bool:
        """May the partition's head batch be drained now?"""
        if not self.ready:
            return False
        if self.transaction is not None and not self.transaction.may_send(tp):
            return False
        state = self._partitions.get(tp)
        if state is None:
            return True
        if head_has_sequence:  # a retry: alone, after everything in flight resolved
            return state.in_flight == 0
        return state.in_flight < self.max_in_flight and not state.retrying

    def assign_sequence(self, tp: TopicPartition, record_count: int) -> int:
        """The base sequence of a new batch of ``record_count`` records."""
        if record_count <= 0:
            raise ValueError(f"a batch needs records, got {record_count}")
        state = self._state(tp)
        base = state.next_sequence
        state.next_sequence = increment_sequence(base, record_count)
        state.unresolved.append(base)
        return base

    def on_send(self, tp: TopicPartition) -> None:
        """A batch of ``tp`` was drained for sending (one attempt starts)."""
        self._state(tp).in_flight += 1
        self._in_flight_total += 1

    def on_attempt_done(self, tp: TopicPartition) -> None:
        """One attempt of a ``tp`` batch ended (answered, lost, or never written)."""
        state = self._partitions.get(tp)
        if state is None or state.in_flight == 0:
            return  # state reset by a new epoch meanwhile
        state.in_flight -= 1
        self._in_flight_total -= 1

    # ------------------------------------------------------------ outcomes
    def on_acked(
        self, tp: TopicPartition, base_sequence: int, base_offset: int, record_count: int,
        retried: bool,
    ) -> bool:  # fmt: skip
        """The batch is in the log; True when the answer was recognisably a duplicate.

        A retried batch answered with a base offset below the end of a batch already
        acknowledged was not appended again: the broker recognised a duplicate (a lower
        bound: a duplicate answered before any later batch is not recognisable here).
        """
        state = self._partitions.get(tp)
        if state is None:
            return False
        self._resolve(state, base_sequence)
        if base_offset < 0:
            return False
        duplicate = retried and base_offset < state.next_acked_offset
        if duplicate:
            self.duplicates += 1
        state.next_acked_offset = max(state.next_acked_offset, base_offset + record_count)
        return duplicate

    def on_retry(self, tp: TopicPartition, base_sequence: int) -> None:
        """The batch goes back to its queue to be resent with the same sequence."""
        state = self._partitions.get(tp)
        if state is not None and base_sequence in state.unresolved:
            state.retrying.add(base_sequence)

    def on_split(self, tp: TopicPartition, base_sequence: int, part_sequences: list[int]) -> None:
        """A batch refused as too large was split into parts that keep its sequence
        range, cut in order (Kafka's splitAndReenqueue): the parts take its place among
        the unresolved sequences and are resent as retries, one at a time, in order."""
        state = self._partitions.get(tp)
        if state is None or base_sequence not in state.unresolved:
            return  # an old epoch's sequence: the parts are restamped like any batch
        where = state.unresolved.index(base_sequence)
        state.unresolved.remove(base_sequence)
        for offset, sequence in enumerate(part_sequences):
            state.unresolved.insert(where + offset, sequence)
        state.retrying.discard(base_sequence)
        state.retrying.update(part_sequences)

    def on_failed(self, tp: TopicPartition, base_sequence: int, reason: str) -> None:
        """The batch failed for good: its sequence is a gap, so the epoch is bumped."""
        state = self._partitions.get(tp)
        if state is None or base_sequence not in state.unresolved:
            return  # an old epoch's sequence: nothing to repair
        self._resolve(state, base_sequence)
        self.request_epoch_bump(f"batch {tp.topic}-{tp.partition} seq {base_sequence} {reason}")

    def classify(self, tp: TopicPartition, base_sequence: int, error: MiniKafkaError) -> Action:
        """Decide what a produce error means for an idempotent batch."""
        if error.code in _FATAL:
            return Action.FATAL
        if error.code in _SEQUENCE_ERRORS:
            state = self._partitions.get(tp)
            earlier = (
                state is not None and base_sequence in state.unresolved
                and state.unresolved[0] != base_sequence
            )  # fmt: skip
            if earlier:
                return Action.RETRY  # an earlier batch is unresolved: the gap is ours
            self.request_epoch_bump(f"{error.code.name} for {tp.topic}-{tp.partition}")
            return Action.BUMP_EPOCH
        return Action.RETRY if error.retriable else Action.FAIL

    # ------------------------------------------------------------ introspection
    def partition(self, tp: TopicPartition) -> PartitionSequences | None:
        return self._partitions.get(tp)

    def metrics(self) -> dict[str, int | bool | str | None]:
        return {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "epoch_bumps": self.epoch_bumps,
            "duplicates": self.duplicates,
            "in_flight_batches": self._in_flight_total,
            "epoch_bump_pending": self.bump_reason,
            "fenced": self.fatal_error is not None,
        }

    def _state(self, tp: TopicPartition) -> PartitionSequences:
        state = self._partitions.get(tp)
        if state is None:
            state = self._partitions[tp] = PartitionSequences()
        return state

    @staticmethod
    def _resolve(state: PartitionSequences, base_sequence: int) -> None:
        if state.unresolved and state.unresolved[0] == base_sequence:
            state.unresolved.popleft()
        elif base_sequence in state.unresolved:
            state.unresolved.remove(base_sequence)
        state.retrying.discard(base_sequence)
