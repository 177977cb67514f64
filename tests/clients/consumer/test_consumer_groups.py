"""Consumer groups on a real 3-broker cluster (one cluster for the module; the test that
kills the coordinator's broker runs last and restarts it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.coordination.placement import partition_for
from broker.group.metadata import OffsetCommitKey, decode_key, decode_offset_commit_value
from clients.admin import Admin
from clients.cli.main import main as cli_main
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.topics import TopicPartition
from clients.records.batch import iter_batches
from clients.records.record import decode_batch
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.clients.consumer.group_helpers import Runner

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

SESSION_MS = 2000
OFFSETS_PARTITIONS = 3
GROUP_OPTS: dict[str, Any] = {
    "session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": 200, "retry_backoff_ms": 50,
    "fetch_max_wait_ms": 100, "auto_offset_reset": "earliest", "enable_auto_commit": False,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    overrides: dict[str, object] = {
        "group_initial_rebalance_delay_ms": 50, "offsets_topic_segment_bytes": 2048,
        "offsets_topic_num_partitions": OFFSETS_PARTITIONS, "log_cleaner_interval_ms": 50,
        "replica_lag_time_max_ms": 2000,  # acks=all resumes soon after a broker is killed
    }
    with LocalCluster(tmp_path_factory.mktemp("groups"), overrides=overrides) as c:
        yield c


def create(cluster: LocalCluster, topic: str, partitions: int) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, partitions, 3)])


def produce(cluster: LocalCluster, topic: str, start: int, count: int) -> set[tuple[int, int]]:
    """Keyed records spread over the partitions; their (partition, offset)s."""
    with Producer(cluster.bootstrap, acks="all", linger_ms=5) as producer:
        futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % i)
                   for i in range(start, start + count)]
        return {(m.partition, m.offset) for m in (f.result(30) for f in futures)}


def member(cluster: LocalCluster, group: str, **kw: Any) -> Consumer:
    return Consumer(cluster.bootstrap, group_id=group, **{**GROUP_OPTS, **kw})


def seen(runners: list[Runner]) -> set[tuple[int, int]]:
    return {(r.partition, r.offset) for runner in runners for r in list(runner.records)}


def test_three_consumers_split_six_partitions(cluster: LocalCluster) -> None:
    create(cluster, "split", 6)
    expected = produce(cluster, "split", 0, 600)
    runners = [Runner(member(cluster, "split-g"), ["split"], commit=True) for _ in range(3)]
    for r in runners:
        r.start()
    try:
        wait_until(lambda: all(len(r.assignment) == 2 for r in runners), 60,
                   "three members with two partitions each")
        owned = [r.assignment for r in runners]
        assert set().union(*owned) == {TopicPartition("split", p) for p in range(6)}
        wait_until(lambda: seen(runners) >= expected, 60, "all 600 records")
        keys = [(r.partition, r.offset) for runner in runners for r in runner.records]
        assert len(keys) == len(set(keys)) == 600  # stable group: nobody read twice
    finally:
        for r in runners:
            r.finish()


def test_sigkilled_member_loses_its_partitions_to_the_others_without_loss(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    create(cluster, "kill", 6)
    expected = produce(cluster, "kill", 0, 300)
    out = tmp_path / "member.txt"
    proc = subprocess.Popen([sys.executable, "-m", "tests.clients.consumer.group_member_process",
                             cluster.bootstrap, "kill-g", "kill", str(out), str(SESSION_MS)],
                            cwd=Path(__file__).parents[3])  # fmt: skip
    runners: list[Runner] = []
    try:
        wait_until(lambda: out.exists() and "assigned 0,1,2,3,4,5" in out.read_text(), 60,
                   "the process member owns all partitions")
        runners = [Runner(member(cluster, "kill-g"), ["kill"], commit=True) for _ in range(2)]
        for r in runners:
            r.start()
        wait_until(lambda: all(len(r.assignment) == 2 for r in runners)
                   and out.read_text().splitlines()[-1].count(",") == 1
                   if out.read_text().strip() else False, 60, "a three-way split")
        expected |= produce(cluster, "kill", 300, 300)
        wait_until(lambda: _process_records(out) | seen(runners) >= expected, 60,
                   "the first 600 records consumed by someone")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        expected |= produce(cluster, "kill", 600, 300)
        wait_until(lambda: set().union(*(r.assignment for r in runners))
                   == {TopicPartition("kill", p) for p in range(6)}, 60,
                   "the survivors own all six partitions after the session timeout")
        wait_until(lambda: _process_records(out) | seen(runners) >= expected, 60,
                   "every record consumed at least once")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for r in runners:
            r.finish()


def _process_records(path: Path) -> set[tuple[int, int]]:
    out = set()
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            out.add((int(parts[0]), int(parts[1])))
    return out


def poll_into(c: Consumer, got: list[tuple[int, int]]) -> list[tuple[int, int]]:
    got.extend((r.partition, r.offset) for rs in c.poll(200).values() for r in rs)
    return got


def test_restarted_consumer_resumes_from_committed_offsets(cluster: LocalCluster) -> None:
    create(cluster, "resume", 2)
    first = produce(cluster, "resume", 0, 50)
    with member(cluster, "resume-g") as c:
        c.subscribe(["resume"])
        got: list[tuple[int, int]] = []
        wait_until(lambda: set(poll_into(c, got)) >= first, 60, "first 50")
        c.commit()
    second = produce(cluster, "resume", 50, 50)
    with member(cluster, "resume-g") as c:
        c.subscribe(["resume"])
        again: list[tuple[int, int]] = []
        wait_until(lambda: set(poll_into(c, again)) >= second, 60, "next 50")
        assert set(again) == second and len(again) == 50  # nothing committed came back
        assert c.committed([TopicPartition("resume", 0)])[TopicPartition("resume", 0)] \
            is not None


def test_offsets_topic_is_compacted_to_the_latest_commit_per_partition(
    cluster: LocalCluster,
) -> None:
    create(cluster, "compact", 2)
    group = "compact-g"
    tps = [TopicPartition("compact", 0), TopicPartition("compact", 1)]
    commits = 300
    with member(cluster, group) as c:
        c.assign(tps)
        for i in range(1, commits + 1):
            c.commit({tps[0]: i, tps[1]: 2 * i})
    index = partition_for(group, OFFSETS_PARTITIONS)
    leader = cluster.wait_partition("__consumer_offsets", index, lambda p: p["leader"] >= 0,
                                    "an offsets partition leader")["leader"]
    directory = Path(cluster.state.brokers[str(leader)].data_dir) / \
        f"__consumer_offsets-{index}"

    def log_bytes() -> int:
        return sum(f.stat().st_size for f in directory.glob("*.log"))

    def offsets_in_compacted_segments() -> dict[tuple[str, int], list[int]]:
        latest: dict[tuple[str, int], list[int]] = {}
        segments = sorted(directory.glob("*.log"))
        for segment in segments[:-1]:  # rolled segments: one record per key once cleaned
            data = segment.read_bytes()
            for pos, _ in iter_batches(data):
                for record in decode_batch(data, pos):
                    key = decode_key(bytes(record.key or b""))
                    if isinstance(key, OffsetCommitKey) and key.group_id == group:
                        offset = decode_offset_commit_value(bytes(record.value or b"")).offset
                        latest.setdefault((key.topic, key.partition), []).append(offset)
        return latest

    # The cleaner works segment by segment: wait until it has caught up with every
    # rolled segment (a segment rolled after the last pass is not cleaned yet).
    wait_until(lambda: log_bytes() < 8 * 1024 and all(
        len(v) == 1 for v in offsets_in_compacted_segments().values()), 60,
        "the offsets partition compacted")
    latest = offsets_in_compacted_segments()
    assert all(len(v) == 1 for v in latest.values()), latest
    with Admin(cluster.bootstrap) as admin:
        offsets = admin.list_group_offsets(group)
    assert {tp: o.offset for tp, o in offsets.items()} == {tps[0]: commits, tps[1]: 2 * commits}


def test_cli_lists_and_describes_groups(cluster: LocalCluster,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    create(cluster, "cli", 2)
    produce(cluster, "cli", 0, 20)
    runner = Runner(member(cluster, "cli-g"), ["cli"], commit=True)
    runner.start()
    try:
        wait_until(lambda: len(runner.records) == 20, 60, "20 records")
        produce(cluster, "cli", 20, 10)  # lag the member may or may not have caught up on
        wait_until(lambda: len(runner.records) == 30, 60, "30 records")
        assert cli_main(["groups", "list", "--bootstrap-server", cluster.bootstrap]) == 0
        listing = capsys.readouterr().out
        assert any(line.split()[:2] == ["cli-g", "Stable"] for line in listing.splitlines())
        wait_until(lambda: _committed_total(cluster, "cli-g") == 30, 30, "commits of 30")
        assert cli_main(["groups", "describe", "cli-g",
                         "--bootstrap-server", cluster.bootstrap]) == 0
        text = capsys.readouterr().out
        assert "State: Stable" in text and "Protocol: range" in text and "Members: 1" in text
        rows = [line.split() for line in text.splitlines() if line.startswith("cli-g ")]
        assert len(rows) == 2
        assert sum(int(r[3]) for r in rows) == 30 and all(r[5] == "0" for r in rows)
        coordinator = runner.consumer._coordinator
        assert coordinator is not None
        assert {r[6] for r in rows} == {coordinator.generation[1]}  # the member's id
    finally:
        runner.finish()
    assert cli_main(["groups", "describe", "cli-g", "--bootstrap-server",
                     cluster.bootstrap]) == 0
    assert "State: Empty" in capsys.readouterr().out


def _committed_total(cluster: LocalCluster, group: str) -> int:
    with Admin(cluster.bootstrap) as admin:
        return sum(max(0, o.offset) for o in admin.list_group_offsets(group).values())


def test_killing_the_coordinator_moves_the_group_with_offsets_intact(
    cluster: LocalCluster,
) -> None:
    create(cluster, "move", 3)
    first = produce(cluster, "move", 0, 90)
    runner = Runner(member(cluster, "move-g"), ["move"], commit=True)
    runner.start()
    killed = None
    try:
        wait_until(lambda: seen([runner]) >= first, 60, "first 90 records")
        wait_until(lambda: _committed_total(cluster, "move-g") == 90, 30, "commits of 90")
        with Admin(cluster.bootstrap) as admin:
            before = admin.list_group_offsets("move-g")
            killed = str(admin.describe_groups(["move-g"])["move-g"].coordinator)
        cluster.kill(killed)
        second = produce(cluster, "move", 90, 90)
        wait_until(lambda: seen([runner]) >= first | second, 60,
                   "records after the coordinator moved")
        with Admin(cluster.bootstrap) as admin:
            wait_until(lambda: str(admin.describe_groups(["move-g"])["move-g"].coordinator)
                       != killed, 60, "a new coordinator")
            after = admin.list_group_offsets("move-g")
        assert all(after[tp].offset >= o.offset for tp, o in before.items())
        wait_until(lambda: _committed_total(cluster, "move-g") == 180, 30, "commits of 180")
    finally:
        runner.finish()
        if killed is not None:
            cluster.restart(killed)
