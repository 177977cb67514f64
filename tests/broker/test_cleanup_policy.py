"""``cleanup.policy=compact,delete`` on the wire, against a real standalone broker:
CreateTopics accepts it in either order, DescribeConfigs shows Kafka's ``compact,delete``,
AlterConfigs and IncrementalAlterConfigs (APPEND / SUBTRACT) move a topic from compact to
both and back, and DeleteRecords works on it (Kafka refuses it only without delete).
The storage side: tests/storage/cleaner/test_compact_delete.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition
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
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("cleanup-policy")) as process:
        yield process


def policy(admin: Admin, topic: str) -> str | None:
    entries = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    found = entries[ConfigResource(ConfigResourceType.TOPIC, topic)]
    assert isinstance(found, dict), found
    return found["cleanup.policy"].value


def test_create_describe_and_alter_between_compact_and_both(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        assert admin.create_topics([NewTopic("both", 1, 1, {"cleanup.policy": "delete,compact"}),
                                    NewTopic("c", 1, 1, {"cleanup.policy": "compact"})],
                                   raise_on_error=False) == {"both": None, "c": None}
        assert policy(admin, "both") == "compact,delete"
        c = ConfigResource(ConfigResourceType.TOPIC, "c")
        assert admin.alter_configs({c: {"cleanup.policy": "compact,delete"}}) == {c: None}
        assert policy(admin, "c") == "compact,delete"
        assert admin.alter_configs({c: {"cleanup.policy": "compact"}}) == {c: None}
        assert policy(admin, "c") == "compact"
        assert admin.incremental_alter_configs({c: [AlterConfigOp(
            "cleanup.policy", "delete", AlterConfigOpType.APPEND)]}) == {c: None}
        assert policy(admin, "c") == "compact,delete"
        assert admin.incremental_alter_configs({c: [AlterConfigOp(
            "cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)]}) == {c: None}
        assert policy(admin, "c") == "compact"
        bad = admin.alter_configs({c: {"cleanup.policy": "compact,nope"}},
                                  raise_on_error=False)[c]
        assert isinstance(bad, MiniKafkaError) and bad.code == ErrorCode.INVALID_CONFIG
        assert "String must be one of: delete, compact" in bad.message, bad
        assert policy(admin, "c") == "compact"


def test_delete_records_needs_delete_in_the_policy(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([NewTopic("dr-both", 1, 1, {"cleanup.policy": "compact,delete"}),
                             NewTopic("dr-compact", 1, 1, {"cleanup.policy": "compact"})])
        with Producer(broker.bootstrap, acks="all") as producer:
            for topic in ("dr-both", "dr-compact"):
                for i in range(3):
                    producer.send(topic, b"v", key=b"k%d" % i).result(30)
        both, compact = TopicPartition("dr-both", 0), TopicPartition("dr-compact", 0)
        answer = admin.delete_records({both: 2, compact: 2}, raise_on_error=False)
        assert answer[both] == 2
        refused = answer[compact]
        assert isinstance(refused, MiniKafkaError), refused
        assert refused.code == ErrorCode.POLICY_VIOLATION
