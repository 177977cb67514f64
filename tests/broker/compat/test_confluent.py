"""confluent-kafka (librdkafka 2.x) against a 3-broker minikafka cluster, unchanged.

Producer with acks 0/1/all, idempotence and every codec; Consumer with assign/seek and a
group of two (split, commits, resume); AdminClient topics and configs.  Records are
checked with the client itself and with our own consumer, and compressed batches on the
leaders' disks keep the codec they were sent with.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from tests.broker.cluster_harness import LocalCluster
from tests.broker.compat.common import (
    CODECS,
    create,
    produce_ours,
    read_ours,
    start_cluster,
    stored_codecs,
    values,
)
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from start_cluster(Path(tmp_path_factory.mktemp("confluent")))


def produce(bootstrap: str, topic: str, n: int, **config: Any) -> list[bytes]:
    """Send n keyed records per-record with ``produce()``; every delivery must succeed."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    errors: list[KafkaError] = []
    sent = [f"{topic}-{i}".encode() for i in range(n)]
    for i, value in enumerate(sent):
        producer.produce(topic, key=f"k{i % 17}".encode(), value=value,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(30) == 0, "records still queued after 30 s"
    assert errors == []
    return sent


def consume(consumer: Consumer, expected: int, timeout_s: float = 30.0) -> list[Any]:
    got: list[Any] = []

    def done() -> bool:
        for m in consumer.consume(500, 0.2):
            assert m.error() is None, m.error()
            got.append(m)
        return len(got) >= expected

    wait_until(done, timeout_s, f"{expected} messages", 0)
    return got


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_with_each_acks(cluster: LocalCluster, acks: str) -> None:
    topic = create(cluster, f"cf-acks-{acks}")
    sent = produce(cluster.bootstrap, topic, 300, acks=acks, **{"enable.idempotence": False})
    assert values(read_ours(cluster.bootstrap, topic, 3, len(sent))) == sorted(sent)


def test_idempotent_producer_keeps_order_once(cluster: LocalCluster) -> None:
    topic = create(cluster, "cf-idempotent", 1)
    sent = produce(cluster.bootstrap, topic, 2000, acks="all",
                   **{"enable.idempotence": True, "max.in.flight.requests.per.connection": 5})
    got = read_ours(cluster.bootstrap, topic, 1, len(sent))[0]
    assert [v for _, v in got] == sent  # one partition: exactly once, in order


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_round_trips_and_is_stored_as_sent(cluster: LocalCluster, codec: str) -> None:
    topic = create(cluster, f"cf-{codec}")
    sent = produce(cluster.bootstrap, topic, 500, acks="all",
                   **{"compression.type": codec, "linger.ms": 20})
    assert stored_codecs(cluster, topic, 3) == {codec}
    assert values(read_ours(cluster.bootstrap, topic, 3, len(sent))) == sorted(sent)
    ours = [(b"o%d" % i, b"ours-%s-%d" % (codec.encode(), i)) for i in range(300)]
    produce_ours(cluster.bootstrap, topic, ours, compression_type=codec)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"cf-{codec}",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        got = consume(consumer, len(sent) + len(ours))
    finally:
        consumer.close()
    assert sorted(m.value() for m in got) == sorted(sent + [v for _, v in ours])


def test_assign_and_seek(cluster: LocalCluster) -> None:
    topic = create(cluster, "cf-seek", 1)
    sent = produce(cluster.bootstrap, topic, 100, acks="all")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "cf-seek",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 60)])
        got = consume(consumer, 40)
        assert [m.offset() for m in got] == list(range(60, 100))
        consumer.seek(TopicPartition(topic, 0, 10))
        again = consume(consumer, 5)
        assert [m.value() for m in again[:5]] == sent[10:15]
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 100)
    finally:
        consumer.close()


def test_group_of_two_splits_commits_and_resumes(cluster: LocalCluster) -> None:
    topic = create(cluster, "cf-group", 4)
    config = {"bootstrap.servers": cluster.bootstrap, "group.id": "cf-app",
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    members = [Consumer(config), Consumer(config)]
    try:
        for m in members:
            m.subscribe([topic])

        def split() -> bool:
            for m in members:
                assert m.consume(10, 0.1) == []  # the topic is still empty
            return all(m.assignment() for m in members)

        wait_until(split, 60, "both members own partitions", 0)
        first = produce(cluster.bootstrap, topic, 400, acks="all")
        got: dict[int, list[Any]] = {0: [], 1: []}

        def both_have_partitions_and_all_read() -> bool:
            for i, m in enumerate(members):
                for msg in m.consume(200, 0.1):
                    assert msg.error() is None, msg.error()
                    got[i].append(msg)
            return (sum(map(len, got.values())) >= len(first)
                    and all(m.assignment() for m in members))

        wait_until(both_have_partitions_and_all_read, 60, "two members sharing the topic", 0)
        owned = [{tp.partition for tp in m.assignment()} for m in members]
        assert owned[0].isdisjoint(owned[1]) and owned[0] | owned[1] == {0, 1, 2, 3}
        assert sorted(msg.value() for msgs in got.values() for msg in msgs) == sorted(first)
        for m in members:
            m.commit(asynchronous=False)
    finally:
        for m in members:
            m.close()
    more = [f"more-{i}".encode() for i in range(50)]
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for v in more:
        producer.produce(topic, value=v)
    assert producer.flush(30) == 0
    resumed = Consumer(config)
    try:
        resumed.subscribe([topic])
        assert sorted(m.value() for m in consume(resumed, len(more))) == sorted(more)
        assert resumed.consume(100, 1.0) == []  # nothing before the commits comes back
    finally:
        resumed.close()


def test_admin_topics_and_configs(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic("cf-admin", 2, 3,
                                            config={"retention.ms": "3600000"})])
    futures["cf-admin"].result(30)
    wait_until(lambda: "cf-admin" in admin.list_topics(timeout=10).topics, 30, "topic listed")
    assert len(admin.list_topics(timeout=10).topics["cf-admin"].partitions) == 2
    resource = ConfigResource("topic", "cf-admin")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "3600000"
    change = ConfigResource("topic", "cf-admin", incremental_configs=[
        ConfigEntry("retention.ms", "7200000",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change])[change].result(30)
    wait_until(lambda: admin.describe_configs([resource])[resource].result(30)[
        "retention.ms"].value == "7200000", 30, "retention.ms altered")
    admin.create_partitions([NewPartitions("cf-admin", 3)])["cf-admin"].result(30)
    wait_until(lambda: len(admin.list_topics(timeout=10).topics["cf-admin"].partitions) == 3,
               30, "three partitions")
    admin.delete_topics(["cf-admin"])["cf-admin"].result(30)
    wait_until(lambda: "cf-admin" not in admin.list_topics(timeout=10).topics, 30,
               "topic gone")


def test_log_append_time_topics_stamp_records_with_the_brokers_clock(
        cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("cf-append-time", 1, 3, config={
        "message.timestamp.type": "LogAppendTime"})])["cf-append-time"].result(30)
    before_ms = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(20):  # a CreateTime ten hours ahead: refused on a CreateTime topic
        producer.produce("cf-append-time", value=b"stamped-%d" % i,
                         timestamp=before_ms + 10 * 3600 * 1000)
    assert producer.flush(30) == 0
    after_ms = int(time.time() * 1000)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "cf-append-time",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("cf-append-time", 0, 0)])
        got = consume(consumer, 20)
    finally:
        consumer.close()
    for message in got:
        kind, stamp = message.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before_ms - 1000 <= stamp <= after_ms
