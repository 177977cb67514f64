"""Requests and results of the controller's operations (the values :mod:`broker.controller.state`
takes and returns), and :data:`Outcome`, the ``(result, records)`` pair every mutating
operation returns.

Costs: O(1) construction.  Thread-safety: immutable frozen dataclasses, shareable
between threads.  ``Rejected`` is the exception an operation raises to turn
one entry into an error result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TypeVar

from broker.metadata.image import PartitionRegistration, TopicInfo
from broker.metadata.records import MetadataRecord
from broker.metadata.replica_plan import TopicLabel, log_of_other_topic
from broker.metadata.topic_config_checks import TopicConfigPairs
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import ZERO_UUID

T = TypeVar("T")
Outcome = tuple[T, list[MetadataRecord]]


@dataclass(frozen=True, slots=True)
class RegistrationResult:
    error: ErrorCode
    message: str | None = None
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ReplicaLog:
    """One log a registering broker holds (broker/metadata/replica_logs.py): its place
    for the safe election.  ``recovery_cut``: the broker's log recovery cut it, or left
    it below its checkpointed high watermark; it may lack acknowledged records."""

    topic: str
    partition: int
    # an old partition.metadata's int (the offset of its topic's record; -1: none), the
    # BrokerRegistration field topic_id
    created_offset: int = -1
    last_leader_epoch: int = -1
    log_end_offset: int = 0
    recovery_cut: bool = False
    topic_uuid: bytes = ZERO_UUID

    @property
    def recorded_topic_id(self) -> TopicLabel | None:
        """What the log's ``partition.metadata`` holds (storage.partition_metadata)."""
        if self.topic_uuid != ZERO_UUID:
            return self.topic_uuid
        return self.created_offset if self.created_offset >= 0 else None

    def of_another_topic(self, topic: TopicInfo) -> bool:
        """The log belongs to a deleted topic of ``topic``'s name (re-created since)."""
        return log_of_other_topic(self.recorded_topic_id, topic)


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False
    # the controller asks for a fresh replica_logs report (a BrokerRegistration of the
    # same incarnation): the safe election waits for it
    report_replica_logs: bool = False


@dataclass(frozen=True, slots=True)
class ProducerIdBlockResult:
    error: ErrorCode
    message: str | None = None
    producer_id_start: int = -1
    producer_id_len: int = 0


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One CreateTopics entry; -1 means the controller's default."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)
    # a map, or CreateTopics' (name, value) pairs (duplicates and null values are refused)
    configs: TopicConfigPairs = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionsSpec:
    """One CreatePartitions entry: the new total ``count``; ``assignments`` the replicas of
    each new partition in order (None: the controller places them)."""

    name: str
    count: int
    assignments: Sequence[Sequence[int]] | None = None


class ConfigOperation(IntEnum):
    """IncrementalAlterConfigs' operations (Kafka's AlterConfigOp.OpType numbers)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ResourceType(IntEnum):
    """Kafka's ConfigResource.Type numbers (the ones we name in answers)."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


@dataclass(frozen=True, slots=True)
class ConfigOp:
    """One config of an AlterConfigs / IncrementalAlterConfigs resource; ``operation`` is
    an int as it came off the wire (unknown numbers are refused, not raised)."""

    name: str
    operation: int
    value: str | None


@dataclass(frozen=True, slots=True)
class ResourceChange:
    """One AlterConfigs / IncrementalAlterConfigs resource: its type, name and configs."""

    resource_type: int
    name: str
    configs: Sequence[ConfigOp] = ()


@dataclass(frozen=True, slots=True)
class ConfigResult:
    resource_type: int
    name: str
    error: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class TopicResult:
    name: str
    error: ErrorCode
    message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    topic_uuid: bytes = ZERO_UUID  # the topic's id (Kafka's format); zero: none or unknown


class ElectionType(IntEnum):
    """ElectLeaders' ``election_type`` (Kafka's ElectionType)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """One partition's answer to an operator's request (ElectLeaders, reassignments)."""

    topic: str
    partition: int
    error: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One AlterPartition entry: the leader's view it is based on and the ISR it wants."""

    topic: str
    partition: int
    leader_epoch: int
    new_isr: Sequence[int]
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class IsrChangeResult:
    topic: str
    partition: int
    error: ErrorCode
    message: str | None = None
    state: PartitionRegistration | None = None  # the current state (after the change if accepted)


class Rejected(Exception):
    """One entry of a request is refused with ``code``; the operation turns it into that
    entry's error result (never raised to the caller of the controller state)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message
