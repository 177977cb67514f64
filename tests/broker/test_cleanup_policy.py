"""``cleanup.policy=compact,delete`` on the wire, against a real standalone broker:
CreateTopics accepts it in either order, DescribeConfigs shows Kafka's ``compact,delete``,
AlterConfigs and IncrementalAlterConfigs (APPEND / SUBTRACT) move a topic from compact to
both and back, and DeleteRecords works on it (Kafka refuses it only without delete).  In process, a
broker core applies both halves on its own jobs: retention (HW-bounded) deletes the old
segments of produced records, the cleaner compacts the rest.  The storage side:
tests/storage/cleaner/test_compact_delete.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.records.record import build_batch, decode_batch
from clients.types import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
)
from tests.broker.handlers.wire import call1, core_at
from tests.broker.processes import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("cleanup-policy")) as process:
        yield process


def policy(admin: Admin, topic: str) -> str | None:
    entries = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    found = entries[ConfigResource(ConfigResourceType.TOPIC, topic)]
    assert isinstance(found, dict), found
    return found["cleanup.policy"].value


@pytest.mark.multiprocess
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


@pytest.mark.multiprocess
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


def test_a_broker_core_applies_retention_and_compaction_to_one_topic(tmp_path: Path) -> None:
    """Records stamped 1970 are past retention.ms by the log's wall clock; records stamped
    now are not: retention deletes the old segments, the cleaner compacts the rest."""
    now_ms = int(time.time() * 1000)
    with core_at(tmp_path / "b") as h:
        h.create("both", 1, cleanup_policy="delete,compact", retention_ms="3600000",
                 segment_bytes="1024", min_cleanable_dirty_ratio="0")
        log = h.core.partitions[TopicPartition("both", 0)].log
        assert (log.config.cleanup_policy, log.config.compact, log.config.delete) == (
            "compact,delete", True, True)

        produced: list[tuple[int, bytes, bytes | None]] = []

        def produce(key: bytes, value: bytes | None, ts: int) -> None:
            answer = call1(h.core, ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 1000, "topics": [
                {"name": "both", "partitions": [
                    {"index": 0, "records": build_batch([(key, value, ts, ())])}]}]})
            part = answer["responses"][0]["partition_responses"][0]
            assert part["error_code"] == 0, part
            produced.append((part["base_offset"], key, value))

        for i in range(20):  # old: four segments of 1024 bytes, and a part of a fifth
            produce(b"old-%d" % (i % 3), b"x" * 100, 1000 + i)
        first_new = log.log_end_offset
        for i in range(20):
            produce(b"new-%d" % (i % 3), b"y%d" % i, now_ms)
        produce(b"new-0", None, now_ms)  # a tombstone, in the active segment
        segments = len(log.segments)
        assert h.core.run_retention() > 0  # the segments wholly older than retention.ms
        assert log.segments[0].base_offset == log.log_start_offset <= first_new
        assert 1 < len(log.segments) < segments and first_new < log.segments[1].base_offset
        start, active = log.log_start_offset, log.active.base_offset
        h.core.log_manager.clean_until_idle()
        latest: dict[bytes, tuple[int, bytes, bytes | None]] = {}
        for rec in produced:
            if start <= rec[0] < active:
                latest[rec[1]] = rec
        expected = sorted(latest.values()) + [r for r in produced if r[0] >= active]
        assert [(r.offset, r.key, r.value) for _, data in log.batches()
                for r in decode_batch(data)] == expected
        assert len(latest) < len([r for r in produced if start <= r[0] < active])  # cleaned
