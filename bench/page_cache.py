"""What writing new file data costs on this machine: fresh page-cache pages vs recycled ones.

Every broker of an RF 3 cluster writes every byte a producer sends into its own log, so
the whole cluster writes three times the produced bytes into new page-cache pages. This
bench measures what that costs one process here, with the API the broker's segments use
(``os.write`` of 1 MiB buffers of random bytes onto the end of a new file, no fsync):

* **fresh**: after the machine has been idle ``--idle-s`` seconds, write ``--mib`` MiB;
* **recycled**: at once after deleting that file, write another ``--mib`` MiB (the
  kernel hands back the pages it just freed).

On the 2-core VM this project runs on (2026-11-28), a page freed less than about 2 s
earlier is cheap to use again (1 GiB written in 0.17 s, 6.1 GB/s) and one freed longer
ago is not (1.0 GB/s after 3, 8 or 20 s of waiting; 0.7 GB/s when the machine had been
quiet), a 6 to 8 fold cost.  That matches a hypervisor taking back memory the guest has
freed (the VM has a virtio balloon device), so that the next use of a page faults on the
host; we measured the cost, not the mechanism.  A broker's page cache grows with its log
during a run, so its appends land on such pages unless something freed as much just
before (``recycle_pages``).

**On a cluster** (``--cluster-rounds``, default 3): a controller and 3 brokers (RF 3,
min ISR 2); each round sends ``--cluster-records`` 1 KiB records with distinct keys to a
fresh one-partition topic with ``Producer.send_bulk`` (acks=all, idempotent,
``batch_size`` 256 KiB, as :mod:`bench.kafka_clients`) twice: once right after
``recycle_pages`` freed three times the run's bytes beside the brokers' logs, once after
``--idle-s`` of quiet.  Same code, same cluster; only which pages the brokers' appends
land on differs.

Reported per run: milliseconds per MiB and MB/s, both over the whole file,
and ``rf3_ceiling_mb_per_s``: the produce rate at which three brokers' fresh writes alone
would use all of the machine's cores (cores / (3 x seconds per MB written)). Medians of
``--runs``. Writes ``bench/results/page_cache.json`` and ``page_cache.png`` (matplotlib).

Costs: ``--runs`` x (``--idle-s`` + two writes of ``--mib`` MiB) and ``--mib`` MiB of
disk at a time (the files live in a temporary directory under ``--dir``, removed at the
end); the cluster part about ``--cluster-rounds`` x (``--idle-s`` + 10 s) and 6 x
``--cluster-records`` KiB of disk per round (the cluster's processes are stopped by PID
at the end, :func:`bench.cluster_lifecycle.running_cluster`).
Run: ``python -m bench.page_cache``.  One run at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import plotting
from bench.cluster_lifecycle import machine_info

RESULTS = Path(__file__).resolve().parent / "results"
MIB = 1 << 20


def write_file(path: Path, mib: int, chunk: bytes) -> tuple[float, float]:
    """Write ``mib`` MiB to a new file at ``path``; (ms per MiB over the whole file, MB/s).

    Whole-file figures, not a median per write: the slow writes come in bursts."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        start = time.perf_counter()
        for _ in range(mib):
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
        seconds = time.perf_counter() - start
    finally:
        os.close(fd)
    return seconds * 1000 / mib, mib * MIB / seconds / 1e6


