"""Shared-memory BufferPool: cross-process handoff vs multiprocessing.Queue, and the
cost of allocate + free.

Questions and how each is measured (medians of ``--runs`` runs, all in one invocation):

* **handoff**: a producer process (spawned, attached by name) hands ``--messages``
  payloads to the main process. Pool path: ``allocate`` -> copy the payload in -> put
  the 3-int handle on a ``multiprocessing.Queue`` -> the main process
  ``attach_buffer``s it, reads it in place (first and last byte) and ``deallocate``s it.
  Queue path: the payload bytes themselves go through a ``multiprocessing.Queue``
  (pickled, written to a pipe, read, unpickled), and the main process reads the same
  two bytes. Payloads: 1 MiB and 16 KiB with ``poolable_size`` = payload size (the
  pooled fast path), plus 1 MiB from a 16 KiB-slot pool (non-pooled: a 64-slot run).
  Both queues are bounded (64 items); the pool is 64 MiB so it applies backpressure
  too. Target: 1 MiB pool handoff >= 10x the Queue's throughput. An extra column sends
  the handles as 24 raw bytes on a ``multiprocessing.Pipe`` instead of a Queue, to show
  how much of the small-payload cost is the descriptor channel, not the pool.
* **allocate+free**: ``deallocate(allocate(poolable_size))`` in a loop, one process
  (uncontended; target <= 5 us per pair) and two spawned processes hammering the same
  pool (aggregate pairs/s and per-pair latency in each process). A bare flock
  lock+unlock pair is timed as the floor.

Writes ``bench/results/buffer_pool.json``. Run: ``python -m bench.buffer_pool`` (~2 min).
Figures swing by 2-3x when other work runs on the 2 cores; the JSON records the load
average and the bare flock cost so a loaded run can be recognised.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import multiprocessing as mp
import os
import platform
import statistics
import struct
import time
from pathlib import Path
from typing import Any

from clients.memory.buffer_pool import BufferPool
from clients.memory.handles import BufferHandle

RESULTS = Path(__file__).resolve().parent / "results" / "buffer_pool.json"
TARGET_HANDOFF_RATIO = 10.0
TARGET_PAIR_US = 5.0
KIB, MIB = 1024, 1024 * 1024
POOL_BYTES = 64 * MIB
CTX = mp.get_context("spawn")
HANDLE = struct.Struct("<qqq")  # slot, size, generation


# producers (spawned) ------------------------------------------------------------------


def produce_pool(name: str, size: int, count: int, go: Any, ready: Any, handles: Any) -> None:
    pool = BufferPool.attach(name)
    payload = bytes(range(256)) * (size // 256)  # sizes are multiples of 256
    ready.put(os.getpid())
    go.wait()
    for _ in range(count):
        buf = pool.allocate(size, 60_000)
        buf.memory[:] = payload  # the one copy: into shared memory
        handles.put(tuple(buf.handle))
        buf.release()
    handles.put(None)
    pool.close()


def produce_pool_pipe(name: str, size: int, count: int, go: Any, ready: Any, conn: Any) -> None:
    """Like produce_pool, but each handle is 24 raw bytes on a pipe (no pickling)."""
    pool = BufferPool.attach(name)
    payload = bytes(range(256)) * (size // 256)
    pack = HANDLE.pack
    ready.put(os.getpid())
    go.wait()
    for _ in range(count):
        buf = pool.allocate(size, 60_000)
        buf.memory[:] = payload
        conn.send_bytes(pack(*buf.handle))
        buf.release()
    conn.send_bytes(b"")
    pool.close()


def produce_queue(size: int, count: int, go: Any, ready: Any, q: Any) -> None:
    payload = bytes(range(256)) * (size // 256)  # sizes are multiples of 256
    ready.put(os.getpid())
    go.wait()
    for _ in range(count):
        q.put(payload)
    q.put(None)


def churn(name: str, loops: int, go: Any, ready: Any, out: Any) -> None:
    pool = BufferPool.attach(name)
    size = pool.poolable_size
    alloc, free = pool.allocate, pool.deallocate
    ready.put(os.getpid())
    go.wait()
    start = time.perf_counter()
    for _ in range(loops):
        free(alloc(size, 60_000))
    out.put(time.perf_counter() - start)
    pool.close()


# measurements --------------------------------------------------------------------------


def run_child(target: Any, *args: Any) -> mp.process.BaseProcess:
    proc = CTX.Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


def stop(procs: list[mp.process.BaseProcess]) -> None:
    for proc in procs:
        proc.join(10)
        if proc.is_alive() and proc.pid is not None:
            os.kill(proc.pid, 9)
            proc.join()


def handoff_pool(size: int, poolable: int, count: int) -> float:
    """Messages per second through pool buffers."""
    with BufferPool.create(POOL_BYTES, poolable) as pool:
        go, ready, handles = CTX.Event(), CTX.Queue(), CTX.Queue(64)
        proc = run_child(produce_pool, pool.name, size, count, go, ready, handles)
        try:
            ready.get(timeout=60)  # child imported and attached: start the clock
            start = time.perf_counter()
            go.set()
            seen = 0
            while (item := handles.get(timeout=60)) is not None:
                buf = pool.attach_buffer(BufferHandle(*item))
                mem = buf.memory
                if mem[0] != 0 or mem[-1] != 255:
                    raise AssertionError("payload corrupted")
                pool.deallocate(buf)
                seen += 1
            elapsed = time.perf_counter() - start
        finally:
            stop([proc])
        pool.check_accounting()
        assert seen == count and pool.available_memory() == POOL_BYTES
    return count / elapsed


def handoff_pool_pipe(size: int, poolable: int, count: int) -> float:
    """Messages per second through pool buffers, handles as raw bytes on a pipe."""
    with BufferPool.create(POOL_BYTES, poolable) as pool:
        go, ready = CTX.Event(), CTX.Queue()
        recv, send = CTX.Pipe(duplex=False)
        proc = run_child(produce_pool_pipe, pool.name, size, count, go, ready, send)
        try:
            ready.get(timeout=60)
            start = time.perf_counter()
            go.set()
            seen = 0
            while item := recv.recv_bytes():
                buf = pool.attach_buffer(BufferHandle(*HANDLE.unpack(item)))
                mem = buf.memory
                if mem[0] != 0 or mem[-1] != 255:
                    raise AssertionError("payload corrupted")
                pool.deallocate(buf)
                seen += 1
            elapsed = time.perf_counter() - start
        finally:
            stop([proc])
        pool.check_accounting()
        assert seen == count and pool.available_memory() == POOL_BYTES
    return count / elapsed


def handoff_queue(size: int, count: int) -> float:
    go, ready, q = CTX.Event(), CTX.Queue(), CTX.Queue(64)
    proc = run_child(produce_queue, size, count, go, ready, q)
    try:
        ready.get(timeout=60)
        start = time.perf_counter()
        go.set()
        seen = 0
        while (item := q.get(timeout=60)) is not None:
            if item[0] != 0 or item[-1] != 255:
                raise AssertionError("payload corrupted")
            seen += 1
        elapsed = time.perf_counter() - start
    finally:
        stop([proc])
    assert seen == count
    return count / elapsed


def pair_us_uncontended(loops: int) -> float:
    with BufferPool.create(POOL_BYTES, 16 * KIB) as pool:
        alloc, free = pool.allocate, pool.deallocate
        free(alloc(16 * KIB, 0))
        start = time.perf_counter()
        for _ in range(loops):
            free(alloc(16 * KIB, 0))
        return (time.perf_counter() - start) / loops * 1e6


def pairs_contended(loops: int, workers: int) -> tuple[float, float]:
    """(aggregate pairs/s, median per-pair us within a process)."""
    with BufferPool.create(POOL_BYTES, 16 * KIB) as pool:
        go, ready, out = CTX.Event(), CTX.Queue(), CTX.Queue()
        procs = [run_child(churn, pool.name, loops, go, ready, out) for _ in range(workers)]
        try:
            for _ in procs:
                ready.get(timeout=60)
            start = time.perf_counter()
            go.set()
            times = [out.get(timeout=120) for _ in range(workers)]
            wall = time.perf_counter() - start
        finally:
            stop(procs)
        pool.check_accounting()
    return workers * loops / wall, statistics.median(times) / loops * 1e6


def flock_pair_us(loops: int) -> float:
    with BufferPool.create(16 * KIB, 16 * KIB) as pool:
        fd = os.open("/dev/shm/" + pool.name, os.O_RDWR)
        try:
            start = time.perf_counter()
            for _ in range(loops):
                fcntl.flock(fd, fcntl.LOCK_EX)
                fcntl.flock(fd, fcntl.LOCK_UN)
            return (time.perf_counter() - start) / loops * 1e6
        finally:
            os.close(fd)


def median_of(runs: int, fn: Any, *args: Any) -> float:
    return statistics.median(fn(*args) for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages-1mib", type=int, default=1000)
    parser.add_argument("--messages-16kib", type=int, default=5000)
    parser.add_argument("--loops", type=int, default=200_000)
    args = parser.parse_args()
    r = args.runs
    load_start = os.getloadavg()[0]
    figures: dict[str, Any] = {}
    cases = [
        ("1MiB", MIB, MIB, args.messages_1mib),
        ("16KiB", 16 * KIB, 16 * KIB, args.messages_16kib),
        ("1MiB_nonpooled", MIB, 16 * KIB, args.messages_1mib),
    ]
    print(f"{'handoff':<16}{'pool msg/s':>12}{'queue msg/s':>13}{'pool MB/s':>11}{'ratio':>8}"
          f"{'pool+pipe msg/s':>17}")  # fmt: skip
    for label, size, poolable, count in cases:
        pool_rate = median_of(r, handoff_pool, size, poolable, count)
        queue_rate = median_of(r, handoff_queue, size, count)
        pipe_rate = median_of(r, handoff_pool_pipe, size, poolable, count)
        ratio = pool_rate / queue_rate
        figures[f"handoff_{label}"] = {
            "payload_bytes": size,
            "poolable_size": poolable,
            "messages": count,
            "pool_msgs_per_s": round(pool_rate, 1),
            "queue_msgs_per_s": round(queue_rate, 1),
            "pool_MB_per_s": round(pool_rate * size / 1e6, 1),
            "queue_MB_per_s": round(queue_rate * size / 1e6, 1),
            "pool_us_per_msg": round(1e6 / pool_rate, 2),
            "queue_us_per_msg": round(1e6 / queue_rate, 2),
            "ratio_pool_over_queue": round(ratio, 2),
            "pool_handles_via_pipe_msgs_per_s": round(pipe_rate, 1),
            "ratio_pool_pipe_over_queue": round(pipe_rate / queue_rate, 2),
        }
        print(f"{label:<16}{pool_rate:>12.0f}{queue_rate:>13.0f}{pool_rate * size / 1e6:>11.0f}"
              f"{ratio:>7.1f}x{pipe_rate:>17.0f}")  # fmt: skip
    flock_us = median_of(r, flock_pair_us, args.loops)
    pair_us = median_of(r, pair_us_uncontended, args.loops)
    runs2 = [pairs_contended(args.loops // 2, 2) for _ in range(r)]
    agg2 = statistics.median(x[0] for x in runs2)
    lat2 = statistics.median(x[1] for x in runs2)
    figures["alloc_free"] = {
        "flock_pair_us": round(flock_us, 3),
        "uncontended_pair_us": round(pair_us, 3),
        "uncontended_pairs_per_s": round(1e6 / pair_us),
        "contended_2proc_pairs_per_s": round(agg2),
        "contended_2proc_pair_us_per_process": round(lat2, 3),
        "contended_over_uncontended_throughput": round(agg2 / (1e6 / pair_us), 2),
        "pair_over_flock_floor": round(pair_us / (2 * flock_us), 2),
    }
    print(f"\nflock lock+unlock pair: {flock_us:.2f} us")
    print(f"allocate+free uncontended: {pair_us:.2f} us/pair ({1e6 / pair_us:,.0f} pairs/s)")
    print(f"allocate+free 2 processes: {agg2:,.0f} pairs/s total, {lat2:.2f} us/pair per process")
    ratio_1m = figures["handoff_1MiB"]["ratio_pool_over_queue"]
    ratio_1m_pipe = figures["handoff_1MiB"]["ratio_pool_pipe_over_queue"]
    targets = {
        "handoff_1MiB_ratio_min": TARGET_HANDOFF_RATIO,
        "handoff_1MiB_ratio_handles_via_queue": ratio_1m,
        "handoff_1MiB_met": ratio_1m >= TARGET_HANDOFF_RATIO,
        "handoff_1MiB_ratio_handles_via_pipe": ratio_1m_pipe,
        "handoff_1MiB_handles_via_pipe_met": ratio_1m_pipe >= TARGET_HANDOFF_RATIO,
        "uncontended_pair_us_max": TARGET_PAIR_US,
        "uncontended_pair_us": round(pair_us, 3),
        "uncontended_pair_met": pair_us <= TARGET_PAIR_US,
    }
    for key in ("handoff_1MiB_met", "handoff_1MiB_handles_via_pipe_met", "uncontended_pair_met"):
        print(f"target {key}: {'MET' if targets[key] else 'NOT MET'}")
    result = {
        "config": {
            **vars(args),
            "pool_bytes": POOL_BYTES,
            "queue_maxsize": 64,
            "start_method": "spawn",
        },
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "processor": platform.processor(),
            # other work on the machine skews every figure: flock_pair_us shows how much
            "loadavg_1min_start_end": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        },
        "figures": figures,
        "targets": targets,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
