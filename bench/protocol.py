"""Wire protocol cost per request: Kafka's binary codec on the hot APIs.

Questions and how each is measured (medians of ``--runs`` runs of ``--loops`` calls,
same process):

* **produce**: ``encode_request`` and ``decode_request`` of a Produce request with one
  topic, one partition and 1 KiB of records (the client sends one request per batch), at
  v8 (classic encoding) and v9 (flexible: compact strings, tagged fields).
* **fetch**: ``encode_response`` of a Fetch v12 response whose records are file regions
  (what the broker does before ``sendfile``) and ``decode_response`` of the same with
  16 KiB of records per partition, 1 and 10 partitions.
* **metadata**: a larger body (3 brokers, 10 topics x 3 partitions) at v12, the per-value
  cost of the compiled codec.
* **zero copy**: decode time of a Produce request with 1 MiB of records over the time
  with 1 KiB (target ratio < 1.5: decoding must not touch record bytes).
* **FrameDecoder**: MB/s splitting a stream of 16 KiB frames fed in 64 KiB chunks.
* **the msgpack codec it replaced**: with ``--baseline DIR`` (a checkout of the last
  msgpack-era commit, e.g. ``git worktree add /tmp/msgpack-era c81ca63``), that tree's own
  ``python -m bench.protocol`` runs in a child process in the same run, with the same
  loops, and the ratios new / old are reported per figure (target: no slower, <= 1.0).
  Its bodies are the same shapes at its only version (v0).

Writes ``bench/results/protocol.json``.  Run: ``python -m bench.protocol`` (~20 s).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_request_bytes,
    encode_response,
    encode_response_bytes,
)
from clients.protocol.framing import FrameDecoder

RESULTS = Path(__file__).resolve().parent / "results" / "protocol.json"
TARGET_PRODUCE_US = 10.0
TARGET_ZERO_COPY_RATIO = 1.5
# figure here -> the msgpack-era figure it is compared with
BASELINE_OF = {
    "produce_v8_encode_us": "produce_encode_us",
    "produce_v8_decode_us": "produce_decode_us",
    "produce_v9_encode_us": "produce_encode_us",
    "produce_v9_decode_us": "produce_decode_us",
    "fetch1_encode_us": "fetch1_encode_prefix_us",
    "fetch1_decode_us": "fetch1_decode_us",
    "fetch10_encode_us": "fetch10_encode_prefix_us",
    "fetch10_decode_us": "fetch10_decode_us",
    "metadata_encode_us": "metadata_encode_us",
    "metadata_decode_us": "metadata_decode_us",
    "frame_decoder_MB_s": "frame_decoder_MB_s",
}


class Region:
    """A records value known only by its length, as the broker's file regions are."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length


def per_call_us(fn: Callable[[], Any], loops: int, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - start) / loops * 1e6)
    return statistics.median(samples)


def produce_body(records: bytes) -> dict[str, Any]:
    partitions = [{"index": 0, "records": records}]
    return {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
            "topics": [{"name": "events", "partitions": partitions}]}


def fetch_body(partitions: int, records: Any) -> dict[str, Any]:
    parts = [{"partition_index": i, "error_code": 0, "high_watermark": 1000,
              "last_stable_offset": 1000, "log_start_offset": 0, "records": records}
             for i in range(partitions)]  # fmt: skip
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
            "responses": [{"name": "events", "partitions": parts}]}


def metadata_body() -> dict[str, Any]:
    brokers = [{"node_id": i, "host": "127.0.0.1", "port": 9092 + i, "rack": None}
               for i in range(3)]
    topics = [{"error_code": 0, "name": f"topic-{t}", "is_internal": False, "partitions": [
        {"error_code": 0, "partition_index": p, "leader_id": p % 3, "leader_epoch": 4,
         "replica_nodes": [0, 1, 2], "isr_nodes": [0, 1, 2], "offline_replicas": []}
        for p in range(3)]} for t in range(10)]  # fmt: skip
    return {"brokers": brokers, "cluster_id": "bench", "controller_id": 0, "topics": topics}


