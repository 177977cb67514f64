"""The launcher run from another process than the one that started the cluster.

A user's fault injector (``minikafka workload --faults``) runs ``cluster kill`` in a
process that is not the brokers' parent: the killed broker stays a zombie until its
parent reaps it, and the launcher must count a zombie as gone instead of waiting for it
and timing out.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from broker.cluster.children import SOURCE_ROOT, is_running
from broker.cluster.launcher import new_state
from broker.cluster.state import override_settings
from tests.broker.cluster_harness import LocalCluster

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.multiprocess


def kill_trees(pids: list[int]) -> None:
    """SIGKILL each process and its children by PID (those still alive)."""
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(pid)
            for p in [*proc.children(recursive=True), proc]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()


def test_kill_from_another_process_returns_while_the_broker_is_a_zombie(
        tmp_path: Path) -> None:
    with LocalCluster(tmp_path, brokers=1) as cluster:  # brokers are children of pytest
        pid = cluster.state.brokers["0"].pid
        result = subprocess.run(
            [sys.executable, "-m", "broker.cluster", "kill", "0", "--data-dir",
             cluster.data_dir],
            capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        assert not is_running(pid)
        cluster.restart("0")  # this process reaps its zombie child and starts a new one
        assert is_running(cluster.state.brokers["0"].pid)


def test_a_second_cluster_on_the_same_ports_fails_and_the_first_stays_healthy(
        tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "first", brokers=2) as first:
        before = {k: v.pid for k, v in first.state.brokers.items()}
        result = subprocess.run(
            [sys.executable, "-m", "broker.cluster", "start", "--brokers", "2",
             "--base-port", str(first.base_port), "--data-dir", str(tmp_path / "second")],
            capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
        assert result.returncode == 1
        assert "already in use by another process" in result.stderr, result.stderr
        assert not (tmp_path / "second" / "cluster.json").exists()  # nothing was started
        report = first.report()
        assert {b["node_id"] for b in report["brokers"] if not b["fenced"]} == {0, 1}
        assert {k: v.pid for k, v in first.state.brokers.items()} == before
        assert all(is_running(pid) for pid in before.values())


def test_controller_overrides_go_to_the_controller_only(tmp_path: Path) -> None:
    """``start --controller-override`` (the fault run's faster preferred-leader checks)."""
    state = new_state(str(tmp_path), 2, 0, ["--override", "log_flush_interval_ms=7"],
                      ["--override", "leader_imbalance_check_interval_ms=500"])
    assert override_settings(state.controller.argv)[
        "leader_imbalance_check_interval_ms"] == "500"
    for broker in state.brokers.values():
        settings = override_settings(broker.argv)
        assert settings["log_flush_interval_ms"] == "7"
        assert "leader_imbalance_check_interval_ms" not in settings


def test_launched_processes_get_this_source_tree_on_their_path() -> None:
    assert Path(SOURCE_ROOT).samefile(ROOT)  # the tree holding broker/, not broker/ itself


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_a_damaged_state_file_is_rebuilt_and_the_cluster_still_stops(
        tmp_path: Path, damage: str) -> None:
    with LocalCluster(tmp_path, brokers=2) as cluster, contextlib.ExitStack() as cleanup:
        state = cluster.state
        pids = {i.name: i.pid for i in [state.controller, *state.brokers.values()]}
        cleanup.callback(kill_trees, list(pids.values()))  # even if the rebuild fails
        path = Path(cluster.data_dir) / "cluster.json"
        if damage == "truncated":
            path.write_bytes(path.read_bytes()[:40])
        else:
            path.unlink()
        status = subprocess.run(
            [sys.executable, "-m", "broker.cluster", "status", "--json", "--data-dir",
             cluster.data_dir], capture_output=True, text=True, timeout=120, cwd=ROOT,
            check=False)
        assert status.returncode == 0, status.stderr
        assert "rebuilt it from the running processes" in status.stderr
        rebuilt = cluster.state  # written back
        assert {i.name: i.pid for i in [rebuilt.controller, *rebuilt.brokers.values()]} == pids
        assert {k: v.port for k, v in rebuilt.brokers.items()} == {
            k: v.port for k, v in state.brokers.items()}
        stop = subprocess.run(
            [sys.executable, "-m", "broker.cluster", "stop", "--data-dir", cluster.data_dir],
            capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
        assert stop.returncode == 0, stop.stderr
        assert not any(is_running(pid) for pid in pids.values())


def test_the_harness_starts_again_on_other_ports_when_one_is_taken_after_the_probe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the harness absorbs: the broker's port passes the launcher's check and is
    then taken (here held by a listener the check is told to miss).  The broker cannot
    bind it and exits; the cluster starts on a new layout and the broker there serves."""
    from broker.cluster import launcher

    cluster = LocalCluster(tmp_path, brokers=1)
    taken_port = cluster.base_port
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken_port))
        holder.listen(1)
        monkeypatch.setattr(launcher, "port_taken", lambda port, host="127.0.0.1": False)
        with cluster:
            assert cluster.base_port != taken_port
            assert cluster.state.brokers["0"].port == cluster.base_port
            assert is_running(cluster.state.brokers["0"].pid)
            assert {b["node_id"] for b in cluster.report()["brokers"]
                    if not b["fenced"]} == {0}
        log = (Path(cluster.data_dir) / "broker-0.log").read_text()
        assert "Address already in use" in log
