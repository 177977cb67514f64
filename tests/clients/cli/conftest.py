"""Shared CLI test fixture: ``run`` calls ``minikafka ARGS`` in this process against the
test module's ``cluster`` fixture (each module defines its own cluster) and returns the
exit code, stdout and stderr."""

from __future__ import annotations

import pytest

from tests.broker.cluster_harness import LocalCluster
from tests.clients.cli.cli_run import Run


@pytest.fixture
def run(cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> Run:
    return Run(cluster, capsys)
