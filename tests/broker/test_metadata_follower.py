"""The metadata follower acts on complete images only; partition dirs carry topic ids.

A restarting broker replays the metadata log from offset 0, possibly over several Fetch
answers.  Here its replica of topic ``t`` (topic id 2, with records) is on disk, and the
log says: ``t`` created with id 1, deleted, re-created with id 2.  Reconciling after the
first answer (id 1) and again after the second (id 2) dropped the live log; with
reconcile deferred to the log's high watermark, and ``partition.metadata`` naming the
topic id, the replica keeps its records.  The initial catch-up (the broker serves only
then) needs the broker's own registration applied and the image acted on, and is
reported to the controller at once.  No sockets:
the follower's connection is a stand-in serving the log in answers of a few records each.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.core import LOG_OPENS_PER_TURN, BrokerCore
from broker.metadata.follower import MetadataFollower
from broker.metadata.image import MetadataImage
from broker.metadata.log_reader import MetadataLogReader
from broker.metadata.records import (
    AssignTopicIdRecord,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    encode_record,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.topics import TopicPartition
from clients.records.record import build_batch
from storage.partition_metadata import read_topic_id, write_topic_id
from tests.replication.helpers import batch, values
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

KEY = TopicPartition("t", 0)
LOG = [RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001), UnfenceBrokerRecord(1, 0),
       TopicRecord("t", 1, 1, 1), PartitionRecord("t", 0, (1,), 1, 0, (1,), 0),
       RemoveTopicRecord("t"),
       TopicRecord("t", 2, 1, 1), PartitionRecord("t", 0, (1,), 1, 0, (1,), 0)]


class ChunkedMetadataLog:
    """Serves ``records`` as the controller's metadata log, ``per_answer`` at a time."""

    def __init__(self, records: list[MetadataRecord], per_answer: int) -> None:
        self.records, self.per_answer = records, per_answer

    async def request(self, api_key: int, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        start = body["topics"][0]["partitions"][0]["fetch_offset"]
        chunk = self.records[start:start + self.per_answer]
        data = build_batch([(None, encode_record(r), 0, ()) for r in chunk],
                           base_offset=start) if chunk else b""
        return {"error_code": 0, "responses": [{"partitions": [{
            "error_code": 0, "high_watermark": len(self.records), "records": data}]}]}


@pytest.fixture
def core(tmp_path: Path) -> Iterator[BrokerCore]:
    clock = ManualClock(1_000_000)
    config = BrokerConfig(node_id=1, data_dir=str(tmp_path / "b1"),
                          controller_address="127.0.0.1:1")
    core = BrokerCore(config, clock, SystemTimer(clock))
    core.startup()
    core.image = MetadataImage()
    try:
        yield core
    finally:
        core.shutdown()


def replay(core: BrokerCore, per_answer: int, records: list[MetadataRecord] = LOG) -> int:
    """Feed ``records`` through the follower's fetch steps; the event-loop turns another
    task got meanwhile."""
    follower = MetadataFollower.__new__(MetadataFollower)  # no connections, no tasks
    follower.core = core
    follower.metadata_conn = ChunkedMetadataLog(records, per_answer)  # type: ignore[assignment]
    follower.caught_up = asyncio.Event()
    follower.broker_epoch = -1  # not registered: the initial catch-up is not tested here
    follower.reader = MetadataLogReader(core.image)
    turns = 0

    async def ticker() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    async def run() -> None:
        assert core.image is not None
        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        start = turns
        while core.image.last_applied_offset + 1 < len(records):
            await follower.fetch_step()
        tick.cancel()
        return turns - start

    return asyncio.run(run())


def test_a_replica_survives_a_replay_that_deletes_and_recreates_its_topic(
        core: BrokerCore) -> None:
    log_ = core.log_manager.create_log("t", 0)  # on disk from before the restart
    log_.append_as_leader(batch(b"kept-1", b"kept-2"), leader_epoch=0)
    write_topic_id(log_.dir, 2)
    replay(core, per_answer=4)  # answer 1 ends with t = id 1, answer 2 with t = id 2
    partition = core.partitions[KEY]
    assert values(partition.log) == [(0, b"kept-1"), (1, b"kept-2")]
    assert read_topic_id(partition.log.dir) == 2 and core.hosted_topic_ids["t"] == 2


def test_a_log_of_a_deleted_topic_with_the_same_name_is_replaced(core: BrokerCore) -> None:
    log_ = core.log_manager.create_log("t", 0)  # the old topic's log: deleted meanwhile
    log_.append_as_leader(batch(b"old"), leader_epoch=0)
    write_topic_id(log_.dir, 1)
    replay(core, per_answer=100)
    partition = core.partitions[KEY]
    assert values(partition.log) == [] and read_topic_id(partition.log.dir) == 2


def test_an_unlabelled_log_is_adopted_and_labelled(core: BrokerCore) -> None:
    log_ = core.log_manager.create_log("t", 0)  # written before partition.metadata existed
    log_.append_as_leader(batch(b"kept"), leader_epoch=0)
    replay(core, per_answer=100)
    partition = core.partitions[KEY]
    assert values(partition.log) == [(0, b"kept")] and read_topic_id(partition.log.dir) == 2


def test_a_topic_of_many_partitions_opens_its_logs_a_few_per_event_loop_turn(
        core: BrokerCore) -> None:
    # creating a log is several file creations (7-10 ms each on a slow disk): all of a
    # large topic's at once held the loop past the broker's heartbeat session
    n = 4 * LOG_OPENS_PER_TURN
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001), UnfenceBrokerRecord(1, 0),
        TopicRecord("many", 3, n, 1),
        *(PartitionRecord("many", i, (1,), 1, 3, (1,), 0) for i in range(n))]
    turns = replay(core, per_answer=len(records), records=records)
    assert turns >= n // LOG_OPENS_PER_TURN  # the loop ran other tasks in between
    for i in range(n):
        partition = core.partitions[TopicPartition("many", i)]
        assert partition.is_leader and partition.leader_epoch == 3
        assert read_topic_id(partition.log.dir) == 3


