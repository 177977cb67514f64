"""Local cluster lifecycle and helpers shared by :mod:`bench.cluster` and :mod:`bench.failover`.

``running_cluster`` starts a controller and N brokers through the same launcher users
run (``broker.cluster``) on a free loopback port range and, in ``finally``, stops them
cleanly and then SIGKILLs by PID (with their children) whatever is still alive.
Topics created here have one partition, replication factor 3 and min ISR 2.

Costs: start/stop are a few seconds of process start-up; ``leaders`` is one Metadata
request to the controller.  Not thread-safe (the launcher keeps module state).
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from broker.cluster import launcher as cluster_cli
from broker.cluster.state import ClusterError, ClusterState
from broker.cluster.status import fetch_cluster_view
from clients.admin import Admin
from clients.types import NewTopic

TOPIC_CONFIG = {"min_insync_replicas": "2"}


def _cluster_pids(data_dir: str) -> list[int]:
    try:
        state = ClusterState.load(data_dir)
    except ClusterError:
        return []
    return [i.pid for i in state.processes if i.pid]


@contextlib.contextmanager
def running_cluster(root: str, brokers: int = 3, overrides: dict[str, object] | None = None,
                    controller_overrides: dict[str, object] | None = None,
                    controllers: int = 1) -> Iterator[ClusterState]:
    """Start ``controllers`` controllers (``cluster start --controllers``) and ``brokers``
    brokers under ``root`` (``overrides``: broker config, ``controller_overrides``: the
    controllers'); stop them all after.

    Clean stop first (``cluster stop``), then SIGKILL by PID (and children) of anything
    still alive that the state file named at start or names at the end (a broker
    restarted in between is in the file by its new PID; the old one was reaped by
    ``cluster kill``/``restart``).
    """
    data_dir = str(Path(root) / "cluster")
    extra = [a for k, v in (overrides or {}).items() for a in ("--override", f"{k}={v}")]
    extra += [a for k, v in (controller_overrides or {}).items()
              for a in ("--controller-override", f"{k}={v}")]
    seen: set[int] = set()
    try:
        code = cluster_cli.main(["start", "--data-dir", data_dir, "--brokers", str(brokers),
                                 "--base-port", "0", "--controllers", str(controllers),
                                 *extra])
        seen.update(_cluster_pids(data_dir))
        if code != 0:
            raise RuntimeError("cluster start failed (see the logs under " + data_dir + ")")
        yield ClusterState.load(data_dir)
    finally:
        seen.update(_cluster_pids(data_dir))
        procs = [p for p in (_ours(pid, data_dir) for pid in seen) if p is not None]
        for proc in procs:  # a paused process cannot stop cleanly
            with contextlib.suppress(psutil.Error):
                proc.resume()
        with contextlib.suppress(Exception):
            cluster_cli.main(["stop", "--data-dir", data_dir, "--timeout-s", "20"])
        for proc in procs:
            _kill_tree(proc)


def _ours(pid: int, data_dir: str) -> psutil.Process | None:
    """The process ``pid`` if it is still one of this cluster's (guards PID reuse)."""
    try:
        proc = psutil.Process(pid)
        return proc if any(data_dir in arg for arg in proc.cmdline()) else None
    except psutil.Error:
        return None


def _kill_tree(proc: psutil.Process) -> None:
    try:
        procs = [*proc.children(recursive=True), proc]
    except psutil.Error:
        return
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=5)


def create_topics(state: ClusterState, names: list[str]) -> None:
    with Admin(state.bootstrap) as admin:
        admin.create_topics([NewTopic(n, 1, 3, dict(TOPIC_CONFIG)) for n in names])


def leaders(state: ClusterState) -> dict[str, int]:
    view = fetch_cluster_view(state)
    return {t["name"]: t["partitions"][0]["leader_id"] for t in view["topics"]}


def machine_info() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "processor": platform.processor(),
            "load_avg": list(os.getloadavg())}
