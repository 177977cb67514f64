"""Honest, fast CLI errors in Kafka's words, against one real 2-broker cluster: topic
configs named Kafka's way (``nosuch.config``, ``cleanup.policy``, kafka-configs.sh's
``[a,b]`` list syntax: ``[delete,compact]`` accepted, shown ``compact,delete``),
INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR for bad counts and factors, a broker id
that is not in the cluster, and ``produce`` failing at once when nothing listens (no
``--max-block-ms`` wait).  The broker's side:
tests/broker/handlers/test_kafka_shaped_errors.py."""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator

import pytest

from clients.cli.main import main as cli_main
from clients.cli.produce import refuse_fast
from tests.broker.cluster_harness import LocalCluster
from tests.clients.cli.cli_run import Run

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cli-errors"), brokers=2) as c:
        yield c


def error_line(result: tuple[int, str, str]) -> str:
    code, _, err = result
    assert code == 1 and err.count("\n") == 1 and err.startswith("error: "), result
    return err.strip()


def test_topic_configs_are_named_kafkas_way(run: Run) -> None:
    create = ("topics", "--create", "--topic", "c", "--partitions", "1")
    assert error_line(run(*create, "--config", "nosuch.config=2")) == (
        "error: INVALID_CONFIG: create topic 'c': Unknown topic config name: nosuch.config")
    line = error_line(run(*create, "--config", "cleanup.policy=[delete,nope]"))
    assert line == ("error: INVALID_CONFIG: create topic 'c': Invalid value delete,nope for "
                    "configuration cleanup.policy: String must be one of: delete, compact"), line
    for topic, value in (("both1", "[delete,compact]"), ("both2", "compact,delete")):
        assert run("topics", "--create", "--topic", topic, "--partitions", "1",
                   "--config", f"cleanup.policy={value}")[0] == 0, value
        assert "cleanup.policy=compact,delete" in run("topics", "describe", "--topic",
                                                      topic)[1]
    assert run(*create, "--config", "cleanup.policy=[compact]")[0] == 0
    assert "cleanup.policy=compact" in run("topics", "describe", "--topic", "c")[1]
    alter = ("configs", "--alter", "--entity-type", "topics", "--entity-name", "c")
    assert error_line(run(*alter, "--add-config", "nosuch.config=1")) == (
        "error: INVALID_CONFIG: alter configs of topic 'c': Unknown topic config name: "
        "nosuch.config")
    line = error_line(run(*alter, "--add-config", "retention_ms=abc"))
    assert "Invalid value abc for configuration retention.ms: expected an integer" in line
    assert run(*alter, "--add-config", "cleanup.policy=[delete]")[0] == 0
    # a list the controller stores normalized (repeats once) is answered as soon as this
    # broker's image shows it, not after the 5 s visibility wait
    started = time.monotonic()
    assert run(*alter, "--add-config", "cleanup.policy=[compact, compact]")[0] == 0
    assert time.monotonic() - started < 3
    assert "cleanup.policy=compact" in run("topics", "describe", "--topic", "c")[1]
    # both policies in Kafka's other order: stored and shown compact,delete, as fast
    started = time.monotonic()
    assert run(*alter, "--add-config", "cleanup.policy=[delete,compact]")[0] == 0
    assert time.monotonic() - started < 3
    assert "cleanup.policy=compact,delete" in run("topics", "describe", "--topic", "c")[1]


def test_bad_partition_counts_and_replication_factors(run: Run) -> None:
    def create(partitions: str, rf: str) -> str:
        return error_line(run("topics", "--create", "--topic", "shape", "--partitions",
                              partitions, "--replication-factor", rf))

    zero = "Number of partitions was set to an invalid non-positive value."
    assert create("0", "1") == f"error: INVALID_PARTITIONS: create topic 'shape': {zero}"
    assert create("-4", "1").endswith(zero)
    assert create("1", "0") == "error: INVALID_REPLICATION_FACTOR: create topic 'shape': " \
                               "Replication factor must be larger than 0, or -1 to use " \
                               "the default value."
    assert create("1", "3").startswith(
        "error: INVALID_REPLICATION_FACTOR: create topic 'shape': Unable to replicate the "
        "partition 3 time(s): "
        "The target replication factor of 3 cannot be reached because only 2 broker(s)")
    assert run("topics", "--create", "--topic", "two", "--partitions", "2")[0] == 0
    alter = ("topics", "--alter", "--topic", "two", "--partitions")
    assert error_line(run(*alter, "0")) == f"error: INVALID_PARTITIONS: {zero}"
    assert error_line(run(*alter, "1")).endswith(
        "Topic currently has 2 partitions, which is higher than the requested 1.")


def test_configs_of_a_broker_that_is_not_in_the_cluster(run: Run) -> None:
    describe = ("configs", "--describe", "--entity-type", "brokers", "--entity-name")
    assert error_line(run(*describe, "9")) == (
        "error: broker 9 is not in the cluster: no such broker id (the brokers are 0, 1)")
    assert "must be a broker id" in error_line(run(*describe, "x"))
    assert run(*describe, "1")[0] == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_produce_fails_at_once_when_nothing_listens(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("a\n"))
    ports = [free_port(), free_port()]
    started = time.monotonic()
    code = cli_main(["produce", "t", "--max-block-ms", "30000", "--bootstrap-server",
                     ",".join(f"127.0.0.1:{p}" for p in ports)])
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 1 and took < 5, (code, took, err)  # not the 30 s max-block wait
    assert err.startswith("error: NETWORK_EXCEPTION: no broker reachable: cannot connect to "
                          f"127.0.0.1:{ports[0]}: ") and "Connection refused" in err, err


def test_a_listening_broker_keeps_the_producers_wait() -> None:
    """An address that accepts (a broker starting, metadata not ready) is left to the
    producer's max-block wait: refuse_fast returns."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        refuse_fast(f"127.0.0.1:{free_port()},127.0.0.1:{port}", 2000)
