"""Plain value types shared by Producer, Consumer and Admin.

All are immutable NamedTuples (cheap to build, hashable where their fields are, safe to
share between threads).  No wire format here: the wire shapes are in
:mod:`clients.protocol.registry`.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple

from clients.protocol.topics import TopicPartition

Header = tuple[str, bytes | None]


class RecordMetadata(NamedTuple):
    """What a successful send resolves to (offset -1 when acks=0: the broker never said)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class BulkResult(NamedTuple):
    """What a successful ``send_bulk`` resolves to: one entry per record batch, in the
    order the records were given (``base_offsets[i]`` is -1 when acks=0)."""

    topic: str
    partitions: list[int]
    base_offsets: list[int]
    record_counts: list[int]

    @property
    def record_count(self) -> int:
        return sum(self.record_counts)


class ConsumerRecord(NamedTuple):
    """A record as ``poll`` returns it: key and value are bytes (None: null), or what the
    consumer's deserializers made of them."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple[Header, ...] = ()


class OffsetAndMetadata(NamedTuple):
    """A committed position: the offset of the next record to consume, plus optional
    metadata text and the leader epoch of the record before it (-1: unknown)."""

    offset: int
    metadata: str | None = None
    leader_epoch: int = -1


class OffsetAndTimestamp(NamedTuple):
    """``offsets_for_times``' answer: the first record at or after the time asked."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


class GroupListing(NamedTuple):
    group_id: str
    protocol_type: str
    state: str
    coordinator: int = -1  # node id of the broker that answered
    group_type: str = ""  # "classic" or "consumer" (KIP-848); "" from a broker below ListGroups v5


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]  # decoded for protocol type "consumer"
    member_epoch: int = -1  # KIP-848 consumer groups (-1: a classic group's member)


class GroupDescription(NamedTuple):
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the chosen assignor for consumer groups
    members: list[MemberDescription]
    coordinator: int
    group_type: str = "classic"  # or "consumer" (KIP-848)
    group_epoch: int = -1  # KIP-848 consumer groups


class GroupOffset(NamedTuple):
    """A group's committed offset (-1: none) against the partition's high watermark."""

    offset: int
    high_watermark: int  # -1 when unknown
    metadata: str | None = None

    @property
    def lag(self) -> int | None:
        if self.offset < 0 or self.high_watermark < 0:
            return None
        return max(0, self.high_watermark - self.offset)


class NewTopic(NamedTuple):
    """A topic to create; -1 means "broker default" for both counts.

    ``replica_assignments`` ({partition: [broker ids, preferred leader first]}) places
    the replicas explicitly; then both counts must be -1 (Kafka's rule)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] | None = None
    replica_assignments: dict[int, list[int]] | None = None


class NewPartitions(NamedTuple):
    """Grow a topic to ``total_count`` partitions; ``new_assignments`` (one broker list
    per new partition, preferred leader first) or None to let the cluster place them."""

    total_count: int
    new_assignments: list[list[int]] | None = None


class ConfigResourceType(IntEnum):
    """Kafka's ConfigResource.Type numbers."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigResource(NamedTuple):
    """A config holder: a topic by name, a broker by its id as a string ("" = cluster
    default for broker configs)."""

    type: ConfigResourceType
    name: str

    def __str__(self) -> str:
        """What error messages name: ``topic 'orders'``, ``broker '0'``."""
        return f"{self.type.name.lower()} {self.name!r}"


class ConfigSource(IntEnum):
    """Where a config value comes from (Kafka's DescribeConfigs config_source)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigEntry(NamedTuple):
    """One config of a described resource (``value`` None: sensitive or unset)."""

    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN
    is_read_only: bool = False
    is_sensitive: bool = False
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...] = ()
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


class AlterConfigOpType(IntEnum):
    """IncrementalAlterConfigs operations (Kafka's numbers)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class AlterConfigOp(NamedTuple):
    """One change of :meth:`~clients.admin.Admin.incremental_alter_configs`: SET a value,
    DELETE (revert to the default; ``value`` ignored), or APPEND / SUBTRACT items of a
    list-typed config (comma-separated)."""

    name: str
    value: str | None
    op: AlterConfigOpType | int | str = AlterConfigOpType.SET  # also "set", "append", ...


class BrokerNode(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class PartitionInfo(NamedTuple):
    """One partition as the metadata says: leader -1 when none is available."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


class TopicDescription(NamedTuple):
    name: str
    partitions: list[PartitionInfo]
    is_internal: bool = False
    configs: dict[str, str] = {}  # noqa: RUF012 - NamedTuple default, never mutated
    topic_id: str | None = None  # Kafka's base64 form; None: the broker gave none


class ClusterDescription(NamedTuple):
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerNode]


def describe_value(value: Any) -> str:
    """Short type description for error messages (never the value itself)."""
    return type(value).__name__


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's group membership as ``Consumer.group_metadata()`` returns it (Kafka's
    ``ConsumerGroupMetadata``): what a transactional producer's
    ``send_offsets_to_transaction`` sends with TxnOffsetCommit so that the group
    coordinator fences a zombie member's commits (generation -1 / member "": not checked)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
