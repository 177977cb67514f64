"""plan_replicas / log_of_other_topic: what a broker hosts and deletes after an image."""

from __future__ import annotations

from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from broker.metadata.replica_plan import log_of_other_topic, partition_metadata_label, plan_replicas
from clients.protocol.topics import ZERO_UUID, TopicPartition

T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def _image(*records: MetadataRecord) -> MetadataImage:
    image = MetadataImage()
    base: list[MetadataRecord] = [
        RegisterBrokerRecord(1, 0, "a", "h", 1), RegisterBrokerRecord(2, 1, "b", "h", 2),
        RegisterBrokerRecord(3, 2, "c", "h", 3), UnfenceBrokerRecord(1, 0),
        UnfenceBrokerRecord(2, 1), UnfenceBrokerRecord(3, 2)]
    for offset, record in enumerate([*base, *records]):
        image.apply(record, offset)
    return image


ID4, ID12 = bytes([4] * 16), bytes([12] * 16)  # two incarnations of "t"


def _topic_t(created_offset: int, topic_uuid: bytes = ZERO_UUID) -> list[MetadataRecord]:
    """Topic "t" as a topic record at ``created_offset`` writes it (epochs from 0)."""
    return [TopicRecord("t", created_offset, 2, 2, topic_uuid=topic_uuid),
            PartitionRecord("t", 0, (1, 2), 1, 0, (1, 2), 0),
            PartitionRecord("t", 1, (2, 3), 2, 0, (2, 3), 0)]


def test_hosts_what_the_image_assigns_with_its_topic_and_drops_nothing_new() -> None:
    image = _image(*_topic_t(6, ID4))
    plan = plan_replicas(image, 1, [], {})
    assert list(plan.host) == [T0] and plan.drop == []
    topic, state = plan.host[T0]
    assert partition_metadata_label(topic) == ID4 and state.leader == 1
    assert set(plan_replicas(image, 2, [T0], {"t": ID4}).host) == {T0, T1}
    assert plan_replicas(image, 1, [T0], {"t": ID4}).drop == []


def test_drops_replicas_moved_away_deleted_or_of_a_recreated_topic() -> None:
    image = _image(*_topic_t(6, ID4))
    assert plan_replicas(image, 1, [T0, T1], {"t": ID4}).drop == [T1]  # not assigned here
    assert plan_replicas(image, 1, [T0, U0], {"t": ID4, "u": ID12}).drop == [U0]  # u deleted
    # re-created: the same epochs (both from 0), another id
    recreated = _image(*_topic_t(6, ID4), RemoveTopicRecord("t"), *_topic_t(10, ID12))
    plan = plan_replicas(recreated, 1, [T0], {"t": ID4})
    assert plan.drop == [T0]  # the replica of id 4 goes, the one of id 12 is hosted
    assert partition_metadata_label(plan.host[T0][0]) == ID12
    assert plan.host[T0][1].leader_epoch == 0


def test_a_topic_of_a_log_not_upgraded_yet_is_known_by_its_created_offset() -> None:
    old = _image(*_topic_t(6))  # a topic record written before topic ids
    assert partition_metadata_label(old.topics["t"]) == 6
    assert plan_replicas(old, 1, [T0], {"t": 6}).drop == []
    recreated = _image(*_topic_t(6), RemoveTopicRecord("t"), *_topic_t(10, ID12))
    assert plan_replicas(recreated, 1, [T0], {"t": 6}).drop == [T0]


def test_a_log_labelled_with_another_topic_id_is_not_adopted() -> None:
    topic = _image(*_topic_t(6, ID12)).topics["t"]
    assert log_of_other_topic(ID4, topic)
    assert not log_of_other_topic(ID12, topic)
    assert log_of_other_topic(4, topic)  # an old file of another incarnation
    assert not log_of_other_topic(6, topic)  # an old file of this one: relabelled
    assert not log_of_other_topic(None, topic)  # unlabelled: adopted and labelled
