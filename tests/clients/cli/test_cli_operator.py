"""The operator experience of ``minikafka`` (issue 33): honest, fast errors and Kafka's
console flags, against a real 3-broker cluster started by ``minikafka cluster start``."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient

from clients.admin import Admin
from clients.producer.producer import Producer
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import ROOT

pytestmark = pytest.mark.multiprocess

CLI = [sys.executable, "-m", "clients.cli"]


def cli(*args: str, stdin: str = "", env: dict[str, str] | None = None,
        timeout_s: float = 60) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout_s, cwd=ROOT, env=env)


def timed(*args: str, stdin: str = "") -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = cli(*args, stdin=stdin)
    return result, time.monotonic() - started


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The single ``error: ...`` line a failed command printed (no traceback)."""
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("operator")) as c:
        yield c


def create(cluster: LocalCluster, topic: str, partitions: int = 3) -> None:
    made = cli("topics", "create", topic, "--partitions", str(partitions),
               "--bootstrap-server", cluster.bootstrap)
    assert made.returncode == 0, made.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_produce_fails_within_seconds_with_the_real_cause(cluster: LocalCluster) -> None:
    stopped, took = timed("produce", "t", "--bootstrap-server", f"127.0.0.1:{free_port()}",
                          stdin="a\n")
    assert "Connection refused" in one_line_error(stopped) and took < 10, took
    unknown, took = timed("produce", "nosuch", "--max-block-ms", "1500",
                          "--bootstrap-server", cluster.bootstrap, stdin="a\n")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in one_line_error(unknown) and took < 5, took


def test_consume_refuses_unknown_topics_and_partitions_and_bad_flags(
        cluster: LocalCluster) -> None:  # fmt: skip
    create(cluster, "three")
    bs = ["--bootstrap-server", cluster.bootstrap, "--timeout-ms", "500"]
    assert "unknown topic 'nosuch'" in one_line_error(cli("consume", "nosuch", *bs))
    assert "unknown topic 'nosuch'" in one_line_error(
        cli("consume", "nosuch", "--group", "g-nosuch", *bs))
    assert "unknown partition three-9" in one_line_error(
        cli("consume", "three", "--partition", "9", *bs))
    usage = cli("consume", "three", "--offset", "5", *bs)
    assert usage.returncode == 2 and "--offset needs --partition" in usage.stderr


def cli_together(*commands: list[str]) -> list[tuple[int, str, str]]:
    """Run CLI commands at the same time (each group's join waits 3 s); (code, out, err)."""
    procs = [subprocess.Popen([*CLI, *c], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True, cwd=ROOT)
             for c in commands]
    results = []
    for proc in procs:
        with proc:
            try:
                out, err = proc.communicate(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
            results.append((proc.returncode, out, err))
    return results


def described_offsets(cluster: LocalCluster, group: str) -> list[tuple[str, str]]:
    """(CURRENT-OFFSET, LOG-END-OFFSET) per partition in ``groups describe``."""
    out = cli("groups", "describe", group, "--bootstrap-server", cluster.bootstrap).stdout
    return [(r[3], r[4]) for r in (line.split() for line in out.splitlines())
            if r and r[0] == group]


def test_group_consume_times_out_from_its_assignment_and_commits(
        cluster: LocalCluster) -> None:  # fmt: skip
    create(cluster, "billing-in")
    create(cluster, "billing-one", 1)
    bs = ["--bootstrap-server", cluster.bootstrap]
    for topic in ("billing-in", "billing-one"):
        assert cli("produce", topic, *bs, stdin="a\nb\nc\n").returncode == 0
    billing, fresh, one = cli_together(
        # the join takes group_initial_rebalance_delay_ms (3 s), longer than --timeout-ms
        ["consume", "--group", "billing", "billing-in", "--from-beginning",
         "--timeout-ms", "2000", *bs],
        ["consume", "billing-in", "--group", "fresh", "--timeout-ms", "200", *bs],
        ["consume", "billing-one", "--group", "one", "--from-beginning", "--max-messages",
         "1", *bs])  # fmt: skip
    assert billing[0] == 0 and sorted(billing[1].split()) == ["a", "b", "c"], billing
    assert fresh[0] == 0 and fresh[1] == "", fresh
    assert one[0] == 0 and one[1] == "a\n", one
    # a new group at latest that read nothing commits where it stands
    offsets = described_offsets(cluster, "fresh")
    assert len(offsets) == 3 and all(c == e != "-" for c, e in offsets), offsets
    assert described_offsets(cluster, "one") == [("1", "3")]  # not past what was printed


def test_cluster_start_refuses_bad_arguments_in_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for args, says in (
        (["--data-dir", str(a_file)], "is not a directory"),
        (["--data-dir", "/proc/minikafka-test"], "cannot use --data-dir"),
        (["--data-dir", str(tmp_path / "p"), "--base-port", "99999"], "--base-port must be"),
        (["--data-dir", str(tmp_path / "b"), "--brokers", "0"], "--brokers must be"),
    ):
        result = cli("cluster", "start", *args, "--timeout-s", "10")
        assert says in one_line_error(result)
    assert not list(tmp_path.rglob("cluster.secret"))


def test_a_closed_pipe_ends_consume_and_status_quietly(cluster: LocalCluster) -> None:
    create(cluster, "piped", 1)
    assert cli("produce", "piped", "--bootstrap-server", cluster.bootstrap,
               stdin="x\n" * 50).returncode == 0
    for command in (
        [*CLI, "consume", "piped", "--from-beginning", "--max-messages", "50",
         "--timeout-ms", "5000", "--bootstrap-server", cluster.bootstrap],
        [*CLI, "cluster", "status", "--data-dir", cluster.data_dir],
    ):
        shell = f"{shlex.join(command)} | head -n 0"  # head exits before reading
        result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True,
                                timeout=60, cwd=ROOT)
        assert "Broken pipe" not in result.stderr and "Traceback" not in result.stderr, \
            result.stderr


