"""The ``minikafka`` sink (:mod:`clients.spark.sink`): ``df.write`` / ``df.writeStream``
with Spark's Kafka sink columns, options and errors, and a ``format("kafka")`` job
ported by renaming the format.

One single-broker cluster per module; each test writes its own topics (3 partitions).
The oracle is the topic read back with our plain ``Consumer`` (or, for the ported job,
with the job's own read).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.protocol.errors import InvalidConfigError
from clients.protocol.topics import TopicPartition
from clients.spark.sink.options import parse_sink_options, sink_columns
from clients.types import ConsumerRecord, NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

PARTITIONS = 3
ROWS_SCHEMA = ("key string, value binary, partition int, "
               "headers array<struct<key:string,value:binary>>")  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("spark-sink"), 1,
                      {"offsets_topic_num_partitions": 1}) as c:  # fmt: skip
        yield c


def new_topics(bootstrap: str, *names: str) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topics([NewTopic(name, PARTITIONS, 1) for name in names])


def read_topic(bootstrap: str, topic: str, expected: int) -> list[ConsumerRecord]:
    """Every record of ``topic`` (waits until ``expected`` are there, then reads to the
    high watermarks, so extra records are seen too)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    out: list[ConsumerRecord] = []
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)

        def drained() -> bool:
            for records in consumer.poll(200).values():
                out.extend(records)
            ends = consumer.end_offsets(tps)
            return len(out) >= expected and all(consumer.position(tp) >= ends[tp] for tp in tps)

        wait_until(drained, 60, f"{topic}: {expected} records read", 0)
    return out


# ---------------------------------------------------------------- options and columns
def test_options_as_spark_kafka_sink() -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:1"}
    options = parse_sink_options({**base, "topic": "t", "includeHeaders": "true",
                                  "kafka.acks": "1", "kafka.linger.ms": "7",
                                  "kafka.enable.idempotence": "false",
                                  "checkpointLocation": "/tmp/x"})  # fmt: skip
    assert options.topic == "t"
    assert dict(options.producer_config) == {"acks": 1, "linger_ms": 7,
                                             "enable_idempotence": False}  # fmt: skip
    assert parse_sink_options({"bootstrap.servers": "h:1"}).topic is None
    refused = {
        "kafka.bootstrap.servers' must be specified": {"topic": "t"},
        "'key.serializer' is not supported": {**base, "kafka.key.serializer": "x"},
        "'value.serializer' is not supported": {**base, "kafka.value.serializer": "x"},
        "runs no transactions": {**base, "kafka.transactional.id": "x"},
        "not a setting of the minikafka producer": {**base, "kafka.partitioner.class": "x"},
        "unknown minikafka sink option 'topics'": {**base, "topics": "t"},
        "'kafka.linger.ms': bad value": {**base, "kafka.linger.ms": "soon"},
        "'includeHeaders': bad value": {**base, "includeHeaders": "yes"},
    }
    for message, given in refused.items():
        with pytest.raises(InvalidConfigError, match=message):
            parse_sink_options(given)


def test_columns_checked_with_spark_messages() -> None:
    assert sink_columns({"value": "binary", "topic": "string"}, None).topic
    assert not sink_columns({"value": "string", "topic": "int"}, "t").topic  # option wins
    refused = {
        "Required attribute 'value' not found": ({"key": "string"}, "t"),
        "topic option required when no 'topic' attribute is present": ({"value": "binary"},
                                                                        None),
        "value attribute unsupported type int": ({"value": "int"}, "t"),
        "key attribute unsupported type bigint": ({"value": "binary", "key": "bigint"}, "t"),
        "topic attribute unsupported type binary": ({"value": "binary", "topic": "binary"},
                                                    None),
        "partition attribute unsupported type bigint": ({"value": "binary",
                                                         "partition": "bigint"}, "t"),
        "headers attribute unsupported type array<string>": ({"value": "binary",
                                                              "headers": "array<string>"}, "t"),
    }  # fmt: skip
    for message, (types, topic) in refused.items():
        with pytest.raises(InvalidConfigError, match=message):
            sink_columns(types, topic)


