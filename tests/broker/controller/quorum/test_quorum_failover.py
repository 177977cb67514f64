"""A real cluster of 3 controller voters and 3 brokers (``cluster start --controllers 3``,
with its cluster secret: voters log in to each other): the active controller is
SIGKILLed; a new one is elected and serves (a topic created afterwards, a killed broker
fenced), a producer with acks=all keeps getting acknowledgements, and the killed voter
restarts and catches up with the leader's log.

Processes are started and stopped by :class:`LocalCluster` (by PID, also on failure).
Quorum timeouts are shortened (election 300 ms, fetch 1 s) so the test takes seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.cluster.controllers import active_controller, describe_quorum
from clients.admin import Admin
from clients.producer.producer import Producer
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

FAST: dict[str, object] = {"replica_lag_time_max_ms": 1500}
QUORUM: dict[str, object] = {"quorum_election_timeout_ms": 300, "quorum_fetch_timeout_ms": 1000}


def quorum_view(cluster: LocalCluster) -> dict[str, Any]:
    try:
        return describe_quorum(cluster.state)
    except Exception as e:  # a voter down or between leaders: look again
        return {"error": str(e), "voters": []}


def produce(bootstrap: str, topic: str, value: bytes) -> int:
    with Producer(bootstrap, acks="all", retries=2_147_483_647, delivery_timeout_ms=30_000,
                  request_timeout_ms=10_000) as producer:
        return producer.send(topic, value, partition=0).result(60).offset


def test_sigkill_of_the_active_controller_elects_another_that_serves(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3, FAST, controller_overrides=QUORUM, controllers=3) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic("before", 1, 3, {"min_insync_replicas": "2"})])
        assert produce(cluster.bootstrap, "before", b"a") == 0

        first = active_controller(cluster.state)
        cluster.kill(first.name)  # SIGKILL

        def new_leader() -> bool:
            return any(v["role"] == "leader" and v["name"] != first.name
                       for v in quorum_view(cluster)["voters"])

        wait_until(new_leader, 20, "a new active controller")
        second = active_controller(cluster.state)
        assert second.name != first.name

        # the new active controller commits and answers: a topic created after the failover
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic("after", 1, 3, {"min_insync_replicas": "2"})])
        cluster.wait_partition("after", 0, lambda p: p["leader"] is not None
                               and p["leader"] >= 0, "the new topic has a leader")
        assert produce(cluster.bootstrap, "before", b"b") == 1
        assert produce(cluster.bootstrap, "after", b"c") == 0

        # a broker killed now is fenced by the new active controller; acks=all goes on
        cluster.kill("2")
        wait_until(lambda: any(b["node_id"] == 2 and b["fenced"]
                               for b in cluster.report()["brokers"]), 20, "broker 2 fenced")
        assert produce(cluster.bootstrap, "before", b"d") == 2

        # the killed voter restarts as a follower and catches up with the leader's log
        cluster.restart(first.name)

        def caught_up() -> bool:
            view = quorum_view(cluster)
            ends = {v["name"]: v["log_end_offset"] for v in view["voters"]}
            roles = {v["name"]: v["role"] for v in view["voters"]}
            return (roles.get(first.name) == "follower"
                    and ends.get(first.name) == view.get("high_watermark")
                    and ends.get(first.name) == ends.get(second.name))

        wait_until(caught_up, 20, f"{first.name} caught up")
