"""The workload's consume-transform-produce pipeline: topic A -> f -> topic B, exactly once.

``minikafka workload --transactional --pipeline-workers K``: while (and after) the
transactional producers write topic A, K pipeline workers read A in one consumer group
(``pipeline-<run>``) with ``isolation_level=read_committed`` and loop:

1. poll a batch of A's records (at most ``max_poll_records``);
2. begin a transaction, send ``f(record)`` to topic B for each (key: A's key; header
   ``mk-txn: w<worker>-s<session>-t<txn>``), send the consumer's positions with the
   consumer's group metadata (``send_offsets_to_transaction``, KIP-447);
3. commit it, or abort it with probability ``abort_ratio`` (then rewind the consumer to
   the group's committed offsets: those records are read again), or with probability
   ``kill_ratio`` *kill* the worker inside it: the session's consumer leaves the group
   without committing, a new session with the same transactional id
   (``pipeline-<run>-<worker>``) starts, whose ``init_transactions`` fences the old
   producer and aborts its open transaction; then the old producer tries to commit,
   which must fail (``pipeline_fenced_commit_refused``).
A batch with no records whose positions moved (past markers or aborted data) commits a
transaction of offsets only, so the group's offsets reach A's end.  Failures follow the
transactional producer's rules (:mod:`clients.workload.transactional`): a commit that
times out is retried, any other failure aborts (outcome ``abort``; ``unknown`` when the
commit failed and the abort too) and a session that cannot go on is replaced: one whose
abort fails (a fenced producer, librdkafka's fatal errors) or whose rewind fails.

The transform :func:`transform` is deterministic: B's value is
``mkp1|<A partition>|<A offset>|`` + A's value, so each committed A record has exactly
one expected B value; ``minikafka verify`` checks B (read_committed) against f(A)
(:mod:`clients.spark.verify.pipeline`).  Every transaction's end is an ``P`` line of the
ledger (:mod:`clients.workload.ledger`): worker, session, txn, B, records, outcome.

:func:`run_pipeline` runs the workers until told the producers are done, then until the
group has consumed A to its end: every partition's committed offset at A's last stable
offset once that equals the high watermark (the markers are written), or every worker
idle (polling, and no records for ``idle_s``: a worker stuck in a call is not idle) and
no committed record between a partition's committed offset and that end (librdkafka may
leave a partition's position before its trailing markers; a group that is rebalancing
leaves every worker idle too, so idleness alone proves nothing), at most
``drain_timeout_s``.  The run's summary says which of the two ended it (:class:`Drain`).

Costs: per A record one send; per transaction 3-4 coordinator round trips and a
buffered ledger line.  Thread safety: one thread per worker, sharing only the ledger
(locked) and ``tally`` (locked by the caller).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clients.consumer.consumer import Consumer
from clients.protocol.errors import MiniKafkaError, RequestTimedOutError
from clients.protocol.topics import TopicPartition
from clients.workload.ledger import LedgerWriter
from clients.workload.pipeline_session import MinikafkaSession, PipelineSession

Tally = Callable[[str, str], None]  # ("txn", "pipeline_<event>"), as the producers'
TRANSFORM_MAGIC = b"mkp1"
OPEN_DEADLINE_S = 180.0
COMMIT_RETRIES = 3
LIVE_S = 1.0


def transform(partition: int, offset: int, value: bytes | None) -> bytes:
    """f: the B value of the A record at (partition, offset)."""
    return b"%s|%d|%d|%s" % (TRANSFORM_MAGIC, partition, offset, value or b"")


def tag(worker: int, session: int, txn: int) -> bytes:
    return f"w{worker}-s{session}-t{txn}".encode()


@dataclass
class PipelinePlan:
    bootstrap: str
    source_topic: str
    sink_topic: str
    run_id: str
    workers: int = 2
    max_poll_records: int = 50
    abort_ratio: float = 0.1
    kill_ratio: float = 0.02
    transaction_timeout_ms: int = 20_000
    client: str = "minikafka"  # or "confluent"
    producer_options: dict[str, Any] = field(default_factory=dict)
    idle_s: float = 5.0
    drain_timeout_s: float = 180.0

    @property
    def group_id(self) -> str:
        return f"pipeline-{self.run_id}"

    def transactional_id(self, worker: int) -> str:
        return f"pipeline-{self.run_id}-{worker}"


@dataclass
class _WorkerState:
    last_records_at: float = field(default_factory=time.monotonic)
    last_poll_at: float = field(default_factory=time.monotonic)

    def idle(self, now: float, idle_s: float) -> bool:
        """Polling (the last poll under a second ago) and no records for ``idle_s``: a
        worker stuck in a call (a session being replaced, a commit retried) is not idle."""
        return now - self.last_poll_at < LIVE_S and now - self.last_records_at > idle_s


def open_session(plan: PipelinePlan, worker: int, stop: threading.Event) -> PipelineSession:
    """A new session of ``worker`` (retried through faults until :data:`OPEN_DEADLINE_S`)."""
    deadline = time.monotonic() + OPEN_DEADLINE_S
    while True:
        try:
            if plan.client == "confluent":
                from clients.workload.confluent_pipeline import ConfluentSession

                return ConfluentSession(plan.bootstrap, plan.source_topic, plan.group_id,
                                        plan.transactional_id(worker),
                                        plan.transaction_timeout_ms, plan.producer_options)
            return MinikafkaSession(plan.bootstrap, plan.source_topic, plan.group_id,
                                    plan.transactional_id(worker), plan.transaction_timeout_ms,
                                    plan.producer_options)
        except MiniKafkaError:
            if time.monotonic() > deadline or stop.is_set():
                raise
            stop.wait(0.5)


def run_worker(plan: PipelinePlan, worker: int, ledger: LedgerWriter, tally: Tally,
               stop: threading.Event, state: _WorkerState | None = None) -> None:
    """One worker's loop (see the module docstring) until ``stop``."""
    state = state or _WorkerState()
    rng = random.Random(f"{plan.run_id}-pipeline-{worker}")
    session_no, txn = 0, 0
    session = open_session(plan, worker, stop)
    committed: dict[int, int] = {}
    try:
        while not stop.is_set():
            try:
                records = session.poll(0.2, plan.max_poll_records)
                positions = session.positions()
                state.last_poll_at = time.monotonic()
            except MiniKafkaError:
                session, session_no, txn = _replace(plan, worker, session, session_no, stop)
                committed = {}
                continue
            if records:
                state.last_records_at = time.monotonic()
            elif positions == committed or not positions:
                continue
            name, outcome = tag(worker, session_no, txn), "abort"
            kill = bool(records) and rng.random() < plan.kill_ratio
            abort = rng.random() < plan.abort_ratio
            try:
                session.begin()
                for r in records:
                    session.send(plan.sink_topic, r.key, transform(r.partition, r.offset,
                                                                   r.value), name)
                session.send_offsets(positions)
                if kill:
                    old = session
                    tally("txn", "pipeline_kill")
                    old.crash()
                    session = open_session(plan, worker, stop)
                    outcome = _zombie_commit(old, tally)
                    ledger.pipeline(worker, session_no, txn, plan.sink_topic, len(records),
                                    outcome)
                    tally("txn", f"pipeline_{outcome}")
                    session_no, txn, committed = session_no + 1, 0, {}
                    continue
                if abort:
                    session.abort()
                    session.rewind()
                else:
                    outcome = "unknown"
                    _commit(session)
                    outcome, committed = "commit", positions
            except MiniKafkaError:
                aborted = _try(session.abort)
                # never asked to commit: aborted now or by the next session's init
                unknown = outcome == "unknown" and not aborted
                outcome = "unknown" if unknown else "abort"
                ledger.pipeline(worker, session_no, txn, plan.sink_topic, len(records), outcome)
                tally("txn", f"pipeline_{outcome}")
                # a producer that cannot abort (fenced, or a fatal error) cannot go on:
                # the next session's init_transactions aborts what it left open
                if not aborted or outcome != "abort" or not _try(session.rewind):
                    session, session_no, txn = _replace(plan, worker, session, session_no,
                                                        stop)
                else:
                    txn += 1
                committed = {}
                continue
            ledger.pipeline(worker, session_no, txn, plan.sink_topic, len(records), outcome)
            tally("txn", f"pipeline_{outcome}")
            txn += 1
    finally:
        session.close()


