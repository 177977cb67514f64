"""Log compaction throughput: MB/s cleaned, size reduction, and the cost of one step.

Question: how fast does :class:`storage.cleaner.LogCleaner` compact a log, how much does
it shrink, and how long does one bounded step block the broker's event loop?

Setup: a compacted log of ``--records`` records (default 1M) over ``--keys`` keys
(default 10k; key ``key-%08d``, uniform random, 100-byte values, 5% tombstones) in
batches of ``--batch-records`` records (default 100), ``segment_bytes`` 16 MiB, rolled
at the end so the whole log is cleanable.  It is written once into a template directory;
each run copies it (page cache hot), opens it, and times ``clean_until_idle`` (one
pass: map of the dirty range + rewrite of every segment) with the default cleaner
config (32 MiB offset map, 512 KiB steps).  Figures (medians of ``--runs`` runs):

* cleaned MB per CPU second = input log bytes / process CPU time of the whole clean
  (both phases; the target, 20, is on this figure because the machine is shared and
  wall time mostly measures the neighbours), and MB/s of wall time next to it;
* records/s = input records / wall time;
* size reduction = bytes after / bytes before (expected ~ keys / records plus headers);
* step time: median and max CPU and wall ms of one ``clean_step`` (what one scheduled call
  blocks the event loop for), and bytes read per step.

Reference in the same run: a bare CRC-32C pass over the same bytes (the floor of any
validating rewrite) and ``decode_batch`` of the first ~16 MB of batches (the per-record
Python path a naive cleaner would take).  Writes ``bench/results/compaction.json``.
Run: ``python -m bench.compaction`` (~2 min).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from crc32c import crc32c

from clients.records.record import build_batch, decode_batch
from storage.cleaner.cleaner import LogCleaner
from storage.cleaner.config import CleanerConfig
from storage.config import LogConfig
from storage.log.log import Log

MB = 1_000_000
RESULTS = Path(__file__).resolve().parent / "results" / "compaction.json"
TARGET_CLEAN_MB_S = 20.0
TARGET_STEP_MAX_MS = 100.0
TP = ("bench", 0)


def log_config() -> LogConfig:
    return LogConfig(segment_bytes=16 * 1024 * 1024, cleanup_policy="compact",
                     min_cleanable_dirty_ratio=0.0)


def build_template(directory: Path, records: int, keys: int, batch_records: int,
                   seed: int = 7) -> int:
    """Write the input log; returns its size in bytes."""
    rng = random.Random(seed)
    log = Log.open(directory, log_config())
    value = bytes(100)
    ts = 1_700_000_000_000
    for start in range(0, records, batch_records):
        n = min(batch_records, records - start)
        items = []
        for i in range(n):
            key = b"key-%08d" % rng.randrange(keys)
            items.append((key, None if rng.random() < 0.05 else value, ts + start + i, ()))
        log.append_as_leader(build_batch(items), 0)
    log.roll()
    size = log.size_in_bytes
    log.close()
    return size


def one_run(template: Path, work: Path) -> dict[str, float]:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(template, work)
    log = Log.open(work, log_config(), had_clean_shutdown=True)
    before = log.size_in_bytes
    cleaner = LogCleaner(CleanerConfig())
    steps: list[float] = []
    step_cpu: list[float] = []
    step_bytes: list[int] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    while True:
        t0, c0 = time.perf_counter(), time.process_time()
        result = cleaner.clean_step({TP: log})
        steps.append(time.perf_counter() - t0)
        step_cpu.append(time.process_time() - c0)
        if result.topic_partition is None:
            break
        step_bytes.append(result.bytes_read)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    after = log.size_in_bytes
    log.check_invariants()
    log.close()
    return {
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "step_cpu_ms_median": statistics.median(step_cpu) * 1000,
        "step_cpu_ms_max": max(step_cpu) * 1000,
        "bytes_before": before,
        "bytes_after": after,
        "step_ms_median": statistics.median(steps) * 1000,
        "step_ms_max": max(steps) * 1000,
        "step_bytes_median": statistics.median(step_bytes),
        "steps": len(steps),
        "passes": cleaner.stats.passes_completed,
    }


def reference_passes(template: Path) -> dict[str, float]:
    data = b"".join(p.read_bytes() for p in sorted(template.glob("*.log")))
    start = time.perf_counter()
    crc32c(data)
    crc_s = time.perf_counter() - start
    log = Log.open(template, log_config(), had_clean_shutdown=True)
    start = time.perf_counter()
    n = decoded = 0
    for _header, batch in log.batches():  # the first ~16 MB is enough for a rate
        n += len(decode_batch(batch, validate=False))
        decoded += len(batch)
        if decoded >= 16 * MB:
            break
    decode_s = time.perf_counter() - start
    log.close()
    return {"crc_mb_s": len(data) / crc_s / MB, "decode_batch_mb_s": decoded / decode_s / MB,
            "decode_records": n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch-records", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    load_start = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    try:
        template = root / "template" / "bench-0"
        t0 = time.perf_counter()
        size = build_template(template, args.records, args.keys, args.batch_records)
        print(f"built {size / MB:.1f} MB log of {args.records} records in "
              f"{time.perf_counter() - t0:.1f} s")
        runs = [one_run(template, root / "work" / "bench-0") for _ in range(args.runs)]
        ref = reference_passes(template)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    seconds = med("seconds")
    cpu_seconds = med("cpu_seconds")
    figures = {
        "clean_mb_s": size / seconds / MB,
        "clean_mb_per_cpu_s": size / cpu_seconds / MB,
        "clean_cpu_seconds": cpu_seconds,
        "clean_records_s": args.records / seconds,
        "clean_seconds": seconds,
        "bytes_before": size,
        "bytes_after": med("bytes_after"),
        "size_ratio_after_before": med("bytes_after") / size,
        "step_ms_median": med("step_ms_median"),
        "step_ms_max": med("step_ms_max"),
        "step_cpu_ms_median": med("step_cpu_ms_median"),
        "step_cpu_ms_max": med("step_cpu_ms_max"),
        "step_bytes_median": med("step_bytes_median"),
        "steps": med("steps"),
        "passes": med("passes"),
        "reference_crc_mb_s": ref["crc_mb_s"],
        "reference_decode_batch_mb_s": ref["decode_batch_mb_s"],
        "clean_vs_decode_batch": (size / seconds / MB) / ref["decode_batch_mb_s"],
        "runs": runs,
    }
    targets = {"clean_mb_per_cpu_s": TARGET_CLEAN_MB_S, "step_cpu_ms_max": TARGET_STEP_MAX_MS}
    met = {"clean_mb_per_cpu_s": figures["clean_mb_per_cpu_s"] >= TARGET_CLEAN_MB_S,
           "step_cpu_ms_max": figures["step_cpu_ms_max"] <= TARGET_STEP_MAX_MS}
    rows = [
        ("cleaned MB per CPU second", f"{figures['clean_mb_per_cpu_s']:.1f}",
         f">= {TARGET_CLEAN_MB_S}"),
        ("cleaned MB/s wall clock", f"{figures['clean_mb_s']:.1f}", ""),
        ("records/s", f"{figures['clean_records_s']:,.0f}", ""),
        ("size before -> after (MB)",
         f"{size / MB:.1f} -> {figures['bytes_after'] / MB:.2f}", ""),
        ("size after / before", f"{figures['size_ratio_after_before']:.4f}", ""),
        ("step CPU ms median / max", f"{figures['step_cpu_ms_median']:.1f} / "
         f"{figures['step_cpu_ms_max']:.1f}", f"max <= {TARGET_STEP_MAX_MS}"),
        ("step wall ms median / max", f"{figures['step_ms_median']:.1f} / "
         f"{figures['step_ms_max']:.1f}", ""),
        ("bytes read per step (median)", f"{figures['step_bytes_median']:,.0f}", ""),
        ("reference: CRC-32C MB/s", f"{ref['crc_mb_s']:.0f}", ""),
        ("reference: decode_batch MB/s", f"{ref['decode_batch_mb_s']:.1f}", ""),
        ("clean / decode_batch", f"{figures['clean_vs_decode_batch']:.2f}x", ""),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'value':>18}  target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>18}  {target}")
    result: dict[str, Any] = {
        "benchmark": "compaction",
        "config": {"records": args.records, "keys": args.keys,
                   "batch_records": args.batch_records, "value_bytes": 100,
                   "tombstone_fraction": 0.05, "runs": args.runs,
                   "log_config": log_config().to_dict(),
                   "cleaner_config": vars(CleanerConfig()),
                   "page_cache": "hot (template copied before each run)"},
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_count": os.cpu_count(), "processor": platform.processor(),
                    "load_average_1_5_15_at_start": list(load_start),
                    "load_average_1_5_15_at_end": list(os.getloadavg())},
        "figures": figures,
        "targets": targets,
        "met": met,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
