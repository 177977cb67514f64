"""Clients cannot write the internal topics (issue 30, item 2).

The attack: a plain Produce of a forged offset-commit record into the group's
``__consumer_offsets`` partition was accepted, and once the coordinator reloaded the
partition the group's committed offset was the forged 999999 instead of 42.  Now a
client's Produce and DeleteRecords to an internal topic, and its CreateTopics /
DeleteTopics / CreatePartitions naming one, are refused with INVALID_TOPIC_EXCEPTION;
and a coordinator loading its partition skips records that do not decode, counting them
in its log, without stopping the load.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import Producer as CKProducer

from broker.coordination.placement import partition_for
from broker.group.metadata import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import OFFSETS_TOPIC, TopicPartition
from clients.records.record import build_batch
from clients.types import NewTopic
from tests.broker.processes import BrokerProcess, wait_until
from tests.broker.raw_kafka import call, connect

pytestmark = pytest.mark.multiprocess

GROUP, TOPIC = "billing", "orders"
OFFSETS_PARTITIONS = 3
TP = TopicPartition(TOPIC, 0)


def forged_commit(offset: int) -> bytes:
    """A valid batch holding an offset commit of GROUP for TP at ``offset``."""
    key = encode_offset_commit_key(OffsetCommitKey(GROUP, TOPIC, 0))
    value = encode_offset_commit_value(OffsetCommitValue(offset, -1, None, 0))
    return build_batch([(key, value, int(time.time() * 1000), ())])


def committed(bootstrap: str) -> int | None:
    with Consumer(bootstrap, group_id=GROUP, enable_auto_commit=False) as consumer:
        found = consumer.committed([TP], timeout_ms=30_000)[TP]
        return None if found is None else found.offset


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "broker", overrides={
            "offsets_topic_num_partitions": OFFSETS_PARTITIONS,
            "offsets_topic_replication_factor": 1}) as b:
        with Admin(b.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 1, {})])
        with Consumer(b.bootstrap, group_id=GROUP, enable_auto_commit=False) as consumer:
            consumer.assign([TP])
            consumer.commit({TP: 42})
        yield b


def test_a_forged_offset_commit_produced_to_the_offsets_topic_is_refused(
        broker: BrokerProcess) -> None:
    index = partition_for(GROUP, OFFSETS_PARTITIONS)
    sock = connect(broker.port)
    try:
        answer = call(sock, ApiKey.PRODUCE, 9, {
            "transactional_id": None, "acks": -1, "timeout_ms": 10_000,
            "topics": [{"name": OFFSETS_TOPIC, "partitions": [
                {"index": index, "records": forged_commit(999_999)}]}]})
        (result,) = answer["responses"][0]["partition_responses"]
        assert result["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION, result
        assert "internal topic" in result["error_message"]
        deleted = call(sock, ApiKey.DELETE_RECORDS, 2, {"topics": [
            {"name": OFFSETS_TOPIC, "partitions": [{"partition_index": index, "offset": -1}]}],
            "timeout_ms": 10_000})
        part = deleted["topics"][0]["partitions"][0]
        assert part["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION, part
    finally:
        sock.close()
    # the coordinator loads the partition again (a restart): the commit is still 42
    broker.stop()
    broker.start()
    assert committed(broker.bootstrap) == 42


def test_confluent_kafka_cannot_produce_to_the_offsets_topic(broker: BrokerProcess) -> None:
    results: list[Any] = []
    producer = CKProducer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                           "message.send.max.retries": 0, "message.timeout.ms": 30_000})
    producer.produce(OFFSETS_TOPIC, value=forged_commit(999_999),
                     partition=partition_for(GROUP, OFFSETS_PARTITIONS),
                     on_delivery=lambda err, _msg: results.append(err))
    assert producer.flush(30) == 0
    (error,) = results
    assert error is not None and error.code() == KafkaError.TOPIC_EXCEPTION, error
    assert committed(broker.bootstrap) == 42


def test_clients_cannot_create_delete_or_grow_an_internal_topic(
        broker: BrokerProcess) -> None:
    sock = connect(broker.port)
    try:
        deleted = call(sock, ApiKey.DELETE_TOPICS, 4, {"topic_names": [OFFSETS_TOPIC],
                                                       "timeout_ms": 10_000})
        assert deleted["responses"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        grown = call(sock, ApiKey.CREATE_PARTITIONS, 1, {"topics": [
            {"name": OFFSETS_TOPIC, "count": 10, "assignments": None}],
            "timeout_ms": 10_000, "validate_only": False})
        assert grown["results"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        created = call(sock, ApiKey.CREATE_TOPICS, 4, {"topics": [
            {"name": "__transaction_state", "num_partitions": 1, "replication_factor": 1,
             "assignments": [], "configs": []}], "timeout_ms": 10_000,
            "validate_only": False})
        assert created["topics"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        metadata = call(sock, ApiKey.METADATA, 1, {"topics": [{"name": OFFSETS_TOPIC}]})
        (offsets,) = metadata["topics"]
        assert offsets["is_internal"] and len(offsets["partitions"]) == OFFSETS_PARTITIONS
    finally:
        sock.close()
    assert committed(broker.bootstrap) == 42


def test_a_coordinator_skips_records_of_its_partition_that_do_not_decode(
        tmp_path: Path) -> None:
    """Garbage written straight into the log (as a forged produce once could): the load
    skips it, counts it in the log, and the real commits around it still load."""
    overrides = {"offsets_topic_num_partitions": 1, "offsets_topic_replication_factor": 1}
    data_dir = tmp_path / "broker"
    with BrokerProcess(data_dir, overrides=overrides) as broker:
        with Admin(broker.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 1, {})])
        with Consumer(broker.bootstrap, group_id=GROUP, enable_auto_commit=False) as c:
            c.assign([TP])
            c.commit({TP: 42})
    # bypass the refusal: append garbage to the stopped broker's offsets log directly
    from storage.config import LogConfig
    from storage.log.log import Log

    log = Log.open(data_dir / f"{OFFSETS_TOPIC}-0", LogConfig())
    key = encode_offset_commit_key(OffsetCommitKey(GROUP, TOPIC, 0))
    now = int(time.time() * 1000)
    log.append_as_leader(build_batch([
        (b"\x00\x01garbage", b"\xc1", now, ()),  # v1 key that is not msgpack
        (b"\x7f\x7f", b"x", now, ()),  # unknown key version
        (None, b"no key", now, ()),
        (key, b"\x00\x01\x92\x01", now, ()),  # a value too short for its version
        (key, b"", now, ()),  # empty value: no version
    ]), 0)
    log.flush()
    log.close()
    with BrokerProcess(data_dir, overrides=overrides) as broker:
        assert committed(broker.bootstrap) == 42
        wait_until(lambda: any("5 records skipped" in line for line in broker.output), 30,
                   "the load's count of skipped records in the broker's log")
