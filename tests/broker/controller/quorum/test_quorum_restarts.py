"""Real clusters of 3 controller voters (``cluster start --controllers 3``): a voter whose
data directory was wiped comes back an observer (it neither votes nor counts until it
has caught up) and no committed metadata is lost; two voters SIGKILLed and restarted at
once bring the quorum back with every committed record.

Processes are started and stopped by :class:`LocalCluster` (by PID, also on failure).
Quorum timeouts are shortened (election 300 ms, fetch 1 s) so each test takes seconds.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from broker.cluster.controllers import active_controller
from broker.controller.quorum.voter_directory import VOTER_DIRECTORY_FILE
from clients.admin import Admin
from clients.protocol.errors import MiniKafkaError
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.controller.quorum.test_quorum_failover import (
    QUORUM,
    caught_up,
    create_when_brokers_are_back,
    produce,
    quorum_view,
)
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def leader_name(cluster: LocalCluster) -> str | None:
    leaders = [v["name"] for v in quorum_view(cluster)["voters"] if v["role"] == "leader"]
    return leaders[0] if len(leaders) == 1 else None


def log_lines(cluster: LocalCluster, name: str, text: str) -> int:
    """How many lines of voter ``name``'s log hold ``text``."""
    path = Path(cluster.state.data_dir) / f"{name}.log"
    return sum(text in line for line in path.read_text(errors="replace").splitlines())


def role_of(cluster: LocalCluster, name: str) -> str:
    return next((v["role"] for v in quorum_view(cluster)["voters"] if v["name"] == name), "")


def directory_state(cluster: LocalCluster, name: str) -> str:
    path = Path(cluster.state.controllers[name].data_dir) / VOTER_DIRECTORY_FILE
    if not path.exists():
        return ""
    return dict(line.split("=", 1) for line in path.read_text().splitlines()
                if "=" in line).get("state", "")


def exists_on_the_active_controller(cluster: LocalCluster, topic: str) -> bool:
    """Creating ``topic`` again is refused as a repeat: the active controller has it."""
    try:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic(topic, 1, 1)])
    except MiniKafkaError as e:
        return "TOPIC_ALREADY_EXISTS" in str(e)  # else no active controller yet: again
    raise AssertionError(f"{topic} was created again: the committed topic was lost")


def test_a_wiped_voter_neither_votes_nor_counts_until_caught_up(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 1, controller_overrides=QUORUM, controllers=3) as cluster:
        a = active_controller(cluster.state).name
        b, c = (n for n in cluster.state.controllers if n != a)
        assert {directory_state(cluster, n) for n in (a, b, c)} == {"voter"}  # formatted
        cluster.kill(b)
        create_when_brokers_are_back(cluster, NewTopic("t1", 1, 1))  # committed by a and c

        cluster.kill(c)
        c_dir = Path(cluster.state.controllers[c].data_dir)
        shutil.rmtree(c_dir)  # c's disk is lost
        c_dir.mkdir()
        cluster.restart(c)
        wait_until(lambda: directory_state(cluster, c) == "observer", 20, f"{c} an observer")
        wait_until(lambda: role_of(cluster, c) == "observer", 20, f"status: {c} an observer")
        # a's only live peer is an observer: a is not kept leader by it (check quorum)
        wait_until(lambda: log_lines(cluster, a, "role RESIGNED") == 1, 20, f"{a} resigned")
        state = json.loads((c_dir / "quorum-state").read_text()) \
            if (c_dir / "quorum-state").exists() else {"voted_for": None}
        assert state["voted_for"] is None and directory_state(cluster, c) == "observer"

        # b (without t1) is back: only a can lead (c does not vote for b), and c catches up
        cluster.restart(b)
        wait_until(lambda: log_lines(cluster, a, "active controller at epoch") == 2, 20,
                   f"{a} leads again")
        assert log_lines(cluster, b, "active controller at epoch") == 0
        wait_until(lambda: directory_state(cluster, c) == "voter" and caught_up(cluster, c),
                   20, f"{c} caught up and a voter again")
        # a commits on after the LeaderChange entry it appended for c's rejoining
        create_when_brokers_are_back(cluster, NewTopic("t2", 1, 1))
        assert log_lines(cluster, a, "controller stopped") == 0
        assert log_lines(cluster, a, "no longer the active controller") == 1

        # the leader that held t1 is lost: b and c elect one that has it
        cluster.kill(a)
        wait_until(lambda: leader_name(cluster) in (b, c), 20, "a leader among b and c")
        for topic in ("t1", "t2"):
            wait_until(lambda t=topic: exists_on_the_active_controller(cluster, t), 30,
                       f"{topic} on the new active controller")


def test_two_voters_restarted_at_once_lose_no_committed_record(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3, controller_overrides=QUORUM, controllers=3) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic("before", 1, 3, {"min_insync_replicas": "2"})])
        assert produce(cluster.bootstrap, "before", b"a") == 0
        a = active_controller(cluster.state).name
        b = next(n for n in cluster.state.controllers if n != a)
        cluster.kill(a)  # SIGKILL: the active controller and a follower at once
        cluster.kill(b)
        cluster.restart(a)
        cluster.restart(b)
        wait_until(lambda: leader_name(cluster) is not None, 20, "a leader again")
        wait_until(lambda: exists_on_the_active_controller(cluster, "before"), 30,
                   "the committed topic on the active controller")
        create_when_brokers_are_back(cluster, NewTopic("after", 1, 3,
                                                       {"min_insync_replicas": "2"}))
        cluster.wait_partition("after", 0, lambda p: p["leader"] is not None
                               and p["leader"] >= 0, "the new topic has a leader")
        assert produce(cluster.bootstrap, "before", b"b") == 1  # brokers follow
        assert produce(cluster.bootstrap, "after", b"c") == 0
        for name in cluster.state.controllers:
            wait_until(lambda n=name: leader_name(cluster) == n or caught_up(cluster, n),
                       20, f"{name} at the leader's log end")


def test_brokers_stay_unfenced_across_a_sigstop_of_the_active_controller(
        tmp_path: Path) -> None:
    """The new active controller starts every broker's session (2 s) at its activation;
    the brokers' heartbeats give the paused one a third of their session (1 s) and reach
    the new one in time: no broker fenced, no partition offline."""
    with LocalCluster(tmp_path, 3, controller_overrides=QUORUM, controllers=3) as cluster:
        first = active_controller(cluster.state).name
        cluster.pause(first)  # SIGSTOP
        others = [n for n in cluster.state.controllers if n != first]

        def activated() -> list[str]:
            return [n for n in others if log_lines(cluster, n, "active controller at epoch")]

        wait_until(lambda: len(activated()) == 1, 20, "a new active controller")
        (second,) = activated()
        deadline = time.monotonic() + 3.5  # the session (2 s) and a heartbeat round past it
        while time.monotonic() < deadline:  # an observation window: nothing may happen
            assert log_lines(cluster, second, "fenced: session expired") == 0
            time.sleep(0.1)
        assert not any(b["fenced"] for b in cluster.report()["brokers"])
        cluster.resume(first)
