"""confluent-kafka (librdkafka) against our Python client, on the same cluster, one run.

A local cluster (``broker.cluster``: a controller and 3 brokers, RF 3, min ISR 2) serves
both clients; every measurement uses a fresh one-partition topic, acks=all and an
idempotent producer, values of 100 B and 1 KiB with distinct keys (``k<i>``).  Figures
(each the median of ``--runs``; every key of the JSON names the API it timed):

=====================================  =================================================
figure                                 API timed (records/s unless noted)
=====================================  =================================================
``confluent_produce``                  ``Producer.produce()`` per record + ``poll(0)``,
                                       then ``flush()`` (librdkafka batches in C)
``ours_send``                          our ``Producer.send()`` per record, then
                                       ``flush()``
``ours_send_bulk``                     our ``Producer.send_bulk(values, keys=...)``
``confluent_poll``                     ``Consumer.poll()`` per message
``confluent_consume``                  ``Consumer.consume(num_messages=1000)``
``ours_poll``                          our ``Consumer.poll()``, iterating every record
``ours_poll_bulk``                     our ``Consumer.poll_bulk()`` (numpy columns)
``latency_ms_one_in_flight_100B``      p50 / p99 of one record in flight: confluent
                                       ``produce()`` + ``flush()``; ours
                                       ``send().result()``; the floor of the broker's
                                       process hand-offs: ours with acks=1 to an RF 1
                                       topic (client -> network -> main -> network ->
                                       client); and where an acks=all send spends its
                                       time (:mod:`bench.cluster_hops`, needs
                                       CAP_NET_RAW)
``ours_send_bulk_request_chain_ms``    1 KiB: where one bulk Produce request's round
                                       trip goes (``cluster_hops.chain_stages``, one
                                       traced ``send_bulk``)
=====================================  =================================================

Writes ``bench/results/kafka_clients.json`` (with the machine's load average: this
2-core machine is shared, so absolute figures move between runs; ratios come from the
same run) and ``kafka_clients.png`` if matplotlib is installed.  Every process started
here is stopped by PID in ``finally`` (:func:`bench.cluster_lifecycle.running_cluster`).
Run: ``python -m bench.kafka_clients [--quick]``.

Costs: O(runs x records) in this process; the values are generated once per size.
Not thread-safe; one run at a time.
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

from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition

from bench.cluster_hops import trace_hops, trace_request_chain
from bench.cluster_lifecycle import create_topics, leaders, machine_info, running_cluster
from broker.cluster.state import ClusterState
from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = (100, 1024)


class Topics:
    """Fresh one-partition topics (RF 3, min ISR 2), one per measurement."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.n = 0

    def fresh(self, what: str) -> str:
        self.n += 1
        name = f"{what}-{self.n}"
        create_topics(self.state, [name])
        with Producer(self.state.bootstrap, acks="all") as p:  # leaders elected, ISR full
            p.send(name, b"warm", key=b"warm").result(60)
        return name


def records(n: int, size: int) -> tuple[list[bytes], list[bytes]]:
    blob = os.urandom(size)
    keys = [b"k%d" % i for i in range(n)]
    return keys, [k + blob[len(k):] for k in keys]


def confluent_produce(bootstrap: str, topic: str, keys: list[bytes], values: list[bytes]) -> float:
    producer = CKProducer({"bootstrap.servers": bootstrap, "acks": "all",
                           "enable.idempotence": True, "linger.ms": 5})
    start = time.perf_counter()
    for key, value in zip(keys, values, strict=True):
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:  # the local queue is full: serve delivery reports
                producer.poll(0.001)
        producer.poll(0)
    left = producer.flush(120)
    seconds = time.perf_counter() - start
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return len(keys) / seconds


def ours_send(bootstrap: str, topic: str, keys: list[bytes], values: list[bytes]) -> float:
    with Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=5) as producer:
        start = time.perf_counter()
        last = None
        for key, value in zip(keys, values, strict=True):
            last = producer.send(topic, value, key=key)
        producer.flush()
        seconds = time.perf_counter() - start
        assert last is not None
        last.result(60)
    return len(keys) / seconds


def ours_send_bulk(bootstrap: str, topic: str, keys: list[bytes], values: list[bytes]) -> float:
    with Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                  batch_size=256 * 1024) as producer:
        start = time.perf_counter()
        future = producer.send_bulk(topic, values, partition=0, keys=keys)
        producer.flush()
        seconds = time.perf_counter() - start
        future.result(60)
    return len(keys) / seconds


