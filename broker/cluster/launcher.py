"""``minikafka cluster``: a local cluster of controllers and N brokers on loopback.

Layout under ``--data-dir`` (default ``./data``)::

    cluster.json          ports, PIDs, command lines of every process (the state file,
                          :mod:`broker.cluster.state`)
    controller/           the controller's data dir;  controller.log  its output
                          (a quorum: controller-1/ .., :mod:`broker.cluster.controllers`)
    broker-<id>/          each broker's data dir;     broker-<id>.log its output

Client users: ``add-user NAME --password-stdin`` writes SCRAM credentials to
``users.scram`` (:mod:`broker.users`), which every broker reads (``sasl_users_file``);
``start --override client_auth_required=true`` makes logging in mandatory for clients.
``--override`` sets a broker config key on every broker, ``--controller-override`` a
controller one (:mod:`broker.controller.config`).

Identity: the first ``start`` in a directory gives the cluster a random id (Kafka's
form, a URL-safe base64 UUID) that every process gets as ``cluster_id`` and writes into
its data dir's ``meta.properties`` (:mod:`storage.meta_properties`); later starts read
it back from ``controller/meta.properties``.  A broker pointed at another cluster's
directory or controller is refused (INCONSISTENT_CLUSTER_ID).

Ports: brokers listen for clients on ``base_port + id`` (ids 0..N-1; default base 9092,
like Kafka) and for each other's follower fetches on ``base_port + 200 + id`` (their
internal listener, ``internal_port``; docs/security.md), the controller on
``base_port + 100``; with ``--metrics`` each serves Prometheus metrics on 127.0.0.1,
brokers on ``base_port + 300 + id``, the controller on ``base_port + 400``
(``metrics_port``; docs/metrics.md); ``--base-port 0`` picks a free range.  Processes
run in their own sessions (daemonised: they outlive the command) and are found again
through ``cluster.json``; every command takes ``--data-dir`` to find its cluster.

Commands: ``start`` (waits until every broker is registered and unfenced; refuses
``--brokers`` outside 1-100, ports past 65535 and a data dir it cannot write before
writing anything, and a failed first start removes its ``cluster.secret``), ``status``
(table or ``--json``), ``stop`` (clean: brokers first, each moving its leadership away
by controlled shutdown, then the controller), and fault injection by broker id or
``controller``: ``kill`` (SIGKILL), ``restart`` (kill if alive, start again with the
same command line, return once the broker's own metadata lists every running broker;
with the controller down it is started and the command fails at once), ``pause`` /
``resume`` (SIGSTOP / SIGCONT).  Only a process whose command line is the state file's
is signalled (:func:`~broker.cluster.children.is_ours`: a stopped cluster's PIDs may
belong to other processes by now); ``kill`` of one not running says so and succeeds.
Every command but ``start`` reads ``cluster.json`` through
:func:`broker.cluster.rebuild.load_state`: a damaged or missing file is rebuilt from the
cluster's running processes, so a cluster can always be stopped.
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import signal
import socket
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from broker.acls import ACL_FILE, edit_acls, parse_acls
from broker.auth import write_cluster_secret
from broker.cluster.children import end_process, is_ours, is_running, spawn
from broker.cluster.controllers import (
    CONTROLLER_COUNTS,
    controller_processes,
    controller_target,
    voters_flag,
)
from broker.cluster.rebuild import load_state
from broker.cluster.state import (
    CONTROLLER,
    CONTROLLER_PORT_OFFSET,
    INTERNAL_PORT_OFFSET,
    METRICS_PORT_OFFSET,
    STATE_FILE,
    ClusterError,
    ClusterState,
    ProcessInfo,
    layout_ports,
    override_settings,
)
from broker.cluster.status import broker_view, fetch_cluster_view
from broker.cluster.status_commands import cmd_health, cmd_status
from broker.controller.quorum.voter_directory import format_new_quorum
from broker.users import USERS_FILE, add_user
from clients.protocol.errors import InvalidConfigError, MiniKafkaError
from storage.meta_properties import DataDirIdentityError, read_meta_properties

SECRET_FILE = "cluster.secret"  # the cluster's secret, mode 600 (broker.auth)




EPHEMERAL_PORT_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST_BASE_PORT = 10000


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default if the
    file is missing or unreadable)."""
    try:
        low, high = (int(x) for x in Path(EPHEMERAL_PORT_RANGE_FILE).read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_base_port(brokers: int, attempts: int = 200, metrics: bool = False,
                   controllers: int = 1) -> int:
    """A base port whose whole layout (:func:`layout_ports`) is free now.

    The layout is chosen below the kernel's ephemeral range: a port in that range that
    is free when probed can be taken a moment later as the local port of any outgoing
    connection (ours or another process's), and the broker then fails to bind it.
    """
    ephemeral_low, ephemeral_high = ephemeral_port_range()
    span = (METRICS_PORT_OFFSET + CONTROLLER_PORT_OFFSET if metrics
            else INTERNAL_PORT_OFFSET) + 1
    ranges = [(LOWEST_BASE_PORT, ephemeral_low - span - brokers),
              (ephemeral_high + 1, 65535 - span - brokers)]
    ranges = [(low, high) for low, high in ranges if high > low]
    if not ranges:
        raise ClusterError("no port range outside the ephemeral ports "
                           f"{ephemeral_low}-{ephemeral_high}; choose --base-port")
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(*rng.choice(ranges))
        try:
            for port in layout_ports(base, brokers, metrics, controllers):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise ClusterError("no free range of ports on 127.0.0.1")


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``host:port`` cannot be bound now (another process listens on it)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is fine
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def wait_for_port(port: int, pid: int, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_running(pid):
            raise ClusterError(f"{what} exited during startup (see its log)")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise ClusterError(f"{what} did not listen on port {port} within {timeout_s:.0f} s")




# -- commands -----------------------------------------------------------------------------


def new_cluster_id() -> str:
    """A fresh cluster id as Kafka makes them: a random UUID in URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def existing_cluster_id(root: Path) -> str | None:
    """The id a cluster started in ``root`` before already wrote in its controller's
    data directory (a restart keeps it: the brokers' directories carry it too)."""
    try:
        found = (read_meta_properties(root / CONTROLLER)
                 or read_meta_properties(root / f"{CONTROLLER}-1"))
    except DataDirIdentityError as exc:
        raise ClusterError(str(exc)) from None
    return found["cluster.id"] if found is not None else None


CONTROLLER_TLS_KEYS = ("ssl_certfile", "ssl_keyfile", "ssl_cafile", "ssl_client_auth")


def controller_tls(broker_args: Sequence[str]) -> list[str]:
    """The brokers' TLS overrides, for the controller: a TLS cluster's brokers connect
    to it with TLS (``broker/server.py``), so it listens with the same files."""
    return [a for key, value in override_settings(broker_args).items()
            if key in CONTROLLER_TLS_KEYS for a in ("--override", f"{key}={value}")]


def new_state(data_dir: str, brokers: int, base_port: int,
              broker_args: Sequence[str], controller_args: Sequence[str] = (),
              metrics: bool = False, controllers: int = 1) -> ClusterState:
    """``metrics``: each process gets a metrics port (``METRICS_PORT_OFFSET``);
    ``controllers``: the quorum's voters (:mod:`broker.cluster.controllers`)."""
    if metrics and base_port + METRICS_PORT_OFFSET + CONTROLLER_PORT_OFFSET > 65535:
        raise ClusterError(f"--metrics needs ports up to base port + 400: {base_port} is "
                           "too high; choose a lower --base-port")
    root = Path(data_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if base_port == 0:
        base_port = free_base_port(brokers, metrics=metrics, controllers=controllers)
    metrics_base = base_port + METRICS_PORT_OFFSET if metrics else -1
    secret_file = root / SECRET_FILE  # brokers log in with it (broker.auth); mode 600
    write_cluster_secret(secret_file)
    cluster_id = existing_cluster_id(root) or new_cluster_id()
    secret = ["--override", f"cluster_secret_file={secret_file}",
              "--override", f"cluster_id={cluster_id}"]
    users = ["--override", f"sasl_users_file={root / USERS_FILE}",
             "--override", f"acl_file={root / ACL_FILE}"]
    state = ClusterState(str(root), base_port, controller_processes(
        root, controllers, base_port, metrics_base,
        [*secret, *controller_tls(broker_args), *controller_args]))
    for node in range(brokers):
        port = base_port + node
        state.brokers[str(node)] = ProcessInfo(
            f"broker-{node}", port, str(root / f"broker-{node}"),
            str(root / f"broker-{node}.log"),
            [sys.executable, "-m", "broker", "start", "--node-id", str(node), "--port",
             str(port), "--data-dir", str(root / f"broker-{node}"), *voters_flag(state),
             "--log-level", "INFO", *secret, *users,
             "--override", f"internal_port={base_port + INTERNAL_PORT_OFFSET + node}",
             *_metrics_port(metrics_base, node), *broker_args])
    return state


MAX_BROKERS = CONTROLLER_PORT_OFFSET  # broker ports must stay below the controller's


def check_start_args(data_dir: str, brokers: int, base_port: int,
                     controllers: int = 1) -> None:
    """Refuse what cannot start, before anything is written: a broker count outside
    1..MAX_BROKERS, a controller count not 1, 3 or 5, ports beyond 65535, a data dir
    that is not (and cannot be made) a writable directory."""
    if not 1 <= brokers <= MAX_BROKERS:
        raise ClusterError(f"--brokers must be 1-{MAX_BROKERS}, got {brokers}")
    if controllers not in CONTROLLER_COUNTS:
        raise ClusterError(f"--controllers must be one of {CONTROLLER_COUNTS}, got "
                           f"{controllers}")
    highest = 65535 - INTERNAL_PORT_OFFSET - (brokers - 1)
    if base_port != 0 and not 1 <= base_port <= highest:
        raise ClusterError(f"--base-port must be 0 (a free range) or 1-{highest} (the "
                           f"brokers use base..base+{brokers - 1}, the controller base+"
                           f"{CONTROLLER_PORT_OFFSET}, replication base+"
                           f"{INTERNAL_PORT_OFFSET}..), got {base_port}")
    root = Path(data_dir)
    if root.exists() and not root.is_dir():
        raise ClusterError(f"--data-dir {data_dir} is not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".minikafka-write-check"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise ClusterError(f"cannot use --data-dir {data_dir}: "
                           f"{exc.strerror or exc}") from None


def _metrics_port(metrics_base: int, offset: int) -> list[str]:
    return [] if metrics_base < 0 else ["--override", f"metrics_port={metrics_base + offset}"]


def cmd_start(args: argparse.Namespace) -> int:
    check_start_args(args.data_dir, args.brokers, args.base_port, args.controllers)
    path = Path(args.data_dir) / STATE_FILE
    if path.exists():
        old = ClusterState.load(args.data_dir)
        alive = [i.name for i in old.processes if is_running(i.pid)]
        if alive:
            raise ClusterError(f"a cluster is already running in {args.data_dir} "
                               f"({', '.join(alive)}); stop it first")
    broker_args = [a for pair in args.override for a in ("--override", pair)]
    controller_args = [a for pair in args.controller_override for a in ("--override", pair)]
    secret_file = Path(args.data_dir) / SECRET_FILE
    new_secret = not secret_file.exists()
    launched: ClusterState | None = None  # once a process may have been spawned
    try:
        state = new_state(args.data_dir, args.brokers, args.base_port, broker_args,
                          controller_args, args.metrics, args.controllers)
        taken = [port for i in state.processes
                 for port in (i.port, i.internal_port, i.metrics_port)
                 if port > 0 and port_taken(port)]
        if taken:  # another cluster (or anything) listens there: its clients are not ours
            raise ClusterError(f"port(s) {', '.join(map(str, taken))} already in use by "
                               "another process; stop it or choose --base-port")
        # a quorum being created: its voters' new directories are formatted (a new
        # directory nobody formatted is a voter's lost disk: an observer until caught up)
        format_new_quorum([info.data_dir for info in state.controllers.values()])
        launched = state
        for info in state.controllers.values():  # a quorum elects once a majority runs
            start_process(state, info, args.timeout_s)
        for info in state.brokers.values():
            start_process(state, info, args.timeout_s)
        wait_until_ready(state, args.timeout_s)
    except BaseException:
        if launched is not None:  # kill what started; keep the state file to find them
            for info in [*launched.brokers.values(), *launched.controllers.values()]:
                end_process(info, signal.SIGKILL, 10)
            launched.save()
        if new_secret:  # a failed first start leaves no secret behind
            secret_file.unlink(missing_ok=True)
        raise
    print(f"cluster ready: controller{'s' if len(state.controllers) > 1 else ''} on "
          f"{state.controller_address}, "
          f"{len(state.brokers)} brokers on {state.bootstrap} (data in {state.data_dir})")
    return 0


def start_process(state: ClusterState, info: ProcessInfo, timeout_s: float,
                  wait: bool = True) -> None:
    """Spawn ``info``'s process; ``wait``: until its port accepts (a broker: serving)."""
    Path(info.data_dir).mkdir(parents=True, exist_ok=True)
    spawn(info)
    state.save()
    if wait:
        wait_for_port(info.port, info.pid, timeout_s, info.name)


def wait_until_ready(state: ClusterState, timeout_s: float) -> None:
    """Every live broker registered and unfenced, as the controller sees it.  A process
    that was running when this began and exits is an error; one already down (killed on
    purpose, e.g. to restart the others one at a time) is not waited for."""
    deadline = time.monotonic() + timeout_s
    wanted = {int(k) for k, v in state.brokers.items() if is_running(v.pid)}
    watched = [i for i in state.processes if is_running(i.pid)]
    last = "no answer"
    while time.monotonic() < deadline:
        dead = [i.name for i in watched if not is_running(i.pid)]
        if dead:  # it had answered on its port, then exited
            raise ClusterError(f"{', '.join(dead)} exited during startup (see the logs)")
        try:
            view = fetch_cluster_view(state)
            live = {b["node_id"] for b in view["brokers"] if not b["fenced"]}
            if wanted <= live:
                return
            last = f"unfenced brokers {sorted(live)}"
        except Exception as exc:  # the controller may still be loading
            last = str(exc)
        time.sleep(0.1)
    raise ClusterError(f"cluster not ready within {timeout_s:.0f} s: {last}")


def wait_until_serving(state: ClusterState, node: str, timeout_s: float) -> None:
    """Broker ``node``'s own metadata lists every running broker, itself included.  After
    a quick kill and restart the controller can still count the killed incarnation as
    unfenced, so :func:`wait_until_ready` alone returned ~1 s before the new one served
    (a topic created at once found 2 of 3 brokers available)."""
    deadline = time.monotonic() + timeout_s
    wanted = {int(k) for k, v in state.brokers.items() if is_ours(v)}
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            seen = broker_view(state, node)
            if wanted <= seen:
                return
            last = f"it sees brokers {sorted(seen)}"
        except MiniKafkaError as exc:
            last = str(exc)
        time.sleep(0.1)
    raise ClusterError(f"broker {node} not serving within {timeout_s:.0f} s: {last}")


def cmd_stop(args: argparse.Namespace) -> int:
    state = load_state(args.data_dir)
    for info in state.brokers.values():
        end_process(info, signal.SIGTERM, args.timeout_s)
    for info in state.controllers.values():
        end_process(info, signal.SIGTERM, args.timeout_s)
    print("cluster stopped")
    return 0


def cmd_signal(args: argparse.Namespace) -> int:
    state = load_state(args.data_dir)
    info = (controller_target(state, args.command) if args.target == CONTROLLER
             else state.process(args.target))  # 'controller' of a quorum: which one
    is_controller = info in state.controllers.values()
    if args.command == "kill":
        if not is_ours(info):  # killing it again is no error, but say what happened
            print(f"{info.name} was not running")
            return 0
        end_process(info, signal.SIGKILL, 10)
        print(f"killed {info.name} (pid {info.pid})")
    elif args.command == "restart":
        end_process(info, signal.SIGKILL, 10)
        # a broker listens once its metadata caught up: without a controller, not yet
        alone = not is_controller and not any(map(is_ours, state.controllers.values()))
        start_process(state, info, args.timeout_s, wait=not alone)
        if not is_controller:
            if alone:  # it cannot register: do not wait for it
                raise ClusterError(
                    f"restarted {info.name} (pid {info.pid}), but the controller is not "
                    "running: the broker serves once it runs again "
                    "(minikafka cluster restart controller)")
            wait_until_ready(state, args.timeout_s)
            wait_until_serving(state, args.target, args.timeout_s)
        print(f"restarted {info.name} (pid {info.pid})")
    else:
        if not is_ours(info):
            raise ClusterError(f"{info.name} is not running")
        os.kill(info.pid, signal.SIGSTOP if args.command == "pause" else signal.SIGCONT)
        print(f"{args.command}d {info.name} (pid {info.pid})")
    return 0


def cmd_acl(args: argparse.Namespace) -> int:
    path = Path(args.data_dir) / ACL_FILE
    try:
        if args.action == "list":
            rules = parse_acls(path.read_text("utf-8"), str(path)) if path.exists() else []
        elif len(args.rule) != 5:
            raise ClusterError("a rule is: PRINCIPAL PERMISSION OPERATION RESOURCE_TYPE NAME "
                               "(e.g. User:alice Allow Write Topic orders)")
        else:
            rules = edit_acls(path, **{args.action: list(args.rule)})
    except InvalidConfigError as exc:
        raise ClusterError(exc.message) from None
    for rule in rules:
        print(rule)
    if args.action != "list":
        print(f"({len(rules)} rule(s) in {path}; brokers with authorizer_enabled read it "
              "within a second)")
    return 0


def cmd_add_user(args: argparse.Namespace) -> int:
    password = sys.stdin.buffer.readline().rstrip(b"\r\n")
    path = Path(args.data_dir) / USERS_FILE
    try:
        add_user(path, args.name, password)
    except InvalidConfigError as exc:
        raise ClusterError(exc.message) from None
    print(f"user {args.name} can log in with SCRAM-SHA-256 or SCRAM-SHA-512 "
          f"(credentials in {path}; brokers read it within a second)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minikafka cluster",
                                     description="manage a local minikafka cluster")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--data-dir", default="./data", help="where the cluster lives")
        p.add_argument("--timeout-s", type=float, default=60.0)
        return p

    start = command("start", "start the controllers and N brokers, wait until ready")
    start.add_argument("--brokers", type=int, default=3)
    start.add_argument("--controllers", type=int, default=1, choices=CONTROLLER_COUNTS,
                       help="controller quorum voters on base+100.. (default 1: on one "
                       "machine 3 guard a process only; docs/quorum_brokers.md)")
    start.add_argument("--base-port", type=int, default=9092,
                       help="brokers listen on base..base+N-1, the controller on base+100; "
                            "0 picks a free range")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="broker config for every broker")
    start.add_argument("--metrics", action="store_true",
                       help="serve Prometheus metrics over HTTP on 127.0.0.1: brokers on "
                            "base+300+id, the controller on base+400 (docs/metrics.md)")
    start.add_argument("--controller-override", action="append", default=[],
                       metavar="KEY=VALUE", help="controller config, e.g. "
                       "leader_imbalance_check_interval_ms=2000")
    start.set_defaults(func=cmd_start)
    status = command("status", "brokers, partitions, leaders, ISR, HW and LEO")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)
    command("health", "one line: healthy (exit 0), degraded (1), down (2) or unknown "
            "(3: no cluster there), and why"
            ).set_defaults(func=cmd_health)
    command("stop", "stop the cluster cleanly").set_defaults(func=cmd_stop)
    user = command("add-user", "add a client user (SCRAM), or change its password; the "
                   "password is read from the first line of stdin")
    user.add_argument("name")
    user.add_argument("--password-stdin", action="store_true", required=True,
                      help="read the password from stdin (never from the command line)")
    user.set_defaults(func=cmd_add_user)
    acl = command("acl", "list, add or remove an ACL rule (broker.acls): PRINCIPAL "
                  "PERMISSION OPERATION RESOURCE_TYPE NAME, e.g. User:alice Allow Write "
                  "Topic orders")
    acl.add_argument("action", choices=("list", "add", "remove"))
    acl.add_argument("rule", nargs="*")
    acl.set_defaults(func=cmd_acl)
    for name, text in (("kill", "SIGKILL a broker or a controller"),
                       ("restart", "kill if alive, then start again"),
                       ("pause", "SIGSTOP a broker or the controller"),
                       ("resume", "SIGCONT a paused process")):
        p = command(name, text)
        p.add_argument("target", metavar="ID", help="a broker id, 'controller' (of a "
                       "quorum: the active one) or 'controller-N'")
        p.set_defaults(func=cmd_signal)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a ``cluster`` command: a failure is one line ``error: ...`` and status 1; a
    closed stdout (``cluster status | head``) ends it quietly (Python's SIGPIPE note)."""
    args = build_parser().parse_args(argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1
    except (ClusterError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
