"""Kafka users' mistakes found by walking README.md and docs/cli.md, against one real
1-broker cluster: each is one line on stderr, exit 1, within seconds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.cli.main import main as cli_main
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("walk"), brokers=1) as c:
        yield c


def run(cluster: LocalCluster, capsys: pytest.CaptureFixture[str],
        *args: str) -> tuple[int, str, str, float]:
    capsys.readouterr()
    began = time.monotonic()
    code = cli_main([*args, "--bootstrap-server", cluster.bootstrap])
    out = capsys.readouterr()
    return code, out.out, out.err, time.monotonic() - began


def test_bench_on_a_missing_topic_fails_in_seconds(
        cluster: LocalCluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # was "INVALID_REQUEST: poll with no assigned partitions" and a 60 s wait
    code, _, err, took = run(cluster, capsys, "bench", "consume", "--topic", "nosuch",
                             "--records", "10", "--json", str(tmp_path / "c.json"))
    assert (code, err) == (1, "error: unknown topic 'nosuch' (UNKNOWN_TOPIC_OR_PARTITION)\n")
    assert took < 5
    code, _, err, took = run(cluster, capsys, "bench", "produce", "--topic", "nosuch",
                             "--records", "10", "--json", str(tmp_path / "p.json"))
    assert code == 1 and err.startswith("error: UNKNOWN_TOPIC_OR_PARTITION: topic 'nosuch'")
    assert "max_block_ms=5000" in err and err.count("\n") == 1 and took < 15


def test_group_verbs_a_user_types(cluster: LocalCluster,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic("walked", 1, 1)])
        admin.alter_group_offsets("idle", {TopicPartition("walked", 0): 0})
        # an unknown group: Kafka's error name first
        code, _, err, _ = run(cluster, capsys, "groups", "--delete", "--group", "nosuch")
        assert (code, err) == (1, "error: GROUP_ID_NOT_FOUND: delete group 'nosuch'\n")
        # --to-offset 0 is a target ("give exactly one of ..." before)
        code, out, err, _ = run(cluster, capsys, "groups", "--reset-offsets", "--group",
                                "idle", "--topic", "walked", "--to-offset", "0", "--execute")
        assert code == 0, err
        assert out.splitlines()[1].split() == ["idle", "walked", "0", "0"]
        # a DeleteRecords error names the partition as Kafka does
        code, _, err, _ = run(cluster, capsys, "delete-records", "--topic", "walked",
                              "--partition", "0", "--offset", "5")
        assert (code, err) == (1, "error: OFFSET_OUT_OF_RANGE: delete records of walked-0\n")
