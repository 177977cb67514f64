"""Leader failover under continuous acks=all produce (RF=3, min ISR 2): issue 8.

A local cluster (``broker.cluster``, local defaults: the controller fences a broker
silent for ``broker_session_timeout_ms``) holds one partition with three replicas.  A
producer thread sends small records one at a time (``send(...).result()``, acks=all,
``linger_ms=0``, short request timeout and retry backoff) and stamps every
acknowledgement.  Each run:

1. wait until the ISR is full (3) and acks flow;
2. SIGKILL the partition leader (``cluster kill <id>``: the broker's main process; its
   network process exits when its channel closes);
3. poll the controller until it names a new leader (``kill -> elected``);
4. wait for the first acknowledgement that ends after the kill completed;
5. restart the killed broker and wait for the ISR to be full again.

Figures per run, medians over ``--runs``: ``kill -> first ack`` (from the signal to the
first acknowledged produce on the new leader), ``last ack -> first ack`` (the gap the
producer sees), ``kill -> elected`` (fencing + election as seen in the controller's
metadata; polled every ``POLL_S``, so an upper bound, and ``elected -> first ack`` may
read as 0) and the rest (clients and followers moving over).  The controller fences
a broker ``broker_session_timeout_ms`` after its *last heartbeat* (every
``broker_heartbeat_interval_ms``), checked every ``controller_tick_interval_ms``: with
the defaults (2000, 500, 100 ms) fencing lands 1.5-2.1 s after the kill.

Writes ``bench/results/failover.json`` (with the session timeout used).  Every process
started here is stopped by PID in ``finally``.  Run: ``python -m bench.failover``.

Costs: O(runs) failovers of a few seconds each.  The producer thread keeps a bounded
deque of acknowledgement times; everything else runs on the main thread.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from bench.cluster_lifecycle import create_topics, machine_info, running_cluster
from broker.cluster import launcher as cluster_cli
from broker.cluster.state import ClusterState
from broker.cluster.status import fetch_cluster_view
from broker.config import BrokerConfig
from broker.controller.config import ControllerConfig
from clients.producer.producer import Producer

RESULTS = Path(__file__).resolve().parent / "results"
TOPIC = "failover"
TARGETS = {"kill_to_first_ack_s": 3.0}
POLL_S = 0.02
PRODUCER = {"acks": "all", "linger_ms": 0, "request_timeout_ms": 1000,
            "retry_backoff_ms": 20, "delivery_timeout_ms": 30_000, "max_block_ms": 30_000,
            "metadata_max_age_ms": 300_000}
MAX_ACKS_KEPT = 200_000


class ProduceLoop:
    """A thread that produces one record at a time and stamps each acknowledgement."""

    def __init__(self, bootstrap: str) -> None:
        self.acks: deque[float] = deque(maxlen=MAX_ACKS_KEPT)  # monotonic end times
        self.errors: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._producer = Producer(bootstrap, **PRODUCER)  # type: ignore[arg-type]
        self._thread = threading.Thread(target=self._run, name="produce-loop", daemon=True)

    def start(self) -> ProduceLoop:
        self._thread.start()
        return self

    def _run(self) -> None:
        value = b"x" * 100
        while not self._stop.is_set():
            try:
                self._producer.send(TOPIC, value, partition=0).result(60)
                ended = time.monotonic()
                with self._lock:
                    self.acks.append(ended)
            except Exception as exc:  # counted; the loop keeps producing
                with self._lock:
                    name = type(exc).__name__
                    self.errors[name] = self.errors.get(name, 0) + 1

    def last_ack_before(self, t: float) -> float | None:
        with self._lock:  # newest first: O(acks after t)
            return next((a for a in reversed(self.acks) if a <= t), None)

    def first_ack_after(self, t: float) -> float | None:
        first = None
        with self._lock:  # newest first: O(acks after t)
            for a in reversed(self.acks):
                if a <= t:
                    break
                first = a
        return first

    def close(self) -> None:
        self._stop.set()
        self._thread.join(90)
        self._producer.close(10)


def _cluster(state: ClusterState, *args: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        code = cluster_cli.main([*args, "--data-dir", state.data_dir])
    if code != 0:
        raise RuntimeError(f"cluster {' '.join(args)} failed")


def partition_view(state: ClusterState) -> dict[str, Any]:
    for topic in fetch_cluster_view(state)["topics"]:
        if topic["name"] == TOPIC:
            return dict(topic["partitions"][0])
    raise RuntimeError(f"{TOPIC} missing from the controller's metadata")


def wait_for(condition: Any, timeout_s: float, what: str, poll_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            result = condition()
            if result:
                return result
        time.sleep(poll_s)
    raise TimeoutError(f"not within {timeout_s:.0f} s: {what}")


def one_failover(state: ClusterState, loop: ProduceLoop) -> dict[str, Any]:
    wait_for(lambda: len(partition_view(state)["isr_nodes"]) == 3, 60, "ISR of 3")
    settle = time.monotonic()
    wait_for(lambda: loop.first_ack_after(settle + 0.5) is not None, 30,
             "acks flowing with a full ISR")
    before = partition_view(state)
    leader = str(before["leader_id"])
    t_kill = time.monotonic()
    _cluster(state, "kill", leader)
    t_killed = time.monotonic()
    elected = wait_for(lambda: (p := partition_view(state))["leader_id"] not in (
        -1, before["leader_id"]) and (p, time.monotonic()), 30, "a new leader",
        poll_s=POLL_S)
    after, t_elected = elected
    first = wait_for(lambda: loop.first_ack_after(t_killed), 30, "an ack after the kill",
                     poll_s=POLL_S)
    last = loop.last_ack_before(t_kill)
    result = {
        "killed_leader": int(leader), "new_leader": after["leader_id"],
        "leader_epoch_before": before["leader_epoch"], "leader_epoch_after":
        after["leader_epoch"], "isr_after": after["isr_nodes"],
        "kill_to_first_ack_s": first - t_kill,
        "last_ack_to_first_ack_s": None if last is None else first - last,
        "kill_to_elected_s": t_elected - t_kill,
        "elected_to_first_ack_s": first - t_elected,
        "kill_command_s": t_killed - t_kill,
    }
    _cluster(state, "restart", leader)
    wait_for(lambda: len(partition_view(state)["isr_nodes"]) == 3, 60,
             "the restarted broker back in the ISR")
    return result


def plot(path: Path, runs: list[dict[str, Any]]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = range(1, len(runs) + 1)
    ax.bar(xs, [r["kill_to_elected_s"] for r in runs], label="kill -> elected")
    ax.bar(xs, [r["elected_to_first_ack_s"] for r in runs],
           bottom=[r["kill_to_elected_s"] for r in runs], label="elected -> first ack")
    ax.axhline(TARGETS["kill_to_first_ack_s"], color="red", ls="--", lw=0.8, label="target")
    ax.set_xlabel("run")
    ax.set_ylabel("seconds")
    ax.set_title("Leader SIGKILL -> first acks=all produce on the new leader")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    load_before = machine_info()["load_avg"]
    controller, broker = ControllerConfig(), BrokerConfig()
    runs: list[dict[str, Any]] = []
    loop: ProduceLoop | None = None
    with tempfile.TemporaryDirectory(prefix="minikafka-bench-failover-") as root, \
            running_cluster(root) as state:
        try:
            create_topics(state, [TOPIC])
            loop = ProduceLoop(state.bootstrap).start()
            for i in range(args.runs):
                state = ClusterState.load(state.data_dir)  # PIDs change on restart
                runs.append(one_failover(state, loop))
                r = runs[-1]
                print(f"run {i + 1}: killed broker {r['killed_leader']}, new leader "
                      f"{r['new_leader']} (epoch {r['leader_epoch_before']} -> "
                      f"{r['leader_epoch_after']}): kill -> first ack "
                      f"{r['kill_to_first_ack_s']:.3f} s", flush=True)
        finally:
            if loop is not None:
                loop.close()
    keys = ["kill_to_first_ack_s", "last_ack_to_first_ack_s", "kill_to_elected_s",
            "elected_to_first_ack_s"]
    figures = {k: statistics.median(r[k] for r in runs if r[k] is not None) for k in keys}
    figures.update({f"max_{k}": max(r[k] for r in runs if r[k] is not None) for k in keys})
    print(f"{'run':>4}{'killed':>8}{'new':>5}{'kill->ack s':>13}{'last->first s':>15}"
          f"{'kill->elected s':>17}{'elected->ack s':>16}")
    for i, r in enumerate(runs, 1):
        gap = r["last_ack_to_first_ack_s"]
        print(f"{i:>4}{r['killed_leader']:>8}{r['new_leader']:>5}"
              f"{r['kill_to_first_ack_s']:>13.3f}{gap if gap is not None else -1:>15.3f}"
              f"{r['kill_to_elected_s']:>17.3f}{r['elected_to_first_ack_s']:>16.3f}")
    print(f"{'med':>4}{'':>13}" + "".join(f"{figures[k]:>{w}.3f}"
                                         for k, w in zip(keys, (13, 15, 17, 16), strict=True)))
    print(f"session timeout {controller.broker_session_timeout_ms} ms, controller tick "
          f"{controller.controller_tick_interval_ms} ms, broker heartbeat "
          f"{broker.broker_heartbeat_interval_ms} ms")
    met = {k: figures[k] <= t for k, t in TARGETS.items()}
    for key, ok in met.items():
        print(f"target {key}: <= {TARGETS[key]} -> {figures[key]:.3f} "
              f"{'met' if ok else 'MISSED'}")
    errors = dict(loop.errors) if loop is not None else {}
    RESULTS.mkdir(exist_ok=True)
    machine = machine_info()
    machine["load_avg_before"] = load_before
    png = plot(RESULTS / "failover.png", runs)
    (RESULTS / "failover.json").write_text(json.dumps({
        "config": {**vars(args), "brokers": 3, "replication_factor": 3, "partitions": 1,
                   "min_insync_replicas": 2, "producer": PRODUCER,
                   "broker_session_timeout_ms": controller.broker_session_timeout_ms,
                   "controller_tick_interval_ms": controller.controller_tick_interval_ms,
                   "broker_heartbeat_interval_ms": broker.broker_heartbeat_interval_ms,
                   "cluster_overrides": {}, "elected_poll_s": POLL_S},
        "machine": machine, "figures": figures, "runs": runs,
        "producer_errors": errors, "targets": TARGETS, "met": met,
        "png": "failover.png" if png else None}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
