"""Rebuild a damaged or missing ``cluster.json`` from the cluster's running processes.

The state file is how every ``minikafka cluster`` command finds its processes; if it is
cut short, overwritten or deleted while the cluster runs, the processes keep running
and nothing could stop them through the CLI.  :func:`load_state` reads the file and,
when it cannot, looks for this cluster's processes instead: a process whose command
line carries ``--data-dir <data_dir>/controller`` or ``<data_dir>/controller-<i>`` (a
quorum's voter; ``python -m broker.controller``) or
``--data-dir <data_dir>/broker-<id>`` (``python -m broker start``), the layout
:mod:`broker.cluster.launcher` creates.  Their command lines give the ports and node
ids; the log file names follow the layout.  The rebuilt state is written back (the old
file kept as ``cluster.json.damaged``) and a warning says so.  With no such process the
original error stands (nothing to rebuild from; ``cluster start`` makes a new file).

Limits: a broker or voter that is not running is not found (``cluster start`` again after a
``stop`` brings every broker back from a new file).  Costs: one pass over the machine's
processes (psutil).  Thread-safety: a command-line process, one thread.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psutil

from broker.cluster.state import (
    CONTROLLER,
    CONTROLLER_PORT_OFFSET,
    STATE_FILE,
    ClusterError,
    ClusterState,
    ProcessInfo,
)

__all__ = ["find_cluster_processes", "load_state"]

log = logging.getLogger(__name__)

def _flag(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg == name:
            return argv[i + 1]
    return None


def find_cluster_processes(data_dir: str) -> dict[str, ProcessInfo]:
    """This cluster's running processes by name (``controller``, ``controller-<i>``,
    ``broker-<id>``)."""
    root = Path(data_dir).resolve()
    found: dict[str, ProcessInfo] = {}
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        argv = proc.info.get("cmdline") or []
        if proc.info.get("status") == psutil.STATUS_ZOMBIE or "--data-dir" not in argv:
            continue
        own_dir, port = _flag(argv, "--data-dir"), _flag(argv, "--port")
        if own_dir is None or port is None or not port.isdigit():
            continue
        path = Path(own_dir).resolve()
        if path.parent != root:
            continue
        name = path.name
        is_controller = (name == CONTROLLER or (name.startswith(f"{CONTROLLER}-")
                                                and name[len(CONTROLLER) + 1:].isdigit())
                         ) and "broker.controller" in argv
        is_broker = name.startswith("broker-") and name[7:].isdigit() and "broker" in argv
        if not (is_controller or is_broker):
            continue
        found[name] = ProcessInfo(name, int(port), str(path), str(root / f"{name}.log"),
                                  list(argv), proc.info["pid"])
    return found


def load_state(data_dir: str) -> ClusterState:
    """The state file, or (damaged or missing, processes running) one rebuilt from them."""
    try:
        return ClusterState.load(data_dir)
    except ClusterError as error:
        found = find_cluster_processes(data_dir)
        if not found:
            raise
        controllers = {name: found.pop(name) for name in sorted(found)
                       if name.startswith(CONTROLLER)}
        brokers = {name[7:]: info for name, info in sorted(found.items())}
        root = str(Path(data_dir).resolve())
        if not controllers:  # none running: one, its port following the layout
            base = min(b.port - int(k) for k, b in brokers.items())
            controllers[CONTROLLER] = ProcessInfo(
                CONTROLLER, base + CONTROLLER_PORT_OFFSET, str(Path(root) / CONTROLLER),
                str(Path(root) / f"{CONTROLLER}.log"), [], 0)
        first = next(iter(controllers.values()))  # controller-i listens on base+100+i-1
        index = 1 if first.name == CONTROLLER else int(first.name.rpartition("-")[2])
        base_port = (min(b.port - int(k) for k, b in brokers.items()) if brokers
                     else first.port - CONTROLLER_PORT_OFFSET - (index - 1))
        state = ClusterState(root, base_port, controllers, brokers)
        path = Path(data_dir) / STATE_FILE
        if path.exists():
            os.replace(path, path.with_name(STATE_FILE + ".damaged"))
        state.save()
        log.warning("%s; rebuilt it from the running processes (%s)", error,
                    ", ".join(i.name for i in state.processes if i.pid))
        return state
