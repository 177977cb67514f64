"""Stalled large frames (issue 30, item 6): do connections that send part of a large
request frame and stop lock other clients out of a broker, and what do they hold?

A standalone broker (``python -m broker start``, one network process, default pool of
128 MiB; a one-partition topic ``t``; ``request_read_timeout_ms`` = ``--read-timeout-ms``;
``--override key=value`` for any other broker key) is started here and stopped by PID at
the end.  The attack, from raw sockets: ``--connections`` connections each announce a
frame of ``--frame-mib`` MiB and send ``--send-mib`` MiB of it (zeros, non-blocking,
round robin; a connection the broker stops reading is given up after 1 s without
progress), then send nothing more.  Then, one after the other, ``--probes`` fresh
clients each open a connection and send ApiVersions (v3), then a Produce (v9, acks=all,
one record of 1 byte) to ``t``; each answer waits at most ``--probe-timeout-s``.

Reported: bytes the attack got into the broker's socket buffers and pool; milliseconds
from a probe's connect to its ApiVersions answer and from its Produce to the answer
(median over the probes that were answered, and how many were not); the broker's pool
memory held (``allocated_bytes`` of its buffer pool, attached read-only) right after the
attack and the highest seen during the probes; the RSS growth of the broker's main and
network processes (psutil, shared pool pages included once touched); and how many of
the stalled connections are still open ``--read-timeout-ms`` + ``--margin-s`` after the
attack began.  Writes ``bench/results/stalled_frames.json`` and ``.png`` (matplotlib;
``--name`` to keep another run beside it, e.g. one on older code).

Run: ``python3 -m bench.stalled_frames`` (~20 s; the issue's figures: ``--read-timeout-ms
30000``).  Costs: ``--connections`` x ``--send-mib`` MiB through loopback; one run at a
time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench import plotting
from bench.cluster_lifecycle import machine_info
from clients.protocol.api_keys import ApiKey
from clients.records.record import build_batch
from tests.broker.processes import BrokerProcess
from tests.broker.raw_kafka import (
    api_versions,
    call,
    connect,
    correlation_of,
    pool_of,
    recv_frame,
    stall_frames,
)

RESULTS = Path(__file__).resolve().parent / "results"
MIB = 1 << 20


def probe(port: int, timeout_s: float, produce: dict[str, Any]) -> dict[str, Any]:
    """One fresh client: ApiVersions, then an acks=all Produce (ms each, None if not
    answered within ``timeout_s``)."""
    out: dict[str, Any] = {"api_versions_ms": None, "produce_ms": None, "produce_error": None}
    started = time.perf_counter()
    try:
        with connect(port, timeout_s) as sock:
            sock.sendall(api_versions(1))
            if correlation_of(recv_frame(sock)) == 1:
                out["api_versions_ms"] = (time.perf_counter() - started) * 1000
            asked = time.perf_counter()
            body = call(sock, ApiKey.PRODUCE, 9, produce)
            out["produce_ms"] = (time.perf_counter() - asked) * 1000
            out["produce_error"] = body["responses"][0]["partition_responses"][0]["error_code"]
    except OSError as exc:
        out["failure"] = f"{type(exc).__name__}: {exc}"
    return out


def rss(pids: list[int]) -> dict[int, int]:
    out = {}
    for pid in pids:
        try:
            out[pid] = psutil.Process(pid).memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return out


def still_open(socks: list[Any]) -> int:
    """Stalled sockets the broker has not closed (no EOF, no reset)."""
    count = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            if sock.recv(1 << 16):
                count += 1  # an answer?  still open
        except BlockingIOError:
            count += 1
        except OSError:
            pass
    return count


def run(args: argparse.Namespace) -> dict[str, Any]:
    timeout_s = args.read_timeout_ms / 1000
    with tempfile.TemporaryDirectory(prefix="bench-stalled-") as tmp:
        data_dir = Path(tmp)
        (data_dir / "topics.json").write_text(json.dumps({"version": 1, "topics": {
            "t": {"num_partitions": 1, "replication_factor": 1, "configs": {}}}}))
        overrides: dict[str, object] = {"request_read_timeout_ms": args.read_timeout_ms}
        for pair in args.override:
            key, _, value = pair.partition("=")
            overrides[key] = value
        with BrokerProcess(data_dir, overrides=overrides) as broker:
            pids = [broker.pid, *broker.network_pids()]
            pool = pool_of(broker.pid)
            try:
                before = rss(pids)
                started = time.monotonic()
                stalled, sent = stall_frames(broker.port, args.connections,
                                             args.frame_mib * MIB, args.send_mib * MIB)
                attack_s = time.monotonic() - started
                held_after_attack = pool.metrics().allocated_bytes
                produce = {"acks": -1, "timeout_ms": int(args.probe_timeout_s * 1000),
                           "transactional_id": None, "topics": [{"name": "t", "partitions": [
                               {"index": 0, "records": build_batch(
                                   [(None, b"v", int(time.time() * 1000), [])])}]}]}
                probes, held_max = [], held_after_attack
                for _ in range(args.probes):
                    probes.append(probe(broker.port, args.probe_timeout_s, produce))
                    held_max = max(held_max, pool.metrics().allocated_bytes)
                after = rss(pids)
                wait_s = started + timeout_s + args.margin_s - time.monotonic()
                if wait_s > 0:
                    time.sleep(wait_s)  # the measurement point, not a wait for a condition
                open_after = still_open(stalled)
                open_at_s = time.monotonic() - started
                held_at_end = pool.metrics().allocated_bytes
                for sock in stalled:
                    sock.close()
            finally:
                pool.close()
    versions = [p["api_versions_ms"] for p in probes if p["api_versions_ms"] is not None]
    produced = [p["produce_ms"] for p in probes if p["produce_ms"] is not None]
    growth = {("main" if i == 0 else f"network {i - 1}"): (after.get(pid, 0)
                                                           - before.get(pid, 0)) / MIB
              for i, pid in enumerate(pids)}
    return {
        "attack": {"connections": args.connections, "frame_mib": args.frame_mib,
                   "send_mib_each": args.send_mib, "sent_mib": sent / MIB,
                   "seconds_to_send": attack_s},
        "probes": probes,
        "api_versions_ms_median": statistics.median(versions) if versions else None,
        "produce_acks_all_ms_median": statistics.median(produced) if produced else None,
        "probes_not_answered": sum(p["produce_ms"] is None for p in probes),
        "pool_held_mib_after_attack": held_after_attack / MIB,
        "pool_held_mib_max_during_probes": held_max / MIB,
        "pool_held_mib_at_end": held_at_end / MIB,
        "rss_growth_mib": growth,
        "stalled_open_after": {"count": open_after, "of": len(stalled),
                               "seconds_after_attack_began": open_at_s},
    }


def partial_bound(overrides: list[str]) -> float | None:
    """``max_partial_request_bytes`` in force for these overrides, MiB (None on code
    without the bound, e.g. a run on an older commit for comparison)."""
    try:
        from broker.config import BrokerConfig
        from broker.network.connection_shares import partial_request_bytes
    except ImportError:
        return None
    config = BrokerConfig().with_overrides(dict(o.split("=", 1) for o in overrides))
    return partial_request_bytes(config.max_partial_request_bytes, config.buffer_pool_bytes,
                                 config.max_request_bytes) / MIB


def plot(path: Path, result: dict[str, Any], title: str) -> bool:
    drawn = plotting.figure(ncols=3, figsize=(13, 4))
    if drawn is None:
        return False
    plt, fig, (ax1, ax2, ax3) = drawn
    timeout_ms = result["settings"]["probe_timeout_s"] * 1000
    names = ["ApiVersions", "Produce acks=all"]
    values = [result["api_versions_ms_median"], result["produce_acks_all_ms_median"]]
    ax1.bar(names, [timeout_ms if v is None else v for v in values],
            color=["tab:red" if v is None else "tab:blue" for v in values])
    ax1.set_yscale("log")
    ax1.set_ylim(0.1, timeout_ms * 3)
    for x, v in enumerate(values):
        ax1.annotate("not answered" if v is None else f"{v:.2f} ms",
                     (x, timeout_ms if v is None else v), ha="center", va="bottom")
    ax1.set_ylabel(f"ms, median of the probes (red: none within {timeout_ms / 1000:g} s)")
    ax1.set_title("a fresh client's requests")
    ax2.bar(["pool held\n(max)", "bound", "RSS growth\nmain + network"],
            [result["pool_held_mib_max_during_probes"], result["partial_bound_mib"] or 0,
             sum(result["rss_growth_mib"].values())])
    ax2.set_ylabel("MiB")
    ax2.set_title("memory")
    open_after = result["stalled_open_after"]
    ax3.bar(["open", "closed"], [open_after["count"], open_after["of"] - open_after["count"]])
    ax3.set_title(f"stalled connections {open_after['seconds_after_attack_began']:.0f} s "
                  "after the attack")
    fig.suptitle(title)
    return plotting.save(plt, fig, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=40)
    parser.add_argument("--frame-mib", type=int, default=16)
    parser.add_argument("--send-mib", type=int, default=4)
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--probe-timeout-s", type=float, default=10.0)
    parser.add_argument("--read-timeout-ms", type=int, default=10_000)
    parser.add_argument("--margin-s", type=float, default=5.0)
    parser.add_argument("--override", action="append", default=[],
                        help="another broker config key=value")
    parser.add_argument("--name", default="stalled_frames")
    args = parser.parse_args()
    result = run(args)
    result["settings"] = {k: v for k, v in vars(args).items() if k != "name"}
    result["partial_bound_mib"] = partial_bound(args.override)
    result["client"] = "raw sockets (tests/broker/raw_kafka.py), ApiVersions v3, Produce v9"
    result["machine"] = machine_info()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    title = (f"{args.connections} connections x {args.send_mib} MiB of a {args.frame_mib} "
             f"MiB frame, stalled (request_read_timeout_ms {args.read_timeout_ms})")
    plotted = plot(RESULTS / f"{args.name}.png", result, title)
    print(json.dumps({k: v for k, v in result.items() if k not in ("probes", "machine")},
                     indent=2))
    print(f"wrote {RESULTS / (args.name + '.json')}" + (" and .png" if plotted else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
