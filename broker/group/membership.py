"""SyncGroup, Heartbeat, LeaveGroup and session expiry: the members' side of a generation
(the classic protocol, as in Kafka).

:class:`GroupMembership` is the group coordinator's room for members that have joined:

- uses the group cache (:class:`~broker.group.metadata_manager.GroupMetadataManager`:
  the member checks and the group's record), the member sessions
  (:class:`~broker.group.sessions.MemberSessions`) and the join room
  (:class:`~broker.group.rebalance.Rebalancer`, to start or end a rebalance), all given
  at construction; it owns nothing of its own;
- is called by the coordinator: :meth:`sync_group`, :meth:`heartbeat`,
  :meth:`leave_group`, and :meth:`on_heartbeat_expired` when a session timeout passes.

Behaviour:
- SyncGroup: the leader's assignments are written as a group-metadata record; once
  committed, every member waiting in SyncGroup gets its own assignment (Stable).  A
  failed write answers every waiting member with the mapped error
  (:func:`~broker.group.protocol.store_error`) and starts a rebalance; so do assignments
  over the memory bounds (:func:`~broker.group.footprint.assignments_too_large`,
  answered as a record too large to store).  In Stable a member gets its stored
  assignment (a leader's new assignments are ignored).
- Heartbeat: NONE in Stable and CompletingRebalance, REBALANCE_IN_PROGRESS while
  preparing; a member whose session timeout passes without a heartbeat (and that is not
  parked in JoinGroup/SyncGroup) is removed, which starts a rebalance.
- LeaveGroup: each member (or pending id) named leaves; a static instance named with a
  member id that is not its current one is FENCED_INSTANCE_ID.
- Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID as
  :meth:`GroupMetadataManager.member_request` checks; INCONSISTENT_GROUP_PROTOCOL for a
  SyncGroup naming another protocol type or name.

Every ``respond`` is called exactly once.

Costs: SyncGroup O(members); Heartbeat O(1); LeaveGroup O(members named) plus a
rebalance's start.  Not thread-safe: the broker's event loop (or a test's thread).
"""

from __future__ import annotations

import logging

from broker.group.footprint import assignments_too_large
from broker.group.members import Group, GroupMember
from broker.group.metadata_manager import GroupMetadataManager
from broker.group.protocol import GroupCoordinatorConfig, answer_parked, store_error, sync_answer
from broker.group.rebalance import Rebalancer
from broker.group.sessions import DelayedHeartbeat, MemberSessions
from broker.group.state import GroupEvent, GroupState
from broker.requests.respond import Respond
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    HeartbeatRequest,
    HeartbeatResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveGroupResponseMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from timer.clock import Clock

log = logging.getLogger(__name__)

_S = GroupState


