"""A topic with ``flush.messages=1`` has its records fsync'd before the produce is answered.

The default (as in Kafka) acknowledges without an fsync: durability comes from
replication, and a power loss of every replica loses what the OS had not written back
(docs/storage.md, "Durability").  These tests watch the log's recovery point (everything
below it is fsync'd) at the moment the answer is handed out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.handlers.common import RequestContext
from broker.handlers.dispatch import HANDLERS
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request, encode_request_bytes
from clients.protocol.topics import TopicPartition
from clients.records.record import build_batch
from tests.broker.handlers.wire import CoreHarness, core_at


@pytest.fixture
def h(tmp_path: Path) -> Iterator[CoreHarness]:
    with core_at(tmp_path / "b0") as harness:
        harness.create("durable", 1, **{"flush.messages": "1"})
        harness.create("default", 1)
        yield harness


def produce_and_watch(h: CoreHarness, topic: str) -> tuple[int, int, int]:
    """(error code, recovery point, log end offset) seen when the answer is given."""
    log = h.core.partitions[TopicPartition(topic, 0)].log
    body = {"acks": 1, "timeout_ms": 1000, "topics": [{"name": topic, "partitions": [
        {"index": 0, "records": build_batch([(b"k", b"v" * 100, 5, ())] * 4)}]}]}
    frame = encode_request_bytes(ApiKey.PRODUCE, 8, 7, "flush-test", body)
    request = decode_request(memoryview(frame)[4:])
    seen: list[tuple[int, int, int]] = []

    def respond(answer: dict[str, Any] | None) -> None:
        assert answer is not None
        code = answer["responses"][0]["partition_responses"][0]["error_code"]
        seen.append((code, log.recovery_point, log.log_end_offset))

    HANDLERS[ApiKey.PRODUCE](h.core, request.body, respond, RequestContext(8, "flush-test"))
    assert len(seen) == 1
    return seen[0]


def test_flush_messages_1_fsyncs_before_the_answer(h: CoreHarness) -> None:
    for expected_end in (4, 8, 12):
        assert produce_and_watch(h, "durable") == (0, expected_end, expected_end)


def test_the_default_answers_without_an_fsync(h: CoreHarness) -> None:
    code, recovery_point, end = produce_and_watch(h, "default")
    assert (code, end) == (0, 4) and recovery_point < end
