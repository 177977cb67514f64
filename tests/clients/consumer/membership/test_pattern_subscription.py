"""Our Consumer with ``group_protocol="consumer"`` (KIP-848) subscribed by pattern against
a real broker (1 broker, controller mode): the member sends ``subscribed_topic_regex``,
the broker resolves it, the member gets the matching topics' partitions (and only
those), resolves their topic ids although it never named them, and a matching topic
created later is picked up by a later heartbeat.  A pattern the broker refuses
(look-around: not RE2) is raised from poll as INVALID_REGULAR_EXPRESSION.  Arguments
are checked before anything is sent (no broker needed)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until


def test_subscribe_arguments_are_checked_before_anything_is_sent() -> None:
    consumer = Consumer("127.0.0.1:9", group_id="g", group_protocol="consumer",
                        request_timeout_ms=200)
    try:
        with pytest.raises(ValueError, match="no flags"):
            consumer.subscribe(pattern=re.compile("pat-.*", re.IGNORECASE))
        with pytest.raises(ValueError, match="not both"):
            consumer.subscribe(["pat-a"], pattern="pat-.*")
        consumer.subscribe(["pat-a"])
        with pytest.raises(MiniKafkaError, match="mutually exclusive") as raised:
            consumer.subscribe(pattern="pat-.*")
        assert raised.value.code == ErrorCode.INVALID_REQUEST
        assert consumer.subscription() == {"pat-a"}
    finally:
        consumer.close(0)
    classic = Consumer("127.0.0.1:9", group_id="g", request_timeout_ms=200)
    try:
        with pytest.raises(InvalidConfigError, match="group_protocol='consumer'"):
            classic.subscribe(pattern="pat-.*")
    finally:
        classic.close(0)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    # heartbeats every 300 ms: a topic created later is resolved within one of them
    with LocalCluster(tmp_path, brokers=1,
                      overrides={"group_consumer_heartbeat_interval_ms": 300}) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic("pat-a", 3, 1), NewTopic("pat-b", 2, 1),
                                 NewTopic("other", 2, 1)])
        yield c


def parts(topic: str, count: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(count)}


@pytest.mark.multiprocess
def test_a_pattern_subscription_gets_the_matching_topics_and_later_ones(
        cluster: LocalCluster) -> None:
    consumer = Consumer(cluster.bootstrap, group_id="pat-group", group_protocol="consumer",
                        auto_offset_reset="earliest", fetch_max_wait_ms=100,
                        retry_backoff_ms=50)
    values: list[bytes] = []

    def polled() -> Consumer:
        for records in consumer.poll(100).values():
            values.extend(r.value for r in records if r.value is not None)
        return consumer

    try:
        consumer.subscribe(pattern=re.compile(r"pat-.*"))
        wanted = parts("pat-a", 3) | parts("pat-b", 2)
        wait_until(lambda: polled().assignment() == wanted, 60,
                   "the member owns the partitions of pat-a and pat-b")
        assert consumer.subscription() == {"pat-a", "pat-b"}
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic("pat-c", 1, 1)])
        wanted |= parts("pat-c", 1)
        wait_until(lambda: polled().assignment() == wanted, 60,
                   "the topic created later is assigned too")
        with Producer(cluster.bootstrap, acks="all") as producer:
            for topic in ("pat-c", "other", "pat-a"):
                producer.send(topic, topic.encode(), partition=0)
            producer.flush()
        wait_until(lambda: bool(polled()) and {b"pat-a", b"pat-c"} <= set(values), 60,
                   "records of the matching topics consumed")
        assert b"other" not in values
    finally:
        consumer.close()


@pytest.mark.multiprocess
def test_a_pattern_the_broker_refuses_is_raised_from_poll(cluster: LocalCluster) -> None:
    consumer = Consumer(cluster.bootstrap, group_id="pat-bad", group_protocol="consumer",
                        retry_backoff_ms=50)
    try:
        consumer.subscribe(pattern="pat-(?!a).*")  # look-ahead: RE2 has none
        with pytest.raises(MiniKafkaError) as raised:
            wait_until(lambda: consumer.poll(100) is None, 30, "poll raises")
        assert raised.value.code == ErrorCode.INVALID_REGULAR_EXPRESSION
    finally:
        consumer.close()
