"""Benchmark: hierarchical timing wheel vs heapq (lazy deletion) vs asyncio call_later.

Question: does the purgatory's timer keep up, and does it keep memory proportional to
*outstanding* work when most operations complete long before their timeout?

Workload (simulated time, so "all expire" does not take 30 real seconds): ``--ops``
operations (default 1,000,000) arrive at ``--rate`` per simulated millisecond (default
100, so arrivals span 10 s), each with a 30 s timeout.  Every simulated millisecond the
driver adds that millisecond's arrivals, completes the operations due to complete, then
advances the timer.  The run ends once every operation has completed or expired.

- (a) ``early``: 99% complete 1-50 ms after arrival (cancel), 1% expire.
- (b) ``expire``: nothing completes; every operation expires.
- (c) ``insert+complete at 1M outstanding``: the timer already holds ``--ops`` live
  operations; then ``--pairs`` inserts each paired with the completion of the operation
  inserted 1,000 before it.

Timers: ``wheel`` (timer.SystemTimer + TimerTask.cancel), ``heapq`` (heap of
``(expiration, seq, op)`` tuples; completion sets a flag; flagged entries are skipped
when popped), ``asyncio`` (``loop.call_later`` + ``TimerHandle.cancel`` on an event loop
whose ``time()`` is the simulated clock, stepped with one loop iteration per millisecond).

Figures: operations/s over the whole run (adds + completions + advancing, i.e. the full
lifecycle), the insert+complete part alone, and peak memory: growth of the process's
peak RSS over its RSS before the run.  Every measurement runs in a fresh process (so
peaks and GC state are its own); rounds interleave the timers so load drift on a shared
machine hits all three alike.  Medians of ``--runs`` rounds.

Run: ``python bench/timer.py`` (about 2-3 minutes on 2 cores); ``--quick`` for a smoke run.
Writes ``bench/results/timer.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import itertools
import json
import os
import platform
import random
import resource
import selectors
import statistics
import subprocess
import sys
import time
from array import array
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timer.clock import ManualClock
from timer.system_timer import SystemTimer
from timer.timing_wheel import TimerTask

TIMEOUT_MS = 30_000
EARLY_FRACTION = 0.99
MAX_COMPLETE_AFTER_MS = 50
RING = 64  # > MAX_COMPLETE_AFTER_MS, power of two
TIMERS = ("wheel", "heapq", "asyncio")


# -- the three timers behind one small interface --------------------------------------
class Fired:
    count = 0


class WheelOp(TimerTask):
    __slots__ = ()

    def run(self) -> None:
        Fired.count += 1


class HeapOp:
    __slots__ = ("cancelled", "delay_ms")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def run(self) -> None:
        Fired.count += 1


class HeapTimer:
    """A classic priority-queue timer with lazy deletion (Kafka's purgatory v1)."""

    __slots__ = ("_clock", "_heap", "_seq")

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self._heap: list[tuple[int, int, HeapOp]] = []
        self._seq = itertools.count()

    def add(self, op: HeapOp) -> None:
        heapq.heappush(self._heap, (self._clock.now_ms() + op.delay_ms, next(self._seq), op))

    def advance(self, now_ms: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            op = heapq.heappop(heap)[2]
            if not op.cancelled:
                op.run()


class NonBlockingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Never sleeps: simulated time does not pass while the loop would wait."""

    def select(self, timeout: float | None = None) -> list[Any]:
        return super().select(0)


class SimulatedLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock is the simulated millisecond counter."""

    sim_ms = 0

    def __init__(self) -> None:
        super().__init__(NonBlockingSelector())

    def time(self) -> float:
        return self.sim_ms / 1000.0


def _fire() -> None:
    Fired.count += 1


class Harness:
    """make(delay) -> op with .cancel(); add(op); advance(now_ms); set_time(now_ms)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.clock = ManualClock()
        self.loop: SimulatedLoop | None = None
        if kind == "wheel":
            wheel = SystemTimer(self.clock)
            self.make: Callable[[int], Any] = WheelOp
            self.add: Callable[[Any], Any] = wheel.add
            poll_due, run_due = wheel.poll_due, wheel.run_due

            def advance_wheel(now_ms: int) -> None:
                run_due(poll_due(now_ms))

            self.advance: Callable[[int], Any] = advance_wheel
        elif kind == "heapq":
            heap = HeapTimer(self.clock)
            self.make = HeapOp
            self.add = heap.add
            self.advance = heap.advance
        else:
            loop = self.loop = SimulatedLoop()
            delay_s = TIMEOUT_MS / 1000.0
            self.make = lambda _delay_ms: loop.call_later(delay_s, _fire)
            self.add = _noop
            self.advance = lambda _now_ms: loop._run_once()  # type: ignore[attr-defined]

    def set_time(self, now_ms: int) -> None:
        self.clock.set(now_ms)
        if self.loop is not None:
            self.loop.sim_ms = now_ms

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()


def _noop(_op: object) -> None:
    return None


# -- scenarios ------------------------------------------------------------------------
def completion_delays(ops: int, early: bool, seed: int = 42) -> array:
    """Per operation: ms after arrival at which it completes, 0 = never (expires)."""
    delays = array("H", bytes(2 * ops))
    if early:
        rng = random.Random(seed)
        for i in range(ops):
            if rng.random() < EARLY_FRACTION:
                delays[i] = rng.randint(1, MAX_COMPLETE_AFTER_MS)
    return delays


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def run_lifecycle(kind: str, delays: array, rate: int) -> dict[str, float]:
    """Arrive, complete and expire every operation; returns timings and peak RSS growth."""
    ops = len(delays)
    harness = Harness(kind)
    make, add, advance, set_time = harness.make, harness.add, harness.advance, harness.set_time
    ring: list[list[Any]] = [[] for _ in range(RING)]
    Fired.count = 0
    end_ms = (ops + rate - 1) // rate + TIMEOUT_MS + 2
    front = back = 0.0
    gc.collect()
    base_rss = current_rss_bytes()
    clock = time.perf_counter
    started = clock()
    i = 0
    for now in range(end_ms):
        set_time(now)
        t0 = clock()
        stop = i + rate if i + rate < ops else ops
        while i < stop:
            op = make(TIMEOUT_MS)
            add(op)
            d = delays[i]
            if d:
                ring[(now + d) & (RING - 1)].append(op)
            i += 1
        slot = ring[now & (RING - 1)]
        for op in slot:
            op.cancel()
        slot.clear()
        t1 = clock()
        advance(now)
        back += clock() - t1
        front += t1 - t0
    total = clock() - started
    expected = sum(1 for d in delays if d == 0)
    if Fired.count != expected:
        raise AssertionError(f"{kind}: fired {Fired.count}, expected {expected}")
    result = {
        "total_s": total,
        "front_s": front,
        "advance_s": back,
        "peak_rss_growth_bytes": peak_rss_bytes() - base_rss,
    }
    harness.close()
    return result


def run_outstanding(kind: str, outstanding: int, pairs: int, rate: int) -> float:
    """insert+complete pairs/s with ``outstanding`` live operations in the timer."""
    harness = Harness(kind)
    make, add, set_time = harness.make, harness.add, harness.set_time
    keep = []
    now = 0
    for start in range(0, outstanding, rate):
        set_time(now)
        for _ in range(min(rate, outstanding - start)):
            op = make(TIMEOUT_MS)
            add(op)
            keep.append(op)
        now += 1
    set_time(now)
    window: deque[Any] = deque()
    for _ in range(1_000):
        op = make(TIMEOUT_MS)
        add(op)
        window.append(op)
    gc.collect()
    clock = time.perf_counter
    started = clock()
    for _ in range(pairs):
        op = make(TIMEOUT_MS)
        add(op)
        window.append(op)
        window.popleft().cancel()
    elapsed = clock() - started
    harness.close()
    del keep
    return pairs / elapsed


# -- reporting ------------------------------------------------------------------------
def median(values: list[float]) -> float:
    return statistics.median(values)


def child(spec: dict[str, Any]) -> dict[str, float]:
    """One measurement in a fresh process, so peak RSS and GC state are its own."""
    if spec["what"] == "lifecycle":
        delays = completion_delays(spec["ops"], spec["scenario"] == "early")
        return run_lifecycle(spec["kind"], delays, spec["rate"])
    return {"pairs_per_s": run_outstanding(spec["kind"], spec["ops"], spec["pairs"], spec["rate"])}


def measure(spec: dict[str, Any]) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=100, help="arrivals per simulated ms")
    parser.add_argument("--pairs", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100k ops, 1 run")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "timer.json"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.quick:
        args.ops, args.pairs, args.runs = 100_000, 50_000, 1
    bench_started = time.perf_counter()

    # Rounds interleave the timers, so load drift on a shared machine hits all of them.
    lifecycle_runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    pair_runs: dict[str, list[float]] = {kind: [] for kind in TIMERS}
    for round_no in range(args.runs):
        for scenario in ("early", "expire"):
            for kind in TIMERS:
                spec = {
                    "what": "lifecycle",
                    "kind": kind,
                    "scenario": scenario,
                    "ops": args.ops,
                    "rate": args.rate,
                }
                lifecycle_runs.setdefault((scenario, kind), []).append(measure(spec))
        for kind in TIMERS:
            spec = {
                "what": "outstanding",
                "kind": kind,
                "ops": args.ops,
                "pairs": args.pairs,
                "rate": args.rate,
            }
            pair_runs[kind].append(measure(spec)["pairs_per_s"])
        print(
            f"  round {round_no + 1}/{args.runs} done "
            f"({time.perf_counter() - bench_started:.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    figures: dict[str, Any] = {}
    for scenario in ("early", "expire"):
        per_kind: dict[str, Any] = {}
        for kind in TIMERS:
            runs = lifecycle_runs[(scenario, kind)]
            per_kind[kind] = {
                "ops_per_s": median([args.ops / r["total_s"] for r in runs]),
                "insert_complete_ops_per_s": median([args.ops / r["front_s"] for r in runs]),
                "advance_s": median([r["advance_s"] for r in runs]),
                "total_s_runs": [round(r["total_s"], 3) for r in runs],
                "peak_rss_growth_bytes": median([r["peak_rss_growth_bytes"] for r in runs]),
                "ns_per_op": median([r["total_s"] / args.ops * 1e9 for r in runs]),
            }
        figures[scenario] = per_kind
    outstanding: dict[str, dict[str, Any]] = {
        kind: {"pairs_per_s": median(rates), "runs": [round(r) for r in rates]}
        for kind, rates in pair_runs.items()
    }
    figures["insert_complete_at_outstanding"] = outstanding

    def ratio(scenario: str, key: str, kind: str) -> float:
        return figures[scenario][kind][key] / figures[scenario]["heapq"][key]

    early_mem_ratio = ratio("early", "peak_rss_growth_bytes", "wheel")
    pair_ratio = outstanding["wheel"]["pairs_per_s"] / outstanding["heapq"]["pairs_per_s"]
    targets = {
        "insert_complete_rate_vs_heapq_at_outstanding": {
            "target": ">= 1.0",
            "measured": round(pair_ratio, 3),
            "met": pair_ratio >= 1.0,
        },
        "early_peak_memory_vs_heapq": {
            "target": "<= 0.2",
            "measured": round(early_mem_ratio, 4),
            "met": early_mem_ratio <= 0.2,
        },
    }

    print()
    print(
        f"timer benchmark: {args.ops:,} ops, 30 s timeout, {args.rate}/ms arrivals, "
        f"median of {args.runs} run(s); ratios are x heapq, same run"
    )
    header = (
        f"{'scenario':8} {'timer':8} {'ops/s (all)':>12} {'ratio':>6} "
        f"{'ins+compl/s':>12} {'ratio':>6} {'peak MiB':>9} {'ratio':>7}"
    )
    print(header)
    print("-" * len(header))
    for scenario in ("early", "expire"):
        for kind in TIMERS:
            f = figures[scenario][kind]
            print(
                f"{scenario:8} {kind:8} {f['ops_per_s']:12,.0f} "
                f"{ratio(scenario, 'ops_per_s', kind):6.2f} "
                f"{f['insert_complete_ops_per_s']:12,.0f} "
                f"{ratio(scenario, 'insert_complete_ops_per_s', kind):6.2f} "
                f"{f['peak_rss_growth_bytes'] / 2**20:9.1f} "
                f"{ratio(scenario, 'peak_rss_growth_bytes', kind):7.3f}"
            )
    print()
    print(f"insert+complete pairs/s with {args.ops:,} outstanding:")
    for kind in TIMERS:
        rate = outstanding[kind]["pairs_per_s"]
        print(f"  {kind:8} {rate:12,.0f}  ratio {rate / outstanding['heapq']['pairs_per_s']:.2f}")
    print()
    for name, t in targets.items():
        print(
            f"target {name}: {t['target']}, measured {t['measured']}, "
            f"{'MET' if t['met'] else 'NOT MET'}"
        )
    elapsed = time.perf_counter() - bench_started
    print(f"bench wall time {elapsed:.0f} s")

    result = {
        "benchmark": "timer",
        "config": {
            "ops": args.ops,
            "timeout_ms": TIMEOUT_MS,
            "arrivals_per_ms": args.rate,
            "early_fraction": EARLY_FRACTION,
            "complete_after_ms": [1, MAX_COMPLETE_AFTER_MS],
            "pairs": args.pairs,
            "runs": args.runs,
            "clock": "simulated (ManualClock / event loop with simulated time())",
            "memory": "peak RSS (ru_maxrss) minus RSS before the run, one process per run",
        },
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "cpu_count": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
        },
        "figures": figures,
        "targets": targets,
        "wall_time_s": round(elapsed, 1),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
