"""The verification workload: N producers write numbered messages and log every ack.

Each logical producer ``p`` (0..N-1) is a thread with its own :class:`Producer`
(acks=all; idempotent unless ``idempotence=False``) and sends sequences 0, 1, 2, ...
of its share of ``messages``.  A message's value and key::

    value  = b"mk1|" run_id b"|" producer b"|" sequence b"|" + b"." padding to value_bytes
    key    = b"p<producer>-k<i>", i drawn (seeded by run id and producer) in
             [0, keys_per_producer): each key belongs to one producer, so per-key order
             is that producer's sequence order

Every acknowledgment is appended to the ledger (:mod:`clients.workload.ledger`) from the
producer's callback; before a producer sends sequences below ``b`` it announces ``b``
with a durable ``S`` line (every ``announce_every`` sequences).  A send that fails
(after the producer's own retries) counts as *failed* and stays out of the ledger: if
it reached the log anyway the verifier counts it as unacknowledged-but-present.

``rate`` (messages/s, over all producers; 0 = as fast as the producers go) paces the
sends, so a fault schedule can be spread over a known duration.  Faults (see
:mod:`clients.workload.faults`) run on their own thread while the producers send; when
every message is acked or failed, events not yet due are skipped and the cluster is
healed.  Progress (:class:`WorkloadProgress`): a one-line bar redrawn in place on a
TTY, else a plain line per 10%.

``transactional``: each producer sends in transactions instead, committed or aborted at
random, restarted (fenced) now and then; see :mod:`clients.workload.transactional`.
``pipeline_workers`` > 0 (transactional only): meanwhile that many consume-transform-
produce workers copy f(topic) to ``pipeline_topic`` exactly once, until they have
consumed the topic to its end (:mod:`clients.workload.pipeline`); faults keep running
until then.

Design choices: threads, not processes (each Producer's I/O runs on its own sender
thread, and a few thousand messages/s is what verification needs); each producer's
``buffer_memory`` is bounded (``buffer_memory_per_producer``); the topic is created if
absent (replication factor 3, min ISR 2 by default) and an existing topic is used as is.
Costs: O(messages) sends and ledger lines; memory O(producers x buffer) plus counters.
Thread safety: :func:`run_workload` is called from one thread and owns every thread it
starts; it returns only when they have all finished.
"""

from __future__ import annotations

import functools
import random
import re
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

from clients.producer.future import RecordFuture
from clients.protocol.errors import MiniKafkaError
from clients.workload.faults import AppliedFault, FaultEvent, FaultInjector
from clients.workload.ledger import LedgerWriter
from clients.workload.pipeline import PipelinePlan, run_pipeline
from clients.workload.transactional import CLIENTS, TxnPlan, produce_transactional

VALUE_MAGIC = "mk1"
# What verify parses (Spark regexp_extract): run id, producer, sequence.
VALUE_PATTERN = r"^mk1\|([A-Za-z0-9_-]{1,64})\|([0-9]{1,9})\|([0-9]{1,18})\|"
_VALUE = re.compile(VALUE_PATTERN.encode())


def encode_value(run_id: str, producer: int, sequence: int, value_bytes: int = 0) -> bytes:
    head = f"{VALUE_MAGIC}|{run_id}|{producer}|{sequence}|".encode()
    return head + b"." * max(0, value_bytes - len(head))


def decode_value(value: bytes | None) -> tuple[str, int, int] | None:
    """(run id, producer, sequence), or None when the value is not a workload message."""
    match = _VALUE.match(value or b"")
    if match is None:
        return None
    return match.group(1).decode(), int(match.group(2)), int(match.group(3))


def key_for(producer: int, index: int) -> str:
    return f"p{producer}-k{index}"


def new_run_id() -> str:
    return secrets.token_hex(4)


