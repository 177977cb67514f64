"""What ``minikafka cluster status`` reports, gathered from the processes themselves.

Sources: the state file (:mod:`broker.cluster.state`: PIDs, ports), the OS (running /
paused / stopped), the controller's Metadata answer (brokers and whether each is
fenced; per partition the leader, leader epoch, replicas, ISR, and whether the last
election was unclean: our tagged extras ``fenced`` / ``unclean_elected``, in the
flexible versions both sides negotiate, v12) and each reachable broker's DescribeLogDirs
answer (v4: per log dir, per replica it holds, Kafka's size and our tagged HW and LEO).
A process that does not answer within ``timeout_ms`` is reported as unreachable; status
never hangs on a paused process.  On a cluster whose brokers speak TLS or require logins,
status connects as each broker's operator: with the broker's TLS settings and a login as
``broker-<id>`` derived from the cluster secret (which an operator holds anyway).  The
controller of a cluster with a secret serves nothing but to brokers, so status always
logs in to it as one (:func:`fetch_cluster_view`; ``cluster start`` waits for readiness
through the same call).

The **health verdict** (:func:`health_of`, shown by ``cluster status`` and, as one line,
by ``cluster health``; both exit with its code) reads the same report: ``healthy`` (exit
0) when every process runs, no broker is fenced and every partition has a leader and its
full ISR; ``degraded`` (exit 1) naming what is wrong (a process stopped or paused, a
fenced broker, under-replicated partitions, offline partitions, the controller
unreachable while brokers run); ``down`` (exit 2) when no broker can serve (none runs, or
every one the controller knows is fenced); ``unknown`` (exit 3, given by the commands, not
by :func:`health_of`) when there is no cluster to judge (no state file in the data dir, or
a damaged one and no process running): Nagios' plugin codes.  Costs: what
:func:`status_report` costs (one Metadata round trip to the controller, one
DescribeLogDirs per running broker, each bounded by ``STATUS_TIMEOUT_MS``), the verdict
O(partitions).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.cluster.access import operator_access, process_status, status_request
from broker.cluster.controllers import describe_quorum
from broker.cluster.state import ClusterState, ProcessInfo, override_settings
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import MiniKafkaError

HEALTHY, DEGRADED, DOWN, UNKNOWN = 0, 1, 2, 3  # Nagios' OK, WARNING, CRITICAL, UNKNOWN
VERDICTS = {HEALTHY: "healthy", DEGRADED: "degraded", DOWN: "down", UNKNOWN: "unknown"}
NAMED_PARTITIONS = 5  # a reason names at most this many partitions, then "..."


class Health(NamedTuple):
    """The cluster's verdict: its exit code (HEALTHY, DEGRADED, DOWN, UNKNOWN) and why."""

    exit_code: int
    reasons: list[str]

    @property
    def verdict(self) -> str:
        return VERDICTS[self.exit_code]

    def line(self) -> str:
        return f"{self.verdict}: {'; '.join(self.reasons)}"


def _broker_access(node: int, info: ProcessInfo) -> dict[str, Any]:
    """Broker ``node``: its TLS settings, and a login as itself when clients must log in."""
    required = override_settings(info.argv).get("client_auth_required", "").lower() == "true"
    return operator_access(node, info, required)


def fetch_cluster_view(state: ClusterState) -> dict[str, Any]:
    """The controller's Metadata answer for all topics (with TLS when it has it).  With a
    cluster secret the controller serves it to the cluster's brokers only, so status
    logs in as one (``broker-<lowest id>``, from the secret it reads like the brokers'
    own): the controller's view (fenced brokers, unclean elections, offline reasons) is
    what status reports, and it must answer while brokers are down or not registered."""
    node = min((int(k) for k in state.brokers), default=0)
    controllers = list(state.controllers.values())
    if len(controllers) > 1:  # the active one first (docs/quorum_brokers.md)
        leader = [state.controllers[v["name"]] for v in describe_quorum(state)["voters"]
                  if v["role"] == "leader"]
        controllers = leader + [c for c in controllers if c not in leader]
    error: MiniKafkaError | None = None
    for info in controllers:
        try:
            return status_request(info.port, ApiKey.METADATA, {"topics": None},
                                  **operator_access(node, info, login=True))
        except MiniKafkaError as exc:
            error = error or exc
    assert error is not None
    raise error


