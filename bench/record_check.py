"""What the leader's record check costs end to end: produce with it and without it.

The leader parses every record of every produced batch before it appends
(``storage.log.validator.check_records``, the poisoned-batch check).  This benchmark
measures what that costs on the produce path as users drive it: two copies of this
checkout in temporary directories, one as it is and one whose ``check_records`` returns
at once (the only difference), and for each size interleaved pairs of runs (the order
alternates pair by pair) of a fresh one-broker cluster (``python -m broker start``,
main process + network process) driven by ``minikafka bench produce`` (``send_bulk`` of
one repeated value, acks=1, one partition, in its own process).  Per run it records the
producer's records/s and the broker main process's CPU seconds (psutil) while it
produced.  Medians over the runs, and the median of the per-pair ratios (with / without
the check): runs of the same code differ by up to 2x here (page-cache writeback), the two
runs of a pair much less.

Writes ``bench/results/record_check.json`` and ``.png`` (matplotlib).  Run:
``python3 -m bench.record_check [--pairs 3]`` (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
SIZES = ((100, 8_000_000), (1024, 1_500_000))  # record bytes, records per run
VALIDATOR = Path("storage") / "log" / "validator.py"
DOCSTRING_END = (
    '    (a valid CRC says nothing about whether a producer wrote records that parse)."""\n')

# Runs in a child interpreter whose sys.path starts with one of the two copies.
CHILD = """
import json, sys, tempfile
from pathlib import Path
import psutil
from bench.broker import cli_bench
from clients.admin import Admin
from clients.cli.demo import free_port, running_broker
from clients.types import NewTopic
size, records = int(sys.argv[1]), int(sys.argv[2])
port = free_port()
bootstrap = f"127.0.0.1:{port}"
with tempfile.TemporaryDirectory(prefix="record-check-") as data_dir, \
        running_broker(data_dir, port) as proc, tempfile.TemporaryDirectory() as tmp:
    with Admin(bootstrap) as admin:
        admin.create_topics([NewTopic("t", 1, 1, {})])
    main = psutil.Process(proc.pid)
    def cpu() -> float:
        t = main.cpu_times()
        return t.user + t.system
    before = cpu()
    figures = cli_bench(bootstrap, "produce", "t", records, size, Path(tmp) / "p.json")
    figures["broker_main_cpu_s"] = cpu() - before
print(json.dumps(figures))
"""


def copy_checkout(target: Path, without_check: bool) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout.split()
    for name in files:
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    if without_check:
        path = target / VALIDATOR
        text = path.read_text()
        if text.count(DOCSTRING_END) != 1:
            raise SystemExit(f"cannot find check_records' docstring end in {VALIDATOR}")
        path.write_text(text.replace(DOCSTRING_END, DOCSTRING_END + "    return\n"))


def one_run(copy: Path, size: int, records: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(copy))
    out = subprocess.run([sys.executable, "-c", CHILD, str(size), str(records)], cwd=copy,
                         env=env, capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise SystemExit(f"run failed:\n{out.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def plot(result: dict[str, Any], png: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    sizes = list(result["sizes"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for axis, key, label in ((left, "records_per_s", "records/s (median)"),
                             (right, "broker_main_cpu_s", "broker main-process CPU s")):
        xs = range(len(sizes))
        axis.bar([x - 0.2 for x in xs], [result["sizes"][s]["check"][key] for s in sizes],
                 width=0.4, label="record check", color="#4c72b0")
        axis.bar([x + 0.2 for x in xs], [result["sizes"][s]["no_check"][key] for s in sizes],
                 width=0.4, label="check removed", color="#dd8452")
        axis.set_xticks(list(xs), [f"{s} B" for s in sizes])
        axis.set_ylabel(label)
        axis.legend(fontsize=8)
    fig.suptitle(f"{result['api']}\n{result['input']}", fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    runs: dict[int, dict[str, list[dict[str, Any]]]] = {
        size: {"check": [], "no_check": []} for size, _ in SIZES}
    with tempfile.TemporaryDirectory(prefix="record-check-bench-") as tmp:
        copies = {"check": Path(tmp) / "check", "no_check": Path(tmp) / "no_check"}
        for name, copy in copies.items():
            copy_checkout(copy, without_check=name == "no_check")
        for pair in range(args.pairs):
            order = list(copies) if pair % 2 == 0 else list(copies)[::-1]
            for size, records in SIZES:
                for name in order:
                    figures = one_run(copies[name], size, records)
                    runs[size][name].append(figures)
                    print(f"pair {pair} {size:>5} B {name:<9} "
                          f"{figures['records_per_s']:>12,.0f} records/s, broker main "
                          f"CPU {figures['broker_main_cpu_s']:.2f} s", flush=True)
    sizes: dict[str, Any] = {}
    for size, _ in SIZES:
        row = {name: {key: statistics.median(r[key] for r in rs)
                      for key in ("records_per_s", "broker_main_cpu_s")}
               for name, rs in runs[size].items()}
        pairs = list(zip(runs[size]["check"], runs[size]["no_check"], strict=True))
        row["pair_throughput_ratios"] = [a["records_per_s"] / b["records_per_s"]
                                         for a, b in pairs]
        row["pair_cpu_ratios"] = [a["broker_main_cpu_s"] / b["broker_main_cpu_s"]
                                  for a, b in pairs]
        row["throughput_with_over_without"] = statistics.median(row["pair_throughput_ratios"])
        row["cpu_with_over_without"] = statistics.median(row["pair_cpu_ratios"])
        row["runs"] = runs[size]
        sizes[str(size)] = row
        print(f"{size} B: {row['check']['records_per_s']:,.0f} vs "
              f"{row['no_check']['records_per_s']:,.0f} records/s (median pair ratio "
              f"with/without {row['throughput_with_over_without']:.3f}); broker main CPU "
              f"{row['check']['broker_main_cpu_s']:.2f} vs "
              f"{row['no_check']['broker_main_cpu_s']:.2f} s "
              f"(median pair ratio {row['cpu_with_over_without']:.3f})")
    result = {
        "api": "Producer.send_bulk via `minikafka bench produce` (acks=1) against "
               "`python -m broker start`; storage.log.validator.check_records on or emptied",
        "input": f"{args.pairs} interleaved pairs per size; one repeated value per run: "
                 + ", ".join(f"{n:,} x {s} B" for s, n in SIZES) + "; 1 broker, 1 partition",
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(), "sizes": sizes}
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / "record_check.json"
        out.write_text(json.dumps(result, indent=2))
        drew = plot(result, out.with_suffix(".png"))
        print(f"wrote {out}" + (" and its .png" if drew else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
