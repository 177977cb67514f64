"""A broker of a cluster never answers Metadata (or DescribeCluster) with no brokers.

A restarted broker listens before its metadata image has anything, and after a
whole-cluster crash its image shows every broker fenced until they register again.
Seen before (issue 32): a confluent-kafka pipeline worker asked such a broker for
metadata, got an empty broker list, and librdkafka dropped every broker it knew (its
bootstrap brokers too): its ``send_offsets_to_transaction`` waited for a group
coordinator no broker could be asked for, until librdkafka's 5-minute re-bootstrap;
its consumer left the group at ``max.poll.interval.ms`` and the pipeline stalled.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.handlers.common import RequestContext
from broker.handlers.topics import ZERO_UUID, handle_describe_cluster, handle_metadata
from broker.metadata.records import (
    FenceBrokerRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.errors import ErrorCode
from tests.broker.image_feed import ImageFeed
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

PORT = 9092


@pytest.fixture
def core(tmp_path: Path) -> Iterator[BrokerCore]:
    clock = ManualClock(1_000_000)
    config = BrokerConfig(node_id=0, data_dir=str(tmp_path / "b0"), port=PORT,
                          controller_address="127.0.0.1:9")
    core = BrokerCore(config, clock, SystemTimer(clock))
    core.startup()
    try:
        yield core
    finally:
        core.shutdown()


def metadata(core: BrokerCore, topics: list[str] | None) -> dict[str, Any]:
    answers: list[Any] = []
    body = {"topics": None if topics is None else [{"name": t, "topic_id": ZERO_UUID}
                                                   for t in topics],
            "allow_auto_topic_creation": False}
    handle_metadata(core, body, answers.append, RequestContext(12, "c"))  # type: ignore[arg-type]
    assert len(answers) == 1
    return dict(answers[0])


def described_brokers(core: BrokerCore) -> list[int]:
    answers: list[Any] = []
    handle_describe_cluster(core, {"endpoint_type": 1, "include_cluster_authorized_operations":
                                   False}, answers.append, RequestContext(1, "c"))  # type: ignore[arg-type]
    return [b["broker_id"] for b in answers[0]["brokers"]]


def test_before_its_image_has_anything_a_broker_lists_itself_and_knows_no_topic(
        core: BrokerCore) -> None:
    ImageFeed(core)  # what the metadata follower installs before its first fetch
    answer = metadata(core, ["big"])
    assert [(b["node_id"], b["port"]) for b in answer["brokers"]] == [(0, PORT)]
    assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [
        ("big", ErrorCode.LEADER_NOT_AVAILABLE)]  # not UNKNOWN_TOPIC: it does not know yet
    assert metadata(core, None)["topics"] == []
    assert described_brokers(core) == [0]


def test_while_every_broker_is_fenced_a_broker_lists_itself(core: BrokerCore) -> None:
    feed = ImageFeed(core)
    feed.apply(RegisterBrokerRecord(0, 0, "a", "127.0.0.1", PORT),
               RegisterBrokerRecord(1, 1, "b", "127.0.0.1", 9093),
               UnfenceBrokerRecord(0, 0), UnfenceBrokerRecord(1, 1),
               TopicRecord("big", 7, 1, 2),
               PartitionRecord("big", 0, (0, 1), 1, 0, (0, 1), 0))
    assert [b["node_id"] for b in metadata(core, ["big"])["brokers"]] == [0, 1]
    feed.apply(FenceBrokerRecord(0, 0), FenceBrokerRecord(1, 1))  # the whole cluster crashed
    answer = metadata(core, ["big"])
    assert [b["node_id"] for b in answer["brokers"]] == [0]
    assert answer["topics"][0]["error_code"] == 0 and answer["topics"][0]["name"] == "big"
    assert described_brokers(core) == [0]
    feed.apply(UnfenceBrokerRecord(1, 1))  # another broker is back: Kafka's list again
    assert [b["node_id"] for b in metadata(core, ["big"])["brokers"]] == [1]
    assert described_brokers(core) == [1]
