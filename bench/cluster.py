"""A 3-broker cluster (RF=3, acks=all, min ISR 2), one producer process: issue 7.

Measured in one run against a real local cluster (``broker.cluster``: one controller and
three brokers, each broker a main process plus its network process):

- produce records/s and MB/s at 100 B and 1 KiB with the bulk API (``minikafka bench
  produce --acks all`` in its own process), median of ``--runs``, each run on a fresh
  single-partition topic; the same at acks=1 on the same cluster gives the ratio that
  prices replication;
- CPU seconds of every process for each run: the producer (``getrusage`` of the reaped
  child) and, through psutil ``cpu_times`` before/after, each broker's main process and
  its network process(es), split by role (leader / followers of the run's partition)
  and the controller.  ``cpu_s / wall_s`` near 1.0 marks a process that is CPU-bound
  (each is single-threaded where it matters); per-record microseconds make the cost
  of each stage comparable;
- produce latency p50/p99 with one request in flight (``Producer(acks="all",
  linger_ms=0).send(...).result()`` in a loop), next to acks=1 on the same partition
  and acks=1 on a replication-factor-1 topic (no follower traffic at all);
- where that latency goes: per-stage medians from loopback packet timestamps
  (:mod:`bench.cluster_hops`; needs CAP_NET_RAW, skipped otherwise);
- the broker-side round trip of one ~0.93 MB Produce request from a plain socket, at
  acks=all and acks=1: the producer keeps one request per partition in flight, so
  ``records per request / round trip`` is the ceiling of a one-partition producer.

Writes ``bench/results/cluster.json`` (and ``cluster.png`` if matplotlib is
installed).  Every process started here is stopped by PID in ``finally``.
Run: ``python -m bench.cluster``.

Costs: the bench itself is O(runs x records) in the producer child; this process only
samples ``/proc`` (O(processes)) around each run.  Not thread-safe; one run at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench.cluster_hops import STAGES, trace_hops
from bench.cluster_lifecycle import (
    TOPIC_CONFIG,
    create_topics,
    leaders,
    machine_info,
    running_cluster,
)
from broker.cluster.state import ClusterState
from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response, encode_request_bytes
from clients.protocol.framing import read_frame
from clients.records.record import build_batch
from clients.types import NewTopic

RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = {"produce_100b_records_per_s": 420_000, "produce_1024b_mb_per_s": 200.0,
           "produce_p50_ms": 1.0}


# -- CPU accounting -------------------------------------------------------------------------


def process_cpu(state: ClusterState) -> dict[str, float]:
    """CPU seconds (user+system) per process: ``<node>/main``, ``<node>/network``, ..."""
    out: dict[str, float] = {}
    groups = [(name, c.pid) for name, c in state.controllers.items()] + [
        (k, b.pid) for k, b in state.brokers.items()]
    for name, pid in groups:
        try:
            proc = psutil.Process(pid)
            t = proc.cpu_times()
            out[f"{name}/main"] = t.user + t.system
            net = 0.0
            for child in proc.children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    ct = child.cpu_times()
                    net += ct.user + ct.system
            out[f"{name}/network"] = net
        except psutil.NoSuchProcess:
            continue
    return out


def _busy_s() -> float:
    """Machine-wide busy CPU seconds (all cores, everything but idle and iowait)."""
    t = psutil.cpu_times()._asdict()
    return sum(v for k, v in t.items() if k not in ("idle", "iowait", "guest", "guest_nice"))


def _read_line(proc: subprocess.Popen[bytes], timeout_s: float, what: str) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else b""
    if not line:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        tail = " | ".join(err.decode(errors="replace").strip().splitlines()[-5:])
        raise RuntimeError(f"producer child: no {what} within {timeout_s:.0f} s: {tail}")
    return line


def produce_run(state: ClusterState, topic: str, records: int, size: int,
                acks: str) -> dict[str, Any]:
    """One producer child (``--child``); throughput plus CPU seconds per process.

    The child connects and warms up, says ``ready``; CPU of every cluster process is
    sampled, the child is told ``go``, produces, and reports its own wall time and
    CPU (``getrusage`` of itself) for the produce window only; then the cluster is
    sampled again.  The window the brokers are sampled over is therefore the produce
    window plus two pipe round trips.
    """
    cmd = [sys.executable, "-m", "bench.cluster", "--child", state.bootstrap, topic,
           str(records), str(size), acks]
    leader = str(leaders(state)[topic])
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        _read_line(proc, 60, "ready")
        before, machine_before = process_cpu(state), _busy_s()
        started = time.perf_counter()
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        child = json.loads(_read_line(proc, 600, "result"))
        wall = time.perf_counter() - started
        after, machine_after = process_cpu(state), _busy_s()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    delta = {k: after[k] - before.get(k, 0.0) for k in after}

    def followers(kind: str) -> float:
        return sum(v for k, v in delta.items()
                   if k.endswith(kind) and k.split("/")[0] not in (leader, "controller"))

    cpu = {"producer": child["cpu_s"],
           "leader_main": delta.get(f"{leader}/main", 0.0),
           "leader_network": delta.get(f"{leader}/network", 0.0),
           "followers_main": followers("/main"),
           "followers_network": followers("/network"),
           "controller": delta.get("controller/main", 0.0)}
    busy = machine_after - machine_before
    cpu["other_processes"] = max(0.0, busy - sum(cpu.values()))  # not ours: contention
    seconds = child["seconds"]
    return {"records_per_s": records / seconds, "mb_per_s": records * size / seconds / 1e6,
            "produce_s": seconds, "wall_s": wall, "leader": int(leader), "cpu_s": cpu,
            "machine_busy_cores": busy / wall,
            "cpu_per_wall": {k: v / wall for k, v in cpu.items()},
            "cpu_us_per_record": {k: v / records * 1e6 for k, v in cpu.items()}}


def child_produce(bootstrap: str, topic: str, records: int, size: int, acks: str) -> int:
    """The producer child: same bulk path and batch sizes as ``minikafka bench produce``."""
    batch_records = max(100, 256 * 1024 // (size + 16))
    value = b"x" * size
    with Producer(bootstrap, acks=acks if acks == "all" else int(acks),
                  batch_size=max(16384, batch_records * (size + 16))) as producer:
        producer.send(topic, b"warm", partition=0).result(60)  # metadata + connection
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            return 1
        cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        futures, sent = [], 0
        while sent < records:
            n = min(batch_records, records - sent)
            futures.append(producer.send_bulk(topic, [value] * n, partition=0))
            sent += n
        producer.flush()
        for future in futures:
            future.result()
        seconds = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    print(json.dumps({"seconds": seconds, "cpu_s": cpu}), flush=True)
    return 0


# -- latency --------------------------------------------------------------------------------


def latency_ms(bootstrap: str, topic: str, count: int, acks: int | str) -> list[float]:
    samples = []
    with Producer(bootstrap, acks=acks, linger_ms=0) as producer:
        for _ in range(20):  # warm-up: connections, metadata
            producer.send(topic, b"warm", partition=0).result(30)
        value = b"x" * 100
        for _ in range(count):
            t0 = time.perf_counter()
            producer.send(topic, value, partition=0).result(30)
            samples.append((time.perf_counter() - t0) * 1000)
    return samples


RTT_PRODUCE_VERSION = 7  # the broker serves Produce v3-v12
REQUEST_BYTES = 930_000  # one batch, one Produce request just under max_request_size 1 MiB


def request_records(size: int) -> int:
    return REQUEST_BYTES // (size + 16)


def request_rtt_ms(port: int, topic: str, count: int, size: int, acks: int) -> list[float]:
    """Round trip of one near-max-size Produce request (one prebuilt batch of ~0.93 MB).

    Sent from a plain blocking socket to the leader (no client-side encoding in the
    timing): the broker side of one request.  The producer keeps one request in flight
    per partition (at most ``max_request_size`` = 1 MiB), so a single-partition producer
    cannot beat ``request_records(size) / rtt`` records/s: this is that ceiling.
    """
    now_ms = int(time.time() * 1000)
    batch = build_batch([(None, b"x" * size, now_ms, ())] * request_records(size))
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 30_000, "topics": [
        {"name": topic, "partitions": [{"index": 0, "records": batch}]}]}
    samples = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(count + 1):
            request = encode_request_bytes(ApiKey.PRODUCE, RTT_PRODUCE_VERSION, i,
                                           "bench-rtt", body)
            t0 = time.perf_counter()
            sock.sendall(request)
            frame = read_frame(sock)
            if frame is None:
                raise ConnectionError("leader closed the connection")
            partition = decode_response(frame, ApiKey.PRODUCE, RTT_PRODUCE_VERSION).body[
                "responses"][0][
                "partition_responses"][0]
            if partition["error_code"] != 0:
                raise RuntimeError(f"produce failed: {partition}")
            if i:  # the first one warms up
                samples.append((time.perf_counter() - t0) * 1000)
    return samples


def _quantiles(samples: list[float]) -> tuple[float, float]:
    qs = statistics.quantiles(samples, n=100)
    return qs[49], qs[98]


# -- report ---------------------------------------------------------------------------------


def _median_cpu(runs: list[dict[str, Any]], field: str) -> dict[str, float]:
    return {k: statistics.median(r[field][k] for r in runs) for k in runs[0][field]}


def plot(path: Path, series: dict[str, dict[str, Any]]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    roles = list(next(iter(series.values()))["cpu_per_wall"])
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(series)
    for i, (name, s) in enumerate(series.items()):
        ax.bar([j + i * width for j in range(len(roles))],
               [s["cpu_per_wall"][r] for r in roles], width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(roles))], roles, rotation=20)
    ax.set_ylabel("CPU s per wall s (1.0 = one core)")
    ax.set_title("RF=3 produce: CPU by process role (median run)")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def print_table(series: dict[str, dict[str, Any]], figures: dict[str, float],
                quant: dict[str, tuple[float, float]]) -> None:
    roles = list(next(iter(series.values()))["cpu_per_wall"])
    short = [r.replace("followers", "foll").replace("_network", "_net") for r in roles]
    head = f"{'case':<15}{'records/s':>11}{'MB/s':>7}{'machine':>8}"
    print("CPU seconds per wall second of each run (median run; 1.00 = one core busy; "
          "machine = all cores busy, everyone's)")
    print(head + "".join(f"{r:>12}" for r in short))
    for key, s in series.items():
        print(f"{key:<15}{s['records_per_s']:>11,.0f}{s['mb_per_s']:>7.1f}"
              f"{s['machine_busy_cores']:>8.2f}"
              + "".join(f"{s['cpu_per_wall'][r]:>12.2f}" for r in roles))
    print("CPU microseconds per record (median run)")
    for key, s in series.items():
        print(f"{key:<41}" + "".join(f"{s['cpu_us_per_record'][r]:>12.2f}" for r in roles))
    for size in (100, 1024):
        print(f"acks=all / acks=1 throughput at {size} B: "
              f"{figures[f'acks_all_vs_acks1_{size}b_ratio']:.2f}")
    for name, (p50, p99) in quant.items():
        print(f"latency one in flight, {name:<10}: p50 {p50:7.3f} ms  p99 {p99:7.3f} ms")
    for size in (100, 1024):
        for name in ("acks_all", "acks_1"):
            key = f"request_{size}b_{name}"
            print(f"one {request_records(size):,} x {size} B request, {name:<8}: "
                  f"{figures[key + '_rtt_ms']:6.2f} ms -> one-partition ceiling "
                  f"{figures[key + '_ceiling_records_per_s']:>9,.0f} records/s "
                  f"{figures[key + '_ceiling_mb_per_s']:6.1f} MB/s")


def main() -> int:
    if len(sys.argv) == 7 and sys.argv[1] == "--child":
        return child_produce(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                             sys.argv[6])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records per 100 B run (1 KiB runs send a quarter)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--latency-samples", type=int, default=2000)
    parser.add_argument("--request-samples", type=int, default=30)
    args = parser.parse_args()
    load_before = list(os.getloadavg())
    figures: dict[str, float] = {}
    series: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="minikafka-bench-cluster-") as root, \
            running_cluster(root) as state:
        cases = [(size, acks) for size in (100, 1024) for acks in ("all", "1")]
        create_topics(state, [f"p{size}-a{acks}-{r}" for size, acks in cases
                              for r in range(args.runs)] + ["lat", "rtt"])
        with Admin(state.bootstrap) as admin:
            admin.create_topics([NewTopic("lat-rf1", 1, 1, {})])
        for size, acks in cases:
            n = args.records if size == 100 else args.records // 4
            runs = [produce_run(state, f"p{size}-a{acks}-{r}", n, size, acks)
                    for r in range(args.runs)]
            key = f"{size}b_acks_{acks}"
            series[key] = {
                "runs": runs, "records": n,
                "records_per_s": statistics.median(r["records_per_s"] for r in runs),
                "mb_per_s": statistics.median(r["mb_per_s"] for r in runs),
                "cpu_s": _median_cpu(runs, "cpu_s"),
                "machine_busy_cores": statistics.median(r["machine_busy_cores"] for r in runs),
                "cpu_per_wall": _median_cpu(runs, "cpu_per_wall"),
                "cpu_us_per_record": _median_cpu(runs, "cpu_us_per_record")}
            prefix = f"produce_{size}b" if acks == "all" else f"produce_{size}b_acks1"
            figures[f"{prefix}_records_per_s"] = series[key]["records_per_s"]
            figures[f"{prefix}_mb_per_s"] = series[key]["mb_per_s"]
        for size in (100, 1024):
            figures[f"acks_all_vs_acks1_{size}b_ratio"] = (
                figures[f"produce_{size}b_records_per_s"]
                / figures[f"produce_{size}b_acks1_records_per_s"])
        lat = {name: latency_ms(state.bootstrap, topic, args.latency_samples, acks)
               for name, topic, acks in (("acks_all", "lat", "all"), ("acks_1", "lat", 1),
                                         ("rf1_acks_1", "lat-rf1", 1))}
        hops = trace_hops(state, "lat", leaders(state)["lat"], args.latency_samples // 2)
        rtt_port = state.brokers[str(leaders(state)["rtt"])].port
        rtt = {(size, name): request_rtt_ms(rtt_port, "rtt", args.request_samples, size, acks)
               for size in (100, 1024) for name, acks in (("acks_all", -1), ("acks_1", 1))}
    quant = {k: _quantiles(v) for k, v in lat.items()}
    figures.update(produce_p50_ms=quant["acks_all"][0], produce_p99_ms=quant["acks_all"][1],
                   produce_acks1_p50_ms=quant["acks_1"][0],
                   produce_acks1_p99_ms=quant["acks_1"][1],
                   produce_rf1_acks1_p50_ms=quant["rf1_acks_1"][0],
                   produce_rf1_acks1_p99_ms=quant["rf1_acks_1"][1],
                   acks_all_vs_acks1_p50_ratio=quant["acks_all"][0] / quant["acks_1"][0])
    for (size, name), samples in rtt.items():
        median = statistics.median(samples)
        figures[f"request_{size}b_{name}_rtt_ms"] = median
        figures[f"request_{size}b_{name}_ceiling_records_per_s"] = (
            request_records(size) / median * 1000)
        figures[f"request_{size}b_{name}_ceiling_mb_per_s"] = (
            request_records(size) * size / median / 1000)
    print_table(series, figures, quant)
    if hops is None:
        print("latency stages: not traced (raw loopback capture needs CAP_NET_RAW)")
    else:
        print("acks=all latency stages (medians, ms; bench/cluster_hops.py): "
              + ", ".join(f"{k[:-3]} {hops[k]:.3f}" for k in (*STAGES, "total_ms")))
    met = {k: (figures[k] <= t if k.endswith("_ms") else figures[k] >= t)
           for k, t in TARGETS.items()}
    for key, ok in met.items():
        print(f"target {key}: {TARGETS[key]:,} -> {figures[key]:,.3f} "
              f"{'met' if ok else 'MISSED'}")
    RESULTS.mkdir(exist_ok=True)
    machine = machine_info()
    machine["load_avg_before"] = load_before
    png = plot(RESULTS / "cluster.png", series)
    (RESULTS / "cluster.json").write_text(json.dumps({
        "config": {**vars(args), "brokers": 3, "replication_factor": 3, "partitions": 1,
                   "topic_config": TOPIC_CONFIG, "cluster_overrides": {},
                   "record_sizes": [100, 1024]},
        "machine": machine, "figures": figures, "series": series,
        "latency_p50_p99_ms": quant, "acks_all_latency_stages_ms": hops,
        "targets": TARGETS, "met": met, "png": "cluster.png" if png else None}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
