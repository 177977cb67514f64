"""The controllers of a local cluster: the voters of its controller quorum (issue 34,
docs/quorum_brokers.md), how the launcher lays them out and how ``cluster status`` and the
fault commands see them.

Layout (:func:`controller_processes`): ``--controllers 1`` (the default) is the one
controller of before, unchanged (name ``controller``, data dir ``<root>/controller``,
port ``base + 100``, no voters flag).  ``--controllers N`` (3 or 5) starts voters
``controller-1`` .. ``controller-N``, voter ids ``3001`` .. ``3000+N``
(:data:`broker.cluster.state.VOTER_ID_BASE`), data dirs ``<root>/controller-i``,
ports ``base + 100 + i - 1`` (metrics ``base + 400 + i - 1``), each started as
``python -m broker.controller --node-id ID --controller-quorum-voters
"3001@127.0.0.1:P1,..."`` (the contract with the controller side); brokers get the
same list as ``--controller-quorum-voters``.

The quorum's view (:func:`describe_quorum`): DescribeQuorum (``__cluster_metadata``-0)
to each running voter, logged in as the cluster's brokers log in (a controller of a
cluster with a secret serves nothing else); the answer of the voter that names itself
leader is preferred (the leader knows every voter's log end offset), else the first
answer.  Per voter: its process state, role (``leader`` / ``follower`` / ``observer``:
a voter whose disk was lost, as its own answer says / ``-``), the
leader epoch, log end offset and lag (the leader's log end minus the voter's).  A
controller that does not serve DescribeQuorum (one before the quorum's wiring) leaves
the roles unknown; status never fails on it.  :func:`active_controller` is the leader's
process; :func:`controller_target` what ``cluster kill|pause|restart controller`` act on
(the active voter) and ``resume controller`` (the one paused voter).

Costs: one DescribeQuorum round trip per running voter (bounded by the status timeout).
Thread-safety: a command-line process, one thread.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from broker.cluster.access import operator_access, process_status, status_request
from broker.cluster.state import (
    CONTROLLER,
    CONTROLLER_PORT_OFFSET,
    VOTER_ID_BASE,
    ClusterError,
    ClusterState,
    ProcessInfo,
    voter_id,
)
from broker.metadata.controller_channel import DESCRIBE_QUORUM_BODY
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import MiniKafkaError

__all__ = ["CONTROLLER_COUNTS", "active_controller", "controller_processes",
           "controller_target", "describe_quorum", "voters_flag"]

CONTROLLER_COUNTS = (1, 3, 5)  # a quorum of 2 or 4 survives no more than one of 1 or 3


def controller_processes(root: Path, count: int, base_port: int, metrics_base: int,
                         common_args: list[str]) -> dict[str, ProcessInfo]:
    """The controllers' processes (see the module docstring); ``common_args``: what every
    controller gets (secret, cluster id, TLS, ``--controller-override``s)."""
    if count not in CONTROLLER_COUNTS:
        raise ClusterError(f"--controllers must be one of {CONTROLLER_COUNTS}, got {count}")
    port = base_port + CONTROLLER_PORT_OFFSET
    if count == 1:
        return {CONTROLLER: ProcessInfo(
            CONTROLLER, port, str(root / CONTROLLER), str(root / f"{CONTROLLER}.log"),
            [sys.executable, "-m", "broker.controller", "--port", str(port), "--data-dir",
             str(root / CONTROLLER), *_metrics(metrics_base, 0), *common_args])}
    voters = ",".join(f"{VOTER_ID_BASE + i}@127.0.0.1:{port + i - 1}"
                      for i in range(1, count + 1))
    out: dict[str, ProcessInfo] = {}
    for i in range(1, count + 1):
        name = f"{CONTROLLER}-{i}"
        out[name] = ProcessInfo(
            name, port + i - 1, str(root / name), str(root / f"{name}.log"),
            [sys.executable, "-m", "broker.controller", "--port", str(port + i - 1),
             "--data-dir", str(root / name), "--node-id", str(VOTER_ID_BASE + i),
             "--controller-quorum-voters", voters, *_metrics(metrics_base, i - 1),
             *common_args])
    return out


def _metrics(metrics_base: int, index: int) -> list[str]:
    if metrics_base < 0:
        return []
    return ["--override", f"metrics_port={metrics_base + CONTROLLER_PORT_OFFSET + index}"]


def voters_flag(state: ClusterState) -> list[str]:
    """How a broker is pointed at the controllers: ``--controller HOST:PORT`` (one) or
    ``--controller-quorum-voters ID@HOST:PORT,...``."""
    if len(state.controllers) == 1 and voter_id(state.controller) < 0:
        return ["--controller", state.controller_address]
    return ["--controller-quorum-voters", state.controller_address]


def _describe(state: ClusterState, info: ProcessInfo) -> dict[str, Any] | None:
    """``info``'s DescribeQuorum partition answer, or None (not running, refused, not
    served)."""
    if process_status(info.pid) != "running":
        return None
    node = min((int(k) for k in state.brokers), default=0)
    try:
        answer = status_request(info.port, ApiKey.DESCRIBE_QUORUM, DESCRIBE_QUORUM_BODY,
                                **operator_access(node, info, login=True))
    except (MiniKafkaError, OSError):
        return None
    if answer.get("error_code"):
        return None
    for topic in answer.get("topics") or ():
        for part in topic.get("partitions") or ():
            if part.get("error_code") == 0:
                return dict(part)
    return None


def _is_leader(state: ClusterState, info: ProcessInfo, leader_id: int) -> bool:
    own = voter_id(info)
    return leader_id >= 0 and (own == leader_id or (own < 0 and len(state.controllers) == 1))


def describe_quorum(state: ClusterState) -> dict[str, Any]:
    """The quorum as its voters describe it: ``leader_id``, ``leader_epoch``,
    ``high_watermark`` and ``voters`` (name, voter id, state, role, log end offset,
    lag); ``error`` when no voter answered."""
    answers = {name: _describe(state, info) for name, info in state.controllers.items()}
    chosen = next((a for name, a in answers.items() if a is not None
                   and _is_leader(state, state.controllers[name], a["leader_id"])), None)
    chosen = chosen or next((a for a in answers.values() if a is not None), None)
    voters = []
    ends = {v["replica_id"]: v["log_end_offset"]
            for v in (chosen or {}).get("current_voters", [])}
    leader_id = chosen["leader_id"] if chosen else -1
    leader_end = next((end for vid, end in ends.items() if vid == leader_id), -1)
    for name, info in state.controllers.items():
        vid = voter_id(info)
        running = process_status(info.pid)
        end = ends.get(vid, -1) if vid >= 0 else (leader_end if chosen else -1)
        role = "-"
        if chosen is not None and running == "running":
            role = "leader" if _is_leader(state, info, leader_id) else "follower"
            own = answers.get(name) or {}
            if any(o.get("replica_id") == vid for o in own.get("observers") or ()):
                role = "observer"  # its disk was lost: not a voter until caught up
        voters.append({"name": name, "voter_id": vid, "state": running, "role": role,
                       "log_end_offset": end,
                       "lag": leader_end - end if end >= 0 and leader_end >= 0 else -1})
    view: dict[str, Any] = {"leader_id": leader_id,
                            "leader_epoch": chosen["leader_epoch"] if chosen else -1,
                            "high_watermark": chosen["high_watermark"] if chosen else -1,
                            "voters": voters}
    if chosen is None:
        view["error"] = "no controller answered DescribeQuorum"
    return view


def active_controller(state: ClusterState) -> ProcessInfo:
    """The leader's process (the only controller of a one-controller cluster)."""
    if len(state.controllers) == 1:
        return state.controller
    view = describe_quorum(state)
    for voter in view["voters"]:
        if voter["role"] == "leader":
            return state.controllers[voter["name"]]
    raise ClusterError(f"no active controller: {view.get('error') or 'no leader elected'}")


def controller_target(state: ClusterState, command: str) -> ProcessInfo:
    """What ``cluster COMMAND controller`` acts on: the one controller; of a quorum the
    paused one for ``resume`` (it must be the only one paused), else the active one."""
    if len(state.controllers) == 1:
        return state.controller
    if command == "resume":
        paused = [c for c in state.controllers.values() if process_status(c.pid) == "paused"]
        if len(paused) != 1:
            raise ClusterError(f"{len(paused)} controllers paused "
                               f"({', '.join(c.name for c in paused) or 'none'}): name "
                               "the one to resume (controller-N)")
        return paused[0]
    return active_controller(state)

