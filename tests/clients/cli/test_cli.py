"""The ``minikafka`` command line against real processes (what the README tells users)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.broker.processes import ROOT, BrokerProcess

pytestmark = pytest.mark.multiprocess


def cli(*args: str, stdin: str = "", timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clients.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("cli")) as b:
        yield b


def test_topics_produce_consume_round_trip(broker: BrokerProcess) -> None:
    bs = ["--bootstrap-server", broker.bootstrap]
    created = cli("topics", "create", "lines", "--partitions", "2", "--config",
                  "retention_ms=60000", *bs)
    assert created.returncode == 0, created.stderr
    assert "lines" in cli("topics", "list", *bs).stdout.split()
    described = cli("topics", "describe", "lines", *bs)
    assert "PartitionCount: 2" in described.stdout
    assert "retention.ms=60000" in described.stdout  # the topic's override, Kafka's name
    assert "min.insync.replicas=1" in described.stdout  # a broker default
    produced = cli("produce", "lines", "--key-separator", ":", "--partition", "1", *bs,
                   stdin="k1:hello\nk2:world\n")
    assert produced.returncode == 0, produced.stderr
    consumed = cli("consume", "lines", "--from-beginning", "--max-messages", "2",
                   "--partition", "1", "--print-key", "--timeout-ms", "20000", *bs)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == ["k1\thello", "k2\tworld"]
    assert cli("topics", "delete", "lines", *bs).returncode == 0
    assert "lines" not in cli("topics", "list", *bs).stdout.split()


def test_errors_are_one_line_and_non_zero(broker: BrokerProcess) -> None:
    bs = ["--bootstrap-server", broker.bootstrap]
    bad_name = cli("topics", "create", "bad name", *bs)
    assert bad_name.returncode == 1
    assert bad_name.stderr.strip().startswith("error: INVALID_TOPIC_EXCEPTION")
    assert len(bad_name.stderr.strip().splitlines()) == 1
    nobody = cli("topics", "list", "--bootstrap-server", "127.0.0.1:1")
    assert nobody.returncode == 1 and nobody.stderr.startswith("error:")
    assert cli("topics", "--help").returncode == 0


def cluster_pids(data_dir: Path) -> list[int]:
    try:
        state = json.loads((data_dir / "cluster.json").read_text())
    except (OSError, ValueError):
        return []
    return [state["controller"]["pid"], *(b["pid"] for b in state["brokers"].values())]


def kill_leftovers(pids: list[int]) -> list[int]:
    """SIGKILL whichever of ``pids`` still runs (a failed demo); the ones that did."""
    alive = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            alive.append(pid)
            for p in [*proc.children(recursive=True), proc]:
                p.kill()
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.mark.spark
@pytest.mark.slow
def test_demo_runs_workload_with_faults_and_verifies(tmp_path: Path) -> None:
    report, data_dir = tmp_path / "report.json", tmp_path / "demo"
    try:
        result = cli("demo", "--messages", "3000", "--rate", "1000", "--faults",
                     "kill-leader@1s,restart@2s", "--data-dir", str(data_dir),
                     "--report", str(report), timeout_s=290)
    finally:
        leftovers = kill_leftovers(cluster_pids(data_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fault kill-leader@1s" in result.stdout and "killed broker-" in result.stdout
    assert "result: CLEAN (0 violations)" in result.stdout
    assert json.loads(report.read_text())["counts"]["acked"] > 0
    assert "cluster stopped" in result.stdout and leftovers == []


def test_demo_without_java_says_how_to_install_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java here
    result = subprocess.run([sys.executable, "-m", "clients.cli", "demo", "--data-dir",
                             str(tmp_path / "demo")], capture_output=True, text=True,
                            timeout=120, cwd=ROOT, env=env)
    assert result.returncode == 1
    assert "needs a Java 17 runtime" in result.stderr and "ensure_java.sh" in result.stderr
    assert not (tmp_path / "demo" / "cluster.json").exists()  # nothing was started