def broker_view(state: ClusterState, node: str) -> set[int]:
    """The unfenced brokers in broker ``node``'s own Metadata answer (its metadata image,
    not the controller's): a restarted broker serves once it lists itself and the others."""
    info = state.brokers[node]
    answer = status_request(info.port, ApiKey.METADATA, {"topics": []},
                            **_broker_access(int(node), info))
    return {b["node_id"] for b in answer["brokers"]}


def status_report(state: ClusterState) -> dict[str, Any]:
    processes = [{"name": info.name, "pid": info.pid, "port": info.port,
                  "internal_port": info.internal_port, "metrics_port": info.metrics_port,
                  "state": process_status(info.pid)}
                 for info in state.processes]
    report: dict[str, Any] = {"data_dir": state.data_dir, "processes": processes,
                              "controller": state.controller_address, "brokers": [],
                              "partitions": []}
    if len(state.controllers) > 1:
        report["quorum"] = describe_quorum(state)
    try:
        view = fetch_cluster_view(state)
    except MiniKafkaError as exc:
        report["error"] = f"controller unreachable: {exc}"
        return report
    report["brokers"] = [{"node_id": b["node_id"], "host": b["host"], "port": b["port"],
                          "fenced": b["fenced"]} for b in view["brokers"]]
    replicas: dict[tuple[str, int, int], dict[str, Any]] = {}
    for node, info in state.brokers.items():
        if process_status(info.pid) != "running":
            continue
        try:
            dirs = status_request(info.port, ApiKey.DESCRIBE_LOG_DIRS, {"topics": None},
                                  **_broker_access(int(node), info))
        except (MiniKafkaError, OSError):
            continue
        for result in dirs["results"]:
            if result["error_code"]:
                continue
            for topic in result["topics"]:
                for p in topic["partitions"]:
                    if not p["is_future_key"]:
                        replicas[(topic["name"], p["partition_index"], int(node))] = p
    for topic in sorted(view["topics"], key=lambda t: t["name"]):
        for p in sorted(topic["partitions"], key=lambda p: p["partition_index"]):
            key = (topic["name"], p["partition_index"])
            report["partitions"].append({
                "topic": key[0], "partition": key[1], "leader": p["leader_id"],
                "leader_epoch": p["leader_epoch"], "replicas": p["replica_nodes"],
                "isr": p["isr_nodes"], "offline_replicas": p["offline_replicas"],
                "unclean_leader": p["unclean_elected"],
                "offline_reason": p["offline_reason"],
                "replica_offsets": {
                    str(r): ({"hw": replicas[(*key, r)]["high_watermark"],
                              "leo": replicas[(*key, r)]["log_end_offset"],
                              "damaged_from": replicas[(*key, r)]["damaged_from"],
                              "recovery_cut": replicas[(*key, r)]["recovery_cut"]}
                             if (*key, r) in replicas else None)
                    for r in p["replica_nodes"]},
            })
    return report


def print_status(report: dict[str, Any]) -> None:
    """The report as text, ending with the health verdict's line."""
    _print_details(report)
    print(f"health: {health_of(report).line()}")


