"""``cluster kill`` / ``restart`` against a cluster that is not (all) running.

Found by following the README on a stopped cluster: ``kill 1`` printed "killed broker-1
(pid N)" for a PID long gone (and would have SIGKILLed whatever process reuses it), and
``restart 1`` with the controller down waited 60 s for a registration that cannot happen;
and ``kill 1; restart 1`` then a topic with replication factor 3 could find "2 available
brokers": ``restart`` returned while the new incarnation was not yet serving.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from broker.cluster.children import is_ours
from broker.cluster.launcher import free_base_port, main, new_state
from broker.cluster.state import ClusterState
from broker.cluster.status import broker_view
from tests.broker.cluster_harness import LocalCluster

pytestmark = pytest.mark.multiprocess


@pytest.fixture
def stranger() -> subprocess.Popen[bytes]:
    """A process that is not the cluster's, standing at a PID the state file names (it
    blocks until a signal ends it)."""
    proc = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    yield proc
    proc.kill()
    proc.wait(10)


def stopped_cluster(tmp_path: Path, pid: int) -> ClusterState:
    """A 1-broker cluster's state file whose processes all 'have' ``pid``: as after
    ``cluster stop`` once the PIDs were reused."""
    state = new_state(str(tmp_path), 1, free_base_port(1), [])
    for info in [state.controller, *state.brokers.values()]:
        info.pid = pid
    state.save()
    return state


def test_a_reused_pid_is_not_the_clusters_and_is_not_signalled(
        tmp_path: Path, stranger: subprocess.Popen[bytes],
        capsys: pytest.CaptureFixture[str]) -> None:
    state = stopped_cluster(tmp_path, stranger.pid)
    assert not is_ours(state.brokers["0"])
    for command in (["kill", "0"], ["kill", "controller"], ["stop"]):
        assert main([*command, "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "broker-0 was not running", "controller was not running", "cluster stopped"]
    assert main(["pause", "0", "--data-dir", str(tmp_path)]) == 1
    assert "broker-0 is not running" in capsys.readouterr().err
    assert stranger.poll() is None  # never signalled


def test_restarting_a_broker_without_a_controller_fails_at_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = stopped_cluster(tmp_path, 0)
    began = time.monotonic()
    try:
        code = main(["restart", "0", "--data-dir", str(tmp_path), "--timeout-s", "60"])
    finally:
        pid = ClusterState.load(str(tmp_path)).brokers["0"].pid
        with contextlib.suppress(psutil.NoSuchProcess):
            broker = psutil.Process(pid)
            for proc in [*broker.children(recursive=True), broker]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
    err = capsys.readouterr().err
    assert code == 1 and time.monotonic() - began < 15, err
    assert err.startswith("error: restarted broker-0 (pid ") and \
        "the controller is not running" in err and err.count("\n") == 1
    assert state.brokers["0"].argv == ClusterState.load(str(tmp_path)).brokers["0"].argv


def test_a_restarted_broker_serves_when_restart_returns(tmp_path: Path) -> None:
    with LocalCluster(tmp_path) as cluster:
        for _ in range(2):
            cluster.kill("1")
            cluster.restart("1")
            # its own metadata: itself and the others (it listed [] or [0, 2] for ~1 s)
            assert broker_view(cluster.state, "1") == {0, 1, 2}


def test_a_child_killed_by_someone_else_is_reaped_at_exit_without_a_warning(
        tmp_path: Path) -> None:
    # The suite printed "ResourceWarning: subprocess N is still running" at exit: a
    # child the launcher spawned in-process and a fault (or test) SIGKILLed by PID was
    # never waited for, and Popen warns for it at garbage collection.
    script = (
        "import os, signal, sys\n"
        "from broker.cluster.children import spawn\n"
        "from broker.cluster.state import ProcessInfo\n"
        f"info = ProcessInfo('x', 0, {str(tmp_path)!r}, {str(tmp_path / 'x.log')!r},"
        " [sys.executable, '-c', 'import signal; signal.pause()'])\n"
        "spawn(info)\n"
        "os.kill(info.pid, signal.SIGKILL)\n"
        "os.waitid(os.P_PID, info.pid, os.WEXITED | os.WNOWAIT)\n")
    done = subprocess.run([sys.executable, "-W", "always", "-c", script],
                          capture_output=True, text=True, timeout=60,
                          cwd=str(Path(__file__).resolve().parents[3]))
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr
