"""A standalone broker answers bad topic shapes and configs on the wire with Kafka's codes
and words: CreateTopics and CreatePartitions (INVALID_PARTITIONS,
INVALID_REPLICATION_FACTOR), CreateTopics, AlterConfigs and IncrementalAlterConfigs
(INVALID_CONFIG naming Kafka's key, never ours).  The controller's side:
tests/broker/controller/test_state.py; the CLI on a cluster:
tests/clients/cli/test_cli_errors.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from clients.admin import Admin
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.types import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
)
from tests.broker.processes import BrokerProcess

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Admin]:
    with BrokerProcess(tmp_path_factory.mktemp("kafka-errors")) as broker, \
            Admin(broker.bootstrap) as client:
        client.create_topics([NewTopic("t", 2, 1)])
        yield client


def create_error(admin: Admin, topic: NewTopic) -> MiniKafkaError:
    error = admin.create_topics([topic], raise_on_error=False)[topic.name]
    assert error is not None
    return error


@pytest.mark.parametrize(("topic", "code", "message"), [
    (NewTopic("p0", 0, 1), ErrorCode.INVALID_PARTITIONS,
     "Number of partitions was set to an invalid non-positive value."),
    (NewTopic("pneg", -3, 1), ErrorCode.INVALID_PARTITIONS, "non-positive"),
    (NewTopic("rf0", 1, 0), ErrorCode.INVALID_REPLICATION_FACTOR,
     "Replication factor must be larger than 0, or -1 to use the default value."),
    (NewTopic("rf2", 1, 2), ErrorCode.INVALID_REPLICATION_FACTOR,
     "The target replication factor of 2 cannot be reached because only 1 broker(s)"),
    (NewTopic("c1", 1, 1, {"nosuch.config": "2"}), ErrorCode.INVALID_CONFIG,
     "Unknown topic config name: nosuch.config"),
    (NewTopic("c2", 1, 1, {"cleanup.policy": "compact,nope"}), ErrorCode.INVALID_CONFIG,
     "Invalid value compact,nope for configuration cleanup.policy: String must be one of: "
     "delete, compact"),
    (NewTopic("c3", 1, 1, {"retention_ms": "abc"}), ErrorCode.INVALID_CONFIG,
     "Invalid value abc for configuration retention.ms: expected an integer"),
])
def test_create_topics(admin: Admin, topic: NewTopic, code: ErrorCode, message: str) -> None:
    error = create_error(admin, topic)
    assert error.code == code and message in error.message, error
    assert "_" not in error.message.split(":")[0], error  # never our key spelling


def test_create_partitions(admin: Admin) -> None:
    fewer = admin.create_partitions({"t": 1}, raise_on_error=False)["t"]
    assert fewer is not None and fewer.code == ErrorCode.INVALID_PARTITIONS
    assert "Topic currently has 2 partitions, which is higher than the requested 1." in \
        fewer.message
    same = admin.create_partitions({"t": 2}, raise_on_error=False)["t"]
    assert same is not None and same.code == ErrorCode.INVALID_PARTITIONS
    assert "Topic already has 2 partitions." in same.message


def test_alter_configs_name_kafkas_keys(admin: Admin) -> None:
    t = ConfigResource(ConfigResourceType.TOPIC, "t")
    cases = [
        ([AlterConfigOp("nosuch.config", "2", AlterConfigOpType.SET)],
         "Unknown topic config name: nosuch.config"),
        ([AlterConfigOp("cleanup_policy", "delete,nope", AlterConfigOpType.SET)],
         "Invalid value delete,nope for configuration cleanup.policy"),
        ([AlterConfigOp("retention.ms", "1", AlterConfigOpType.APPEND)],
         "Config value append is not allowed for config key: retention.ms"),
        ([AlterConfigOp("min.insync.replicas", "0", AlterConfigOpType.SET)],
         "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
    ]
    for ops, message in cases:
        error = admin.incremental_alter_configs({t: ops}, raise_on_error=False)[t]
        assert error is not None and error.code == ErrorCode.INVALID_CONFIG, error
        assert message in error.message, error
    legacy = admin.alter_configs({t: {"nosuch_config": "1"}}, raise_on_error=False)[t]
    assert legacy is not None and legacy.code == ErrorCode.INVALID_CONFIG
    assert "Unknown topic config name: nosuch_config" in legacy.message
    # the list syntax on the wire is a,b: one policy, spaces and repeats tolerated
    assert admin.incremental_alter_configs({t: [AlterConfigOp(
        "cleanup.policy", " compact, compact", AlterConfigOpType.SET)]}) == {t: None}
    entries = admin.describe_configs([t])[t]
    assert isinstance(entries, dict) and entries["cleanup.policy"].value == "compact"
