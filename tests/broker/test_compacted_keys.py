"""A compacted topic refuses records without a key (INVALID_RECORD, 87), like Kafka.

The Produce handler asks the partition's compacted :class:`storage.log.Log` to check the
keys (``Log.require_keys``) before the leader append, so the error is per partition, the
log is untouched, and the other partitions of the same Produce request are appended.
Keyed records and tombstones (key, no value) pass; topics with ``cleanup_policy=delete``
take keyless records.  A real broker and the Producer client close the loop: the send
fails with InvalidRecordError (not retried) and the next keyed send still succeeds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.core import BrokerCore
from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, InvalidRecordError
from clients.records.record import build_batch
from clients.types import NewTopic
from storage.config import LogConfig
from storage.log.log import Log
from tests.broker.handlers import wire
from tests.broker.processes import BrokerProcess
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

COMPACT = {"cleanup_policy": "compact"}


def batch(*keys: bytes | None, value: bytes | None = b"v") -> bytes:
    return build_batch([(k, value, 1_000 + i, ()) for i, k in enumerate(keys)])


def test_require_keys_refuses_a_keyless_record_on_a_compacted_log(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "c-0", LogConfig(cleanup_policy="compact"))
    try:
        log.require_keys(batch(b"a", b"b"))
        log.require_keys(batch(b"a", value=None))  # a tombstone has a key: fine
        # the keyless record is the second of the second batch
        with pytest.raises(InvalidRecordError, match="without a key") as info:
            log.require_keys(batch(b"c") + batch(b"d", None, b"e"))
        assert info.value.code == ErrorCode.INVALID_RECORD == 87
        assert "c-0" in info.value.message and "offset delta 1" in info.value.message
        log.require_keys(b"\x00" * 10)  # malformed: left to the append's precise error
        assert log.log_end_offset == 0
    finally:
        log.close()


def test_log_with_delete_policy_takes_keyless_records(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "d-0", LogConfig())
    try:
        log.require_keys(batch(None, None))
        assert log.append_as_leader(batch(None, None), 0).last_offset == 1
    finally:
        log.close()


# -- the Produce handler -------------------------------------------------------------------


@pytest.fixture
def core(tmp_path: Path) -> Iterator[BrokerCore]:
    clock = ManualClock()
    c = BrokerCore(BrokerConfig(node_id=0, data_dir=str(tmp_path / "b0")), clock,
                   SystemTimer(clock))
    c.startup()
    c.create_topic(c.validate_new_topic("compacted", 2, 1, COMPACT))
    c.create_topic(c.validate_new_topic("plain", 1, 1, {}))
    try:
        yield c
    finally:
        c.shutdown()


def produce(core: BrokerCore, entries: dict[str, list[tuple[int, bytes]]]
            ) -> dict[tuple[str, int], dict[str, Any]]:
    answers = wire.call(core, ApiKey.PRODUCE, {
        "acks": 1, "timeout_ms": 1000, "transactional_id": None,
        "topics": [{"name": name, "partitions": [{"index": i, "records": data}
                                                 for i, data in parts]}
                   for name, parts in entries.items()]})
    answer = answers[0]
    assert answer is not None
    return {(t["name"], p["index"]): p
            for t in answer["responses"] for p in t["partition_responses"]}


def test_produce_rejects_only_the_partition_with_a_keyless_record(core: BrokerCore) -> None:
    result = produce(core, {"compacted": [(0, batch(b"k", None)), (1, batch(b"k1", b"k2"))],
                            "plain": [(0, batch(None))]})
    assert result[("compacted", 0)]["error_code"] == ErrorCode.INVALID_RECORD
    assert result[("compacted", 0)]["base_offset"] == -1
    assert "without a key" in result[("compacted", 0)]["error_message"]
    assert (result[("compacted", 1)]["error_code"], result[("compacted", 1)]["base_offset"]) \
        == (0, 0)
    assert (result[("plain", 0)]["error_code"], result[("plain", 0)]["base_offset"]) == (0, 0)
    assert core.partitions[("compacted", 0)].log_end_offset == 0  # untouched
    assert core.partitions[("compacted", 1)].log_end_offset == 2


# -- a real broker and the Producer client -------------------------------------------------


@pytest.mark.multiprocess
def test_producer_gets_invalid_record_for_a_keyless_send_to_a_compacted_topic(
        tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "broker") as broker:
        with Admin(broker.bootstrap) as admin:
            admin.create_topics([NewTopic("compacted", 1, 1, {"cleanup.policy": "compact"})])
        with Producer(broker.bootstrap, acks="all", retries=3) as producer:
            keyed = producer.send("compacted", b"v", key=b"k", partition=0)
            assert keyed.result(30).offset == 0
            keyless = producer.send("compacted", b"v", partition=0)
            with pytest.raises(InvalidRecordError, match="without a key"):
                keyless.result(30)
            assert producer.send("compacted", b"w", key=b"k", partition=0).result(30).offset \
                == 1  # nothing of the refused batch was appended