@dataclass
class WorkloadConfig:
    bootstrap: str
    topic: str
    ledger_path: str
    run_id: str = field(default_factory=new_run_id)
    messages: int = 10_000
    producers: int = 4
    keys_per_producer: int = 3
    rate: float = 0.0
    value_bytes: int = 100
    partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2
    idempotence: bool = True
    drop_response_ratio: float = 0.0
    drop_seed: int = 7
    data_dir: str | None = None
    faults: list[FaultEvent] = field(default_factory=list)
    announce_every: int = 500
    buffer_memory_per_producer: int = 4 * 1024 * 1024
    delivery_timeout_ms: int = 120_000
    transactional: bool = False  # clients.workload.transactional
    max_txn_records: int = 20
    abort_ratio: float = 0.2
    restart_ratio: float = 0.02
    transaction_timeout_ms: int = 20_000
    client: str = "minikafka"  # transactional: or "confluent", "kafka-python" (CLIENTS)
    pipeline_workers: int = 0  # clients.workload.pipeline (0: no pipeline)
    pipeline_topic: str = ""  # default: "<topic>-out"
    pipeline_abort_ratio: float = 0.1
    pipeline_kill_ratio: float = 0.02

    @property
    def pipeline_sink(self) -> str:
        return self.pipeline_topic or f"{self.topic}-out"

    def check(self) -> None:
        if self.messages < 1 or self.producers < 1 or self.keys_per_producer < 1:
            raise ValueError("messages, producers and keys per producer must be >= 1")
        if self.producers > 256 or self.keys_per_producer > 1000:
            raise ValueError("at most 256 producers and 1000 keys per producer")
        if self.rate < 0 or not 0 <= self.drop_response_ratio < 1:
            raise ValueError("rate must be >= 0 and drop_response_ratio in [0, 1)")
        if not 0 <= self.value_bytes <= 1_000_000 or self.announce_every < 1:
            raise ValueError("value_bytes must be in [0, 1e6] and announce_every >= 1")
        if self.faults and not self.data_dir:
            raise ValueError("fault injection needs the cluster's --data-dir")
        if self.transactional and not self.idempotence:
            raise ValueError("a transactional producer is idempotent (drop --no-idempotence)")
        if self.client not in CLIENTS or (self.client != "minikafka" and not self.transactional):
            raise ValueError(f"client must be one of {', '.join(CLIENTS)}; the others drive "
                             "the transactional mode only")
        if self.pipeline_workers and self.client == "kafka-python":
            raise ValueError("the pipeline runs with the minikafka or confluent client")
        if self.max_txn_records < 1 or not 0 <= self.abort_ratio <= 1 \
                or not 0 <= self.restart_ratio <= 1:
            raise ValueError("max_txn_records must be >= 1, abort and restart ratios in [0, 1]")
        if self.pipeline_workers and not self.transactional:
            raise ValueError("the pipeline reads a transactional run (add --transactional)")
        if not 0 <= self.pipeline_workers <= 32 or self.pipeline_sink == self.topic \
                or not 0 <= self.pipeline_abort_ratio <= 1 \
                or not 0 <= self.pipeline_kill_ratio <= 1:
            raise ValueError("pipeline workers must be in [0, 32], its topic not the input "
                             "topic, its abort and kill ratios in [0, 1]")


