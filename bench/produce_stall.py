"""Can one Produce stall a broker's event loop?  Other clients' latency during heavy ones.

The attack of issue 30 item 7: one Produce carrying zstd batches of 1,000,000 tiny
records each (here values of 0 or 1 byte: 932 KiB on the wire, 9 MiB inflated, per
batch).
Before the fix the leader's record check ran on the event loop whatever the batch
claimed (reported: 1 batch 0.6 s and +228 MiB RSS, 4 batches 1.55 s).  Also two
requests within the default bounds that take the record check's slow paths
(``storage.log.validator``): 4 batches of 65,536 records with 3 record headers each, and
4 batches of 1 record with 262,143 headers each (each about the whole
``max_produce_records`` budget of 1,048,576 records + headers).

Per scenario and round: a fresh standalone broker (``python -m broker start``, one
network process) with a topic of 4 partitions, running this checkout's code and, with
``--base REV``, that commit's too (``git archive`` into a temporary directory: a before
and an after on the same machine); one Produce (acks=1, v9, one batch per partition) on
a connection of its own, while a spawned process pings the broker with ApiVersions every
~1 ms on another connection (``tests.broker.raw_kafka.LoopProbe``).  Recorded: the time
the leader took to answer the Produce, the ApiVersions round trips sent meanwhile
(median and max), the partitions' error codes, and the broker main process's RSS
(psutil) before, at its peak (sampled every 5 ms) and after.  Medians over ``--rounds``.

Writes ``bench/results/produce_stall.json`` and ``.png``.  Run:
``python3 -m bench.produce_stall [--rounds 3] [--base 0ac3ad3]`` (about 1 minute per
code and round on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from bench.plotting import figure, save
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response
from clients.records.bulk_encode import encode_batch_bulk
from clients.records.compression import ZSTD
from clients.records.record import build_batch
from tests.broker.raw_kafka import LoopProbe, connect, recv_frame, request

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PRODUCE_V = 9
PARTITIONS = 4
_LISTENING = re.compile(r"listening on [\d.]+:(\d+)")


def tiny_batch(n: int) -> bytes:
    """``n`` records whose values alternate between empty and 1 byte (no key, one
    timestamp; the layouts differ record to record, so the check takes its per-record
    path), zstd: the issue's batch."""
    values = [b"", b"x"] * (n // 2)
    return encode_batch_bulk(values, timestamps=int(time.time() * 1000), compression=ZSTD)


def headers_batch(n: int, headers: int) -> bytes:
    """``n`` records of a 1-byte value with ``headers`` record headers each, zstd."""
    now = int(time.time() * 1000)
    hs = tuple((f"h{j}", b"x") for j in range(headers))
    return build_batch(((None, b"v", now, hs) for _ in range(n)), compression=ZSTD)


SCENARIOS: dict[str, Callable[[], list[bytes]]] = {
    "1 x 1,000,000 tiny records": lambda: [tiny_batch(1_000_000)],
    "4 x 1,000,000 tiny records": lambda: [tiny_batch(1_000_000)] * 4,
    "4 x 65,536 records x 3 headers": lambda: [headers_batch(65_536, 3)] * 4,
    "4 x 1 record x 262,143 headers": lambda: [headers_batch(1, 262_143)] * 4,
}


@contextmanager
def broker(code: Path, data_dir: Path) -> Iterator[tuple[int, psutil.Process]]:
    """A standalone broker of checkout ``code`` with topic ``t`` (4 partitions)."""
    (data_dir / "topics.json").write_text(json.dumps({"version": 1, "topics": {
        "t": {"num_partitions": PARTITIONS, "replication_factor": 1, "configs": {}}}}))
    cmd = [sys.executable, "-m", "broker", "start", "--port", "0", "--data-dir",
           str(data_dir), "--log-level", "WARNING"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONPATH=str(code)), cwd=code)
    main = psutil.Process(proc.pid)
    children: list[psutil.Process] = []
    try:
        assert proc.stdout is not None
        port = 0
        for line in proc.stdout:
            if match := _LISTENING.search(line):
                port = int(match.group(1))
                break
        if not port:
            raise SystemExit(f"the broker of {code} did not start")
        threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
        children = main.children(recursive=True)
        yield port, main
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for child in children:
            try:
                child.wait(5)
            except psutil.NoSuchProcess:
                pass
            except psutil.TimeoutExpired:
                child.kill()


def one_round(code: Path, batches: list[bytes]) -> dict[str, Any]:
    frame = request(ApiKey.PRODUCE, PRODUCE_V, {
        "transactional_id": None, "acks": 1, "timeout_ms": 30_000, "topics": [
            {"name": "t", "partitions": [{"index": i % PARTITIONS, "records": b}
                                         for i, b in enumerate(batches)]}]})
    with tempfile.TemporaryDirectory(prefix="produce-stall-") as tmp, \
            broker(code, Path(tmp)) as (port, main):
        rss_before = main.memory_info().rss
        peak = [rss_before]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                try:
                    peak[0] = max(peak[0], main.memory_info().rss)
                except psutil.NoSuchProcess:
                    return
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        with connect(port, timeout_s=120) as sock, LoopProbe(port) as probe:
            time.sleep(0.3)  # the probe's first pings: the idle latency
            sampler.start()
            started = time.time()
            t0 = time.perf_counter()
            sock.sendall(frame)
            answer = recv_frame(sock)
            took = time.perf_counter() - t0
            ended = time.time()
            time.sleep(0.1)
            probe.stop()
        sampling.set()
        sampler.join()
        rss_after = main.memory_info().rss
    body = decode_response(answer, ApiKey.PRODUCE, PRODUCE_V).body
    codes = [p["error_code"] for t in body["responses"] for p in t["partition_responses"]]
    pings = [s for t, s in probe.samples if started - 0.01 <= t <= ended + 0.05]
    idle = [s for t, s in probe.samples if t < started - 0.01]
    return {"answer_s": took, "error_codes": codes,
            "pings_during": len(pings),
            "api_versions_median_ms": 1000 * statistics.median(pings) if pings else None,
            "api_versions_max_ms": 1000 * max(pings) if pings else None,
            "api_versions_idle_median_ms": 1000 * statistics.median(idle) if idle else None,
            "rss_peak_growth_mib": (peak[0] - rss_before) / 2**20,
            "rss_growth_mib": (rss_after - rss_before) / 2**20,
            "request_bytes": len(frame)}


