"""The replica fetcher against a real leader core, through Kafka's codec at our highest
versions (Fetch v12, OffsetsForLeaderEpoch v4, ListOffsets v7): normal replication, a
``diverging_epoch`` answer sending the follower back to truncation, and
OFFSET_OUT_OF_RANGE below the leader's log start restarting the follower's log there.

No sockets and no background task: the fetcher's connection is replaced by one that
runs the leader's handlers (advancing the leader's manual clock while a fetch is
parked), and the tests call the fetcher's steps (``_truncate``, ``_fetch``) directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from broker.metadata.replica_logs import replica_log_reports
from broker.replica_fetcher import ReplicaFetcher
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from clients.records.batch import iter_batches
from replication.follower_fetch import FetchState
from replication.partition import Partition
from storage.log_dirs import CLEAN_SHUTDOWN_MARKER
from tests.broker.handlers import wire
from tests.replication.helpers import batch, values
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

TOPIC = "r"
KEY = TopicPartition(TOPIC, 0)


class Node:
    """A controller-mode core (no controller link) whose image the test writes."""

    def __init__(self, root: Path, node_id: int, **overrides: Any) -> None:
        self.clock = ManualClock(1_000_000)
        self.timer = SystemTimer(self.clock)
        config = BrokerConfig(node_id=node_id, data_dir=str(root / f"b{node_id}"),
                              controller_address="127.0.0.1:1", replica_fetch_wait_max_ms=50,
                              **overrides)
        self.core = BrokerCore(config, self.clock, self.timer)
        self.core.startup()
        self.core.image = MetadataImage()

    def apply(self, *records: MetadataRecord) -> None:
        image = self.core.image
        assert image is not None
        for record in records:
            image.apply(record, image.last_applied_offset + 1)
        self.core.reconcile()

    @property
    def partition(self) -> Partition:
        return self.core.partitions[KEY]


class LeaderLink:
    """Stands in for the fetcher's AsyncConnection: each request goes through the
    leader's handler at the version asked (default: our highest the body allows); a
    parked fetch waits on the leader's clock."""

    def __init__(self, leader: Node) -> None:
        self.leader = leader
        self.sent: list[tuple[int, dict[str, Any]]] = []

    async def request(self, api_key: int, body: dict[str, Any],
                      **options: Any) -> dict[str, Any]:
        self.sent.append((api_key, body))
        answers = wire.call(self.leader.core, api_key, body, options.get("api_version"))
        for _ in range(1000):
            if answers:
                break
            self.leader.clock.advance(10)
            self.leader.timer.advance_clock()
        assert answers and answers[0] is not None, "the leader never answered"
        return answers[0]

    async def aclose(self) -> None:
        pass


def cluster_records(isr: tuple[int, ...]) -> list[MetadataRecord]:
    return [RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001),
            RegisterBrokerRecord(2, 1, "b", "127.0.0.1", 9002),
            UnfenceBrokerRecord(1, 0), UnfenceBrokerRecord(2, 1),
            TopicRecord(TOPIC, 4, 1, 2),
            PartitionRecord(TOPIC, 0, (1, 2), 1, 0, isr, 0)]


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    leader, follower = Node(tmp_path, 1), Node(tmp_path, 2)
    try:
        yield leader, follower
    finally:
        leader.core.shutdown()
        follower.core.shutdown()


def fetcher_of(follower: Node, leader: Node, *, truncating: bool) -> tuple[ReplicaFetcher,
                                                                         LeaderLink]:
    core = follower.core
    fetcher = ReplicaFetcher(core.config, core.cluster_secret, core.clock,
                             core.repair.on_segment_repaired, 1, "127.0.0.1", 9001)
    link = LeaderLink(leader)
    fetcher.conn = link  # type: ignore[assignment]
    partition = follower.partition
    fetcher.states[KEY] = FetchState(partition, partition.leader_epoch, truncating)
    return fetcher, link


def append_as_leader(node: Node, *vals: bytes) -> None:
    node.partition.append_records_as_leader(batch(*vals))