def run(loops: int, runs: int) -> dict[str, float]:
    def t(fn: Callable[[], Any], n: int = loops) -> float:
        return per_call_us(fn, n, runs)

    fig: dict[str, float] = {}
    small = produce_body(b"r" * 1024)
    for version in (8, 9):
        req = encode_request_bytes(ApiKey.PRODUCE, version, 1, "bench", small)
        view = memoryview(req)[4:]
        fig[f"produce_v{version}_encode_us"] = t(
            lambda v=version: encode_request(ApiKey.PRODUCE, v, 1, "bench", small))  # type: ignore[misc]
        fig[f"produce_v{version}_decode_us"] = t(lambda w=view: decode_request(w))  # type: ignore[misc]
    big = encode_request_bytes(ApiKey.PRODUCE, 9, 1, "bench", produce_body(b"r" * 2**20))
    big_view = memoryview(big)[4:]
    fig["produce_decode_1MiB_us"] = t(lambda: decode_request(big_view))
    fig["produce_decode_1KiB_us"] = fig["produce_v9_decode_us"]
    for n in (1, 10):
        regions = fetch_body(n, Region(16384))
        resp = memoryview(encode_response_bytes(ApiKey.FETCH, 12, 1,
                                                fetch_body(n, b"x" * 16384)))[4:]
        fig[f"fetch{n}_encode_us"] = t(
            lambda r=regions: encode_response(ApiKey.FETCH, 12, 1, r))  # type: ignore[misc]
        fig[f"fetch{n}_decode_us"] = t(
            lambda r=resp: decode_response(r, ApiKey.FETCH, 12))  # type: ignore[misc]
    md = metadata_body()
    md_payload = memoryview(encode_response_bytes(ApiKey.METADATA, 12, 1, md))[4:]
    few = max(1, loops // 10)
    fig["metadata_encode_us"] = t(lambda: encode_response(ApiKey.METADATA, 12, 1, md), few)
    fig["metadata_decode_us"] = t(lambda: decode_response(md_payload, ApiKey.METADATA, 12), few)
    stream = encode_request_bytes(ApiKey.PRODUCE, 9, 1, "b", produce_body(b"z" * 16384)) * 256
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]

    def split_all() -> None:
        dec = FrameDecoder()
        for c in chunks:
            dec.feed(c)

    fig["frame_decoder_MB_s"] = len(stream) / per_call_us(split_all, 5, runs)  # bytes/us = MB/s
    return fig


def run_baseline(tree: Path, loops: int, runs: int) -> dict[str, float]:
    """The msgpack-era tree's own protocol benchmark, in a child process, now."""
    results = tree / "bench" / "results" / "protocol.json"
    saved = results.read_bytes() if results.exists() else None
    try:
        subprocess.run([sys.executable, "-m", "bench.protocol", "--loops", str(loops),
                        "--runs", str(runs)], cwd=tree, check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(tree)}, timeout=600)
        figures: dict[str, float] = json.loads(results.read_text())["figures"]
    finally:
        if saved is not None:
            results.write_bytes(saved)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None,
                        help="checkout of the msgpack-era code to compare with, in this run")
    args = parser.parse_args()
    fig = run(args.loops, args.runs)
    baseline = run_baseline(args.baseline, args.loops, args.runs) if args.baseline else {}
    ratio = {"decode_1MiB_vs_1KiB": fig["produce_decode_1MiB_us"] / fig["produce_decode_1KiB_us"]}
    for ours, theirs in BASELINE_OF.items():
        if theirs in baseline:
            # for times new/old (<= 1 is no slower); for MB/s old/new, the same sense
            if ours.endswith("_us"):
                ratio[f"{ours}_vs_msgpack"] = fig[ours] / baseline[theirs]
            else:
                ratio[f"{ours}_vs_msgpack"] = baseline[theirs] / fig[ours]
    targets = {
        "produce_v9_encode_us < 10": fig["produce_v9_encode_us"] < TARGET_PRODUCE_US,
        "produce_v9_decode_us < 10": fig["produce_v9_decode_us"] < TARGET_PRODUCE_US,
        "decode_1MiB_vs_1KiB < 1.5": ratio["decode_1MiB_vs_1KiB"] < TARGET_ZERO_COPY_RATIO,
    }
    if baseline:
        # the codec's figures; the FrameDecoder is the same code in both eras
        targets["codec no slower than msgpack (encode/decode ratios <= 1.0)"] = all(
            v <= 1.0 for k, v in ratio.items()
            if k.endswith("_vs_msgpack") and not k.startswith("frame_decoder"))
    print(f"{'figure':34} {'median':>12} {'msgpack era':>12}")
    for k, v in fig.items():
        old = baseline.get(BASELINE_OF.get(k, ""), None)
        print(f"{k:34} {v:12.2f} {'' if old is None else f'{old:12.2f}'}")
    for k, v in ratio.items():
        print(f"{k:34} {v:11.2f}x")
    for k, ok in targets.items():
        print(f"target {k:40} {'met' if ok else 'NOT MET'}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "config": {"loops": args.loops, "runs": args.runs, "statistic": "median",
                   "api": "clients.protocol.codec encode_request/decode_request/"
                          "encode_response/decode_response",
                   "inputs": "Produce 1 topic x 1 partition, 1 KiB records (v8, v9) and 1 MiB; "
                             "Fetch v12 1 and 10 partitions x 16 KiB (regions on encode); "
                             "Metadata v12 3 brokers, 10 topics x 3 partitions",
                   "baseline": str(args.baseline) if args.baseline else None},
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_count": os.cpu_count(), "processor": platform.processor()},
        "figures": fig, "msgpack_era_figures": baseline, "ratios": ratio, "targets": targets,
    }, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
