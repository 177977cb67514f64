"""Record formats of the offsets topic (``__consumer_offsets``): keys and values.

Every record the group coordinator writes has a key that says what it is about and a
value that holds the latest state; the topic is compacted, so the latest record per key
survives.  A null value is a tombstone (the key's state was deleted).

Both keys and values start with a big-endian int16 version, as in Kafka, followed by a
msgpack array (msgpack is deterministic for the same data, so equal keys are equal
bytes, which compaction needs).  Readers ignore trailing array elements they do not
know, so a later version may append fields.

Keys:

| bytes | field    | type               | meaning                                      |
|-------|----------|--------------------|----------------------------------------------|
| 0-1   | version  | int16              | 1 = offset commit, 2 = group metadata        |
| 2-    | body     | msgpack array      | v1: [group_id str, topic str, partition int] |
|       |          |                    | v2: [group_id str]                           |

Offset commit value (key version 1):

| bytes | field    | type          | meaning                                              |
|-------|----------|---------------|------------------------------------------------------|
| 0-1   | version  | int16         | 3                                                    |
| 2-    | body     | msgpack array | [offset int, leader_epoch int (-1 = unknown),        |
|       |          |               |  metadata str/nil, commit_timestamp_ms int]          |

Group metadata value (key version 2):

| bytes | field    | type          | meaning                                              |
|-------|----------|---------------|------------------------------------------------------|
| 0-1   | version  | int16         | 3                                                    |
| 2-    | body     | msgpack array | [protocol_type str, generation_id int,               |
|       |          |               |  protocol_name str/nil, leader_id str/nil,           |
|       |          |               |  state_timestamp_ms int, members array]              |
|       | member   | msgpack array | [member_id str, group_instance_id str/nil,           |
|       |          |               |  client_id str, client_host str,                     |
|       |          |               |  rebalance_timeout_ms int, session_timeout_ms int,   |
|       |          |               |  subscription bin (metadata of the chosen protocol), |
|       |          |               |  assignment bin (opaque, encoded by the client)]     |

Costs: encode/decode O(size of the record).  Pure functions on immutable values: safe
from any thread or process.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from clients.protocol.errors import ErrorCode, MiniKafkaError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
_VERSION = struct.Struct(">h")


class GroupRecordError(MiniKafkaError):
    """A record of the offsets topic cannot be decoded."""

    code = ErrorCode.CORRUPT_MESSAGE


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """A committed offset (Kafka's record schema name): the value of an offset commit
    record, and the coordinator's cached entry for a (topic, partition)."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = None
    commit_timestamp_ms: int = -1


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


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: tuple[MemberMetadata, ...]


def _pack(version: int, body: list[Any]) -> bytes:
    return _VERSION.pack(version) + msgpack.packb(body, use_bin_type=True)


def _unpack(data: bytes, what: str) -> tuple[int, list[Any]]:
    if len(data) < 2:
        raise GroupRecordError(f"{what} of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data)
    try:
        body = msgpack.unpackb(data[2:], raw=False)
    except Exception as exc:
        raise GroupRecordError(f"{what} v{version}: not msgpack ({exc})") from None
    if not isinstance(body, list):
        raise GroupRecordError(f"{what} v{version}: body is {type(body).__name__}, not array")
    return version, body


def _field(body: list[Any], index: int, types: type | tuple[type, ...], what: str) -> Any:
    if index >= len(body):
        raise GroupRecordError(f"{what}: field {index} missing")
    value = body[index]
    if not isinstance(value, types) or isinstance(value, bool):
        raise GroupRecordError(f"{what}: field {index} is {type(value).__name__}")
    return value


# -- keys -------------------------------------------------------------------------------


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    return _pack(OFFSET_COMMIT_KEY_VERSION, [key.group_id, key.topic, key.partition])


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    return _pack(GROUP_METADATA_KEY_VERSION, [key.group_id])


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey:
    version, body = _unpack(data, "key")
    if version in (0, OFFSET_COMMIT_KEY_VERSION):
        return OffsetCommitKey(_field(body, 0, str, "offset commit key"),
                               _field(body, 1, str, "offset commit key"),
                               _field(body, 2, int, "offset commit key"))
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(_field(body, 0, str, "group metadata key"))
    raise GroupRecordError(f"unknown key version {version}")


# -- values -----------------------------------------------------------------------------


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    return _pack(OFFSET_COMMIT_VALUE_VERSION, [value.offset, value.leader_epoch,
                                               value.metadata, value.commit_timestamp_ms])


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    _, body = _unpack(data, "offset commit value")
    what = "offset commit value"
    metadata = body[2] if len(body) > 2 else None
    if metadata is not None and not isinstance(metadata, str):
        raise GroupRecordError(f"{what}: metadata is {type(metadata).__name__}")
    return OffsetCommitValue(_field(body, 0, int, what), _field(body, 1, int, what), metadata,
                             _field(body, 3, int, what))


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    members = [[m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.rebalance_timeout_ms, m.session_timeout_ms, m.subscription, m.assignment]
               for m in value.members]
    return _pack(GROUP_METADATA_VALUE_VERSION, [
        value.protocol_type, value.generation_id, value.protocol_name, value.leader_id,
        value.state_timestamp_ms, members])


def _optional_str(body: list[Any], index: int, what: str) -> str | None:
    value = body[index] if index < len(body) else None
    if value is not None and not isinstance(value, str):
        raise GroupRecordError(f"{what}: field {index} is {type(value).__name__}")
    return value


def _member(raw: Any) -> MemberMetadata:
    what = "group member"
    if not isinstance(raw, list):
        raise GroupRecordError(f"{what} is {type(raw).__name__}, not array")
    return MemberMetadata(
        _field(raw, 0, str, what), _optional_str(raw, 1, what), _field(raw, 2, str, what),
        _field(raw, 3, str, what), _field(raw, 4, int, what), _field(raw, 5, int, what),
        bytes(_field(raw, 6, bytes, what)), bytes(_field(raw, 7, bytes, what)))


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    _, body = _unpack(data, "group metadata value")
    what = "group metadata value"
    members = _field(body, 5, list, what)
    return GroupMetadataValue(
        _field(body, 0, str, what), _field(body, 1, int, what), _optional_str(body, 2, what),
        _optional_str(body, 3, what), _field(body, 4, int, what),
        tuple(_member(m) for m in members))
