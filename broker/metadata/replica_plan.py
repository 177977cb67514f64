"""Which replicas a broker hosts once it has applied a complete metadata image.

A pure decision, shared by :meth:`broker.core.BrokerCore.reconcile` (which then opens,
deletes and drives the logs) and the simulation's brokers (``tests/sim/broker.py``):

* :func:`plan_replicas` -> :class:`ReplicaPlan`: ``drop``, the hosted partitions to
  stop hosting and delete (no longer assigned to this broker, their topic deleted, or
  re-created under another topic id than the one hosted), in hosting order; ``host``,
  every partition the image assigns to this broker with its topic id and registration
  (what becomes its leader or follower state), in the image's order.
* :func:`log_of_other_topic`: a log on disk whose ``partition.metadata`` names another
  topic id than the one to host belongs to a deleted topic of the same name (the broker
  was away when it went): it is deleted before the topic is hosted, never adopted.  A log
  without a topic id (written before ids were recorded) is adopted.

Costs: O(hosted + partitions in the image).  Pure functions of their arguments: any
thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from broker.metadata.image import MetadataImage, PartitionRegistration
from clients.protocol.topics import TopicPartition

__all__ = ["ReplicaPlan", "log_of_other_topic", "plan_replicas"]


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


def log_of_other_topic(found_topic_id: int | None, topic_id: int) -> bool:
    """The log's recorded topic id (None: none recorded) is another topic's."""
    return found_topic_id is not None and found_topic_id != topic_id