@dataclass
class WorkloadResult:
    run_id: str
    topic: str
    ledger_path: str
    sent: int = 0
    acked: int = 0
    failed: int = 0
    elapsed_s: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)
    faults: list[AppliedFault] = field(default_factory=list)
    healed: list[str] = field(default_factory=list)
    transactions: Counter[str] = field(default_factory=Counter)  # outcome / event -> count
    pipeline_topic: str = ""
    pipeline_caught_up: bool | None = None  # None: no pipeline
    pipeline_drain: str = ""  # how the pipeline's drain ended

    def summary_lines(self) -> list[str]:
        rate = self.acked / self.elapsed_s if self.elapsed_s > 0 else 0.0
        lines = [f"run {self.run_id}: sent {self.sent}, acked {self.acked}, failed "
                 f"{self.failed} in {self.elapsed_s:.1f} s ({rate:.0f} acks/s)"]
        lines += [f"  failed with {name}: {n}" for name, n in self.errors.most_common()]
        own = {k: n for k, n in self.transactions.items() if not k.startswith("pipeline_")}
        if own:
            lines.append("  transactions: " + ", ".join(
                f"{name} {n}" for name, n in sorted(own.items())))
        if self.pipeline_caught_up is not None:
            lines.append(f"  pipeline to {self.pipeline_topic!r} "
                         f"({'consumed to the end' if self.pipeline_caught_up else 'NOT caught up'}"
                         "): " + ", ".join(f"{k[9:]} {n}" for k, n in sorted(
                             self.transactions.items()) if k.startswith("pipeline_")))
            lines.append(f"  pipeline drain: {self.pipeline_drain}")
        for f in self.faults:
            when = "" if f.ran_at_ms < 0 else f" at {f.ran_at_ms / 1000:.1f} s"
            lines.append(f"  fault {f.event.describe()}{when}: {f.outcome}")
        lines += [f"  healed: {h}" for h in self.healed]
        lines.append(f"  ledger: {self.ledger_path}")
        return lines


class _Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent = self.acked = self.failed = 0
        self.errors: Counter[str] = Counter()
        self.transactions: Counter[str] = Counter()

    def tally(self, event: str, detail: str) -> None:
        """One record sent / acked / failed (detail: why), or a transaction event."""
        with self.lock:
            if event == "sent":
                self.sent += 1
            elif event == "acked":
                self.acked += 1
            elif event == "failed":
                self.failed += 1
                self.errors[detail] += 1
            else:
                self.transactions[detail] += 1

    def snapshot(self) -> tuple[int, int, int]:
        with self.lock:
            return self.sent, self.acked, self.failed


class WorkloadProgress:
    """The workload's sent/acked/failed progress on stdout (or ``out``).

    A bar on a TTY (redrawn in place), plain lines per 10% otherwise; ``log`` prints a
    message (a fault) between them.  Thread-safe (one lock): the run loop updates it
    while the fault thread logs.
    """

    def __init__(self, total: int, out: TextIO | None = None) -> None:
        self.total = total
        self.out = out or sys.stdout
        self.tty = self.out.isatty()
        self._lock = threading.Lock()
        self._last_decile = -1
        self._drawn = False

    def log(self, message: str) -> None:
        with self._lock:
            if self._drawn:
                self.out.write("\r\033[K")
                self._drawn = False
            self.out.write(message + "\n")
            self.out.flush()

    def update(self, sent: int, acked: int, failed: int, elapsed_s: float) -> None:
        done = acked + failed
        fraction = done / self.total if self.total else 1.0
        text = (f"sent {sent}/{self.total}  acked {acked}  failed {failed}  "
                f"{elapsed_s:5.1f} s")
        with self._lock:
            if self.tty:
                filled = int(fraction * 30)
                self.out.write(f"\r\033[K[{'#' * filled}{'-' * (30 - filled)}] "
                               f"{fraction:4.0%}  {text}")
                self._drawn = True
            elif int(fraction * 10) > self._last_decile:
                self._last_decile = int(fraction * 10)
                self.out.write(f"progress {fraction:4.0%}: {text}\n")
            self.out.flush()

    def finish(self) -> None:
        with self._lock:
            if self._drawn:
                self.out.write("\n")
                self._drawn = False
            self.out.flush()


