"""The Kafka-named client calls against a real 3-broker cluster (one cluster for the
module): admin configs, partitions, records, cluster and groups; consumer offset lookups,
pause/resume and iteration; producer serializers and future.get; a consumer group shared
with kafka-python's consumer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.types import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    NewTopic,
)
from tests.broker.cluster_harness import LocalCluster

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

T0 = TopicPartition("api", 0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("api"))) as c:
        yield c


def test_admin_calls(cluster: LocalCluster) -> None:
    with Admin(cluster.bootstrap, request_timeout_ms=15_000) as admin:
        admin.create_topics([NewTopic("api", 1, 3, {"retention.ms": "100000"})])
        desc = admin.describe_cluster()
        assert desc.controller_id >= 0 and len(desc.brokers) == 3
        assert admin.create_partitions({"api": 2}) == {"api": None}
        assert len(admin.describe_topics(["api"])["api"].partitions) == 2
        with pytest.raises(MiniKafkaError) as info:
            admin.create_partitions({"api": 1})
        assert info.value.code == ErrorCode.INVALID_PARTITIONS
        topic = ConfigResource(ConfigResourceType.TOPIC, "api")
        entries = admin.describe_configs([topic])[topic]
        assert isinstance(entries, dict)
        assert entries["retention.ms"].value == "100000"
        assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert entries["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG
        admin.incremental_alter_configs({topic: [
            AlterConfigOp("segment.bytes", "1048576"),
            AlterConfigOp("retention.ms", None, AlterConfigOpType.DELETE),
        ]})  # fmt: skip
        entries = admin.describe_configs([topic])[topic]
        assert isinstance(entries, dict)
        assert entries["segment.bytes"].value == "1048576"
        assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG
        with pytest.raises(MiniKafkaError) as info:
            admin.incremental_alter_configs({topic: [AlterConfigOp("no.such.config", "1")]})
        assert info.value.code == ErrorCode.INVALID_CONFIG
        broker = admin.describe_configs([("broker", "1")])
        assert broker and all(isinstance(v, dict) for v in broker.values())
        result = admin.delete_groups(["nobody"], raise_on_error=False)
        assert result["nobody"] is not None
        assert result["nobody"].code == ErrorCode.GROUP_ID_NOT_FOUND


def test_produce_consume_and_offsets(cluster: LocalCluster) -> None:
    with Producer(cluster.bootstrap, linger_ms=1, value_serializer=lambda v: json.dumps(v).encode(),
                  key_serializer=str.encode) as p:  # fmt: skip
        metas = [p.send("api", {"n": i}, key="k", partition=0, timestamp_ms=1000 * (i + 1))
                 for i in range(6)]  # fmt: skip
        assert [f.get(30).offset for f in metas] == list(range(6))
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", value_deserializer=json.loads,
                  key_deserializer=bytes.decode, consumer_timeout_ms=2000) as c:  # fmt: skip
        assert c.end_offsets([T0]) == {T0: 6}
        assert c.beginning_offsets([T0]) == {T0: 0}
        found = c.offsets_for_times({T0: 3500})[T0]
        assert found is not None and (found.offset, found.timestamp) == (3, 4000)
        assert c.offsets_for_times({T0: 10**12}) == {T0: None}
        c.assign([T0])
        c.pause(T0)
        assert c.poll(300) == {}
        c.resume(T0)
        values = [(r.key, r.value) for r in c]
        assert values == [("k", {"n": i}) for i in range(6)]
    with Admin(cluster.bootstrap, request_timeout_ms=15_000) as admin:
        assert admin.delete_records({T0: 4}) == {T0: 4}
    with Consumer(cluster.bootstrap) as c:
        assert c.beginning_offsets([T0]) == {T0: 4}


def test_a_group_shared_with_kafka_python(cluster: LocalCluster) -> None:
    """Kafka's ConsumerProtocol bytes: either client may lead, both read the assignment."""
    kafka = pytest.importorskip("kafka", reason="kafka-python is the other member")
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic("mix", 4, 1)])
    with Producer(cluster.bootstrap, linger_ms=1) as p:
        for i in range(40):
            p.send("mix", b"%d" % i, partition=i % 4)
        p.flush()
    opts: dict[str, Any] = {"group_id": "mix", "auto_offset_reset": "earliest",
                            "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}
    ours = Consumer(cluster.bootstrap, **opts)
    theirs = kafka.KafkaConsumer("mix", bootstrap_servers=cluster.bootstrap, **opts)
    stop = threading.Event()
    got_theirs: list[Any] = []

    def run_theirs() -> None:
        while not stop.is_set():
            for records in theirs.poll(200).values():
                got_theirs.extend(records)

    thread = threading.Thread(target=run_theirs, daemon=True)
    try:
        ours.subscribe(["mix"])
        thread.start()
        got_ours: list[Any] = []
        deadline = time.monotonic() + 60
        while len(got_ours) + len(got_theirs) < 40 or len(ours.assignment()) != 2:
            assert time.monotonic() < deadline, (len(got_ours), len(got_theirs))
            for records in ours.poll(200).values():
                got_ours.extend(records)
        values = sorted(int(r.value) for r in [*got_ours, *got_theirs])
        assert values == list(range(40))
        with Admin(cluster.bootstrap) as admin:
            desc = admin.describe_groups(["mix"])["mix"]
        assert desc.state == "Stable"
        assigned = sorted(tp.partition for m in desc.members for tp in m.assignment)
        assert assigned == [0, 1, 2, 3] and len(desc.members) == 2
    finally:
        stop.set()
        thread.join(10)
        theirs.close()
        ours.close()


def test_every_compression_type_round_trips(cluster: LocalCluster) -> None:
    pytest.importorskip("clients.records.compression", reason="the record codecs")
    tp = TopicPartition("zipped", 0)
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic("zipped", 1, 3)])
    sent = []
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        with Producer(cluster.bootstrap, compression_type=codec, linger_ms=2) as p:
            values = [b"%s %d " % (codec.encode(), i) * 10 for i in range(50)]
            futures = [p.send("zipped", v, partition=0) for v in values]
            assert futures[-1].get(30).offset == len(sent) + 49
            sent += values
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000,
                  fetch_max_wait_ms=100) as c:  # fmt: skip
        c.assign([tp])
        assert [r.value for r in c] == sent
        c.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < len(sent):
            assert time.monotonic() < deadline
            for columns in c.poll_bulk(200).values():
                got.extend(bytes(v) for v in columns.values() if v is not None)
        assert got == sent
