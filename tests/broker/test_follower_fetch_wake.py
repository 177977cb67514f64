"""A follower's parked Fetch on the acks=all path (issue 36): an append completes it in
the same call, and its partition is read once, at completion.

Drives a :class:`BrokerCore` in controller mode (broker 1 leads, broker 2 follows) with a
manual clock: broker 2's Fetch at the log end parks; a Produce (acks=all) appends, the
parked Fetch completes inside that Produce's handler with the appended batch (no timer
tick between), and the partition's ``read_records`` runs once for it (the sizing check
of a follower's parked fetch counts the batch at the LEO without reading it).  A Fetch
that needs more bytes than the append brought stays parked.  The follower's next Fetch
advances the HW and completes the parked Produce in its own handler.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.metadata.records import (
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.topics import TopicPartition
from clients.records.record import build_batch
from tests.broker.handlers import wire
from tests.broker.image_feed import ImageFeed
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

TOPIC = "wake"


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[BrokerCore]:
    clock = ManualClock()
    config = BrokerConfig(node_id=1, data_dir=str(tmp_path / "b1"),
                          controller_address="127.0.0.1:9")
    core = BrokerCore(config, clock, SystemTimer(clock))
    core.startup()
    ImageFeed(core).apply(
        RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001),
        RegisterBrokerRecord(2, 1, "b", "127.0.0.1", 9002),
        UnfenceBrokerRecord(1, 0), UnfenceBrokerRecord(2, 1),
        TopicRecord(TOPIC, 7, 1, 2),
        PartitionRecord(TOPIC, 0, (1, 2), 1, 0, (1, 2), 0))
    try:
        yield core
    finally:
        core.shutdown()


def follower_fetch(core: BrokerCore, offset: int, min_bytes: int = 1) -> list[Any]:
    body = {"replica_id": 2, "max_wait_ms": 500, "min_bytes": min_bytes,
            "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
    return wire.call(core, ApiKey.FETCH, body)


def produce(core: BrokerCore, values: list[bytes]) -> list[Any]:
    return wire.call(core, ApiKey.PRODUCE, {
        "acks": -1, "timeout_ms": 1000, "transactional_id": None,
        "topics": [{"name": TOPIC, "partitions": [
            {"index": 0, "records": build_batch([(None, v, 1, ()) for v in values])}]}]})


def records_of(answer: Any) -> bytes:
    return bytes(answer["responses"][0]["partitions"][0]["records"])


def test_an_append_completes_the_parked_follower_fetch_reading_once(
        leader: BrokerCore, monkeypatch: pytest.MonkeyPatch) -> None:
    partition = leader.partitions[TopicPartition(TOPIC, 0)]
    reads = []
    read_records = partition.read_records

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(args)
        return read_records(*args, **kwargs)

    monkeypatch.setattr(partition, "read_records", counted)
    fetch = follower_fetch(leader, 0)
    assert fetch == [] and leader.fetch_purgatory.watched_for((TOPIC, 0)) == 1
    reads.clear()
    produced = produce(leader, [b"v0", b"v1"])
    assert produced == []  # acks=all: waits for broker 2
    assert len(fetch) == 1, "the append answers the parked follower fetch at once"
    assert len(reads) == 1, "read once, at completion (not also to size it)"
    assert len(records_of(fetch[0])) > 0
    # broker 2 has the batch: its next Fetch moves the HW and answers the Produce
    assert follower_fetch(leader, 2) == []
    assert partition.high_watermark == 2
    assert produced and produced[0] is not None
    assert produced[0]["responses"][0]["partition_responses"][0]["error_code"] == 0


def test_a_follower_fetch_needing_more_bytes_stays_parked(leader: BrokerCore) -> None:
    fetch = follower_fetch(leader, 0, min_bytes=1 << 16)
    assert fetch == []
    produce(leader, [b"small"])
    assert fetch == [] and leader.fetch_purgatory.watched_for((TOPIC, 0)) == 1
    produce(leader, [b"x" * 70_000])
    assert len(fetch) == 1 and len(records_of(fetch[0])) >= 1 << 16
