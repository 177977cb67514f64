"""What a transaction costs on a 3-broker cluster, producer and consumer side (issue 32).

One run against a real local cluster (``broker.cluster``: controller + 3 brokers,
topics with replication factor 3, min ISR 2; every producer acks=all, client defaults
unless named: ``linger_ms`` 5, ``batch_size`` 16384, 100 B values, no keys):

* **commit**: ``Producer(transactional_id=...)``: ``begin_transaction()``, N x
  ``send(topic, value, partition=...)``, ``commit_transaction()`` returns, back to
  back (``TRANSACTIONS_PER_RUN`` of them per run); N = 1, 10, 100 and 1,000 records
  per transaction, into one partition and round-robin into the 3
  partitions of a second topic (3 partitions added to each transaction).  Latency
  p50/p99 of that whole step over every transaction of every run; throughput = records
  committed / wall time of a run (median of ``--runs``);
* **librdkafka commit** (if confluent-kafka is installed; ``--no-librdkafka`` skips it):
  ``confluent_kafka.Producer({"transactional.id": ..., "linger.ms": 5})``:
  ``begin_transaction()``, N x ``produce(topic, value, partition=...)``,
  ``commit_transaction()`` (which flushes), the same N and transaction counts, one
  partition;
* **idempotent** (the same run, the same cluster): ``Producer()`` (idempotent by
  default) ``send()`` per record then ``flush()`` (records/s, median of ``--runs``), and
  ``send().result()`` one in flight with ``linger_ms=0`` (p50/p99): what a transaction
  is compared with;
* **consume**: ``Consumer(isolation_level=...)``, ``assign`` one partition, from the
  earliest offset until the position reaches the log end: ``poll()`` iterating every
  record (default ``max_poll_records`` 500) and ``poll_bulk()`` (numpy columns), at
  read_committed and read_uncommitted, over (a) a partition written in committed
  transactions of 1,000 records and (b) one where every other transaction of 1,000 was
  aborted (read_committed returns half; read_uncommitted returns all).  Records/s =
  records returned / seconds (median of ``--runs``), log offsets/s = the offsets read
  past (aborted records and markers included) / seconds; the clock starts once the
  consumer is connected to the leader (``end_offsets``), so a run of ~0.1 s times the
  fetches and decoding, not the connection set-up.  Each ratio pairs two figures of
  this run.

Writes ``bench/results/transactions.json`` and ``transactions.png`` (if matplotlib is
installed).  Every process started here is stopped by PID in ``finally``
(:func:`bench.cluster_lifecycle.running_cluster`).  Run: ``python -m bench.transactions``
(about 2-3 minutes on 2 cores); ``--quick`` for a smoke run (well under a minute).

Costs: O(runs x records) in this process (producer and consumer are ours, in-process);
the brokers do the rest.  Not thread-safe; one run at a time.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cluster_lifecycle import TOPIC_CONFIG, machine_info, running_cluster
from bench.plotting import figure, save
from broker.cluster.state import ClusterState
from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.types import NewTopic, TopicPartition

RESULTS = Path(__file__).resolve().parent / "results"
VALUE = b"v" * 100
SIZES = (1, 10, 100, 1000)
TRANSACTIONS_PER_RUN = {1: 100, 10: 100, 100: 40, 1000: 10}  # --quick: a tenth (>= 3)
CONSUME_TXN_RECORDS = 1000


def _quantiles(samples: list[float]) -> tuple[float, float]:
    if len(samples) < 2:
        return samples[0], samples[0]
    qs = statistics.quantiles(samples, n=100, method="inclusive")
    return qs[49], qs[98]


def _create(state: ClusterState, topics: dict[str, int]) -> None:
    with Admin(state.bootstrap) as admin:
        admin.create_topics([NewTopic(name, parts, 3, dict(TOPIC_CONFIG))
                             for name, parts in topics.items()])


# -- producer side --------------------------------------------------------------------------


def commit_run(producer: Producer, topic: str, partitions: int, size: int,
               transactions: int) -> tuple[float, list[float]]:
    """Seconds for ``transactions`` transactions of ``size`` records, and each one's ms."""
    samples = []
    start = time.perf_counter()
    for _ in range(transactions):
        t0 = time.perf_counter()
        producer.begin_transaction()
        for i in range(size):
            producer.send(topic, VALUE, partition=i % partitions)
        producer.commit_transaction()
        samples.append((time.perf_counter() - t0) * 1000)
    return time.perf_counter() - start, samples