def _print_details(report: dict[str, Any]) -> None:
    print(f"cluster in {report['data_dir']} (controller {report['controller']})")
    print(f"{'process':<12}{'pid':>8}{'port':>7}{'internal':>9}  state")
    for proc in report["processes"]:
        internal = proc["internal_port"] if proc["internal_port"] > 0 else "-"
        print(f"{proc['name']:<12}{proc['pid']:>8}{proc['port']:>7}{internal:>9}  "
              f"{proc['state']}")
    quorum = report.get("quorum")
    if quorum is not None:
        print(f"controller quorum: leader {quorum['leader_id']}, epoch "
              f"{quorum['leader_epoch']}, high watermark {quorum['high_watermark']}"
              + (f" ({quorum['error']})" if "error" in quorum else ""))
        print(f"{'voter':<14}{'id':>6}  {'role':<10}{'log end':>9}{'lag':>7}  state")
        for v in quorum["voters"]:
            print(f"{v['name']:<14}{v['voter_id']:>6}  {v['role']:<10}"
                  f"{v['log_end_offset']:>9}{v['lag']:>7}  {v['state']}")
    metrics = [f"{p['name']} :{p['metrics_port']}" for p in report["processes"]
               if p.get("metrics_port", -1) > 0]
    if metrics:
        print("metrics (http://127.0.0.1:PORT/metrics): " + ", ".join(metrics))
    if "error" in report:
        print(report["error"])
        return
    fenced = {b["node_id"]: b["fenced"] for b in report["brokers"]}
    print("brokers: " + ", ".join(f"{n} ({'fenced' if f else 'alive'})"
                                  for n, f in sorted(fenced.items())))
    print(f"{'topic':<20}{'part':>5}{'leader':>7}{'epoch':>6}  {'replicas':<10}{'isr':<10}"
          "hw/leo per replica")
    for p in report["partitions"]:
        offsets = " ".join(f"{r}:{o['hw']}/{o['leo']}" if o else f"{r}:-"
                           for r, o in p["replica_offsets"].items())
        leader = str(p["leader"]) + ("*" if p["unclean_leader"] else "")
        print(f"{p['topic']:<20}{p['partition']:>5}{leader:>7}{p['leader_epoch']:>6}  "
              f"{','.join(map(str, p['replicas'])):<10}{','.join(map(str, p['isr'])):<10}"
              f"{offsets}")
    for p in report["partitions"]:
        where = f"{p['topic']}-{p['partition']}"
        if p["offline_reason"]:
            print(f"{where} offline: {p['offline_reason']}")
        for r, o in p["replica_offsets"].items():
            if o and o["damaged_from"] >= 0:
                print(f"{where} replica {r}: damage found from offset {o['damaged_from']} "
                      "(not served; repaired from another replica if one has it)")
            if o and o["recovery_cut"]:
                print(f"{where} replica {r}: log recovery cut it at its last start (it "
                      "copies the rest again; it leads only if no replica holds more)")
    if any(p["unclean_leader"] for p in report["partitions"]):
        print("* leader chosen by unclean election: acknowledged records may have been lost")


def _partition_list(parts: list[dict[str, Any]]) -> str:
    names = [f"{p['topic']}-{p['partition']}" for p in parts[:NAMED_PARTITIONS]]
    return ", ".join(names) + (", ..." if len(parts) > NAMED_PARTITIONS else "")


def health_of(report: dict[str, Any]) -> Health:
    """The verdict of a :func:`status_report` (see the module docstring)."""
    reasons = [f"{p['name']} {p['state']}" for p in report["processes"]
               if p["state"] != "running"]
    running = {p["name"] for p in report["processes"] if p["state"] == "running"}
    brokers_running = [p for p in report["processes"]
                       if not p["name"].startswith("controller") and p["name"] in running]
    if "error" in report:
        reasons.append(report["error"])
        if not brokers_running:
            return Health(DOWN, reasons)
        return Health(DEGRADED, reasons)
    fenced = sorted(b["node_id"] for b in report["brokers"] if b["fenced"])
    if fenced:
        reasons.append(f"broker(s) {', '.join(map(str, fenced))} fenced")
    serving = [b for b in report["brokers"] if not b["fenced"]]
    offline = [p for p in report["partitions"] if p["leader"] < 0]
    under = [p for p in report["partitions"]
             if p["leader"] >= 0 and len(p["isr"]) < len(p["replicas"])]
    if offline:
        reasons.append(f"{len(offline)} offline partition(s): {_partition_list(offline)}")
    if under:
        reasons.append(f"{len(under)} under-replicated partition(s): {_partition_list(under)}")
    if not brokers_running or not serving:
        return Health(DOWN, reasons or ["no broker serves"])
    if reasons:
        return Health(DEGRADED, reasons)
    return Health(HEALTHY, [f"{len(serving)} broker(s) serving, "
                            f"{len(report['partitions'])} partition(s) fully replicated"])
