from __future__ import annotations

import pytest

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.network.connection import NetworkError
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import InvalidTopicError, TopicPartition
from clients.records.record import build_batch
from clients.types import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from tests.clients.fake_broker import FakeCluster


def test_create_list_describe_delete(cluster2: FakeCluster) -> None:
    with Admin(cluster2.bootstrap, request_timeout_ms=5000) as admin:
        result = admin.create_topics([NewTopic("a", 3, 2), NewTopic("b", 1, 1)])
        assert result == {"a": None, "b": None}
        assert admin.list_topics() == ["a", "b"]
        desc = admin.describe_topics(["a"])
        parts = desc["a"].partitions
        assert [p.partition for p in parts] == [0, 1, 2]
        assert [p.leader for p in parts] == [0, 1, 0]
        assert all(len(p.replicas) == 2 and p.isr == p.replicas for p in parts)
        assert admin.delete_topics(["b"]) == {"b": None}
        assert admin.list_topics() == ["a"]


def test_create_errors_carry_codes(cluster2: FakeCluster) -> None:
    with Admin(cluster2.bootstrap) as admin:
        admin.create_topics([NewTopic("dup", 1)])
        with pytest.raises(MiniKafkaError) as info:
            admin.create_topics([NewTopic("dup", 1)])
        assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        assert "dup" in str(info.value)
        results = admin.create_topics(
            [NewTopic("ok", 2), NewTopic("rf", 1, 3)], raise_on_error=False
        )
        assert results["ok"] is None
        rf_error = results["rf"]
        assert rf_error is not None and rf_error.code == ErrorCode.INVALID_REPLICATION_FACTOR
        with pytest.raises(InvalidTopicError):
            admin.create_topics([NewTopic("bad name", 1)])
        with pytest.raises(MiniKafkaError) as info:
            admin.delete_topics(["missing"])
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_validate_only_creates_nothing(cluster: FakeCluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        assert admin.create_topics([NewTopic("v", 1)], validate_only=True) == {"v": None}
        assert admin.list_topics() == []


def test_describe_unknown_topic_and_cluster(cluster2: FakeCluster) -> None:
    with Admin(cluster2.bootstrap) as admin:
        with pytest.raises(MiniKafkaError) as info:
            admin.describe_topics(["nope"])
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        desc = admin.describe_cluster()
        assert desc.cluster_id == "fake-cluster"
        assert desc.controller_id == 0
        assert [(b.node_id, b.port) for b in desc.brokers] == [
            (0, cluster2.port(0)),
            (1, cluster2.port(1)),
        ]


def test_unreachable_bootstrap_is_a_network_error() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with Admin(f"127.0.0.1:{port}", request_timeout_ms=2000) as admin:
        with pytest.raises(NetworkError) as info:
            admin.list_topics()
        assert info.value.retriable


# ---------------------------------------------------------------- Kafka's shapes and new calls


def test_create_topics_sends_configs_as_name_value_pairs(cluster: FakeCluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic("c", 1, 1, {"retention.ms": "1000",
                                                  "cleanup.policy": "compact"})])
        assert cluster.topic_configs["c"] == {"retention.ms": "1000", "cleanup.policy": "compact"}
        # our Metadata extra carries the overrides back
        assert admin.describe_topics(["c"])["c"].configs == {
            "cleanup.policy": "compact", "retention.ms": "1000"}
        with pytest.raises(MiniKafkaError) as info:
            admin.create_topics([NewTopic("d", 1, 1, {"no.such.config": "1"})])
        assert info.value.code == ErrorCode.INVALID_CONFIG and "no.such.config" in str(info.value)
        with pytest.raises(TypeError, match="Kafka configs are strings"):
            admin.create_topics([NewTopic("e", 1, 1, {"retention.ms": 1000})])  # type: ignore[dict-item]
        assert "d" not in cluster.topics and "e" not in cluster.topics


def test_create_topics_with_replica_assignments(cluster2: FakeCluster) -> None:
    with Admin(cluster2.bootstrap) as admin:
        admin.create_topics([NewTopic("placed", replica_assignments={0: [1, 0], 1: [0, 1]})])
        parts = admin.describe_topics(["placed"])["placed"].partitions
        assert [(p.partition, p.leader) for p in parts] == [(0, 1), (1, 0)]
        with pytest.raises(ValueError, match="must be -1"):
            admin.create_topics([NewTopic("x", 2, 1, replica_assignments={0: [0]})])


