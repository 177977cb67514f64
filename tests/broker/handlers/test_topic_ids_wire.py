"""Topic ids on the wire, from a broker's metadata image: Metadata v10-12 answer each
topic's id and look topics up by id (UNKNOWN_TOPIC_ID for an unknown one, its name null
from v12), a topic of a log not yet upgraded answers the zero UUID; DeleteTopics v6
refuses an entry naming both a name and an id, and an id the broker does not know.
(Controller mode end to end: tests/broker/admin/test_topic_ids_cluster.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import ZERO_UUID
from tests.broker.handlers.wire import CoreHarness, call1, core_at

A, B = bytes(range(1, 17)), bytes(range(2, 18))
RECORDS: list[MetadataRecord] = [
    RegisterBrokerRecord(0, 0, "a", "127.0.0.1", 9000), UnfenceBrokerRecord(0, 0),
    TopicRecord("t", 2, 1, 1, {}, A), PartitionRecord("t", 0, (0,), 0, 2, (0,), 0),
    TopicRecord("old", 4, 1, 1), PartitionRecord("old", 0, (0,), 0, 4, (0,), 0)]


@pytest.fixture
def h(tmp_path: Path) -> Iterator[CoreHarness]:
    with core_at(tmp_path / "b0") as harness:
        image = MetadataImage()
        for offset, record in enumerate(RECORDS):
            image.apply(record, offset)
        harness.core.image = image
        yield harness


@pytest.mark.parametrize("version", [10, 11, 12])
def test_metadata_answers_ids_and_looks_topics_up_by_id(h: CoreHarness, version: int) -> None:
    every = call1(h.core, ApiKey.METADATA, {"topics": None}, version)
    assert {t["name"]: t["topic_id"] for t in every["topics"]} == {"t": A, "old": ZERO_UUID}
    by_id = call1(h.core, ApiKey.METADATA, {"topics": [
        {"name": None, "topic_id": A}, {"name": None, "topic_id": B}]}, version)
    known, unknown = by_id["topics"]
    assert (known["error_code"], known["name"], known["topic_id"]) == (0, "t", A)
    assert [p["partition_index"] for p in known["partitions"]] == [0]
    assert (unknown["error_code"], unknown["topic_id"]) == (ErrorCode.UNKNOWN_TOPIC_ID, B)
    assert unknown["name"] == (None if version >= 12 else "")


def test_delete_topics_v6_refuses_both_and_unknown_ids(h: CoreHarness) -> None:
    answer = call1(h.core, ApiKey.DELETE_TOPICS, {"timeout_ms": 1000, "topics": [
        {"name": "t", "topic_id": A}, {"name": None, "topic_id": B}]}, 6)
    assert [(r["name"], r["topic_id"], r["error_code"]) for r in answer["responses"]] == [
        ("t", A, ErrorCode.INVALID_REQUEST), (None, B, ErrorCode.UNKNOWN_TOPIC_ID)]