UUID_1, UUID_2 = bytes(range(1, 17)), bytes(range(2, 18))
UPGRADED = [*LOG, AssignTopicIdRecord("t", UUID_2)]  # an old log, upgraded by the controller


def test_an_old_partition_metadata_is_rewritten_with_the_id_the_log_gives_its_topic(
        core: BrokerCore) -> None:
    log_ = core.log_manager.create_log("t", 0)
    log_.append_as_leader(batch(b"kept"), leader_epoch=0)
    write_topic_id(log_.dir, 2)  # our old form: topic t of incarnation 2
    replay(core, per_answer=100, records=UPGRADED)
    partition = core.partitions[KEY]
    assert values(partition.log) == [(0, b"kept")] and read_topic_id(partition.log.dir) == UUID_2


def test_a_hosted_replica_is_relabelled_when_its_topic_gets_its_id(core: BrokerCore) -> None:
    replay(core, per_answer=100)  # the broker hosts t before the controller upgrades
    partition = core.partitions[KEY]
    assert read_topic_id(partition.log.dir) == 2 and core.hosted_topic_ids["t"] == 2
    replay(core, per_answer=100, records=UPGRADED)
    assert core.partitions[KEY] is partition and read_topic_id(partition.log.dir) == UUID_2


def test_a_log_labelled_with_another_topic_id_is_replaced(core: BrokerCore) -> None:
    records: list[MetadataRecord] = [
        *LOG[:2], TopicRecord("t", 2, 1, 1, {}, UUID_2),
        PartitionRecord("t", 0, (1,), 1, 2, (1,), 0)]
    log_ = core.log_manager.create_log("t", 0)  # a deleted "t": its id is another
    log_.append_as_leader(batch(b"old"), leader_epoch=0)
    write_topic_id(log_.dir, UUID_1)
    replay(core, per_answer=100, records=records)
    partition = core.partitions[KEY]
    assert values(partition.log) == [] and read_topic_id(partition.log.dir) == UUID_2


def test_a_log_labelled_with_its_topics_id_is_kept(core: BrokerCore) -> None:
    records: list[MetadataRecord] = [
        *LOG[:2], TopicRecord("t", 2, 1, 1, {}, UUID_2),
        PartitionRecord("t", 0, (1,), 1, 2, (1,), 0)]
    log_ = core.log_manager.create_log("t", 0)
    log_.append_as_leader(batch(b"kept"), leader_epoch=0)
    write_topic_id(log_.dir, UUID_2)
    replay(core, per_answer=100, records=records)
    assert values(core.partitions[KEY].log) == [(0, b"kept")]


