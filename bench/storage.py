"""Storage engine throughput: append vs raw write, reads via file regions, recovery rescan.

Questions and how each is measured (medians of ``--runs`` runs, same process, same disk):

* **append**: ``Log.append_as_leader`` of pre-built batches (~16 KiB and ~1 MiB, 1 KiB
  records) into a fresh log, next to a raw sequential ``os.write`` of the same bytes,
  the same number of times, into a plain file in the same directory.  Neither side
  fsyncs inside the timed loop (flush policy = rely on replication, like Kafka's
  default); the order log/raw alternates between runs so page-cache writeback pressure
  is shared fairly.  The figure is the ratio append / raw (target >= 0.70).
* **read**: sequential ``Log.read(offset, max_bytes=1 MiB, max_offset=LEO)`` over the
  whole log; each returned FileRegion is shipped with ``os.sendfile`` into a Unix
  socketpair drained by a thread (what a network process does), and, separately, with
  ``os.preadv`` into one reused buffer.  The page cache is hot (the log was just
  written): this measures the broker's CPU cost per byte, not the disk.
* **recovery**: a log of ``--recovery-mib`` MiB written with ~16 KiB batches and closed,
  then reopened with ``Log.open(had_clean_shutdown=False, recovery_point=0)`` so every
  batch is revalidated (CRC) and the indexes rebuilt.  Target >= 500 MB/s.  The reference
  is a bare CRC-32C pass over the same bytes, read with ``os.preadv`` (the floor any
  validating rescan pays).  Page cache hot, as above.

When a target is missed, one extra run is profiled with cProfile and the top functions
(by internal time) are printed and stored, so the report can say where time goes.

Writes ``bench/results/storage.json``.  Run: ``python -m bench.storage`` (~1-3 min).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import random
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crc32c import crc32c

from clients.records.bulk_decode import decode_batch_bulk
from clients.records.record import build_batch
from storage.config import LogConfig
from storage.log.log import Log
from storage.log.validator import check_records, validate_append_batches

MIB = 1024 * 1024
RECORD_VALUE_BYTES = 1000
READ_MAX_BYTES = MIB
RESULTS = Path(__file__).resolve().parent / "results" / "storage.json"
TARGET_APPEND_RATIO = 0.70
TARGET_RECOVERY_MB_S = 500.0


def make_batch(target_bytes: int) -> tuple[bytes, int]:
    """An uncompressed batch of 1 KiB-ish records, about ``target_bytes`` long."""
    count = max(1, (target_bytes - 61) // (RECORD_VALUE_BYTES + 12))
    records = [(None, os.urandom(RECORD_VALUE_BYTES), 1_700_000_000_000 + i, ()) for i in
               range(count)]
    return build_batch(records), count


def bench_config() -> LogConfig:
    return LogConfig(max_message_bytes=2 * MIB)


def append_run(root: Path, batch: bytes, n: int, log_first: bool) -> tuple[float, float]:
    """Seconds for (log append of n batches, raw os.write of n batches)."""
    def log_side() -> float:
        log = Log.open(root / "bench-0", bench_config())
        start = time.perf_counter()
        for _ in range(n):
            log.append_as_leader(batch, leader_epoch=0)
        elapsed = time.perf_counter() - start
        log.close()
        return elapsed

    def raw_side() -> float:
        fd = os.open(root / "raw.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        start = time.perf_counter()
        for _ in range(n):
            os.write(fd, batch)
        elapsed = time.perf_counter() - start
        os.close(fd)
        return elapsed

    if log_first:
        log_s = log_side()
        raw_s = raw_side()
    else:
        raw_s = raw_side()
        log_s = log_side()
    shutil.rmtree(root / "bench-0")
    os.unlink(root / "raw.bin")
    return log_s, raw_s


def record_check_cost(root: Path, value_bytes: int, n: int, *, varied: bool = False,
                      batch_bytes: int = 16 * 1024) -> dict[str, float]:
    """Microseconds per ``batch_bytes`` batch of ``value_bytes``-byte records (keyed, distinct;
    with ``varied`` each value's size is drawn from 60 % .. 140 % of it, so record
    layouts differ): the leader's check that every record parses (``check_records``,
    as a leader append runs it with the default timestamp window), the full bulk decode
    the check ran before its fast path (``decode_batch_bulk``; the old check added its
    offset and timestamp comparisons to that), the header +
    CRC validation without it, and a whole leader append (``Log.append_as_leader``, which
    includes the check); measured back to back."""
    rng = random.Random(value_bytes)
    sizes = [rng.randint(value_bytes * 6 // 10, value_bytes * 14 // 10) if varied
             else value_bytes for _ in range(100_000)]
    items = []
    used = 61
    for i, size in enumerate(sizes):
        used += size + 20
        if used > batch_bytes and items:
            break
        items.append((b"key-%06d" % i, os.urandom(size), 1_700_000_000_000, ()))
    count = len(items)
    batch = build_batch(items)
    view = memoryview(batch)
    # the window a leader computes with the default topic config at the records' time:
    # message.timestamp.before.max.ms unbounded, after.max.ms one hour
    window = (-(2**63), 1_700_000_000_000 + 3_600_000)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    for _ in range(n):
        validate_append_batches(view, 2 * MIB, require_records=False)
    timings["header_and_crc_us"] = (time.perf_counter() - start) / n * 1e6
    start = time.perf_counter()
    for _ in range(n):
        check_records(view, 0, count, 0, 64 * MIB, window)
    timings["records_check_us"] = (time.perf_counter() - start) / n * 1e6
    start = time.perf_counter()
    for _ in range(n):
        decode_batch_bulk(view, 0, validate=False)
    timings["full_decode_us"] = (time.perf_counter() - start) / n * 1e6
    log = Log.open(root / "check-0", bench_config())
    start = time.perf_counter()
    for _ in range(n):
        log.append_as_leader(batch, leader_epoch=0)
    timings["full_leader_append_us"] = (time.perf_counter() - start) / n * 1e6
    log.close()
    shutil.rmtree(root / "check-0")
    timings["records_per_batch"] = count
    timings["check_share_of_append"] = (timings["records_check_us"]
                                        / timings["full_leader_append_us"])
    timings["append_without_check_over_with"] = (
        (timings["full_leader_append_us"] - timings["records_check_us"])
        / timings["full_leader_append_us"])
    return timings


def append_breakdown(root: Path, batch: bytes, n: int) -> dict[str, float]:
    """Microseconds per batch of each stage of a leader append, timed separately."""
    view = memoryview(batch)
    patch = bytes(16)
    fd = os.open(root / "raw.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    for _ in range(n):
        os.write(fd, batch)
    raw = time.perf_counter() - start
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    start = time.perf_counter()
    for _ in range(n):
        os.writev(fd, [patch, view[16:]])
    writev = time.perf_counter() - start
    os.close(fd)
    os.unlink(root / "raw.bin")
    start = time.perf_counter()
    for _ in range(n):
        validate_append_batches(view, 2 * MIB, require_records=True)
    validate = time.perf_counter() - start
    log = Log.open(root / "stages-0", bench_config())
    start = time.perf_counter()
    for _ in range(n):
        log.append_as_leader(batch, leader_epoch=0)
    full = time.perf_counter() - start
    log.close()
    shutil.rmtree(root / "stages-0")
    us = 1e6 / n
    return {"raw_os_write_us": raw * us, "os_writev_2_iovecs_us": writev * us,
            "validate_header_and_crc_us": validate * us, "full_append_us": full * us,
            "rest_indexes_and_bookkeeping_us": (full - writev - validate) * us}


def write_log(path: Path, batch: bytes, total_bytes: int) -> Log:
    log = Log.open(path, bench_config())
    for _ in range(max(1, total_bytes // len(batch))):
        log.append_as_leader(batch, leader_epoch=0)
    return log


class _Drain(threading.Thread):
    """Reads and discards everything arriving on a socket (the 'client')."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.received = 0

    def run(self) -> None:
        buf = bytearray(MIB)
        while True:
            n = self.sock.recv_into(buf)
            if n == 0:
                return
            self.received += n


