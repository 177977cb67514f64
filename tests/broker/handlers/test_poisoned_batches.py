"""Batches with a valid CRC whose contents are poison, produced to a leader.

Each was stored before (a raw-socket report): garbage records, negative record offset
deltas, a record count of 2**31-1 with a matching last offset delta (the LEO jumped by
2**31), control and transactional batches from a plain client; every consumer of the
partition then failed from that point.  Now each is refused with Kafka's error for that
partition only, nothing is stored, and consumers keep reading the good records around it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from clients.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, assemble_batch
from clients.records.record import _encode_record, build_batch, decode_batch
from tests.broker.handlers.wire import CoreHarness, call1, core_at


@pytest.fixture
def h(tmp_path: Path) -> Iterator[CoreHarness]:
    with core_at(tmp_path / "b0") as harness:
        harness.create("t", 1)
        yield harness


def records_body(deltas: list[int]) -> bytes:
    out = bytearray()
    for i, delta in enumerate(deltas):
        _encode_record(out, delta, 0, b"k%d" % i, b"v%d" % i, ())
    return bytes(out)


def batch(body: bytes, count: int, lod: int, attributes: int = 0, **fields: Any) -> bytes:
    return assemble_batch(body, record_count=count, last_offset_delta=lod, base_timestamp=5,
                          max_timestamp=5, attributes=attributes, **fields)


def produce(h: CoreHarness, records: bytes) -> dict[str, Any]:
    answer = call1(h.core, ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 1000, "topics": [
        {"name": "t", "partitions": [{"index": 0, "records": records}]}]})
    return answer["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


POISON = {
    "garbage records": (batch(b"\x07" * 40, 2, 1), ErrorCode.CORRUPT_MESSAGE),
    "negative offset delta": (batch(records_body([0, -1]), 2, 1), ErrorCode.INVALID_RECORD),
    "offset deltas out of order": (batch(records_body([1, 0]), 2, 1),
                                   ErrorCode.INVALID_RECORD),
    "record count 2**31-1": (batch(records_body([0, 1]), 2**31 - 1, 2**31 - 2),
                             ErrorCode.CORRUPT_MESSAGE),
    "fewer records than counted": (batch(records_body([0, 1]), 3, 2),
                                   ErrorCode.CORRUPT_MESSAGE),
    "control batch": (batch(records_body([0]), 1, 0, CONTROL_MASK), ErrorCode.INVALID_RECORD),
    # (transactions exist now: a transactional batch without the request's
    # transactional_id is Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    "transactional batch": (batch(records_body([0]), 1, 0, TRANSACTIONAL_MASK, producer_id=7,
                                  producer_epoch=0, base_sequence=0),
                            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    "transactional batch without a producer id": (
        batch(records_body([0]), 1, 0, TRANSACTIONAL_MASK), ErrorCode.INVALID_RECORD),
}


@pytest.mark.parametrize("case", sorted(POISON))
def test_poisoned_batch_is_refused_and_consumers_read_on(h: CoreHarness, case: str) -> None:
    poison, code = POISON[case]
    assert produce(h, build_batch([(b"a", b"before", 5, ())]))["error_code"] == 0
    answer = produce(h, poison)
    assert answer["error_code"] == code, answer
    assert answer["error_message"]  # precise: names the batch and what is wrong
    assert produce(h, build_batch([(b"b", b"after", 5, ())]))["error_code"] == 0
    log = h.core.partitions[TopicPartition("t", 0)].log
    assert log.log_end_offset == 2  # the poison took no offsets
    values = [r.value for _, data in log.batches() for r in decode_batch(data)]
    assert values == [b"before", b"after"]


def produce_to(h: CoreHarness, topic: str, records: bytes) -> dict[str, Any]:
    answer = call1(h.core, ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 1000, "topics": [
        {"name": topic, "partitions": [{"index": 0, "records": records}]}]})
    return answer["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


def test_timestamps_outside_the_topics_window_are_invalid_timestamp(h: CoreHarness) -> None:
    now = int(time.time() * 1000)
    hour = 3_600_000
    future = build_batch([(b"k", b"ok", now, ()), (b"k", b"later", now + 2 * hour, ())])
    answer = produce(h, future)  # default after.max.ms: one hour (Kafka 4)
    assert answer["error_code"] == ErrorCode.INVALID_TIMESTAMP, answer
    assert "record 1 has timestamp" in answer["error_message"]
    for stamp in (2**63 - 1, now + hour + 60_000):
        assert produce(h, build_batch([(b"k", b"v", stamp, ())]))["error_code"] == \
            ErrorCode.INVALID_TIMESTAMP
    assert produce(h, build_batch([(b"k", b"1970", 5, ())]))["error_code"] == 0  # no floor
    h.create("recent", 1, **{"message.timestamp.before.max.ms": "60000"})
    assert produce_to(h, "recent", build_batch([(b"k", b"1970", 5, ())]))["error_code"] == \
        ErrorCode.INVALID_TIMESTAMP
    assert produce_to(h, "recent", build_batch([(b"k", b"now", now, ())]))["error_code"] == 0
    log = h.core.partitions[TopicPartition("t", 0)].log
    assert [r.value for _, data in log.batches() for r in decode_batch(data)] == [b"1970"]
