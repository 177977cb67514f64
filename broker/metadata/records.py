"""Cluster metadata records: the record types, their validation and their msgpack codec.

The controller's metadata log (topic ``__cluster_metadata``, partition 0) holds record
batches whose record *values* are msgpack maps, one metadata record each; the record
key is null and the offset of the record is its metadata offset.  Record types (key
``type``; every other key is a field; unknown keys are ignored so a later version may
add optional fields):

| type              | fields (msgpack types)                                                   |
|-------------------|--------------------------------------------------------------------------|
| `register_broker` | broker_id int, broker_epoch int, incarnation_id str, host str, port int, |
|                   | rack str/nil (optional), internal_host str/nil and internal_port int/nil |
|                   | (optional: the broker's internal listener for replication; nil = none,   |
|                   | its followers fetch from ``host:port``)                                  |
| `fence_broker`    | broker_id int, broker_epoch int                                          |
| `unfence_broker`  | broker_id int, broker_epoch int                                          |
| `topic`           | name str, topic_id int, num_partitions int, replication_factor int,     |
|                   | configs map str->str                                                     |
| `partition`       | topic str, partition int, replicas [int], leader int (-1 = none),        |
|                   | leader_epoch int, isr [int], partition_epoch int,                        |
|                   | unclean_elected bool (optional, default false)                           |
| `remove_topic`    | name str                                                                 |
| `topic_configs`   | name str, configs map str->str: the topic's complete new config          |
|                   | overrides (IncrementalAlterConfigs / AlterConfigs), replacing the old    |
| `producer_ids`    | broker_id int, broker_epoch int, next_producer_id int: the controller    |
|                   | gave broker_id the block of ids below next_producer_id not given before  |

Meaning: a registration always starts *fenced*; ``broker_epoch`` is the metadata offset
of the registration record.  ``topic_id`` is the offset of the topic record (a topic
deleted and created again gets a new id, so a broker can tell the two apart).  A
``partition`` record carries the whole new state of one partition (not a delta); one for
the partition right after the last of a topic whose partitions all exist adds that
partition (CreatePartitions: the topic's ``num_partitions`` grows by one).  A
``topic_configs`` record replaces the topic's configs as a whole (validated and
normalized by the controller, like a ``topic`` record's), so a change of several keys is
applied atomically.
``producer_ids`` records only raise ``next_producer_id`` (the image keeps the last one),
so a producer id is never handed out twice, across controller restarts too.

Every record validates its fields on construction (``__post_init__``), so a record
object that exists is well-formed; whether it fits the current state is checked by
:meth:`broker.metadata.image.MetadataImage.apply`.

Costs: encode/decode O(fields); ``decode_record_batches`` O(bytes) (one CRC per batch).
Thread-safety: records are immutable (frozen dataclasses) and the functions here are
pure, so any thread may use them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

import msgpack

from clients.protocol.errors import InvalidRecordError
from clients.protocol.topics import topic_name_error
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
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


class MetadataRecordError(InvalidRecordError):
    """A metadata record is malformed, or does not fit the image it is applied to."""


def _int(name: str, value: object, low: int, high: int) -> None:
    if type(value) is not int or not low <= value <= high:
        raise MetadataRecordError(f"{name} must be an int in [{low}, {high}], got {value!r}")


def _str(name: str, value: object, *, empty_ok: bool = False) -> None:
    if type(value) is not str or (not value and not empty_ok):
        raise MetadataRecordError(f"{name} must be a non-empty str, got {value!r}")


def _topic(name: str, value: object) -> None:
    reason = topic_name_error(value)
    if reason is not None:
        raise MetadataRecordError(f"{name}: {reason}")


def _configs(value: object) -> None:
    if not isinstance(value, Mapping) or not all(
        type(k) is str and type(v) is str for k, v in value.items()
    ):
        raise MetadataRecordError(f"configs must map str to str, got {value!r}")


def _ids(name: str, value: object, *, empty_ok: bool) -> None:
    if type(value) is not tuple or (not value and not empty_ok):
        raise MetadataRecordError(f"{name} must be a non-empty list of broker ids, got {value!r}")
    for b in value:
        _int(f"{name} entry", b, 0, _INT32_MAX)
    if len(set(value)) != len(value):
        raise MetadataRecordError(f"{name} has duplicates: {list(value)}")


# the name of the listener followers fetch from, in BrokerRegistration's listeners (Kafka's
# usual inter-broker listener name); the other listener there is the clients' one
INTERNAL_LISTENER = "INTERNAL"


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    TYPE: ClassVar[str] = "register_broker"
    broker_id: int
    broker_epoch: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None = None
    internal_host: str | None = None
    internal_port: int | None = None

    def __post_init__(self) -> None:
        _int("broker_id", self.broker_id, 0, _INT32_MAX)
        _int("broker_epoch", self.broker_epoch, 0, _INT64_MAX)
        _str("incarnation_id", self.incarnation_id)
        _str("host", self.host)
        _int("port", self.port, 0, 65535)
        if self.rack is not None:
            _str("rack", self.rack)
        if (self.internal_host is None) != (self.internal_port is None):
            raise MetadataRecordError("internal_host and internal_port come together")
        if self.internal_host is not None and self.internal_port is not None:
            _str("internal_host", self.internal_host)
            _int("internal_port", self.internal_port, 1, 65535)


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    TYPE: ClassVar[str] = "fence_broker"
    broker_id: int
    broker_epoch: int

    def __post_init__(self) -> None:
        _int("broker_id", self.broker_id, 0, _INT32_MAX)
        _int("broker_epoch", self.broker_epoch, 0, _INT64_MAX)


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    TYPE: ClassVar[str] = "unfence_broker"
    broker_id: int
    broker_epoch: int

    def __post_init__(self) -> None:
        _int("broker_id", self.broker_id, 0, _INT32_MAX)
        _int("broker_epoch", self.broker_epoch, 0, _INT64_MAX)


@dataclass(frozen=True, slots=True)
class TopicRecord:
    TYPE: ClassVar[str] = "topic"
    name: str
    topic_id: int
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _topic("name", self.name)
        _int("topic_id", self.topic_id, 0, _INT64_MAX)
        _int("num_partitions", self.num_partitions, 1, _INT32_MAX)
        _int("replication_factor", self.replication_factor, 1, 32767)
        _configs(self.configs)


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    TYPE: ClassVar[str] = "partition"
    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    unclean_elected: bool = False

    def __post_init__(self) -> None:
        _topic("topic", self.topic)
        _int("partition", self.partition, 0, _INT32_MAX)
        _ids("replicas", self.replicas, empty_ok=False)
        _int("leader", self.leader, NO_LEADER, _INT32_MAX)
        _int("leader_epoch", self.leader_epoch, 0, _INT32_MAX)
        _ids("isr", self.isr, empty_ok=False)
        _int("partition_epoch", self.partition_epoch, 0, _INT32_MAX)
        if type(self.unclean_elected) is not bool:
            raise MetadataRecordError(
                f"unclean_elected must be a bool, got {self.unclean_elected!r}")
        if not set(self.isr) <= set(self.replicas):
            raise MetadataRecordError(
                f"isr {list(self.isr)} is not a subset of replicas {list(self.replicas)}"
            )
        if self.leader != NO_LEADER and self.leader not in self.isr:
            raise MetadataRecordError(f"leader {self.leader} is not in isr {list(self.isr)}")


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    TYPE: ClassVar[str] = "remove_topic"
    name: str

    def __post_init__(self) -> None:
        _topic("name", self.name)


@dataclass(frozen=True, slots=True)
class TopicConfigsRecord:
    TYPE: ClassVar[str] = "topic_configs"
    name: str
    configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _topic("name", self.name)
        _configs(self.configs)


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    TYPE: ClassVar[str] = "producer_ids"
    broker_id: int
    broker_epoch: int
    next_producer_id: int

    def __post_init__(self) -> None:
        _int("broker_id", self.broker_id, 0, _INT32_MAX)
        _int("broker_epoch", self.broker_epoch, 0, _INT64_MAX)
        _int("next_producer_id", self.next_producer_id, 1, _INT64_MAX)


MetadataRecord = (
    RegisterBrokerRecord | FenceBrokerRecord | UnfenceBrokerRecord | TopicRecord
    | PartitionRecord | RemoveTopicRecord | ProducerIdsRecord | TopicConfigsRecord
)
RECORD_TYPES: dict[str, type[Any]] = {
    cls.TYPE: cls
    for cls in (RegisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord, TopicRecord,
                PartitionRecord, RemoveTopicRecord, ProducerIdsRecord, TopicConfigsRecord)
}
_FIELDS = {name: [(f.name, f.default) for f in fields(cls)] for name, cls in RECORD_TYPES.items()}
_OPTIONAL_CONFIGS = "configs"  # the one field name with a default factory
_TUPLE_FIELDS = ("replicas", "isr")


def record_to_map(record: MetadataRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"type": record.TYPE}
    for name, _default in _FIELDS[record.TYPE]:
        value = getattr(record, name)
        if name in _TUPLE_FIELDS:
            value = list(value)
        elif name == "configs":
            value = dict(value)
        out[name] = value
    return out


def record_from_map(data: object) -> MetadataRecord:
    if type(data) is not dict:
        raise MetadataRecordError(f"a metadata record must be a map, got {type(data).__name__}")
    kind = data.get("type")
    cls = RECORD_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None or not isinstance(kind, str):
        raise MetadataRecordError(f"unknown metadata record type {kind!r}")
    kwargs: dict[str, Any] = {}
    for name, default in _FIELDS[kind]:
        if name in data:
            value = data[name]
            if name in _TUPLE_FIELDS and type(value) is list:
                value = tuple(value)
            kwargs[name] = value
        elif name == _OPTIONAL_CONFIGS:
            kwargs[name] = {}
        elif default is not MISSING:
            kwargs[name] = default
        else:
            raise MetadataRecordError(f"{kind} record has no {name!r}")
    record: MetadataRecord = cls(**kwargs)
    return record


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
    batches ``data`` (a metadata Fetch response's records, or a log read).  Batches are
    CRC-checked; a bad batch or record raises (CorruptRecordError / MetadataRecordError)."""
    out: list[tuple[int, MetadataRecord]] = []
    for pos, _header in iter_batches(data):
        for rec in decode_batch(data, pos):
            if rec.offset < start_offset:
                continue
            if rec.value is None:
                raise MetadataRecordError(f"metadata record at offset {rec.offset} has no value")
            out.append((rec.offset, decode_record(rec.value)))
    return out
