"""InternalTopic's leadership and loading, driven with a fake core and coordinator and a
manual timer: a partition newly led here is loaded (one read step per tick, then
``finish_load``), a new leader epoch reloads, a lost leadership unloads, a load whose
leadership changes midway stops; placement answers the leader of the key's partition."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from broker.config import BrokerConfig
from broker.coordination.internal_topic import InternalTopic, InternalTopicSpec
from broker.coordination.placement import partition_for
from clients.protocol.topics import TopicPartition
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

TOPIC = "__internal"


class FakeRead:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read_bytes(self) -> bytes:
        return self.data


@dataclass
class FakeLog:
    data: bytes

    def read(self, position: int, max_bytes: int, max_offset: int) -> FakeRead:
        return FakeRead(self.data[position:max_offset])


@dataclass
class FakePartition:
    leader_epoch: int
    is_leader: bool = True
    log_start_offset: int = 0
    log: FakeLog = field(default_factory=lambda: FakeLog(b"0123456789"))

    @property
    def log_end_offset(self) -> int:
        return len(self.log.data)


class FakeHost:
    controller = None

    def __init__(self, partitions: Mapping[TopicPartition, FakePartition]) -> None:
        self.partitions = partitions

    def partition_count(self, topic: str) -> int:
        return 2 if topic == TOPIC else 0

    def leader_endpoint(self, topic: str, index: int) -> tuple[int, str, int] | None:
        p = self.partitions.get(TopicPartition(topic, index))
        return (7, "h", 9092) if p is not None and p.is_leader else None


class FakeCoordinator:
    def __init__(self) -> None:
        self.num_partitions = 0
        self.owned: dict[int, int] = {}
        self.loading: dict[int, int] = {}
        self.calls: list[tuple[Any, ...]] = []

    def epochs(self) -> dict[int, int]:
        return {**self.owned, **self.loading}

    def loading_epoch(self, partition: int) -> int | None:
        return self.loading.get(partition)

    def begin_load(self, partition: int, epoch: int) -> None:
        self.calls.append(("begin", partition, epoch))
        self.owned.pop(partition, None)
        self.loading[partition] = epoch

    def finish_load(self, partition: int) -> None:
        self.calls.append(("finish", partition))
        self.owned[partition] = self.loading.pop(partition)

    def unload(self, partition: int) -> None:
        self.calls.append(("unload", partition))
        self.owned.pop(partition, None)
        self.loading.pop(partition, None)

    def load_batches(self, partition: int, data: bytes | memoryview, position: int) -> int:
        self.calls.append(("load", partition, bytes(data), position))
        return position + len(data)


def hosting() -> tuple[InternalTopic, dict[TopicPartition, FakePartition], FakeCoordinator,
                       SystemTimer, ManualClock]:
    clock = ManualClock(1_000)
    timer = SystemTimer(clock)
    partitions = {TopicPartition(TOPIC, 0): FakePartition(3),
                  TopicPartition(TOPIC, 1): FakePartition(5, is_leader=False)}
    coordinator = FakeCoordinator()
    spec = InternalTopicSpec(TOPIC, 2, 3, lambda rf: {"cleanup_policy": "compact"}, "things")
    topic = InternalTopic(spec, BrokerConfig(node_id=7, data_dir="/nonexistent"), timer,
                          cast(Any, partitions), cast(Any, None), cast(Any, None),
                          cast(Any, FakeHost(partitions)), coordinator,
                          coordinator.load_batches)
    return topic, partitions, coordinator, timer, clock


def tick(timer: SystemTimer, clock: ManualClock) -> None:
    clock.advance(1)
    timer.advance_clock()


def test_a_partition_led_here_is_loaded_step_by_step_then_reloaded_or_unloaded() -> None:
    topic, partitions, coordinator, timer, clock = hosting()
    topic.on_partitions_changed()
    assert coordinator.num_partitions == 2
    assert coordinator.calls == [("begin", 0, 3)]  # partition 1 is not led here
    tick(timer, clock)
    tick(timer, clock)
    assert coordinator.calls[1:] == [("load", 0, b"0123456789", 0), ("finish", 0)]
    assert coordinator.owned == {0: 3}
    topic.on_partitions_changed()  # nothing changed: nothing done
    assert len(coordinator.calls) == 3
    partitions[TopicPartition(TOPIC, 0)].leader_epoch = 4  # a new epoch reloads
    topic.on_partitions_changed()
    assert coordinator.calls[3:] == [("unload", 0), ("begin", 0, 4)]
    partitions[TopicPartition(TOPIC, 0)].is_leader = False  # lost midway: the load stops
    tick(timer, clock)
    assert coordinator.calls[5:] == [("unload", 0)]
    partitions[TopicPartition(TOPIC, 0)].is_leader = True
    topic.on_partitions_changed()
    tick(timer, clock)
    tick(timer, clock)
    partitions[TopicPartition(TOPIC, 0)].is_leader = False
    topic.on_partitions_changed()
    assert coordinator.calls[6:] == [("begin", 0, 4), ("load", 0, b"0123456789", 0),
                                     ("finish", 0), ("unload", 0)]
    assert coordinator.epochs() == {}


def test_the_coordinator_of_a_key_is_the_leader_of_its_partition() -> None:
    topic, _partitions, _coordinator, _timer, _clock = hosting()
    led = next(k for k in ("a", "b", "c", "d", "e", "f") if partition_for(k, 2) == 0)
    other = next(k for k in ("a", "b", "c", "d", "e", "f") if partition_for(k, 2) == 1)
    assert topic.coordinator_of(led) == {"error_code": 0, "error_message": None,
                                         "node_id": 7, "host": "h", "port": 9092}
    refused = topic.coordinator_of(other)  # partition 1 has no leader here
    assert refused["error_code"] == 15 and refused["node_id"] == -1  # COORDINATOR_NOT_AVAILABLE
    assert refused["error_message"] == f"{TOPIC}-1 has no leader"