# ---------------------------------------------------------------- batch writes
def test_batch_write_sends_key_value_headers_partition(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    new_topics(cluster.bootstrap, "sink-all")
    rows = [("k1", b"v1", 2, [("h", b"x"), ("n", None)]), (None, b"v2", None, []),
            ("k3", None, 0, None)]  # fmt: skip
    (spark.createDataFrame(rows, ROWS_SCHEMA).write.format("minikafka")
     .option("kafka.bootstrap.servers", cluster.bootstrap).option("topic", "sink-all")
     .mode("append").save())  # fmt: skip
    got = {r.value: r for r in read_topic(cluster.bootstrap, "sink-all", 3)}
    assert len(got) == 3
    assert (got[b"v1"].key, got[b"v1"].partition, got[b"v1"].headers) == (
        b"k1", 2, (("h", b"x"), ("n", None)))
    assert (got[b"v2"].key, got[b"v2"].headers) == (None, ())
    assert (got[None].key, got[None].partition) == (b"k3", 0)  # a null value (tombstone)


def test_topic_column_and_the_topic_option_overriding_it(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    new_topics(cluster.bootstrap, "sink-col-a", "sink-col-b", "sink-opt")
    df = spark.createDataFrame([("sink-col-a", "a1"), ("sink-col-b", "b1"),
                                ("sink-col-a", "a2")], "topic string, value string")  # fmt: skip
    writer = df.write.format("minikafka").option("kafka.bootstrap.servers", cluster.bootstrap)
    writer.mode("append").save()
    assert sorted(r.value for r in read_topic(cluster.bootstrap, "sink-col-a", 2)) == [
        b"a1", b"a2"]
    assert [r.value for r in read_topic(cluster.bootstrap, "sink-col-b", 1)] == [b"b1"]
    writer.option("topic", "sink-opt").mode("append").save()
    assert sorted(r.value for r in read_topic(cluster.bootstrap, "sink-opt", 3)) == [
        b"a1", b"a2", b"b1"]


def test_errors_as_spark(spark: SparkSession, cluster: LocalCluster) -> None:
    new_topics(cluster.bootstrap, "sink-err")
    df = spark.createDataFrame([("x", None)], "key string, topic string")

    def save(frame: DataFrame, mode: str = "append", **options: str) -> None:
        writer = frame.write.format("minikafka").option("kafka.bootstrap.servers",
                                                        cluster.bootstrap)  # fmt: skip
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.mode(mode).save()

    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        save(df, topic="sink-err")
    with pytest.raises(Exception, match="topic option required when no 'topic' attribute"):
        save(df.select(F.col("key").alias("value")))
    with pytest.raises(Exception, match="null topic present in the data"):
        save(df.select(F.col("key").alias("value"), "topic"))
    with pytest.raises(Exception, match="Save mode Overwrite not allowed for Kafka"):
        save(df.select(F.col("key").alias("value")), mode="overwrite", topic="sink-err")


def test_the_default_save_mode_is_refused_by_spark_and_append_writes(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    """Spark refuses a batch write to any Python data source in the default mode
    (ErrorIfExists) before the sink is asked - Spark's Kafka sink accepts it - so a batch
    job needs ``.mode("append")`` (the code path: clients/spark/sink/writer.py)."""
    new_topics(cluster.bootstrap, "sink-mode")
    writer = (spark.createDataFrame([("m1",)], "value string").write.format("minikafka")
              .option("kafka.bootstrap.servers", cluster.bootstrap)
              .option("topic", "sink-mode"))  # fmt: skip
    with pytest.raises(AnalysisException) as refused:
        writer.save()
    assert refused.value.getCondition() == "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"
    assert refused.value.getMessageParameters() == {"source": "minikafka",
                                                    "createMode": '"ErrorIfExists"'}
    assert ('The data source "minikafka" cannot be written in the "ErrorIfExists" mode. '
            'Please use either the "Append" or "Overwrite" mode instead.'
            ) in str(refused.value)  # fmt: skip
    writer.mode("append").save()
    assert [r.value for r in read_topic(cluster.bootstrap, "sink-mode", 1)] == [b"m1"]


# ---------------------------------------------------------------- a Kafka job, ported
def kafka_job(spark: SparkSession, fmt: str, servers: str, source: str, sink: str) -> list[
        tuple[str | None, str | None]]:  # fmt: skip
    """A job as written for Spark's Kafka source and sink (the Structured Streaming +
    Kafka integration guide's batch examples); ``fmt`` is its only varying part."""
    df = (spark.read.format(fmt).option("kafka.bootstrap.servers", servers)
          .option("subscribe", source).option("startingOffsets", "earliest").load())
    (df.selectExpr("CAST(key AS STRING) AS key", "upper(CAST(value AS STRING)) AS value")
     .write.format(fmt).option("kafka.bootstrap.servers", servers).option("topic", sink)
     .mode("append").save())  # fmt: skip
    back = (spark.read.format(fmt).option("kafka.bootstrap.servers", servers)
            .option("subscribe", sink).load()
            .selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)"))
    return sorted(((r.key, r.value) for r in back.collect()), key=str)


def test_a_kafka_job_ports_by_renaming_the_format(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    new_topics(cluster.bootstrap, "job-in", "job-out")
    inputs = [(f"k{i}" if i % 3 else None, f"value-{i}") for i in range(30)]
    (spark.createDataFrame(inputs, "key string, value string").write.format("minikafka")
     .option("kafka.bootstrap.servers", cluster.bootstrap).option("topic", "job-in")
     .mode("append").save())  # fmt: skip
    read_topic(cluster.bootstrap, "job-in", len(inputs))
    out = kafka_job(spark, "minikafka", cluster.bootstrap, "job-in", "job-out")
    assert out == sorted(((k, v.upper()) for k, v in inputs), key=str)


# ---------------------------------------------------------------- streaming writes
def test_stream_write_copies_a_topic(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    new_topics(cluster.bootstrap, "stream-in", "stream-out")
    inputs = [f"s-{i}".encode() for i in range(40)]
    (spark.createDataFrame([(v,) for v in inputs], "value binary").write.format("minikafka")
     .option("kafka.bootstrap.servers", cluster.bootstrap).option("topic", "stream-in")
     .mode("append").save())  # fmt: skip
    stream = (spark.readStream.format("minikafka")
              .option("kafka.bootstrap.servers", cluster.bootstrap)
              .option("subscribe", "stream-in").option("startingOffsets", "earliest")
              .option("includeHeaders", "true")  # the headers column exists only then
              .option("maxOffsetsPerTrigger", "15").load())
    query = (stream.select("key", "value", "headers").writeStream.format("minikafka")
             .option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("topic", "stream-out")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())  # fmt: skip
    query.awaitTermination(120)
    assert query.exception() is None
    assert len(query.recentProgress) >= 3  # 40 records, 15 per trigger
    out = read_topic(cluster.bootstrap, "stream-out", len(inputs))
    assert sorted(r.value for r in out) == sorted(inputs)
