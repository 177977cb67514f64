"""A local cluster's controller quorum (broker.cluster.controllers, issue 34): the
launcher's layout of 1, 3 or 5 voters, the state file that lists them (and still reads
a one-controller file), and the quorum's view ``cluster status`` prints, from
DescribeQuorum answers (canned here: no processes)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from broker.cluster import controllers
from broker.cluster.controllers import active_controller, describe_quorum
from broker.cluster.launcher import check_start_args, new_state
from broker.cluster.state import ClusterError, ClusterState, layout_ports, voter_id
from broker.metadata.quorum_voters import parse_quorum_voters
from clients.protocol.api_keys import ApiKey

BASE = 20000


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_three_controllers_are_voters_3001_to_3003_on_consecutive_ports(
        tmp_path: Path) -> None:
    state = new_state(str(tmp_path), 2, BASE, [], controllers=3)
    assert list(state.controllers) == ["controller-1", "controller-2", "controller-3"]
    assert [c.port for c in state.controllers.values()] == [BASE + 100, BASE + 101,
                                                            BASE + 102]
    voters = f"3001@127.0.0.1:{BASE + 100},3002@127.0.0.1:{BASE + 101}," \
             f"3003@127.0.0.1:{BASE + 102}"
    for i, info in enumerate(state.controllers.values(), 1):
        assert flag(info.argv, "--node-id") == str(3000 + i) and voter_id(info) == 3000 + i
        assert flag(info.argv, "--controller-quorum-voters") == voters
        assert info.data_dir == str(tmp_path.resolve() / f"controller-{i}")
    for broker in state.brokers.values():
        assert flag(broker.argv, "--controller-quorum-voters") == voters
        assert "--controller" not in broker.argv
    assert [v.voter_id for v in parse_quorum_voters(state.controller_address)] == [
        3001, 3002, 3003]
    assert layout_ports(BASE, 2, controllers=3)[2:5] == [BASE + 100, BASE + 101, BASE + 102]


def test_one_controller_keeps_the_layout_of_before(tmp_path: Path) -> None:
    state = new_state(str(tmp_path), 1, BASE, [])
    assert list(state.controllers) == ["controller"]
    info = state.controller
    assert "--node-id" not in info.argv and "--controller-quorum-voters" not in info.argv
    assert flag(state.brokers["0"].argv, "--controller") == f"127.0.0.1:{BASE + 100}"
    assert state.controller_address == f"127.0.0.1:{BASE + 100}"


@pytest.mark.parametrize("count", [0, 2, 4, 7])
def test_a_quorum_of_1_3_or_5_only(tmp_path: Path, count: int) -> None:
    with pytest.raises(ClusterError, match="--controllers"):
        check_start_args(str(tmp_path), 3, BASE, count)


def test_the_state_file_lists_the_voters_and_reads_the_old_form(tmp_path: Path) -> None:
    state = new_state(str(tmp_path), 1, BASE, [], controllers=3)
    state.controllers["controller-2"].pid = 4242
    state.save()
    loaded = ClusterState.load(str(tmp_path))
    assert list(loaded.controllers) == ["controller-1", "controller-2", "controller-3"]
    assert loaded.process("controller-2").pid == 4242
    assert loaded.process("0").name == "broker-0"
    with pytest.raises(ClusterError, match="controller-3"):
        loaded.process("controller-9")
    raw = json.loads((tmp_path / "cluster.json").read_text())
    assert raw["controller"]["name"] == "controller-1"  # for readers of the old file
    del raw["controllers"]  # a file from before quorums
    (tmp_path / "cluster.json").write_text(json.dumps(raw))
    old = ClusterState.load(str(tmp_path))
    assert list(old.controllers) == ["controller-1"] and old.controller.port == BASE + 100


def quorum_answer(leader_id: int, epoch: int, ends: dict[int, int]) -> dict[str, Any]:
    return {"error_code": 0, "topics": [{"topic_name": "__cluster_metadata", "partitions": [{
        "partition_index": 0, "error_code": 0, "leader_id": leader_id,
        "leader_epoch": epoch, "high_watermark": 40,
        "current_voters": [{"replica_id": r, "log_end_offset": e,
                            "last_fetch_timestamp": -1, "last_caught_up_timestamp": -1}
                           for r, e in ends.items()],
        "observers": []}]}]}


def test_the_quorum_view_prefers_the_leaders_answer(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    state = new_state(str(tmp_path), 1, BASE, [], controllers=3)
    for info in state.controllers.values():
        info.pid = os.getpid()  # "running"
    state.controllers["controller-3"].pid = 0  # stopped
    answers = {  # voter 1 lags in its own view; the leader 3002 knows everyone's end
        BASE + 100: quorum_answer(3002, 7, {3001: 30, 3002: -1, 3003: -1}),
        BASE + 101: quorum_answer(3002, 7, {3001: 38, 3002: 42, 3003: 35}),
    }
    asked = []

    def fake_request(port: int, api: ApiKey, body: dict[str, Any],
                     **_: Any) -> dict[str, Any]:
        asked.append((port, api))
        return answers[port]

    monkeypatch.setattr(controllers, "status_request", fake_request)
    view = describe_quorum(state)
    assert (view["leader_id"], view["leader_epoch"], view["high_watermark"]) == (3002, 7, 40)
    assert [(v["name"], v["role"], v["log_end_offset"], v["lag"], v["state"])
            for v in view["voters"]] == [
        ("controller-1", "follower", 38, 4, "running"),
        ("controller-2", "leader", 42, 0, "running"),
        ("controller-3", "-", 35, 7, "stopped")]
    assert {api for _, api in asked} == {ApiKey.DESCRIBE_QUORUM}
    assert active_controller(state).name == "controller-2"


def test_no_voter_answering_is_reported_not_raised(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    state = new_state(str(tmp_path), 1, BASE, [], controllers=3)
    for info in state.controllers.values():
        info.pid = os.getpid()

    def refused(*_: Any, **__: Any) -> dict[str, Any]:
        return {"error_code": 35, "topics": []}  # UNSUPPORTED_VERSION: not served

    monkeypatch.setattr(controllers, "status_request", refused)
    view = describe_quorum(state)
    assert "error" in view and all(v["role"] == "-" for v in view["voters"])
    with pytest.raises(ClusterError, match="no active controller"):
        active_controller(state)


def test_status_prints_the_quorum_and_a_stopped_voter_degrades(
        capsys: pytest.CaptureFixture[str]) -> None:
    from broker.cluster.status import DEGRADED, health_of, print_status

    names = ["controller-1", "controller-2", "controller-3", "broker-0"]
    report = {
        "data_dir": "/d", "controller": "3001@127.0.0.1:1,...",
        "processes": [{"name": n, "pid": 1, "port": 1, "internal_port": -1,
                       "state": "stopped" if n == "controller-3" else "running"}
                      for n in names],
        "brokers": [{"node_id": 0, "fenced": False}], "partitions": [],
        "quorum": {"leader_id": 3002, "leader_epoch": 7, "high_watermark": 40, "voters": [
            {"name": "controller-1", "voter_id": 3001, "state": "running",
             "role": "follower", "log_end_offset": 38, "lag": 4},
            {"name": "controller-2", "voter_id": 3002, "state": "running",
             "role": "leader", "log_end_offset": 42, "lag": 0},
            {"name": "controller-3", "voter_id": 3003, "state": "stopped",
             "role": "-", "log_end_offset": -1, "lag": -1}]}}
    print_status(report)
    out = capsys.readouterr().out
    assert "controller quorum: leader 3002, epoch 7, high watermark 40" in out
    assert "controller-2    3002  leader           42      0  running" in out
    health = health_of(report)
    assert health.exit_code == DEGRADED and "controller-3 stopped" in health.reasons


def test_resume_controller_of_a_quorum_is_the_one_paused(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    from broker.cluster.access import process_status
    from broker.cluster.controllers import controller_target
    from tests.broker.processes import wait_until

    state = new_state(str(tmp_path), 1, BASE, [], controllers=3)
    with pytest.raises(ClusterError, match="0 controllers paused"):
        controller_target(state, "resume")
    sleeper = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    try:
        os.kill(sleeper.pid, signal.SIGSTOP)
        wait_until(lambda: process_status(sleeper.pid) == "paused", 10,
                   "the SIGSTOP delivered", 0.01)
        state.controllers["controller-2"].pid = sleeper.pid
        assert controller_target(state, "resume").name == "controller-2"
    finally:
        sleeper.kill()
        sleeper.wait()
    single = new_state(str(tmp_path / "one"), 1, BASE, [])
    assert controller_target(single, "kill") is single.controller