def read_run(log: Log, records_per_batch: int, batch_bytes: int, mode: str) -> tuple[float, int]:
    """Seconds and bytes to read the whole log through FileRegions (``sendfile``/``pread``)."""
    fds: dict[str, int] = {}
    out, inp = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MIB)
    drain = _Drain(inp)
    drain.start()
    buf = bytearray(READ_MAX_BYTES + batch_bytes)
    total = 0
    start = time.perf_counter()
    offset = log.log_start_offset
    end = log.log_end_offset
    while offset < end:
        info = log.read(offset, READ_MAX_BYTES, max_offset=end)
        for region in info.regions:
            fd = fds.get(region.path)
            if fd is None:
                fd = fds[region.path] = os.open(region.path, os.O_RDONLY)
            if mode == "sendfile":
                pos, left = region.position, region.length
                while left:
                    sent = os.sendfile(out.fileno(), fd, pos, left)
                    pos += sent
                    left -= sent
            else:
                got = os.preadv(fd, [memoryview(buf)[: region.length]], region.position)
                assert got == region.length
        total += info.size_in_bytes
        assert info.size_in_bytes % batch_bytes == 0, "bench batches are uniform"
        offset = info.start_offset + (info.size_in_bytes // batch_bytes) * records_per_batch
    out.shutdown(socket.SHUT_WR)
    drain.join()
    elapsed = time.perf_counter() - start
    out.close()
    inp.close()
    for fd in fds.values():
        os.close(fd)
    if mode == "sendfile":
        assert drain.received == total
    return elapsed, total


def crc_pass(log_dir: Path) -> tuple[float, int]:
    """Seconds and bytes for a bare CRC-32C over every segment file (the rescan floor)."""
    buf = bytearray(4 * MIB)
    view = memoryview(buf)
    total = 0
    start = time.perf_counter()
    for path in sorted(log_dir.glob("*.log")):
        fd = os.open(path, os.O_RDONLY)
        pos = 0
        while True:
            n = os.preadv(fd, [view], pos)
            if n == 0:
                break
            crc32c(view[:n])
            pos += n
            total += n
        os.close(fd)
    return time.perf_counter() - start, total


def recovery_run(log_dir: Path) -> tuple[float, Any]:
    start = time.perf_counter()
    log = Log.open(log_dir, bench_config(), recovery_point=0, had_clean_shutdown=False)
    elapsed = time.perf_counter() - start
    report = getattr(log, "recovery_report", None)
    log.close()
    return elapsed, report


def profile_append(root: Path, batch: bytes, n: int) -> str:
    """cProfile of the append loop alone (open/close excluded)."""
    log = Log.open(root / "profile-0", bench_config())
    try:
        return profile(lambda: [log.append_as_leader(batch, leader_epoch=0) for _ in range(n)])
    finally:
        log.close()
        shutil.rmtree(root / "profile-0")


def profile_recovery(log_dir: Path) -> str:
    """cProfile of Log.open(recovery_point=0) alone (close excluded)."""
    opened: list[Log] = []
    text = profile(lambda: opened.append(
        Log.open(log_dir, bench_config(), recovery_point=0, had_clean_shutdown=False)))
    opened[0].close()
    return text


def profile(fn: Callable[[], object], top: int = 14) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--append-mib", type=int, default=128, help="bytes per append run")
    parser.add_argument("--recovery-mib", type=int, default=384)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument("--no-write", action="store_true", help="do not write the JSON")
    args = parser.parse_args()
    load_at_start = list(os.getloadavg())  # other processes share the CPUs and disk
    root = Path(tempfile.mkdtemp(prefix="bench-storage-", dir=args.dir))
    figures: dict[str, Any] = {}
    profiles: dict[str, str] = {}
    try:
        print(f"scratch dir {root}; runs={args.runs}; medians shown\n")
        print(f"{'append':<10}{'batch B':>10}{'log MB/s':>10}{'batches/s':>11}"
              f"{'raw MB/s':>10}{'ratio':>8}{'us/batch':>10}")
        for label, size in (("16KiB", 16 * 1024), ("1MiB", MIB)):
            batch, _ = make_batch(size)
            n = max(1, args.append_mib * MIB // len(batch))
            runs = [append_run(root, batch, n, log_first=i % 2 == 0) for i in range(args.runs)]
            log_s = statistics.median(r[0] for r in runs)
            raw_s = statistics.median(r[1] for r in runs)
            ratio = statistics.median(r[1] / r[0] for r in runs)
            nbytes = n * len(batch)
            row = {
                "batch_bytes": len(batch), "batches": n, "bytes": nbytes,
                "log_mb_s": nbytes / log_s / 1e6, "log_batches_s": n / log_s,
                "raw_mb_s": nbytes / raw_s / 1e6, "raw_batches_s": n / raw_s,
                "log_us_per_batch": log_s / n * 1e6, "raw_us_per_batch": raw_s / n * 1e6,
                "ratio_log_over_raw": ratio, "target_ratio": TARGET_APPEND_RATIO,
                "met": ratio >= TARGET_APPEND_RATIO,
            }
            figures[f"append_{label}"] = row
            print(f"{label:<10}{len(batch):>10}{row['log_mb_s']:>10.0f}"
                  f"{row['log_batches_s']:>11.0f}{row['raw_mb_s']:>10.0f}{ratio:>8.2f}"
                  f"{row['log_us_per_batch']:>10.1f}")
            if not row["met"]:
                stages = [append_breakdown(root, batch, n) for _ in range(args.runs)]
                row["stages_us_per_batch"] = {
                    k: statistics.median(st[k] for st in stages) for k in stages[0]
                }
                print("    stage cost (us/batch, medians): " + ", ".join(
                    f"{k} {v:.1f}" for k, v in row["stages_us_per_batch"].items()))
                profiles[f"append_{label}"] = profile_append(root, batch, n)

        print("\nleader record check (us per batch, medians)")
        for value_bytes, varied, kib in ((100, False, 16), (1024, False, 16), (100, True, 16),
                                         (100, False, 256)):
            checks = [record_check_cost(root, value_bytes, 2000 if kib == 16 else 300,
                                        varied=varied, batch_bytes=kib * 1024)
                      for _ in range(args.runs)]
            row = {k: statistics.median(c[k] for c in checks) for k in checks[0]}
            label = f"{value_bytes}B{'_varied' if varied else ''}{'_256KiB' if kib != 16 else ''}"
            figures[f"record_check_{label}_values"] = row
            print(f"  {label:>11} values, {int(row['records_per_batch'])} records: "
                  f"check {row['records_check_us']:.1f} (full decode "
                  f"{row['full_decode_us']:.1f}), header+CRC "
                  f"{row['header_and_crc_us']:.1f}, whole append "
                  f"{row['full_leader_append_us']:.1f} (check = "
                  f"{row['check_share_of_append']:.0%} of the append)")

        # One log of 16 KiB batches serves the read and the recovery measurements.
        batch, per_batch = make_batch(16 * 1024)
        log_dir = root / "recover-0"
        log = write_log(log_dir, batch, args.recovery_mib * MIB)
        print(f"\n{'read':<10}{'MB/s':>10}{'batches/s':>11}")
        for mode in ("sendfile", "pread"):
            runs_r = [read_run(log, per_batch, len(batch), mode) for _ in range(args.runs)]
            seconds = statistics.median(r[0] for r in runs_r)
            nbytes = runs_r[0][1]
            figures[f"read_{mode}"] = {
                "bytes": nbytes, "max_bytes_per_read": READ_MAX_BYTES,
                "mb_s": nbytes / seconds / 1e6, "batches_s": nbytes / len(batch) / seconds,
            }
            print(f"{mode:<10}{nbytes / seconds / 1e6:>10.0f}"
                  f"{nbytes / len(batch) / seconds:>11.0f}")
        log.close()

        nbytes = sum(p.stat().st_size for p in log_dir.glob("*.log"))
        rec = [recovery_run(log_dir) for _ in range(max(3, args.runs // 2 + 1))]
        crc = [crc_pass(log_dir) for _ in range(3)]
        rec_s = statistics.median(r[0] for r in rec)
        crc_s = statistics.median(c[0] for c in crc)
        report = rec[-1][1]
        rec_mb_s = nbytes / rec_s / 1e6
        figures["recovery"] = {
            "bytes": nbytes, "batch_bytes": len(batch), "runs": len(rec),
            "seconds": rec_s, "mb_s": rec_mb_s, "batches_s": nbytes / len(batch) / rec_s,
            "crc_only_mb_s": nbytes / crc_s / 1e6,
            "ratio_recovery_over_crc_only": crc_s / rec_s,
            "recovery_report": repr(report),
            "target_mb_s": TARGET_RECOVERY_MB_S, "met": rec_mb_s >= TARGET_RECOVERY_MB_S,
        }
        print(f"\n{'recovery':<10}{'MB':>8}{'MB/s':>10}{'batches/s':>11}{'crc-only MB/s':>15}")
        print(f"{'16KiB':<10}{nbytes / 1e6:>8.0f}{rec_mb_s:>10.0f}"
              f"{nbytes / len(batch) / rec_s:>11.0f}{nbytes / crc_s / 1e6:>15.0f}")
        print(f"report: {report!r}")
        if rec_mb_s < TARGET_RECOVERY_MB_S:
            profiles["recovery"] = profile_recovery(log_dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    for name, text in profiles.items():
        print(f"\n--- cProfile of one {name} run (target missed), by tottime ---\n{text}")
    result = {
        "benchmark": "storage",
        "config": {"runs": args.runs, "append_mib_per_run": args.append_mib,
                   "recovery_mib": args.recovery_mib, "record_value_bytes": RECORD_VALUE_BYTES,
                   "log_config": bench_config().to_dict(),
                   "read_method": "Log.read + os.sendfile into an AF_UNIX socketpair drained "
                                  "by a thread; also os.preadv into a reused buffer",
                   "page_cache": "hot (data just written; no fsync in timed loops)"},
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_count": os.cpu_count(), "processor": platform.processor(),
                    "load_average_1_5_15_at_start": load_at_start,
                    "load_average_1_5_15_at_end": list(os.getloadavg())},
        "figures": figures,
        "targets": {"append_ratio_min": TARGET_APPEND_RATIO,
                    "recovery_mb_s_min": TARGET_RECOVERY_MB_S},
        "met": {k: v["met"] for k, v in figures.items() if "met" in v},
        "profiles": profiles,
    }
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
