"""Which replicas a broker hosts once it has applied a complete metadata image.

A pure decision, shared by :meth:`broker.core.BrokerCore.reconcile` (which then opens,
deletes and drives the logs) and the simulation's brokers (``tests/sim/broker.py``):

* :func:`plan_replicas` -> :class:`ReplicaPlan`: ``drop``, the hosted partitions to
  stop hosting and delete (no longer assigned to this broker, their topic deleted, or
  re-created under another topic id than the one hosted), in hosting order; ``host``,
  every partition the image assigns to this broker with its topic id and registration
  (what becomes its leader or follower state), in the image's order.
* :func:`log_of_other_topic`: a log on disk whose ``partition.metadata`` names another
  topic than the one to host belongs to a deleted topic of the same name (the broker
  was away when it went): it is deleted before the topic is hosted, never adopted.  A log
  without a topic id (written before ids were recorded) is adopted.  The file names the
  topic by its id (Kafka's UUID) or, written before topic ids were UUIDs, by its
  incarnation (the int ``topic_id``, the offset of its topic record): each is compared
  with the same form of the topic to host; a UUID file for a topic that has no UUID yet
  cannot be told apart and is adopted.
* :func:`partition_metadata_label`: what ``partition.metadata`` should hold for a topic
  (its UUID once it has one, else its incarnation): a broker rewrites a file that holds
  anything else once it knows the directory is that topic's (the upgrade of old files).

Costs: O(hosted + partitions in the image).  Pure functions of their arguments: any
thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from broker.metadata.image import MetadataImage, PartitionRegistration
from clients.protocol.topics import ZERO_UUID, TopicPartition

__all__ = ["ReplicaPlan", "log_of_other_topic", "partition_metadata_label", "plan_replicas"]


@dataclass
class ReplicaPlan:
    drop: list[TopicPartition] = field(default_factory=list)
    host: dict[TopicPartition, tuple[int, PartitionRegistration]] = field(
        default_factory=dict)  # key -> (topic id, registration)


def plan_replicas(image: MetadataImage, broker_id: int, hosted: Iterable[TopicPartition],
                  hosted_topic_ids: Mapping[str, int]) -> ReplicaPlan:
    """What broker ``broker_id``, hosting ``hosted`` (of the topic ids
    ``hosted_topic_ids``), does to follow ``image`` (see the module docstring)."""
    plan = ReplicaPlan()
    for topic, index, state in image.replicas_on(broker_id):
        plan.host[TopicPartition(topic, index)] = (image.topics[topic].topic_id, state)
    for key in hosted:
        info = image.topics.get(key.topic)
        if key not in plan.host or (info is not None
                                    and hosted_topic_ids.get(key.topic) != info.topic_id):
            plan.drop.append(key)
    return plan


def log_of_other_topic(found_topic_id: bytes | int | None, topic_id: int,
                       topic_uuid: bytes = ZERO_UUID) -> bool:
    """The log's recorded topic id (None: none recorded; an int: an old file's
    incarnation) is another topic's than the one of incarnation ``topic_id`` and id
    ``topic_uuid`` (the zero UUID: none yet)."""
    if isinstance(found_topic_id, int):
        return found_topic_id != topic_id
    return found_topic_id is not None and topic_uuid != ZERO_UUID and found_topic_id != topic_uuid


def partition_metadata_label(topic_id: int, topic_uuid: bytes) -> bytes | int:
    """What ``partition.metadata`` holds for the topic: its id, else its incarnation."""
    return topic_uuid if topic_uuid != ZERO_UUID else topic_id