def diverged(nodes: tuple[Node, Node]) -> tuple[Node, Node]:
    """Leader with a, b (epoch 0); the follower has a and b, then y and z written in an
    epoch 1 the leader never had."""
    leader, follower = nodes
    for node in nodes:
        node.apply(*cluster_records((1, 2)))
    append_as_leader(leader, b"a", b"b")
    follower.partition.append_records_as_follower(batch(b"a", b"b", epoch=0), 0)
    follower.partition.append_records_as_follower(batch(b"y", b"z", base_offset=2, epoch=1),
                                                  0)
    return leader, follower


def test_truncate_then_fetch_replicates_with_the_v12_fields(
        nodes: tuple[Node, Node]) -> None:
    leader, follower = nodes
    leader.apply(*cluster_records((1, 2)))
    follower.apply(*cluster_records((1, 2)))
    append_as_leader(leader, b"a", b"b", b"c")
    fetcher, link = fetcher_of(follower, leader, truncating=True)
    asyncio.run(fetcher._truncate())
    assert not fetcher.states[KEY].truncating
    asyncio.run(fetcher._fetch())  # the follower's LEO reaches the leader's
    asyncio.run(fetcher._fetch())  # the leader's HW reaches the follower
    assert values(follower.partition.log) == values(leader.partition.log)
    assert follower.partition.high_watermark == 3 == leader.partition.high_watermark
    fetch = [body for api, body in link.sent if api == ApiKey.FETCH][-1]
    (p,) = fetch["topics"][0]["partitions"]
    assert (fetch["replica_id"], fetch["session_epoch"], p["partition"], p["fetch_offset"],
            p["last_fetched_epoch"], p["current_leader_epoch"]) == (2, 1, 0, 3, 0, 0)
    assert fetch["session_id"] != 0  # the second fetch: incremental in the leader's session


def test_a_diverging_epoch_sends_the_follower_back_to_truncation(
        nodes: tuple[Node, Node]) -> None:
    leader, follower = diverged(nodes)
    moved = PartitionRecord(TOPIC, 0, (1, 2), 1, 2, (1, 2), 1)  # leader 1 again, epoch 2
    leader.apply(moved)
    follower.apply(moved)
    append_as_leader(leader, b"x")
    fetcher, _ = fetcher_of(follower, leader, truncating=False)  # as if truncation passed
    asyncio.run(fetcher._fetch())
    assert fetcher.states[KEY].truncating  # diverging_epoch: no records appended
    assert follower.partition.log_end_offset == 4
    asyncio.run(fetcher._truncate())
    assert follower.partition.log_end_offset == 2
    asyncio.run(fetcher._fetch())
    assert values(follower.partition.log) == values(leader.partition.log) == [
        (0, b"a"), (1, b"b"), (2, b"x")]


def test_behind_the_leaders_log_start_restarts_the_log_there(
        nodes: tuple[Node, Node]) -> None:
    leader, follower = nodes
    leader.apply(*cluster_records((1,)))  # the follower is out of the ISR
    follower.apply(*cluster_records((1,)))
    append_as_leader(leader, *(b"v%d" % i for i in range(10)))
    assert leader.partition.high_watermark == 10
    deleted = wire.call1(leader.core, ApiKey.DELETE_RECORDS, {"topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 6}]}],
        "timeout_ms": 1000})
    assert deleted["topics"][0]["partitions"][0]["low_watermark"] == 6
    fetcher, link = fetcher_of(follower, leader, truncating=False)
    asyncio.run(fetcher._fetch())  # OFFSET_OUT_OF_RANGE -> ListOffsets earliest
    assert [api for api, _ in link.sent] == [ApiKey.FETCH, ApiKey.LIST_OFFSETS]
    assert (follower.partition.log_start_offset, follower.partition.log_end_offset) == (6, 6)
    # the leader's log start falls inside its one batch (0..9): the empty log restarts at
    # the batch (Kafka's rule) and takes the leader's log start again
    asyncio.run(fetcher._fetch())
    assert values(follower.partition.log) == values(leader.partition.log)
    assert (follower.partition.log_start_offset, follower.partition.log_end_offset) == (6, 10)


