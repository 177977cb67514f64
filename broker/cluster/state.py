"""The state file of a local cluster: which processes it has, their ports, PIDs and commands.

``<data_dir>/cluster.json`` (:data:`STATE_FILE`), written by the launcher whenever a
process starts (to a temporary file, then renamed, so a reader sees the old or the new
version) and read by every later command, ``cluster status`` and the tests' harness::

    {"data_dir": "/abs/path", "base_port": 9092,
     "controllers": {"controller": {"name": "controller", "port": 9192, "data_dir": "...",
                     "log_file": "...", "argv": ["python", "-m", "broker.controller", ...],
                     "pid": 1234}},
     "controller": {...the first of "controllers", for readers of the one-controller file},
     "brokers": {"0": {"name": "broker-0", "port": 9092, ...}, ...}}

The controllers are the voters of the controller quorum (issue 34, docs/quorum_brokers.md): one,
named ``controller`` (the layout before quorums, unchanged), or ``controller-1`` ..
``controller-N`` with voter (node) ids ``3001`` .. ``3000+N``
(:data:`VOTER_ID_BASE`: apart from the broker ids 0..99, since a voter's Fetch names
its voter id as ``replica_id`` and a broker's names its broker id), on ports
``base_port + 100 + i - 1``.  A file written before quorums (``"controller"`` only)
loads as one controller.

A missing or damaged file is a :class:`ClusterError` (one line for the user).
Costs: load/save O(processes).  Thread-safety: none (a command-line process).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_FILE = "cluster.json"
CONTROLLER = "controller"
VOTER_ID_BASE = 3000  # controller-i of a quorum is voter 3000 + i (see the docstring)
CONTROLLER_PORT_OFFSET = 100  # the layout: brokers on base_port + id, controllers + 100..,
INTERNAL_PORT_OFFSET = 200  # each broker's internal (replication) listener on + 200 + id
METRICS_PORT_OFFSET = 300  # with --metrics: brokers' metrics ports + 300 + id, controller's + 400


def layout_ports(base_port: int, brokers: int, metrics: bool = False,
                 controllers: int = 1) -> list[int]:
    """Every port of a cluster laid out from ``base_port``: the brokers' client ports,
    the controllers', the brokers' internal ports (and with ``metrics`` the metrics
    ports: the brokers', then the controllers')."""
    metrics_base = base_port + METRICS_PORT_OFFSET
    first = base_port + CONTROLLER_PORT_OFFSET
    return [*range(base_port, base_port + brokers), *range(first, first + controllers),
            *range(base_port + INTERNAL_PORT_OFFSET, base_port + INTERNAL_PORT_OFFSET + brokers),
            *([*range(metrics_base, metrics_base + brokers),
               *range(metrics_base + CONTROLLER_PORT_OFFSET,
                      metrics_base + CONTROLLER_PORT_OFFSET + controllers)] if metrics else [])]


class ClusterError(Exception):
    """A user-facing failure of a cluster command (one line, exit status 1)."""


@dataclass
class ProcessInfo:
    """One process of the cluster: its name, port, data dir, log file, command line and
    PID (0: never started)."""

    name: str
    port: int
    data_dir: str
    log_file: str
    argv: list[str]
    pid: int = 0

    @property
    def internal_port(self) -> int:
        """A broker's internal listener port from its command line (-1: none)."""
        try:
            return int(override_settings(self.argv).get("internal_port", "-1"))
        except ValueError:
            return -1

    @property
    def metrics_port(self) -> int:
        """The process's metrics port from its command line (-1: none)."""
        try:
            return int(override_settings(self.argv).get("metrics_port", "-1"))
        except ValueError:
            return -1


def override_settings(argv: Sequence[str]) -> dict[str, str]:
    """The ``--override key=value`` settings of a command line, keys spelt with ``_``
    (the configs accept ``.`` and ``-`` too); a later one wins."""
    out: dict[str, str] = {}
    for flag, value in itertools.pairwise(argv):
        if flag == "--override" and "=" in value:
            key, _, setting = value.partition("=")
            out[key.strip().replace(".", "_").replace("-", "_")] = setting
    return out


def voter_id(info: ProcessInfo) -> int:
    """A controller's voter id from its command line (``--node-id``; -1: none, the
    one-controller form)."""
    for flag, value in itertools.pairwise(info.argv):
        if flag == "--node-id" and value.lstrip("-").isdigit():
            return int(value)
    return -1


@dataclass
class ClusterState:
    """The state file's content: the controllers (the quorum's voters) by name and the
    brokers by id (as strings)."""

    data_dir: str
    base_port: int
    controllers: dict[str, ProcessInfo]
    brokers: dict[str, ProcessInfo] = field(default_factory=dict)

    @property
    def controller(self) -> ProcessInfo:
        """The first controller: the only one of a one-controller cluster."""
        return next(iter(self.controllers.values()))

    @property
    def processes(self) -> list[ProcessInfo]:
        """Every process: the controllers, then the brokers."""
        return [*self.controllers.values(), *self.brokers.values()]

    @property
    def controller_address(self) -> str:
        """What brokers are given: ``host:port`` of the one controller, or the voters
        ``id@host:port,...`` (Kafka's controller.quorum.voters) of a quorum."""
        if len(self.controllers) == 1 and voter_id(self.controller) < 0:
            return f"127.0.0.1:{self.controller.port}"
        return ",".join(f"{voter_id(c)}@127.0.0.1:{c.port}"
                        for c in self.controllers.values())

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers.values())

    def process(self, target: str) -> ProcessInfo:
        if target in self.controllers:
            return self.controllers[target]
        if target not in self.brokers:
            known = ", ".join([*self.controllers, *self.brokers])
            raise ClusterError(f"no process {target!r} in this cluster (known: {known})")
        return self.brokers[target]

    def save(self) -> None:
        path = Path(self.data_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**asdict(self), "controller": asdict(self.controller)},
                                  indent=2))
        os.replace(tmp, path)

    @classmethod
    def load(cls, data_dir: str) -> ClusterState:
        path = Path(data_dir) / STATE_FILE
        try:
            raw = json.loads(path.read_text())
            controllers = (raw.get("controllers")
                           or {raw["controller"]["name"]: raw["controller"]})
            state = cls(data_dir=raw["data_dir"], base_port=raw["base_port"],
                        controllers={k: ProcessInfo(**v) for k, v in controllers.items()},
                        brokers={k: ProcessInfo(**v) for k, v in raw["brokers"].items()})
            if not state.controllers:
                raise ValueError("no controller")
            return state
        except FileNotFoundError:
            raise ClusterError(f"no cluster in {data_dir} (missing {path}); "
                               "start one with 'minikafka cluster start'") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"{path} is damaged: {exc}") from None
