"""Producer memory under a long per-record run: is RSS bounded by ``buffer_memory``?

One producer process (this one) calls ``Producer.send(topic, value, key=key)`` per
record (acks=all, idempotent, linger 5 ms, default ``batch_size`` 16 KiB and
``batch_max_size`` 256 KiB, ``buffer_memory`` 32 MiB) for ``--records`` records (10M by
default) of a 100 B value with distinct keys (``b"k%d" % i``), into one partition (RF 3,
min ISR 2) of a local cluster (controller + 3 brokers, started and stopped here), then
``flush()``.  The futures are dropped as they are returned (an application that keeps
10M futures keeps them by its own choice).  A thread samples the process's RSS
(psutil) every 0.25 s.

Figures: RSS before the producer is created (the baseline), the peak during the run,
peak minus baseline beside ``buffer_memory``, RSS after the first and the last tenth
of the records (growth over the run), and records/s.  The pool is a shared-memory
segment: its pages count in RSS once touched, so a bounded producer shows a step of
at most ``buffer_memory`` and then a flat line.

Writes ``bench/results/producer_memory.json`` and ``.png`` (matplotlib).  Run:
``python3 -m bench.producer_memory [--records N]`` (about a minute for 10M).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bench import kafka_clients as kc
from bench.cluster_lifecycle import machine_info, running_cluster
from clients.producer.producer import Producer

RESULTS = Path(__file__).resolve().parent / "results"
BUFFER_MEMORY = 32 * 1024 * 1024
SAMPLE_S = 0.25
MiB = 1024 * 1024


class RssSampler(threading.Thread):
    """(seconds since start, RSS bytes) every ``SAMPLE_S`` until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, int]] = []
        self.marks: dict[str, float] = {}
        self._stop_event = threading.Event()
        self._process = psutil.Process()
        self._start = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._start

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.samples.append((self.now(), self._process.memory_info().rss))
            self._stop_event.wait(SAMPLE_S)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)


def measure(bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    value = bytes(100)
    sampler = RssSampler()
    baseline = psutil.Process().memory_info().rss
    sampler.start()
    tenth = max(1, records // 10)
    rss_at: dict[str, int] = {}
    with Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                  buffer_memory=BUFFER_MEMORY) as producer:  # fmt: skip
        sampler.marks["producer created"] = sampler.now()
        start = time.perf_counter()
        send = producer.send
        for i in range(records):
            send(topic, value, key=b"k%d" % i)
            if i == tenth:
                rss_at["after_first_tenth"] = psutil.Process().memory_info().rss
                sampler.marks["first tenth sent"] = sampler.now()
        producer.flush()
        seconds = time.perf_counter() - start
        rss_at["at_the_end"] = psutil.Process().memory_info().rss
        sampler.marks["flushed"] = sampler.now()
        batch_max_size = producer.batch_max_size
    sampler.stop()
    peak = max(rss for _, rss in sampler.samples)
    return {
        "records": records,
        "seconds": seconds,
        "records_per_s": records / seconds,
        "batch_max_size": batch_max_size,
        "rss_baseline_bytes": baseline,
        "rss_peak_bytes": peak,
        "rss_peak_over_baseline_bytes": peak - baseline,
        "rss_after_first_tenth_bytes": rss_at["after_first_tenth"],
        "rss_at_the_end_bytes": rss_at["at_the_end"],
        "growth_after_first_tenth_bytes": rss_at["at_the_end"] - rss_at["after_first_tenth"],
        "peak_over_baseline_minus_buffer_memory_bytes": peak - baseline - BUFFER_MEMORY,
        "samples": sampler.samples,
        "marks": sampler.marks,
    }


def plot(result: dict[str, Any], png: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    run = result["run"]
    fig, axis = plt.subplots(figsize=(8, 4))
    axis.plot([t for t, _ in run["samples"]], [r / MiB for _, r in run["samples"]],
              label="producer process RSS")
    base = run["rss_baseline_bytes"] / MiB
    axis.axhline(base, color="grey", linestyle=":", label="baseline (before the producer)")
    axis.axhline(base + BUFFER_MEMORY / MiB, color="red", linestyle="--",
                 label="baseline + buffer_memory")
    for name, t in run["marks"].items():
        axis.axvline(t, color="#999999", linewidth=0.6)
        axis.text(t, base, name, rotation=90, fontsize=6, va="bottom", ha="right")
    axis.set_xlabel("seconds")
    axis.set_ylabel("MiB")
    axis.legend(fontsize=7, loc="center right")
    fig.suptitle(textwrap.fill(result["api"], 120) + "\n" + textwrap.fill(result["input"], 120),
                 fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="bench-producer-memory-") as root, \
            running_cluster(root, 3) as state:
        topic = kc.Topics(state).fresh("memory")
        run = measure(state.bootstrap, topic, args.records)
    print(f"{run['records']:,} records in {run['seconds']:.1f} s "
          f"({run['records_per_s']:,.0f}/s); RSS baseline {run['rss_baseline_bytes'] / MiB:.1f}"
          f" MiB, peak {run['rss_peak_bytes'] / MiB:.1f} MiB (+"
          f"{run['rss_peak_over_baseline_bytes'] / MiB:.1f} MiB; buffer_memory "
          f"{BUFFER_MEMORY / MiB:.0f} MiB); growth after the first tenth "
          f"{run['growth_after_first_tenth_bytes'] / MiB:+.1f} MiB")
    result = {
        "bench": "producer_memory",
        "api": "Producer.send(topic, value, key=key) per record, then flush(); acks=all, "
               "idempotent, linger_ms 5, batch_size 16 KiB, batch_max_size 256 KiB, "
               "buffer_memory 32 MiB",
        "input": f"{args.records:,} records, 100 B value, distinct keys, one partition "
                 "(RF 3, min ISR 2) of a local 3-broker cluster; RSS of the producer "
                 f"process sampled every {SAMPLE_S} s",
        "buffer_memory_bytes": BUFFER_MEMORY,
        "machine": machine,
        "run": run,
    }
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "producer_memory.json").write_text(json.dumps(result, indent=1) + "\n")
        if not plot(result, RESULTS / "producer_memory.png"):
            print("matplotlib is not installed: no PNG")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