def test_an_empty_log_beyond_the_leaders_end_restarts_at_its_log_start(
        nodes: tuple[Node, Node]) -> None:
    """A follower restarted (empty) at an earlier leader's log start, above the end of a
    leader elected after data was lost (found by the simulation with retention, lossy
    disks, seed 1035): it has no epoch for the truncation handshake to compare, so it
    restarts at this leader's log start instead of fetching out of range forever."""
    leader, follower = nodes
    leader.apply(*cluster_records((1,)))
    follower.apply(*cluster_records((1,)))
    append_as_leader(leader, *(b"v%d" % i for i in range(10)))
    follower.partition.truncate_fully_and_start_at(20)
    fetcher, link = fetcher_of(follower, leader, truncating=True)
    for _ in range(6):
        if fetcher.states[KEY].truncating:
            asyncio.run(fetcher._truncate())
        else:
            asyncio.run(fetcher._fetch())
    assert ApiKey.LIST_OFFSETS in [api for api, _ in link.sent]
    assert values(follower.partition.log) == values(leader.partition.log)
    assert (follower.partition.log_start_offset, follower.partition.log_end_offset) == (0, 10)


def test_a_truncation_answer_for_a_replaced_state_is_ignored(
        nodes: tuple[Node, Node]) -> None:
    # the partition is removed and re-added (new leader epoch, say) while the
    # OffsetsForLeaderEpoch request is in flight: that answer was for the old state
    leader, follower = diverged(nodes)
    fetcher, link = fetcher_of(follower, leader, truncating=True)
    replaced = FetchState(follower.partition, follower.partition.leader_epoch)
    asked = link.request

    async def re_add_while_in_flight(api_key: int, body: dict[str, Any],
                                     **options: Any) -> dict[str, Any]:
        answer = await asked(api_key, body, **options)
        fetcher.states[KEY] = replaced
        return answer

    link.request = re_add_while_in_flight  # type: ignore[method-assign]
    asyncio.run(fetcher._truncate())
    assert fetcher.states[KEY] is replaced and replaced.truncating  # asks again itself
    assert follower.partition.log_end_offset == 4  # nothing cut on the old answer


def _in_sync_over_rolled_segments(leader: Node, follower: Node
                                  ) -> tuple[ReplicaFetcher, list[tuple[int, bytes | None]]]:
    """Leader 1 and follower 2 in sync over 40 records in small segments (fetched a few
    at a time: the follower rolls segments too); the fetcher and the values."""
    for node in (leader, follower):
        node.apply(*cluster_records((1, 2)))
    fetcher, _ = fetcher_of(follower, leader, truncating=True)
    asyncio.run(fetcher._truncate())
    for i in range(40):
        append_as_leader(leader, b"value-%03d" % i + bytes(60))
        if i % 4 == 3:
            asyncio.run(fetcher._fetch())
    for _ in range(3):
        asyncio.run(fetcher._fetch())
    expected = values(leader.partition.log)
    assert values(follower.partition.log) == expected and len(expected) == 40
    return fetcher, expected


def _flip_a_byte(path: Path, at: int = 100) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x10]))


def _scrub_until_damage(node: Node) -> list[Any]:
    """Step the node's background CRC check until it reports damage."""
    for _ in range(1000):
        found = node.core.repair.run_scrubber()
        if found:
            return found
    raise AssertionError("the scrubber found nothing")


def _segment_files(node: Node) -> dict[int, tuple[int, int]]:
    """Each segment's base offset -> (inode, size) of its ``.log`` file."""
    return {seg.base_offset: (seg.log_path.stat().st_ino, seg.log_path.stat().st_size)
            for seg in node.partition.log.segments}


def _repair_rounds(fetcher: ReplicaFetcher, rounds: int = 20) -> None:
    for _ in range(rounds):
        asyncio.run(fetcher._fetch())
        asyncio.run(fetcher._repair())
        fetcher.session.backoff = False