def commit_of(rev: str = "HEAD") -> str:
    """``rev``'s short hash in this checkout (+changes: HEAD with uncommitted edits)."""
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev],
                         capture_output=True, text=True, check=True).stdout.strip()
    if rev == "HEAD" and subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True).stdout.strip():
        out += "+changes"
    return out


def export(rev: str, target: Path) -> None:
    """Commit ``rev`` of this repository's files into ``target`` (git archive)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)


def plot(result: dict[str, Any], png: Path) -> bool:
    made = figure(3, (15, 4.5))
    if made is None:
        return False
    plt, fig, axes = made
    names = list(next(iter(result["codes"].values()))["scenarios"])
    codes = list(result["codes"])
    width = 0.8 / len(codes)
    panels = (("api_versions_max_ms", "other client's ApiVersions during it, max ms", True),
              ("answer_ms", "leader's answer to the Produce, ms", True),
              ("rss_peak_growth_mib", "broker RSS at its peak, + MiB", False))
    for k, code in enumerate(codes):
        rows = result["codes"][code]["scenarios"]
        xs = [i + (k - (len(codes) - 1) / 2) * width for i in range(len(names))]
        label = f"{code} ({result['codes'][code]['commit']})"
        for axis, (key, _, _) in zip(axes, panels, strict=True):
            values = [rows[n]["answer_s"] * 1000 if key == "answer_ms" else rows[n][key] or 0
                      for n in names]
            axis.bar(xs, values, width, label=label)
    for axis, (_, title, log_scale) in zip(axes, panels, strict=True):
        axis.set_xticks(range(len(names)), [textwrap.fill(n, 20) for n in names], fontsize=7)
        axis.set_title(title, fontsize=9)
        if log_scale:
            axis.set_yscale("log")
        axis.legend(fontsize=7)
    fig.suptitle(f"{result['api']}\n{result['input']}", fontsize=7)
    return save(plt, fig, png)


def run_code(code: Path, label: str, names: list[str], built: dict[str, list[bytes]],
             rounds: int) -> dict[str, Any]:
    """Every scenario against brokers of ``code``: medians over ``rounds`` rounds."""
    rows: dict[str, Any] = {}
    for name in names:
        runs = [one_round(code, built[name]) for _ in range(rounds)]
        row: dict[str, Any] = {
            key: statistics.median(r[key] for r in runs if r[key] is not None)
            for key in ("answer_s", "api_versions_median_ms", "api_versions_max_ms",
                        "api_versions_idle_median_ms", "rss_peak_growth_mib",
                        "rss_growth_mib")}
        row["error_codes"] = runs[0]["error_codes"]
        row["request_bytes"] = runs[0]["request_bytes"]
        row["runs"] = runs
        rows[name] = row
        print(f"{label}: {name}: answered in {row['answer_s'] * 1000:.0f} ms "
              f"(codes {row['error_codes']}), ApiVersions median "
              f"{row['api_versions_median_ms']:.1f} ms max "
              f"{row['api_versions_max_ms']:.1f} ms, RSS peak "
              f"+{row['rss_peak_growth_mib']:.0f} MiB", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base", help="also run this commit's broker (a before)")
    ap.add_argument("--scenario", action="append", choices=list(SCENARIOS))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    names = args.scenario or list(SCENARIOS)
    built = {name: SCENARIOS[name]() for name in names}
    result: dict[str, Any] = {
        "api": "raw Produce v9 (acks=1, one zstd batch per partition) to `python -m broker "
               "start`, while a spawned client pings ApiVersions every ~1 ms",
        "input": f"rounds per scenario: {args.rounds}, a fresh broker each; medians; the "
                 "scenarios' names say the batches (one per partition)",
        "python": platform.python_version(), "cpus": os.cpu_count(), "codes": {}}
    with tempfile.TemporaryDirectory(prefix="produce-stall-base-") as base:
        codes = [("this checkout", ROOT, commit_of())]
        if args.base:
            export(args.base, Path(base))
            codes.insert(0, ("base", Path(base), commit_of(args.base)))
        for label, code, commit in codes:
            result["codes"][label] = {"commit": commit,
                                      "scenarios": run_code(code, label, names, built,
                                                            args.rounds)}
    result["load_avg"] = os.getloadavg()
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / "produce_stall.json"
        out.write_text(json.dumps(result, indent=2))
        drew = plot(result, out.with_suffix(".png"))
        print(f"wrote {out}" + (" and its .png" if drew else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
