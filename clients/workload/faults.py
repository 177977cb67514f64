"""Fault injection for the workload: a schedule of kills, restarts and pauses.

Schedule syntax (``--faults``): events separated by commas, each ``ACTION@TIME``, TIME
counted from the start of the workload with a unit (``2s``, ``1.5s``, ``800ms``)::

    kill-leader[:P]     SIGKILL the current leader of partition P (default 0) of the topic
    pause-leader[:P]    SIGSTOP it
    kill:T  restart:T  pause:T  resume:T      T = a broker id, "controller" or
                        "controller-N" (a voter of a quorum, ``cluster start --controllers``)
    restart  resume     (no target) the process last killed / last paused by the schedule
    kill-controller  restart-controller       = kill:controller, restart:controller
    kill-active-controller  pause-active-controller
                        SIGKILL / SIGSTOP the active controller of the quorum (the one
                        controller of a cluster without a quorum) as found when the event
                        runs (the launcher asks the voters: DescribeQuorum); a later
                        ``restart`` / ``resume`` acts on that voter
    kill-coordinator    SIGKILL the broker leading the most partitions of
                        __transaction_state (a transaction coordinator of ~1/3 or more of
                        the transactional ids on 3 brokers; ties: the lowest id)
    crash-cluster       a whole-cluster crash: SIGKILL every broker and the controller at
                        once (the pids of the cluster's state file, signalled together by
                        this process), wait CRASH_DOWN_MS, then restart the controller and
                        the brokers one by one through the launcher (the event ends when
                        every broker is registered again)

    e.g.  kill-leader@2s,restart@4s,restart-controller@6s,pause:2@8s,resume:2@9s,
          kill-active-controller@10s,restart@12s

Events run one at a time in time order (stable for equal times) on one thread; an
event due while the previous one still runs (``restart`` waits until the broker is
registered again) runs late, and its actual time is recorded.  ``--random-faults SEED``
draws a schedule with :func:`random_schedule`: cycles of one fault and its repair, at
most one process down at any time (so a topic with replication factor 3 and min ISR 2
keeps accepting acks=all writes except during elections), except a whole-cluster crash,
which a transactional run's schedule includes (``transactional=True``).

Every fault but the crash's SIGKILLs goes through the cluster launcher,
``python -m broker.cluster ACTION TARGET --data-dir DIR`` (the client package never
imports the broker, DESIGN.md §2); the leader of a partition comes from the cluster's
metadata (``Admin.describe_topics``).
When the workload ends, events not yet due are skipped and :meth:`FaultInjector.heal`
resumes what the schedule paused and restarts what it killed, so verification reads a
whole cluster.

Costs: parsing O(len(text)); each event one launcher process (~0.5 s) plus, for a
leader, one Metadata request; a crash one launcher process per restarted process.
Thread safety: a :class:`FaultInjector` is driven by its own thread; ``stop``/``heal``
are called by the owner once the workload is done.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from clients.protocol.errors import MiniKafkaError

ACTIONS = ("kill", "restart", "pause", "resume")
CRASH = "crash"
CLUSTER = "cluster"
CRASH_DOWN_MS = 1_000
CONTROLLER = "controller"
ACTIVE_CONTROLLER = "active-controller"  # resolved by the launcher when the event runs
COORDINATOR = "coordinator"
LAST = "last"
SOURCE_ROOT = str(Path(__file__).resolve().parents[2])
_TIME = re.compile(r"^(\d+(?:\.\d+)?)(ms|s)$")
_TARGET = re.compile(r"^(controller(-\d)?|\d{1,4})$")
_ACTED_ON = re.compile(r"^(?:killed|paused) (\S+) \(pid")  # the launcher's kill / pause line


class FaultScheduleError(ValueError):
    """A fault schedule that cannot be parsed (the message says where and why)."""


class FaultEvent(NamedTuple):
    """One fault.  ``target``: a broker id, ``"controller"``, ``"controller-N"``,
    ``"active-controller"``, ``"leader:P"`` (the leader of partition P when the event
    runs) or ``"last"`` (the process the schedule last killed, for restart, or last
    paused, for resume)."""

    at_ms: int
    action: str
    target: str

    def describe(self) -> str:
        if self.target.startswith("leader:"):
            name = f"{self.action}-leader"
            partition = self.target.split(":", 1)[1]
            spec = name if partition == "0" else f"{name}:{partition}"
        elif self.target == LAST:
            spec = self.action
        elif self.target == CONTROLLER and self.action in ("kill", "restart"):
            spec = f"{self.action}-controller"
        elif self.target == ACTIVE_CONTROLLER:
            spec = f"{self.action}-{ACTIVE_CONTROLLER}"
        elif self.target == COORDINATOR:
            spec = f"{self.action}-coordinator"
        elif self.action == CRASH:
            spec = f"{CRASH}-{CLUSTER}"
        else:
            spec = f"{self.action}:{self.target}"
        return f"{spec}@{_format_time(self.at_ms)}"


def _format_time(at_ms: int) -> str:
    return f"{at_ms // 1000}s" if at_ms % 1000 == 0 else f"{at_ms}ms"


def parse_time_ms(text: str) -> int:
    match = _TIME.match(text.strip())
    if not match:
        raise FaultScheduleError(f"time {text!r} must be a number with a unit, e.g. 2s, "
                                 "1.5s or 800ms")
    value, unit = float(match.group(1)), match.group(2)
    return round(value * 1000) if unit == "s" else round(value)


def parse_action(text: str) -> tuple[str, str]:
    """``kill-leader:1`` -> (kill, leader:1); ``restart`` -> (restart, last); ..."""
    name, _, arg = text.strip().partition(":")
    for action in ("kill", "pause"):
        if name == f"{action}-leader":
            if arg and not arg.isdigit():
                raise FaultScheduleError(f"{text!r}: the partition must be a number")
            return action, f"leader:{int(arg) if arg else 0}"
    if name in ("kill-controller", "restart-controller") and not arg:
        return name.split("-")[0], CONTROLLER
    if name in (f"kill-{ACTIVE_CONTROLLER}", f"pause-{ACTIVE_CONTROLLER}") and not arg:
        return name.split("-")[0], ACTIVE_CONTROLLER
    if name == "kill-coordinator" and not arg:
        return "kill", COORDINATOR
    if name == f"{CRASH}-{CLUSTER}" and not arg:
        return CRASH, CLUSTER
    if name in ACTIONS:
        if not arg:
            if name in ("restart", "resume"):
                return name, LAST
            raise FaultScheduleError(f"{text!r}: {name} needs a target "
                                     f"({name}:ID, {name}:controller or {name}-leader)")
        if not _TARGET.match(arg):
            raise FaultScheduleError(f"{text!r}: target must be a broker id or 'controller' "
                                     "(or 'controller-N', a voter of a quorum)")
        return name, arg if arg.startswith(CONTROLLER) else str(int(arg))
    raise FaultScheduleError(
        f"unknown fault {text!r} (known: kill-leader[:P], pause-leader[:P], kill:T, "
        "restart[:T], pause:T, resume[:T], kill-controller, restart-controller, "
        "kill-active-controller, pause-active-controller, kill-coordinator, crash-cluster)")


def parse_schedule(text: str) -> list[FaultEvent]:
    """Parse ``ACTION@TIME,...`` into events sorted by time (see the module docstring)."""
    events = []
    for number, part in enumerate(text.split(","), 1):
        if not part.strip():
            raise FaultScheduleError(f"fault {number} of {text!r} is empty")
        action_text, at, time_text = part.partition("@")
        if not at:
            raise FaultScheduleError(f"fault {number} {part.strip()!r} has no time "
                                     "(write ACTION@TIME, e.g. kill-leader@2s)")
        action, target = parse_action(action_text)
        events.append(FaultEvent(parse_time_ms(time_text), action, target))
    return sorted(events, key=lambda e: e.at_ms)


def format_schedule(events: list[FaultEvent]) -> str:
    return ",".join(e.describe() for e in events)


def random_schedule(seed: int, duration_ms: int, brokers: int = 3,
                    first_at_ms: int = 1_000, transactional: bool = False) -> list[FaultEvent]:
    """Cycles of (fault, repair) within ``duration_ms``; one process down at a time.

    Each cycle picks one of: kill the leader of partition 0 then restart it, kill a
    random broker then restart it, pause a random broker then resume it, restart the
    controller; with ``transactional`` also kill the busiest transaction coordinator
    then restart it, and crash the whole cluster (its restart is part of the event; it
    is followed by a gap of 5 s more, the time its restarts take).  Down times are
    1-2.5 s; gaps between cycles 1-2 s.  Pure: the same arguments give the same schedule
    (and without ``transactional`` the same as before it existed).
    """
    if brokers < 1 or duration_ms < 0:
        raise FaultScheduleError("brokers must be >= 1 and duration_ms >= 0")
    rng = random.Random(seed)
    events: list[FaultEvent] = []
    kinds: tuple[str, ...] = ("kill-leader", "kill", "pause", "restart-controller")
    if transactional:
        kinds += ("kill-coordinator", "crash-cluster")
    t = first_at_ms
    while True:
        kind = rng.choice(kinds)
        down_ms = rng.randrange(1_000, 2_500, 100)
        if kind == "restart-controller":
            cycle = [FaultEvent(t, "restart", CONTROLLER)]
        elif kind == "crash-cluster":
            cycle = [FaultEvent(t, CRASH, CLUSTER)]
            down_ms = 5_000
        elif kind == "kill-coordinator":
            cycle = [FaultEvent(t, "kill", COORDINATOR), FaultEvent(t + down_ms, "restart", LAST)]
        else:
            action = "pause" if kind == "pause" else "kill"
            target = "leader:0" if kind == "kill-leader" else str(rng.randrange(brokers))
            repair = "resume" if action == "pause" else "restart"
            cycle = [FaultEvent(t, action, target), FaultEvent(t + down_ms, repair, LAST)]
        if cycle[-1].at_ms > duration_ms:
            return events
        events.extend(cycle)
        t = cycle[-1].at_ms + rng.randrange(1_000, 2_000, 100) + (
            down_ms if kind == "crash-cluster" else 0)


# -- running a schedule against a local cluster --------------------------------------------


def bootstrap_from_data_dir(data_dir: str) -> str:
    """Broker addresses of the local cluster in ``data_dir`` (its ``cluster.json``)."""
    path = Path(data_dir) / "cluster.json"
    try:
        state = json.loads(path.read_text())
        return ",".join(f"127.0.0.1:{b['port']}" for b in state["brokers"].values())
    except FileNotFoundError:
        raise FaultScheduleError(f"no cluster in {data_dir} (missing {path}); start one "
                                 "with 'minikafka cluster start'") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FaultScheduleError(f"{path} is damaged: {exc}") from None


def cluster_pids(data_dir: str) -> dict[str, int]:
    """Target (a controller's name or a broker id) -> pid, from the cluster's state
    file."""
    path = Path(data_dir) / "cluster.json"
    try:
        state = json.loads(path.read_text())
        controllers = state.get("controllers") or {CONTROLLER: state["controller"]}
        pids = {name: int(c["pid"]) for name, c in controllers.items()}
        pids.update({str(k): int(b["pid"]) for k, b in state["brokers"].items()})
        return pids
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FaultScheduleError(f"cannot read the cluster's processes from {path}: "
                                 f"{exc}") from None


def sigkill_all(data_dir: str, timeout_s: float = 10.0) -> list[str]:
    """SIGKILL every process of the cluster at once, wait until they are gone; the
    targets that were running.  (Their parent, the launcher that started them, reaps
    them; a zombie counts as gone.)"""
    import psutil

    procs: dict[str, psutil.Process] = {}
    for target, pid in cluster_pids(data_dir).items():
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                procs[target] = proc
        except psutil.NoSuchProcess:
            continue
    for proc in procs.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    deadline = time.monotonic() + timeout_s
    for target, proc in procs.items():
        while time.monotonic() < deadline:
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.02)
        else:
            raise RuntimeError(f"{target} (pid {proc.pid}) did not exit after SIGKILL")
    return sorted(procs, key=lambda t: (not t.startswith(CONTROLLER), t))


def run_launcher(data_dir: str, action: str, target: str, timeout_s: float) -> str:
    """``python -m broker.cluster ACTION TARGET --data-dir DIR``; its output, or raise."""
    env = dict(os.environ, PYTHONPATH=SOURCE_ROOT + os.pathsep + os.environ.get("PYTHONPATH",
                                                                              ""))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "broker.cluster", action, target, "--data-dir", data_dir,
             "--timeout-s", str(timeout_s)],
            capture_output=True, text=True, timeout=timeout_s + 30, env=env, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"cluster {action} {target} did not finish") from None
    output = (result.stdout + result.stderr).strip()
    if result.returncode != 0:
        raise RuntimeError(output or f"cluster {action} {target} failed ({result.returncode})")
    return output


class AppliedFault(NamedTuple):
    event: FaultEvent
    ran_at_ms: int
    outcome: str  # what the launcher said, or "skipped: ..." / "failed: ..."


class FaultInjector:
    """Runs a schedule on its own thread against the cluster in ``data_dir``."""

    def __init__(self, data_dir: str, topic: str, events: list[FaultEvent], *,
                 log: Callable[[str], None] = print, timeout_s: float = 60.0,
                 launcher: Callable[[str, str, str, float], str] = run_launcher,
                 leader_of: Callable[[int], int] | None = None,
                 crash: Callable[[str], list[str]] = sigkill_all,
                 crash_down_ms: int = CRASH_DOWN_MS) -> None:
        self.data_dir = data_dir
        self.topic = topic
        self.events = sorted(events, key=lambda e: e.at_ms)
        self.applied: list[AppliedFault] = []
        self._log = log
        self._timeout_s = timeout_s
        self._launcher = launcher
        self._leader_of = leader_of or self._metadata_leader
        self._crash = crash
        self._crash_down_ms = crash_down_ms
        self._down: dict[str, str] = {}  # target -> "kill" | "pause"
        self._last = {"kill": "", "pause": ""}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-injector", daemon=True)
        self._start = 0.0

    def start(self) -> None:
        self._start = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """Skip the events not yet started; wait for a running one to finish."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self._timeout_s + 60)
        done = {a.event for a in self.applied}
        for event in self.events:
            if event not in done:
                self.applied.append(AppliedFault(event, -1, "skipped: the workload ended"))

    def heal(self) -> list[str]:
        """Resume what is paused and restart what is killed; what was done."""
        done = []
        for target, how in list(self._down.items()):
            action = "resume" if how == "pause" else "restart"
            try:
                self._launcher(self.data_dir, action, target, self._timeout_s)
                done.append(f"{action} {target}")
                del self._down[target]
            except RuntimeError as exc:
                done.append(f"{action} {target} failed: {exc}")
        return done

    @property
    def down(self) -> dict[str, str]:
        return dict(self._down)

    def _run(self) -> None:
        for event in self.events:
            delay = self._start + event.at_ms / 1000 - time.monotonic()
            if self._stop.wait(max(0.0, delay)):
                return
            ran_at_ms = int((time.monotonic() - self._start) * 1000)
            outcome = self.apply(event)
            self.applied.append(AppliedFault(event, ran_at_ms, outcome))
            self._log(f"fault {event.describe()} at {ran_at_ms / 1000:.1f} s: {outcome}")

    def apply(self, event: FaultEvent) -> str:
        """Run one event now; the outcome as text (never raises for a failed fault)."""
        target = event.target
        if event.action == CRASH:
            return self._crash_cluster()
        try:
            if target.startswith("leader:"):
                leader = self._leader_of(int(target.split(":", 1)[1]))
                if leader < 0:
                    return f"skipped: {self.topic}-{target[7:]} has no leader"
                target = str(leader)
            elif target == COORDINATOR:
                target = str(self._busiest_coordinator())
            elif target == LAST:
                target = self._last["kill" if event.action == "restart" else "pause"]
                if not target:
                    return f"skipped: nothing to {event.action}"
            elif target == ACTIVE_CONTROLLER:
                target = CONTROLLER  # of a quorum the launcher takes the active one
            output = self._launcher(self.data_dir, event.action, target, self._timeout_s)
        except (RuntimeError, OSError, ValueError, MiniKafkaError) as exc:
            return f"failed: {exc}"
        if event.target == ACTIVE_CONTROLLER:  # the voter it was, for restart / resume
            acted_on = _ACTED_ON.match(output.splitlines()[-1] if output else "")
            target = acted_on.group(1) if acted_on else target
        if event.action in ("kill", "pause"):
            self._down[target] = event.action
            self._last[event.action] = target
        else:
            self._down.pop(target, None)
        return output.splitlines()[-1] if output else "done"

    def _crash_cluster(self) -> str:
        """SIGKILL every process, wait, restart the controller then each broker (a
        restart that fails leaves its target down for :meth:`heal`)."""
        try:
            killed = self._crash(self.data_dir)
        except (RuntimeError, OSError, ValueError) as exc:
            return f"failed: {exc}"
        for target in killed:
            self._down[target] = "kill"
        time.sleep(self._crash_down_ms / 1000)  # all down together, also when stopping
        restarted, failed = [], []
        for target in sorted(self._down, key=lambda t: (not t.startswith(CONTROLLER), t)):
            try:
                self._launcher(self.data_dir, "restart", target, self._timeout_s)
                del self._down[target]
                restarted.append(target)
            except (RuntimeError, OSError) as exc:
                failed.append(f"{target} ({exc})")
        return (f"killed {', '.join(killed) or 'nothing'}; restarted "
                f"{', '.join(restarted) or 'nothing'}"
                + (f"; restart failed: {'; '.join(failed)}" if failed else ""))

    def _busiest_coordinator(self) -> int:
        """The broker leading the most partitions of ``__transaction_state``."""
        from clients.admin import Admin
        from clients.protocol.topics import TRANSACTION_STATE_TOPIC

        with Admin(bootstrap_from_data_dir(self.data_dir), request_timeout_ms=5_000) as admin:
            parts = admin.describe_topics([TRANSACTION_STATE_TOPIC])[TRANSACTION_STATE_TOPIC]
        leaders = Counter(p.leader for p in parts.partitions if p.leader >= 0)
        if not leaders:
            raise ValueError(f"{TRANSACTION_STATE_TOPIC} has no leader (no transactions yet?)")
        return min(leaders, key=lambda broker: (-leaders[broker], broker))

    def _metadata_leader(self, partition: int) -> int:
        from clients.admin import Admin

        with Admin(bootstrap_from_data_dir(self.data_dir), request_timeout_ms=5_000) as admin:
            partitions = admin.describe_topics([self.topic])[self.topic].partitions
        if not 0 <= partition < len(partitions):
            raise ValueError(f"{self.topic} has no partition {partition}")
        return partitions[partition].leader