def test_the_scrubber_repairs_a_follower_segment_in_place(tmp_path: Path) -> None:
    # a bit flip in an old segment of the follower: found by the background CRC check,
    # that one segment is written again from the leader's copy; the follower keeps its
    # log end, every other segment (same files) and its place in the ISR
    leader, follower = (Node(tmp_path, i, segment_bytes=1024) for i in (1, 2))
    try:
        fetcher, expected = _in_sync_over_rolled_segments(leader, follower)
        segments = follower.partition.log.segments
        assert len(segments) > 3
        damaged = segments[1]
        before = _segment_files(follower)
        leo = follower.partition.log_end_offset
        _flip_a_byte(damaged.log_path)
        found = _scrub_until_damage(follower)
        assert [d.segment_base_offset for d in found] == [damaged.base_offset]
        assert follower.partition.log_end_offset == leo  # nothing cut
        assert follower.partition.repair is not None
        proposals: list[Any] = []
        leader.core.isr.send_alter_partition = proposals.append
        repaired: list[Any] = []

        def on_repaired(*args: Any) -> None:
            repaired.append(args)
            follower.core.repair.on_segment_repaired(*args)

        fetcher.session.on_repaired = on_repaired
        _repair_rounds(fetcher)
        assert repaired == [(KEY, damaged.base_offset)]
        assert follower.partition.repair is None and follower.partition.damaged is None
        assert proposals == []  # it never left the ISR
        assert values(follower.partition.log) == expected
        after = _segment_files(follower)
        assert after[damaged.base_offset][0] != before[damaged.base_offset][0]  # rewritten
        assert {b: f for b, f in after.items() if b != damaged.base_offset} == {
            b: f for b, f in before.items() if b != damaged.base_offset}  # kept as they were
        assert (follower.partition.log.segments[1].read_bytes(0, damaged.size)
                == leader.partition.log.segments[1].read_bytes(0, damaged.size))
        assert not follower.core.log_manager.scrubber.findings
        assert follower.core.repair.run_scrubber() == []
    finally:
        leader.core.shutdown()
        follower.core.shutdown()


def test_a_damaged_leader_resigns_then_repairs_its_segment_as_a_follower(
        tmp_path: Path) -> None:
    # a bit flip in an old segment of the leader: it hands leadership to the in-sync
    # follower (AlterPartition with the ISR without itself), then, as a follower, writes
    # that segment again from the new leader's copy without cutting its log
    first, second = (Node(tmp_path, i, segment_bytes=1024) for i in (1, 2))
    try:
        _in_sync_over_rolled_segments(first, second)
        expected = values(first.partition.log)
        leo = first.partition.log_end_offset
        damaged = first.partition.log.segments[1]
        _flip_a_byte(damaged.log_path)
        proposals: list[Any] = []
        first.core.isr.send_alter_partition = proposals.append
        found = _scrub_until_damage(first)
        assert [p.new_isr for p in proposals] == [(2,)]  # it resigns
        assert first.partition.repair is not None
        assert first.partition.damaged == (found[0].first_bad_offset,
                                           first.partition.log.segments[2].base_offset)
        # the controller elects 2 (epoch 1); both apply the new partition record
        for node in (first, second):
            node.apply(PartitionRecord(TOPIC, 0, (1, 2), 2, 1, (2,), 1))
        repair, _ = fetcher_of(first, second, truncating=True)
        asyncio.run(repair._truncate())
        assert first.partition.log_end_offset == leo  # nothing cut
        _repair_rounds(repair)
        assert first.partition.repair is None and first.partition.damaged is None
        assert values(first.partition.log) == expected  # copied again from the new leader
        assert first.core.repair.run_scrubber() == []
    finally:
        first.core.shutdown()
        second.core.shutdown()


