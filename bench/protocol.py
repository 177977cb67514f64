"""Wire protocol cost per request: encode/decode of the hot APIs vs bare msgpack.

Questions and how each is measured (medians of ``--runs`` runs of ``--loops`` calls,
same process):

* **produce**: ``encode_request`` and ``decode_request`` of a Produce v0 request with
  one topic and one partition (the client sends one request per batch).  Target: each
  under 10 us (the lead's "a few microseconds is fine, tens is not").
* **fetch**: ``encode_response_prefix`` (Records as file-region lengths, as the broker
  does before sendfile) and ``decode_response`` of a Fetch v0 response, 1 and 10
  partitions.
* **metadata**: a larger body (3 brokers, 10 topics x 3 partitions) to show the per-value
  cost of schema validation.
* **bare msgpack**: ``msgpack.packb`` / ``unpackb`` of the same meta, so the ratio
  ours / bare shows what framing + validation add on top of the C codec.
* **zero copy**: decode time of a Produce request with 1 MiB of records over the time
  with 1 KiB (target ratio < 1.5: decoding must not touch record bytes).
* **FrameDecoder**: MB/s splitting a stream of 16 KiB frames fed in 64 KiB chunks.

Writes ``bench/results/protocol.json``.  Run: ``python -m bench.protocol`` (~20 s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import (
    RecordsRef,
    decode_request,
    decode_response,
    encode_request,
    encode_request_bytes,
    encode_response_bytes,
    encode_response_prefix,
)
from clients.protocol.framing import FrameDecoder

RESULTS = Path(__file__).resolve().parent / "results" / "protocol.json"
TARGET_PRODUCE_US = 10.0
TARGET_ZERO_COPY_RATIO = 1.5


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
    return {
        "acks": -1,
        "timeout_ms": 30000,
        "topics": [{"name": "events", "partitions": partitions}],
    }


def fetch_body(partitions: int, records: Any) -> dict[str, Any]:
    parts = [{"partition_index": i, "error_code": 0, "high_watermark": 1000, "records": records}
             for i in range(partitions)]  # fmt: skip
    return {"responses": [{"name": "events", "partitions": parts}]}


def metadata_body() -> dict[str, Any]:
    brokers = [{"node_id": i, "host": "127.0.0.1", "port": 9092 + i} for i in range(3)]
    topics = [{"error_code": 0, "name": f"topic-{t}", "partitions": [
        {"error_code": 0, "partition_index": p, "leader_id": p % 3, "leader_epoch": 4,
         "replica_nodes": [0, 1, 2], "isr_nodes": [0, 1, 2]} for p in range(3)]}
        for t in range(10)]  # fmt: skip
    return {"brokers": brokers, "controller_id": 0, "topics": topics}


def meta_of(frame: bytes) -> bytes:
    (meta_length,) = struct.unpack_from(">I", frame, 4)
    return frame[8 : 8 + meta_length]


def run(loops: int, runs: int) -> dict[str, Any]:
    def t(fn: Callable[[], Any], n: int = loops) -> float:
        return per_call_us(fn, n, runs)

    fig: dict[str, float] = {}
    small = produce_body(b"r" * 1024)
    req = encode_request_bytes(ApiKey.PRODUCE, 0, 1, "bench", small)
    fig["produce_encode_us"] = t(lambda: encode_request(ApiKey.PRODUCE, 0, 1, "bench", small))
    fig["produce_decode_us"] = t(lambda: decode_request(req[4:]))
    meta = meta_of(req)
    obj = msgpack.unpackb(meta)
    fig["produce_bare_pack_us"] = t(lambda: msgpack.packb(obj, use_bin_type=True))
    fig["produce_bare_unpack_us"] = t(lambda: msgpack.unpackb(meta, raw=False))
    big = encode_request_bytes(ApiKey.PRODUCE, 0, 1, "bench", produce_body(b"r" * 2**20))
    big_view = memoryview(big)[4:]
    small_view = memoryview(req)[4:]
    fig["produce_decode_1KiB_us"] = t(lambda: decode_request(small_view))
    fig["produce_decode_1MiB_us"] = t(lambda: decode_request(big_view))
    for n in (1, 10):
        ref = fetch_body(n, RecordsRef(16384))
        resp = encode_response_bytes(ApiKey.FETCH, 0, 1, fetch_body(n, b"x" * 16384))[4:]
        fig[f"fetch{n}_encode_prefix_us"] = t(lambda r=ref: encode_response_prefix(  # type: ignore[misc]
            ApiKey.FETCH, 0, 1, r))  # fmt: skip
        fig[f"fetch{n}_decode_us"] = t(lambda r=resp: decode_response(r, ApiKey.FETCH, 0))  # type: ignore[misc]
    md = metadata_body()
    md_frame = encode_response_bytes(ApiKey.METADATA, 0, 1, md)
    md_meta = meta_of(md_frame)
    md_obj = msgpack.unpackb(md_meta)
    md_payload = md_frame[4:]
    few = loops // 10
    fig["metadata_encode_us"] = t(lambda: encode_response_bytes(ApiKey.METADATA, 0, 1, md), few)
    fig["metadata_decode_us"] = t(lambda: decode_response(md_payload, ApiKey.METADATA, 0), few)
    fig["metadata_bare_pack_us"] = t(lambda: msgpack.packb(md_obj, use_bin_type=True), few)
    fig["metadata_bare_unpack_us"] = t(lambda: msgpack.unpackb(md_meta, raw=False), few)
    stream = encode_request_bytes(ApiKey.PRODUCE, 0, 1, "b", produce_body(b"z" * 16384)) * 256
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]

    def split_all() -> None:
        dec = FrameDecoder()
        for c in chunks:
            dec.feed(c)

    fig["frame_decoder_MB_s"] = len(stream) / per_call_us(split_all, 5, runs)  # bytes/us = MB/s
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    fig = run(args.loops, args.runs)
    ratio = {
        "produce_decode_vs_bare_unpack": fig["produce_decode_us"] / fig["produce_bare_unpack_us"],
        "produce_encode_vs_bare_pack": fig["produce_encode_us"] / fig["produce_bare_pack_us"],
        "metadata_decode_vs_bare_unpack": fig["metadata_decode_us"]
        / fig["metadata_bare_unpack_us"],
        "metadata_encode_vs_bare_pack": fig["metadata_encode_us"] / fig["metadata_bare_pack_us"],
        "decode_1MiB_vs_1KiB": fig["produce_decode_1MiB_us"] / fig["produce_decode_1KiB_us"],
    }
    targets = {
        "produce_encode_us < 10": fig["produce_encode_us"] < TARGET_PRODUCE_US,
        "produce_decode_us < 10": fig["produce_decode_us"] < TARGET_PRODUCE_US,
        "decode_1MiB_vs_1KiB < 1.5": ratio["decode_1MiB_vs_1KiB"] < TARGET_ZERO_COPY_RATIO,
    }
    print(f"{'figure':34} {'median':>12}")
    for k, v in fig.items():
        print(f"{k:34} {v:12.2f}")
    for k, v in ratio.items():
        print(f"{k:34} {v:11.2f}x")
    for k, ok in targets.items():
        print(f"target {k:27} {'met' if ok else 'NOT MET'}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "config": {"loops": args.loops, "runs": args.runs, "statistic": "median"},
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_count": os.cpu_count(), "processor": platform.processor()},
        "figures": fig, "ratios": ratio, "targets": targets,
    }, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