def confluent_read(bootstrap: str, topic: str, n: int, batch: bool) -> float:
    consumer = CKConsumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}",
                           "enable.auto.commit": False})
    try:
        consumer.assign([CKTopicPartition(topic, 0, 1)])  # after the warm-up record
        got = 0
        start = time.perf_counter()
        while got < n:
            if batch:
                for m in consumer.consume(1000, 1.0):
                    if m.error() is None:
                        got += 1
            else:
                one = consumer.poll(1.0)
                if one is not None and one.error() is None:
                    got += 1
        return n / (time.perf_counter() - start)
    finally:
        consumer.close()


def ours_read(bootstrap: str, topic: str, n: int, bulk: bool) -> float:
    with Consumer(bootstrap_servers=bootstrap, max_partition_fetch_bytes=4 << 20) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 1)
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


def latency_ms(bootstrap: str, topic: str, count: int, ours: bool,
               acks: int | str = "all") -> tuple[float, float]:
    samples: list[float] = []
    value = os.urandom(100)
    if ours:
        with Producer(bootstrap, acks=acks, linger_ms=0) as producer:
            for i in range(count):
                start = time.perf_counter()
                producer.send(topic, value, key=b"k%d" % i).result(30)
                samples.append((time.perf_counter() - start) * 1000)
    else:
        ck = CKProducer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0})
        for i in range(count):
            start = time.perf_counter()
            ck.produce(topic, value, b"k%d" % i)
            if ck.flush(30):
                raise RuntimeError("a record was not delivered in 30 s")
            samples.append((time.perf_counter() - start) * 1000)
    samples = samples[min(50, count // 10):]  # connections and metadata warmed up
    q = statistics.quantiles(samples, n=100)
    return statistics.median(samples), q[98]


def median_of(runs: int, measure: Callable[[], float]) -> dict[str, Any]:
    values = [measure() for _ in range(runs)]
    return {"median": statistics.median(values), "runs": values}


def bench_size(bootstrap: str, topics: Topics, size: int, n: int, runs: int) -> dict[str, Any]:
    keys, values = records(n, size)
    fig: dict[str, Any] = {"records": n, "value_bytes": size}
    filled: list[str] = []

    def produced(measure: Callable[[str, list[bytes], list[bytes]], float], tag: str
                 ) -> Callable[[], float]:
        def run() -> float:
            topic = topics.fresh(f"{tag}-{size}")
            rate = measure(topic, keys, values)
            filled.append(topic)
            return rate
        return run

    fig["confluent_produce"] = median_of(runs, produced(
        lambda t, k, v: confluent_produce(bootstrap, t, k, v), "ck"))
    fig["ours_send"] = median_of(runs, produced(
        lambda t, k, v: ours_send(bootstrap, t, k, v), "send"))
    fig["ours_send_bulk"] = median_of(runs, produced(
        lambda t, k, v: ours_send_bulk(bootstrap, t, k, v), "bulk"))
    source = filled[-1]  # n records written by send_bulk, after the warm-up one
    if size >= 1024:  # where a bulk request's round trip goes
        traced = topics.fresh(f"bulk-chain-{size}")
        fig["ours_send_bulk_request_chain_ms"] = trace_request_chain(
            topics.state, leaders(topics.state)[traced],
            lambda: ours_send_bulk(bootstrap, traced, keys, values))
    fig["confluent_poll"] = median_of(runs, lambda: confluent_read(bootstrap, source, n,
                                                                   batch=False))
    fig["confluent_consume"] = median_of(runs, lambda: confluent_read(bootstrap, source, n,
                                                                      batch=True))
    fig["ours_poll"] = median_of(runs, lambda: ours_read(bootstrap, source, n, bulk=False))
    fig["ours_poll_bulk"] = median_of(runs, lambda: ours_read(bootstrap, source, n, bulk=True))
    for name in ("send", "send_bulk", "poll", "poll_bulk"):
        base = "confluent_produce" if "send" in name else "confluent_consume"
        fig[f"ratio_ours_{name}_to_{base}"] = (fig[f"ours_{name}"]["median"]
                                               / fig[base]["median"])
    fig["mb_per_s"] = {k: fig[k]["median"] * size / 1e6 for k in (
        "confluent_produce", "ours_send", "ours_send_bulk", "confluent_consume",
        "ours_poll", "ours_poll_bulk")}
    return fig


def bench(state: ClusterState, counts: dict[int, int], runs: int,
          latency_count: int) -> dict[str, Any]:
    bootstrap = state.bootstrap
    topics = Topics(state)
    out: dict[str, Any] = {f"{size}B": bench_size(bootstrap, topics, size, counts[size], runs)
                           for size in SIZES}
    lat_topic = topics.fresh("latency")
    with Admin(bootstrap) as admin:
        admin.create_topics([NewTopic("latency-rf1", 1, 1, {})])
    with Producer(bootstrap, acks=1) as warm:
        warm.send("latency-rf1", b"warm").result(60)
    out["latency_ms_one_in_flight_100B"] = {
        "confluent_produce_flush": latency_ms(bootstrap, lat_topic, latency_count, ours=False),
        "ours_send_result": latency_ms(bootstrap, lat_topic, latency_count, ours=True),
        "ours_send_result_rf1_acks1": latency_ms(bootstrap, "latency-rf1", latency_count,
                                                 ours=True, acks=1),
        "ours_acks_all_stages_ms": trace_hops(state, lat_topic, leaders(state)[lat_topic],
                                              latency_count),
        "note": "(p50, p99); acks=all unless named; confluent: produce() then flush() per "
                "record; rf1_acks1: an RF 1 topic, acks=1 (no replication: the floor of "
                "the broker's process hand-offs); stages: medians of bench.cluster_hops "
                "(None without CAP_NET_RAW)",
    }
    return out


def plot(path: Path, figures: dict[str, Any]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = ["confluent_produce", "ours_send", "ours_send_bulk", "confluent_poll",
             "confluent_consume", "ours_poll", "ours_poll_bulk"]
    fig, axes = plt.subplots(1, len(SIZES), figsize=(11, 4))
    for ax, size in zip(axes, SIZES, strict=True):
        data = figures[f"{size}B"]
        ax.bar(range(len(names)), [data[n]["median"] / 1000 for n in names],
               color=["tab:orange" if n.startswith("confluent") else "tab:blue" for n in names])
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("thousand records/s (median)")
        ax.set_title(f"{size} B values, acks=all, idempotent, RF 3")
    fig.suptitle("confluent-kafka (orange) vs our client (blue), same cluster, same run")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def parse_sizes(description: str) -> tuple[argparse.Namespace, dict[int, int]]:
    """The command line shared with :mod:`bench.peers`: runs, records per value size,
    latency samples, ``--quick``; returns the arguments and the record count per size."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records-100", type=int, default=200_000)
    parser.add_argument("--records-1k", type=int, default=50_000)
    parser.add_argument("--latency-count", type=int, default=1000)
    parser.add_argument("--quick", action="store_true",
                        help="1 run of 20k / 5k records, 200 latency samples (smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.records_100, args.records_1k, args.latency_count = 1, 20_000, 5_000, 200
    return args, {100: args.records_100, 1024: args.records_1k}


def main() -> int:
    args, counts = parse_sizes(__doc__.split("\n")[0])
    machine_before = machine_info()
    with tempfile.TemporaryDirectory(prefix="bench-kafka-clients-") as root, \
            running_cluster(root, 3) as state:
        figures = bench(state, counts, args.runs, args.latency_count)
    RESULTS.mkdir(exist_ok=True)
    png = plot(RESULTS / "kafka_clients.png", figures)
    result = {"bench": "kafka_clients", "runs": args.runs, "quick": args.quick,
              "cluster": "controller + 3 brokers (1 network process each), RF 3, "
                         "min ISR 2, one partition per measurement",
              "machine_before": machine_before, "machine_after": machine_info(),
              "note": "shared 2-core machine; ratios are from the same run",
              "figures": figures, "png": "kafka_clients.png" if png else None}
    (RESULTS / "kafka_clients.json").write_text(json.dumps(result, indent=2) + "\n")
    for size in SIZES:
        f = figures[f"{size}B"]
        print(f"{size} B: " + ", ".join(
            f"{k} {f[k]['median'] / 1000:.0f}k/s" for k in (
                "confluent_produce", "ours_send", "ours_send_bulk", "confluent_poll",
                "confluent_consume", "ours_poll", "ours_poll_bulk")))
    print("latency p50/p99 ms:", figures["latency_ms_one_in_flight_100B"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
