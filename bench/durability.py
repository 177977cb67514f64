"""The cost of fsync before acknowledging: a topic's ``flush.messages=1`` against the default.

What a produce request does on the leader, measured where it happens: one
``Log.append_as_leader`` per request batch (the append of a produce handler; the answer
goes out after it returns).  Input: batches of ``--records`` records of 100-byte values
and 8-byte keys (a per-record producer's linger batch), appended ``--batches`` times to a
fresh log, under two topic configs side by side in the same run:

* ``flush_messages=None`` (the default, as in Kafka: durability comes from replication;
  the OS writes pages back when it wants),
* ``flush_messages=1`` (every append is fsync'd before it returns, so before the produce
  is acknowledged; what ``flush.messages=1`` on a topic does).

Figures: appends/s, records/s, MB/s and per-append latency p50/p99 (each a median over
``--runs`` runs, the two configs alternating so disk state is shared), and the ratio
fsync/default measured in the same run.  The file system of the scratch directory is
recorded: fsync costs what the device under it costs (a VM's virtual disk here).

Writes ``bench/results/durability.json`` and ``durability.png`` (if matplotlib is
installed).  Run: ``python -m bench.durability [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from clients.records.record import build_batch
from storage.config import LogConfig
from storage.log.log import Log

RESULTS = Path(__file__).resolve().parent / "results"
VALUE_BYTES = 100


def file_system_of(path: Path) -> str:
    """The mount (device, type) holding ``path``, from /proc/mounts."""
    best, found = "", "unknown"
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                device, mount_point, fs_type = line.split()[:3]
                if str(path).startswith(mount_point) and len(mount_point) > len(best):
                    best, found = mount_point, f"{fs_type} on {device} ({mount_point})"
    except OSError:
        pass
    return found


def one_run(root: Path, batch: bytes, batches: int, flush_messages: int | None) -> list[float]:
    """Seconds of each append into a fresh log."""
    directory = root / f"durable-{flush_messages}"
    log = Log.open(directory, LogConfig(flush_messages=flush_messages))
    times = []
    try:
        for _ in range(batches):
            start = time.perf_counter()
            log.append_as_leader(batch, leader_epoch=0)
            times.append(time.perf_counter() - start)
        if flush_messages is not None:
            assert log.recovery_point == log.log_end_offset  # every append was fsync'd
    finally:
        log.close()
        shutil.rmtree(directory)
    return times


def summary(runs: list[list[float]], records: int, batch_bytes: int) -> dict[str, float]:
    totals = [sum(r) for r in runs]
    per_append = [sorted(r) for r in runs]
    n = len(runs[0])
    return {
        "appends_s": statistics.median(n / t for t in totals),
        "records_s": statistics.median(n * records / t for t in totals),
        "mb_s": statistics.median(n * batch_bytes / t / 1e6 for t in totals),
        "append_p50_us": statistics.median(r[n // 2] * 1e6 for r in per_append),
        "append_p99_us": statistics.median(r[min(n - 1, n * 99 // 100)] * 1e6
                                           for r in per_append),
    }


def plot(path: Path, figures: dict[str, Any]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = ["default (no fsync)", "flush.messages=1"]
    rows = [figures["default"], figures["flush_messages_1"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.bar(labels, [r["records_s"] for r in rows], color=["#4c72b0", "#dd8452"])
    left.set_ylabel("records/s (median)")
    left.set_title(f"Log.append_as_leader, {figures['records_per_batch']} x 100 B per call",
                   fontsize=9)
    right.bar(labels, [r["append_p50_us"] for r in rows], color=["#4c72b0", "#dd8452"],
              label="p50")
    right.set_ylabel("us per append (p50)")
    right.set_title(f"fsync/default throughput ratio {figures['ratio_records_s']:.3f}",
                    fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--records", type=int, default=16, help="records per batch")
    parser.add_argument("--quick", action="store_true", help="3 runs of 300 appends")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.batches = 3, 300
    root = Path(tempfile.mkdtemp(prefix="bench-durability-", dir=args.dir))
    batch = build_batch([(b"key-%04d" % (i % 10_000), os.urandom(VALUE_BYTES),
                          1_700_000_000_000 + i, ()) for i in range(args.records)])
    load_at_start = list(os.getloadavg())
    try:
        plain: list[list[float]] = []
        synced: list[list[float]] = []
        for i in range(args.runs):
            order = (None, 1) if i % 2 == 0 else (1, None)
            for flush in order:
                (plain if flush is None else synced).append(
                    one_run(root, batch, args.batches, flush))
        default = summary(plain, args.records, len(batch))
        fsync = summary(synced, args.records, len(batch))
        ratios = [sum(p) / sum(s) for p, s in zip(plain, synced, strict=True)]
        figures: dict[str, Any] = {
            "api": "storage.log.log.Log.append_as_leader (one call per produce batch)",
            "input": f"{args.batches} batches of {args.records} records, 8 B keys, "
                     f"{VALUE_BYTES} B random values ({len(batch)} B per batch)",
            "records_per_batch": args.records,
            "runs": args.runs,
            "default": default,
            "flush_messages_1": fsync,
            "ratio_records_s": statistics.median(ratios),
            "file_system": file_system_of(root.resolve()),
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                        "load_at_start": load_at_start},
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for name, row in (("default", default), ("flush.messages=1", fsync)):
        print(f"{name:<18} {row['records_s']:>10,.0f} records/s {row['mb_s']:>7.1f} MB/s "
              f"append p50 {row['append_p50_us']:>8.1f} us p99 {row['append_p99_us']:>8.1f} us")
    print(f"fsync/default records/s ratio (same run): {figures['ratio_records_s']:.3f}; "
          f"{figures['file_system']}")
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "durability.json").write_text(json.dumps(figures, indent=2) + "\n")
        if plot(RESULTS / "durability.png", figures):
            print(f"wrote {RESULTS / 'durability.png'}")


if __name__ == "__main__":
    main()
