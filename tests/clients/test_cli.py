"""The ``minikafka`` command line against real processes (what the README tells users)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

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
    assert "retention_ms=60000" in described.stdout  # the topic's override
    assert "min_insync_replicas=1" in described.stdout  # a broker default
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


def test_demo_runs_a_cluster_end_to_end(tmp_path: Path) -> None:
    result = cli("demo", "--records", "3000", "--data-dir", str(tmp_path / "demo"),
                 timeout_s=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every acknowledged record consumed once, in order: yes" in result.stdout
    assert "cluster stopped" in result.stdout
