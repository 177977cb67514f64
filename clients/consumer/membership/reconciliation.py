"""KIP-848 assignment reconciliation: what a member gives up and takes on, in which order.

The coordinator answers a ConsumerGroupHeartbeat with the member's *target* assignment
(topic ids and partitions; null when unchanged).  The member moves from what it owns to
the target in Kafka's order (``CurrentAssignmentBuilder`` on the broker,
``ConsumerMembershipManager`` in Kafka's consumer):

1. **Resolve** topic ids to names with the consumer's metadata.  A partition of a topic
   id not known yet is held back (``unresolved``): it is neither assigned nor counted as
   revoked, and the consumer refreshes metadata and reconciles again.
2. **Revoke first**: ``revoked = owned - target``.  The consumer commits what it consumed
   of them (when auto-commit is on) and calls ``on_partitions_revoked``; only then does it
   stop owning them.  The broker hands a revoked partition to another member only after
   this member's heartbeat no longer lists it, so no partition is ever owned by two
   members at once.
3. **Then assign**: ``added = resolved target - owned`` (``on_partitions_assigned``).
4. **Acknowledge**: the next heartbeat carries the new owned set at once.

Format: a :class:`Plan` of three frozensets of ``TopicPartition``.  Cost: O(owned +
target).  Pure, immutable values; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from clients.protocol.topics import TopicPartition

TopicId = bytes  # 16 bytes, Kafka's UUID on the wire


@dataclass(frozen=True)
class TargetAssignment:
    """The coordinator's target for this member at ``member_epoch``: topic id ->
    partitions (``ConsumerGroupHeartbeatResponse.assignment.topic_partitions``)."""

    member_epoch: int
    partitions_by_topic_id: Mapping[TopicId, frozenset[int]]

    @classmethod
    def from_response(cls, member_epoch: int,
                      topic_partitions: Iterable[Mapping[str, object]]) -> TargetAssignment:
        by_id: dict[TopicId, frozenset[int]] = {}
        for entry in topic_partitions:
            topic_id = entry["topic_id"]
            partitions = entry["partitions"]
            if not isinstance(topic_id, bytes) or not isinstance(partitions, list):
                raise ValueError(f"malformed assignment entry {entry!r}")
            by_id[topic_id] = by_id.get(topic_id, frozenset()) | frozenset(
                int(p) for p in partitions)
        return cls(member_epoch, by_id)


@dataclass(frozen=True)
class Plan:
    """One reconciliation step: give up ``revoked`` (first), take on ``added`` (then);
    ``unresolved`` target topic ids wait for metadata."""

    revoked: frozenset[TopicPartition]
    added: frozenset[TopicPartition]
    unresolved: frozenset[TopicId]

    @property
    def changes_nothing(self) -> bool:
        return not self.revoked and not self.added


def plan(owned: Iterable[TopicPartition], target: TargetAssignment,
         topic_names: Mapping[TopicId, str]) -> Plan:
    """The step from ``owned`` to ``target`` given the known ``topic_names`` (id ->
    name).  Owned partitions are named (the member resolved their ids when it took
    them), so an owned partition missing from the resolved target is revoked."""
    owned_set = frozenset(owned)
    resolved: set[TopicPartition] = set()
    unresolved: set[TopicId] = set()
    for topic_id, partitions in target.partitions_by_topic_id.items():
        name = topic_names.get(topic_id)
        if name is None:
            unresolved.add(topic_id)
            continue
        resolved.update(TopicPartition(name, p) for p in partitions)
    return Plan(owned_set - resolved, frozenset(resolved - owned_set), frozenset(unresolved))