def ensure_topic(config: WorkloadConfig, log: Callable[[str], None],
                 timeout_s: float = 60.0, topic: str | None = None) -> None:
    """Create the topic (or ``topic``, with the same settings) if absent, then wait until
    every partition has a leader."""
    from clients.admin import Admin
    from clients.protocol.errors import ErrorCode
    from clients.types import NewTopic

    if topic is not None:
        config = replace(config, topic=topic)
    with Admin(config.bootstrap) as admin:
        configs = {"min_insync_replicas": str(config.min_insync_replicas)}
        result = admin.create_topics([NewTopic(config.topic, config.partitions,
                                               config.replication_factor, configs)],
                                     raise_on_error=False)[config.topic]
        if result is None:
            log(f"created topic {config.topic!r}: {config.partitions} partitions, replication "
                f"factor {config.replication_factor}, min ISR {config.min_insync_replicas}")
        elif result.code == ErrorCode.TOPIC_ALREADY_EXISTS:
            log(f"using the existing topic {config.topic!r}")
        else:
            raise result
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                parts = admin.describe_topics([config.topic])[config.topic].partitions
                if parts and all(p.leader >= 0 for p in parts):
                    return
            except MiniKafkaError:
                pass
            if time.monotonic() > deadline:
                raise MiniKafkaError(f"{config.topic}: partitions without a leader after "
                                     f"{timeout_s:.0f} s")
            time.sleep(0.1)


def producer_options(config: WorkloadConfig, producer: int) -> dict[str, Any]:
    options: dict[str, Any] = {
        "acks": "all", "linger_ms": 5, "retry_backoff_ms": 100, "request_timeout_ms": 10_000,
        "delivery_timeout_ms": config.delivery_timeout_ms,
        "buffer_memory": config.buffer_memory_per_producer,
        "client_id": f"workload-{config.run_id}-{producer}",
    }
    if not config.idempotence:
        options["enable_idempotence"] = False
    if config.drop_response_ratio > 0:
        options["debug_drop_response_ratio"] = config.drop_response_ratio
        options["debug_drop_seed"] = config.drop_seed + producer
    return options


def _share(config: WorkloadConfig, producer: int) -> int:
    base, extra = divmod(config.messages, config.producers)
    return base + (1 if producer < extra else 0)


def _txn_plan(config: WorkloadConfig, producer: int, start: float) -> TxnPlan:
    keys = random.Random(f"{config.run_id}-{producer}")

    def message(sequence: int) -> tuple[str, bytes]:
        return (key_for(producer, keys.randrange(config.keys_per_producer)),
                encode_value(config.run_id, producer, sequence, config.value_bytes))

    return TxnPlan(config.bootstrap, config.topic, config.run_id, producer,
                   _share(config, producer), producer_options(config, producer), message,
                   config.announce_every, config.max_txn_records, config.abort_ratio,
                   config.restart_ratio, config.transaction_timeout_ms,
                   config.producers / config.rate if config.rate > 0 else 0.0, start,
                   config.client)


def _produce(config: WorkloadConfig, producer: int, ledger: LedgerWriter, counters: _Counters,
             start: float, stop: threading.Event) -> None:
    from clients.producer.producer import Producer

    if config.transactional:
        produce_transactional(_txn_plan(config, producer, start), ledger, counters.tally, stop)
        return
    count = _share(config, producer)
    rng = random.Random(f"{config.run_id}-{producer}")
    interval_s = config.producers / config.rate if config.rate > 0 else 0.0

    def on_done(sequence: int, key: str, future: RecordFuture) -> None:
        error = future.exception()
        try:
            if error is None:
                meta = future.result()
                ledger.ack(producer, sequence, key, meta.topic, meta.partition, meta.offset)
        except Exception as exc:  # the ack happened; the ledger could not take it
            error = exc
        with counters.lock:
            if error is None:
                counters.acked += 1
            else:
                counters.failed += 1
                counters.errors[type(error).__name__ + (
                    f" {error.code.name}" if isinstance(error, MiniKafkaError) else "")] += 1

    with Producer(config.bootstrap, **producer_options(config, producer)) as client:
        for sequence in range(count):
            if stop.is_set():
                break
            if sequence % config.announce_every == 0:
                ledger.sent(producer, min(count, sequence + config.announce_every))
            if interval_s:
                delay = start + sequence * interval_s - time.monotonic()
                if delay > 0 and stop.wait(delay):
                    break
            key = key_for(producer, rng.randrange(config.keys_per_producer))
            value = encode_value(config.run_id, producer, sequence, config.value_bytes)
            try:
                future = client.send(config.topic, value, key=key.encode())
            except MiniKafkaError as exc:
                with counters.lock:
                    counters.sent += 1
                    counters.failed += 1
                    counters.errors[f"send {type(exc).__name__}"] += 1
                continue
            with counters.lock:
                counters.sent += 1
            future.add_done_callback(functools.partial(on_done, sequence, key))
        client.flush()


