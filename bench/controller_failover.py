"""Controller failover and metadata commit latency, 1 controller vs a quorum of 3 (issue 34).

Setup per controller count N (1 or 3): a local cluster of N controllers
(``cluster start --controllers N``, Kafka's quorum timeouts: election 1 s randomized to
[1 s, 2 s), fetch 2 s; or with ``N:local`` in ``--controllers`` a local cluster's
tuning: election 500 ms, fetch 1 s) and 3 brokers, with default settings otherwise.  Every
measurement is a CreateTopics (one partition, replication factor 1) sent by our
``clients.admin.Admin`` to a broker, which forwards it to the active controller; its
answer comes once the topic's record is committed (N = 1: fsync'd; N = 3: on a majority).

- **commit**: ``--commits`` CreateTopics one after the other, no fault: the answer time.
- **failover**: ``--runs`` times: SIGKILL the active controller (its PID, at t0); for
  N = 1 start it again at once (``cluster restart``: the only way back for one
  controller), for N = 3 leave it down; then send CreateTopics every ``RETRY_S`` (each
  with a ``ATTEMPT_TIMEOUT_MS`` budget) until one is answered without error (or
  TOPIC_ALREADY_EXISTS: an earlier attempt committed); time = that answer - t0
  ("SIGKILL -> next committed record").  After each N = 3 run the killed voter is
  restarted and the next run waits until every voter has the leader's log end.

Figures: median and p90 (and every run) per N.  Writes
``bench/results/controller_failover.json`` (API, input, settings, machine).  Every
process started here is stopped by PID in ``finally`` (``bench.cluster_lifecycle``).
Run: ``python -m bench.controller_failover --runs 20``.  Costs: O(runs) failovers of a
few seconds each.  Not thread-safe (one run at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cluster_lifecycle import machine_info, running_cluster
from broker.cluster import launcher as cluster_cli
from broker.cluster.controllers import active_controller, describe_quorum
from broker.cluster.state import ClusterState
from clients.admin import Admin
from clients.protocol.errors import MiniKafkaError
from clients.types import NewTopic

RESULTS = Path(__file__).parent / "results" / "controller_failover.json"
RETRY_S = 0.02
ATTEMPT_TIMEOUT_MS = 5_000
WAIT_S = 60.0


def _create(admin: Admin, name: str) -> bool:
    """True once the topic is committed (created now or by an earlier attempt)."""
    try:
        admin.create_topics([NewTopic(name, 1, 1)], timeout_ms=ATTEMPT_TIMEOUT_MS)
        return True
    except MiniKafkaError as e:
        return "TOPIC_ALREADY_EXISTS" in str(e)
    except (OSError, TimeoutError):
        return False


def _quorum_healthy(data_dir: str) -> bool:
    state = ClusterState.load(data_dir)
    if len(state.controllers) == 1:
        return True
    try:
        view = describe_quorum(state)
    except Exception:
        return False
    ends = [v["log_end_offset"] for v in view["voters"]]
    return (view.get("leader_id", -1) >= 0 and all(e == view["high_watermark"] for e in ends)
            and all(v["role"] in ("leader", "follower") for v in view["voters"]))


def _wait(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_s": round(statistics.median(ordered), 3),
            "p90_s": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3),
            "min_s": round(ordered[0], 3), "max_s": round(ordered[-1], 3)}


KAFKA_TIMEOUTS = {"quorum_election_timeout_ms": 1_000, "quorum_fetch_timeout_ms": 2_000}
LOCAL_TIMEOUTS = {"quorum_election_timeout_ms": 500, "quorum_fetch_timeout_ms": 1_000}


def parse_setups(spec: str) -> list[tuple[int, dict[str, int]]]:
    """``1,3,3:local`` -> (controllers, quorum timeouts) per setup: Kafka's defaults, or
    ``:local`` (election 500 ms, fetch 1 s: a local cluster's tuning)."""
    setups = []
    for item in spec.split(","):
        count, _, tuning = item.partition(":")
        if tuning not in ("", "local"):
            raise ValueError(f"unknown quorum tuning {tuning!r} (only 'local')")
        setups.append((int(count), LOCAL_TIMEOUTS if tuning else KAFKA_TIMEOUTS))
    return setups


def measure(controllers: int, runs: int, commits: int,
            timeouts: dict[str, int] = KAFKA_TIMEOUTS) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-ctl-failover-") as root, \
            running_cluster(root, brokers=3, controllers=controllers,
                            controller_overrides=dict(timeouts)) as started:
        data_dir = started.data_dir
        with Admin(started.bootstrap, request_timeout_ms=ATTEMPT_TIMEOUT_MS) as admin:
            _wait(lambda: _quorum_healthy(data_dir), "a healthy quorum")
            _wait(lambda: _create(admin, "warm-up"), "the first CreateTopics")
            commit_s = []
            for i in range(commits):
                t0 = time.monotonic()
                if not _create(admin, f"commit-{i}"):
                    raise RuntimeError("CreateTopics failed without a fault")
                commit_s.append(time.monotonic() - t0)
            failover_s = []
            for i in range(runs):
                _wait(lambda: _quorum_healthy(data_dir), "every voter caught up")
                victim = active_controller(ClusterState.load(data_dir))
                t0 = time.monotonic()
                os.kill(victim.pid, signal.SIGKILL)
                if controllers == 1:
                    cluster_cli.main(["restart", victim.name, "--data-dir", data_dir])
                while not _create(admin, f"failover-{i}"):
                    time.sleep(RETRY_S)
                failover_s.append(time.monotonic() - t0)
                print(f"controllers={controllers} run {i}: {failover_s[-1]:.3f} s",
                      file=sys.stderr, flush=True)
                if controllers > 1:
                    cluster_cli.main(["restart", victim.name, "--data-dir", data_dir])
    return {"controllers": controllers, "quorum_timeouts": timeouts,
            "commit": _summary(commit_s),
            "commit_runs_s": [round(x, 4) for x in commit_s],
            "failover": _summary(failover_s), "failover_runs_s": [round(x, 3) for x in failover_s]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.controller_failover")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--controllers", default="1,3",
                        help="setups, e.g. 1,3,3:local (':local': election 500 ms, fetch 1 s)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    results = [measure(n, args.runs, args.commits, timeouts)
               for n, timeouts in parse_setups(args.controllers)]
    report = {
        "bench": "controller_failover",
        "api": "clients.admin.Admin.create_topics (CreateTopics v7 to a broker, forwarded to "
               "the active controller); SIGKILL by PID of the active controller "
               "(broker.cluster.controllers.active_controller)",
        "input": {"brokers": 3, "topic": "1 partition, replication factor 1 per request",
                  "runs": args.runs, "commits": args.commits,
                  "quorum": "per result (quorum_timeouts): Kafka's defaults election 1000 ms "
                            "(randomized to [1 s, 2 s)), fetch 2000 ms; ':local' 500 / 1000 ms",
                  "one_controller": "restarted at once after the SIGKILL (cluster restart)",
                  "three_controllers": "the killed voter stays down until the run ends"},
        "figures": "failover = SIGKILL -> first CreateTopics answered without error; "
                   "commit = CreateTopics answer time without faults",
        "machine": machine_info(),
        "results": results,
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for r in results:
        print(f"controllers={r['controllers']} {r['quorum_timeouts']}: "
              f"commit median {r['commit']['median_s']} s, "
              f"failover median {r['failover']['median_s']} s p90 {r['failover']['p90_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
