"""Record formats of the offsets topic (``__consumer_offsets``): keys and values.

Every record the group coordinator writes has a key that says what it is about and a
value that holds the latest state; the topic is compacted, so the latest record per key
survives.  A null value is a tombstone (the key's state was deleted).

Both keys and values start with a big-endian int16 version, as in Kafka, followed by a
msgpack array of the fields in declared order (msgpack is deterministic for the same
data, so equal keys are equal bytes, which compaction needs).  Readers ignore trailing
array elements they do not know, so a later version may append fields.

Each key and value is declared once, as a :class:`clients.protocol.schema.Struct`
(``OFFSET_COMMIT_KEY``, ``GROUP_METADATA_VALUE``... below); the msgpack array, the
decoder and its type checks are derived from it by :mod:`broker.metadata.msgpack_form`,
which also says why the bytes stayed msgpack rather than Kafka's record format (above
all: the topic is compacted by key bytes, so a new key encoding would not replace, nor
let a tombstone delete, the records already written).  The frozen dataclasses repeat the
fields for mypy; a test asserts that they match the Structs exactly.  Integers the
coordinator stores as given (epochs, generations, timeouts: int32 on the wire) are
declared int64 here, so a decoder never refuses what the encoder wrote.

Keys (version: which key; fields at schema version 0):

| bytes | field    | type               | meaning                                      |
|-------|----------|--------------------|----------------------------------------------|
| 0-1   | version  | int16              | 1 = offset commit (0 read as 1),             |
|       |          |                    | 2 = group metadata                           |
| 2-    | body     | msgpack array      | v1: [group_id string, topic string,          |
|       |          |                    |      partition int32]                        |
|       |          |                    | v2: [group_id string]                        |

Offset commit value (key version 1):

| bytes | field    | type          | meaning                                              |
|-------|----------|---------------|------------------------------------------------------|
| 0-1   | version  | int16         | 3 (any version >= 0 is read with the fields it has)  |
| 2-    | body     | msgpack array | [offset int64, leader_epoch int64 (-1 = unknown),    |
|       |          |               |  metadata string/nil, commit_timestamp_ms int64]     |

Group metadata value (key version 2):

| bytes | field    | type          | meaning                                              |
|-------|----------|---------------|------------------------------------------------------|
| 0-1   | version  | int16         | 3                                                    |
| 2-    | body     | msgpack array | [protocol_type string, generation_id int64,          |
|       |          |               |  protocol_name string/nil, leader_id string/nil,     |
|       |          |               |  state_timestamp_ms int64, members array]            |
|       | member   | msgpack array | [member_id string, group_instance_id string/nil,     |
|       |          |               |  client_id string, client_host string,               |
|       |          |               |  rebalance_timeout_ms int64, session_timeout_ms      |
|       |          |               |  int64, subscription bin (metadata of the chosen     |
|       |          |               |  protocol), assignment bin (opaque, encoded by the   |
|       |          |               |  client)]                                            |

Anything a decoder cannot accept raises :class:`GroupRecordError` naming the record,
the field's index and what it found (the load skips such records and counts them).

Costs: encode/decode O(size of the record).  Pure functions on immutable values: safe
from any thread or process.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgpack

from broker.metadata.msgpack_form import array_encoder, build_from_msgpack, builder
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.schema import BYTES, INT32, INT64, STRING, Array, Field, Struct

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
KEY_SCHEMA_VERSION = 0  # a key's int16 says which key it is; its fields have one version
_VERSION = struct.Struct(">h")
_Record = TypeVar("_Record")


class GroupRecordError(MiniKafkaError):
    """A record of the offsets topic cannot be decoded."""

    code = ErrorCode.CORRUPT_MESSAGE


# -- the record schemas: each declared once; the dataclass below it must match it field
# for field (checked by tests/broker/metadata/test_record_schemas.py) ------------------

OFFSET_COMMIT_KEY = Struct(
    Field("group_id", STRING),
    Field("topic", STRING),
    Field("partition", INT32),
    label="offset commit key",
)


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int


GROUP_METADATA_KEY = Struct(Field("group_id", STRING), label="group metadata key")


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group_id: str


OFFSET_COMMIT_VALUE = Struct(
    Field("offset", INT64),
    Field("leader_epoch", INT64, default=-1),
    Field("metadata", STRING, nullable="0+"),
    Field("commit_timestamp_ms", INT64, default=-1),
    label="offset commit value",
)


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """A committed offset (Kafka's record schema name): the value of an offset commit
    record, and the coordinator's cached entry for a (topic, partition)."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = None
    commit_timestamp_ms: int = -1


MEMBER_METADATA = Struct(
    Field("member_id", STRING),
    Field("group_instance_id", STRING, nullable="0+"),
    Field("client_id", STRING),
    Field("client_host", STRING),
    Field("rebalance_timeout_ms", INT64),
    Field("session_timeout_ms", INT64),
    Field("subscription", BYTES),
    Field("assignment", BYTES),
    label="group member",
)


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


GROUP_METADATA_VALUE = Struct(
    Field("protocol_type", STRING),
    Field("generation_id", INT64),
    Field("protocol_name", STRING, nullable="0+"),
    Field("leader_id", STRING, nullable="0+"),
    Field("state_timestamp_ms", INT64),
    Field("members", Array(MEMBER_METADATA)),
    label="group metadata value",
)


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: tuple[MemberMetadata, ...]


_CLASSES = {MEMBER_METADATA: MemberMetadata}
# the writers' msgpack arrays, compiled at import (each writes one version)
_OFFSET_COMMIT_KEY_ARRAY = array_encoder(OFFSET_COMMIT_KEY, KEY_SCHEMA_VERSION)
_GROUP_METADATA_KEY_ARRAY = array_encoder(GROUP_METADATA_KEY, KEY_SCHEMA_VERSION)
_OFFSET_COMMIT_VALUE_ARRAY = array_encoder(OFFSET_COMMIT_VALUE, OFFSET_COMMIT_VALUE_VERSION)
_GROUP_METADATA_VALUE_ARRAY = array_encoder(GROUP_METADATA_VALUE, GROUP_METADATA_VALUE_VERSION)
# and the readers of the keys and of the values of the version written today
_OFFSET_COMMIT_KEY_BUILD = builder(OffsetCommitKey, OFFSET_COMMIT_KEY, KEY_SCHEMA_VERSION,
                                   by_name=False, error=GroupRecordError)
_GROUP_METADATA_KEY_BUILD = builder(GroupMetadataKey, GROUP_METADATA_KEY, KEY_SCHEMA_VERSION,
                                    by_name=False, error=GroupRecordError)
_OFFSET_COMMIT_VALUE_BUILD = builder(OffsetCommitValue, OFFSET_COMMIT_VALUE,
                                     OFFSET_COMMIT_VALUE_VERSION, by_name=False,
                                     error=GroupRecordError)
_GROUP_METADATA_VALUE_BUILD = builder(GroupMetadataValue, GROUP_METADATA_VALUE,
                                      GROUP_METADATA_VALUE_VERSION, by_name=False,
                                      error=GroupRecordError, classes=_CLASSES)


def _pack(version: int, body: list[Any]) -> bytes:
    return _VERSION.pack(version) + msgpack.packb(body, use_bin_type=True)


def _unpack(data: bytes, what: str) -> tuple[int, object]:
    if len(data) < 2:
        raise GroupRecordError(f"{what} of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data)
    try:
        body = msgpack.unpackb(data[2:], raw=False)
    except Exception as exc:
        raise GroupRecordError(f"{what} v{version}: not msgpack ({exc})") from None
    return version, body


def _build(cls: Callable[..., _Record], body: object, schema: Struct, version: int) -> _Record:
    if version < 0:
        raise GroupRecordError(f"{schema.label}: unknown version {version}")
    return build_from_msgpack(cls, body, schema, version, by_name=False,
                              error=GroupRecordError, classes=_CLASSES)


# -- keys -------------------------------------------------------------------------------


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    return _pack(OFFSET_COMMIT_KEY_VERSION, _OFFSET_COMMIT_KEY_ARRAY(key))


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    return _pack(GROUP_METADATA_KEY_VERSION, _GROUP_METADATA_KEY_ARRAY(key))


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey:
    version, body = _unpack(data, "key")
    if version in (0, OFFSET_COMMIT_KEY_VERSION):
        return _OFFSET_COMMIT_KEY_BUILD(body)
    if version == GROUP_METADATA_KEY_VERSION:
        return _GROUP_METADATA_KEY_BUILD(body)
    raise GroupRecordError(f"unknown key version {version}")


# -- values -----------------------------------------------------------------------------


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    return _pack(OFFSET_COMMIT_VALUE_VERSION, _OFFSET_COMMIT_VALUE_ARRAY(value))


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    version, body = _unpack(data, "offset commit value")
    if version == OFFSET_COMMIT_VALUE_VERSION:
        return _OFFSET_COMMIT_VALUE_BUILD(body)
    return _build(OffsetCommitValue, body, OFFSET_COMMIT_VALUE, version)


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    return _pack(GROUP_METADATA_VALUE_VERSION, _GROUP_METADATA_VALUE_ARRAY(value))


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    version, body = _unpack(data, "group metadata value")
    if version == GROUP_METADATA_VALUE_VERSION:
        return _GROUP_METADATA_VALUE_BUILD(body)
    return _build(GroupMetadataValue, body, GROUP_METADATA_VALUE, version)
