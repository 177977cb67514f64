"""Transactions through Spark: the source's ``kafka.isolation.level`` and the
transactional sink (:mod:`clients.spark.transactional_sink`).

One single-broker cluster per module (transactions need only the coordinator's
``__transaction_state``, capped at the live brokers).  Topic ``txsrc`` (2 partitions)
holds committed transactions, an aborted one and, during the reads, an open one;
``txin`` -> ``txout`` is the sink's Spark-to-Spark pipeline; ``pipe-a`` -> ``pipe-b``
the same with the driver process (tests/clients/spark/txpipe_driver.py) SIGKILLed at
the sink's two failure points (slow: two more Spark JVMs).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import psutil
import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.errors import InvalidConfigError
from clients.protocol.topics import TopicPartition
from clients.spark.options import parse_source_options
from clients.spark.transactional_sink import TransactionalSink
from clients.spark.verify.pipeline import PIPELINE_VIOLATIONS, verify_pipeline_topics
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.clients.spark.txpipe_driver import f, start_pipeline, transform

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

COMMITTED = [f"c-{i}".encode() for i in range(15)]
ABORTED = [f"a-{i}".encode() for i in range(6)]
OPEN = [f"o-{i}".encode() for i in range(4)]
# a range planned past the last stable offset would stall a read_committed reader: fail
# fast instead of waiting out the default two minutes
READ_TIMEOUT_MS = "15000"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("spark-txn"),
        1,
        {"transaction_state_log_num_partitions": 1, "offsets_topic_num_partitions": 1},
    ) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics(
                [NewTopic("txsrc", 2, 1), NewTopic("txin", 2, 1), NewTopic("txout", 2, 1)]
            )
        yield c


@pytest.fixture(scope="module")
def txsrc(cluster: LocalCluster) -> Iterator[None]:
    """``txsrc``: commit c-0..9, abort a-*, commit c-10..14, then leave o-* open for the
    module's reads (aborted at the end)."""
    with Producer(
        cluster.bootstrap, transactional_id="spark-src", transaction_timeout_ms=600_000
    ) as producer:  # o-* stays open all along
        producer.init_transactions()
        for values, commit in (
            (COMMITTED[:10], True),
            (ABORTED, False),
            (COMMITTED[10:], True),
            (OPEN, None),
        ):
            producer.begin_transaction()
            for i, value in enumerate(values):
                producer.send("txsrc", value, partition=i % 2)
            producer.flush()
            if commit is True:
                producer.commit_transaction()
            elif commit is False:
                producer.abort_transaction()
        yield
        producer.abort_transaction()


def read_batch(spark: SparkSession, bootstrap: str, level: str | None) -> list[bytes]:
    reader = (
        spark.read.format("minikafka")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", "txsrc")
        .option("readTimeoutMs", READ_TIMEOUT_MS)
    )
    if level is not None:
        reader = reader.option("kafka.isolation.level", level)
    return [r.value for r in reader.load().select("value").collect()]


def test_batch_read_committed_reads_exactly_the_committed_records(
    spark: SparkSession, cluster: LocalCluster, txsrc: None
) -> None:
    values = read_batch(spark, cluster.bootstrap, "read_committed")
    assert sorted(values) == sorted(COMMITTED)


def test_batch_read_uncommitted_sees_aborted_and_open_data_but_never_markers(
    spark: SparkSession, cluster: LocalCluster, txsrc: None
) -> None:
    values = read_batch(spark, cluster.bootstrap, None)  # Spark's default
    assert sorted(values) == sorted(COMMITTED + ABORTED + OPEN)


def test_streaming_read_committed_ends_at_the_last_stable_offset(
    spark: SparkSession, cluster: LocalCluster, txsrc: None, tmp_path: Path
) -> None:
    seen: list[bytes] = []

    def collect(batch: DataFrame, batch_id: int) -> None:
        seen.extend(r.value for r in batch.select("value").collect())

    stream = (
        spark.readStream.format("minikafka")
        .option("bootstrap.servers", cluster.bootstrap)
        .option("subscribe", "txsrc")
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .option("maxOffsetsPerTrigger", "7")
        .option("readTimeoutMs", READ_TIMEOUT_MS)
        .load()
    )
    query = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(seen) == sorted(COMMITTED)


