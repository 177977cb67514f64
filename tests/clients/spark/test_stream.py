"""Streaming reads of the ``minikafka`` source into a Parquet sink, restarted from their
checkpoint after more records, a broker kill and a simulated crash mid-batch.

One two-broker cluster (``LocalCluster``, RF 2) per module; topic ``events`` has 2
partitions.  The sink is read back with ``spark.read.parquet`` (which honours
``_spark_metadata``) and compared with what the producer had acknowledged:
every (partition, offset) exactly once with the produced value.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.topics import TopicPartition
from clients.spark.stream_to_parquet import read_sink, stream_to_parquet
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

Acked = dict[tuple[int, int], bytes | None]  # (partition, offset) -> value


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("spark-stream"), 2,
                      {"replica_lag_time_max_ms": 1500}) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic("events", 2, 2), NewTopic("paced", 2, 1)])
        yield c


def produce(bootstrap: str, topic: str, tag: str, count: int) -> Acked:
    with Producer(bootstrap, acks="all", linger_ms=10, enable_idempotence=False,
                  request_timeout_ms=10_000) as producer:
        futures = [(f"{tag}-{i}".encode(),
                    producer.send(topic, f"{tag}-{i}".encode(), partition=i % 2))
                   for i in range(count)]
        producer.flush()
        return {(md.partition, md.offset): value
                for value, md in ((v, f.result(60)) for v, f in futures)}


def sink_rows(spark: SparkSession, sink: Path) -> list[tuple[int, int, bytes]]:
    return sorted((r.partition, r.offset, r.value)
                  for r in read_sink(spark, str(sink)).select("partition", "offset", "value")
                  .collect())


def topic_contents(bootstrap: str, topic: str) -> Acked:
    """Every record below the high watermark, read with the plain Consumer (an oracle
    independent of the Spark source)."""
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    out: Acked = {}
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        consumer.seek_to_end(tps)
        ends = {tp: consumer.position(tp, 30_000) for tp in tps}
        consumer.seek_to_beginning(tps)

        def done() -> bool:
            for tp, records in consumer.poll(timeout_ms=200).items():
                out.update(((tp.partition, r.offset), r.value) for r in records
                           if r.offset < ends[tp])
            return all(consumer.position(tp) >= ends[tp] for tp in tps)

        wait_until(done, 60, f"{topic} read up to its high watermarks", 0)
    return out


def assert_exactly_once(spark: SparkSession, sink: Path, acked: Acked, topic: str,
                        bootstrap: str) -> None:
    rows = sink_rows(spark, sink)
    keys = [(p, o) for p, o, _ in rows]
    assert len(keys) == len(set(keys)), "duplicated records in the sink"
    in_topic = topic_contents(bootstrap, topic)
    assert acked.items() <= in_topic.items()  # (idempotence off: a retry may add copies)
    assert {(p, o): v for p, o, v in rows} == in_topic  # nothing lost, nothing extra


def test_available_now_reads_everything_in_capped_micro_batches(
        spark: SparkSession, cluster: LocalCluster, tmp_path: Path) -> None:
    acked = produce(cluster.bootstrap, "paced", "p", 600)
    run = stream_to_parquet(spark, cluster.bootstrap, "paced", str(tmp_path / "sink"),
                            str(tmp_path / "ckpt"), max_offsets_per_trigger=250)
    assert run.batches == 3  # 250 + 250 + 100
    assert run.input_rows == 600
    assert run.last_offsets == {"paced": {"0": 300, "1": 300}}
    assert_exactly_once(spark, tmp_path / "sink", acked, "paced", cluster.bootstrap)


def test_restarted_query_neither_duplicates_nor_skips(
        spark: SparkSession, cluster: LocalCluster, tmp_path: Path) -> None:
    sink, ckpt = tmp_path / "sink", tmp_path / "ckpt"

    def run() -> None:
        stream_to_parquet(spark, cluster.bootstrap, "events", str(sink), str(ckpt),
                          max_offsets_per_trigger=400)

    acked = produce(cluster.bootstrap, "events", "a", 300)
    run()
    assert_exactly_once(spark, sink, acked, "events", cluster.bootstrap)

    # more records, then the leader of partition 0 dies; more records on the new leader
    acked |= produce(cluster.bootstrap, "events", "b", 300)
    with Admin(cluster.bootstrap) as admin:
        leader = admin.describe_topics(["events"])["events"].partitions[0].leader
    cluster.kill(str(leader))
    acked |= produce(cluster.bootstrap, "events", "c", 300)
    run()  # with one broker down
    assert_exactly_once(spark, sink, acked, "events", cluster.bootstrap)

    # a crash after batch N's offsets were logged but before the sink committed it:
    # drop the last commit marker and the sink's metadata entry for N (its files stay
    # behind as orphans); the restart re-runs batch N with the same offsets
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    planned = (ckpt / "offsets" / str(last)).read_text()
    for log in (ckpt / "commits", sink / "_spark_metadata"):
        (log / str(last)).unlink()
        (log / f".{last}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the entry
    cluster.restart(str(leader))
    acked |= produce(cluster.bootstrap, "events", "d", 100)
    run()
    assert (ckpt / "offsets" / str(last)).read_text() == planned  # same range re-read
    assert (ckpt / "commits" / str(last)).exists()
    assert_exactly_once(spark, sink, acked, "events", cluster.bootstrap)
    on_disk = pq.ParquetDataset(sorted(str(f) for f in sink.glob("*.parquet"))).read()
    assert on_disk.num_rows > len(acked)  # batch N's orphan files are there, and ignored
    end = json.loads((ckpt / "offsets" / str(max(
        int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdigit()))
    ).read_text().splitlines()[-1])
    highest = {str(p): max(o for q, o in acked if q == p) + 1 for p in (0, 1)}
    assert {p: int(o) for p, o in end["events"].items()} == {p: int(o) for p, o in
                                                             highest.items()}
