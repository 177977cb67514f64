"""Consumer group rebalance time: a member joins, one leaves (closes), one dies (SIGKILL),
for the classic protocol (JoinGroup/SyncGroup) and KIP-848's (ConsumerGroupHeartbeat)
in the same run.

Setup: a local 3-broker cluster (``group_initial_rebalance_delay_ms=0``; the KIP-848
session timeout and heartbeat interval, broker settings in that protocol, set to the
classic members' ``--session-timeout-ms`` / ``--heartbeat-interval-ms``), one topic of
``--partitions`` partitions (RF 3).  For each protocol and group size N, each run starts
N consumer *processes* of our client (``python -m bench.groups member ...``: subscribe,
poll, write ``<unix time> <partitions>`` to its file on every assignment change) and
waits until their assignments cover every partition exactly once.  Then:

- **join**: start member N+1; t0 = when it is about to send JoinGroup (after its
  interpreter start-up, which is not part of the rebalance); the rebalance is done when
  all N+1 latest assignments are a disjoint cover again; time = last assignment
  timestamp - t0.
  Expected: about one heartbeat interval (the members learn of the rebalance through
  REBALANCE_IN_PROGRESS on their next heartbeat) plus JoinGroup/SyncGroup round trips.
- **leave**: SIGTERM one member at t0 (it closes: LeaveGroup, or KIP-848's heartbeat
  with epoch -1); done when the others cover every partition again.
- **death**: SIGKILL one member at t0 (no LeaveGroup); done when the N survivors cover
  every partition; expected: the session timeout (the coordinator's only way to notice)
  plus one heartbeat interval and the rebalance.

Figures: medians over ``--runs`` runs per protocol and N (protocols alternated run by
run), and death minus the session timeout (the part the client and the coordinator add).  Writes
bench/results/groups.json (config, machine, per-run figures, medians, targets).

Every process started here is killed by PID in ``finally``.  Not thread-safe (one run at
a time).  Runtime: about 10 minutes with the defaults (32 member processes at most).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cluster_lifecycle import machine_info, running_cluster
from clients.admin import Admin
from clients.types import NewTopic

RESULTS = Path(__file__).parent / "results" / "groups.json"
TOPIC = "bench-groups"


def member_main(argv: list[str]) -> int:
    """Child mode: one group member that logs its assignment changes."""
    from clients.consumer.consumer import Consumer

    bootstrap, group, out, session_ms, heartbeat_ms, protocol = argv

    def closing(signum: int, frame: object) -> None:
        raise SystemExit(0)  # leaves the with-block: the consumer closes and leaves

    signal.signal(signal.SIGTERM, closing)
    with open(out, "a", buffering=1) as f, Consumer(
        bootstrap, group_id=group, session_timeout_ms=int(session_ms),
        heartbeat_interval_ms=int(heartbeat_ms), auto_offset_reset="latest",
        fetch_max_wait_ms=100, retry_backoff_ms=50, group_protocol=protocol,
    ) as consumer:  # fmt: skip
        f.write(f"ready {time.time():.6f}\n")  # imports done: about to JoinGroup
        consumer.subscribe([TOPIC])
        last: set[Any] | None = None
        while True:
            consumer.poll(timeout_ms=100)
            now = consumer.assignment()
            if now != last:
                last = now
                parts = ",".join(str(tp.partition) for tp in sorted(now)) or "-"
                f.write(f"{time.time():.6f} {parts}\n")


class Member:
    def __init__(self, args: argparse.Namespace, bootstrap: str, group: str, path: Path,
                 protocol: str):
        self.path = path
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.groups", "member", bootstrap, group, str(path),
             str(args.session_timeout_ms), str(args.heartbeat_interval_ms), protocol],
            cwd=Path(__file__).parents[1])  # fmt: skip

    def latest(self) -> tuple[float, set[int]] | None:
        if not self.path.exists():
            return None
        lines = [x for x in self.path.read_text().splitlines() if not x.startswith("ready")]
        if not lines:
            return None
        stamp, parts = lines[-1].split(" ", 1)
        return float(stamp), (set() if parts == "-" else {int(p) for p in parts.split(",")})

    def ready_at(self, timeout_s: float = 60) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.path.exists():
                for line in self.path.read_text().splitlines():
                    if line.startswith("ready "):
                        return float(line.split()[1])
            time.sleep(0.01)
        raise TimeoutError(f"member {self.path.name} never started")

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def wait_stable(members: list[Member], partitions: int, timeout_s: float = 60) -> float:
    """Wait for a disjoint cover by ``members``; the last assignment's timestamp."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        latest = [m.latest() for m in members]
        if all(x is not None for x in latest):
            sets = [x[1] for x in latest if x is not None]
            if sum(len(s) for s in sets) == partitions and set().union(*sets) == set(
                range(partitions)
            ) and all(sets):
                return max(x[0] for x in latest if x is not None)
        time.sleep(0.02)
    raise TimeoutError(f"{len(members)} members did not settle in {timeout_s} s")


