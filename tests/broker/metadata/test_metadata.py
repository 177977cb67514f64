"""Metadata records (encode/decode/validation) and MetadataImage (apply rules, snapshots)."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.metadata.image import MetadataImage, PartitionRegistration
from broker.metadata.records import (
    NO_LEADER,
    FenceBrokerRecord,
    MetadataRecord,
    MetadataRecordError,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicConfigsRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    decode_record,
    encode_record,
)

SAMPLES: list[MetadataRecord] = [
    RegisterBrokerRecord(1, 0, "inc-a", "127.0.0.1", 9092),
    RegisterBrokerRecord(2, 7, "inc-b", "host", 1, rack="r1"),
    RegisterBrokerRecord(3, 8, "inc-c", "host", 2, internal_host="10.0.0.3", internal_port=9300),
    FenceBrokerRecord(1, 0),
    UnfenceBrokerRecord(1, 0),
    TopicRecord("t", 3, 2, 2, {"min_insync_replicas": "2"}),
    PartitionRecord("t", 1, (1, 2), 2, 4, (2,), 9, unclean_elected=True),
    PartitionRecord("t", 0, (1, 2), NO_LEADER, 0, (1,), 0),
    RemoveTopicRecord("t"),
    TopicConfigsRecord("t", {"retention_ms": "5", "min_insync_replicas": "1"}),
    PartitionRecord("t", 2, (1, 2), 1, 0, (1, 2), 0),
]


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: r.TYPE)
def test_round_trip(record: MetadataRecord) -> None:
    data = encode_record(record)
    assert msgpack.unpackb(data)["type"] == record.TYPE
    assert decode_record(data) == record


def test_optional_fields_default_and_unknown_keys_are_ignored() -> None:
    raw = {"type": "partition", "topic": "t", "partition": 0, "replicas": [1], "leader": 1,
           "leader_epoch": 0, "isr": [1], "partition_epoch": 0, "future_field": 5}
    record = decode_record(msgpack.packb(raw))
    assert isinstance(record, PartitionRecord) and record.unclean_elected is False
    topic = decode_record(msgpack.packb({"type": "topic", "name": "x", "topic_id": 0,
                                         "num_partitions": 1, "replication_factor": 1}))
    assert isinstance(topic, TopicRecord) and topic.configs == {}


@pytest.mark.parametrize(("raw", "needle"), [
    (b"\xc1", "not msgpack"),
    (msgpack.packb([1, 2]), "must be a map"),
    (msgpack.packb({"type": "nope"}), "unknown metadata record type"),
    (msgpack.packb({"type": "fence_broker", "broker_id": 1}), "no 'broker_epoch'"),
    (msgpack.packb({"type": "fence_broker", "broker_id": -2, "broker_epoch": 0}), "broker_id"),
    (msgpack.packb({"type": "fence_broker", "broker_id": True, "broker_epoch": 0}), "broker_id"),
    (msgpack.packb({"type": "remove_topic", "name": "a b"}), "characters outside"),
    (msgpack.packb({"type": "register_broker", "broker_id": 1, "broker_epoch": 0,
                    "incarnation_id": "", "host": "h", "port": 1}), "incarnation_id"),
    (msgpack.packb({"type": "register_broker", "broker_id": 1, "broker_epoch": 0,
                    "incarnation_id": "i", "host": "h", "port": 1, "internal_port": 2}),
     "come together"),
    (msgpack.packb({"type": "register_broker", "broker_id": 1, "broker_epoch": 0,
                    "incarnation_id": "i", "host": "h", "port": 1, "internal_host": "h",
                    "internal_port": 0}), "internal_port"),
    (msgpack.packb({"type": "topic", "name": "t", "topic_id": 0, "num_partitions": 0,
                    "replication_factor": 1}), "num_partitions"),
    (msgpack.packb({"type": "topic", "name": "t", "topic_id": 0, "num_partitions": 1,
                    "replication_factor": 1, "configs": {"a": 1}}), "configs"),
    (msgpack.packb({"type": "topic_configs", "name": "t", "configs": [1]}), "configs"),
    (msgpack.packb({"type": "topic_configs", "configs": {}}), "no 'name'"),
])
def test_malformed_records_are_rejected_precisely(raw: bytes, needle: str) -> None:
    with pytest.raises(MetadataRecordError, match=needle):
        decode_record(raw)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"replicas": (), "isr": (1,)}, "replicas"),
    ({"replicas": (1, 1), "isr": (1,)}, "duplicates"),
    ({"isr": (3,)}, "not a subset"),
    ({"leader": 2, "isr": (1,)}, "not in isr"),
    ({"isr": ()}, "isr"),
    ({"leader_epoch": -1}, "leader_epoch"),
])
def test_partition_record_validation(kwargs: dict[str, object], needle: str) -> None:
    base: dict[str, object] = {"topic": "t", "partition": 0, "replicas": (1, 2), "leader": 1,
                               "leader_epoch": 0, "isr": (1, 2), "partition_epoch": 0}
    base.update(kwargs)
    with pytest.raises(MetadataRecordError, match=needle):
        PartitionRecord(**base)  # type: ignore[arg-type]


def _image_with_topic() -> MetadataImage:
    image = MetadataImage()
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(1, 0, "a", "h", 1), RegisterBrokerRecord(2, 1, "b", "h", 2),
        UnfenceBrokerRecord(1, 0), UnfenceBrokerRecord(2, 1),
        TopicRecord("t", 4, 1, 2), PartitionRecord("t", 0, (1, 2), 1, 0, (1, 2), 0),
    ]
    for offset, record in enumerate(records):
        image.apply(record, offset)
    return image


def test_apply_builds_brokers_topics_and_partitions() -> None:
    image = _image_with_topic()
    assert image.last_applied_offset == 5
    assert image.unfenced_brokers() == [1, 2]
    assert image.brokers[2].port == 2 and image.brokers[2].broker_epoch == 1
    state = image.partition("t", 0)
    assert state is not None and state.leader == 1 and state.isr == (1, 2)
    assert [(t, p) for t, p, _ in image.replicas_on(2)] == [("t", 0)]
    image.check_invariants()
    image.apply(FenceBrokerRecord(1, 0), 6)
    assert image.unfenced_brokers() == [2] and not image.is_alive(1)
    image.apply(RemoveTopicRecord("t"), 7)
    assert image.topics == {} and image.partition("t", 0) is None


def test_replicas_change_by_reassignment_never_below_the_replication_factor() -> None:
    """A reassignment (broker.controller.reassignments) first adds the target replicas,
    then drops the leaving ones; the image refused any change of replicas before."""
    image = _image_with_topic()
    image.apply(PartitionRecord("t", 0, (2, 3, 1), 1, 0, (1,), 1), 6)
    image.apply(PartitionRecord("t", 0, (2, 3), 2, 1, (2,), 2), 7)
    assert image.partition("t", 0) == PartitionRegistration((2, 3), 2, 1, (2,), 2)
    with pytest.raises(MetadataRecordError, match="replication factor"):
        image.apply(PartitionRecord("t", 0, (2,), 2, 1, (2,), 3), 8)


@pytest.mark.parametrize(("record", "needle"), [
    (UnfenceBrokerRecord(1, 0), "already unfenced"),
    (FenceBrokerRecord(1, 5), "not the current registration"),
    (FenceBrokerRecord(9, 0), "not the current registration"),
    (RegisterBrokerRecord(1, 0, "c", "h", 1), "not above"),
    (TopicRecord("t", 9, 1, 1), "already exists"),
    (RemoveTopicRecord("zz"), "no topic"),
    (PartitionRecord("zz", 0, (1,), 1, 0, (1,), 0), "unknown topic"),
    (PartitionRecord("t", 2, (1, 2), 1, 0, (1,), 1), "outside topic"),
    (PartitionRecord("t", 1, (1,), 1, 0, (1,), 0), "replication factor"),
    (TopicConfigsRecord("zz", {}), "topic_configs: no topic"),
    (PartitionRecord("t", 0, (1,), 1, 0, (1,), 1), "replication factor"),
    (PartitionRecord("t", 0, (1, 2), 1, 0, (1,), 0), "partition epoch 0 is not above 0"),
    (PartitionRecord("t", 0, (1, 2), 2, 0, (2,), 1), "needs a higher epoch"),
])
def test_apply_rejects_records_that_do_not_fit(record: MetadataRecord, needle: str) -> None:
    image = _image_with_topic()
    before = image.to_records()
    with pytest.raises(MetadataRecordError, match=needle):
        image.apply(record, 100)
    assert image.to_records() == before and image.last_applied_offset == 5


def test_partitions_grow_one_at_a_time_after_the_last_and_configs_are_replaced() -> None:
    image = _image_with_topic()
    image.apply(PartitionRecord("t", 1, (2, 1), 2, 0, (2, 1), 0), 6)  # CreatePartitions
    assert image.topics["t"].num_partitions == 2 and image.partition("t", 1) is not None
    image.check_invariants()
    with pytest.raises(MetadataRecordError, match="outside topic"):
        image.apply(PartitionRecord("t", 3, (1, 2), 1, 0, (1, 2), 0), 7)  # not the next one
    image.apply(TopicConfigsRecord("t", {"retention_ms": "7"}), 7)
    image.apply(TopicConfigsRecord("t", {"segment_bytes": "4096"}), 8)
    assert image.topics["t"].configs == {"segment_bytes": "4096"}
    assert MetadataImage.decode_snapshot(image.encode_snapshot()) == image
    # while a topic is being created (partitions missing) it cannot grow
    creating = MetadataImage()
    creating.apply(TopicRecord("c", 0, 2, 1), 0)
    with pytest.raises(MetadataRecordError, match="outside topic"):
        creating.apply(PartitionRecord("c", 2, (1,), 1, 0, (1,), 0), 1)


def test_apply_needs_increasing_offsets() -> None:
    image = _image_with_topic()
    with pytest.raises(MetadataRecordError, match="not after the last applied offset 5"):
        image.apply(FenceBrokerRecord(1, 0), 5)


def test_snapshot_round_trip_and_corruption() -> None:
    image = _image_with_topic()
    image.apply(PartitionRecord("t", 0, (1, 2), 2, 1, (2,), 1, True), 6)
    data = image.encode_snapshot()
    assert MetadataImage.decode_snapshot(data) == image
    flipped = bytearray(data)
    flipped[-1] ^= 0xFF
    with pytest.raises(MetadataRecordError, match="CRC"):
        MetadataImage.decode_snapshot(bytes(flipped))
    with pytest.raises(MetadataRecordError, match="CRC"):
        MetadataImage.decode_snapshot(data[:-3])
    with pytest.raises(MetadataRecordError, match="shorter than its header"):
        MetadataImage.decode_snapshot(data[:5])
    with pytest.raises(MetadataRecordError, match="magic"):
        MetadataImage.decode_snapshot(b"XXXX" + data[4:])


def test_check_invariants_catches_missing_partitions() -> None:
    image = MetadataImage()
    image.apply(TopicRecord("t", 0, 2, 1), 0)
    image.apply(PartitionRecord("t", 0, (1,), NO_LEADER, 0, (1,), 0), 1)
    with pytest.raises(MetadataRecordError, match=r"expected 0\.\.1"):
        image.check_invariants()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(SAMPLES), max_size=12))
def test_any_record_sequence_either_applies_or_leaves_image_unchanged(
        records: list[MetadataRecord]) -> None:
    image = MetadataImage()
    for offset, record in enumerate(records):
        before = (image.to_records(), image.last_applied_offset)
        try:
            image.apply(record, offset)
        except MetadataRecordError:
            assert (image.to_records(), image.last_applied_offset) == before
    rebuilt = MetadataImage.from_records(image.to_records(), image.last_applied_offset)
    assert rebuilt == image


def test_followers_fetch_from_the_internal_listener_when_a_broker_has_one() -> None:
    image = MetadataImage()
    image.apply(RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9092,
                                     internal_host="127.0.0.1", internal_port=9292), 0)
    image.apply(RegisterBrokerRecord(2, 1, "b", "127.0.0.1", 9093), 1)  # no internal one
    assert image.brokers[1].replication_endpoint == ("127.0.0.1", 9292)
    assert (image.brokers[1].host, image.brokers[1].port) == ("127.0.0.1", 9092)  # clients'
    assert image.brokers[2].replication_endpoint == ("127.0.0.1", 9093)
    rebuilt = MetadataImage.from_records(image.to_records(), image.last_applied_offset)
    assert rebuilt.brokers == image.brokers  # snapshots keep the internal listener
