"""1 KiB and 100 B producer throughput of two source trees, alternated in one session (issue 36).

Issue 36 asks 1 KiB ``send_bulk`` >= 300 MB/s and per-record ``send()`` >= 200 MB/s with
no 100 B figure more than 5 % worse, measured before/after on this loaded machine.  This
bench does the alternation: ``--before`` and ``--after`` are two checkouts (default: the
main checkout ``/work/main`` and this tree); each round runs one side then the other (the
order flips every round), each side in a child interpreter whose ``PYTHONPATH`` is its
tree, so the child's client and the cluster it starts (controller + 3 brokers, the
launcher sets ``PYTHONPATH`` to the tree it was imported from) are that tree's code.

Per side and round, on a fresh cluster: fresh one-partition topics (RF 3, min ISR 2,
:class:`bench.kafka_clients.Topics`), then in order ``send_bulk`` 1 KiB, ``send()`` 1 KiB,
``send_bulk`` 100 B, ``send()`` 100 B, the functions of :mod:`bench.kafka_clients`
(acks=all, idempotent, ``linger_ms`` 5; ``send_bulk`` with ``batch_size`` 256 KiB, one call;
distinct keys).  Besides the rate, each measurement records how busy the machine and our
processes were: the CPU seconds of the cluster's processes (children included) and of the
client per wall second, and the machine's idle share (``/proc/stat``) over the measurement.
Those say whether a figure is bound by CPU (ours or the other jobs') or by waiting.

Reported: per side the median of each figure over the rounds, and the median of the
per-round ratios after / before (a round's two sides run back to back, so they share the
machine's load more closely than runs minutes apart).  With ``--after`` the same code as
``--before`` the ratios show the noise floor on this machine.

Writes ``bench/results/pipe_1k.json`` (``--out``).  Run: ``python3 -m bench.pipe_1k
[--rounds 4] [--before DIR] [--after DIR] [--only send:100,send_bulk:1024]`` from this
tree; costs about 30 s per side and round (the records: ``--records-1k`` 1 KiB and
``--records-100`` 100 B ones per measurement; the clusters' data live in temporary
directories, removed by the child; their processes are stopped by PID,
:func:`bench.cluster_lifecycle.running_cluster`).  One run at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
MEASUREMENTS = (("send_bulk", 1024), ("send", 1024), ("send_bulk", 100), ("send", 100))

# Runs in a child interpreter whose sys.path starts with the tree under test.
CHILD = """
import json, sys, tempfile, time
import psutil
from bench import kafka_clients as kc
from bench.cluster_lifecycle import running_cluster
import broker
counts = {1024: int(sys.argv[1]), 100: int(sys.argv[2])}
plan = json.loads(sys.argv[3])

def stat():
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return fields[3] + fields[4], sum(fields)  # idle + iowait, all

def cpu(procs):
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total

out = {"tree": broker.__file__.rsplit("/broker/", 1)[0], "rows": []}
with tempfile.TemporaryDirectory(prefix="pipe-1k-") as root:
    with running_cluster(root, 3) as state:
        topics = kc.Topics(state)
        cluster = [p for p in psutil.process_iter(["cmdline"])
                   if root in " ".join(p.info["cmdline"] or [])]
        cluster += [c for p in list(cluster) for c in p.children(recursive=True)]
        me = psutil.Process()
        for api, size in plan:
            keys, values = kc.records(counts[size], size)
            topic = topics.fresh(f"{api}-{size}")
            measure = kc.ours_send_bulk if api == "send_bulk" else kc.ours_send
            idle0, all0 = stat()
            ours0, me0, t0 = cpu(cluster), cpu([me]), time.perf_counter()
            rate = measure(state.bootstrap, topic, keys, values)
            wall = time.perf_counter() - t0
            idle1, all1 = stat()
            out["rows"].append({
                "api": api, "value_bytes": size, "records": counts[size],
                "records_per_s": rate, "mb_per_s": rate * size / 1e6,
                "cluster_cpu_per_s": (cpu(cluster) - ours0) / wall,
                "client_cpu_per_s": (cpu([me]) - me0) / wall,
                "machine_idle_share": (idle1 - idle0) / max(1, all1 - all0)})