def follow(core: BrokerCore, records: list[MetadataRecord], per_answer: int,
           broker_epoch: int, steps: int) -> list[tuple[int, bool]]:
    """``steps`` fetch steps of a follower registered at offset ``broker_epoch``: the
    offset applied and whether it has caught up (``caught_up``) after each."""
    follower = MetadataFollower.__new__(MetadataFollower)  # no connections, no tasks
    follower.core = core
    follower.metadata_conn = ChunkedMetadataLog(records, per_answer)  # type: ignore[assignment]
    follower.caught_up = asyncio.Event()
    follower.broker_epoch = broker_epoch
    follower.reader = MetadataLogReader(core.image)
    follower._heartbeat_now = asyncio.Event()
    seen: list[tuple[int, bool]] = []

    async def run() -> None:
        assert core.image is not None
        for _ in range(steps):
            await follower.fetch_step()
            caught_up = follower.caught_up.is_set()
            if caught_up:  # the image it serves from was acted on
                assert core.image_reconciled and KEY in core.partitions
            seen.append((core.image.last_applied_offset, caught_up))

    asyncio.run(run())
    return seen


def test_caught_up_once_the_registration_is_applied_and_the_image_acted_on(
        core: BrokerCore) -> None:
    # registered at offset 4; answers of 3 records: offset 5 holds the registration but
    # is not the log's end (nothing acted on yet), offset 6 is
    assert follow(core, LOG, per_answer=3, broker_epoch=4, steps=3) == [
        (2, False), (5, False), (6, True)]


def test_not_caught_up_at_a_high_watermark_below_the_registration(
        core: BrokerCore) -> None:
    # the controller answered the registration (offset 8) before this fetch saw it: at
    # the log's end, but the image does not hold this broker yet
    records = list(LOG)
    assert follow(core, records, per_answer=100, broker_epoch=8, steps=2) == [
        (6, False), (6, False)]
    records += [RegisterBrokerRecord(2, 7, "b", "127.0.0.1", 9002),
                RegisterBrokerRecord(1, 8, "a", "127.0.0.1", 9001)]
    assert follow(core, records, per_answer=100, broker_epoch=8, steps=1) == [(8, True)]


class LongPolledLog(ChunkedMetadataLog):
    """The metadata log as a long poll: an answer with nothing new waits a moment."""

    async def request(self, api_key: int, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        answer = await super().request(api_key, body)
        if not answer["responses"][0]["partitions"][0]["records"]:
            await asyncio.sleep(0.05)
        return answer

    async def aclose(self) -> None:
        pass


class Controller:
    """Registers broker 1 at offset 4; counts it caught up from a heartbeat at offset 4."""

    def __init__(self) -> None:
        self.heartbeat_offsets: list[int] = []
        self.unfenced = asyncio.Event()

    async def request(self, api_key: int, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        if api_key == ApiKey.BROKER_REGISTRATION:
            return {"error_code": 0, "broker_epoch": 4}
        offset = body["current_metadata_offset"]
        self.heartbeat_offsets.append(offset)
        if offset >= 4:
            self.unfenced.set()
        return {"error_code": 0, "is_fenced": offset < 4, "should_shut_down": False,
                "report_replica_logs": False}


def test_the_catch_up_is_reported_at_once_not_a_heartbeat_interval_later(
        core: BrokerCore) -> None:
    # the controller unfences a broker on the heartbeat that reports the catch-up: a
    # minute between heartbeats would keep it fenced that long, serving all the while
    core.config = dataclasses.replace(core.config, broker_heartbeat_interval_ms=60_000,
                                      broker_session_timeout_ms=120_000)
    controller = Controller()

    async def run() -> None:
        follower = MetadataFollower(core, controller,  # type: ignore[arg-type]
                                    LongPolledLog(LOG, per_answer=100))
        follower.start()
        try:
            await asyncio.wait_for(follower.caught_up.wait(), 10)
            await asyncio.wait_for(controller.unfenced.wait(), 10)
        finally:
            await follower.stop()

    asyncio.run(run())
    assert controller.heartbeat_offsets[0] < 4 <= controller.heartbeat_offsets[-1]
