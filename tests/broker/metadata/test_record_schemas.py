"""Stored records declared in the schema language (broker/metadata/msgpack_form.py).

- every metadata-log and offsets-topic dataclass matches its Struct exactly (names,
  order, types, defaults), and a drifted one is caught;
- every declared record round-trips, and the writer's bytes are the bytes the code
  before the schemas wrote (fixtures built with raw msgpack, as that code built them),
  which decode to the same records: data dirs written before keep working;
- hostile values never raise anything but the records' own errors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import struct
from collections.abc import Mapping
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group.metadata import (
    GROUP_METADATA_KEY,
    GROUP_METADATA_VALUE,
    KEY_SCHEMA_VERSION,
    MEMBER_METADATA,
    OFFSET_COMMIT_KEY,
    OFFSET_COMMIT_VALUE,
    OFFSET_COMMIT_VALUE_VERSION,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecordError,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from broker.metadata.image import MetadataImage
from broker.metadata.msgpack_form import check_conforms
from broker.metadata.records import (
    NO_LEADER,
    RECORD_TYPES,
    RECORD_VERSION,
    FenceBrokerRecord,
    MetadataRecord,
    MetadataRecordError,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicConfigsRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    decode_record,
    encode_record,
)
from clients.protocol.schema import INT32, STRING, Field, Struct

GROUP_RECORDS = [
    (OffsetCommitKey, OFFSET_COMMIT_KEY, KEY_SCHEMA_VERSION),
    (GroupMetadataKey, GROUP_METADATA_KEY, KEY_SCHEMA_VERSION),
    (OffsetCommitValue, OFFSET_COMMIT_VALUE, OFFSET_COMMIT_VALUE_VERSION),
    (MemberMetadata, MEMBER_METADATA, OFFSET_COMMIT_VALUE_VERSION),
    (GroupMetadataValue, GROUP_METADATA_VALUE, OFFSET_COMMIT_VALUE_VERSION),
]
NAMES = {MEMBER_METADATA: "MemberMetadata"}


# -- one declaration ---------------------------------------------------------------------


@pytest.mark.parametrize("cls", list(RECORD_TYPES.values()), ids=lambda c: c.TYPE)
def test_metadata_record_dataclasses_are_their_schemas(cls: Any) -> None:
    check_conforms(cls, cls.SCHEMA, RECORD_VERSION, NAMES)
    assert cls.SCHEMA.label == cls.TYPE


@pytest.mark.parametrize(("cls", "schema", "version"), GROUP_RECORDS,
                         ids=lambda x: getattr(x, "__name__", ""))
def test_offsets_topic_dataclasses_are_their_schemas(cls: type, schema: Struct,
                                                     version: int) -> None:
    check_conforms(cls, schema, version, NAMES)


def test_a_dataclass_that_drifts_from_its_schema_is_caught() -> None:
    schema = Struct(Field("name", STRING), Field("size", INT32, tag=0, tagged="0+"),
                    label="probe")

    @dataclasses.dataclass
    class Renamed:
        name: str
        length: int = 0

    @dataclasses.dataclass
    class Retyped:
        name: str
        size: str = ""

    @dataclasses.dataclass
    class NoDefault:
        name: str
        size: int

    @dataclasses.dataclass
    class OtherDefault:
        name: str
        size: int = 7

    for cls, needle in [(Renamed, "are not the schema's"), (Retyped, "the schema says int"),
                        (NoDefault, "optional in the schema"),
                        (OtherDefault, "defaults to 7")]:
        with pytest.raises(TypeError, match=needle):
            check_conforms(cls, schema, 0, {})


# -- today's bytes -----------------------------------------------------------------------


def _legacy_map(kind: str, **fields: Any) -> bytes:
    """A metadata record value as the code before the schemas wrote it."""
    return msgpack.packb({"type": kind, **fields}, use_bin_type=True)


METADATA_FIXTURES: list[tuple[bytes, MetadataRecord]] = [
    (_legacy_map("register_broker", broker_id=1, broker_epoch=0, incarnation_id="inc-a",
                 host="127.0.0.1", port=9092, rack=None, internal_host=None,
                 internal_port=None),
     RegisterBrokerRecord(1, 0, "inc-a", "127.0.0.1", 9092)),
    (_legacy_map("register_broker", broker_id=3, broker_epoch=8, incarnation_id="inc-c",
                 host="h", port=2, rack="r1", internal_host="10.0.0.3", internal_port=9300),
     RegisterBrokerRecord(3, 8, "inc-c", "h", 2, "r1", "10.0.0.3", 9300)),
    (_legacy_map("fence_broker", broker_id=1, broker_epoch=5), FenceBrokerRecord(1, 5)),
    (_legacy_map("unfence_broker", broker_id=1, broker_epoch=5), UnfenceBrokerRecord(1, 5)),
    (_legacy_map("topic", name="t", topic_id=3, num_partitions=2, replication_factor=2,
                 configs={"min_insync_replicas": "2"}),
     TopicRecord("t", 3, 2, 2, {"min_insync_replicas": "2"})),
    (_legacy_map("partition", topic="t", partition=1, replicas=[1, 2], leader=2,
                 leader_epoch=4, isr=[2], partition_epoch=9, unclean_elected=True),
     PartitionRecord("t", 1, (1, 2), 2, 4, (2,), 9, unclean_elected=True)),
    (_legacy_map("partition", topic="t", partition=0, replicas=[1, 2], leader=NO_LEADER,
                 leader_epoch=0, isr=[1], partition_epoch=0, unclean_elected=False),
     PartitionRecord("t", 0, (1, 2), NO_LEADER, 0, (1,), 0)),
    (_legacy_map("remove_topic", name="t"), RemoveTopicRecord("t")),
    (_legacy_map("topic_configs", name="t", configs={"retention_ms": "5"}),
     TopicConfigsRecord("t", {"retention_ms": "5"})),
    (_legacy_map("producer_ids", broker_id=2, broker_epoch=7, next_producer_id=2000),
     ProducerIdsRecord(2, 7, 2000)),
]


@pytest.mark.parametrize(("data", "record"), METADATA_FIXTURES,
                         ids=[r.TYPE for _, r in METADATA_FIXTURES])
def test_metadata_records_written_before_decode_identically(data: bytes,
                                                             record: MetadataRecord) -> None:
    assert decode_record(data) == record
    assert encode_record(record) == data  # the writer's bytes did not change
    assert decode_record(encode_record(record)) == record


def test_a_snapshot_written_before_decodes_identically() -> None:
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(1, 0, "inc-a", "h", 1, "r1"),
        RegisterBrokerRecord(2, 1, "inc-b", "h", 2, None, "10.0.0.2", 9300),
        UnfenceBrokerRecord(1, 0),
        TopicRecord("t", 4, 2, 2, {"retention_ms": "5"}),
        PartitionRecord("t", 0, (1, 2), 1, 0, (1, 2), 0),
        PartitionRecord("t", 1, (2, 1), NO_LEADER, 3, (2,), 7, unclean_elected=True),
        ProducerIdsRecord(1, 0, 1000),
    ]
    image = MetadataImage.from_records(records, 40)
    payload = msgpack.packb([msgpack.unpackb(data) for data, _ in [
        (_legacy_map("register_broker", broker_id=1, broker_epoch=0, incarnation_id="inc-a",
                     host="h", port=1, rack="r1", internal_host=None, internal_port=None),
         None),
        (_legacy_map("unfence_broker", broker_id=1, broker_epoch=0), None),
        (_legacy_map("register_broker", broker_id=2, broker_epoch=1, incarnation_id="inc-b",
                     host="h", port=2, rack=None, internal_host="10.0.0.2",
                     internal_port=9300), None),
        (_legacy_map("topic", name="t", topic_id=4, num_partitions=2, replication_factor=2,
                     configs={"retention_ms": "5"}), None),
        (_legacy_map("partition", topic="t", partition=0, replicas=[1, 2], leader=1,
                     leader_epoch=0, isr=[1, 2], partition_epoch=0, unclean_elected=False),
         None),
        (_legacy_map("partition", topic="t", partition=1, replicas=[2, 1], leader=NO_LEADER,
                     leader_epoch=3, isr=[2], partition_epoch=7, unclean_elected=True), None),
        (_legacy_map("producer_ids", broker_id=1, broker_epoch=0, next_producer_id=1000),
         None),
    ]], use_bin_type=True)
    snapshot = image.encode_snapshot()
    assert snapshot[22:] == payload  # the payload: the maps written before, in order
    assert MetadataImage.decode_snapshot(snapshot) == image


def _legacy(version: int, body: list[Any]) -> bytes:
    """An offsets-topic key or value as the code before the schemas wrote it."""
    return struct.pack(">h", version) + msgpack.packb(body, use_bin_type=True)


def test_offsets_topic_records_written_before_decode_identically() -> None:
    key = OffsetCommitKey("g", "orders", 3)
    assert decode_key(_legacy(1, ["g", "orders", 3])) == key
    assert decode_key(_legacy(0, ["g", "orders", 3])) == key  # version 0 reads as 1
    assert encode_offset_commit_key(key) == _legacy(1, ["g", "orders", 3])
    assert decode_key(_legacy(2, ["g"])) == GroupMetadataKey("g")
    assert encode_group_metadata_key(GroupMetadataKey("g")) == _legacy(2, ["g"])

    value = OffsetCommitValue(42, 5, "meta", 1_700_000_000_000)
    old = _legacy(3, [42, 5, "meta", 1_700_000_000_000])
    assert decode_offset_commit_value(old) == value and encode_offset_commit_value(value) == old
    assert decode_offset_commit_value(_legacy(3, [7, -1, None, -1, "later"])) == \
        OffsetCommitValue(7)  # a trailing field a later version added is ignored

    member = MemberMetadata("m-1", None, "client", "/10.0.0.1", 30000, 10000, b"\x00sub",
                            b"\x00assign")
    group = GroupMetadataValue("consumer", 4, "range", "m-1", 1_700_000_000_000, (member,))
    old = _legacy(3, ["consumer", 4, "range", "m-1", 1_700_000_000_000,
                      [["m-1", None, "client", "/10.0.0.1", 30000, 10000, b"\x00sub",
                        b"\x00assign"]]])
    assert decode_group_metadata_value(old) == group
    assert encode_group_metadata_value(group) == old
    empty = GroupMetadataValue("consumer", 0, None, None, 5, ())
    assert decode_group_metadata_value(_legacy(3, ["consumer", 0, None, None, 5, []])) == empty


# -- hostile values ----------------------------------------------------------------------

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
           | st.text(max_size=5) | st.binary(max_size=5) | st.floats(allow_nan=False))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=6)
                      | st.dictionaries(st.text(max_size=12), inner, max_size=6),
                      max_leaves=20)
FIELD_NAMES = sorted({f.name for cls in RECORD_TYPES.values() for f in cls.SCHEMA.fields})


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(RECORD_TYPES)),
       st.dictionaries(st.sampled_from(FIELD_NAMES), values, max_size=9))
def test_hostile_metadata_maps_raise_only_record_errors(kind: str,
                                                        fields: Mapping[str, Any]) -> None:
    try:
        record = decode_record(_legacy_map(kind, **fields))
    except MetadataRecordError:
        return
    assert decode_record(encode_record(record)) == record


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-3, max_value=4), values)
def test_hostile_offsets_topic_records_raise_only_group_record_errors(version: int,
                                                                      body: Any) -> None:
    data = struct.pack(">h", version) + msgpack.packb(body, use_bin_type=True)
    for decode in (decode_key, decode_offset_commit_value, decode_group_metadata_value):
        with contextlib.suppress(GroupRecordError):
            decode(data)