print("RESULT " + json.dumps(out))
"""


def run_side(tree: Path, records_1k: int, records_100: int,
             measurements: list[tuple[str, int]]) -> dict[str, Any]:
    """One cluster of ``tree``'s code, the measurements in order; its rows."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    plan = json.dumps(measurements)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(records_1k), str(records_100), plan],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT "):])
            result["load_avg"] = list(os.getloadavg())
            return result
    raise RuntimeError(f"child in {tree} failed ({proc.returncode}): {proc.stderr[-2000:]}")


def commit_of(tree: Path) -> str:
    proc = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "-uno"],
                           capture_output=True, text=True).stdout.strip()
    return proc.stdout.strip() + ("+dirty" if dirty else "")


def summarize(sides: dict[str, list[dict[str, Any]]],
              measurements: list[tuple[str, int]]) -> dict[str, Any]:
    """Medians per side and figure, and the median per-round ratio after / before."""
    summary: dict[str, Any] = {}
    for api, size in measurements:
        key = f"{api}_{size}B"
        fig: dict[str, Any] = {}
        per_side: dict[str, list[dict[str, Any]]] = {}
        for side, runs in sides.items():
            rows = [r for run in runs for r in run["rows"]
                    if r["api"] == api and r["value_bytes"] == size]
            per_side[side] = rows
            fig[side] = {
                "mb_per_s_median": statistics.median(r["mb_per_s"] for r in rows),
                "mb_per_s_runs": [round(r["mb_per_s"], 1) for r in rows],
                "records_per_s_median": statistics.median(r["records_per_s"] for r in rows),
                "cluster_cpu_per_s_median": statistics.median(
                    r["cluster_cpu_per_s"] for r in rows),
                "client_cpu_per_s_median": statistics.median(
                    r["client_cpu_per_s"] for r in rows),
                "machine_idle_share_median": statistics.median(
                    r["machine_idle_share"] for r in rows)}
        ratios = [a["mb_per_s"] / b["mb_per_s"]
                  for a, b in zip(per_side["after"], per_side["before"], strict=True)]
        fig["ratio_after_to_before_median"] = statistics.median(ratios)
        fig["ratio_runs"] = [round(r, 2) for r in ratios]
        summary[key] = fig
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, default=Path("/work/main"))
    parser.add_argument("--after", type=Path, default=ROOT)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--records-1k", type=int, default=150_000)
    parser.add_argument("--records-100", type=int, default=400_000)
    parser.add_argument("--out", type=Path, default=RESULTS / "pipe_1k.json")
    parser.add_argument("--only", default="",
                        help="a subset, e.g. send:100,send_bulk:1024 (default: all four)")
    args = parser.parse_args()
    measurements = [m for m in MEASUREMENTS if not args.only
                    or f"{m[0]}:{m[1]}" in args.only.split(",")]
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    sides: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for round_ in range(args.rounds):
        order = ("before", "after") if round_ % 2 == 0 else ("after", "before")
        for side in order:
            result = run_side(trees[side], args.records_1k, args.records_100, measurements)
            sides[side].append(result)
            print(side, round_, [round(r["mb_per_s"], 1) for r in result["rows"]], flush=True)
    result = {
        "bench": "pipe_1k",
        "setup": "controller + 3 brokers, one partition, RF 3, min ISR 2, acks=all, "
                 "idempotent, linger_ms 5, distinct keys; send_bulk: batch_size 256 KiB, "
                 "one call; send: per record then flush (bench.kafka_clients)",
        "trees": {side: {"path": str(tree), "commit": commit_of(tree)}
                  for side, tree in trees.items()},
        "rounds": args.rounds,
        "records": {"1024": args.records_1k, "100": args.records_100},
        "cpus": os.cpu_count(),
        "summary": summarize(sides, measurements),
        "runs": sides,
    }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