def _replace(plan: PipelinePlan, worker: int, session: PipelineSession, session_no: int,
             stop: threading.Event) -> tuple[PipelineSession, int, int]:
    session.close()
    return open_session(plan, worker, stop), session_no + 1, 0


def _commit(session: PipelineSession) -> None:
    for attempt in range(COMMIT_RETRIES + 1):
        try:
            session.commit()
            return
        except RequestTimedOutError:
            if attempt == COMMIT_RETRIES:
                raise


def _try(call: Callable[[], None]) -> bool:
    try:
        call()
        return True
    except MiniKafkaError:
        return False


def _zombie_commit(old: PipelineSession, tally: Tally) -> str:
    """The killed session's producer, fenced by its successor, tries to commit."""
    try:
        old.commit()
        tally("txn", "pipeline_fenced_commit_succeeded")
        outcome = "commit"
    except MiniKafkaError:
        tally("txn", "pipeline_fenced_commit_refused")
        outcome = "abort"
    old.close()
    return outcome


def run_pipeline(plan: PipelinePlan, ledger: LedgerWriter, tally: Tally,
                 producers_done: threading.Event, stop: threading.Event,
                 errors: list[BaseException]) -> Drain:
    """Run the workers until A is consumed to its end after ``producers_done`` (see the
    module docstring) or ``stop``; whether the group caught up, and how.  A worker's
    exception is appended to ``errors``."""
    done = threading.Event()
    states = [_WorkerState() for _ in range(plan.workers)]

    def guarded(worker: int) -> None:
        try:
            run_worker(plan, worker, ledger, tally, done, states[worker])
        except BaseException as exc:
            errors.append(exc)
            done.set()

    threads = [threading.Thread(target=guarded, args=(w,), name=f"pipeline-worker-{w}",
                                daemon=True) for w in range(plan.workers)]
    for t in threads:
        t.start()
    drain = Drain(False, "stopped before the producers were done")
    try:
        while not (producers_done.wait(0.2) or stop.is_set() or done.is_set()):
            pass
        started = time.monotonic()
        deadline = started + plan.drain_timeout_s
        drain = Drain(False, f"not caught up within {plan.drain_timeout_s:g} s")
        with Consumer(plan.bootstrap, group_id=plan.group_id, isolation_level="read_committed",
                      enable_auto_commit=False, client_id=f"{plan.group_id}-drain") as probe, \
                Consumer(plan.bootstrap, enable_auto_commit=False,
                         client_id=f"{plan.group_id}-high-watermarks") as plain, \
                Consumer(plan.bootstrap, isolation_level="read_committed",
                         enable_auto_commit=False, client_id=f"{plan.group_id}-scan") as scan:
            while not (stop.is_set() or done.is_set()) and time.monotonic() < deadline:
                now = time.monotonic()
                idle = all(s.idle(now, plan.idle_s) for s in states)
                how = _caught_up(probe, plain, scan, plan.source_topic, strict=not idle)
                if how is not None:
                    drain = Drain(True, f"{how} after {time.monotonic() - started:.1f} s")
                    break
                stop.wait(0.5)
    finally:
        done.set()
        for t in threads:
            t.join(60)
    return drain


