"""The Kafka-tool verbs of ``minikafka`` against one real 3-broker cluster: ``topics``
(alter, if-exists, under-replicated / unavailable filters, dotted config names),
``configs``, ``groups`` (not found, --members, --state, --all-groups, --delete,
--reset-offsets), ``get-offsets``, ``delete-records``, ``log-dirs``, and ``cluster
status`` / ``cluster health`` exit codes with brokers killed (last: it breaks the
cluster)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from broker.cluster.launcher import main as cluster_main
from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.clients.cli.cli_run import Run

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    overrides: dict[str, object] = {"group_initial_rebalance_delay_ms": 50,
                                    "replica_lag_time_max_ms": 2000}
    with LocalCluster(tmp_path_factory.mktemp("verbs"), overrides=overrides) as c:
        yield c


def produce(cluster: LocalCluster, topic: str, partition: int, timestamps: list[int]) -> None:
    with Producer(cluster.bootstrap, acks="all", linger_ms=5) as producer:
        futures = [producer.send(topic, b"v%d" % i, partition=partition, timestamp_ms=ts)
                   for i, ts in enumerate(timestamps)]
        for f in futures:
            f.result(30)


def test_topics_create_alter_delete_in_kafka_spelling(run: Run) -> None:
    assert run("topics", "--create", "--topic", "grow", "--partitions", "2",
               "--replication-factor", "3", "--config", "retention.ms=60000")[0] == 0
    code, _, err = run("topics", "--create", "--topic", "grow", "--partitions", "2")
    assert code == 1 and "TOPIC_ALREADY_EXISTS" in err
    code, out, _ = run("topics", "create", "grow", "--if-not-exists")
    assert code == 0 and "already exists" in out
    code, out, err = run("topics", "--alter", "--topic", "grow", "--partitions", "4")
    assert code == 0, err
    code, out, _ = run("topics", "--describe", "--topic", "grow")
    assert code == 0
    assert "PartitionCount: 4\tReplicationFactor: 3" in out
    assert "retention.ms=60000" in out and "min.insync.replicas=" in out
    assert "retention_ms" not in out  # Kafka's dotted spelling only
    assert len([line for line in out.splitlines() if "\tPartition: " in line]) == 4
    code, _, err = run("topics", "alter", "grow", "--partitions", "3")
    assert code == 1 and "INVALID_PARTITIONS" in err  # never fewer partitions
    # a healthy cluster: nothing under-replicated nor unavailable
    wait_until(lambda: run("topics", "describe", "--under-replicated-partitions")[1] == "",
               30, "the new partitions' ISR to fill")
    assert run("topics", "describe", "--unavailable-partitions") == (0, "", "")
    assert run("topics", "--delete", "--topic", "grow")[0] == 0
    code, _, err = run("topics", "delete", "grow")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, out, _ = run("topics", "delete", "--topic", "grow", "--if-exists")
    assert code == 0 and "does not exist" in out
    assert run("topics", "describe", "grow", "--if-exists") == (0, "", "")
    code, _, err = run("topics", "describe", "grow")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _, err = run("topics", "--topic", "grow")
    assert code == 1 and err.startswith("error: topics: name an action")
    with pytest.raises(SystemExit) as usage:  # argparse: the action flags exclude each other
        run("topics", "--list", "--delete")
    assert usage.value.code == 2


def test_configs_describe_and_alter(run: Run) -> None:
    assert run("topics", "create", "conf", "--partitions", "1")[0] == 0
    code, out, err = run("configs", "--alter", "--entity-type", "topics", "--entity-name",
                         "conf", "--add-config", "retention.ms=1000,cleanup.policy=[compact]")
    assert code == 0, err
    assert "Completed updating config for topic conf." in out
    code, out, _ = run("configs", "--describe", "--topic", "conf")
    assert out.splitlines()[0] == "Dynamic configs for topic conf are:"
    assert "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:" in out
    assert "cleanup.policy=compact sensitive" in out
    assert "segment.bytes" not in out  # a default: shown with --all only
    assert "segment.bytes=" in run("configs", "--describe", "--topic", "conf", "--all")[1]
    assert run("configs", "--alter", "--topic", "conf", "--delete-config",
               "retention.ms")[0] == 0
    assert "retention.ms" not in run("configs", "--describe", "--topic", "conf")[1]
    code, _, err = run("configs", "--alter", "--topic", "conf", "--add-config", "no.such=1")
    assert code == 1 and "INVALID_CONFIG" in err
    code, out, _ = run("configs", "--describe", "--entity-type", "brokers",
                       "--entity-name", "1", "--all")
    assert code == 0 and out.startswith("All configs for broker 1 are:")
    assert "  retention.ms=" in out
    # nothing of a broker changes at run time: no dynamic configs to show
    assert run("configs", "--describe", "--broker", "1") == (
        0, "Dynamic configs for broker 1 are:\n", "")
    # no broker setting changes at run time: Kafka's error for a static config
    code, _, err = run("configs", "--alter", "--broker", "1", "--add-config",
                       "retention.ms=5")
    assert code == 1 and "INVALID_REQUEST" in err


def test_get_offsets_delete_records_and_log_dirs(cluster: LocalCluster, run: Run) -> None:
    assert run("topics", "create", "recs", "--partitions", "2")[0] == 0
    base = int(time.time() * 1000) - 100_000
    produce(cluster, "recs", 0, [base + 1000 * i for i in range(10)])
    assert run("get-offsets", "--topic", "recs") == (0, "recs:0:10\nrecs:1:0\n", "")
    assert run("get-offsets", "--topic", "recs", "--time", "-2")[1] == "recs:0:0\nrecs:1:0\n"
    by_time = run("get-offsets", "--topic", "recs", "--partitions", "0", "--time",
                  str(base + 3500))
    assert by_time[1] == "recs:0:4\n"  # the first record stamped at or after it
    code, out, err = run("delete-records", "--topic", "recs", "--partition", "0",
                         "--offset", "6")
    assert code == 0, err
    assert out.splitlines() == ["Records delete operation completed:",
                                "partition: recs-0\tlow_watermark: 6"]
    assert run("get-offsets", "--topic", "recs", "--time", "earliest")[1] == \
        "recs:0:6\nrecs:1:0\n"
    code, _, err = run("delete-records", "--topic", "recs", "--partition", "0",
                       "--offset", "99")
    assert code == 1 and "OFFSET_OUT_OF_RANGE" in err
    code, _, err = run("get-offsets", "--topic", "recs", "--partitions", "7")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, out, err = run("log-dirs", "--describe", "--topic-list", "recs")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Querying brokers for log directories information"
    assert lines[1] == "Received log directory information from brokers 0,1,2"
    described = json.loads(lines[2])
    assert [b["broker"] for b in described["brokers"]] == [0, 1, 2]
    sizes = {p["partition"]: p["size"] for b in described["brokers"]
             for d in b["logDirs"] for p in d["partitions"]}
    assert set(sizes) == {"recs-0", "recs-1"} and sizes["recs-0"] > 0


def test_groups_verbs(cluster: LocalCluster, run: Run) -> None:
    code, out, err = run("groups", "describe", "nosuchgroup")
    assert code == 1 and "not found" in err and out == ""
    assert run("topics", "create", "gt", "--partitions", "2")[0] == 0
    base = int(time.time() * 1000) - 100_000
    produce(cluster, "gt", 0, [base + 1000 * i for i in range(10)])
    produce(cluster, "gt", 1, [base + 1000 * i for i in range(4)])
    tp0, tp1 = TopicPartition("gt", 0), TopicPartition("gt", 1)
    with Admin(cluster.bootstrap) as admin:
        admin.alter_group_offsets("idle", {tp0: 5, tp1: 1})

        def committed() -> dict[TopicPartition, int]:
            return {tp: o.offset for tp, o in admin.list_group_offsets("idle").items()}

        code, out, _ = run("groups", "--describe", "--group", "idle", "--offsets")
        assert code == 0 and out.startswith("Group: idle\tState: Empty")
        code, out, _ = run("groups", "--describe", "--group", "idle", "--state")
        assert code == 0 and out.splitlines()[1].split()[3:] == ["Empty", "0"]
        # dry run (the default, with a warning): prints the plan, changes nothing
        code, out, err = run("groups", "--reset-offsets", "--group", "idle", "--topic", "gt",
                             "--to-earliest")
        assert code == 0 and "WARN" in err
        assert [line.split() for line in out.splitlines()[1:]] == [
            ["idle", "gt", "0", "0"], ["idle", "gt", "1", "0"]]
        assert committed() == {tp0: 5, tp1: 1}
        assert run("groups", "reset-offsets", "idle", "--all-topics", "--shift-by", "-2",
                   "--execute")[0] == 0
        assert committed() == {tp0: 3, tp1: 0}  # clamped at the log start
        assert run("groups", "reset-offsets", "idle", "--topic", "gt:0", "--to-offset", "99",
                   "--execute")[0] == 0
        assert committed() == {tp0: 10, tp1: 0}  # clamped at the high watermark
        assert run("groups", "reset-offsets", "idle", "--topic", "gt", "--to-datetime",
                   _iso(base + 2500), "--execute")[0] == 0
        assert committed() == {tp0: 3, tp1: 3}
        assert run("groups", "reset-offsets", "idle", "--all-topics", "--to-latest",
                   "--execute")[0] == 0
        assert committed() == {tp0: 10, tp1: 4}
        code, _, err = run("groups", "reset-offsets", "idle", "--all-topics")
        assert code == 1 and "exactly one of" in err
        # an active group: --execute refused (Kafka's rule), the members listed
        with Consumer(cluster.bootstrap, group_id="busy", auto_offset_reset="earliest",
                      enable_auto_commit=False, fetch_max_wait_ms=100) as member:
            member.subscribe(["gt"])
            wait_until(lambda: bool(member.poll(timeout_ms=200) or member.assignment()), 30,
                       "the member's assignment")
            code, out, _ = run("groups", "--list", "--type", "Classic")
            listed = {r[0]: r[1:] for r in (line.split() for line in out.splitlines()[1:])}
            assert code == 0 and out.split()[:4] == ["GROUP", "STATE", "TYPE", "PROTOCOL-TYPE"]
            assert listed["busy"] == ["Stable", "classic", "consumer"]
            code, out, _ = run("groups", "--list", "--type", "consumer")  # KIP-848 groups only
            assert code == 0 and "busy" not in out
            code, _, err = run("groups", "--list", "--type", "share")
            assert code == 1 and "'share' is not a group type (classic, consumer)" in err
            code, out, _ = run("groups", "describe", "busy", "--members")
            rows = [line.split() for line in out.splitlines()]
            assert code == 0 and rows[0][:5] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID",
                                                 "#PARTITIONS"]
            assert len(rows) == 2 and rows[1][4] == "2"
            code, _, err = run("groups", "reset-offsets", "busy", "--all-topics",
                               "--to-earliest", "--execute")
            assert code == 1 and "inactive" in err and "Stable" in err
            code, _, err = run("groups", "delete", "busy")
            assert code == 1 and "NON_EMPTY_GROUP" in err
            # the member subscribes to gt: its offsets stay (Kafka's per-partition error)
            code, out, err = run("groups", "delete-offsets", "busy", "--topic", "gt:0")
            assert (code, out) == (1, "") and "GROUP_SUBSCRIBED_TO_TOPIC" in err, err
            assert "members subscribe to topic 'gt'" in err
        code, out, _ = run("groups", "describe", "--all-groups", "--state")
        assert code == 0 and {"idle", "busy"} <= {line.split()[0] for line in out.splitlines()
                                              if line}
        code, out, err = run("groups", "--delete-offsets", "--group", "idle", "--topic", "gt:1")
        assert code == 0, err
        assert out == "Deleted the offset of gt-1 for group idle.\n"
        assert committed() == {tp0: 10}
        code, _, err = run("groups", "delete-offsets", "nosuchgroup", "--topic", "gt")
        assert code == 1 and "GROUP_ID_NOT_FOUND" in err
        code, out, _ = run("groups", "--delete", "--group", "idle")
        assert code == 0 and out == "Deleted group idle.\n"
        assert run("groups", "describe", "idle")[0] == 1


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def health(cluster: LocalCluster, capsys: pytest.CaptureFixture[str],
           command: str = "health") -> tuple[int, str]:
    capsys.readouterr()
    code = cluster_main([command, "--data-dir", cluster.data_dir])
    return code, capsys.readouterr().out


def test_cluster_health_exit_codes(cluster: LocalCluster, run: Run,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Last in the module: it kills the cluster's brokers."""
    assert run("topics", "create", "h", "--partitions", "2", "--replication-factor", "3")[0] == 0
    with Admin(cluster.bootstrap) as admin:  # one replica, on the broker killed below
        admin.create_topics([NewTopic("solo", replica_assignments={0: [2]})])
    wait_until(lambda: health(cluster, capsys)[0] == 0, 30, "a healthy cluster")
    code, out = health(cluster, capsys)
    assert out.startswith("healthy: 3 broker(s) serving") and len(out.splitlines()) == 1
    cluster.kill("2")
    code, out = health(cluster, capsys)
    assert code == 1 and out.startswith("degraded: broker-2 stopped")
    wait_until(lambda: "under-replicated partition(s): " in health(cluster, capsys)[1], 30,
               "the ISR to shrink")
    code, out = health(cluster, capsys, "status")
    assert code == 1 and "health: degraded: broker-2 stopped" in out
    code, out, _ = run("topics", "describe", "--topic", "h", "--under-replicated-partitions")
    assert code == 0 and len(out.splitlines()) == 2 and all("Topic: h" in s for s in
                                                            out.splitlines())
    wait_until(lambda: "Leader: -1" in run("topics", "describe", "--topic", "solo")[1], 30,
               "solo-0 offline once broker 2 is fenced")
    code, out, _ = run("topics", "describe", "--topic", "solo", "--unavailable-partitions")
    assert code == 0 and [line.split("\t")[1:4] for line in out.splitlines()] == [
        ["Topic: solo", "Partition: 0", "Leader: -1"]]
    assert " offline partition(s): " in health(cluster, capsys)[1]
    assert run("topics", "describe", "--topic", "h", "--unavailable-partitions")[1] == ""
    cluster.kill("0")
    cluster.kill("1")
    code, out = health(cluster, capsys)
    assert code == 2 and out.startswith("down: ")
    cluster.kill("controller")
    code, out = health(cluster, capsys)
    assert code == 2 and "controller unreachable" in out