def test_damage_found_on_each_replica_in_turn_loses_nothing(tmp_path: Path) -> None:
    """The fault run that lost 1.15 M acknowledged records (seed 189380713): the follower
    found a flip in an old segment and cut its log there; before it had copied the rest
    again, the leader found its own flip higher up, and no replica held those records
    any more.  Repaired in place, the follower keeps the later segments; the leader
    resigns to it, repairs its segment from it (served: it lies above the new leader's
    damaged range), rejoins the ISR, and takes over so the other repairs in turn."""
    first, second = (Node(tmp_path, i, segment_bytes=1024) for i in (1, 2))
    try:
        _, expected = _in_sync_over_rolled_segments(first, second)
        low, high = (first.partition.log.segments[i].base_offset for i in (1, 4))
        _flip_a_byte(second.partition.log.segments[1].log_path)  # the follower's, low
        _scrub_until_damage(second)
        assert second.partition.repair is not None  # begun, nothing fetched yet
        _flip_a_byte(first.partition.log.segments[4].log_path)  # then the leader's, higher
        proposals: list[Any] = []
        first.core.isr.send_alter_partition = proposals.append
        _scrub_until_damage(first)
        assert [p.new_isr for p in proposals] == [(2,)]  # the follower is still in sync
        for node in (first, second):  # the controller elects 2
            node.apply(PartitionRecord(TOPIC, 0, (1, 2), 2, 1, (2,), 1))
        served, error = _consume(second, 0)
        assert served == list(range(low)) and error == ErrorCode.KAFKA_STORAGE_ERROR
        served, error = _consume(second, high)  # above its damaged segment: served
        assert error == 0 and served == list(range(high, 40))
        second.core.isr.send_alter_partition = proposals.append
        to_second, _ = fetcher_of(first, second, truncating=True)
        asyncio.run(to_second._truncate())
        _repair_rounds(to_second)
        assert first.partition.repair is None and first.partition.damaged is None
        assert values(first.partition.log) == expected
        assert proposals[-1].new_isr == (2, 1)  # caught up: 2 takes 1 back into the ISR
        second.core.isr.on_alter_partition_answer(proposals[-1], 0, [2, 1], 2)
        for node in (first, second):
            node.apply(PartitionRecord(TOPIC, 0, (1, 2), 2, 1, (2, 1), 2))
        second.core.isr.check_isr()  # 2 still has its damaged segment: it resigns to 1
        assert proposals[-1].new_isr == (1,)
        for node in (first, second):
            node.apply(PartitionRecord(TOPIC, 0, (1, 2), 1, 2, (1,), 3))
        to_first, _ = fetcher_of(second, first, truncating=True)
        asyncio.run(to_first._truncate())
        _repair_rounds(to_first)
        assert second.partition.repair is None and second.partition.damaged is None
        assert values(first.partition.log) == values(second.partition.log) == expected
        assert _consume(first, 0) == (list(range(40)), 0)
    finally:
        first.core.shutdown()
        second.core.shutdown()


def _consume(node: Node, offset: int, replica_id: int = -1) -> tuple[list[int], int]:
    """Fetch from ``offset`` until an error or nothing more: (offsets served, CRC-checked;
    the error code that stopped it, 0 for none)."""
    served: list[int] = []
    for _ in range(200):
        body = {"replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0,
                "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                "session_epoch": -1, "topics": [{"name": TOPIC, "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 4096,
                     "current_leader_epoch": -1, "log_start_offset": -1,
                     "last_fetched_epoch": -1}]}]}
        answers = wire.call(node.core, ApiKey.FETCH, body, version=12)
        part = answers[0]["responses"][0]["partitions"][0]  # type: ignore[index]
        if part["error_code"]:
            return served, part["error_code"]
        data = bytes(part["records"] or b"")
        if not data:
            return served, 0
        for _, header in iter_batches(data, validate=True):
            served.extend(range(header.base_offset, header.last_offset + 1))
            offset = header.last_offset + 1
    raise AssertionError("the consumer never stopped")


