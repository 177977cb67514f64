"""minikafka beside NATS JetStream and Redis Streams, in one run on this machine (issue 19).

Every system is started here and stopped by PID in ``finally``; each measurement uses a
fresh stream/topic of one partition, values of 100 B and 1 KiB with distinct keys:

* **minikafka**: a local cluster (controller + 3 brokers, RF 3, min ISR 2), acks=all,
  idempotent; our Python client (``Producer.send()`` per record then ``flush()``;
  ``send_bulk``; ``Consumer.poll()`` iterating records; ``poll_bulk``) and
  confluent-kafka on the same cluster (``produce()`` + ``poll(0)`` then ``flush()``;
  ``Consumer.consume(1000)``), the functions of :mod:`bench.kafka_clients`;
* **NATS JetStream** (Debian's ``nats-server``): 3 servers in one cluster, a stream with
  3 replicas and file storage; nats-py ``js.publish_async()`` per record then
  ``publish_async_completed()``; a pull consumer ``fetch(1000)`` (no acks);
* **Redis Streams** (Debian's ``redis-server``): one node, ``appendonly yes``,
  ``appendfsync everysec``; redis-py pipelined ``XADD`` (1,000 per round trip); ``XREAD
  COUNT 1000``.

Latency: p50 / p99 of one record in flight, 100 B: our ``send().result()``,
confluent ``produce()`` + ``flush()``, NATS ``await js.publish()``, Redis one ``XADD``;
for minikafka also the floor of its process hand-offs and the acks=all stages (see
:mod:`bench.kafka_clients`).  What fresh page-cache pages cost the 1 KiB rows
on this machine is :mod:`bench.page_cache`'s to measure (not run here: what the run
itself frees decides which pages its next writes get).
Figures are medians of ``--runs`` (records/s unless noted).  A system whose server or
Python client is not installed is skipped with a message naming the Debian or PyPI
package (``pip install -e '.[bench]'`` installs the Python clients).

Writes ``bench/results/peers.json`` and ``peers.png`` (if matplotlib is installed).
Run: ``python -m bench.peers [--quick]``.  Costs: a few minutes; one run at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import kafka_clients as kc
from bench.cluster_lifecycle import machine_info, running_cluster

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = (100, 1024)
READY_TIMEOUT_S = 30.0


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _median(runs: int, measure: Callable[[], float]) -> dict[str, Any]:
    values = [measure() for _ in range(runs)]
    return {"median": statistics.median(values), "runs": values}


def _latency(samples: list[float]) -> tuple[float, float]:
    samples = samples[min(50, len(samples) // 10):]  # connections warmed up
    return statistics.median(samples), statistics.quantiles(samples, n=100)[98]


@contextlib.contextmanager
def _processes(commands: list[list[str]], root: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, command in enumerate(commands):
            log = open(root / f"server-{i}.log", "wb")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL))
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


# -- NATS JetStream ----------------------------------------------------------------------


@contextlib.contextmanager
def nats_cluster(root: Path) -> Iterator[str]:
    client_ports, route_ports = _free_ports(3), _free_ports(3)
    routes = ",".join(f"nats://127.0.0.1:{p}" for p in route_ports)
    commands = [["nats-server", "-js", "-sd", str(root / f"js-{i}"), "-a", "127.0.0.1",
                 "-p", str(client_ports[i]), "-n", f"n{i}", "--cluster_name", "bench",
                 "--cluster", f"nats://127.0.0.1:{route_ports[i]}", "--routes", routes]
                for i in range(3)]
    with _processes(commands, root):
        yield ",".join(f"nats://127.0.0.1:{p}" for p in client_ports)


async def _nats_stream(servers: str, name: str) -> Any:
    import nats
    from nats.js.api import StorageType, StreamConfig

    nc = await nats.connect(servers.split(","))
    js = nc.jetstream()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:  # the JetStream meta leader needs a moment after start
        try:
            await js.add_stream(StreamConfig(name=name, subjects=[name], num_replicas=3,
                                             storage=StorageType.FILE))
            return nc, js
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _nats_measure(servers: str, name: str, values: list[bytes],
                        latency_count: int) -> dict[str, Any]:
    nc, js = await _nats_stream(servers, name)
    try:
        start = time.perf_counter()
        for value in values:
            await js.publish_async(name, value)
        await js.publish_async_completed()
        publish = len(values) / (time.perf_counter() - start)
        from nats.js.api import AckPolicy, ConsumerConfig

        sub = await js.pull_subscribe(name, durable=f"{name}-reader",
                                      config=ConsumerConfig(ack_policy=AckPolicy.NONE))
        got = 0
        start = time.perf_counter()
        while got < len(values):
            got += len(await sub.fetch(1000, timeout=10))
        fetch = got / (time.perf_counter() - start)
        samples = []
        for value in values[:latency_count]:
            t = time.perf_counter()
            await js.publish(name, value)
            samples.append((time.perf_counter() - t) * 1000)
        return {"publish_async": publish, "fetch_1000": fetch, "latency": _latency(samples)}
    finally:
        await nc.close()


# -- Redis Streams -----------------------------------------------------------------------


@contextlib.contextmanager
def redis_server(root: Path) -> Iterator[int]:
    (port,) = _free_ports(1)
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(root),
               "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]
    with _processes([command], root):
        import redis

        client = redis.Redis(port=port)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()
        yield port


def _redis_measure(port: int, name: str, keys: list[bytes], values: list[bytes],
                   latency_count: int) -> dict[str, Any]:
    import redis

    client = redis.Redis(port=port)
    try:
        start = time.perf_counter()
        for i in range(0, len(values), 1000):
            pipe = client.pipeline(transaction=False)
            for key, value in zip(keys[i:i + 1000], values[i:i + 1000], strict=True):
                pipe.xadd(name, {b"k": key, b"v": value})
            pipe.execute()
        xadd = len(values) / (time.perf_counter() - start)
        got, last = 0, b"0-0"
        start = time.perf_counter()
        while got < len(values):
            answer: Any = client.xread({name: last}, count=1000)
            for _stream, entries in answer:
                got += len(entries)
                last = entries[-1][0]
        xread = got / (time.perf_counter() - start)
        samples = []
        for key, value in zip(keys[:latency_count], values[:latency_count], strict=True):
            t = time.perf_counter()
            client.xadd(f"{name}-lat", {b"k": key, b"v": value})
            samples.append((time.perf_counter() - t) * 1000)
        return {"xadd_pipelined": xadd, "xread_1000": xread, "latency": _latency(samples)}
    finally:
        client.close()


# -- the run -----------------------------------------------------------------------------


def bench_minikafka(counts: dict[int, int], runs: int, latency_count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-peers-mk-") as root, \
            running_cluster(root, 3) as state:
        return kc.bench(state, counts, runs, latency_count)


def _per_size(counts: dict[int, int], runs: int, figures: tuple[str, str],
              measure: Callable[[str, list[bytes], list[bytes]], dict[str, Any]]
              ) -> dict[str, Any]:
    """``measure(stream name, keys, values)`` ``runs`` times per value size, each on a
    fresh stream; the medians of ``figures`` and the last 100 B run's latency."""
    out: dict[str, Any] = {}
    n = 0
    for size in SIZES:
        keys, values = kc.records(counts[size], size)
        results = []
        for _ in range(runs):
            n += 1
            results.append(measure(f"s{n}", keys, values))
        out[f"{size}B"] = {k: _median_of(results, k) for k in figures}
        if size == 100:
            out["latency_ms_100B"] = results[-1]["latency"]
    return out


