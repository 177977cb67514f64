"""The coordinator's side of converting a group between the classic protocol and
KIP-848's (Kafka's ``convertToConsumerGroup`` / ``convertToClassicGroup``): the
decisions and the new group come from :mod:`~broker.group.consumer.migration` (pure);
here the old group's timers end, its parked requests are answered, and the records of
both groups are written.

:class:`GroupConversion` is built by :class:`~broker.group.coordinator.GroupCoordinator`
with the classic rooms it touches (the group cache :class:`~broker.group.
metadata_manager.GroupMetadataManager`, the member sessions, the join room) and the
:class:`~broker.group.consumer.coordinator.ConsumerGroupCoordinator`, and called by it:

- :meth:`maybe_upgrade` before a ConsumerGroupHeartbeat is served: a well-formed first
  heartbeat (epoch 0) naming a classic group with members converts it when
  :func:`~broker.group.consumer.migration.upgrade_refusal` finds nothing against it.
  The classic group's join phase and session timeouts are cancelled, members parked in
  JoinGroup/SyncGroup are answered REBALANCE_IN_PROGRESS (they rejoin, now served by the
  consumer group), and the classic group stays in the cache as an Empty group (event
  CONVERTED) holding the committed offsets, which a consumer group keeps there.  Written,
  in this order: the classic group's record (no members) and the consumer group's
  records, so a coordinator that loads the partition finds the consumer group (a
  consumer group's id wins over an Empty classic group's).
- :meth:`forget_empty` before a JoinGroup naming an empty consumer group: it is
  forgotten if the policy allows downgrades, and the classic room serves the join;
- :meth:`maybe_downgrade` after a KIP-848 member left or was fenced: when
  :func:`~broker.group.consumer.migration.downgrade_due`, the consumer group's records
  get tombstones and leave the cache, the classic members become the members of the
  classic group of that id (created if needed; its offsets kept), whose record is
  written, and a rebalance starts (their next Heartbeat answers REBALANCE_IN_PROGRESS).

Costs: as :mod:`~broker.group.consumer.migration` says, plus O(members) timer work and
one append per group written.  Not thread-safe: the broker's event loop owns it.
"""

from __future__ import annotations

import logging

from broker.group.consumer.classic_protocol import ClassicProtocolError
from broker.group.consumer.coordinator import ConsumerGroupCoordinator
from broker.group.consumer.migration import (
    classic_members_of,
    consumer_group_from_classic,
    downgrade_due,
    upgrade_refusal,
)
from broker.group.members import CONSUMER_PROTOCOL_TYPE, Group
from broker.group.metadata_manager import GroupMetadataManager
from broker.group.protocol import answer_parked
from broker.group.rebalance import Rebalancer
from broker.group.sessions import MemberSessions
from broker.group.state import GroupEvent, GroupState
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import ConsumerGroupHeartbeatRequest
from timer.clock import Clock

log = logging.getLogger(__name__)


class GroupConversion:
    """Upgrades and downgrades of groups; see the module docstring."""

    def __init__(self, clock: Clock, manager: GroupMetadataManager, sessions: MemberSessions,
                 rebalancer: Rebalancer, consumer: ConsumerGroupCoordinator) -> None:
        self.clock = clock
        self.manager = manager
        self.sessions = sessions
        self.rebalancer = rebalancer
        self.consumer = consumer

    def maybe_upgrade(self, body: ConsumerGroupHeartbeatRequest, version: int) -> None:
        group_id = body["group_id"]
        classic = self.manager.groups.get(group_id)
        if (body["member_epoch"] != 0 or classic is None or not classic.members
                or self.consumer.is_consumer_group(group_id)
                or self.manager.coordinator_error(group_id) is not None
                or self.consumer.request_error(body, version) is not None):
            return  # (a refused request converts nothing)
        config = self.consumer.config
        refusal = upgrade_refusal(config.migration_policy, classic, config.max_size)
        if refusal is None:
            try:
                converted = consumer_group_from_classic(classic, self.consumer.topics(),
                                                        config.max_size)
            except ClassicProtocolError as exc:
                refusal = f"a member's bytes do not decode ({exc})"
        if refusal is not None:
            log.info("group %s stays a classic group: %s", group_id, refusal)
            return
        self._end_classic_members(classic)
        self.manager.store_group(classic, None, lambda code, offset: None)
        self.consumer.adopt(converted)
        log.info("group %s: classic group of generation %d converted to a consumer group "
                 "(%d members)", group_id, classic.generation_id, len(converted.members))

    def _end_classic_members(self, group: Group) -> None:
        self.rebalancer.cancel(group)
        for member_id in list(group.pending_members):
            self.sessions.cancel(group.group_id, member_id)
        group.pending_members.clear()
        for member in group.members.values():
            self.sessions.cancel(group.group_id, member.member_id)
            answer_parked(member, ErrorCode.REBALANCE_IN_PROGRESS)
        group.clear_members()
        group.protocol_type = group.protocol_name = group.leader_id = None
        group.transition(GroupEvent.CONVERTED, self.clock.now_ms())

    def forget_empty(self, group_id: str) -> bool:
        """A classic JoinGroup names an empty consumer group: when the policy allows
        downgrades it is forgotten (tombstones written; its offsets stay with the classic
        group of that id) and the join is the classic room's (Kafka's
        ``maybeDeleteEmptyConsumerGroup``).  Whether it was."""
        group = self.consumer.groups.get(group_id)
        if group is None or group.members \
                or not self.consumer.config.migration_policy.downgrade_enabled:
            return False
        self.consumer.delete_error(group_id)
        log.info("group %s: empty consumer group becomes a classic group", group_id)
        return True

    def maybe_downgrade(self, group_id: str) -> None:
        group = self.consumer.groups.get(group_id)
        if group is None or not downgrade_due(self.consumer.config.migration_policy, group):
            return
        classic = self.manager.groups.get(group_id)
        if classic is not None and not classic.is_(GroupState.EMPTY):
            log.warning("group %s: not downgraded, its classic group is %s", group_id,
                        classic.state.value)  # cannot be: it holds only offsets
            return
        members = classic_members_of(group, self.consumer.topics())
        generation = max(m.member_epoch for m in group.members.values())
        self.consumer.drop(group)
        classic = classic or self.manager.add_group(group_id)
        classic.generation_id = generation
        for member in members:
            classic.add(member)
            member.heartbeat = self.sessions.schedule(classic, member.member_id,
                                                      member.session_timeout_ms)
        classic.protocol_type = CONSUMER_PROTOCOL_TYPE
        classic.protocol_name = classic.select_protocol()
        self.manager.store_group(classic, None, lambda code, offset: None)
        log.info("group %s: consumer group converted back to a classic group of "
                 "generation %d (%d members)", group_id, generation, len(members))
        self.rebalancer.prepare_rebalance(classic)
