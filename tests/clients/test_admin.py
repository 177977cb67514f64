from __future__ import annotations

import pytest

from clients.admin import Admin
from clients.network.connection import NetworkError
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import InvalidTopicError
from clients.types import NewTopic
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