def test_create_partitions(cluster2: FakeCluster) -> None:
    cluster2.create_topic("grow", 2)
    with Admin(cluster2.bootstrap) as admin:
        assert admin.create_partitions({"grow": NewPartitions(3)}) == {"grow": None}
        assert len(cluster2.topics["grow"]) == 3
        assert admin.create_partitions({"grow": 5}, validate_only=True) == {"grow": None}
        assert len(cluster2.topics["grow"]) == 3
        admin.create_partitions({"grow": NewPartitions(4, [[1, 0]])})
        assert cluster2.topics["grow"][3].replicas == [1, 0]
        result = admin.create_partitions({"grow": 2, "missing": 3}, raise_on_error=False)
        shrink, missing = result["grow"], result["missing"]
        assert shrink is not None and shrink.code == ErrorCode.INVALID_PARTITIONS
        assert "has 4 partitions" in str(shrink)
        assert missing is not None and missing.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(MiniKafkaError) as info:
            admin.create_partitions({"grow": NewPartitions(6, [[0]])})  # one list for two
        assert info.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        with pytest.raises(ValueError, match="total_count"):
            admin.create_partitions({"grow": 0})


def test_describe_configs_of_topics_and_brokers(cluster2: FakeCluster) -> None:
    with Admin(cluster2.bootstrap) as admin:
        admin.create_topics([NewTopic("t", 1, 1, {"retention.ms": "1000"})])
        topic = ConfigResource(ConfigResourceType.TOPIC, "t")
        broker = ConfigResource(ConfigResourceType.BROKER, "1")
        result = admin.describe_configs([topic, ("broker", "1")], include_documentation=True)
        entries = result[topic]
        assert isinstance(entries, dict)
        assert entries["retention.ms"].value == "1000"
        assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert entries["cleanup.policy"].is_default and entries["cleanup.policy"].value == "delete"
        assert entries["cleanup.policy"].documentation == "the fake's cleanup.policy"
        broker_entries = result[broker]
        assert isinstance(broker_entries, dict) and broker_entries["num.partitions"].value == "1"
        # a broker resource goes to that broker
        assert (1, int(ApiKey.DESCRIBE_CONFIGS)) in cluster2.request_log
        with pytest.raises(MiniKafkaError) as info:
            admin.describe_configs([("topic", "nope")])
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        mixed = admin.describe_configs([("topic", "nope"), topic], raise_on_error=False)
        assert isinstance(mixed[ConfigResource(ConfigResourceType.TOPIC, "nope")], MiniKafkaError)
        assert isinstance(mixed[topic], dict)
        with pytest.raises(ValueError, match="resource type"):
            admin.describe_configs([("table", "t")])


def test_a_broker_id_not_in_the_cluster_fails_its_resource_alone(cluster2: FakeCluster) -> None:
    """Kafka's AdminClient fails only that resource's future (after its timeout); we say
    why at once, after one metadata refresh, and the other resources are answered."""
    with Admin(cluster2.bootstrap, request_timeout_ms=30_000) as admin:
        admin.create_topics([NewTopic("t", 1, 1)])
        topic = ConfigResource(ConfigResourceType.TOPIC, "t")
        nine = ConfigResource(ConfigResourceType.BROKER, "9")
        one = ConfigResource(ConfigResourceType.BROKER, "1")
        admin.describe_configs([one])  # the metadata is known: an unknown id refreshes it
        refreshes = cluster2.request_log.count((0, int(ApiKey.METADATA))) + \
            cluster2.request_log.count((1, int(ApiKey.METADATA)))
        result = admin.describe_configs([topic, nine, one], raise_on_error=False)
        failed = result[nine]
        assert isinstance(failed, MiniKafkaError)
        assert failed.code == ErrorCode.BROKER_NOT_AVAILABLE
        assert "broker 9 is not in the cluster (brokers: 0, 1)" in str(failed)
        assert isinstance(result[topic], dict) and isinstance(result[one], dict)
        assert cluster2.request_log.count((0, int(ApiKey.METADATA))) + \
            cluster2.request_log.count((1, int(ApiKey.METADATA))) == refreshes + 1
        assert not any(node == 9 for node, _ in cluster2.request_log)
        with pytest.raises(MiniKafkaError, match="broker 9 is not in the cluster") as info:
            admin.describe_configs([nine])
        assert info.value.code == ErrorCode.BROKER_NOT_AVAILABLE
        altered = admin.incremental_alter_configs(
            {nine: [AlterConfigOp("log.cleaner.threads", "2")]}, raise_on_error=False)
        assert altered[nine] is not None and altered[nine].code == ErrorCode.BROKER_NOT_AVAILABLE
        with pytest.raises(ValueError, match="must be a broker id"):
            admin.describe_configs([("broker", "nine")])


