"""Converting a group between the classic protocol and KIP-848's, as pure decisions and
pure conversions (Kafka's online upgrade and downgrade, ``group.consumer.migration.
policy``; the coordinator's side that ends timers, answers parked requests and writes
records is :mod:`~broker.group.consumer.conversion`).

Policy (:class:`MigrationPolicy`, the broker's ``group_consumer_migration_policy``,
Kafka's values; Kafka 4's default ``bidirectional``):

| policy        | upgrade (classic -> consumer) | downgrade (consumer -> classic) |
|---------------|-------------------------------|---------------------------------|
| bidirectional | yes                           | yes                             |
| upgrade       | yes                           | no                              |
| downgrade     | no                            | yes                             |
| disabled      | no                            | no                              |

**Upgrade** (:func:`upgrade_refusal`, :func:`consumer_group_from_classic`): a member
joins with ConsumerGroupHeartbeat (epoch 0) a classic group that has members.  The
group converts unless the policy forbids it, the group is Dead, its protocol type is not
``consumer`` (Connect, streams...), it already has ``max_size`` members (the consumer
group's bound) or a member's subscription or assignment bytes do not decode; refused,
the heartbeat is answered GROUP_ID_NOT_FOUND as before.  (An Empty classic group, one
holding only offsets, becomes a consumer group without any of this, as before.)
Converted, every classic member becomes a member of the consumer group that still
speaks the classic protocol (:class:`~broker.group.consumer.member.
ClassicMemberMetadata`: its session timeout and protocols), subscribed to the topics of
its subscription for the group's protocol (its first protocol when none was chosen
yet), at member epoch = the classic generation, Stable, owning the partitions of its
last assignment (topics that no longer exist are left out); the group epoch and the
target assignment epoch are the generation, and the target is what the members own,
so nothing moves until the joining member bumps the group epoch.

**Downgrade** (:func:`downgrade_due`, :func:`classic_members_of`): when the last
member speaking KIP-848's protocol leaves (or is fenced) and members remain that all
speak the classic protocol, the group converts back if the policy allows it and the
members share a protocol name: a classic group of those members (protocols, timeouts,
ids kept; each member's assignment its current one, encoded as ConsumerProtocolAssignment
v0), whose generation is the highest member epoch; the caller starts a rebalance so
the members rejoin the classic way.

Costs: upgrade O(members x their metadata and assignment bytes); downgrade O(members x
partitions).  Pure (the functions build new objects and do not change their inputs):
thread-safe.
"""

from __future__ import annotations

from enum import Enum

from broker.group.consumer.classic_protocol import assignment_of, subscription_of
from broker.group.consumer.group import ConsumerGroup, TopicsView
from broker.group.consumer.member import (
    ClassicMemberMetadata,
    ConsumerGroupMember,
    MemberAssignment,
    ReconciliationState,
)
from broker.group.consumer.protocol_views import assignment_v0
from broker.group.members import CONSUMER_PROTOCOL_TYPE, Group, GroupMember
from broker.group.state import GroupState


class MigrationPolicy(Enum):
    """Kafka's ``group.consumer.migration.policy``."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


def upgrade_refusal(policy: MigrationPolicy, group: Group, max_size: int) -> str | None:
    """Why the classic ``group`` (with members) does not convert to a consumer group
    (None: it does; the bytes are checked by :func:`consumer_group_from_classic`)."""
    if not policy.upgrade_enabled:
        return f"group_consumer_migration_policy {policy.value} does not allow upgrades"
    if group.is_(GroupState.DEAD):
        return "the group is Dead"
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return f"its protocol type is {group.protocol_type!r}, not 'consumer'"
    if len(group.members) >= max_size:
        return f"it has {len(group.members)} members, the consumer group bound is {max_size}"
    return None


def _protocol_of(group: Group, member: GroupMember) -> bytes:
    if group.protocol_name is not None:
        return member.metadata_for(group.protocol_name)
    return member.protocols[0][1] if member.protocols else b""


def consumer_group_from_classic(group: Group, topics: TopicsView,
                                max_size: int) -> ConsumerGroup:
    """The consumer group the classic ``group``'s members move into (see the module
    docstring); raises :class:`~broker.group.consumer.classic_protocol.
    ClassicProtocolError` when a member's bytes do not decode."""
    epoch = group.generation_id
    converted = ConsumerGroup(group.group_id, group.partition, max_size)
    converted.group_epoch = converted.assignment_epoch = epoch
    for m in group.members.values():
        subscription = subscription_of(_protocol_of(group, m), topics)
        owned = assignment_of(m.assignment, topics)
        member = ConsumerGroupMember(
            m.member_id, m.client_id, m.client_host, m.group_instance_id,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            subscribed_topic_names=subscription.topics,
            assignment=MemberAssignment(epoch, epoch, ReconciliationState.STABLE, owned),
            classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)))
        converted.members[member.member_id] = member
        converted.target[member.member_id] = owned
        for tp in member.assignment.partitions():
            converted.owners.setdefault(tp, member.member_id)
        if member.instance_id is not None:
            converted.static_members[member.instance_id] = member.member_id
        converted.subscribed.update(converted.member_topics(member, topics))
    return converted


def downgrade_due(policy: MigrationPolicy, group: ConsumerGroup) -> bool:
    """Whether ``group`` converts back to a classic group now: the policy allows it, it
    has members, every one speaks the classic protocol, and they share a protocol."""
    members = list(group.members.values())
    if not policy.downgrade_enabled or not members or any(m.classic is None for m in members):
        return False
    shared = None
    for m in members:
        assert m.classic is not None
        names = {name for name, _ in m.classic.protocols}
        shared = names if shared is None else shared & names
    return bool(shared)


def classic_members_of(group: ConsumerGroup, topics: TopicsView) -> list[GroupMember]:
    """The classic members of a group :func:`downgrade_due` said converts back, each
    with its current assignment as ConsumerProtocolAssignment v0 bytes."""
    names = {topic_id: name for name, (topic_id, _) in topics.items()}
    out: list[GroupMember] = []
    for m in group.members.values():
        assert m.classic is not None
        member = GroupMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                             m.classic.session_timeout_ms, m.rebalance_timeout_ms,
                             CONSUMER_PROTOCOL_TYPE, list(m.classic.protocols))
        member.assignment = assignment_v0(m.assignment.assigned, names)
        out.append(member)
    return out
