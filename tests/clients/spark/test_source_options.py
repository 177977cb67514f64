"""Spark's Kafka source options on the ``minikafka`` source, each against Spark's own
semantics, on a real one-broker cluster (``LocalCluster``) and the shared Spark session.

Topics (made once per module): ``ev-a`` (2 partitions) and ``ev-b`` (1) for
``subscribePattern`` (with ``other`` not matching); ``ts`` (1 partition, 20 records with
producer timestamps BASE + 1000 * i) for the timestamp options; ``retained`` (1
partition, 100 records, the first 40 deleted with DeleteRecords as retention would)
for ``failOnDataLoss``; ``appended`` (``message.timestamp.type=LogAppendTime``) for
``timestampType``; ``packed`` (50 records in each of gzip, snappy, lz4 and zstd batches);
``grow-1`` (grown and joined by ``grow-2`` while a stream reader runs); ``doomed``
(deleted while stream readers run).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable

from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.errors import InvalidConfigError, MiniKafkaError, OffsetOutOfRangeError
from clients.protocol.topics import TopicPartition
from clients.spark.options import parse_source_options
from clients.spark.partition_reader import read_range
from clients.spark.ranges import OffsetRange, min_partitions_split
from clients.spark.source import SCHEMA, MiniKafkaStreamReader, source_schema
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

BASE = 1_700_000_000_000  # producer timestamps of ``ts``: BASE + 1000 * i


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("spark-options"), 1) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([
                NewTopic("ev-a", 2, 1), NewTopic("ev-b", 1, 1), NewTopic("other", 1, 1),
                NewTopic("ts", 1, 1), NewTopic("retained", 1, 1),
                NewTopic("appended", 1, 1, {"message.timestamp.type": "LogAppendTime"}),
                NewTopic("packed", 1, 1), NewTopic("grow-1", 1, 1), NewTopic("doomed", 1, 1),
            ])  # fmt: skip
        with Producer(c.bootstrap, acks="all", linger_ms=5, enable_idempotence=False) as p:
            for topic, parts in (("ev-a", 2), ("ev-b", 1), ("other", 1)):
                for i in range(6):
                    p.send(topic, f"{topic}-{i}".encode(), partition=i % parts,
                           headers=[("h", f"{i}".encode())])
            for i in range(20):
                p.send("ts", f"ts-{i}".encode(), partition=0, timestamp_ms=BASE + 1000 * i)
            for i in range(100):
                p.send("retained", f"r-{i}".encode(), partition=0)
            for i in range(5):
                p.send("appended", f"a-{i}".encode(), partition=0, timestamp_ms=1000)
            p.flush()
        for codec in ("gzip", "snappy", "lz4", "zstd"):
            with Producer(c.bootstrap, acks="all", linger_ms=50, compression_type=codec) as p:
                for i in range(50):
                    p.send("packed", f"{codec}-{i}-".encode() * 20, partition=0)
        with Admin(c.bootstrap) as admin:
            admin.delete_records({TopicPartition("retained", 0): 40})
        yield c


def load(spark: SparkSession, bootstrap: str, **options: str) -> DataFrame:
    reader = spark.read.format("minikafka").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def values(df: DataFrame) -> list[str]:
    return sorted(r.value.decode() for r in df.select("value").collect())


def ts_values(first: int, end: int) -> list[str]:
    return sorted(f"ts-{i}" for i in range(first, end))


def test_subscribe_pattern_reads_every_matching_topic(
        spark: SparkSession, cluster: LocalCluster) -> None:
    df = load(spark, cluster.bootstrap, subscribePattern="ev-.*")
    rows = df.select("topic", "partition").collect()
    assert {(r.topic, r.partition) for r in rows} == {("ev-a", 0), ("ev-a", 1), ("ev-b", 0)}
    assert values(df) == sorted(f"{t}-{i}" for t in ("ev-a", "ev-b") for i in range(6))
    # a full match, as Java's Pattern.matcher(topic).matches(): "ev" matches nothing
    assert load(spark, cluster.bootstrap, subscribePattern="ev").count() == 0


def test_starting_and_ending_timestamps_pick_offsets_by_record_time(
        spark: SparkSession, cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap
    # the first offset whose timestamp is at or after the one given
    assert values(load(spark, bootstrap, subscribe="ts", startingTimestamp=str(BASE + 4500),
                       endingTimestamp=str(BASE + 9000))) == ts_values(5, 9)
    by_partition = load(spark, bootstrap, assign='{"ts": [0]}',
                        startingOffsetsByTimestamp=f'{{"ts": {{"0": {BASE + 15000}}}}}',
                        endingOffsetsByTimestamp=f'{{"ts": {{"0": {BASE + 17000}}}}}')
    assert values(by_partition) == ts_values(15, 17)
    # precedence: startingTimestamp over startingOffsetsByTimestamp over startingOffsets
    assert values(load(spark, bootstrap, subscribe="ts", startingTimestamp=str(BASE + 18000),
                       startingOffsetsByTimestamp=f'{{"ts": {{"0": {BASE}}}}}',
                       startingOffsets='{"ts": {"0": 1}}')) == ts_values(18, 20)
    # an ending timestamp after every record: latest
    assert values(load(spark, bootstrap, subscribe="ts", startingTimestamp=str(BASE + 19000),
                       endingTimestamp=str(BASE + 10**9))) == ts_values(19, 20)
    # no offset at or after the starting timestamp: the strategy decides
    late = str(BASE + 10**9)
    with pytest.raises(Exception, match="No offset matched from request of topic-partition "
                                        f"ts-0 and timestamp {late}"):
        load(spark, bootstrap, subscribe="ts", startingTimestamp=late).collect()
    assert load(spark, bootstrap, subscribe="ts", startingTimestamp=late,
                startingOffsetsByTimestampStrategy="latest").count() == 0


def test_fail_on_data_loss_skips_deleted_records_only_when_false(
        spark: SparkSession, cluster: LocalCluster, caplog: pytest.LogCaptureFixture) -> None:
    bootstrap = cluster.bootstrap
    from_10 = '{"retained": {"0": 10}}'
    with pytest.raises(Exception, match=r"offset 10 of retained-0 is outside \[40, 100\]"):
        load(spark, bootstrap, subscribe="retained", startingOffsets=from_10).collect()
    skipped = load(spark, bootstrap, subscribe="retained", startingOffsets=from_10,
                   failOnDataLoss="false")
    assert values(skipped) == sorted(f"r-{i}" for i in range(40, 100))
    # a range planned before the records went (a checkpointed micro-batch): the reader
    part = OffsetRange("retained", 0, 10, 60)
    strict = parse_source_options({"bootstrap.servers": bootstrap, "subscribe": "retained"},
                                  streaming=False)
    with pytest.raises(OffsetOutOfRangeError):
        list(read_range(strict, part))
    lenient = parse_source_options({"bootstrap.servers": bootstrap, "subscribe": "retained",
                                    "failOnDataLoss": "false"}, streaming=False)
    with caplog.at_level(logging.WARNING, logger="clients.spark.partition_reader"):
        batches = list(read_range(lenient, part))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(40, 60))
    assert "records [10, 40) of the range [10, 60) are no longer in the log" in caplog.text
    assert list(read_range(lenient, OffsetRange("retained", 0, 0, 30))) == []


def test_compressed_batches_are_read_like_plain_ones(
        spark: SparkSession, cluster: LocalCluster) -> None:
    got = values(load(spark, cluster.bootstrap, subscribe="packed"))
    assert got == sorted(f"{c}-{i}-" * 20 for c in ("gzip", "snappy", "lz4", "zstd")
                         for i in range(50))


def test_a_stream_picks_up_new_partitions_and_new_matching_topics_from_earliest(
        cluster: LocalCluster) -> None:
    options = parse_source_options({"kafka.bootstrap.servers": cluster.bootstrap,
                                    "subscribePattern": "grow-.*",
                                    "startingOffsets": "earliest"}, streaming=True)
    reader = MiniKafkaStreamReader(options)
    try:
        start = reader.initialOffset()
        assert start == {"grow-1": {"0": 0}}
        with Admin(cluster.bootstrap) as admin:
            admin.create_partitions({"grow-1": 2})
            admin.create_topics([NewTopic("grow-2", 1, 1)])
        with Producer(cluster.bootstrap, acks="all") as p:
            for topic, part in (("grow-1", 0), ("grow-1", 1), ("grow-2", 0)):
                p.send(topic, b"x", partition=part)
                p.send(topic, b"y", partition=part)
            p.flush()
        want = {"grow-1": {"0": 2, "1": 2}, "grow-2": {"0": 2}}
        wait_until(lambda: reader.latestOffset(start, ReadAllAvailable()) == want, 30,
                   "the new partition and topic in latestOffset", 0.2)
        ranges = [r for r in reader.partitions(start, want) if isinstance(r, OffsetRange)]
        assert sorted((r.topic, r.partition, r.from_offset, r.until_offset)
                      for r in ranges) == [("grow-1", 0, 0, 2), ("grow-1", 1, 0, 2),
                                           ("grow-2", 0, 0, 2)]
    finally:
        reader.stop()


def test_a_deleted_topic_fails_a_stream_unless_fail_on_data_loss_is_false(
        cluster: LocalCluster, caplog: pytest.LogCaptureFixture) -> None:
    def reader(fail_on_data_loss: str) -> MiniKafkaStreamReader:
        return MiniKafkaStreamReader(parse_source_options({
            "kafka.bootstrap.servers": cluster.bootstrap, "subscribePattern": "doomed|ts",
            "startingOffsets": "earliest", "failOnDataLoss": fail_on_data_loss,
        }, streaming=True))  # fmt: skip

    strict, lenient = reader("true"), reader("false")
    try:
        start = strict.initialOffset()
        assert start == {"doomed": {"0": 0}, "ts": {"0": 0}}
        with Admin(cluster.bootstrap) as admin:
            admin.delete_topics(["doomed"])
        # the topic leaves every broker's metadata a moment after DeleteTopics answers
        def gone() -> bool:
            latest = lenient.reportLatestOffset()
            return latest is not None and "doomed" not in latest

        wait_until(gone, 30, "doomed gone from the metadata", 0.2)
        with pytest.raises(MiniKafkaError, match=r"doomed-0 are gone\. Some data may have "
                                                 r"been missed"):
            strict.latestOffset(start, ReadAllAvailable())
        with caplog.at_level(logging.WARNING, logger="clients.spark.source"):
            end = lenient.latestOffset(start, ReadAllAvailable())
        assert end == {"doomed": {"0": 0}, "ts": {"0": 20}}
        assert "doomed-0 are gone" in caplog.text
        ranges = [r for r in lenient.partitions(start, end) if isinstance(r, OffsetRange)]
        assert [(r.topic, r.from_offset, r.until_offset) for r in ranges] == [("ts", 0, 20)]
    finally:
        strict.stop()
        lenient.stop()


def test_include_headers_adds_the_headers_column_only_when_true(
        spark: SparkSession, cluster: LocalCluster) -> None:
    plain = load(spark, cluster.bootstrap, subscribe="ev-b")
    assert plain.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType"]
    assert plain.count() == 6
    with_headers = load(spark, cluster.bootstrap, subscribe="ev-b", includeHeaders="true")
    assert with_headers.schema == SCHEMA
    got = sorted((r.value, [(h.key, h.value) for h in r.headers])
                 for r in with_headers.collect())
    assert got == sorted((f"ev-b-{i}".encode(), [("h", f"{i}".encode())]) for i in range(6))


def test_timestamp_type_comes_from_the_batch_attributes(
        spark: SparkSession, cluster: LocalCluster) -> None:
    appended = load(spark, cluster.bootstrap, subscribe="appended").selectExpr(
        "timestampType", "unix_millis(timestamp) AS ms").collect()
    assert [r.timestampType for r in appended] == [1] * 5  # LogAppendTime
    assert all(r.ms > BASE for r in appended)  # the broker's clock, not the producer's 1000
    created = load(spark, cluster.bootstrap, subscribe="ts").select("timestampType").collect()
    assert {r.timestampType for r in created} == {0}  # CreateTime


def test_min_partitions_splits_large_ranges_as_spark_does(
        spark: SparkSession, cluster: LocalCluster) -> None:
    df = load(spark, cluster.bootstrap, subscribe="ts,ev-b", minPartitions="5")
    # ts: 20 of 26 records -> round(20/26 * 5) = 4 parts; ev-b: 6 -> 1 part (unsplit)
    assert df.rdd.getNumPartitions() == 5
    rows = df.select("topic", "offset").collect()
    assert len({(r.topic, r.offset) for r in rows}) == len(rows) == 26
    # fewer requested than ranges: unchanged
    assert load(spark, cluster.bootstrap, subscribe="ts,ev-b",
                minPartitions="2").rdd.getNumPartitions() == 2


def test_min_partitions_arithmetic_matches_spark_calculator_suite() -> None:
    def split(ranges: list[tuple[str, int, int]], n: int) -> list[tuple[str, int, int]]:
        out = min_partitions_split([OffsetRange(t, 0, lo, hi) for t, lo, hi in ranges], n)
        return [(r.topic, r.from_offset, r.until_offset) for r in out]

    # the cases of Spark's KafkaOffsetRangeCalculatorSuite
    assert split([("t1", 1, 2), ("t2", 1, 2), ("t3", 1, 2)], 3) == [
        ("t1", 1, 2), ("t2", 1, 2), ("t3", 1, 2)]
    assert split([("t1", 1, 5)], 4) == [("t1", 1, 2), ("t1", 2, 3), ("t1", 3, 4), ("t1", 4, 5)]
    assert split([("t1", 1, 5), ("t2", 1, 21)], 3) == [
        ("t1", 1, 5), ("t2", 1, 11), ("t2", 11, 21)]
    assert split([("t1", 1, 11)], 3) == [("t1", 1, 4), ("t1", 4, 7), ("t1", 7, 11)]
    assert split([("t1", 1, 1), ("t2", 1, 3)], 1) == [("t2", 1, 3)]  # empty ranges dropped
    assert len(split([("t1", 0, 3)], 10**9)) == 3  # never more pieces than records


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(
        cluster: LocalCluster) -> None:
    now = [1000.0]
    options = parse_source_options({
        "kafka.bootstrap.servers": cluster.bootstrap, "subscribe": "ts",
        "minOffsetsPerTrigger": "5", "maxTriggerDelay": "30s", "maxOffsetsPerTrigger": "4",
    }, streaming=True)  # fmt: skip
    reader = MiniKafkaStreamReader(options, clock=lambda: now[0])
    try:
        everything = ReadAllAvailable()
        # the first trigger of a query runs whatever is there (Spark: no batch yet)
        assert reader.latestOffset({"ts": {"0": 17}}, everything) == {"ts": {"0": 20}}
        now[0] += 10
        # 3 new records < 5, last batch 10 s ago < 30 s: no micro-batch (start returned)
        assert reader.latestOffset({"ts": {"0": 17}}, everything) == {"ts": {"0": 17}}
        # 20 new records >= 5: a micro-batch; the max rule still caps it
        assert reader.latestOffset({"ts": {"0": 0}}, reader.getDefaultReadLimit()) == {
            "ts": {"0": 4}}
        now[0] += 29.9
        assert reader.latestOffset({"ts": {"0": 18}}, everything) == {"ts": {"0": 18}}
        now[0] += 0.1  # maxTriggerDelay passed since the last micro-batch: it runs
        assert reader.latestOffset({"ts": {"0": 18}}, everything) == {"ts": {"0": 20}}
    finally:
        reader.stop()


def test_kafka_settings_pass_through_and_spark_refused_keys(
        spark: SparkSession, cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap
    df = load(spark, bootstrap, subscribe="ev-b", **{
        "kafka.client.id": "spark-job-7", "kafka.fetch.max.wait.ms": "50",
        "kafka.request.timeout.ms": "20000", "kafka.group.id": "billing-reader",
        "groupIdPrefix": "ignored-when-group-id",
    })  # fmt: skip
    assert df.count() == 6
    with Admin(bootstrap) as admin:  # no group joined, nothing committed (as Spark's)
        assert [g.group_id for g in admin.list_groups()] == []
    # the settings reach the consumer: SASL without credentials is its error
    with pytest.raises(Exception, match="sasl"):
        load(spark, bootstrap, subscribe="ev-b",
             **{"kafka.security.protocol": "SASL_PLAINTEXT"}).collect()
    for key, message in (
        ("kafka.auto.offset.reset", "Kafka option 'auto.offset.reset' is not supported. "
                                    "Instead set the source option 'startingOffsets'"),
        ("kafka.key.deserializer", "keys are deserialized as byte arrays with "
                                   "ByteArrayDeserializer"),
        ("kafka.value.deserializer", "values are deserialized as byte arrays"),
        ("kafka.enable.auto.commit", "Kafka option 'enable.auto.commit' is not supported."),
        ("kafka.interceptor.classes", "Kafka option 'interceptor.classes' is not supported."),
    ):
        with pytest.raises(Exception, match=message):
            load(spark, bootstrap, subscribe="ev-b", **{key: "x"}).collect()


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"subscribe": "p", "subscribePattern": "p.*"}, False, "exactly one of"),
    ({"subscribePattern": "("}, False, "not a valid regex"),
    ({"subscribe": "p", "startingTimestamp": "-5"}, False, "ms since the epoch"),
    ({"subscribe": "p", "startingOffsetsByTimestamp": '{"p": {"0": -1}}'}, True,
     "timestamps must be >= 0"),
    ({"subscribe": "p", "endingOffsetsByTimestamp": '{"q": {"0": 1}}'}, False,
     r"not subscribed: \['q'\]"),
    ({"subscribe": "p", "endingTimestamp": "5"}, True, "batch reads only"),
    ({"subscribe": "p", "startingOffsetsByTimestampStrategy": "earliest"}, False,
     "'error' or 'latest'"),
    ({"subscribe": "p", "failOnDataLoss": "yes"}, False, "'true' or 'false'"),
    ({"subscribe": "p", "includeHeaders": "1"}, False, "'true' or 'false'"),
    ({"subscribe": "p", "minPartitions": "0"}, False, "must be >= 1"),
    ({"subscribe": "p", "minOffsetsPerTrigger": "5"}, False, "streaming reads only"),
    ({"subscribe": "p", "maxTriggerDelay": "soon"}, True, "time such as"),
    ({"subscribe": "p", "kafka.group.id": " "}, False, "must not be empty"),
    ({"subscribe": "p", "kafka.no.such.setting": "1"}, False, "'no.such.setting'"),
    ({"subscribe": "p", "kafka.ssl.truststore.location": "/x.jks"}, False, "reads PEM files"),
    ({"subscribe": "p", "kafka.sasl.jaas.config": "Krb5LoginModule required;"}, False,
     "ScramLoginModule"),
])
def test_new_option_errors(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        parse_source_options({"bootstrap.servers": "h:1", **options}, streaming=streaming)


def test_new_options_parse_to_spark_defaults_and_values() -> None:
    opts = parse_source_options({"bootstrap.servers": "h:1", "subscribe": "a"}, streaming=True)
    assert (opts.fail_on_data_loss, opts.include_headers, opts.min_partitions,
            opts.max_trigger_delay_ms, opts.group_id_prefix) == (
        True, False, None, 15 * 60_000, "spark-kafka-source")
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="alice" password="p\\"w";')
    opts = parse_source_options({
        "bootstrap.servers": "h:1", "subscribe": "a", "maxTriggerDelay": "500ms",
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": jaas, "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/ca.pem", "kafka.max.poll.records": "7",
        "kafka.ssl.endpoint.identification.algorithm": "",
    }, streaming=True)  # fmt: skip
    assert opts.max_trigger_delay_ms == 500
    assert opts.consumer_kwargs(client_id="x") == {
        "client_id": "x", "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice", "sasl_plain_password": 'p"w', "ssl_cafile": "/ca.pem",
        "max_poll_records": 7, "ssl_check_hostname": False,
    }
    assert "p\\\"w" not in repr(opts) and 'p"w' not in repr(opts)  # no password in logs


def test_schema_without_headers_is_the_full_schema_but_headers() -> None:
    assert source_schema(True) == SCHEMA
    assert source_schema(False).fieldNames() == SCHEMA.fieldNames()[:-1]