def test_alter_configs_replaces_the_set_incremental_changes_it(cluster: FakeCluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic("t", 1, 1, {"retention.ms": "1000"})])
        topic = ConfigResource(ConfigResourceType.TOPIC, "t")
        assert admin.alter_configs({topic: {"segment.bytes": "1048576"}}) == {topic: None}
        assert cluster.topic_configs["t"] == {"segment.bytes": "1048576"}  # retention.ms reset
        admin.alter_configs({topic: {"retention.ms": "5"}}, validate_only=True)
        assert cluster.topic_configs["t"] == {"segment.bytes": "1048576"}
        admin.incremental_alter_configs({topic: [
            AlterConfigOp("retention.ms", "2000"),
            AlterConfigOp("segment.bytes", None, AlterConfigOpType.DELETE),
            AlterConfigOp("cleanup.policy", "compact", "append"),
        ]})  # fmt: skip
        assert cluster.topic_configs["t"] == {"retention.ms": "2000",
                                              "cleanup.policy": "delete,compact"}
        admin.incremental_alter_configs({("topic", "t"): [("cleanup.policy", "delete", 3)]})
        assert cluster.topic_configs["t"]["cleanup.policy"] == "compact"
        with pytest.raises(MiniKafkaError) as info:
            admin.incremental_alter_configs({topic: [AlterConfigOp("bogus", "1")]})
        assert info.value.code == ErrorCode.INVALID_CONFIG
        with pytest.raises(ValueError, match="needs a value"):
            admin.incremental_alter_configs({topic: [AlterConfigOp("retention.ms", None)]})
        with pytest.raises(ValueError, match="config operation"):
            admin.incremental_alter_configs({topic: [("retention.ms", "1", "replace")]})
        results = admin.alter_configs({("topic", "gone"): {"retention.ms": "1"}},
                                      raise_on_error=False)
        gone = results[ConfigResource(ConfigResourceType.TOPIC, "gone")]
        assert gone is not None and gone.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_records_moves_the_low_watermark(cluster2: FakeCluster) -> None:
    cluster2.create_topic("t", 2)
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    for tp in (t0, t1):
        for i in range(3):
            cluster2.append(tp, build_batch([(None, b"%d" % i, 1, ())] * 2))  # 6 records
    with Admin(cluster2.bootstrap) as admin:
        assert admin.delete_records({t0: 3, t1: -1}) == {t0: 3, t1: 6}
        # each partition went to its leader
        assert {n for n, k in cluster2.request_log if k == ApiKey.DELETE_RECORDS} == {0, 1}
        assert [r.offset for r in cluster2.records(t0)] == [2, 3, 4, 5]  # whole batches kept
        result = admin.delete_records({t0: 99, TopicPartition("t", 7): 1}, raise_on_error=False)
        beyond, unknown = result[t0], result[TopicPartition("t", 7)]
        assert isinstance(beyond, MiniKafkaError) and beyond.code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert isinstance(unknown, MiniKafkaError)
        assert unknown.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(ValueError, match=">= -1"):
            admin.delete_records({t0: -2})
    with Consumer(cluster2.bootstrap) as consumer:
        assert consumer.beginning_offsets([t0, t1]) == {t0: 3, t1: 6}


def test_describe_cluster_uses_describe_cluster_else_metadata(cluster2: FakeCluster) -> None:
    with Admin(cluster2.bootstrap) as admin:
        desc = admin.describe_cluster()
    assert (desc.cluster_id, desc.controller_id) == ("fake-cluster", 0)
    assert [b.node_id for b in desc.brokers] == [0, 1]
    assert any(k == ApiKey.DESCRIBE_CLUSTER for _, k in cluster2.request_log)
    cluster2.unserved.add(int(ApiKey.DESCRIBE_CLUSTER))
    cluster2.request_log.clear()
    with Admin(cluster2.bootstrap) as admin:
        assert admin.describe_cluster() == desc
    assert not any(k == ApiKey.DESCRIBE_CLUSTER for _, k in cluster2.request_log)