class GroupMembership:
    """SyncGroup, Heartbeat, LeaveGroup, session expiry; see the module docstring."""

    def __init__(self, config: GroupCoordinatorConfig, clock: Clock,
                 manager: GroupMetadataManager, sessions: MemberSessions,
                 rebalancer: Rebalancer) -> None:
        self.config = config
        self.clock = clock
        self.manager = manager
        self.sessions = sessions
        self.rebalancer = rebalancer

    # -- SyncGroup -------------------------------------------------------------------

    def sync_group(self, body: SyncGroupRequest, respond: Respond[SyncGroupResponse]) -> None:
        group, error = self.manager.member_request(body)
        if group is None or error is not None:
            code, message = error or (ErrorCode.UNKNOWN_MEMBER_ID, None)
            respond(sync_answer(None, code, b"", message))
            return
        if (body.get("protocol_type") not in (None, group.protocol_type)
                or body.get("protocol_name") not in (None, group.protocol_name)):
            respond(sync_answer(None, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, b"",
                                "protocol type or name differs from the group's"))
            return
        member = group.members[body["member_id"]]
        if group.is_(_S.PREPARING_REBALANCE):
            respond(sync_answer(None, ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_(_S.STABLE):
            self.sessions.keep_alive(group, member)
            respond(sync_answer(group, ErrorCode.NONE, member.assignment))
        elif group.is_(_S.COMPLETING_REBALANCE):
            if member.sync_respond is not None:
                member.sync_respond(sync_answer(None, ErrorCode.REBALANCE_IN_PROGRESS))
            member.sync_respond = respond
            self.sessions.keep_alive(group, member)
            if member.member_id == group.leader_id:
                self._store_assignments(group, body)
        else:
            respond(sync_answer(None, ErrorCode.UNKNOWN_MEMBER_ID))

    def _store_assignments(self, group: Group, body: SyncGroupRequest) -> None:
        assignments = {a["member_id"]: bytes(a["assignment"])
                       for a in body["assignments"] if a["member_id"] in group.members}
        generation = group.generation_id
        added = assignments_too_large(self.config, group, assignments,
                                      self.manager.footprint_bytes)
        if added:
            # as Kafka answers a group record too large to store
            log.warning("group %s: the leader's assignments (%d bytes more) pass "
                        "group_max_metadata_bytes or "
                        "group_coordinator_max_metadata_bytes; not stored",
                        group.group_id, added)
            self._assignment_stored(group, generation, assignments,
                                    ErrorCode.MESSAGE_TOO_LARGE)
            return
        self.manager.store_group(group, assignments, lambda code, _offset: (
            self._assignment_stored(group, generation, assignments, code)))

    def _assignment_stored(self, group: Group, generation: int, assignments: dict[str, bytes],
                           code: ErrorCode) -> None:
        if (not self.manager.is_current(group) or group.generation_id != generation
                or not group.is_(_S.COMPLETING_REBALANCE)):
            return
        if code != ErrorCode.NONE:
            self.rebalancer.prepare_rebalance(group, store_error(code))
            return
        for member in group.members.values():
            group.set_assignment(member, assignments.get(member.member_id, b""))
        group.transition(GroupEvent.ASSIGNMENT_SYNCED, self.clock.now_ms())
        for member in group.members.values():
            respond, member.sync_respond = member.sync_respond, None
            if respond is not None:
                respond(sync_answer(group, ErrorCode.NONE, member.assignment))

    # -- Heartbeat, LeaveGroup, session expiry -----------------------------------------

    def heartbeat(self, body: HeartbeatRequest, respond: Respond[HeartbeatResponse]) -> None:
        group, error = self.manager.member_request(body)
        if group is None or error is not None:
            code, message = error or (ErrorCode.UNKNOWN_MEMBER_ID, None)
            respond({"error_code": int(code), "error_message": message})
            return
        self.sessions.keep_alive(group, group.members[body["member_id"]])
        code = (ErrorCode.REBALANCE_IN_PROGRESS if group.is_(_S.PREPARING_REBALANCE)
                else ErrorCode.NONE)
        respond({"error_code": int(code), "error_message": None})

    def leave_group(self, body: LeaveGroupRequest,
                    respond: Respond[LeaveGroupResponse]) -> None:
        group_id = body["group_id"]
        error = self.manager.coordinator_error(group_id)
        if error is not None:
            respond({"error_code": int(error[0]), "error_message": error[1], "members": []})
            return
        group = self.manager.groups.get(group_id)
        results: list[LeaveGroupResponseMember] = []
        for leaving in body["members"]:
            member_id, instance = leaving["member_id"], leaving.get("group_instance_id")
            code = ErrorCode.NONE
            if instance is not None and group is not None:
                known = group.static_members.get(instance)
                if known is not None and member_id and member_id != known:
                    code = ErrorCode.FENCED_INSTANCE_ID
                member_id = known or member_id
            if code == ErrorCode.NONE:
                code = self._leave(group, member_id)
            results.append({"member_id": member_id, "group_instance_id": instance,
                            "error_code": int(code)})
        respond({"error_code": 0, "error_message": None, "members": results})
        if group is not None:
            self.manager.maybe_drop(group)

    def _leave(self, group: Group | None, member_id: str) -> ErrorCode:
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        pending = group.pending_members.pop(member_id, None)
        if pending is not None:
            self.sessions.satisfy(pending)
            self.rebalancer.check_join(group)
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        log.info("group %s: member %s leaves", group.group_id, member_id)
        self._remove_member_and_rebalance(group, member)
        return ErrorCode.NONE

    def _remove_member_and_rebalance(self, group: Group, member: GroupMember) -> None:
        self.sessions.satisfy(member.heartbeat)
        answer_parked(member, ErrorCode.UNKNOWN_MEMBER_ID)
        group.remove(member.member_id)
        self.rebalancer.rebalance_or_check(group)

    def on_heartbeat_expired(self, op: DelayedHeartbeat) -> None:
        """A session timeout passed (called by :class:`MemberSessions`)."""
        group = op.group
        if not self.manager.is_current(group):
            return
        if group.pending_members.get(op.member_id) is op:
            del group.pending_members[op.member_id]
            self.rebalancer.check_join(group)
            self.manager.maybe_drop(group)
            return
        member = group.members.get(op.member_id)
        if member is None or member.heartbeat is not op:
            return
        if member.join_respond is not None or member.sync_respond is not None:
            self.sessions.keep_alive(group, member)  # parked in a request: alive
            return
        log.info("group %s: member %s missed its session timeout (%d ms)", group.group_id,
                 member.member_id, member.session_timeout_ms)
        self._remove_member_and_rebalance(group, member)
