"""AddPartitionsToTxn / AddOffsetsToTxn parked while the producer's previous transaction
completes (a delayed operation in a purgatory keyed by transactional id).

Why: after EndTxn is answered (its PrepareCommit/PrepareAbort written) the coordinator
still writes the markers and then CompleteCommit/CompleteAbort.  A producer that begins
its next transaction at once sends AddPartitionsToTxn during that window; Kafka answers
CONCURRENT_TRANSACTIONS and the client retries after a backoff (20 ms in Kafka's Java
client), so back-to-back transactions each wait one backoff (measured: ~20 of the ~30 ms
of a one-record commit cycle, ``bench/transactions.py``).  Here the coordinator parks
the request instead and runs it again the moment the transaction completes.

Contract (:class:`ParkedAdds` and the pure :func:`parkable`, :func:`fold_parked`, used by
:class:`broker.txn.coordinator.TransactionCoordinator`):

- **What is parked** (:func:`parkable`): only a request of the producer that the
  completing transaction will accept next (its id and epoch, or those a v5 EndTxn
  answered); any other (a fenced epoch, another producer id) is answered at once as
  before.
- **Carried by the Complete* write** (:func:`fold_parked`): the parked requests that
  pass against the CompleteCommit/CompleteAbort metadata, checked as if they ran once it
  is stored, become one Ongoing record written in the same batch after it.
- **Answered on completion**: :meth:`ParkedAdds.wake` (called by the coordinator after
  every state write of the id and when it unloads the id) completes each parked request
  of the id whose transaction is no longer completing by running the request again from
  the start (``retry``): every check is made against the state *then*, exactly as if the
  client had retried at that instant, so parking adds no state and no new way to accept
  a request (KAFKA-17754's class of bug cannot come from here: a parked request of a
  fenced epoch is refused when it runs again, as its client retry would be).
- **Bounds**: at most ``max_parked`` requests parked per coordinator (beyond it,
  :meth:`park` returns False and the caller answers CONCURRENT_TRANSACTIONS, Kafka's
  answer); each waits at most ``timeout_ms`` (then ``give_up``: CONCURRENT_TRANSACTIONS,
  the client retries after its backoff, as it would have without parking).
- ``retry``/``give_up`` run exactly once per parked request, whichever comes first,
  unless the coordinator :meth:`ParkedAdds.take` s the request first: it then answers it
  itself (the coordinator folds the parked requests into its Complete* write: one
  ``__transaction_state`` batch holding CompleteCommit/CompleteAbort then Ongoing).

Costs: :meth:`park` one timer add (O(1) amortised); :meth:`wake` O(requests parked for
the id).  Not thread-safe: the broker's event loop (or a test's thread) owns it and the
timer it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker.txn.state import (
    PREPARED,
    TxnError,
    TxnMetadata,
    answered_producer,
    prepare_add_partitions,
)
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from timer.delayed_operation import DelayedOperation
from timer.purgatory import Purgatory, TimerLike


@dataclass(frozen=True, slots=True)
class AddRequest:
    """One AddPartitionsToTxn/AddOffsetsToTxn as the coordinator received it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: frozenset[TopicPartition]
    client_transaction_version: int
    respond: Callable[[ErrorCode], None]


def parkable(meta: TxnMetadata, request: AddRequest) -> bool:
    """Whether ``request`` may wait for ``meta``'s transaction to complete: it is in
    PrepareCommit/PrepareAbort and the request comes from the producer it accepts next
    (the current id and epoch, or those a v5 EndTxn answered)."""
    return meta.state in PREPARED and (request.producer_id, request.producer_epoch) in (
        (meta.producer_id, meta.producer_epoch), answered_producer(meta))


def fold_parked(done: TxnMetadata, requests: list[AddRequest], now_ms: int
                ) -> tuple[TxnMetadata, list[AddRequest]]:
    """The parked requests the Complete* write of ``done`` can carry: the Ongoing
    metadata they lead to from ``done`` (each checked exactly as if it ran once ``done``
    is stored) and those requests, oldest first, up to the first that does not pass (it
    runs again after the write, as without folding).  ``(done, [])``: nothing to carry."""
    new, folded = done, []
    for request in requests:
        try:
            moved = prepare_add_partitions(new, request.producer_id, request.producer_epoch,
                                           request.partitions, now_ms,
                                           request.client_transaction_version)
        except TxnError:
            break
        new = new if moved is None else moved
        folded.append(request)
    return new, folded


class DelayedAddPartitions(DelayedOperation):
    """One parked request: ``retry(request)`` once ``ready()`` holds, CONCURRENT_TRANSACTIONS
    if it still does not when the operation completes (timeout); neither once taken."""

    __slots__ = ("_on_done", "_ready", "_retry", "request", "taken")

    def __init__(self, timeout_ms: int, request: AddRequest, ready: Callable[[], bool],
                 retry: Callable[[AddRequest], None], on_done: Callable[[], None]) -> None:
        super().__init__(timeout_ms)
        self.request = request
        self.taken = False
        self._ready = ready
        self._retry = retry
        self._on_done = on_done

    def try_complete(self) -> bool:
        return self.force_complete() if self._ready() else False

    def on_complete(self) -> None:
        self._on_done()
        if self.taken:
            return
        if self._ready():
            self._retry(self.request)
        else:
            self.request.respond(ErrorCode.CONCURRENT_TRANSACTIONS)

    def on_expiration(self) -> None:
        pass


class ParkedAdds:
    """The parked requests of one coordinator, by transactional id; see the module."""

    def __init__(self, timer: TimerLike, max_parked: int, timeout_ms: int) -> None:
        self.max_parked = max_parked
        self.timeout_ms = timeout_ms
        self.purgatory: Purgatory[DelayedAddPartitions] = Purgatory("txn-add-partitions",
                                                                    timer)
        self.parked = 0  # requests parked and not yet completed
        self.closed = False
        self._by_id: dict[str, list[DelayedAddPartitions]] = {}

    def park(self, request: AddRequest, ready: Callable[[], bool],
             retry: Callable[[AddRequest], None]) -> bool:
        """Park ``request`` until ``ready()`` (then ``retry(request)``) or the timeout
        (then CONCURRENT_TRANSACTIONS); False (nothing parked) when the bound is reached."""
        if self.closed or self.parked >= self.max_parked:
            return False
        self.parked += 1
        tid = request.transactional_id
        ops = self._by_id.setdefault(tid, [])

        def done() -> None:
            self.parked -= 1
            ops.remove(op)
            if not ops and self._by_id.get(tid) is ops:
                del self._by_id[tid]

        op = DelayedAddPartitions(self.timeout_ms, request, ready, retry, done)
        ops.append(op)
        self.purgatory.try_complete_else_watch(op, [tid])
        return True

    def waiting(self, transactional_id: str) -> list[AddRequest]:
        """The requests parked for the id, oldest first."""
        return [op.request for op in self._by_id.get(transactional_id, ())]

    def take(self, transactional_id: str, count: int) -> None:
        """The coordinator answers the ``count`` oldest requests of the id itself: they
        leave the purgatory without ``retry`` or a timeout answer."""
        for op in list(self._by_id.get(transactional_id, ()))[:count]:
            op.taken = True
            op.force_complete()

    def wake(self, transactional_id: str) -> None:
        """The id's state changed: run the requests parked for it that may go on."""
        if self.purgatory.watched_for(transactional_id):
            self.purgatory.check_and_complete(transactional_id)

    def shutdown(self) -> None:
        """Drop the parked requests unanswered; park nothing from now on."""
        self.closed = True
        self.purgatory.shutdown()
