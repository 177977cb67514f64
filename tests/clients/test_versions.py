"""Our clients against a broker that serves only the oldest version of every API we
speak (ApiVersions v0 included: Kafka's fallback), and against our newest: the same calls
work, and every request went at the version expected."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.registry import APIS
from clients.protocol.topics import TopicPartition
from clients.types import (
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    ConsumerRecord,
    NewTopic,
    OffsetAndMetadata,
)
from tests.clients.consumer.fake_group_coordinator import FakeGroupCluster

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture(params=["newest", "oldest"])
def fake(request: pytest.FixtureRequest) -> Iterator[FakeGroupCluster]:
    c = FakeGroupCluster(2, join_window_s=0.2)
    if request.param == "oldest":
        c.serve_oldest_versions()
    try:
        yield c
    finally:
        c.close()
    assert c.errors == [], "the fake received requests it could not serve"


def expected_version(fake: FakeGroupCluster, key: int) -> int:
    api = APIS[key]
    return api.min_version if fake.version_caps else api.max_version


def test_every_call_at_either_end_of_the_version_ranges(fake: FakeGroupCluster) -> None:
    topic = ConfigResource(ConfigResourceType.TOPIC, "t")
    with Admin(fake.bootstrap, request_timeout_ms=5000) as admin:
        admin.create_topics([NewTopic("t", 1, 2, {"retention.ms": "1000"}), NewTopic("gone", 1)])
        assert admin.create_partitions({"t": 2}) == {"t": None}
        assert admin.describe_configs([topic])[topic]["retention.ms"].value == "1000"  # type: ignore[index]
        admin.alter_configs({topic: {"retention.ms": "2000"}})
        admin.incremental_alter_configs({topic: [AlterConfigOp("segment.bytes", "1048576")]})
        assert fake.topic_configs["t"] == {"retention.ms": "2000", "segment.bytes": "1048576"}
        assert admin.delete_topics(["gone"]) == {"gone": None}
        assert [b.node_id for b in admin.describe_cluster().brokers] == [0, 1]
        assert admin.list_topics() == ["t"]
    for run, idempotent in enumerate((True, False)):
        with Producer(fake.bootstrap, linger_ms=1, enable_idempotence=idempotent) as p:
            metas = [p.send("t", b"%d" % i, partition=i % 2).get(10) for i in range(6)]
            bulk = p.send_bulk("t", [b"b1", b"b2"], partition=1).get(10)
        assert sorted(m.offset for m in metas if m.partition == 0) == [3 * run + i
                                                                       for i in range(3)]
        assert bulk.record_count == 2
    with Consumer(fake.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=20) as c:
        c.assign([T0, T1])
        got: list[ConsumerRecord] = []
        deadline = time.monotonic() + 10
        while len(got) < 16:
            assert time.monotonic() < deadline
            for records in c.poll(100).values():
                got.extend(records)
        assert c.end_offsets([T0, T1]) == {T0: 6, T1: 10}
        assert c.offsets_for_times({T0: 0})[T0] is not None
    with Admin(fake.bootstrap, request_timeout_ms=5000) as admin:
        assert admin.delete_records({T0: 2}) == {T0: 2}
    with Consumer(fake.bootstrap, group_id="g", auto_offset_reset="earliest",
                  fetch_max_wait_ms=20, session_timeout_ms=3000, heartbeat_interval_ms=100,
                  enable_auto_commit=False) as c:  # fmt: skip
        c.subscribe(["t"])
        deadline = time.monotonic() + 20
        seen = 0
        while seen < 14:
            assert time.monotonic() < deadline
            seen += sum(len(rs) for rs in c.poll(100).values())
        c.commit({T0: OffsetAndMetadata(5, "meta")})
        assert c.committed([T0, T1]) == {T0: OffsetAndMetadata(5, "meta", -1), T1: None}
    used: dict[int, set[int]] = {}
    for key, version in fake.version_log:
        used.setdefault(key, set()).add(version)
    for key, versions in used.items():
        if key == ApiKey.API_VERSIONS:
            # we ask v3; an old broker makes us fall back to what it names (v0)
            assert versions == ({3, 0} if fake.version_caps else {3})
        else:
            assert versions == {expected_version(fake, key)}, ApiKey(key).name
    assert {ApiKey.CREATE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.DESCRIBE_CONFIGS,
            ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.DELETE_TOPICS,
            ApiKey.DESCRIBE_CLUSTER, ApiKey.METADATA, ApiKey.INIT_PRODUCER_ID, ApiKey.PRODUCE,
            ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.DELETE_RECORDS, ApiKey.FIND_COORDINATOR,
            ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH,
            ApiKey.LEAVE_GROUP} <= set(used)  # fmt: skip
