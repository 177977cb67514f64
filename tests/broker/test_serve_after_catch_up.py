"""A broker with a controller serves only once its metadata image caught up (Kafka's
start-up order, broker/server.py).

Real processes: a controller paused with SIGSTOP before the broker starts, so the broker
registers into a silent socket.  While it waits, both of its ports are bound and refuse
connections (clients try their other bootstrap brokers, as with a broker that is down)
and it has printed no "listening on"; once the controller runs again the broker's image
takes in its own registration and only then does it listen and answer Metadata naming
itself.  A broker stopped while it waits exits cleanly at once (nothing to hand over: it
never registered).  Every process is stopped by PID, also when a test fails.
"""

from __future__ import annotations

import os
import signal
import socket
from contextlib import ExitStack
from pathlib import Path

import psutil
import pytest

from broker.cluster.launcher import free_base_port
from broker.cluster.state import INTERNAL_PORT_OFFSET
from clients.protocol.api_keys import ApiKey
from tests.broker.controller.processes import ControllerProcess
from tests.broker.processes import BrokerProcess, wait_until
from tests.broker.raw_kafka import call, connect

pytestmark = pytest.mark.multiprocess


def refused(port: int) -> bool:
    """A connect to ``port`` is refused (nothing listens there)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def connected_to(pid: int, port: int) -> bool:
    """Process ``pid`` holds an established TCP connection to ``port`` (its controller):
    it has started its network processes and the controller link."""
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return False
    return any(c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
               for c in conns)


def paused_controller(stack: ExitStack, root: Path) -> ControllerProcess:
    controller = stack.enter_context(ControllerProcess(root / "controller"))
    os.kill(controller.pid, signal.SIGSTOP)
    stack.callback(lambda: controller.proc and os.kill(controller.pid, signal.SIGCONT))
    return controller


def waiting_broker(stack: ExitStack, root: Path, controller: ControllerProcess,
                   node_id: int = 1) -> tuple[BrokerProcess, int, int]:
    """A broker started against the paused controller, seen registering."""
    port = free_base_port(1)
    internal = port + INTERNAL_PORT_OFFSET
    broker = BrokerProcess(root / f"broker-{node_id}", node_id=node_id, port=port,
                           overrides={"internal_port": internal},
                           extra_args=["--controller", controller.bootstrap]).spawn()
    stack.callback(broker.kill)
    wait_until(lambda: connected_to(broker.pid, controller.port), 60,
               "the broker connects to its controller")
    return broker, port, internal


def test_a_broker_listens_only_once_its_metadata_caught_up(tmp_path: Path) -> None:
    with ExitStack() as stack:
        controller = paused_controller(stack, tmp_path)
        broker, port, internal = waiting_broker(stack, tmp_path, controller)
        assert refused(port) and refused(internal)  # bound, not listening
        assert broker.port == 0  # no "listening on" line
        assert broker.proc is not None and broker.proc.poll() is None
        os.kill(controller.pid, signal.SIGCONT)
        broker.wait_listening(60)
        assert broker.port == port
        with connect(port) as sock:
            answer = call(sock, ApiKey.METADATA, 12, {"topics": None,
                                                      "allow_auto_topic_creation": False})
        assert 1 in {b["node_id"] for b in answer["brokers"]}, answer
        assert not refused(internal)


def test_a_broker_stopped_while_it_waits_exits_cleanly(tmp_path: Path) -> None:
    with ExitStack() as stack:
        controller = paused_controller(stack, tmp_path)
        broker, port, _internal = waiting_broker(stack, tmp_path, controller)
        children = broker.network_pids()
        assert children and refused(port)
        assert broker.stop(timeout_s=30) == 0
        output = "".join(broker.output)
        assert "controlled shutdown not confirmed" not in output, output
        assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status()
                       != psutil.STATUS_ZOMBIE for pid in children)