@dataclass(frozen=True)
class Drain:
    """How the drain ended: whether the group consumed A to its end, and how it knows."""

    caught_up: bool
    how: str


def _caught_up(probe: Consumer, plain: Consumer, scan: Consumer, topic: str, *,
               strict: bool) -> str | None:
    """How we know the group consumed A to its end, or None: A's markers are all written
    (LSO = high watermark) and the group's committed offsets are at that end on every
    partition; or, with every worker idle (not ``strict``), a partition whose committed
    offset stops short of the end (librdkafka may leave its position before trailing
    markers) has no committed record left between the two (read by ``scan``)."""
    try:
        tps = [TopicPartition(topic, p) for p in sorted(probe.partitions_for(topic) or [])]
        stable = probe.end_offsets(tps)
        if not tps or stable != plain.end_offsets(tps):
            return None
        committed = probe.committed(tps)
        offsets = {tp: (c.offset if (c := committed.get(tp)) is not None else None)
                   for tp in tps}
        short = {tp: o for tp, o in offsets.items() if o is None or o < stable[tp]}
        if not short:
            return "every partition's committed offset at its end"
        if strict or any(not _nothing_left(scan, tp, start, stable[tp])
                         for tp, start in short.items()):
            return None
    except MiniKafkaError:
        return None
    return "workers idle, no committed record past the group's offsets (" + ", ".join(
        f"{tp.partition}: {start} of {stable[tp]}" for tp, start in short.items()) + ")"


def _nothing_left(scan: Consumer, tp: TopicPartition, start: int | None, end: int,
                  timeout_s: float = 10.0) -> bool:
    """No record ``scan`` (read_committed) returns in [start, end) of ``tp`` (from the log
    start when ``start`` is None): aborted data and markers only."""
    scan.assign([tp])
    if start is None:
        scan.seek_to_beginning([tp])
    else:
        scan.seek(tp, start)
    deadline = time.monotonic() + timeout_s
    while scan.position(tp) < end:
        if time.monotonic() > deadline:
            return False
        if any(r.offset < end for records in scan.poll(200).values() for r in records):
            return False
    return True