def test_a_damaged_leader_alone_in_its_isr_never_serves_the_bad_batch(tmp_path: Path) -> None:
    """Nobody in the ISR holds a good copy to repair from: the leader keeps leading,
    serves every record before the bad batch and answers KAFKA_STORAGE_ERROR from there
    on (to consumers and followers alike), never the corrupt bytes."""
    leader = Node(tmp_path, 1, segment_bytes=1024)
    try:
        leader.apply(*cluster_records((1,)))
        for i in range(40):
            append_as_leader(leader, b"value-%03d" % i + bytes(60))
        assert _consume(leader, 0) == (list(range(40)), 0)
        _flip_a_byte(leader.partition.log.segments[1].log_path)
        proposals: list[Any] = []
        leader.core.isr.send_alter_partition = proposals.append
        found = _scrub_until_damage(leader)
        bad = found[0].first_bad_offset
        assert proposals == [] and leader.partition.is_leader  # nobody to resign to
        assert _consume(leader, 0) == (list(range(bad)), ErrorCode.KAFKA_STORAGE_ERROR)
        assert _consume(leader, bad + 1)[1] == ErrorCode.KAFKA_STORAGE_ERROR
        assert _consume(leader, bad, replica_id=2) == ([], ErrorCode.KAFKA_STORAGE_ERROR)
        # DeleteRecords past the damaged segment (an operator's way out) ends the refusal;
        # into it is not enough (the rest of that segment is not trusted either)
        leader.partition.log.maybe_increment_log_start_offset(bad + 1)
        assert _consume(leader, bad + 1)[1] == ErrorCode.KAFKA_STORAGE_ERROR
        leader.partition.log.maybe_increment_log_start_offset(
            leader.partition.log.segments[2].base_offset)
        served, error = _consume(leader, leader.partition.log_start_offset)
        assert error == 0 and served[-1] == 39
    finally:
        leader.core.shutdown()


def test_an_answer_for_a_log_end_that_moved_during_the_fetch_is_dropped(
        nodes: tuple[Node, Node]) -> None:
    """The scrubber cut the follower's log while its fetch was in flight: the answer
    starts at the old end; appending it would leave a hole (seen in a fault run: a
    follower, then leader, missing 112,600 offsets)."""
    leader, follower = nodes
    for node in (leader, follower):
        node.apply(*cluster_records((1, 2)))
    fetcher, link = fetcher_of(follower, leader, truncating=True)
    asyncio.run(fetcher._truncate())
    append_as_leader(leader, b"a", b"b", b"c", b"d")
    asyncio.run(fetcher._fetch())
    assert follower.partition.log_end_offset == 4
    append_as_leader(leader, b"e", b"f")
    asked = link.request
    cut_at: list[int] = []

    async def cut_while_in_flight(api_key: int, body: dict[str, Any],
                                  **options: Any) -> dict[str, Any]:
        answer = await asked(api_key, body, **options)
        follower.partition.truncate_to(1)  # what a scrubber repair does meanwhile
        cut_at.append(follower.partition.log_end_offset)  # 0: the whole first batch goes
        return answer

    link.request = cut_while_in_flight  # type: ignore[method-assign]
    asyncio.run(fetcher._fetch())
    assert follower.partition.log_end_offset == cut_at[0] < 4  # [4, 6) not appended
    link.request = asked  # type: ignore[method-assign]
    for _ in range(3):
        asyncio.run(fetcher._fetch())
    assert values(follower.partition.log) == values(leader.partition.log)
    offsets = [h.base_offset for h, _ in follower.partition.log.batches()]
    assert offsets == sorted(offsets) and follower.partition.log_end_offset == 6


