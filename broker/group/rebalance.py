"""JoinGroup and the join phase of a rebalance (the classic protocol, as in Kafka; choices
where Kafka leaves room are marked *).

:class:`Rebalancer` is the group coordinator's join room:

- owns the join purgatory (``join_purgatory``): each group preparing a rebalance has one
  :mod:`broker.group.join` operation there, under its id, which calls back
  :meth:`complete_join` (and parks a follow-up initial delay through :meth:`park_join`);
- uses the group cache (:class:`~broker.group.metadata_manager.GroupMetadataManager`, for
  the coordinator checks, new groups and the group's record) and the member sessions
  (:class:`~broker.group.sessions.MemberSessions`), both given at construction;
- is called by the coordinator (:meth:`join_group`, :meth:`cancel`, :meth:`shutdown`)
  and by the sync/heartbeat/leave room (:meth:`rebalance_or_check`,
  :meth:`prepare_rebalance`, :meth:`check_join`).

JoinGroup:
- Without a member id (and without ``group_instance_id``) a member gets
  MEMBER_ID_REQUIRED with a generated id (KIP-394); the id is pending until the member
  rejoins with it, or its session timeout passes.  Static members get their id at once;
  so does every member of a request below v4 (``require_member_id`` False).
- A join phase starting from Empty waits ``group_initial_rebalance_delay_ms`` (extended
  while new members keep arriving, up to the rebalance timeout); otherwise it ends when
  every known member has rejoined, or at the largest rebalance timeout, removing the
  members that did not rejoin.  The generation then increases, the protocol is voted
  (:meth:`Group.select_protocol`), the leader gets every member's metadata.
- Static membership: a JoinGroup with no member id and a known ``group_instance_id``
  takes the old member's place under a new id; the old id is fenced
  (FENCED_INSTANCE_ID).  With unchanged protocols* there is no rebalance: the member
  gets the current generation (Stable: once the group's record is rewritten) and, in
  SyncGroup, its stored assignment.
- Errors: UNKNOWN_MEMBER_ID for an unknown member, INCONSISTENT_GROUP_PROTOCOL for a
  protocol type or set that does not fit, INVALID_SESSION_TIMEOUT outside the
  configured bounds, GROUP_MAX_SIZE_REACHED at ``group_max_size`` members (pending ids
  count), and the memory bounds of :mod:`broker.group.footprint`.

Every ``respond`` is called exactly once (now, or when the join phase ends).

Costs: a JoinGroup O(members) at most; :meth:`complete_join` O(members) (it answers every
member).  Not thread-safe: the broker's event loop (or a test's thread) owns it.
"""

from __future__ import annotations

import logging
import uuid

from broker.group.footprint import join_refusal
from broker.group.join import DelayedJoin, InitialDelayedJoin
from broker.group.members import Group, GroupMember
from broker.group.metadata_manager import GroupMetadataManager
from broker.group.protocol import (
    GroupCoordinatorConfig,
    answer_parked,
    join_error,
    member_error,
    store_error,
    sync_answer,
)
from broker.group.sessions import MemberSessions
from broker.group.state import GroupEvent, GroupState
from broker.requests.respond import Respond
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import JoinGroupRequest, JoinGroupResponse
from timer.clock import Clock
from timer.purgatory import Purgatory, TimerLike

log = logging.getLogger(__name__)

_S = GroupState