def _pipeline_thread(config: WorkloadConfig, ledger: LedgerWriter, counters: _Counters,
                     producers_done: threading.Event, stop: threading.Event,
                     errors: list[BaseException],
                     result: WorkloadResult) -> threading.Thread | None:
    """The pipeline's driver thread (not started), or None without a pipeline."""
    if not config.pipeline_workers:
        return None
    plan = PipelinePlan(
        config.bootstrap, config.topic, config.pipeline_sink, config.run_id,
        config.pipeline_workers, abort_ratio=config.pipeline_abort_ratio,
        kill_ratio=config.pipeline_kill_ratio,
        transaction_timeout_ms=config.transaction_timeout_ms, client=config.client,
        producer_options={k: v for k, v in producer_options(config, 0).items()
                          if k not in ("client_id", "debug_drop_response_ratio",
                                       "debug_drop_seed")})
    result.pipeline_topic = plan.sink_topic

    def drive() -> None:
        try:
            drain = run_pipeline(plan, ledger, counters.tally, producers_done, stop, errors)
            result.pipeline_caught_up, result.pipeline_drain = drain.caught_up, drain.how
        except BaseException as exc:
            errors.append(exc)
            result.pipeline_caught_up = False

    return threading.Thread(target=drive, name="workload-pipeline", daemon=True)


def run_workload(config: WorkloadConfig, out: TextIO | None = None) -> WorkloadResult:
    """Run the whole workload (topic, producers, faults, heal); see the module docstring."""
    config.check()
    progress = WorkloadProgress(config.messages, out)
    ensure_topic(config, progress.log)
    if config.pipeline_workers:
        ensure_topic(config, progress.log, topic=config.pipeline_sink)
    counters = _Counters()
    stop = threading.Event()
    thread_errors: list[BaseException] = []
    result = WorkloadResult(config.run_id, config.topic, config.ledger_path)
    with LedgerWriter(config.ledger_path, config.run_id, config.topic) as ledger:
        injector = (FaultInjector(config.data_dir, config.topic, config.faults,
                                  log=progress.log)
                    if config.faults and config.data_dir else None)
        start = time.monotonic()

        def guarded(producer: int) -> None:
            try:
                _produce(config, producer, ledger, counters, start, stop)
            except BaseException as exc:
                thread_errors.append(exc)
                stop.set()

        threads = [threading.Thread(target=guarded, args=(p,), name=f"workload-producer-{p}",
                                    daemon=True) for p in range(config.producers)]
        producers_done = threading.Event()
        pipeline = _pipeline_thread(config, ledger, counters, producers_done, stop,
                                    thread_errors, result)
        try:
            if injector is not None:
                injector.start()
            for t in [*threads, *([pipeline] if pipeline else [])]:
                t.start()
            while any(t.is_alive() for t in threads):
                progress.update(*counters.snapshot(), time.monotonic() - start)
                for t in threads:
                    t.join(0.25 / len(threads))
            producers_done.set()
            if pipeline is not None:
                progress.log("producers done; the pipeline consumes to the end of "
                             f"{config.topic!r}")
                pipeline.join()
        except KeyboardInterrupt:
            stop.set()
            for t in [*threads, *([pipeline] if pipeline else [])]:
                t.join()
            raise
        finally:
            if injector is not None:
                injector.stop()
                result.faults = list(injector.applied)
                result.healed = injector.heal()
            progress.update(*counters.snapshot(), time.monotonic() - start)
            progress.finish()
        result.elapsed_s = time.monotonic() - start
    result.sent, result.acked, result.failed = counters.snapshot()
    result.errors = counters.errors
    result.transactions = counters.transactions
    if thread_errors:
        raise thread_errors[0]
    return result
