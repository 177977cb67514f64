"""``minikafka ARGS`` run in the test's own process against a test cluster (the CLI
tests' common helper; the ``run`` fixture in this folder's conftest builds one)."""

from __future__ import annotations

import pytest

from clients.cli.main import main as cli_main
from tests.broker.cluster_harness import LocalCluster


class Run:
    """``minikafka ARGS`` in this process: exit code, stdout, stderr."""

    def __init__(self, cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
        self.cluster, self.capsys = cluster, capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = cli_main([*args, "--bootstrap-server", self.cluster.bootstrap])
        out = self.capsys.readouterr()
        return code, out.out, out.err
