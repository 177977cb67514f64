"""Record batch codec throughput: per-record path vs numpy bulk path, and CRC-32C speed.

Question: how many records per second can one core encode into / decode from Kafka
RecordBatch v2, with values of 100 B and 1 KiB, and how much does the vectorised bulk
path gain over the per-record path?  Encode includes header + CRC-32C; decode includes
validation (CRC).  Bulk decode is measured on both of its paths: the layout-run fast
path (timestamps increasing, the producer case) and the general path (random
timestamps, so record layouts differ).  Each figure is the median of REPEATS timed runs
measured in this one process; ratios compare figures from the same run.  The load
average is recorded: on a shared 2-core machine other processes slow every figure alike
(the ratios hold up better than the absolute numbers).

Compression: for one 16 KiB batch (the producer's default batch size; ~150 JSON-like
records of ~100 B, compressible as real payloads are) and each codec, the compressed size,
building it (per record and bulk), decoding it (per record and bulk, decompression
included), the codec alone, and the broker's append validation
(``validate_append_batches`` as a leader append: CRC, header, and for a compressed batch
decompression plus a record parse) against the same batch uncompressed.

Run: ``python bench/record_codec.py [--quick]``; writes bench/results/record_codec.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from crc32c import crc32c

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clients.records.batch import HEADER_SIZE
from clients.records.bulk_decode import decode_batch_bulk
from clients.records.bulk_encode import encode_batch_bulk
from clients.records.compression import codec_name, decompress
from clients.records.record import build_batch, decode_batch
from storage.log.validator import validate_append_batches

REPEATS = 7
TARGET_ENCODE = 1_000_000  # bulk encode records/s at 100 B values
TARGET_DECODE = 2_000_000  # bulk decode records/s at 100 B values


def median_seconds(fn: Callable[[], object], budget_s: float) -> tuple[float, float]:
    """Median seconds per call over REPEATS runs, and minor page faults per call."""
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    loops = max(1, int(budget_s / REPEATS / once))
    samples = []
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - start) / loops)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0) / (REPEATS * loops)
    return statistics.median(samples), faults


def bench_case(records: int, value_bytes: int, budget_s: float) -> dict[str, object]:
    rng = np.random.default_rng(records * 7919 + value_bytes)
    values = [rng.bytes(value_bytes) for _ in range(records)]
    ts_increasing = 1_700_000_000_000 + np.arange(records, dtype=np.int64)
    ts_random = rng.integers(1_700_000_000_000, 1_700_000_000_000 + (1 << 30), records)
    tuples = [(None, v, int(t), ()) for v, t in zip(values, ts_increasing, strict=True)]
    batch = build_batch(tuples)
    batch_random = encode_batch_bulk(values, None, ts_random)
    assert encode_batch_bulk(values, None, ts_increasing) == batch
    cases: dict[str, Callable[[], object]] = {
        "encode_per_record": lambda: build_batch(tuples),
        "encode_bulk": lambda: encode_batch_bulk(values, None, ts_increasing),
        "encode_bulk_random_ts": lambda: encode_batch_bulk(values, None, ts_random),
        "decode_per_record": lambda: decode_batch(batch),
        "decode_bulk": lambda: decode_batch_bulk(batch),
        "decode_bulk_random_ts": lambda: decode_batch_bulk(batch_random),
    }
    out: dict[str, object] = {"records_per_batch": records, "value_bytes": value_bytes,
                              "batch_bytes": len(batch)}
    for name, fn in cases.items():
        seconds, faults = median_seconds(fn, budget_s)
        out[name] = {
            "records_per_s": records / seconds,
            "us_per_record": seconds / records * 1e6,
            "mb_per_s": len(batch) / seconds / 1e6,
            "page_faults_per_batch": faults,
        }
    for op in ("encode", "decode"):
        bulk = out[f"{op}_bulk"]["records_per_s"]  # type: ignore[index]
        per = out[f"{op}_per_record"]["records_per_s"]  # type: ignore[index]
        out[f"{op}_speedup_bulk_vs_per_record"] = bulk / per
    return out


def json_like_values(target_bytes: int, rng: np.random.Generator) -> list[bytes]:
    """~100-byte JSON-like records (repeated field names, small vocabulary, numbers)
    adding up to about ``target_bytes`` once encoded."""
    users = [f"user-{i:04d}" for i in range(200)]
    actions = ["view", "click", "add_to_cart", "purchase", "logout"]
    values: list[bytes] = []
    size = 0
    while size < target_bytes - 120:
        i = len(values)
        value = (f'{{"id":{1_000_000 + i},"user":"{users[rng.integers(200)]}",'
                 f'"action":"{actions[rng.integers(5)]}","price":{rng.integers(1, 10_000) / 100},'
                 f'"ts":{1_700_000_000_000 + i}}}').encode()
        values.append(value)
        size += len(value) + 8  # record overhead: length, attributes, deltas, lengths
    return values


def bench_compressed(budget_s: float, batch_bytes: int = 16 << 10) -> dict[str, object]:
    """Per codec, microseconds for one ``batch_bytes`` batch (uncompressed size)."""
    values = json_like_values(batch_bytes, np.random.default_rng(16))
    ts = 1_700_000_000_000 + np.arange(len(values), dtype=np.int64)
    tuples = [(None, v, int(t), ()) for v, t in zip(values, ts, strict=True)]
    plain = build_batch(tuples)
    out: dict[str, object] = {"records": len(values), "uncompressed_batch_bytes": len(plain)}
    for codec in range(5):
        batch = build_batch(tuples, compression=codec)
        assert encode_batch_bulk(values, None, ts, compression=codec) == batch
        assert decode_batch_bulk(batch).to_records() == decode_batch(plain)
        view = memoryview(batch)
        body = view[HEADER_SIZE:]
        cases: dict[str, Callable[[], object]] = {
            "build_per_record": lambda c=codec: build_batch(tuples, compression=c),  # type: ignore[misc]
            "encode_bulk": lambda c=codec: encode_batch_bulk(values, None, ts, compression=c),  # type: ignore[misc]
            "decode_per_record": lambda b=batch: decode_batch(b),  # type: ignore[misc]
            "decode_bulk": lambda b=batch: decode_batch_bulk(b),  # type: ignore[misc]
            "decompress_only": lambda c=codec, b=body: decompress(c, b),  # type: ignore[misc]
            "broker_validate": lambda v=view: validate_append_batches(  # type: ignore[misc]
                v, 2 << 20, require_records=True),
        }
        figures: dict[str, float] = {"batch_bytes": len(batch),
                                     "ratio": len(plain) / len(batch)}
        for name, fn in cases.items():
            seconds, _ = median_seconds(fn, budget_s)
            figures[f"{name}_us"] = seconds * 1e6
        out[codec_name(codec)] = figures
    none = out["none"]["broker_validate_us"]  # type: ignore[index]
    for codec in range(1, 5):
        f = out[codec_name(codec)]
        f["broker_validate_vs_none"] = f["broker_validate_us"] / none  # type: ignore[index]
    return out


def bench_crc(size: int, budget_s: float) -> dict[str, float]:
    data = np.random.default_rng(1).bytes(size)
    seconds, _ = median_seconds(lambda: crc32c(data), budget_s)
    return {"bytes": size, "gb_per_s": size / seconds / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (smoke test)")
    args = parser.parse_args()
    budget = 0.1 if args.quick else 1.2
    load_before = os.getloadavg()
    shapes = [(1000, 100), (100, 100), (1000, 1024), (100, 1024)]
    results = [bench_case(n, size, budget) for n, size in shapes]
    crc = [bench_crc(size, budget) for size in (16 << 10, 1 << 20)]
    compressed = bench_compressed(budget)

    print(f"{'records':>7} {'value':>6} {'op':<24} {'records/s':>12} {'us/record':>10} "
          f"{'MB/s':>8} {'faults':>7}")
    for r in results:
        for name in ("encode_per_record", "encode_bulk", "encode_bulk_random_ts",
                     "decode_per_record", "decode_bulk", "decode_bulk_random_ts"):
            f = r[name]
            print(f"{r['records_per_batch']:>7} {r['value_bytes']:>6} {name:<24} "
                  f"{f['records_per_s']:>12,.0f} {f['us_per_record']:>10.3f} "  # type: ignore[index]
                  f"{f['mb_per_s']:>8.0f} {f['page_faults_per_batch']:>7.0f}")  # type: ignore[index]
        print(f"{'':>15}bulk vs per-record: encode x{r['encode_speedup_bulk_vs_per_record']:.1f}"
              f", decode x{r['decode_speedup_bulk_vs_per_record']:.1f}")
    for c in crc:
        print(f"CRC-32C over {c['bytes']:>8} bytes: {c['gb_per_s']:.2f} GB/s")
    print(f"one {compressed['uncompressed_batch_bytes']}-byte batch of "
          f"{compressed['records']} JSON-like records, microseconds per batch:")
    print(f"{'codec':<7} {'bytes':>6} {'ratio':>5} {'build':>7} {'enc bulk':>8} "
          f"{'decode':>7} {'dec bulk':>8} {'codec':>7} {'validate':>8}")
    for codec in range(5):
        f = compressed[codec_name(codec)]
        print(f"{codec_name(codec):<7} {f['batch_bytes']:>6} {f['ratio']:>5.1f} "  # type: ignore[index]
              f"{f['build_per_record_us']:>7.1f} {f['encode_bulk_us']:>8.1f} "  # type: ignore[index]
              f"{f['decode_per_record_us']:>7.1f} {f['decode_bulk_us']:>8.1f} "  # type: ignore[index]
              f"{f['decompress_only_us']:>7.1f} {f['broker_validate_us']:>8.1f}")  # type: ignore[index]

    load_after = os.getloadavg()
    print(f"load average (1/5/15 min) before {load_before}, after {load_after} on "
          f"{os.cpu_count()} CPUs: figures are only comparable when it is below the CPU count")
    main_case = results[0]
    enc = main_case["encode_bulk"]["records_per_s"]  # type: ignore[index]
    dec = main_case["decode_bulk"]["records_per_s"]  # type: ignore[index]
    targets = {
        "bulk_encode_records_per_s_100B": {"target": TARGET_ENCODE, "measured": enc,
                                           "met": enc >= TARGET_ENCODE,
                                           "at": "1000 records/batch, increasing timestamps"},
        "bulk_decode_records_per_s_100B": {"target": TARGET_DECODE, "measured": dec,
                                           "met": dec >= TARGET_DECODE,
                                           "at": "1000 records/batch, increasing timestamps"},
    }
    for name, t in targets.items():
        print(f"target {name}: {t['measured']:,.0f} vs {t['target']:,} -> "
              f"{'met' if t['met'] else 'MISSED'}")
    report = {
        "benchmark": "record_codec",
        "config": {"repeats": REPEATS, "budget_s_per_case": budget, "shapes": shapes,
                   "keys": "null", "headers": "none", "decode_validates_crc": True,
                   "statistic": "median seconds per batch over repeats"},
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_count": os.cpu_count(), "processor": platform.processor(),
                    "numpy": np.__version__, "load_average_before": load_before,
                    "load_average_after": load_after},
        "results": results,
        "crc32c": crc,
        "compressed_16KiB_batch": compressed,
        "targets": targets,
    }
    out = Path(__file__).resolve().parent / "results" / "record_codec.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
