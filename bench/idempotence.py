"""Cost of idempotence on the broker: the leader's producer check, and state recovery.

Questions (medians of ``--runs`` runs, same process, same disk, page cache hot):

* **append**: ``Partition.append_records_as_leader`` of one-batch requests, each batch
  ``--records`` records of 100 B, into a fresh log: plain batches (producer id -1) vs
  idempotent batches (one producer, consecutive sequences; the leader parses the
  header, checks it and records the batch).  Figure: idempotent / plain throughput,
  target >= 0.85 (the check must not be a visible part of an append).
* **duplicate**: the same idempotent request retried: the answer costs a header parse,
  a check and one CRC pass, no write.  Reported per request, next to an append.
* **rebuild**: a partition reopened over a log of ``--batches`` idempotent batches from
  ``--producers`` producers, (a) with no snapshot (replay of the whole log), (b) with a
  snapshot at the log end (what a clean shutdown leaves).  Target for (b): <= 50 ms.

Writes ``bench/results/idempotence.json``.  Run: ``python -m bench.idempotence`` (~1 min).
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
from replication.partition import Partition
from storage.config import LogConfig
from storage.log.log import Log

RESULTS = Path(__file__).resolve().parent / "results" / "idempotence.json"
TARGET_APPEND_RATIO = 0.85
TARGET_SNAPSHOT_REBUILD_MS = 50.0
VALUE = b"v" * 100


def batch(records: int, pid: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    return build_batch([(None, VALUE, 1_700_000_000_000 + i, ()) for i in range(records)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def open_partition(directory: Path) -> Partition:
    log = Log.open(directory, LogConfig(segment_bytes=1 << 30))
    p = Partition("bench", 0, log, 0)
    p.make_leader(1, [0], [0])
    return p


def append_run(root: Path, requests: list[bytes]) -> float:
    """Seconds to append every request as a leader into a fresh log."""
    directory = root / "bench-0"
    shutil.rmtree(directory, ignore_errors=True)
    p = open_partition(directory)
    start = time.perf_counter()
    for data in requests:
        p.append_records_as_leader(data, required_acks=1)
    elapsed = time.perf_counter() - start
    p.log.close()
    return elapsed


def duplicate_run(root: Path, data: bytes, n: int) -> float:
    directory = root / "dup-0"
    shutil.rmtree(directory, ignore_errors=True)
    p = open_partition(directory)
    p.append_records_as_leader(data, required_acks=1)
    start = time.perf_counter()
    for _ in range(n):
        info = p.append_records_as_leader(data, required_acks=1)
    elapsed = time.perf_counter() - start
    assert info.num_batches == 0 and p.log_end_offset == info.last_offset + 1
    p.log.close()
    return elapsed


def build_rebuild_log(root: Path, batches: int, producers: int, records: int) -> Path:
    directory = root / "rebuild-0"
    shutil.rmtree(directory, ignore_errors=True)
    p = open_partition(directory)
    for i in range(batches):
        pid = i % producers
        p.append_records_as_leader(batch(records, pid, 0, (i // producers) * records),
                                   required_acks=1)
    p.take_producer_snapshot()
    p.log.close()
    return directory


def rebuild_run(directory: Path, with_snapshot: bool) -> float:
    hidden = directory.parent / "hidden-snapshots"
    if not with_snapshot:
        hidden.mkdir(exist_ok=True)
        for f in directory.glob("*.snapshot"):
            f.rename(hidden / f.name)
    try:
        log = Log.open(directory, LogConfig(segment_bytes=1 << 30), had_clean_shutdown=True)
        start = time.perf_counter()
        p = Partition("bench", 0, log, 0)
        elapsed = time.perf_counter() - start
        assert len(p.producer_state) > 0
        log.close()
    finally:
        for f in hidden.glob("*.snapshot"):
            f.rename(directory / f.name)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--batches", type=int, default=50_000)
    parser.add_argument("--producers", type=int, default=1_000)
    args = parser.parse_args()

    figures: dict[str, Any] = {}
    root = Path(tempfile.mkdtemp(prefix="bench-idem-"))
    try:
        plain = [batch(args.records)] * args.requests
        idem = [batch(args.records, 7, 0, i * args.records) for i in range(args.requests)]
        plain_s, idem_s = [], []
        for run in range(args.runs):  # alternate the order so page-cache pressure is shared
            order = [("plain", plain), ("idem", idem)][:: 1 if run % 2 == 0 else -1]
            for name, requests in order:
                (plain_s if name == "plain" else idem_s).append(append_run(root, requests))
        p_s, i_s = statistics.median(plain_s), statistics.median(idem_s)
        ratio = p_s / i_s
        dup_s = statistics.median(duplicate_run(root, idem[0], args.requests)
                                  for _ in range(args.runs))
        figures["append"] = {
            "requests": args.requests, "records_per_batch": args.records,
            "plain_us_per_request": p_s / args.requests * 1e6,
            "idempotent_us_per_request": i_s / args.requests * 1e6,
            "idempotent_over_plain_throughput": ratio,
            "duplicate_us_per_request": dup_s / args.requests * 1e6,
        }
        print(f"{'append (1 batch/request)':<28}{'us/request':>12}")
        print(f"{'plain':<28}{p_s / args.requests * 1e6:>12.1f}")
        print(f"{'idempotent':<28}{i_s / args.requests * 1e6:>12.1f}")
        print(f"{'duplicate (answered)':<28}{dup_s / args.requests * 1e6:>12.1f}")
        print(f"idempotent / plain throughput: {ratio:.2f} (target >= {TARGET_APPEND_RATIO})")

        directory = build_rebuild_log(root, args.batches, args.producers, args.records)
        log_bytes = sum(f.stat().st_size for f in directory.glob("*.log"))
        replay = statistics.median(rebuild_run(directory, False) for _ in range(args.runs))
        snap = statistics.median(rebuild_run(directory, True) for _ in range(args.runs))
        figures["rebuild"] = {
            "batches": args.batches, "producers": args.producers, "log_bytes": log_bytes,
            "replay_ms": replay * 1e3, "snapshot_ms": snap * 1e3,
            "replay_us_per_batch": replay / args.batches * 1e6,
            "replay_over_snapshot": replay / snap,
        }
        print(f"\n{'rebuild':<28}{'ms':>12}")
        print(f"{'replay whole log':<28}{replay * 1e3:>12.1f}   "
              f"({args.batches} batches, {log_bytes / 1e6:.0f} MB)")
        print(f"{'snapshot at log end':<28}{snap * 1e3:>12.1f}   ({args.producers} producers)")
    finally:
        shutil.rmtree(root, ignore_errors=True)

    targets = {"append_ratio": TARGET_APPEND_RATIO, "snapshot_rebuild_ms":
               TARGET_SNAPSHOT_REBUILD_MS}
    met = {"append_ratio": ratio >= TARGET_APPEND_RATIO,
           "snapshot_rebuild_ms": snap * 1e3 <= TARGET_SNAPSHOT_REBUILD_MS}
    result = {
        "benchmark": "idempotence", "config": vars(args),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_count": os.cpu_count(), "processor": platform.processor()},
        "figures": figures, "targets": targets, "met": met,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\ntargets met: {met}; wrote {RESULTS}")


if __name__ == "__main__":
    main()
