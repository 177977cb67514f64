"""AddPartitionsToTxn / AddOffsetsToTxn parked while the producer's previous transaction
completes (a delayed operation in a purgatory keyed by transactional id).

Why: after EndTxn is answered (its PrepareCommit/PrepareAbort written) the coordinator
still writes the markers and then CompleteCommit/CompleteAbort.  A producer that begins
its next transaction at once sends AddPartitionsToTxn during that window; Kafka answers
CONCURRENT_TRANSACTIONS and the client retries after a backoff (20 ms in Kafka's Java
client), so back-to-back transactions each wait one backoff (measured: ~20 of the ~30 ms
of a one-record commit cycle, ``bench/transactions.py``).  Here the coordinator parks
the request instead and runs it again the moment the transaction completes.

Contract (:class:`ParkedAdds`, used by :class:`broker.txn.coordinator.TransactionCoordinator`):

- **What is parked**: only a request of the producer that the completing transaction
  will accept next (the coordinator decides, see ``TransactionCoordinator.add_partitions``):
  any other (a fenced epoch, another producer id) is answered at once as before.
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
- ``retry``/``give_up`` run exactly once per parked request, whichever comes first.

Costs: :meth:`park` one timer add (O(1) amortised); :meth:`wake` O(requests parked for
the id).  Not thread-safe: the broker's event loop (or a test's thread) owns it and the
timer it is given.
"""

from __future__ import annotations

from collections.abc import Callable

from timer.delayed_operation import DelayedOperation
from timer.purgatory import Purgatory, TimerLike


class DelayedAddPartitions(DelayedOperation):
    """One parked AddPartitionsToTxn/AddOffsetsToTxn: ``retry`` once ``ready()`` holds,
    ``give_up`` if it still does not when the operation completes (timeout)."""

    __slots__ = ("_give_up", "_on_done", "_ready", "_retry")

    def __init__(self, timeout_ms: int, ready: Callable[[], bool], retry: Callable[[], None],
                 give_up: Callable[[], None], on_done: Callable[[], None]) -> None:
        super().__init__(timeout_ms)
        self._ready = ready
        self._retry = retry
        self._give_up = give_up
        self._on_done = on_done

    def try_complete(self) -> bool:
        return self.force_complete() if self._ready() else False

    def on_complete(self) -> None:
        self._on_done()
        if self._ready():
            self._retry()
        else:
            self._give_up()

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

    def park(self, transactional_id: str, ready: Callable[[], bool],
             retry: Callable[[], None], give_up: Callable[[], None]) -> bool:
        """Park a request until ``ready()`` (then ``retry()``) or the timeout (then
        ``give_up()``); False (nothing parked, nothing called) when the bound is reached."""
        if self.parked >= self.max_parked:
            return False
        self.parked += 1

        def done() -> None:
            self.parked -= 1

        op = DelayedAddPartitions(self.timeout_ms, ready, retry, give_up, done)
        self.purgatory.try_complete_else_watch(op, [transactional_id])
        return True

    def wake(self, transactional_id: str) -> None:
        """The id's state changed: run the requests parked for it that may go on."""
        if self.purgatory.watched_for(transactional_id):
            self.purgatory.check_and_complete(transactional_id)

    def shutdown(self) -> None:
        self.purgatory.shutdown()