def test_describe_cluster_gives_the_id_in_meta_properties(cluster: LocalCluster) -> None:
    props = (Path(cluster.data_dir) / "controller" / "meta.properties").read_text()
    cluster_id = dict(line.split("=", 1) for line in props.splitlines()
                      if "=" in line and not line.startswith("#"))["cluster.id"]
    assert cluster_id != "minikafka"
    with Admin(cluster.bootstrap) as admin:
        assert admin.describe_cluster().cluster_id == cluster_id  # DescribeCluster
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    assert metadata.cluster_id == cluster_id  # Metadata


def test_librdkafka_init_transactions_answers_at_once(cluster: LocalCluster) -> None:
    producer = ConfluentProducer({"bootstrap.servers": cluster.bootstrap,
                                  "transactional.id": "cli-init"})
    started = time.monotonic()
    producer.init_transactions(30)
    assert time.monotonic() - started < 10  # well under its 30 s timeout


def test_console_producer_and_consumer_flags(cluster: LocalCluster) -> None:
    create(cluster, "console-a", 1)
    create(cluster, "console-b", 1)
    env = dict(os.environ, MINIKAFKA_BOOTSTRAP=cluster.bootstrap)  # no --bootstrap-server
    produced = cli("produce", "--topic", "console-a", "--key-separator", ":",
                   "--parse-headers", "--header", "src=cli", "--compression", "gzip",
                   "--producer-property", "linger.ms=0",
                   stdin="h1:x,h2:y\tk1:v1\n\tnokey\n", env=env)
    assert produced.returncode == 0, produced.stderr
    with Producer(cluster.bootstrap) as producer:
        producer.send("console-a", None, key=b"").result(10)  # null value, empty key
        producer.send("console-b", b"in-b").result(10)
    listed = cli("topics", "list", "--data-dir", cluster.data_dir)  # after the action too
    assert {"console-a", "console-b"} <= set(listed.stdout.split()), listed.stderr
    by_dir = ["--data-dir", cluster.data_dir, "--timeout-ms", "1000"]
    fmt = cli("consume", "console-a", "--from-beginning", "--format", r"%p:%o:%k:%s:%h\n",
              *by_dir)
    assert fmt.stdout.splitlines() == ["0:0:k1:v1:src=cli,h1=x,h2=y", "0:1:null:nokey:src=cli",
                                       "0:2::null:"], fmt.stderr
    lines = cli("consume", "--topic", "console-a", "--from-beginning", "--json", *by_dir)
    records = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [(r["key"], r["value"]) for r in records] == [("k1", "v1"), (None, "nokey"),
                                                         ("", None)]
    assert records[0]["headers"] == [{"key": "src", "value": "cli"}, {"key": "h1", "value": "x"},
                                     {"key": "h2", "value": "y"}]
    assert records[0]["timestamp"] > 0 and records[2]["offset"] == 2
    both = cli("consume", "--include", "console-[ab]", "--from-beginning", "--consumer-property",
               "fetch.max.wait.ms=100", *by_dir)
    assert sorted(both.stdout.split()) == ["in-b", "nokey", "null", "v1"], both.stderr
    with subprocess.Popen([*CLI, "consume", "console-b", "--from-beginning", "--follow",
                           "--timeout-ms", "100", "--bootstrap-server", cluster.bootstrap],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=ROOT) as follow:
        try:
            assert follow.stdout is not None
            assert follow.stdout.readline() == "in-b\n"
            with Producer(cluster.bootstrap) as producer:  # takes longer than --timeout-ms
                producer.send("console-b", b"later").result(10)
            assert follow.stdout.readline() == "later\n"  # still following
            follow.send_signal(signal.SIGINT)
            assert follow.wait(20) == 0
        finally:
            if follow.poll() is None:
                follow.kill()


def test_the_readme_workload_example_injects_both_faults(cluster: LocalCluster) -> None:
    line = next(line for line in (ROOT / "README.md").read_text().splitlines()
                if line.startswith("minikafka workload ") and "--faults" in line)
    args = [a.replace("./data", cluster.data_dir) for a in shlex.split(line)[1:]]
    result = cli(*args, timeout_s=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "killed broker-" in result.stdout and "restarted broker-" in result.stdout, \
        result.stdout
