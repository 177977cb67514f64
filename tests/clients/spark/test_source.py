"""The ``minikafka`` data source's batch reads against a real two-broker cluster.

One cluster per module (a controller and two brokers started here, by PID): the
controller's ``broker_session_timeout_ms`` and the brokers' ``replica_lag_time_max_ms``
are long, so a paused follower stays in the ISR and holds the high watermark below the
leader's log end offset for as long as the test needs.  Topics ``plain`` (3 partitions,
RF 1) and ``hw`` (1 partition, RF 2).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from pyspark.sql import SparkSession

from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.errors import InvalidConfigError
from clients.protocol.topics import TopicPartition
from clients.spark.options import parse_source_options
from clients.spark.ranges import OffsetPlanner, cap_offsets, split_range
from clients.spark.source import SCHEMA
from clients.types import NewTopic
from tests.broker.controller.processes import ControllerProcess
from tests.broker.processes import BrokerProcess, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

LONG_MS = 600_000
Row = tuple[bytes | None, bytes | None, str, int, int, int, tuple[tuple[str, bytes | None], ...]]


class MiniCluster:
    def __init__(self, root: Path) -> None:
        self.controller = ControllerProcess(root / "controller",
                                            overrides={"broker_session_timeout_ms": LONG_MS})
        self.brokers: dict[int, BrokerProcess] = {}
        self.root = root

    def start(self) -> MiniCluster:
        self.controller.start()
        for node in (1, 2):
            self.brokers[node] = BrokerProcess(
                self.root / f"broker-{node}", node_id=node,
                overrides={"replica_lag_time_max_ms": LONG_MS},
                extra_args=["--controller", f"127.0.0.1:{self.controller.port}"],
            ).start()

        def registered() -> bool:
            with Admin(self.bootstrap) as admin:
                return len(admin.describe_cluster().brokers) == 2

        wait_until(registered, 60, "both brokers registered with the controller", 0.2)
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def signal_broker(self, node: int, sig: signal.Signals) -> None:
        proc = psutil.Process(self.brokers[node].pid)
        for p in [proc, *proc.children(recursive=True)]:
            os.kill(p.pid, sig)

    def close(self) -> None:
        for node in self.brokers:
            with contextlib.suppress(psutil.NoSuchProcess):
                self.signal_broker(node, signal.SIGCONT)
        for b in self.brokers.values():
            b.kill()
        self.controller.kill()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(tmp_path_factory.mktemp("spark-source"))
    try:
        c.start()
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic("plain", 3, 1), NewTopic("hw", 1, 2)])
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def produced(cluster: MiniCluster) -> dict[TopicPartition, list[Row]]:
    """1,500 records in ``plain`` with null keys/values and headers, as acknowledged."""
    out: dict[TopicPartition, list[Row]] = {}
    with Producer(cluster.bootstrap, acks="all", linger_ms=20,
                  enable_idempotence=False) as producer:
        futures = []
        for i in range(1500):
            key = None if i % 7 == 0 else f"k{i}".encode()
            value = None if i % 11 == 0 else f"value-{i}".encode() * (1 + i % 3)
            headers = (("i", str(i).encode()), ("n", None)) if i % 5 == 0 else ()
            futures.append((key, value, headers,
                            producer.send("plain", value, key, headers, partition=i % 3)))
        producer.flush()
        for key, value, headers, future in futures:
            md = future.result(60)
            row = (key, value, "plain", md.partition, md.offset, md.timestamp, headers)
            out.setdefault(TopicPartition("plain", md.partition), []).append(row)
    return out


def load(spark: SparkSession, bootstrap: str, **options: str):  # type: ignore[no-untyped-def]
    """A batch read with every column (``includeHeaders=true``: these tests check headers)."""
    reader = (spark.read.format("minikafka").option("bootstrap.servers", bootstrap)
              .option("includeHeaders", "true"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def rows_of(df) -> list[Row]:  # type: ignore[no-untyped-def]
    """Rows as produced-record tuples; the timestamp as epoch ms computed by Spark."""
    out: list[Row] = []
    for r in df.selectExpr("*", "unix_millis(timestamp) AS ts_ms").collect():
        assert r.timestampType == 0  # CreateTime
        out.append((r.key, r.value, r.topic, r.partition, r.offset, r.ts_ms,
                    tuple((h.key, h.value) for h in r.headers)))
    return sorted(out, key=lambda row: (row[2], row[3], row[4]))


def expected(produced: dict[TopicPartition, list[Row]],
             ranges: dict[int, tuple[int, int]] | None = None) -> list[Row]:
    out: list[Row] = []
    for tp, rows in sorted(produced.items()):
        lo, hi = (ranges or {}).get(tp.partition, (0, 1 << 62))
        out.extend(r for r in rows if lo <= r[4] < hi)
    return sorted(out, key=lambda row: (row[2], row[3], row[4]))


def test_batch_read_returns_every_record_with_spark_kafka_columns(
        spark: SparkSession, cluster: MiniCluster,
        produced: dict[TopicPartition, list[Row]]) -> None:
    df = load(spark, cluster.bootstrap, subscribe="plain")
    assert df.schema == SCHEMA
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert df.rdd.getNumPartitions() == 3  # one input partition per topic partition
    got = rows_of(df)
    assert len(got) == 1500
    assert got == expected(produced)  # keys, values, headers, timestamps (ms) included


def test_json_starting_and_ending_offsets_cut_inside_batches(
        spark: SparkSession, cluster: MiniCluster,
        produced: dict[TopicPartition, list[Row]]) -> None:
    # linger batches hold many records, so a fetch from offset 5 returns records past 17:
    # the reader must trim to the range exactly
    df = load(spark, cluster.bootstrap, subscribe="plain",
              startingOffsets='{"plain": {"0": 5, "1": -2, "2": 499}}',
              endingOffsets='{"plain": {"0": 17, "1": -1, "2": 500}}')
    assert rows_of(df) == expected(produced, {0: (5, 17), 1: (0, 500), 2: (499, 500)})
    assigned = load(spark, cluster.bootstrap, assign='{"plain": [1]}',
                    startingOffsets='{"plain": {"1": 250}}')
    assert rows_of(assigned) == expected(produced, {0: (0, 0), 1: (250, 500), 2: (0, 0)})


def test_large_ranges_split_into_input_partitions_each_record_once(
        spark: SparkSession, cluster: MiniCluster,
        produced: dict[TopicPartition, list[Row]]) -> None:
    df = load(spark, cluster.bootstrap, subscribe="plain", maxRecordsPerPartition="64")
    assert df.rdd.getNumPartitions() == 3 * 8  # ceil(500 / 64) per partition
    got = rows_of(df)
    assert len({(r[3], r[4]) for r in got}) == len(got) == 1500
    assert got == expected(produced)


def test_batch_reads_only_below_the_high_watermark(
        spark: SparkSession, cluster: MiniCluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        info = admin.describe_topics(["hw"])["hw"].partitions[0]
    follower = next(r for r in info.replicas if r != info.leader)
    leader = cluster.brokers[info.leader].bootstrap  # a paused bootstrap node would stall
    with Producer(cluster.bootstrap, acks="all", enable_idempotence=False) as producer:
        for i in range(100):
            producer.send("hw", f"committed-{i}".encode(), partition=0)
        producer.flush()
    cluster.signal_broker(follower, signal.SIGSTOP)
    try:
        with Producer(leader, acks=1, enable_idempotence=False) as producer:
            futures = [producer.send("hw", f"above-hw-{i}".encode(), partition=0)
                       for i in range(50)]
            offsets = [f.result(60).offset for f in futures]
        # the leader appended them (LEO 150) but the paused in-ISR follower holds HW at 100
        assert offsets == list(range(100, 150))
        planner = OffsetPlanner(parse_source_options(
            {"bootstrap.servers": leader, "subscribe": "hw"}, streaming=False))
        try:
            assert planner.list_offsets([TopicPartition("hw", 0)], -1) == {
                TopicPartition("hw", 0): 100}
        finally:
            planner.close()
        values = [r.value for r in load(spark, leader, subscribe="hw")
                  .orderBy("offset").collect()]
        assert values == [f"committed-{i}".encode() for i in range(100)]
        with pytest.raises(Exception, match=r"offset 150 of hw-0 is outside \[0, 100\]"):
            load(spark, leader, subscribe="hw", endingOffsets='{"hw": {"0": 150}}').collect()
    finally:
        cluster.signal_broker(follower, signal.SIGCONT)

    def caught_up() -> bool:
        return load(spark, leader, subscribe="hw").count() == 150

    wait_until(caught_up, 60, "HW reaches 150 once the follower resumes", 0.5)


@pytest.mark.parametrize(("options", "message"), [
    # errors found against the cluster's metadata and offsets, seen through Spark
    ({"subscribe": "nosuch"}, "unknown topic 'nosuch'"),
    ({"assign": '{"plain": [7]}'}, "assigned partitions do not exist: plain-7"),
    ({"subscribe": "plain", "startingOffsets": '{"plain": {"0": 1}}'}, "missing: plain-1"),
    ({"subscribe": "plain", "startingOffsets": '{"plain": {"0": 9999, "1": 0, "2": 0}}'},
     "offset 9999 of plain-0 is outside"),
    ({"subscribe": "plain", "startingOffset": "earliest"}, "unknown minikafka option"),
])
def test_bad_options_fail_with_precise_errors(
        spark: SparkSession, cluster: MiniCluster, options: dict[str, str], message: str) -> None:
    with pytest.raises(Exception, match=message):
        load(spark, cluster.bootstrap, **options).collect()


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"subscribe": "p", "assign": '{"p": [0]}'}, False, "exactly one of"),
    ({}, True, "exactly one of"),
    ({"assign": '{"p": [0'}, False, "option 'assign' is not valid JSON"),
    ({"assign": '{"p": [-1]}'}, False, "partition numbers >= 0"),
    ({"subscribe": "p,"}, False, "comma list of topic names"),
    ({"subscribe": "p", "startingOffsets": "latest"}, False, "not allowed for batch"),
    ({"subscribe": "p", "endingOffsets": '{"p": {"0": -2}}'}, False,
     r"'earliest' \(or -2\) is not allowed"),
    ({"subscribe": "p", "startingOffsets": '{"q": {"0": 1}}'}, True, "not subscribed: \\['q'\\]"),
    ({"subscribe": "p", "startingOffsets": '{"p": {"x": 1}}'}, True, "partition 'x'"),
    ({"subscribe": "p", "startingOffsets": '{"p": {"0": -3}}'}, True, "offset -3 of p-0"),
    ({"subscribe": "p", "startingOffsets": "first"}, True, "'earliest', 'latest' or a JSON"),
    ({"assign": '{"p": [0, 1]}', "startingOffsets": '{"p": {"0": 1}}'}, True, "missing: p-1"),
    ({"subscribe": "p", "maxRecordsPerPartition": "0"}, False, "must be >= 1"),
    ({"subscribe": "p", "maxOffsetsPerTrigger": "ten"}, True, "must be an integer"),
    ({"subscribe": "p", "maxOffsetsPerTrigger": "10"}, False, "streaming reads only"),
    ({"subscribe": "p", "endingOffsets": "latest"}, True, "batch reads only"),
])
def test_option_errors(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        parse_source_options({"bootstrap.servers": "h:1", **options}, streaming=streaming)


def test_option_parsing_without_a_cluster() -> None:
    opts = parse_source_options({"KAFKA.bootstrap.servers": "h:1", "Subscribe": "a, b,a",
                                 "STARTINGOFFSETS": "latest"}, streaming=True)
    assert (opts.bootstrap_servers, opts.subscribe, opts.starting_offsets) == ("h:1", ("a", "b"),
                                                                               -1)
    with pytest.raises(InvalidConfigError, match=r"'bootstrap\.servers' is required"):
        parse_source_options({"subscribe": "a"}, streaming=False)


def test_split_and_rate_limit_arithmetic() -> None:
    tp = TopicPartition("t", 0)
    pieces = split_range(tp, 10, 35, 10)
    assert [(r.from_offset, r.until_offset) for r in pieces] == [(10, 20), (20, 30), (30, 35)]
    assert split_range(tp, 7, 7, 10) == []
    a, b, c = (TopicPartition("t", i) for i in range(3))
    start = {a: 0, b: 100, c: 5}
    end = {a: 300, b: 200, c: 5}  # backlog 300 + 100 + 0
    capped = cap_offsets(start, end, 40)
    assert capped == {a: 30, b: 110, c: 5}
    assert cap_offsets(start, end, 1000) == end
    odd = cap_offsets({a: 0, b: 0}, {a: 1, b: 1}, 1)  # one record: exactly one partition moves
    assert sum(odd.values()) == 1