def test_isolation_level_option() -> None:
    base = {"bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    assert parse_source_options(base, streaming=False).isolation_level == "read_uncommitted"
    for name in ("kafka.isolation.level", "Kafka.Isolation.Level", "isolation.level"):
        options = parse_source_options({**base, name: "READ_COMMITTED"}, streaming=True)
        assert options.isolation_level == "read_committed"
    with pytest.raises(InvalidConfigError, match=r"'kafka\.isolation\.level' must be"):
        parse_source_options({**base, "kafka.isolation.level": "serializable"}, streaming=False)


class CrashAfterKafkaCommit(Exception):
    pass


def test_transactional_sink_survives_a_crash_between_kafka_commit_and_checkpoint(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    inputs = [f"in-{i}".encode() for i in range(40)]
    with Producer(cluster.bootstrap, acks="all") as producer:
        for i, value in enumerate(inputs):
            producer.send("txin", value, key=value, partition=i % 2)
        producer.flush()
    checkpoint = str(tmp_path / "ckpt")

    def run(sink: TransactionalSink) -> Exception | None:
        stream = (
            spark.readStream.format("minikafka")
            .option("bootstrap.servers", cluster.bootstrap)
            .option("subscribe", "txin")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "10")
            .load()
        )
        query = (
            stream.select("key", "value")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        except StreamingQueryException as e:
            return e
        finally:
            sink.close()
        return query.exception()

    def crash_after_batch_1(batch_id: int) -> None:
        if batch_id == 1:
            raise CrashAfterKafkaCommit(f"injected after the Kafka commit of batch {batch_id}")

    first = TransactionalSink(
        cluster.bootstrap, "txout", "spark-sink", on_committed=crash_after_batch_1
    )
    error = run(first)
    assert error is not None and "CrashAfterKafkaCommit" in str(error)
    assert first.stats.batches_written == 2  # batches 0 and 1 are in Kafka
    assert not (Path(checkpoint) / "commits" / "1").exists()  # Spark never committed 1

    second = TransactionalSink(cluster.bootstrap, "txout", "spark-sink")
    assert run(second) is None
    assert second.stats.batches_skipped == 1  # batch 1 replayed by Spark, skipped
    assert second.stats.batches_written == 2
    assert Counter(committed_values(cluster.bootstrap, "txout", len(inputs))) == Counter(inputs)


def committed_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    """Everything ``topic`` holds to a read_committed reader (waits for ``expected``,
    then one more poll for extras)."""
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    out: list[bytes] = []
    with Consumer(
        bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)

        def drained() -> bool:
            for records in consumer.poll(200).values():
                out.extend(r.value for r in records)
            return all(consumer.position(tp) >= ends[tp] for tp in tps)

        wait_until(drained, 60, f"{topic} read to its last stable offsets", 0)
    assert len(out) >= expected
    return out


class ArrowBatch:
    """Stands in for a micro-batch DataFrame (the sink uses ``columns`` and ``toArrow``)."""

    def __init__(self, values: list[bytes]) -> None:
        self.table = pa.table({"value": pa.array(values, pa.binary())})
        self.columns = ["value"]

    def toArrow(self) -> pa.Table:  # Spark's name
        return self.table


def test_transactional_sink_aborts_a_crashed_runs_open_transaction(
    cluster: LocalCluster,
) -> None:
    """A run that died before its Kafka commit left batch 1's records in an open
    transaction; the next run's sink fences and aborts it, writes batch 1 itself."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic("txout2", 2, 1)])
    batch0, batch1 = [b"b0-0", b"b0-1"], [b"b1-0", b"b1-1", b"b1-2"]
    first = TransactionalSink(cluster.bootstrap, "txout2", "spark-sink-2")
    try:
        first(cast(DataFrame, ArrowBatch(batch0)), 0)
    finally:
        first.close()
    crashed = Producer(cluster.bootstrap, transactional_id="spark-sink-2")
    crashed.init_transactions()
    crashed.begin_transaction()
    for value in batch1:
        crashed.send("txout2", b"ghost-" + value, partition=0)
    crashed.flush()
    crashed.close()  # no commit, no abort: the transaction stays open
    second = TransactionalSink(cluster.bootstrap, "txout2", "spark-sink-2")
    try:
        second(cast(DataFrame, ArrowBatch(batch0)), 0)  # Spark replays batch 0: skipped
        second(cast(DataFrame, ArrowBatch(batch1)), 1)
    finally:
        second.close()
    assert (second.stats.batches_skipped, second.stats.batches_written) == (1, 1)
    assert Counter(committed_values(cluster.bootstrap, "txout2", 5)) == Counter(batch0 + batch1)


# ---------------------------------------------------------------- Spark to Spark, killed
PIPE_TXN_ID = "txpipe-spark"
ROOT = Path(__file__).resolve().parents[3]


def kill_tree(pid: int) -> None:
    """SIGKILL a driver process and everything it started (its JVM, Python workers)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        parent = psutil.Process(pid)
        for proc in [*parent.children(recursive=True), parent]:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


def run_driver_until_killed(bootstrap: str, checkpoint: Path, stop_at: str, batch: int,
                            tmp_path: Path) -> None:  # fmt: skip
    """Run tests/clients/spark/txpipe_driver.py in its own process until it waits in
    the sink's ``stop_at`` hook of ``batch``, then SIGKILL it (and its JVM)."""
    marker, log = tmp_path / f"at-{stop_at}-{batch}", tmp_path / f"driver-{stop_at}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.clients.spark.txpipe_driver", bootstrap, "pipe-a",
             "pipe-b", str(checkpoint), PIPE_TXN_ID, "--stop-at", stop_at, "--batch",
             str(batch), "--marker", str(marker)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_until(lambda: marker.exists() or proc.poll() is not None, 300,
                       f"the driver at {stop_at} of batch {batch}", 0.2)  # fmt: skip
            assert marker.exists(), (
                f"driver exited {proc.returncode} before batch {batch}: "
                + log.read_text()[-2000:])
        finally:
            kill_tree(proc.pid)
            proc.wait(30)


def topic_records(bootstrap: str, topic: str, level: str) -> Counter[tuple[bytes, bytes]]:
    """(key, value) of every record ``topic`` shows a ``level`` reader, up to its ends."""
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    out: Counter[tuple[bytes, bytes]] = Counter()
    with Consumer(bootstrap, isolation_level=level, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)

        def drained() -> bool:
            for records in consumer.poll(200).values():
                out.update((r.key, r.value) for r in records)
            return all(consumer.position(tp) >= ends[tp] for tp in tps)

        wait_until(drained, 60, f"{topic} read to its ends ({level})", 0)
    return out


@pytest.mark.slow
def test_spark_to_spark_pipeline_is_exactly_once_across_driver_kills(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    """A (committed and aborted transactions) -> read_committed -> f -> B by the
    transactional sink.  The driver is SIGKILLed with batch 1's transaction open, then
    (next run) after batch 3's Kafka commit and before Spark's ``commits/3``; a last run
    from the same checkpoint finishes.  B (read_committed) = f(committed A), once each:
    verify's pipeline check (:mod:`clients.spark.verify.pipeline`) and the (key, value)
    pairs."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic("pipe-a", 2, 1), NewTopic("pipe-b", 2, 1)])
    committed: list[bytes] = []
    with Producer(cluster.bootstrap, transactional_id="pipe-a-writer") as producer:
        producer.init_transactions()
        for t in range(11):
            values = [f"a-{t}-{i}".encode() for i in range(10)]
            producer.begin_transaction()
            for i, value in enumerate(values):
                producer.send("pipe-a", value, partition=i % 2)
            if t % 4 == 1:  # transactions 1, 5, 9 abort
                producer.abort_transaction()
            else:
                producer.commit_transaction()
                committed.extend(values)
    checkpoint = tmp_path / "ckpt"
    run_driver_until_killed(cluster.bootstrap, checkpoint, "before-commit", 1, tmp_path)
    assert (checkpoint / "offsets" / "1").exists()
    assert not (checkpoint / "commits" / "1").exists()
    run_driver_until_killed(cluster.bootstrap, checkpoint, "after-commit", 3, tmp_path)
    assert (checkpoint / "offsets" / "3").exists()
    assert not (checkpoint / "commits" / "3").exists()

    sink = TransactionalSink(cluster.bootstrap, "pipe-b", PIPE_TXN_ID)
    try:
        query = start_pipeline(spark, cluster.bootstrap, "pipe-a", str(checkpoint), sink)
        try:
            assert query.awaitTermination(300), "the last run did not finish in 300 s"
        finally:
            query.stop()  # never left running into the next test or the teardown
        assert query.exception() is None
    finally:
        sink.close()
    counts, examples = verify_pipeline_topics(
        spark, cluster.bootstrap, "pipe-a", "pipe-b", lambda a: transform(a).select("value"))
    assert {name: counts[name] for name in PIPELINE_VIOLATIONS if name in counts} == {
        name: 0 for name in PIPELINE_VIOLATIONS if name in counts}, examples
    assert counts["pipeline_expected"] == counts["pipeline_records"] == len(committed)
    expected = Counter((value, f(value)) for value in committed)  # and the keys
    assert topic_records(cluster.bootstrap, "pipe-b", "read_committed") == expected
    assert sink.stats.batches_skipped == 1  # batch 3: in Kafka, replayed by Spark
    assert sink.stats.batches_written >= 1
    # the first kill left batch 1's rows in B's log, aborted by the second run's fencing
    ghosts = topic_records(cluster.bootstrap, "pipe-b", "read_uncommitted") - expected
    assert ghosts and set(ghosts) <= set(expected)
