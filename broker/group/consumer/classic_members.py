"""Classic members inside a KIP-848 consumer group: JoinGroup, SyncGroup, Heartbeat and
LeaveGroup of a member speaking the classic protocol, served by the consumer group
(Kafka's ``classicGroupJoinToConsumerGroup`` and its siblings).

Such members come from a converted classic group (:mod:`~broker.group.consumer.
conversion`) or join a consumer group with JoinGroup.  The consumer group computes
their assignment as any member's (its target, reconciled: a partition is handed over
only once its previous owner gave it up); the classic requests only carry it:

- **JoinGroup**: the member's subscription is read from its first protocol's
  ConsumerProtocolSubscription (:mod:`~broker.group.consumer.classic_protocol`; bytes
  that do not decode, or a protocol type other than ``consumer``:
  INCONSISTENT_GROUP_PROTOCOL); its owned partitions (v1+; none for an eager member,
  which gave everything up before rejoining) are what it still holds.  A new member
  (empty member id, not static: MEMBER_ID_REQUIRED with a generated one from JoinGroup
  v4; up to the group's ``max_size``) joins with epoch 0 as a ConsumerGroupHeartbeat
  would; a known one is reconciled against its owned partitions.  Memory: the classic room's
  bounds on protocols (``max_member_metadata_bytes`` per member: INVALID_REQUEST;
  ``max_metadata_bytes`` over the group's classic members: GROUP_MAX_SIZE_REACHED).
  Answered once the records are written: generation = its member epoch, its first
  protocol's name, no leader (every classic member is a follower: the group assigns).
  A member id of a member speaking KIP-848's protocol: UNKNOWN_MEMBER_ID; a session
  timeout outside the classic bounds: INVALID_SESSION_TIMEOUT.
- **SyncGroup**: its current assignment, as ConsumerProtocolAssignment v0.
- **Heartbeat**: restarts its session timeout (its own, from JoinGroup); answers
  REBALANCE_IN_PROGRESS when it must rejoin: its epoch is behind the group epoch, it must
  revoke partitions, or partitions it waits for were released.
- **LeaveGroup**: each classic member named leaves (its partitions are released); a
  member speaking KIP-848's protocol named here: UNKNOWN_MEMBER_ID.

Member checks (SyncGroup, Heartbeat): UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID (a static
instance held by another member), ILLEGAL_GENERATION (not its member epoch).  OffsetCommit
by classic members is the consumer group's (:meth:`~broker.group.consumer.coordinator.
ConsumerGroupCoordinator.commit_error`: the generation is the member epoch).
Static members (``group_instance_id``): a JoinGroup with an empty member id and the
instance id of a classic member takes its place under a new member id (its epoch,
assignment and target; no rebalance; the old id is then fenced: FENCED_INSTANCE_ID);
naming a member id other than the instance's, or the instance of a member speaking
KIP-848's protocol: FENCED_INSTANCE_ID.

Every ``respond`` is called exactly once.  Costs: JoinGroup as a heartbeat of
:mod:`~broker.group.consumer.group` plus O(metadata bytes); SyncGroup O(the member's
partitions); Heartbeat O(the member's target partitions); LeaveGroup O(members named).
Not thread-safe: the broker's event loop owns it.
"""

from __future__ import annotations

import logging
import uuid

from broker.group.consumer.classic_protocol import ClassicProtocolError, subscription_of
from broker.group.consumer.coordinator import ConsumerGroupCoordinator
from broker.group.consumer.group import ConsumerGroup
from broker.group.consumer.member import (
    ClassicMemberMetadata,
    ConsumerGroupMember,
    ReconciliationState,
)
from broker.group.consumer.protocol_views import assignment_v0
from broker.group.consumer.records import GroupSnapshot
from broker.group.members import CONSUMER_PROTOCOL_TYPE
from broker.group.protocol import Error, GroupCoordinatorConfig, join_error
from broker.requests.respond import Respond
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    ConsumerGroupHeartbeatRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveGroupResponseMember,
    SyncGroupRequest,
    SyncGroupResponse,
)

log = logging.getLogger(__name__)

_R = ReconciliationState


