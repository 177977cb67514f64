"""Which replicas a broker hosts once it has applied a complete metadata image.

A pure decision, shared by :meth:`broker.core.BrokerCore.reconcile` (which then opens,
deletes and drives the logs) and the simulation's brokers (``tests/sim/broker.py``):

* :func:`plan_replicas` -> :class:`ReplicaPlan`: ``drop``, the hosted partitions to
  stop hosting and delete (no longer assigned to this broker, their topic deleted, or
  re-created under another topic id than the one hosted), in hosting order; ``host``,
  every partition the image assigns to this broker with its topic and registration
  (what becomes its leader or follower state), in the image's order.
* :func:`log_of_other_topic`: Kafka's rule: a log whose ``partition.metadata`` names
  another topic id than the image's topic of that name belongs to a deleted
  incarnation of the name (the broker was away when it went): it is deleted before the
  topic is hosted (its directory renamed ``-delete`` first,
  :meth:`storage.log_manager.LogManager.delete_log`), never served, appended to or used
  as a follower's start.  A log without a topic id (written before ids were recorded) is
  adopted.  The topic's identity is its id (Kafka's UUID); the only other form is the
  one of files written before topic ids were UUIDs, ``topic_id: <int>``, the metadata
  offset of the topic's record (:attr:`~broker.metadata.image.TopicInfo.created_offset`),
  compared with that offset (the upgrade of old data dirs); a UUID file for a topic
  that has no UUID yet (a metadata log not upgraded yet) cannot be told apart and is
  adopted.
* :func:`partition_metadata_label`: what ``partition.metadata`` holds for a topic, and
  what identifies the topic a broker hosts: its UUID once it has one, else its created
  offset.  A broker rewrites a file that holds anything else once it knows the directory
  is that topic's (the upgrade of old files).

Costs: O(hosted + partitions in the image).  Pure functions of their arguments: any
thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from broker.metadata.image import MetadataImage, PartitionRegistration, TopicInfo
from clients.protocol.topics import ZERO_UUID, TopicPartition

__all__ = ["ReplicaPlan", "TopicLabel", "log_of_other_topic", "partition_metadata_label",
           "plan_replicas"]

# what partition.metadata names: a topic id (16 bytes), or an old file's created offset
TopicLabel = bytes | int


@dataclass
class ReplicaPlan:
    drop: list[TopicPartition] = field(default_factory=list)
    host: dict[TopicPartition, tuple[TopicInfo, PartitionRegistration]] = field(
        default_factory=dict)  # key -> (its topic, registration)


def plan_replicas(image: MetadataImage, broker_id: int, hosted: Iterable[TopicPartition],
                  hosted_topics: Mapping[str, TopicLabel]) -> ReplicaPlan:
    """What broker ``broker_id``, hosting ``hosted`` (of the topics labelled
    ``hosted_topics``, :func:`partition_metadata_label`), does to follow ``image`` (see
    the module docstring)."""
    plan = ReplicaPlan()
    for topic, index, state in image.replicas_on(broker_id):
        plan.host[TopicPartition(topic, index)] = (image.topics[topic], state)
    for key in hosted:
        info = image.topics.get(key.topic)
        label = hosted_topics.get(key.topic)
        if key not in plan.host or (info is not None and (
                label is None or log_of_other_topic(label, info))):
            plan.drop.append(key)
    return plan


def log_of_other_topic(found: TopicLabel | None, topic: TopicInfo) -> bool:
    """The recorded topic id ``found`` (None: none recorded; an int: an old file's created
    offset) is another topic's than ``topic``'s."""
    if isinstance(found, int):
        return found != topic.created_offset
    return found is not None and topic.topic_uuid != ZERO_UUID and found != topic.topic_uuid


def partition_metadata_label(topic: TopicInfo) -> TopicLabel:
    """What ``partition.metadata`` holds for ``topic``: its id, else its created offset."""
    return topic.topic_uuid if topic.topic_uuid != ZERO_UUID else topic.created_offset
