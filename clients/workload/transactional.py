"""The workload's transactional mode: one logical producer's loop of transactions.

``minikafka workload --transactional``: each logical producer ``p`` owns the
transactional id ``workload-<run>-<p>`` and sends its sequences 0, 1, 2, ... (values and
keys as in :mod:`clients.workload.run`; a producer's keys hash to several partitions,
so a transaction spans partitions) in transactions of a random size (1 ..
``max_txn_records``).  Each transaction is committed, or aborted with probability
``abort_ratio`` (after a flush, so its records are in the log and only the ABORT
markers hide them from read_committed); with probability ``restart_ratio`` the producer
is *restarted* in the middle of one: a new session with the same transactional id calls
``init_transactions`` (fencing the old one and aborting its open transaction), then the
old session tries to commit, which must fail (``fenced_commits_refused`` counts it; a
commit that succeeds anyway is recorded as such and shows up in verify).

The client is our :class:`~clients.producer.Producer`, or with ``client="confluent"``
confluent-kafka's (:mod:`clients.workload.confluent_txn`), or with
``client="kafka-python"`` kafka-python's (:mod:`clients.workload.kafka_python_txn`), all
behind :class:`TransactionalClient` (:data:`CLIENTS`).

Ledger (:mod:`clients.workload.ledger`, version 2): ``S`` before the sequences are sent
(durable), ``B`` at begin, and once the outcome is known the ``A`` lines of a committed
transaction's records (offsets from their acknowledgments) and its ``T`` line:

=========  ==================================================================
outcome    when
=========  ==================================================================
commit     ``commit_transaction`` returned
abort      ``abort_transaction`` returned, or the transaction failed before
           ``commit_transaction`` was called (the producer is then restarted if
           abort fails: the new session's ``init_transactions`` aborts it), or a
           failed commit was followed by a successful abort
unknown    ``commit_transaction`` failed (after retrying a timeout) and abort failed
=========  ==================================================================

Faults make any call fail: a timeout of ``commit_transaction`` is retried (Kafka's rule:
the same call waits for the same operation), any other failure ends the transaction as
above and a fatal state (fenced, abortable and not abortable) restarts the producer.
Costs: per record one send; per transaction one to three coordinator round trips and a
buffered ledger line per record.  Thread safety: :func:`produce_transactional` runs on
one workload thread per logical producer and shares only the ledger (locked) and the
``tally`` callback (the caller's counters, locked).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from clients.producer.producer import Producer
from clients.protocol.errors import MiniKafkaError, RequestTimedOutError
from clients.types import RecordMetadata
from clients.workload.confluent_txn import ConfluentTxnProducer
from clients.workload.kafka_python_txn import KafkaPythonTxnProducer
from clients.workload.ledger import LedgerWriter

# tally(event, detail): event "sent" / "acked" / "failed" (detail: why) per record, or
# "txn" per transaction event (detail: commit, abort, unknown, restart, fenced_commit_refused,
# fenced_commit_succeeded).
Tally = Callable[[str, str], None]
COMMIT_RETRIES = 3
INIT_DEADLINE_S = 180.0


class SendFuture(Protocol):
    def result(self, timeout: float | None = None) -> RecordMetadata: ...

    def exception(self, timeout: float | None = None) -> BaseException | None: ...


class TransactionalClient(Protocol):
    """The calls the loop makes: our Producer's, or confluent-kafka's / kafka-python's
    through :class:`~clients.workload.confluent_txn.ConfluentTxnProducer` /
    :class:`~clients.workload.kafka_python_txn.KafkaPythonTxnProducer`."""

    def init_transactions(self) -> None: ...

    def begin_transaction(self) -> None: ...

    def send(self, topic: str, value: bytes, *, key: bytes) -> SendFuture: ...

    def flush(self) -> None: ...

    def commit_transaction(self) -> None: ...

    def abort_transaction(self) -> None: ...

    def close(self, timeout_s: float | None = None) -> None: ...


# the transactional clients by --client name, each made like our Producer:
# (bootstrap, transactional_id=..., transaction_timeout_ms=..., **producer options)
CLIENTS: dict[str, Callable[..., TransactionalClient]] = {
    "minikafka": Producer,
    "confluent": ConfluentTxnProducer,
    "kafka-python": KafkaPythonTxnProducer,
}


@dataclass
class TxnPlan:
    """What one logical producer does (built by the workload from its config)."""

    bootstrap: str
    topic: str
    run_id: str
    producer: int
    count: int
    options: dict[str, Any]
    message: Callable[[int], tuple[str, bytes]]  # sequence -> (key, value)
    announce_every: int
    max_txn_records: int = 20
    abort_ratio: float = 0.2
    restart_ratio: float = 0.02
    transaction_timeout_ms: int = 20_000
    interval_s: float = 0.0
    start: float = field(default_factory=time.monotonic)
    client: str = "minikafka"  # or "confluent", "kafka-python" (CLIENTS)

    @property
    def transactional_id(self) -> str:
        return f"workload-{self.run_id}-{self.producer}"


def start_session(plan: TxnPlan, stop: threading.Event) -> TransactionalClient:
    """A new producer of ``plan``'s transactional id, initialised (retried through faults
    until :data:`INIT_DEADLINE_S`)."""
    deadline = time.monotonic() + INIT_DEADLINE_S
    while True:
        try:  # kafka-python's producer connects when it is made: that can fail too
            client = CLIENTS[plan.client](
                plan.bootstrap, transactional_id=plan.transactional_id,
                transaction_timeout_ms=plan.transaction_timeout_ms, **plan.options)
        except MiniKafkaError:
            if time.monotonic() > deadline or stop.is_set():
                raise
            stop.wait(0.5)
            continue
        try:
            while True:
                try:
                    client.init_transactions()
                    return client
                except RequestTimedOutError:
                    if time.monotonic() > deadline or stop.is_set():
                        raise
        except MiniKafkaError:
            client.close(5.0)
            if time.monotonic() > deadline or stop.is_set():
                raise
            stop.wait(0.5)


def produce_transactional(plan: TxnPlan, ledger: LedgerWriter, tally: Tally,
                          stop: threading.Event) -> None:
    """Send ``plan.count`` sequences in transactions (see the module docstring)."""
    rng = random.Random(f"{plan.run_id}-{plan.producer}-txn")
    announced = sequence = txn = 0
    client = start_session(plan, stop)
    try:
        while sequence < plan.count and not stop.is_set():
            end = min(plan.count, sequence + rng.randint(1, plan.max_txn_records))
            if end > announced:
                announced = min(plan.count, max(end, sequence + plan.announce_every))
                ledger.sent(plan.producer, announced)
            abort, restart_at = rng.random() < plan.abort_ratio, -1
            if rng.random() < plan.restart_ratio:
                restart_at = rng.randrange(sequence, end)
            ledger.begin(plan.producer, txn, sequence)
            futures: list[tuple[int, str, SendFuture]] = []
            outcome, failure = "abort", ""
            try:
                client.begin_transaction()
                for s in range(sequence, end):
                    if plan.interval_s:
                        delay = plan.start + s * plan.interval_s - time.monotonic()
                        if delay > 0:
                            stop.wait(delay)
                    key, value = plan.message(s)
                    tally("sent", "")
                    futures.append((s, key, client.send(plan.topic, value,
                                                        key=key.encode())))
                    if s == restart_at:
                        end = s + 1
                        break
                if restart_at >= 0:
                    client, outcome = _restart_inside(plan, client, tally, stop)
                elif abort:
                    client.flush()  # the records reach the log: the markers must hide them
                    client.abort_transaction()
                else:
                    outcome = "unknown"
                    _commit(client)
                    outcome = "commit"
            except MiniKafkaError as exc:
                failure = f"{type(exc).__name__} {exc.code.name}"
                if outcome == "unknown":  # the commit failed: it is aborted only if abort works
                    outcome = "abort" if _try_abort(client) else "unknown"
                elif not _try_abort(client):
                    outcome = "abort"  # never asked to commit: the restart aborts it
                if outcome != "abort" or not _usable(client):
                    tally("txn", "restart")
                    client.close(5.0)
                    client = start_session(plan, stop)
            _record(plan, ledger, tally, txn, sequence, end, outcome, futures, failure)
            sequence, txn = end, txn + 1
    finally:
        client.close(10.0)


def _commit(client: TransactionalClient) -> None:
    for attempt in range(COMMIT_RETRIES + 1):
        try:
            client.commit_transaction()
            return
        except RequestTimedOutError:
            if attempt == COMMIT_RETRIES:
                raise


def _try_abort(client: TransactionalClient) -> bool:
    try:
        client.abort_transaction()
        return True
    except MiniKafkaError:
        return False


def _usable(client: TransactionalClient) -> bool:
    """Whether a new transaction can begin (false after a fatal error)."""
    try:
        client.begin_transaction()
    except MiniKafkaError:
        return False
    # begun, nothing sent: an empty transaction; abort it so the next begin works
    return _try_abort(client)


def _restart_inside(plan: TxnPlan, old: TransactionalClient, tally: Tally,
                    stop: threading.Event) -> tuple[TransactionalClient, str]:
    """A new session fences ``old`` mid-transaction; ``old``'s commit must then fail."""
    tally("txn", "restart")
    new = start_session(plan, stop)
    try:
        old.commit_transaction()
        outcome = "commit"
        tally("txn", "fenced_commit_succeeded")
    except MiniKafkaError:
        outcome = "abort"
        tally("txn", "fenced_commit_refused")
    old.close(5.0)
    return new, outcome


def _record(plan: TxnPlan, ledger: LedgerWriter, tally: Tally, txn: int, first: int, end: int,
            outcome: str, futures: list[tuple[int, str, SendFuture]], failure: str) -> None:
    for sequence, key, future in futures:
        error = future.exception(timeout=30.0) if outcome == "commit" else None
        if outcome == "commit" and error is None:
            meta = future.result()
            ledger.ack(plan.producer, sequence, key, meta.topic, meta.partition, meta.offset)
            tally("acked", "")
        else:
            why = (f"record of a committed transaction failed: {type(error).__name__}"
                   if error is not None else f"in an {outcome} transaction")
            tally("failed", why + (f" ({failure})" if failure and outcome != "abort" else ""))
    ledger.end(plan.producer, txn, first, end, outcome)
    tally("txn", outcome)