def must_rejoin(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """Whether a classic member's Heartbeat answers REBALANCE_IN_PROGRESS (Kafka's
    rule): its epoch is behind the group's, it must revoke, or it waits for partitions
    no other member holds any more."""
    state = member.assignment.state
    if member.member_epoch < group.group_epoch or state == _R.UNREVOKED_PARTITIONS:
        return True
    if state != _R.UNRELEASED_PARTITIONS:
        return False
    target = group.target.get(member.member_id, {})
    return not any(group.owners.get((t, p), member.member_id) != member.member_id
                   for t, ps in target.items() for p in ps)


class ClassicMembers:
    """The classic requests of a consumer group's members; see the module docstring."""

    def __init__(self, config: GroupCoordinatorConfig,
                 consumer: ConsumerGroupCoordinator) -> None:
        self.config = config
        self.consumer = consumer

    def _member(self, group_id: str, member_id: str, instance: str | None,
                generation: int) -> tuple[ConsumerGroup, ConsumerGroupMember] | Error:
        group = self.consumer.groups[group_id]
        member = group.members.get(member_id)
        if instance is not None and group.static_members.get(instance, member_id) != member_id:
            return ErrorCode.FENCED_INSTANCE_ID, f"instance {instance!r} is another member"
        if member is None or member.classic is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not a classic member " \
                f"of consumer group {group_id!r}"
        if generation != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION, f"generation {generation} is not the " \
                f"member's epoch {member.member_epoch}"
        return group, member

    # -- JoinGroup ---------------------------------------------------------------------

    def join_group(self, body: JoinGroupRequest, respond: Respond[JoinGroupResponse],
                   client_id: str = "", client_host: str = "",
                   require_member_id: bool = True) -> None:
        group_id, member_id = body["group_id"], body["member_id"]
        group = self.consumer.groups[group_id]
        session_ms = body["session_timeout_ms"]
        protocols = tuple((p["name"], bytes(p["metadata"])) for p in body["protocols"])
        topics = self.consumer.topics()
        if not (self.config.min_session_timeout_ms <= session_ms
                <= self.config.max_session_timeout_ms):
            respond(join_error(member_id, ErrorCode.INVALID_SESSION_TIMEOUT,
                               f"session_timeout_ms {session_ms} is outside the bounds"))
            return
        if body["protocol_type"] != CONSUMER_PROTOCOL_TYPE or not protocols:
            respond(join_error(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                               f"group {group_id!r} is a consumer group: protocol type "
                               "'consumer' with a subscription is needed"))
            return
        try:
            subscription = subscription_of(protocols[0][1], topics)
        except ClassicProtocolError as exc:
            respond(join_error(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                               f"group {group_id!r} is a consumer group: {exc}"))
            return
        instance = body.get("group_instance_id")
        if not member_id:
            member_id = f"{instance or client_id or 'member'}-{uuid.uuid4()}"
            if require_member_id and instance is None:
                respond(join_error(member_id, ErrorCode.MEMBER_ID_REQUIRED,
                                   "rejoin with the given member_id"))
                return
        member = group.members.get(member_id)
        if member is not None and member.classic is None:
            respond(join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} "
                               "speaks the consumer protocol (ConsumerGroupHeartbeat)"))
            return
        held_by = group.members.get(group.static_members.get(instance or "", member_id))
        replacing = held_by if held_by is not None and held_by.member_id != member_id \
            else None
        if replacing is not None and (replacing.classic is None or body["member_id"]):
            respond(join_error(member_id, ErrorCode.FENCED_INSTANCE_ID,
                               f"instance {instance!r} is held by another member"))
            return
        if member is None and replacing is None \
                and len(group.members) >= self.consumer.config.max_size:
            respond(join_error(member_id, ErrorCode.GROUP_MAX_SIZE_REACHED,
                               f"group {group_id!r} is full"))
            return
        refused = self._too_large(group, {member_id, replacing.member_id if replacing
                                          else member_id}, protocols)
        if refused is not None:
            respond(join_error(member_id, *refused))
            return
        before = GroupSnapshot.of(group)
        if replacing is not None:  # the static member's place, no rebalance
            member = self.consumer.rename_member(group, replacing, member_id)
        joining = member is None
        member = member or ConsumerGroupMember(member_id, client_id, client_host)
        member.classic = ClassicMemberMetadata(session_ms, protocols)
        rebalance_ms = body.get("rebalance_timeout_ms", -1)
        heartbeat: ConsumerGroupHeartbeatRequest = {
            "group_id": group_id, "member_id": member_id,
            "member_epoch": 0 if joining else member.member_epoch, "instance_id": instance,
            "rack_id": None, "rebalance_timeout_ms": rebalance_ms if rebalance_ms > 0
            else session_ms, "subscribed_topic_names": list(subscription.topics),
            "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": [{"topic_id": t, "partitions": sorted(ps)}
                                 for t, ps in sorted(subscription.owned.items())]}
        group.heartbeat(member, heartbeat, topics)
        revoking = member.assignment.revoking
        if member.assignment.state == _R.UNREVOKED_PARTITIONS and not any(
                subscription.owned.get(t, frozenset()) & ps for t, ps in revoking.items()):
            # it no longer holds what it must give up (eager: nothing): move on now
            group.heartbeat(member, {**heartbeat, "member_epoch": member.member_epoch},
                            topics)
        self.consumer.restart_timeouts(group, member)
        answer: JoinGroupResponse = {
            "error_code": 0, "error_message": None, "generation_id": member.member_epoch,
            "protocol_type": CONSUMER_PROTOCOL_TYPE, "protocol_name": protocols[0][0],
            "leader": "", "member_id": member_id, "members": []}

        def written(code: ErrorCode) -> None:
            respond(answer if code == ErrorCode.NONE else join_error(member_id, code))

        self.consumer.write(group, before, done=written)

    def _too_large(self, group: ConsumerGroup, member_ids: set[str],
                   protocols: tuple[tuple[str, bytes], ...]) -> Error | None:
        """The classic room's memory bounds on what classic members hold (their
        protocols): one member's (the one joining, under ``member_ids``), and the
        group's."""
        need = sum(len(name) + len(data) for name, data in protocols) + max(map(len, member_ids))
        if need > self.config.max_member_metadata_bytes:
            return (ErrorCode.INVALID_REQUEST, f"the member's protocols take {need} bytes, "
                    f"more than {self.config.max_member_metadata_bytes}")
        held = sum(len(name) + len(data) + len(m.member_id) for m in group.members.values()
                   if m.classic is not None and m.member_id not in member_ids
                   for name, data in m.classic.protocols)
        if held + need > self.config.max_metadata_bytes:
            return (ErrorCode.GROUP_MAX_SIZE_REACHED, f"the classic members of group "
                    f"{group.group_id!r} would hold more than {self.config.max_metadata_bytes} "
                    "bytes of protocols")
        return None

    # -- SyncGroup, Heartbeat ----------------------------------------------------------

    def sync_group(self, body: SyncGroupRequest, respond: Respond[SyncGroupResponse]) -> None:
        found = self._member(body["group_id"], body["member_id"],
                             body.get("group_instance_id"), body["generation_id"])
        if not isinstance(found, tuple) or not isinstance(found[0], ConsumerGroup):
            code, message = found
            respond({"error_code": int(code), "error_message": message,
                     "protocol_type": None, "protocol_name": None, "assignment": b""})
            return
        group, member = found
        assert member.classic is not None
        protocol = body.get("protocol_name") or member.classic.protocols[0][0]
        if body.get("protocol_type") not in (None, CONSUMER_PROTOCOL_TYPE) or protocol not in {
                name for name, _ in member.classic.protocols}:
            respond({"error_code": int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
                     "error_message": "protocol type or name is not the member's",
                     "protocol_type": None, "protocol_name": None, "assignment": b""})
            return
        self.consumer.restart_timeouts(group, member)
        names = {topic_id: name for name, (topic_id, _) in self.consumer.topics().items()}
        respond({"error_code": 0, "error_message": None,
                 "protocol_type": CONSUMER_PROTOCOL_TYPE, "protocol_name": protocol,
                 "assignment": assignment_v0(member.assignment.assigned, names)})

    def heartbeat(self, body: HeartbeatRequest, respond: Respond[HeartbeatResponse]) -> None:
        found = self._member(body["group_id"], body["member_id"],
                             body.get("group_instance_id"), body["generation_id"])
        if not isinstance(found, tuple) or not isinstance(found[0], ConsumerGroup):
            code, message = found
            respond({"error_code": int(code), "error_message": message})
            return
        group, member = found
        self.consumer.restart_timeouts(group, member)
        rejoin = must_rejoin(group, member)
        respond({"error_code": int(ErrorCode.REBALANCE_IN_PROGRESS if rejoin
                                   else ErrorCode.NONE), "error_message": None})

    # -- LeaveGroup --------------------------------------------------------------------

    def leave_group(self, body: LeaveGroupRequest,
                    respond: Respond[LeaveGroupResponse]) -> None:
        group = self.consumer.groups[body["group_id"]]
        before = GroupSnapshot.of(group)
        results: list[LeaveGroupResponseMember] = []
        for leaving in body["members"]:
            member_id, instance = leaving["member_id"], leaving.get("group_instance_id")
            code = ErrorCode.NONE
            if instance is not None:
                known = group.static_members.get(instance)
                if known is not None and member_id and member_id != known:
                    code = ErrorCode.FENCED_INSTANCE_ID
                member_id = known or member_id
            member = group.members.get(member_id)
            if code == ErrorCode.NONE and (member is None or member.classic is None):
                code = ErrorCode.UNKNOWN_MEMBER_ID
            if code == ErrorCode.NONE:
                self.consumer.remove_member(group, member_id, "left (LeaveGroup)")
            results.append({"member_id": member_id, "group_instance_id": instance,
                            "error_code": int(code)})

        def written(code: ErrorCode) -> None:
            respond({"error_code": int(code), "error_message": None,
                     "members": results if code == ErrorCode.NONE else []})

        self.consumer.write(group, before, done=written)
