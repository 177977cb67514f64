"""Cluster metadata records: the record types, their schemas, validation and msgpack codec.

The controller's metadata log (topic ``__cluster_metadata``, partition 0) holds record
batches whose record *values* are msgpack maps, one metadata record each; the record
key is null and the offset of the record is its metadata offset.  The map holds the
record type (key ``type``) and every field by name; unknown keys are ignored, so a later
version may add optional fields.

Each record type is declared once, as a :class:`clients.protocol.schema.Struct` in the
schema language the API messages use (``REGISTER_BROKER``, ``PARTITION``... below);
:mod:`broker.metadata.msgpack_form` derives from it the msgpack map, the decoder (types,
nil, required and optional fields) and the type check every record runs on
construction.  The bytes are the msgpack maps written before the schemas existed, so
every metadata log and snapshot on disk reads as it is (why they did not move to Kafka's
record format: see that module).  Only semantic rules are written here by hand, in
each record's ``__post_init__``: lower bounds narrower than the type, topic-name rules,
non-empty strings and id lists, duplicate ids, ISR within replicas.  Each record's frozen
dataclass repeats the Struct's fields for mypy; a test
(``tests/broker/metadata/test_record_schemas.py``) asserts that the two agree exactly.
Optional fields (absent in records written before they existed) are tagged fields.

| type              | fields (schema types; ``?`` nullable, ``[opt]`` tagged: may be absent)  |
|-------------------|--------------------------------------------------------------------------|
| `register_broker` | broker_id int32, broker_epoch int64, incarnation_id string,              |
|                   | host string, port uint16, rack string? [opt], internal_host string?      |
|                   | [opt] and internal_port uint16? [opt] (the broker's internal listener    |
|                   | for replication, both or neither; nil = none, its followers fetch from   |
|                   | ``host:port``)                                                           |
| `fence_broker`    | broker_id int32, broker_epoch int64                                      |
| `unfence_broker`  | broker_id int32, broker_epoch int64                                      |
| `topic`           | name string, topic_id int64, num_partitions int32,                       |
|                   | replication_factor int16, configs map str->str [opt, default {}],       |
|                   | topic_uuid bytes(16) [opt, default the zero UUID]                        |
| `partition`       | topic string, partition int32, replicas []int32, leader int32            |
|                   | (-1 = none), leader_epoch int32, isr []int32, partition_epoch int32,     |
|                   | unclean_elected bool [opt, default false], adding_replicas []int32       |
|                   | [opt, default empty] and removing_replicas []int32 [opt, default empty]: |
|                   | the reassignment in flight (Kafka's PartitionRecord fields; written only |
|                   | when non-empty)                                                          |
| `remove_topic`    | name string                                                              |
| `assign_topic_id` | name string, topic_uuid bytes(16): the topic id of a topic created      |
|                   | before topic ids existed (written once, by the upgrade below)            |
| `topic_configs`   | name string, configs map str->str [opt, default {}]: the topic's        |
|                   | complete new config overrides (IncrementalAlterConfigs / AlterConfigs),  |
|                   | replacing the old                                                        |
| `producer_ids`    | broker_id int32, broker_epoch int64, next_producer_id int64: the         |
|                   | controller gave broker_id the block of ids below next_producer_id not    |
|                   | given before                                                             |

Meaning: a registration always starts *fenced*; ``broker_epoch`` is the metadata offset
of the registration record.  ``topic_id`` (int64, the name kept for the bytes on disk;
:attr:`~broker.metadata.image.TopicInfo.created_offset` in the image) is the offset of
the topic record.  It is no identity any more: only ``partition.metadata`` files written
before topic ids were UUIDs hold it, and are matched by it once (the upgrade).  Leader
epochs of a new topic's partitions start at 0 (Kafka's; topic records written before
this started them at this offset, and those topics keep their epochs: they only grow).
``topic_uuid`` is the topic's id, what tells a re-created topic from the deleted one, in
Kafka's format (:mod:`clients.protocol.topics`: 16 random bytes drawn by the
controller, never the zero UUID or Kafka's reserved metadata topic id), the id clients
see and ``partition.metadata`` holds.  A log written before topic ids were UUIDs has
topic records without it (the zero UUID: "no id yet"); the active controller upgrades
such a log once, at its first tick, with one ``assign_topic_id`` record per topic that
has none (:meth:`broker.controller.topics.ControllerTopics.assign_missing_topic_ids`),
so the id is the same on every broker and after every restart.  A
``partition`` record carries the whole new state of one partition (not a delta); one for
the partition right after the last of a topic whose partitions all exist adds that
partition (CreatePartitions: the topic's ``num_partitions`` grows by one).  A
``topic_configs`` record replaces the topic's configs as a whole (validated and
normalized by the controller, like a ``topic`` record's), so a change of several keys is
applied atomically.
A partition being reassigned (:mod:`broker.controller.reassignments`) lists in
``replicas`` its target replicas followed by the ones that leave; ``adding_replicas`` are
the replicas it had not before the reassignment, ``removing_replicas`` those not in the
target (Kafka's definitions: target = replicas - removing, original = replicas -
adding; a replica an earlier, replaced target added and the current one drops is in
both).  Both are subsets of ``replicas`` with no duplicates, and neither covers all of
them.  These two fields are written only when non-empty (as Kafka writes a tagged field
only when it differs from its default), so every other partition record keeps the bytes
it had before they existed, and a record without them reads as not reassigning.
``producer_ids`` records only raise ``next_producer_id`` (the image keeps the last one),
so a producer id is never handed out twice, across controller restarts too.

Every record validates its fields on construction (``__post_init__``: the schema's type
check, then the semantic rules), so a record object that exists is well-formed; whether
it fits the current state is checked by :meth:`broker.metadata.image.MetadataImage.apply`.

Costs: encode/decode O(fields); ``decode_record_batches`` O(bytes) (one CRC per batch).
Thread-safety: records are immutable (frozen dataclasses) and the functions here are
pure, so any thread may use them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgpack

from broker.metadata.msgpack_form import (
    STRING_MAP,
    build_from_msgpack,
    check_fields,
    to_msgpack_map,
)
from clients.protocol.errors import InvalidRecordError
from clients.protocol.schema import (
    BOOL,
    BYTES,
    INT16,
    INT32,
    INT64,
    STRING,
    UINT16,
    Array,
    Field,
    Struct,
)
from clients.protocol.topics import METADATA_TOPIC_ID, ZERO_UUID, topic_name_error
from clients.records.batch import iter_batches
from clients.records.record import decode_batch

METADATA_TOPIC = "__cluster_metadata"
# The feature a broker declares in BrokerRegistration: the versions of this record format
# it can apply.  2: ``topic_configs`` records and partitions added to existing topics.
METADATA_VERSION_FEATURE = "minikafka.metadata.version"
METADATA_VERSION = 2
METADATA_PARTITION = 0
NO_LEADER = -1
MAX_RECORD_BYTES = 1024 * 1024


class MetadataRecordError(InvalidRecordError):
    """A metadata record is malformed, or does not fit the image it is applied to."""


def _at_least(name: str, value: int, low: int) -> None:
    if value < low:
        raise MetadataRecordError(f"{name} must be >= {low}, got {value}")


def _non_empty(name: str, value: str) -> None:
    if not value:
        raise MetadataRecordError(f"{name} must be a non-empty str")


def _topic(name: str, value: str) -> None:
    reason = topic_name_error(value)
    if reason is not None:
        raise MetadataRecordError(f"{name}: {reason}")


def _ids(name: str, value: tuple[int, ...]) -> None:
    if not value:
        raise MetadataRecordError(f"{name} must be a non-empty list of broker ids")
    for b in value:
        if b < 0:  # the entry's name is built only for the error
            _at_least(f"{name} entry", b, 0)
    if len(set(value)) != len(value):
        raise MetadataRecordError(f"{name} has duplicates: {list(value)}")


def _topic_uuid(name: str, value: bytes, allow_zero: bool) -> None:
    if len(value) != 16 or value == METADATA_TOPIC_ID or (value == ZERO_UUID
                                                          and not allow_zero):
        raise MetadataRecordError(f"{name} must be 16 bytes, not a reserved topic id, got "
                                  f"{value!r}")


def _check(record: MetadataRecord) -> None:
    check_fields(record, record.SCHEMA, RECORD_VERSION, MetadataRecordError)


# the name of the listener followers fetch from, in BrokerRegistration's listeners (Kafka's
# usual inter-broker listener name); the other listener there is the clients' one
INTERNAL_LISTENER = "INTERNAL"

# -- the record schemas: each record type declared once; the dataclass below it must
# match it field for field (checked by tests/broker/metadata/test_record_schemas.py) ---

# The schema version every record type is read and written at (the msgpack map carries
# none): a field added later is declared tagged, i.e. optional.  Not METADATA_VERSION,
# which is the feature level a broker declares (which record types it can apply).
RECORD_VERSION = 0

REGISTER_BROKER = Struct(
    Field("broker_id", INT32),
    Field("broker_epoch", INT64),
    Field("incarnation_id", STRING),
    Field("host", STRING),
    Field("port", UINT16),
    Field("rack", STRING, nullable="0+", tag=0, tagged="0+"),
    Field("internal_host", STRING, nullable="0+", tag=1, tagged="0+"),
    Field("internal_port", UINT16, nullable="0+", tag=2, tagged="0+"),
    label="register_broker",
)


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    TYPE: ClassVar[str] = REGISTER_BROKER.label
    SCHEMA: ClassVar[Struct] = REGISTER_BROKER
    broker_id: int
    broker_epoch: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None = None
    internal_host: str | None = None
    internal_port: int | None = None

    def __post_init__(self) -> None:
        _check(self)
        _at_least("broker_id", self.broker_id, 0)
        _at_least("broker_epoch", self.broker_epoch, 0)
        _non_empty("incarnation_id", self.incarnation_id)
        _non_empty("host", self.host)
        if self.rack is not None:
            _non_empty("rack", self.rack)
        if (self.internal_host is None) != (self.internal_port is None):
            raise MetadataRecordError("internal_host and internal_port come together")
        if self.internal_host is not None and self.internal_port is not None:
            _non_empty("internal_host", self.internal_host)
            _at_least("internal_port", self.internal_port, 1)


FENCE_BROKER = Struct(Field("broker_id", INT32), Field("broker_epoch", INT64),
                      label="fence_broker")


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    TYPE: ClassVar[str] = FENCE_BROKER.label
    SCHEMA: ClassVar[Struct] = FENCE_BROKER
    broker_id: int
    broker_epoch: int

    def __post_init__(self) -> None:
        _check(self)
        _at_least("broker_id", self.broker_id, 0)
        _at_least("broker_epoch", self.broker_epoch, 0)


UNFENCE_BROKER = Struct(Field("broker_id", INT32), Field("broker_epoch", INT64),
                        label="unfence_broker")


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    TYPE: ClassVar[str] = UNFENCE_BROKER.label
    SCHEMA: ClassVar[Struct] = UNFENCE_BROKER
    broker_id: int
    broker_epoch: int

    def __post_init__(self) -> None:
        _check(self)
        _at_least("broker_id", self.broker_id, 0)
        _at_least("broker_epoch", self.broker_epoch, 0)


TOPIC = Struct(
    Field("name", STRING),
    Field("topic_id", INT64),
    Field("num_partitions", INT32),
    Field("replication_factor", INT16),
    Field("configs", STRING_MAP, tag=0, tagged="0+"),
    Field("topic_uuid", BYTES, tag=1, tagged="0+", default=ZERO_UUID),
    label="topic",
)


@dataclass(frozen=True, slots=True)
class TopicRecord:
    TYPE: ClassVar[str] = TOPIC.label
    SCHEMA: ClassVar[Struct] = TOPIC
    name: str
    topic_id: int
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)
    topic_uuid: bytes = ZERO_UUID  # zero: a topic record written before topic ids

    def __post_init__(self) -> None:
        _check(self)
        _topic("name", self.name)
        _at_least("topic_id", self.topic_id, 0)
        _topic_uuid("topic_uuid", self.topic_uuid, allow_zero=True)
        _at_least("num_partitions", self.num_partitions, 1)
        _at_least("replication_factor", self.replication_factor, 1)


PARTITION = Struct(
    Field("topic", STRING),
    Field("partition", INT32),
    Field("replicas", Array(INT32)),
    Field("leader", INT32),
    Field("leader_epoch", INT32),
    Field("isr", Array(INT32)),
    Field("partition_epoch", INT32),
    Field("unclean_elected", BOOL, tag=0, tagged="0+"),
    Field("adding_replicas", Array(INT32), tag=1, tagged="0+", default=()),
    Field("removing_replicas", Array(INT32), tag=2, tagged="0+", default=()),
    label="partition",
)
# fields written only when they differ from their default (see the module docstring)
_WRITTEN_WHEN_SET: dict[str, tuple[str, ...]] = {
    PARTITION.label: ("adding_replicas", "removing_replicas")}


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    TYPE: ClassVar[str] = PARTITION.label
    SCHEMA: ClassVar[Struct] = PARTITION
    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    unclean_elected: bool = False
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _check(self)
        _topic("topic", self.topic)
        _at_least("partition", self.partition, 0)
        _ids("replicas", self.replicas)
        _at_least("leader", self.leader, NO_LEADER)
        _at_least("leader_epoch", self.leader_epoch, 0)
        _ids("isr", self.isr)
        _at_least("partition_epoch", self.partition_epoch, 0)
        if not set(self.isr) <= set(self.replicas):
            raise MetadataRecordError(
                f"isr {list(self.isr)} is not a subset of replicas {list(self.replicas)}"
            )
        if self.leader != NO_LEADER and self.leader not in self.isr:
            raise MetadataRecordError(f"leader {self.leader} is not in isr {list(self.isr)}")
        for name, moving in (("adding_replicas", self.adding_replicas),
                             ("removing_replicas", self.removing_replicas)):
            if moving and (len(set(moving)) != len(moving)
                           or not set(moving) < set(self.replicas)):
                raise MetadataRecordError(
                    f"{name} {list(moving)} must be distinct replicas of "
                    f"{list(self.replicas)}, not all of them")


REMOVE_TOPIC = Struct(Field("name", STRING), label="remove_topic")


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    TYPE: ClassVar[str] = REMOVE_TOPIC.label
    SCHEMA: ClassVar[Struct] = REMOVE_TOPIC
    name: str

    def __post_init__(self) -> None:
        _check(self)
        _topic("name", self.name)


ASSIGN_TOPIC_ID = Struct(Field("name", STRING), Field("topic_uuid", BYTES),
                         label="assign_topic_id")


@dataclass(frozen=True, slots=True)
class AssignTopicIdRecord:
    TYPE: ClassVar[str] = ASSIGN_TOPIC_ID.label
    SCHEMA: ClassVar[Struct] = ASSIGN_TOPIC_ID
    name: str
    topic_uuid: bytes

    def __post_init__(self) -> None:
        _check(self)
        _topic("name", self.name)
        _topic_uuid("topic_uuid", self.topic_uuid, allow_zero=False)


TOPIC_CONFIGS = Struct(Field("name", STRING), Field("configs", STRING_MAP, tag=0, tagged="0+"),
                       label="topic_configs")


@dataclass(frozen=True, slots=True)
class TopicConfigsRecord:
    TYPE: ClassVar[str] = TOPIC_CONFIGS.label
    SCHEMA: ClassVar[Struct] = TOPIC_CONFIGS
    name: str
    configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check(self)
        _topic("name", self.name)


PRODUCER_IDS = Struct(Field("broker_id", INT32), Field("broker_epoch", INT64),
                      Field("next_producer_id", INT64), label="producer_ids")


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    TYPE: ClassVar[str] = PRODUCER_IDS.label
    SCHEMA: ClassVar[Struct] = PRODUCER_IDS
    broker_id: int
    broker_epoch: int
    next_producer_id: int

    def __post_init__(self) -> None:
        _check(self)
        _at_least("broker_id", self.broker_id, 0)
        _at_least("broker_epoch", self.broker_epoch, 0)
        _at_least("next_producer_id", self.next_producer_id, 1)


MetadataRecord = (
    RegisterBrokerRecord | FenceBrokerRecord | UnfenceBrokerRecord | TopicRecord
    | PartitionRecord | RemoveTopicRecord | ProducerIdsRecord | TopicConfigsRecord
    | AssignTopicIdRecord
)
RECORD_TYPES: dict[str, type[MetadataRecord]] = {
    cls.TYPE: cls
    for cls in (RegisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord, TopicRecord,
                PartitionRecord, RemoveTopicRecord, ProducerIdsRecord, TopicConfigsRecord,
                AssignTopicIdRecord)
}


def record_to_map(record: MetadataRecord) -> dict[str, Any]:
    """The msgpack map of ``record``: ``type`` and every field by name."""
    out: dict[str, Any] = {"type": record.TYPE}
    out.update(to_msgpack_map(record, record.SCHEMA, RECORD_VERSION))
    for name in _WRITTEN_WHEN_SET.get(record.TYPE, ()):
        if not out[name]:
            del out[name]
    if isinstance(record, TopicRecord) and record.topic_uuid == ZERO_UUID:
        del out["topic_uuid"]  # a topic without an id: the bytes written before ids existed
    return out


def record_from_map(data: object) -> MetadataRecord:
    """The record of one msgpack map; anything wrong -> MetadataRecordError."""
    if type(data) is not dict:
        raise MetadataRecordError(f"a metadata record must be a map, got {type(data).__name__}")
    kind = data.get("type")
    cls = RECORD_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise MetadataRecordError(f"unknown metadata record type {kind!r}")
    make: Callable[..., MetadataRecord] = cls
    return build_from_msgpack(make, data, cls.SCHEMA, RECORD_VERSION, by_name=True,
                              error=MetadataRecordError)


def encode_record(record: MetadataRecord) -> bytes:
    """The msgpack bytes of one record (a record value in the metadata log)."""
    return msgpack.packb(record_to_map(record), use_bin_type=True)


def decode_record(data: bytes | bytearray | memoryview) -> MetadataRecord:
    """Decode and validate one record value; anything wrong -> MetadataRecordError."""
    if len(data) > MAX_RECORD_BYTES:
        raise MetadataRecordError(
            f"metadata record of {len(data)} bytes exceeds {MAX_RECORD_BYTES}")
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several unrelated types
        raise MetadataRecordError(
            f"metadata record is not msgpack: {type(e).__name__}: {e}") from None
    return record_from_map(raw)


def decode_record_batches(data: bytes | bytearray | memoryview,
                          start_offset: int = 0) -> list[tuple[int, MetadataRecord]]:
    """``(offset, record)`` for every record at or after ``start_offset`` in the record
    batches ``data`` (a metadata Fetch response's records, or a log read); control
    batches (the quorum's LeaderChange entries) hold no metadata record and are skipped.
    Batches are CRC-checked; a bad batch or record raises (CorruptRecordError /
    MetadataRecordError)."""
    return [(o, r) for o, r in decode_log_entries(data, start_offset) if r is not None]


def decode_log_entries(data: bytes | bytearray | memoryview,
                       start_offset: int = 0) -> list[tuple[int, MetadataRecord | None]]:
    """``(offset, record)`` for every log entry at or after ``start_offset``, with
    ``None`` for a control record (the quorum's LeaderChange: it takes an offset and
    holds no metadata record, so a reader advances past it,
    :meth:`~broker.metadata.image.MetadataImage.advance_to`).  Same checks as
    :func:`decode_record_batches`."""
    out: list[tuple[int, MetadataRecord | None]] = []
    for pos, header in iter_batches(data):
        if header.next_offset <= start_offset:
            continue
        for rec in decode_batch(data, pos):
            if rec.offset < start_offset:
                continue
            if header.is_control:
                out.append((rec.offset, None))  # broker/controller/quorum/entry_batches.py
                continue
            if rec.value is None:
                raise MetadataRecordError(f"metadata record at offset {rec.offset} has no value")
            out.append((rec.offset, decode_record(rec.value)))
    return out
