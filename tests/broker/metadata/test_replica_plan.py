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
from broker.metadata.replica_plan import log_of_other_topic, plan_replicas
from clients.protocol.topics import TopicPartition

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


def _topic_t(topic_id: int) -> list[MetadataRecord]:
    return [TopicRecord("t", topic_id, 2, 2),
            PartitionRecord("t", 0, (1, 2), 1, topic_id, (1, 2), 0),
            PartitionRecord("t", 1, (2, 3), 2, topic_id, (2, 3), 0)]


def test_hosts_what_the_image_assigns_with_its_topic_id_and_drops_nothing_new() -> None:
    image = _image(*_topic_t(4))
    plan = plan_replicas(image, 1, [], {})
    assert list(plan.host) == [T0] and plan.drop == []
    topic_id, state = plan.host[T0]
    assert topic_id == 4 and state.leader == 1
    assert set(plan_replicas(image, 2, [T0], {"t": 4}).host) == {T0, T1}
    assert plan_replicas(image, 1, [T0], {"t": 4}).drop == []


def test_drops_replicas_moved_away_deleted_or_of_a_recreated_topic() -> None:
    image = _image(*_topic_t(4))
    assert plan_replicas(image, 1, [T0, T1], {"t": 4}).drop == [T1]  # not assigned here
    assert plan_replicas(image, 1, [T0, U0], {"t": 4, "u": 2}).drop == [U0]  # u deleted
    recreated = _image(*_topic_t(4), RemoveTopicRecord("t"), *_topic_t(12))
    plan = plan_replicas(recreated, 1, [T0], {"t": 4})
    assert plan.drop == [T0]  # the replica of id 4 goes, the one of id 12 is hosted
    assert plan.host[T0][0] == 12


def test_a_log_labelled_with_another_topic_id_is_not_adopted() -> None:
    assert log_of_other_topic(4, 12)
    assert not log_of_other_topic(12, 12)
    assert not log_of_other_topic(None, 12)  # unlabelled: adopted and labelled
