"""Bulk APIs against per-record ones with **default settings**, same cluster, same run.

The question (issue 30, item 10): with a ``Producer``/``Consumer`` built with nothing but
the bootstrap address (every other setting at its default), are ``send_bulk`` and
``poll_bulk`` at least as fast as ``send`` and ``poll``?  A local cluster
(``broker.cluster``: a controller and 3 brokers, RF 3, min ISR 2) serves every
measurement; each one writes a fresh topic.  Records have distinct keys (``k<i>``) and
values of 100 B and 1 KiB.

=====================  ==============================================================
figure                 API timed (records/s; the JSON also gives MB/s of values)
=====================  ==============================================================
``send``               ``Producer(bootstrap).send(topic, value, key=key)`` per record,
                       then ``flush()``
``send_bulk``          ``Producer(bootstrap).send_bulk(topic, values, keys=keys)`` in
                       calls of ``--chunk`` (2,000) records, then ``flush()``
``poll``               ``Consumer(bootstrap).poll(timeout_ms=1000)`` after ``assign``
                       of every partition, iterating every record
``poll_bulk``          ``Consumer(bootstrap).poll_bulk(timeout_ms=1000)``, counting rows
=====================  ==============================================================

Both reads read the topic ``send_bulk`` wrote (its batches are what a bulk writer
leaves on disk) and, for comparison, the topic ``send`` wrote.  Defaults of note:
``acks="all"``, idempotence on, ``batch_size`` 16 KiB (``batch_max_size`` 256 KiB),
``linger_ms`` 5, ``buffer_memory`` 32 MiB; consumer ``max_partition_fetch_bytes`` 1 MiB,
``fetch_max_bytes`` 50 MiB, ``max_poll_records`` 500.

Each figure is the median of ``--runs``; results in ``bench/results/bulk_defaults.json``
and ``.png``.  Run: ``python -m bench.bulk_defaults [--quick]``.  Every process started
here is stopped by PID (:func:`bench.cluster_lifecycle.running_cluster`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cluster_lifecycle import TOPIC_CONFIG, machine_info, running_cluster
from bench.plotting import figure, save
from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = (100, 1024)
NAMES = ("send", "send_bulk", "poll", "poll_bulk")


def make_records(n: int, size: int) -> tuple[list[bytes], list[bytes]]:
    blob = os.urandom(size)
    keys = [b"k%d" % i for i in range(n)]
    return keys, [k + blob[len(k):] for k in keys]


class Topics:
    def __init__(self, bootstrap: str, partitions: int, size: int) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.size = size
        self.n = 0

    def fresh(self, what: str) -> str:
        self.n += 1
        name = f"{what}-{self.size}B-{self.partitions}p-{self.n}"
        with Admin(self.bootstrap) as admin:
            admin.create_topics([NewTopic(name, self.partitions, 3, dict(TOPIC_CONFIG))])
        with Producer(self.bootstrap) as p:  # leaders elected, ISR full
            for i in range(self.partitions):
                p.send(name, b"warm", partition=i).result(60)
        return name


def send(bootstrap: str, topic: str, keys: list[bytes], values: list[bytes],
         chunk: int) -> float:
    with Producer(bootstrap) as producer:
        start = time.perf_counter()
        for key, value in zip(keys, values, strict=True):
            producer.send(topic, value, key=key)
        producer.flush()
        return len(keys) / (time.perf_counter() - start)


def send_bulk(bootstrap: str, topic: str, keys: list[bytes], values: list[bytes],
              chunk: int) -> float:
    with Producer(bootstrap) as producer:
        start = time.perf_counter()
        futures = [producer.send_bulk(topic, values[i : i + chunk], keys=keys[i : i + chunk])
                   for i in range(0, len(keys), chunk)]
        producer.flush()
        seconds = time.perf_counter() - start
        for f in futures:
            f.result(60)
        return len(keys) / seconds


def read(bootstrap: str, topic: str, partitions: int, n: int, bulk: bool) -> float:
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 1)  # after the warm-up record
        got = 0
        start = time.perf_counter()
        while got < n:
            if bulk:
                for columns in consumer.poll_bulk(timeout_ms=1000).values():
                    got += len(columns)
            else:
                for batch in consumer.poll(timeout_ms=1000).values():
                    for _record in batch:
                        got += 1
        return n / (time.perf_counter() - start)


def median_of(runs: int, measure: Callable[[], float]) -> dict[str, Any]:
    samples = [measure() for _ in range(runs)]
    return {"median": statistics.median(samples), "samples": samples}


def bench_size(bootstrap: str, partitions: int, size: int, n: int, runs: int,
               chunk: int) -> dict[str, Any]:
    keys, values = make_records(n, size)
    topics = Topics(bootstrap, partitions, size)
    written: dict[str, str] = {}

    def produced(api: Callable[..., float], name: str) -> Callable[[], float]:
        def run() -> float:
            topic = topics.fresh(name)
            written[name] = topic
            return api(bootstrap, topic, keys, values, chunk)
        return run

    fig: dict[str, Any] = {"records": n, "value_bytes": size, "partitions": partitions,
                           "send_bulk_call_records": chunk}
    # interleaved so that neither side gets the machine's quieter moments
    send_runs, bulk_runs = [], []
    for _ in range(runs):
        send_runs.append(produced(send, "send")())
        bulk_runs.append(produced(send_bulk, "bulk")())
    fig["send"] = {"median": statistics.median(send_runs), "samples": send_runs}
    fig["send_bulk"] = {"median": statistics.median(bulk_runs), "samples": bulk_runs}
    poll_runs, poll_bulk_runs = [], []
    for _ in range(runs):
        poll_runs.append(read(bootstrap, written["bulk"], partitions, n, bulk=False))
        poll_bulk_runs.append(read(bootstrap, written["bulk"], partitions, n, bulk=True))
    fig["poll"] = {"median": statistics.median(poll_runs), "samples": poll_runs,
                   "topic": "written by send_bulk"}
    fig["poll_bulk"] = {"median": statistics.median(poll_bulk_runs),
                        "samples": poll_bulk_runs, "topic": "written by send_bulk"}
    fig["poll_of_send_topic"] = median_of(
        runs, lambda: read(bootstrap, written["send"], partitions, n, bulk=False))
    fig["poll_bulk_of_send_topic"] = median_of(
        runs, lambda: read(bootstrap, written["send"], partitions, n, bulk=True))
    fig["mb_per_s"] = {k: fig[k]["median"] * size / 1e6 for k in NAMES}
    fig["bulk_over_per_record"] = {
        "send_bulk/send": fig["send_bulk"]["median"] / fig["send"]["median"],
        "poll_bulk/poll": fig["poll_bulk"]["median"] / fig["poll"]["median"]}
    return fig


def plot(path: Path, figures: dict[str, Any]) -> bool:
    drawn = figure(len(figures), figsize=(5 * len(figures), 4))
    if drawn is None:
        return False
    plt, fig, axes = drawn
    for ax, (label, data) in zip(axes, figures.items(), strict=True):
        ax.bar(range(len(NAMES)), [data["mb_per_s"][n] for n in NAMES],
               color=["tab:blue", "tab:orange", "tab:blue", "tab:orange"])
        ax.set_xticks(range(len(NAMES)), NAMES)
        ax.set_ylabel("MB/s of values (median)")
        ax.set_title(f"{label}: defaults, acks=all, RF 3")
    fig.suptitle("per-record (blue) vs bulk (orange) APIs with default settings, same run")
    return save(plt, fig, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records-100", type=int, default=200_000)
    parser.add_argument("--records-1k", type=int, default=200_000)
    parser.add_argument("--chunk", type=int, default=2_000)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--quick", action="store_true", help="1 run of 20k records")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.records_100, args.records_1k = 1, 20_000, 20_000
    counts = {100: args.records_100, 1024: args.records_1k}
    machine_before = machine_info()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-bulk-defaults-") as root, \
            running_cluster(root, 3) as state:
        for partitions in args.partitions:
            for size in SIZES:
                label = f"{size}B_{partitions}p"
                figures[label] = bench_size(state.bootstrap, partitions, size, counts[size],
                                            args.runs, args.chunk)
                f = figures[label]
                print(f"{label}: " + ", ".join(
                    f"{k} {f[k]['median'] / 1000:.0f}k/s ({f['mb_per_s'][k]:.0f} MB/s)"
                    for k in NAMES), flush=True)
    RESULTS.mkdir(exist_ok=True)
    png = plot(RESULTS / "bulk_defaults.png", figures)
    result = {"bench": "bulk_defaults", "runs": args.runs, "quick": args.quick,
              "cluster": "controller + 3 brokers, RF 3, min ISR 2",
              "settings": "Producer(bootstrap) and Consumer(bootstrap_servers=bootstrap): "
                          "every other setting at its default",
              "machine_before": machine_before, "machine_after": machine_info(),
              "figures": figures, "png": "bulk_defaults.png" if png else None}
    (RESULTS / "bulk_defaults.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
