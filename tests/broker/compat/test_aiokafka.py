"""aiokafka against a 3-broker minikafka cluster, unchanged.

AIOKafkaProducer with acks 0/1/all, idempotence and every codec; AIOKafkaConsumer with
assign/seek and a group of two (split, commits, resume); AIOKafkaAdminClient topics and
configs.  Each test runs its coroutine with ``asyncio.run`` under a deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

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

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from start_cluster(Path(tmp_path_factory.mktemp("aiokafka")))


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(DEADLINE_S):
            return await coro
    return asyncio.run(bounded())


async def produce(bootstrap: str, topic: str, n: int, **config: Any) -> list[bytes]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **{"linger_ms": 5, **config})
    await producer.start()
    try:
        sent = [f"{topic}-{i}".encode() for i in range(n)]
        futures = [await producer.send(topic, key=f"k{i % 17}".encode(), value=v)
                   for i, v in enumerate(sent)]
        await asyncio.gather(*futures)
        return sent
    finally:
        await producer.stop()


async def consume(consumer: AIOKafkaConsumer, expected: int) -> list[Any]:
    got: list[Any] = []
    while len(got) < expected:  # the test's deadline bounds this loop
        for records in (await consumer.getmany(timeout_ms=200)).values():
            got.extend(records)
    return got


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_produce_with_each_acks(cluster: LocalCluster, acks: int | str) -> None:
    topic = create(cluster, f"ak-acks-{acks}")
    sent = run(produce(cluster.bootstrap, topic, 300, acks=acks))
    assert values(read_ours(cluster.bootstrap, topic, 3, len(sent))) == sorted(sent)


def test_idempotent_producer_keeps_order_once(cluster: LocalCluster) -> None:
    topic = create(cluster, "ak-idempotent", 1)
    sent = run(produce(cluster.bootstrap, topic, 2000, acks="all", enable_idempotence=True))
    got = read_ours(cluster.bootstrap, topic, 1, len(sent))[0]
    assert [v for _, v in got] == sent


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_round_trips_and_is_stored_as_sent(cluster: LocalCluster, codec: str) -> None:
    topic = create(cluster, f"ak-{codec}")
    sent = run(produce(cluster.bootstrap, topic, 500, acks="all", compression_type=codec,
                       linger_ms=20))
    assert stored_codecs(cluster, topic, 3) == {codec}
    assert values(read_ours(cluster.bootstrap, topic, 3, len(sent))) == sorted(sent)
    ours = [(b"o%d" % i, b"ours-%s-%d" % (codec.encode(), i)) for i in range(300)]
    produce_ours(cluster.bootstrap, topic, ours, compression_type=codec)

    async def read_all() -> list[Any]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=cluster.bootstrap,
                                    group_id=f"ak-{codec}", auto_offset_reset="earliest")
        await consumer.start()
        try:
            return await consume(consumer, len(sent) + len(ours))
        finally:
            await consumer.stop()

    got = run(read_all())
    assert sorted(r.value for r in got) == sorted(sent + [v for _, v in ours])


def test_assign_and_seek(cluster: LocalCluster) -> None:
    topic = create(cluster, "ak-seek", 1)
    sent = run(produce(cluster.bootstrap, topic, 100, acks="all"))
    tp = TopicPartition(topic, 0)

    async def scenario() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([tp])
            consumer.seek(tp, 60)
            assert [r.offset for r in await consume(consumer, 40)] == list(range(60, 100))
            await consumer.seek_to_beginning(tp)
            assert [r.value for r in await consume(consumer, 100)] == sent
            assert await consumer.end_offsets([tp]) == {tp: 100}
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
        finally:
            await consumer.stop()

    run(scenario())


def test_group_of_two_splits_commits_and_resumes(cluster: LocalCluster) -> None:
    topic = create(cluster, "ak-group", 4)
    config: dict[str, Any] = {"bootstrap_servers": cluster.bootstrap, "group_id": "ak-app",
                              "auto_offset_reset": "earliest", "enable_auto_commit": False,
                              "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}

    async def scenario() -> tuple[list[bytes], list[bytes], list[bytes], list[bytes]]:
        members = [AIOKafkaConsumer(topic, **config), AIOKafkaConsumer(topic, **config)]
        for m in members:
            await m.start()
        try:
            while not all(m.assignment() for m in members):
                for m in members:
                    assert not await m.getmany(timeout_ms=100)  # the topic is still empty
            owned = [{tp.partition for tp in m.assignment()} for m in members]
            assert owned[0].isdisjoint(owned[1]) and owned[0] | owned[1] == {0, 1, 2, 3}
            first = await produce(cluster.bootstrap, topic, 400, acks="all")
            got: list[Any] = []
            while len(got) < len(first):
                for m in members:
                    for records in (await m.getmany(timeout_ms=100)).values():
                        got.extend(records)
            for m in members:
                await m.commit()
        finally:
            for m in members:
                await m.stop()
        more = await produce(cluster.bootstrap, topic, 50, acks="all")
        resumed = AIOKafkaConsumer(topic, **config)
        await resumed.start()
        try:
            again = await consume(resumed, len(more))
            assert not await resumed.getmany(timeout_ms=1000)
        finally:
            await resumed.stop()
        return first, [r.value for r in got], more, [r.value for r in again]

    first, got, more, resumed_with = run(scenario())
    assert sorted(got) == sorted(first)
    assert sorted(resumed_with) == sorted(more)  # only what came after the commits


def test_admin_topics_and_configs(cluster: LocalCluster) -> None:
    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("ak-admin", 2, 3,
                                                topic_configs={"retention.ms": "3600000"})])
            while "ak-admin" not in await admin.list_topics():
                await asyncio.sleep(0.1)
            resource = ConfigResource(ConfigResourceType.TOPIC, "ak-admin")

            async def retention() -> str:
                [answer] = await admin.describe_configs([resource])
                entries = answer.resources[0][4]
                return next(e[1] for e in entries if e[0] == "retention.ms")

            assert await retention() == "3600000"
            await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "ak-admin",
                                                      configs={"retention.ms": "7200000"})])
            while await retention() != "7200000":
                await asyncio.sleep(0.1)
            await admin.create_partitions({"ak-admin": NewPartitions(3)})
            await admin.delete_topics(["ak-admin"])
            while "ak-admin" in await admin.list_topics():
                await asyncio.sleep(0.1)
        finally:
            await admin.close()

    run(scenario())