class Rebalancer:
    """JoinGroup and the join phase; see the module docstring."""

    def __init__(self, config: GroupCoordinatorConfig, clock: Clock, timer: TimerLike,
                 manager: GroupMetadataManager, sessions: MemberSessions) -> None:
        self.config = config
        self.clock = clock
        self.manager = manager
        self.sessions = sessions
        self.join_purgatory: Purgatory[DelayedJoin] = Purgatory("group-join", timer)

    def join_group(self, body: JoinGroupRequest, respond: Respond[JoinGroupResponse],
                   client_id: str = "", client_host: str = "",
                   require_member_id: bool = True) -> None:
        """JoinGroup; ``require_member_id`` False (requests below v4, before KIP-394): a
        new member gets its id and joins at once instead of MEMBER_ID_REQUIRED."""
        group_id, member_id = body["group_id"], body["member_id"]
        instance = body.get("group_instance_id")
        error = self.manager.coordinator_error(group_id)
        session_ms = body["session_timeout_ms"]
        if error is None and not (self.config.min_session_timeout_ms <= session_ms
                                  <= self.config.max_session_timeout_ms):
            error = (ErrorCode.INVALID_SESSION_TIMEOUT,
                     f"session_timeout_ms {session_ms} is outside "
                     f"[{self.config.min_session_timeout_ms}, "
                     f"{self.config.max_session_timeout_ms}]")
        group = self.manager.groups.get(group_id)
        if error is None and group is None and member_id:
            error = ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has no members"
        if error is not None:
            respond(join_error(member_id, *error))
            return
        if group is None:
            group = self.manager.add_group(group_id)
        protocols = [(p["name"], bytes(p["metadata"])) for p in body["protocols"]]
        rebalance_ms = body["rebalance_timeout_ms"]
        member = GroupMember(member_id, instance, client_id, client_host, session_ms,
                             rebalance_ms if rebalance_ms > 0 else session_ms,
                             body["protocol_type"], protocols)
        refused = join_refusal(self.config, group, member, self.manager.footprint_bytes)
        if refused is not None:
            log.warning("group %s: JoinGroup of %r refused: %s", group_id,
                        member_id or client_id, refused[1])
            respond(join_error(member_id, *refused))
        elif not group.supports(member.protocol_type, protocols):
            respond(join_error(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                               f"protocol type {member.protocol_type!r} / protocols "
                               f"{[n for n, _ in protocols]} do not fit group {group_id!r}"))
        elif not member_id:
            self._join_new_member(group, member, respond, require_member_id)
        else:
            self._join_known_member(group, member, respond)
        self.manager.maybe_drop(group)

    def _join_new_member(self, group: Group, member: GroupMember,
                         respond: Respond[JoinGroupResponse],
                         require_member_id: bool = True) -> None:
        instance = member.group_instance_id
        old_id = group.static_members.get(instance) if instance is not None else None
        if old_id is None and group.size >= self.config.max_size:
            respond(join_error("", ErrorCode.GROUP_MAX_SIZE_REACHED,
                               f"group {group.group_id!r} has {group.size} members"))
            return
        member.member_id = f"{instance or member.client_id or 'member'}-{uuid.uuid4()}"
        if old_id is not None:
            self._replace_static_member(group, old_id, member, respond)
        elif instance is not None or not require_member_id:
            self._add_member_and_rebalance(group, member, respond)
        else:
            group.pending_members[member.member_id] = self.sessions.schedule(
                group, member.member_id, member.session_timeout_ms)
            respond(join_error(member.member_id, ErrorCode.MEMBER_ID_REQUIRED,
                               "rejoin with the given member_id"))

    def _join_known_member(self, group: Group, request: GroupMember,
                           respond: Respond[JoinGroupResponse]) -> None:
        member_id = request.member_id
        pending = group.pending_members.pop(member_id, None)
        if pending is not None:
            self.sessions.satisfy(pending)
            self._add_member_and_rebalance(group, request, respond)
            return
        error = member_error(group, member_id, request.group_instance_id)
        if error is not None:
            respond(join_error(member_id, *error))
            return
        member = group.members[member_id]
        changed = member.protocols != request.protocols
        if group.is_(_S.COMPLETING_REBALANCE, _S.STABLE) and not changed and not (
                group.is_(_S.STABLE) and member_id == group.leader_id):
            respond(self._join_answer(group, member))
            return
        self._update_member(group, member, request)
        self._park_join_answer(member, respond)
        self.rebalance_or_check(group)

    def _update_member(self, group: Group, member: GroupMember, request: GroupMember) -> None:
        group.update_member(member, request.protocols, request.session_timeout_ms,
                            request.rebalance_timeout_ms)

    def _park_join_answer(self, member: GroupMember, respond: Respond[JoinGroupResponse]) -> None:
        if member.join_respond is not None:
            member.join_respond(join_error(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS,
                                           "superseded by a newer JoinGroup"))
        member.join_respond = respond

    def _add_member_and_rebalance(self, group: Group, member: GroupMember,
                                  respond: Respond[JoinGroupResponse]) -> None:
        member.join_respond = respond
        group.add(member)
        group.new_member_added = True
        member.heartbeat = self.sessions.schedule(group, member.member_id,
                                                  member.session_timeout_ms)
        self.rebalance_or_check(group)

    def _replace_static_member(self, group: Group, old_id: str, request: GroupMember,
                               respond: Respond[JoinGroupResponse]) -> None:
        old = group.members[old_id]
        answer_parked(old, ErrorCode.FENCED_INSTANCE_ID)
        self.sessions.satisfy(old.heartbeat)
        member = group.rename(old_id, request.member_id)
        member.heartbeat = self.sessions.schedule(group, member.member_id,
                                                  request.session_timeout_ms)
        if member.protocols != request.protocols or group.is_(_S.PREPARING_REBALANCE):
            self._update_member(group, member, request)
            member.join_respond = respond
            self.rebalance_or_check(group)
        elif group.is_(_S.STABLE):
            generation = group.generation_id

            def stored(code: ErrorCode, _offset: int) -> None:
                if code != ErrorCode.NONE or generation != group.generation_id:
                    respond(join_error(member.member_id, store_error(code) if code else
                                       ErrorCode.REBALANCE_IN_PROGRESS))
                else:
                    respond(self._join_answer(group, member))

            self.manager.store_group(group, None, stored)
        else:
            respond(self._join_answer(group, member))

    # -- the join phase ----------------------------------------------------------------

    def rebalance_or_check(self, group: Group) -> None:
        """The members changed: start a rebalance, or see whether the running join phase
        can end."""
        if group.is_(_S.PREPARING_REBALANCE):
            self.join_purgatory.check_and_complete(group.group_id)
        elif group.is_(_S.EMPTY, _S.STABLE, _S.COMPLETING_REBALANCE):
            self.prepare_rebalance(group)

    def check_join(self, group: Group) -> None:
        """A pending member id went away: the running join phase may end."""
        if group.is_(_S.PREPARING_REBALANCE):
            self.join_purgatory.check_and_complete(group.group_id)

    def prepare_rebalance(self, group: Group,
                          sync_error: ErrorCode = ErrorCode.REBALANCE_IN_PROGRESS) -> None:
        """Start a join phase; from CompletingRebalance the assignments are dropped and
        members waiting in SyncGroup get ``sync_error``."""
        if group.is_(_S.COMPLETING_REBALANCE):
            for member in group.members.values():
                group.set_assignment(member, b"")
                sync, member.sync_respond = member.sync_respond, None
                if sync is not None:
                    sync(sync_answer(None, sync_error))
        delay_ms = self.config.initial_rebalance_delay_ms
        timeout_ms = group.rebalance_timeout_ms()
        op: DelayedJoin
        if group.is_(_S.EMPTY) and delay_ms > 0:
            group.new_member_added = False
            op = InitialDelayedJoin(group, delay_ms, max(timeout_ms - delay_ms, 0),
                                    self.complete_join, self.park_join)
        else:
            op = DelayedJoin(group, timeout_ms, self.complete_join)
        group.transition(GroupEvent.REBALANCE, self.clock.now_ms())
        log.info("group %s: preparing rebalance (generation %d)", group.group_id,
                 group.generation_id)
        self.park_join(op)

    def park_join(self, op: DelayedJoin) -> None:
        self.join_purgatory.try_complete_else_watch(op, [op.group.group_id])

    def complete_join(self, group: Group) -> None:
        """End the join phase: drop members that did not rejoin, start a generation."""
        if not self.manager.is_current(group) or not group.is_(_S.PREPARING_REBALANCE):
            return
        for member in [m for m in group.members.values() if m.join_respond is None]:
            self.sessions.satisfy(member.heartbeat)
            group.remove(member.member_id)
        group.generation_id += 1
        now = self.clock.now_ms()
        if not group.members:
            group.protocol_name = None
            group.transition(GroupEvent.ALL_MEMBERS_GONE, now)
            self.manager.store_group(group, None, lambda code, offset: None)
            self.manager.maybe_drop(group)
            return
        group.protocol_name = group.select_protocol()
        group.transition(GroupEvent.JOIN_COMPLETE, now)
        log.info("group %s: generation %d, protocol %s, leader %s, %d members",
                 group.group_id, group.generation_id, group.protocol_name, group.leader_id,
                 len(group.members))
        for member in list(group.members.values()):
            respond, member.join_respond = member.join_respond, None
            assert respond is not None
            respond(self._join_answer(group, member))
            self.sessions.keep_alive(group, member)

    def _join_answer(self, group: Group, member: GroupMember) -> JoinGroupResponse:
        leader = member.member_id == group.leader_id
        return {"error_code": 0, "error_message": None, "generation_id": group.generation_id,
                "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                "leader": group.leader_id or "", "member_id": member.member_id,
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "metadata": m.metadata_for(group.protocol_name)}
                            for m in group.members.values()] if leader else []}

    def cancel(self, group: Group) -> None:
        """Drop the group's join phase without ending it (the group leaves)."""
        self.join_purgatory.cancel_for_key(group.group_id)

    def shutdown(self) -> None:
        self.join_purgatory.shutdown()