def commit_series(bootstrap: str, topic: str, partitions: int, runs: int,
                  transactions: Callable[[int], int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with Producer(bootstrap, transactional_id=f"bench-{topic}") as producer:
        producer.init_transactions()
        commit_run(producer, topic, partitions, 10, 5)  # warm-up: coordinator, metadata
        for size in SIZES:
            seconds, samples = [], []
            for _ in range(runs):
                s, ms = commit_run(producer, topic, partitions, size, transactions(size))
                seconds.append(s)
                samples.extend(ms)
            p50, p99 = _quantiles(samples)
            rate = statistics.median(transactions(size) * size / s for s in seconds)
            out[str(size)] = {"transactions_per_run": transactions(size),
                              "commit_p50_ms": p50, "commit_p99_ms": p99,
                              "records_per_s": rate,
                              "transactions_per_s": rate / size}
    return out


def librdkafka_commit_series(bootstrap: str, topic: str, runs: int,
                             transactions: Callable[[int], int]) -> dict[str, Any]:
    """:func:`commit_series` with confluent-kafka's transactional producer."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                         "transactional.id": f"bench-rdkafka-{topic}",
                                         "linger.ms": 5})

    def run(size: int, count: int) -> tuple[float, list[float]]:
        samples = []
        start = time.perf_counter()
        for _ in range(count):
            t0 = time.perf_counter()
            producer.begin_transaction()
            for _ in range(size):
                producer.produce(topic, VALUE, partition=0)
            producer.commit_transaction(60)
            samples.append((time.perf_counter() - t0) * 1000)
        return time.perf_counter() - start, samples

    out: dict[str, Any] = {}
    producer.init_transactions(60)
    run(10, 5)  # warm-up
    for size in SIZES:
        seconds, samples = [], []
        for _ in range(runs):
            s, ms = run(size, transactions(size))
            seconds.append(s)
            samples.extend(ms)
        p50, p99 = _quantiles(samples)
        rate = statistics.median(transactions(size) * size / s for s in seconds)
        out[str(size)] = {"transactions_per_run": transactions(size), "commit_p50_ms": p50,
                          "commit_p99_ms": p99, "records_per_s": rate,
                          "transactions_per_s": rate / size}
    producer.flush(10)
    return out


def idempotent_rate(bootstrap: str, topic: str, records: int, runs: int) -> float:
    rates = []
    with Producer(bootstrap) as producer:
        producer.send(topic, b"warm", partition=0).result(60)
        for _ in range(runs):
            t0 = time.perf_counter()
            for _ in range(records):
                producer.send(topic, VALUE, partition=0)
            producer.flush()
            rates.append(records / (time.perf_counter() - t0))
    return statistics.median(rates)


def idempotent_latency_ms(bootstrap: str, topic: str, count: int) -> list[float]:
    samples = []
    with Producer(bootstrap, linger_ms=0) as producer:
        for _ in range(20):
            producer.send(topic, b"warm", partition=0).result(60)
        for _ in range(count):
            t0 = time.perf_counter()
            producer.send(topic, VALUE, partition=0).result(60)
            samples.append((time.perf_counter() - t0) * 1000)
    return samples


# -- consumer side --------------------------------------------------------------------------


def write_transactions(bootstrap: str, topic: str, transactions: int,
                       abort_every_other: bool) -> int:
    """``transactions`` of ``CONSUME_TXN_RECORDS`` records; the number committed."""
    committed = 0
    with Producer(bootstrap, transactional_id=f"bench-fill-{topic}") as producer:
        producer.init_transactions()
        for t in range(transactions):
            producer.begin_transaction()
            producer.send_bulk(topic, [VALUE] * CONSUME_TXN_RECORDS, partition=0)
            if abort_every_other and t % 2:
                producer.flush()  # the aborted records are in the log, as when a txn fails
                producer.abort_transaction()
            else:
                producer.commit_transaction()
                committed += CONSUME_TXN_RECORDS
    return committed


def consume_run(bootstrap: str, topic: str, isolation_level: str, bulk: bool,
                end_offset: int) -> tuple[int, float]:
    """(records returned, seconds) reading the partition from 0 to ``end_offset``."""
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap, auto_offset_reset="earliest",
                  isolation_level=isolation_level) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        consumer.end_offsets([tp])  # connected to the leader, metadata known: not timed
        count = 0
        deadline = time.monotonic() + 120
        t0 = time.perf_counter()
        while consumer.position(tp) < end_offset:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} {isolation_level}: stuck at "
                                   f"{consumer.position(tp)} < {end_offset}")
            if bulk:
                count += sum(len(b) for b in consumer.poll_bulk(100).values())
            else:
                for records in consumer.poll(100).values():
                    for record in records:
                        count += record.value is not None
        return count, time.perf_counter() - t0


def consume_series(bootstrap: str, topics: dict[str, str], runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for data, topic in topics.items():
        with Consumer(bootstrap) as probe:
            end = probe.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
        for api in ("poll", "poll_bulk"):
            for level in ("read_committed", "read_uncommitted"):
                results = [consume_run(bootstrap, topic, level, api == "poll_bulk", end)
                           for _ in range(runs)]
                counts = {c for c, _ in results}
                out[f"{data}/{api}/{level}"] = {
                    "records_returned": sorted(counts), "log_end_offset": end,
                    "records_per_s": statistics.median(c / s for c, s in results),
                    "log_offsets_per_s": statistics.median(end / s for _, s in results),
                    "seconds": statistics.median(s for _, s in results)}
    return out


# -- report ---------------------------------------------------------------------------------


def plot(path: Path, commit: dict[str, dict[str, Any]], idem_p50: float,
         consume: dict[str, Any]) -> bool:
    drawn = figure(2, (12, 4.5))
    if drawn is None:
        return False
    plt, fig, (left, right) = drawn
    for name, series in commit.items():
        sizes = [int(k) for k in series]
        left.plot(sizes, [s["commit_p50_ms"] for s in series.values()], "o-",
                  label=f"commit p50, {name}")
        left.plot(sizes, [s["commit_p99_ms"] for s in series.values()], "x--",
                  label=f"commit p99, {name}")
    left.axhline(idem_p50, color="grey", ls=":", label="idempotent send().result() p50")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("records per transaction (100 B, send() each)")
    left.set_ylabel("begin -> commit_transaction() returns, ms")
    left.set_title("transactional producers (ours, librdkafka), RF 3, acks=all")
    left.legend(fontsize=7)
    names = list(consume)
    right.barh(range(len(names)), [consume[n]["records_per_s"] for n in names])
    right.set_yticks(range(len(names)), [n.replace("/", "  ") for n in names], fontsize=7)
    right.set_xlabel("records returned per s (median run)")
    right.set_title("Consumer(isolation_level) over transactional data")
    return save(plt, fig, path)


def _librdkafka_version() -> str | None:
    if importlib.util.find_spec("confluent_kafka") is None:
        return None
    import confluent_kafka

    return f"confluent-kafka {importlib.metadata.version('confluent-kafka')}, librdkafka " \
        f"{confluent_kafka.libversion()[0]} (linger.ms 5, defaults otherwise)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idempotent-records", type=int, default=20_000)
    parser.add_argument("--latency-samples", type=int, default=1000)
    parser.add_argument("--consume-transactions", type=int, default=100,
                        help=f"transactions of {CONSUME_TXN_RECORDS} records per topic")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-librdkafka", action="store_true",
                        help="skip the confluent-kafka commit series")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.idempotent_records = 1, 2000
        args.latency_samples, args.consume_transactions = 100, 6

    def transactions(size: int) -> int:
        n = TRANSACTIONS_PER_RUN[size]
        return max(3, n // 10) if args.quick else n

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="minikafka-bench-txn-") as root, \
            running_cluster(root) as state:
        _create(state, {"txn-p1": 1, "txn-p3": 3, "txn-rdkafka": 1, "idem": 1, "lat": 1,
                        "consume-committed": 1, "consume-half-aborted": 1})
        commit = {name: commit_series(state.bootstrap, topic, parts, args.runs, transactions)
                  for name, topic, parts in (("1 partition", "txn-p1", 1),
                                             ("3 partitions", "txn-p3", 3))}
        if not args.no_librdkafka and importlib.util.find_spec("confluent_kafka"):
            commit["librdkafka, 1 partition"] = librdkafka_commit_series(
                state.bootstrap, "txn-rdkafka", args.runs, transactions)
        idem_rate = idempotent_rate(state.bootstrap, "idem", args.idempotent_records,
                                    args.runs)
        idem_p50, idem_p99 = _quantiles(idempotent_latency_ms(state.bootstrap, "lat",
                                                              args.latency_samples))
        committed = {
            "committed": write_transactions(state.bootstrap, "consume-committed",
                                            args.consume_transactions, False),
            "half_aborted": write_transactions(state.bootstrap, "consume-half-aborted",
                                               args.consume_transactions, True)}
        consume = consume_series(state.bootstrap, {"committed": "consume-committed",
                                                   "half_aborted": "consume-half-aborted"},
                                 args.runs)
    wall = time.perf_counter() - started

    figures: dict[str, float] = {"idempotent_send_records_per_s": idem_rate,
                                 "idempotent_send_result_p50_ms": idem_p50,
                                 "idempotent_send_result_p99_ms": idem_p99}
    for name, series in commit.items():
        key = name.replace(" ", "").replace(",", "_")
        for size, s in series.items():
            figures[f"commit_{key}_{size}_p50_ms"] = s["commit_p50_ms"]
            figures[f"commit_{key}_{size}_p99_ms"] = s["commit_p99_ms"]
            figures[f"commit_{key}_{size}_records_per_s"] = s["records_per_s"]
            figures[f"commit_{key}_{size}_over_idempotent_rate"] = (
                s["records_per_s"] / idem_rate)
        figures[f"commit_{key}_1_p50_over_send_result_p50"] = (
            series["1"]["commit_p50_ms"] / idem_p50)
    for data in ("committed", "half_aborted"):
        for api in ("poll", "poll_bulk"):
            rc = consume[f"{data}/{api}/read_committed"]["records_per_s"]
            ru = consume[f"{data}/{api}/read_uncommitted"]["records_per_s"]
            figures[f"consume_{data}_{api}_read_committed_records_per_s"] = rc
            figures[f"consume_{data}_{api}_read_uncommitted_records_per_s"] = ru
            figures[f"consume_{data}_{api}_committed_over_uncommitted"] = rc / ru

    print(f"{'commit (begin, N x send, commit)':<36}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'records/s':>11}{'x idem':>8}")
    for name, series in commit.items():
        for size, s in series.items():
            print(f"{name + ', N=' + size:<36}{s['commit_p50_ms']:>9.2f}"
                  f"{s['commit_p99_ms']:>9.2f}{s['records_per_s']:>11,.0f}"
                  f"{s['records_per_s'] / idem_rate:>8.2f}")
    print(f"idempotent send() + flush: {idem_rate:,.0f} records/s; send().result() "
          f"linger_ms=0: p50 {idem_p50:.2f} ms p99 {idem_p99:.2f} ms")
    print(f"\n{'consume (records returned)':<44}{'records/s':>11}{'returned':>10}"
          f"{'offsets/s':>11}")
    for name, c in consume.items():
        print(f"{name:<44}{c['records_per_s']:>11,.0f}"
              f"{'/'.join(str(n) for n in c['records_returned']):>10}"
              f"{c['log_offsets_per_s']:>11,.0f}")
    for key, value in figures.items():
        if key.endswith("_over_uncommitted"):
            print(f"{key}: {value:.2f}")
    RESULTS.mkdir(exist_ok=True)
    png = plot(RESULTS / "transactions.png", commit, idem_p50, consume)
    (RESULTS / "transactions.json").write_text(json.dumps({
        "config": {**vars(args), "brokers": 3, "replication_factor": 3,
                   "topic_config": TOPIC_CONFIG, "acks": "all", "value_bytes": len(VALUE),
                   "records_per_transaction": list(SIZES),
                   "transactions_per_run": {str(n): transactions(n) for n in SIZES},
                   "consume_transaction_records": CONSUME_TXN_RECORDS,
                   "producer": "defaults (linger_ms 5, batch_size 16384) unless named",
                   "librdkafka": _librdkafka_version(),
                   "consumer": "defaults (max_poll_records 500, fetch_max_wait_ms 500)"},
        "machine": machine_info(), "wall_s": wall, "figures": figures,
        "commit": commit, "consume": consume, "committed_records": committed,
        "png": "transactions.png" if png else None}, indent=2) + "\n")
    print(f"\nwall {wall:.0f} s; wrote {RESULTS / 'transactions.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
