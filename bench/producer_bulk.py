"""Producer throughput: send_bulk (numpy codec) vs send (per record), acks=1, 100 B values.

The broker is the in-memory fake of the client tests (tests/clients/fake_broker.py) run
in a *separate process*, so the producer process is measured alone (target: 500,000
records/s at 100 B, acks=1, one producer process).  The fake validates every batch's
CRC and keeps it in memory, like a broker that appends to the page cache.

Prints a table of medians over RUNS runs and writes bench/results/producer_bulk.json.
Usage: python bench/producer_bulk.py [--records N] [--runs R]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clients.producer.producer import Producer  # noqa: E402

TARGET_RECORDS_PER_S = 500_000
VALUE_BYTES = 100

_BROKER = """
import sys
from tests.clients.fake_broker import FakeCluster
c = FakeCluster(1)
c.create_topic("bench", 1)
print(c.port(0), flush=True)
sys.stdin.read()
c.close()
"""


def start_broker() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _BROKER], cwd=ROOT, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    port = proc.stdout.readline().strip()
    return proc, f"127.0.0.1:{port}"


def stop_broker(proc: subprocess.Popen[str]) -> None:
    try:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)
    except Exception:
        proc.kill()
        proc.wait(timeout=10)


def run_bulk(bootstrap: str, values: np.ndarray, batch_size: int, chunk: int) -> float:
    with Producer(bootstrap, acks=1, linger_ms=5, batch_size=batch_size) as producer:
        producer.partitions_for("bench")
        start = time.perf_counter()
        futures = [
            producer.send_bulk("bench", values[i : i + chunk], partition=0)
            for i in range(0, len(values), chunk)
        ]
        for f in futures:
            f.result(120)
        elapsed = time.perf_counter() - start
    return len(values) / elapsed


def run_send(bootstrap: str, values: list[bytes], batch_size: int) -> float:
    with Producer(bootstrap, acks=1, linger_ms=5, batch_size=batch_size) as producer:
        producer.partitions_for("bench")
        start = time.perf_counter()
        futures = [producer.send("bench", v, partition=0) for v in values]
        producer.flush(timeout_s=120)
        elapsed = time.perf_counter() - start
        assert all(f.result(0).offset >= 0 for f in futures)
    return len(values) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    values = np.frombuffer(rng.bytes(VALUE_BYTES * args.records), dtype=f"S{VALUE_BYTES}")
    per_record = [bytes(v) for v in values[: args.records // 10]]
    configs = [
        ("send_bulk", 16384, lambda b: run_bulk(b, values, 16384, 100_000)),
        ("send_bulk", 65536, lambda b: run_bulk(b, values, 65536, 100_000)),
        ("send", 16384, lambda b: run_send(b, per_record, 16384)),
    ]
    results = []
    for name, batch_size, fn in configs:
        rates = []
        for _ in range(args.runs):
            proc, bootstrap = start_broker()
            try:
                rates.append(fn(bootstrap))
            finally:
                stop_broker(proc)
        median = statistics.median(rates)
        results.append({
            "api": name, "batch_size": batch_size, "runs": rates,
            "median_records_per_s": median,
            "median_mb_per_s": median * VALUE_BYTES / 1e6,
            "median_us_per_record": 1e6 / median,
        })  # fmt: skip
    base = results[-1]["median_records_per_s"]
    head = ("api", "batch_size", "records/s", "MB/s", "us/rec", "x send")
    print("{:<10} {:>10} {:>12} {:>8} {:>8} {:>7}".format(*head))
    for r in results:
        r["ratio_vs_send"] = r["median_records_per_s"] / base
        print(f"{r['api']:<10} {r['batch_size']:>10} {r['median_records_per_s']:>12,.0f} "
              f"{r['median_mb_per_s']:>8.1f} {r['median_us_per_record']:>8.2f} "
              f"{r['ratio_vs_send']:>7.1f}")  # fmt: skip
    best = max(r["median_records_per_s"] for r in results)
    out = {
        "benchmark": "producer_bulk",
        "config": {"records": args.records, "runs": args.runs, "value_bytes": VALUE_BYTES,
                   "acks": 1, "linger_ms": 5, "partitions": 1,
                   "broker": "tests/clients/fake_broker.py in a separate process"},
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_count": os.cpu_count(), "load_avg": os.getloadavg()},
        "results": results,
        "target": {"records_per_s": TARGET_RECORDS_PER_S, "met": best >= TARGET_RECORDS_PER_S},
    }  # fmt: skip
    path = ROOT / "bench" / "results" / "producer_bulk.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"target {TARGET_RECORDS_PER_S:,} records/s met: {out['target']['met']} -> {path}")


if __name__ == "__main__":
    main()