@pytest.mark.parametrize("restart", ["unclean", "clean"])
def test_damage_found_by_recovery_is_kept_and_repaired_in_place(tmp_path: Path,
                                                                restart: str) -> None:
    # the follower restarts with a damaged durable old segment that its log recovery
    # finds (after a crash its index file is gone, so it is rescanned; after a clean stop
    # a bad header fails the index check): every segment stays, the range is not
    # reported as intact, and the same in-place repair as the scrubber's rewrites it
    # from the leader's copy
    leader, follower = (Node(tmp_path, i, segment_bytes=1024) for i in (1, 2))
    try:
        _fetcher, expected = _in_sync_over_rolled_segments(leader, follower)
        segments = follower.partition.log.segments
        damaged = segments[1]
        leo = follower.partition.log_end_offset
        follower.core.shutdown()
        data_dir = tmp_path / "b2"
        if restart == "unclean":
            (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
            _flip_a_byte(damaged.log_path)  # in a record: a CRC error
            damaged.log_path.with_suffix(".index").unlink()
        else:  # the magic byte of the segment's last batch: its header walk fails
            last = list(iter_batches(damaged.log_path.read_bytes()))[-1][0]
            _flip_a_byte(damaged.log_path, last + 16)
        before = _segment_files_of(data_dir / f"{TOPIC}-0")
        follower = Node(tmp_path, 2, segment_bytes=1024)
        assert _segment_files_of(data_dir / f"{TOPIC}-0") == before  # nothing cut or moved
        (report,) = replica_log_reports(follower.core.log_manager.all_logs(),
                                        follower.core.recovery.recovery_cuts)
        assert report["recovery_cut"]  # registers as cut by recovery, whole log end ...
        follower.apply(*cluster_records((1, 2)))
        partition = follower.partition
        assert partition.log_end_offset == leo
        ((first_bad, until),) = partition.damaged_ranges
        assert until == segments[2].base_offset
        assert report["log_end_offset"] == leo
        assert _damaged_from(follower) == first_bad  # DescribeLogDirs (cluster status)
        found = follower.core.repair.run_scrubber()  # ... and its repair starts (scrubber or not)
        assert found[0].reason == "found by log recovery"  # (the scrubber may find it too)
        assert {d.segment_base_offset for d in found} == {damaged.base_offset}
        assert partition.repair is not None
        fetcher, _ = fetcher_of(follower, leader, truncating=False)
        fetcher.session.on_repaired = follower.core.repair.on_segment_repaired
        _repair_rounds(fetcher)
        assert partition.repair is None and partition.damaged is None
        assert _damaged_from(follower) == -1
        assert values(partition.log) == expected and partition.log_end_offset == leo
        assert all(s.damage is None for s in partition.log.segments)
        assert (partition.log.segments[1].log_path.read_bytes()
                == leader.partition.log.segments[1].log_path.read_bytes())
        (report,) = replica_log_reports(follower.core.log_manager.all_logs(), set())
        assert report["log_end_offset"] == leo
        assert follower.core.repair.run_scrubber() == []
    finally:
        leader.core.shutdown()
        follower.core.shutdown()


@pytest.mark.parametrize("restart", ["unclean", "clean"])
def test_a_restart_during_a_repair_finds_the_damage_again(tmp_path: Path,
                                                          restart: str) -> None:
    # the scrubber found rot (a flipped record byte: the segment's index stays valid)
    # and the follower stopped before its repair ended: the next start knows the range
    # from the segment's damage mark, registers as cut by recovery (the safe election
    # prefers an uncut in-sync replica) and repairs it; the mark goes with the repair
    leader, follower = (Node(tmp_path, i, segment_bytes=1024) for i in (1, 2))
    try:
        _fetcher, expected = _in_sync_over_rolled_segments(leader, follower)
        damaged = follower.partition.log.segments[1]
        leo = follower.partition.log_end_offset
        _flip_a_byte(damaged.log_path)
        (found,) = _scrub_until_damage(follower)
        assert follower.partition.repair is not None
        assert damaged.damage_mark_path.exists()
        follower.core.shutdown()
        if restart == "unclean":
            (tmp_path / "b2" / CLEAN_SHUTDOWN_MARKER).unlink()
        follower = Node(tmp_path, 2, segment_bytes=1024)
        (report,) = replica_log_reports(follower.core.log_manager.all_logs(),
                                        follower.core.recovery.recovery_cuts)
        assert report["recovery_cut"] and report["log_end_offset"] == leo
        follower.apply(*cluster_records((1, 2)))
        partition = follower.partition
        assert partition.log_end_offset == leo
        assert [first for first, _ in partition.damaged_ranges] == [found.first_bad_offset]
        assert {d.segment_base_offset for d in follower.core.repair.run_scrubber()} == {
            damaged.base_offset}
        fetcher, _ = fetcher_of(follower, leader, truncating=False)
        fetcher.session.on_repaired = follower.core.repair.on_segment_repaired
        _repair_rounds(fetcher)
        assert partition.repair is None and partition.damaged is None
        assert values(partition.log) == expected
        assert not damaged.damage_mark_path.exists()
    finally:
        leader.core.shutdown()
        follower.core.shutdown()


def _segment_files_of(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in sorted(directory.glob("*.log"))}


def _damaged_from(node: Node) -> int:
    answer = wire.call1(node.core, ApiKey.DESCRIBE_LOG_DIRS, {"topics": None})
    ((partition,),) = [t["partitions"] for t in answer["results"][0]["topics"]]
    return int(partition["damaged_from"])