def recycle_pages(directory: Path, nbytes: int) -> None:
    """Write ``nbytes`` to a scratch file in ``directory`` and delete it, so that the
    writes that follow at once land on the page-cache pages it freed (the *recycled*
    case above; the cluster part's rounds on recycled pages)."""
    path = directory / "page-cache-recycle.bin"
    write_file(path, max(1, -(-nbytes // MIB)), os.urandom(MIB))
    path.unlink()


def measure(directory: Path, mib: int, idle_s: float) -> dict[str, float]:
    """One fresh write after ``idle_s`` of quiet, then one recycled write at once."""
    chunk = os.urandom(MIB)
    path = directory / "page-cache-bench.bin"
    time.sleep(idle_s)  # let the machine take back what earlier runs freed
    fresh_ms, fresh_mb_s = write_file(path, mib, chunk)
    path.unlink()
    recycled_ms, recycled_mb_s = write_file(path, mib, chunk)
    path.unlink()
    return {"fresh_ms_per_mib": fresh_ms, "fresh_mb_per_s": fresh_mb_s,
            "recycled_ms_per_mib": recycled_ms, "recycled_mb_per_s": recycled_mb_s}


def summarise(runs: list[dict[str, float]], cores: int, replicas: int = 3) -> dict[str, Any]:
    """Medians of ``runs`` and the RF ``replicas`` ceiling from the fresh write rate."""
    out: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out["fresh_to_recycled_cost_ratio"] = (out["fresh_ms_per_mib"]
                                           / out["recycled_ms_per_mib"])
    out["rf3_ceiling_mb_per_s"] = cores * out["fresh_mb_per_s"] / replicas
    return out


def cluster_pairs(rounds: int, records: int, idle_s: float) -> dict[str, Any]:
    """The cluster part (see the module docstring): MB/s per round and their medians."""
    from bench import kafka_clients as kc  # imports confluent-kafka: only when asked
    from bench.cluster_lifecycle import create_topics, running_cluster

    keys, values = kc.records(records, 1024)
    recycled: list[float] = []
    idle: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-page-cache-cluster-") as root, \
            running_cluster(root, 3) as state:
        names = [f"pages-{i}" for i in range(2 * rounds)]
        create_topics(state, names)
        data = Path(state.data_dir)
        for i in range(rounds):
            recycle_pages(data, 3 * records * 1024)
            recycled.append(kc.ours_send_bulk(state.bootstrap, names[2 * i], keys, values)
                            * 1024 / 1e6)
            time.sleep(idle_s)
            idle.append(kc.ours_send_bulk(state.bootstrap, names[2 * i + 1], keys, values)
                        * 1024 / 1e6)
            print(f"round {i}: send_bulk 1 KiB {recycled[-1]:.1f} MB/s on recycled pages, "
                  f"{idle[-1]:.1f} MB/s after {idle_s:.0f} s idle", flush=True)
    return {"api": "Producer.send_bulk, 1 KiB values, distinct keys, acks=all, idempotent, "
                   "batch_size 256 KiB; controller + 3 brokers, RF 3, min ISR 2",
            "records": records, "recycled_mb_per_s": recycled, "idle_mb_per_s": idle,
            "recycled_median_mb_per_s": statistics.median(recycled),
            "idle_median_mb_per_s": statistics.median(idle),
            "recycled_to_idle_ratio": statistics.median(recycled) / statistics.median(idle)}


def plot(path: Path, runs: list[dict[str, float]], cluster: dict[str, Any] | None) -> bool:
    drawn = plotting.figure(2 if cluster else 1, (11 if cluster else 6, 4))
    if drawn is None:
        return False
    plt, fig, axes = drawn
    ax = axes[0] if cluster else axes
    ax.bar(["fresh pages", "recycled pages"],
           [statistics.median(r["fresh_mb_per_s"] for r in runs),
            statistics.median(r["recycled_mb_per_s"] for r in runs)],
           color=["tab:red", "tab:green"])
    ax.set_ylabel("MB/s, os.write of 1 MiB buffers to a new file (median)")
    ax.set_title("Writing new file data into the page cache")
    if cluster:
        ax = axes[1]
        ax.bar(["after idle", "on recycled pages"],
               [cluster["idle_median_mb_per_s"], cluster["recycled_median_mb_per_s"]],
               color=["tab:red", "tab:green"])
        ax.set_ylabel("MB/s (median of rounds)")
        ax.set_title("send_bulk 1 KiB, RF 3 acks=all, same cluster")
    return plotting.save(plt, fig, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--idle-s", type=float, default=8.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--cluster-rounds", type=int, default=3, help="0: no cluster part")
    parser.add_argument("--cluster-records", type=int, default=200_000)
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-page-cache-", dir=args.dir) as root:
        for _ in range(args.runs):
            runs.append(measure(Path(root), args.mib, args.idle_s))
            print(json.dumps(runs[-1]), flush=True)
    cores = os.cpu_count() or 1
    summary = summarise(runs, cores)
    cluster = (cluster_pairs(args.cluster_rounds, args.cluster_records, args.idle_s)
               if args.cluster_rounds > 0 else None)
    RESULTS.mkdir(exist_ok=True)
    png = plot(RESULTS / "page_cache.png", runs, cluster)
    (RESULTS / "page_cache.json").write_text(json.dumps({
        "bench": "page_cache", "api": "os.write of 1 MiB random buffers to a new file",
        "config": vars(args), "machine": machine_info(), "runs": runs,
        "figures": summary, "cluster": cluster,
        "png": "page_cache.png" if png else None}, indent=2) + "\n")
    print(json.dumps({"file": summary, "cluster": cluster}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