def bench_nats(counts: dict[int, int], runs: int, latency_count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-peers-nats-") as root, \
            nats_cluster(Path(root)) as servers:
        return _per_size(counts, runs, ("publish_async", "fetch_1000"),
                         lambda name, _keys, values: asyncio.run(
                             _nats_measure(servers, name, values, latency_count)))


def bench_redis(counts: dict[int, int], runs: int, latency_count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-peers-redis-") as root, \
            redis_server(Path(root)) as port:
        return _per_size(counts, runs, ("xadd_pipelined", "xread_1000"),
                         lambda name, keys, values: _redis_measure(port, name, keys, values,
                                                                   latency_count))


def _median_of(results: list[dict[str, Any]], key: str) -> dict[str, Any]:
    values = [r[key] for r in results]
    return {"median": statistics.median(values), "runs": values}


def plot(path: Path, figures: dict[str, Any]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [("minikafka send()", "minikafka", "ours_send"),
            ("minikafka send_bulk", "minikafka", "ours_send_bulk"),
            ("confluent produce()", "minikafka", "confluent_produce"),
            ("NATS publish_async", "nats", "publish_async"),
            ("Redis XADD pipelined", "redis", "xadd_pipelined"),
            ("minikafka poll()", "minikafka", "ours_poll"),
            ("minikafka poll_bulk", "minikafka", "ours_poll_bulk"),
            ("confluent consume(1000)", "minikafka", "confluent_consume"),
            ("NATS fetch(1000)", "nats", "fetch_1000"),
            ("Redis XREAD 1000", "redis", "xread_1000")]
    fig, axes = plt.subplots(1, len(SIZES), figsize=(12, 4.5))
    for ax, size in zip(axes, SIZES, strict=True):
        labels, heights = [], []
        for label, system, key in rows:
            data = figures.get(system, {}).get(f"{size}B", {}).get(key)
            if data is not None:
                labels.append(label)
                heights.append(data["median"] / 1000)
        ax.bar(range(len(labels)), heights,
               color=["tab:blue" if "minikafka" in x else "tab:orange" if "confluent" in x
                      else "tab:gray" for x in labels])
        ax.set_xticks(range(len(labels)), labels, rotation=40, ha="right", fontsize=7)
        ax.set_ylabel("thousand records/s (median)")
        ax.set_title(f"{size} B values (write left, read right)")
    fig.suptitle("minikafka RF 3 acks=all vs NATS JetStream R3 vs Redis (1 node), one run")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main() -> int:
    args, counts = kc.parse_sizes(__doc__.split("\n")[0])
    figures: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    machine_before = machine_info()
    figures["minikafka"] = bench_minikafka(counts, args.runs, args.latency_count)
    for system, binary, package, module, pypi, run in (
            ("nats", "nats-server", "nats-server", "nats", "nats-py", bench_nats),
            ("redis", "redis-server", "redis-server", "redis", "redis", bench_redis)):
        if shutil.which(binary) is None:
            skipped[system] = f"{binary} not installed (Debian package {package})"
        elif importlib.util.find_spec(module) is None:
            skipped[system] = f"Python module {module} not installed (PyPI package {pypi})"
        if system in skipped:
            print(f"skipping {system}: {skipped[system]}")
            continue
        figures[system] = run(counts, args.runs, args.latency_count)
    RESULTS.mkdir(exist_ok=True)
    png = plot(RESULTS / "peers.png", figures)
    result = {"bench": "peers", "runs": args.runs, "quick": args.quick, "counts": counts,
              "setups": {
                  "minikafka": "controller + 3 brokers, RF 3, min ISR 2, acks=all, "
                               "idempotent, one partition",
                  "nats": "3 nats-server (JetStream), stream R3, file storage, nats-py",
                  "redis": "1 redis-server, appendonly yes, appendfsync everysec, redis-py"},
              "skipped": skipped, "machine_before": machine_before,
              "machine_after": machine_info(), "figures": figures,
              "png": "peers.png" if png else None}
    (RESULTS / "peers.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in figures.items()}, indent=1)[:4000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