def one_run(args: argparse.Namespace, bootstrap: str, protocol: str, n: int, run: int,
            tmp: Path) -> dict:
    group = f"bench-{protocol}-{n}-{run}"
    members = [Member(args, bootstrap, group, tmp / f"{group}-{i}.txt", protocol)
               for i in range(n)]
    try:
        wait_stable(members, args.partitions, args.settle_timeout_s)
        joiner = Member(args, bootstrap, group, tmp / f"{group}-{n}.txt", protocol)
        members.append(joiner)  # timed from its "ready" (process start-up excluded)
        join_s = wait_stable(members, args.partitions, args.settle_timeout_s) - joiner.ready_at()
        leaver = members.pop(0)
        t0 = time.time()
        leaver.kill(signal.SIGTERM)
        leave_s = wait_stable(members, args.partitions, args.settle_timeout_s) - t0
        victim = members.pop(0)
        time.sleep(args.heartbeat_interval_ms / 1000)  # let a heartbeat round pass
        t0 = time.time()
        victim.kill()
        death_s = wait_stable(members, args.partitions, args.settle_timeout_s) - t0
        return {"protocol": protocol, "n": n, "run": run, "join_s": round(join_s, 3),
                "leave_s": round(leave_s, 3), "death_s": round(death_s, 3)}
    finally:
        for m in members:
            m.kill()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["member"]:
        return member_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--protocols", default="classic,consumer")
    parser.add_argument("--sizes", default="2,8,32")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--settle-timeout-s", type=float, default=120)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    protocols = args.protocols.split(",")
    runs: list[dict] = []
    overrides = {"group_initial_rebalance_delay_ms": 0,
                 "group_consumer_session_timeout_ms": args.session_timeout_ms,
                 "group_consumer_heartbeat_interval_ms": args.heartbeat_interval_ms}
    with tempfile.TemporaryDirectory() as root, running_cluster(
        root, overrides=overrides
    ) as state:
        with Admin(state.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, args.partitions, 3)])
        for n in sizes:
            for run in range(args.runs):
                for protocol in protocols:  # alternated: the same load for both
                    r = one_run(args, state.bootstrap, protocol, n, run, Path(root))
                    runs.append(r)
                    print(f"{protocol:>8} N={n} run {run}: join {r['join_s']:.3f} s, leave "
                          f"{r['leave_s']:.3f} s, death {r['death_s']:.3f} s", flush=True)
    figures: dict[str, dict[str, dict[str, float]]] = {}
    print(f"\n{'protocol':>8} {'N':>3} {'join s':>8} {'leave s':>8} {'death s':>8} "
          f"{'death - session s':>18}  (medians)")
    for protocol in protocols:
        for n in sizes:
            mine = [r for r in runs if r["n"] == n and r["protocol"] == protocol]
            med = {k: round(statistics.median(r[k] for r in mine), 3)
                   for k in ("join_s", "leave_s", "death_s")}
            med["death_minus_session_s"] = round(
                med["death_s"] - args.session_timeout_ms / 1000, 3)
            figures.setdefault(protocol, {})[str(n)] = med
            print(f"{protocol:>8} {n:>3} {med['join_s']:>8.3f} {med['leave_s']:>8.3f} "
                  f"{med['death_s']:>8.3f} {med['death_minus_session_s']:>18.3f}")
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({
            "api": "our Consumer.subscribe + poll(100 ms) per member process, "
                   "group_protocol classic (range assignor) vs consumer (KIP-848, the "
                   "broker's uniform assignor)",
            "config": {k: v for k, v in vars(args).items() if k != "no_write"},
            "machine": machine_info(), "runs": runs, "figures": figures,
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
