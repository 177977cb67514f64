"""acks=all latency of one record in flight, two source trees alternated: issue 36.

Each *run* starts a fresh local cluster (one controller, three brokers, as
:mod:`bench.cluster_lifecycle` starts it) from one source tree, creates one topic (one
partition, RF 3, min ISR 2), and measures ``Producer(acks="all", linger_ms=0)
.send(100 B, partition=0).result()`` in a loop (``--samples`` sends after 20 warm-up
sends), then the same sends traced per stage by :func:`bench.cluster_hops.trace_hops`
(loopback packet timestamps; skipped without CAP_NET_RAW), and the CPU time (user +
system, psutil) each role spent per send: the leader's main and network processes, the
followers' (summed), the controller, the client. On a shared 2-core machine the
CPU per send is the steadier figure: latency follows it once the cores are busy. The
runs alternate between ``--before`` and ``--after`` (``--rounds`` of each), so both
sides see the same load on a shared machine; the figures are the medians over runs of
each run's p50 / p99, CPU per send and stage medians.

A run is a child process (``--one ROOT``) whose ``PYTHONPATH`` starts with that tree,
so its client, launcher and every broker process import that tree's code; this file
is run as a script from its own directory, so the child needs only ``bench.cluster_hops``
and ``bench.cluster_lifecycle`` from the tree under test (present since issue 7).

Writes ``bench/results/acks_latency.json``.  Every process started here is stopped by
PID (``running_cluster``'s ``finally``).
Run: ``python3 bench/acks_latency.py --before /tmp/base --after . --rounds 5``.

Costs: a run is a cluster start (a few seconds) plus ``2 x samples`` sends.
Not thread-safe; one run at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def one_run(samples: int) -> dict[str, Any]:
    """In the child: one cluster of the tree on ``sys.path``, one topic, the figures."""
    from bench.cluster_hops import trace_hops
    from bench.cluster_lifecycle import create_topics, leaders, running_cluster
    from clients.producer.producer import Producer

    with tempfile.TemporaryDirectory(prefix="minikafka-bench-lat-") as root, \
            running_cluster(root) as state:
        create_topics(state, ["lat"])
        leader = leaders(state)["lat"]
        roles = _roles(state, leader)
        lat = []
        with Producer(state.bootstrap, acks="all", linger_ms=0) as producer:
            for _ in range(20):
                producer.send("lat", b"warm", partition=0).result(30)
            value = b"x" * 100
            cpu_before = _cpu_s(roles)
            for _ in range(samples):
                t0 = time.perf_counter()
                producer.send("lat", value, partition=0).result(30)
                lat.append((time.perf_counter() - t0) * 1000)
            cpu_after = _cpu_s(roles)
        hops = trace_hops(state, "lat", leader, samples // 2)
    qs = statistics.quantiles(lat, n=100)
    cpu_us = {k: (cpu_after[k] - cpu_before[k]) / samples * 1e6 for k in cpu_before}
    return {"p50_ms": qs[49], "p99_ms": qs[98], "mean_ms": statistics.fmean(lat),
            "cpu_us_per_send": cpu_us, "stages_ms": hops, "load_avg": list(os.getloadavg())}


def _roles(state: Any, leader: int) -> dict[str, list[Any]]:
    """The processes by role: the leader's main and network processes, the followers'
    main and network processes, the controller, this (the client) process."""
    import psutil

    roles: dict[str, list[Any]] = {"client": [psutil.Process()],
                                   "controller": [psutil.Process(state.controller.pid)]}
    for node, entry in state.brokers.items():
        main = psutil.Process(entry.pid)
        role = "leader" if int(node) == leader else "followers"
        roles.setdefault(f"{role}_main", []).append(main)
        roles.setdefault(f"{role}_network", []).extend(main.children())
    return roles


def _cpu_s(roles: dict[str, list[Any]]) -> dict[str, float]:
    """CPU seconds (user + system) per role so far."""
    out = {}
    for role, procs in roles.items():
        out[role] = sum(sum(p.cpu_times()[:2]) for p in procs)
    out["total"] = sum(out.values())
    return out


def _run_tree(root: str, samples: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(root))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", root,
                          "--samples", str(samples)], env=env, cwd=root, check=True,
                         capture_output=True, text=True, timeout=600)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _commit(root: str) -> str:
    try:
        return subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, OSError):
        return "unknown"


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: statistics.median(r[k] for r in runs)
                           for k in ("p50_ms", "p99_ms", "mean_ms")}
    out["cpu_us_per_send"] = {k: statistics.median(r["cpu_us_per_send"][k] for r in runs)
                              for k in runs[0]["cpu_us_per_send"]}
    traced = [r["stages_ms"] for r in runs if r["stages_ms"]]
    if traced:
        out["stages_ms"] = {k: statistics.median(t[k] for t in traced) for k in traced[0]}
    return out


def _rounded(figures: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in figures.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--one", help="(child) measure the tree on sys.path")
    parser.add_argument("--before", default="/tmp/latency-base")
    parser.add_argument("--before-commit", default=None)
    parser.add_argument("--after", default=".")
    parser.add_argument("--after-commit", default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--out", default=str(RESULTS / "acks_latency.json"))
    args = parser.parse_args()
    if args.one:  # bench/ itself is sys.path[0] (its broker.py would shadow the package)
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        print(json.dumps(one_run(args.samples)))
        return 0
    sides: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for i in range(args.rounds):
        for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
            run = _run_tree(getattr(args, side), args.samples)
            sides[side].append(run)
            print(f"round {i} {side}: p50 {run['p50_ms']:.3f} p99 {run['p99_ms']:.3f} ms, "
                  f"CPU us/send {_rounded(run['cpu_us_per_send'])}, "
                  f"stages {_rounded(run['stages_ms'] or {})}", flush=True)
    result: dict[str, Any] = {
        "api": "Producer(acks='all', linger_ms=0).send(100 B, partition=0).result(), "
               "one in flight",
        "settings": {"brokers": 3, "replication_factor": 3, "min_insync_replicas": 2,
                     "partitions": 1, "samples_per_run": args.samples,
                     "rounds": args.rounds, "alternated": True},
        "before": {"tree": args.before,
                   "commit": args.before_commit or _commit(args.before),
                   **_summary(sides["before"]), "runs": sides["before"]},
        "after": {"tree": args.after, "commit": args.after_commit or _commit(args.after),
                  **_summary(sides["after"]), "runs": sides["after"]},
        "machine": {"cpus": os.cpu_count(), "load_avg_end": list(os.getloadavg())},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for side in ("before", "after"):
        s = result[side]
        print(f"{side} ({s['commit']}): p50 {s['p50_ms']:.3f} ms, p99 {s['p99_ms']:.3f} ms, "
              f"CPU us/send {_rounded(s['cpu_us_per_send'])}, "
              f"stages {_rounded(s.get('stages_ms') or {})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
