"""The Producer's transactional methods as the user's thread runs them.

:class:`TransactionCalls` is what ``Producer.init_transactions`` ...
``abort_transaction`` delegate to: each asks the
:class:`~clients.producer.transactions.manager.TransactionManager` to start the operation
(which checks the call order and raises Kafka's errors), wakes the sender thread (which
sends the requests, :mod:`~clients.producer.transactions.coordinator_requests`) and
waits for the result up to ``max_block_ms``.  A wait that runs out raises
:class:`~clients.protocol.errors.RequestTimedOutError`; calling the same method again
keeps waiting for the same operation (Kafka's rule), any other transactional method
meanwhile raises ``IllegalTransactionStateError``.  ``commit_transaction`` flushes:
lingering batches go out at once, and the EndTxn waits until every batch is acknowledged.

Costs: O(1) plus the offsets given.  Thread safety: any thread (the manager locks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from clients.producer.accumulator import RecordAccumulator
from clients.producer.transactions.manager import TransactionalResult, TransactionManager
from clients.protocol.errors import RequestTimedOutError
from clients.protocol.topics import TopicPartition
from clients.types import ConsumerGroupMetadata, OffsetAndMetadata


class TransactionCalls:
    """The transactional methods of one producer (see the module docstring)."""

    def __init__(self, manager: TransactionManager, accumulator: RecordAccumulator, *,
                 wakeup: Callable[[], None], max_block_ms: int) -> None:  # fmt: skip
        self.manager = manager
        self._acc = accumulator
        self._wakeup = wakeup  # the sender thread's
        self._max_block_ms = max_block_ms

    def init_transactions(self) -> None:
        self._await(self.manager.initialize())

    def begin_transaction(self) -> None:
        self.manager.begin()

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:  # fmt: skip
        group = (ConsumerGroupMetadata(group_metadata) if isinstance(group_metadata, str)
                 else group_metadata)  # fmt: skip
        positions = {tp: om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(om)
                     for tp, om in offsets.items()}  # fmt: skip
        self._await(self.manager.send_offsets(positions, group))

    def commit_transaction(self) -> None:
        result = self.manager.begin_commit()
        self._acc.begin_flush()  # linger no longer: everything goes out now
        try:
            self._await(result)
        finally:
            self._acc.end_flush()

    def abort_transaction(self) -> None:
        self._await(self.manager.begin_abort())

    def _await(self, result: TransactionalResult) -> None:
        self._wakeup()
        if not result.wait(self._max_block_ms / 1000):
            raise RequestTimedOutError(
                f"timeout expired after {self._max_block_ms} ms while awaiting "
                f"{result.operation} (call it again to keep waiting)")  # fmt: skip
        self.manager.op_finished(result)
        if result.error is not None:
            raise result.error
