"""A broker given the controller quorum's voters (``--controller-quorum-voters``, issue
34) finds the voter that answers as the controller: the first voter listed is down
(connection refused), the second is a real controller process; the broker registers
with it, serves, and a topic created through it (a forwarded CreateTopics) is led by
it.  Processes stopped by PID in ``finally``."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.types import NewTopic
from tests.broker.controller.processes import ControllerProcess
from tests.broker.processes import BrokerProcess, wait_until

pytestmark = pytest.mark.multiprocess


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once closed


def test_a_broker_skips_a_dead_voter_and_registers_with_the_live_one(tmp_path: Path) -> None:
    controller = ControllerProcess(tmp_path / "controller")
    broker: BrokerProcess | None = None
    try:
        controller.start()
        voters = f"3001@127.0.0.1:{closed_port()},3002@127.0.0.1:{controller.port}"
        broker = BrokerProcess(tmp_path / "broker-1", node_id=1,
                               extra_args=["--controller-quorum-voters", voters]).start()
        with Admin(broker.bootstrap, request_timeout_ms=10_000) as admin:
            assert [b.node_id for b in admin.describe_cluster().brokers] == [1]
            admin.create_topics([NewTopic("t", 1, 1)])

            def led_by_1() -> bool:
                parts = admin.describe_topics(["t"])["t"].partitions
                return [p.leader for p in parts] == [1]

            wait_until(led_by_1, 30, "t-0 led by broker 1", 0.1)
    finally:
        if broker is not None:
            broker.kill()
        controller.kill()
