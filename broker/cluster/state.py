"""The state file of a local cluster: which processes it has, their ports, PIDs and commands.

``<data_dir>/cluster.json`` (:data:`STATE_FILE`), written by the launcher whenever a
process starts (to a temporary file, then renamed, so a reader sees the old or the new
version) and read by every later command, ``cluster status`` and the tests' harness::

    {"data_dir": "/abs/path", "base_port": 9092,
     "controller": {"name": "controller", "port": 9192, "data_dir": "...",
                    "log_file": "...", "argv": ["python", "-m", "broker.controller", ...],
                    "pid": 1234},
     "brokers": {"0": {"name": "broker-0", "port": 9092, ...}, ...}}

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
CONTROLLER_PORT_OFFSET = 100  # the layout: brokers on base_port + id, controller + 100,
INTERNAL_PORT_OFFSET = 200  # each broker's internal (replication) listener on + 200 + id
METRICS_PORT_OFFSET = 300  # with --metrics: brokers' metrics ports + 300 + id, controller's + 400


def layout_ports(base_port: int, brokers: int, metrics: bool = False) -> list[int]:
    """Every port of a cluster laid out from ``base_port``: the brokers' client ports,
    the controller's, the brokers' internal ports (and with ``metrics`` the metrics
    ports: the brokers', then the controller's)."""
    metrics_base = base_port + METRICS_PORT_OFFSET
    return [*range(base_port, base_port + brokers), base_port + CONTROLLER_PORT_OFFSET,
            *range(base_port + INTERNAL_PORT_OFFSET, base_port + INTERNAL_PORT_OFFSET + brokers),
            *([*range(metrics_base, metrics_base + brokers), metrics_base
               + CONTROLLER_PORT_OFFSET] if metrics else [])]


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


@dataclass
class ClusterState:
    """The state file's content: the controller and the brokers by id (as strings)."""

    data_dir: str
    base_port: int
    controller: ProcessInfo
    brokers: dict[str, ProcessInfo] = field(default_factory=dict)

    @property
    def controller_address(self) -> str:
        return f"127.0.0.1:{self.controller.port}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers.values())

    def process(self, target: str) -> ProcessInfo:
        if target == CONTROLLER:
            return self.controller
        if target not in self.brokers:
            known = ", ".join([CONTROLLER, *self.brokers])
            raise ClusterError(f"no process {target!r} in this cluster (known: {known})")
        return self.brokers[target]

    def save(self) -> None:
        path = Path(self.data_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)

    @classmethod
    def load(cls, data_dir: str) -> ClusterState:
        path = Path(data_dir) / STATE_FILE
        try:
            raw = json.loads(path.read_text())
            return cls(data_dir=raw["data_dir"], base_port=raw["base_port"],
                       controller=ProcessInfo(**raw["controller"]),
                       brokers={k: ProcessInfo(**v) for k, v in raw["brokers"].items()})
        except FileNotFoundError:
            raise ClusterError(f"no cluster in {data_dir} (missing {path}); "
                               "start one with 'minikafka cluster start'") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"{path} is damaged: {exc}") from None
