"""The group coordinator (sans-IO): JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DeleteGroups, and the groups of the offsets partitions it owns.

One per broker.  It serves the groups whose offsets-topic partition this broker leads
(:func:`broker.group.protocol.partition_for`, Kafka's formula).  The adapter
(:mod:`broker.group.offsets_topic`) tells it which partitions it owns: :meth:`begin_load`,
:meth:`load_record` for every record of the partition, :meth:`finish_load`, and
:meth:`unload` when leadership is lost.  Requests for a group of a partition being
loaded get COORDINATOR_LOAD_IN_PROGRESS; of a partition not owned, NOT_COORDINATOR.
OffsetCommit, OffsetFetch, ListGroups and DescribeGroups are functions over a coordinator
(:mod:`broker.group.offsets`).

What it owns: the groups (``groups``, id -> :class:`Group`), the join purgatory, and two
collaborators it calls:

- :class:`~broker.group.ownership.PartitionOwnership` (``ownership``): which partitions are
  owned or loading, and the loading of records into groups; :meth:`finish_load` installs
  the loaded groups and starts their members' session timeouts.  Unloading answers parked
  JoinGroup/SyncGroup requests with NOT_COORDINATOR, cancels the group's timers and marks
  it Dead.
- :class:`~broker.group.sessions.MemberSessions` (``sessions``): member liveness; each
  member (and each pending KIP-394 id) has one heartbeat operation there, any sign of life
  (:meth:`keep_alive`) restarts it, and an expiry calls :meth:`on_heartbeat_expired`.

Join phases are :mod:`broker.group.join` operations in the join purgatory; they call back
:meth:`complete_join` (and park a follow-up initial delay through :meth:`park_join`).

Writes go through the injected :class:`~broker.group.protocol.OffsetsLog`: ``append(partition,
records, done)`` appends ``(key, value)`` records to the offsets partition and calls
``done(error_code, base_offset)`` once they are committed (acks=all) or failed.
``partition_exists(topic, index)`` (injected; default: every partition exists) is what an
OffsetCommit checks its partitions against.

Requests and answers are the wire bodies of :mod:`clients.protocol.registry`; every ``respond`` is
called exactly once.  Time comes from the injected clock; delays (join phase, session
timeouts) are operations in two purgatories on the injected timer, so tests drive
everything with a ManualClock.

Classic protocol, as in Kafka (choices where Kafka leaves room are marked *):
- JoinGroup without a member id (and without ``group_instance_id``) gets
  MEMBER_ID_REQUIRED with a generated id (KIP-394); the id is pending until the member
  rejoins with it, or its session timeout passes.  Static members get their id at once.
- A join phase starting from Empty waits ``group_initial_rebalance_delay_ms`` (extended
  while new members keep arriving, up to the rebalance timeout); otherwise it ends when
  every known member has rejoined, or at the largest rebalance timeout, removing the
  members that did not rejoin.  The generation then increases, the protocol is voted
  (:meth:`Group.select_protocol`), the leader gets every member's metadata.
- SyncGroup: the leader's assignments are written as a group-metadata record; once
  committed, every member waiting in SyncGroup gets its own assignment (Stable).
- Heartbeat: NONE in Stable and CompletingRebalance, REBALANCE_IN_PROGRESS while
  preparing; a member whose session timeout passes without a heartbeat (and that is not
  parked in JoinGroup/SyncGroup) is removed, which starts a rebalance.
- Static membership: a JoinGroup with no member id and a known ``group_instance_id``
  takes the old member's place under a new id; the old id is fenced
  (FENCED_INSTANCE_ID).  With unchanged protocols* there is no rebalance: the member
  gets the current generation and, in SyncGroup, its stored assignment (a leader's new
  assignments are ignored in Stable).
- Errors: UNKNOWN_MEMBER_ID for an unknown member, ILLEGAL_GENERATION for a wrong
  generation, INCONSISTENT_GROUP_PROTOCOL for a protocol type or set that does not fit,
  INVALID_SESSION_TIMEOUT outside the configured bounds, GROUP_MAX_SIZE_REACHED at
  ``group_max_size`` members (pending ids count).
- Memory (*, beyond Kafka, which relies on its request size): a JoinGroup whose member
  would hold more than ``max_member_metadata_bytes`` (protocol names and metadata, ids,
  client id and host) gets INVALID_REQUEST; one that would take its group past
  ``max_metadata_bytes`` or every group of this coordinator past
  ``coordinator_max_metadata_bytes`` gets GROUP_MAX_SIZE_REACHED; a leader's SyncGroup
  whose assignments would do the same is answered as a group record too large to store
  (INVALID_COMMIT_OFFSET_SIZE to every member, then a rebalance).  So the leader's
  JoinGroup answer (every member's metadata) and the group's record always fit.

Costs: join/sync/heartbeat O(members) at most (join completion answers every member);
load O(records); unload O(groups of the partition x members).  Not thread-safe: the
broker's event loop owns it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from broker.group.join import DelayedJoin, InitialDelayedJoin
from broker.group.members import Body, Group, GroupMember, Respond
from broker.group.metadata import (
    GroupMetadataKey,
    OffsetCommitKey,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
)
from broker.group.ownership import PartitionOwnership
from broker.group.protocol import (
    Done,
    Error,
    GroupCoordinatorConfig,
    OffsetsLog,
    join_error,
    partition_for,
    store_error,
    sync_answer,
)
from broker.group.sessions import DelayedHeartbeat, MemberSessions
from broker.group.state import GroupEvent, GroupState
from clients.protocol.errors import ErrorCode
from timer.clock import Clock
from timer.purgatory import Purgatory, TimerLike

log = logging.getLogger(__name__)

_S = GroupState


class GroupCoordinator:
    """The classic group protocol over the groups of the owned offsets partitions; see
    the module docstring."""

    def __init__(self, config: GroupCoordinatorConfig, clock: Clock, timer: TimerLike,
                 log_: OffsetsLog, num_partitions: int = 0,
                 partition_exists: Callable[[str, int], bool] = lambda topic, index: True
                 ) -> None:
        self.config = config
        self.clock = clock
        self.log = log_
        self.num_partitions = num_partitions  # of the offsets topic; 0 = no topic yet
        self.partition_exists = partition_exists
        self.groups: dict[str, Group] = {}
        self.ownership = PartitionOwnership(clock)
        self.sessions = MemberSessions(timer, self.on_heartbeat_expired)
        self.join_purgatory: Purgatory[DelayedJoin] = Purgatory("group-join", timer)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def coordinator_error(self, group_id: str) -> Error | None:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, "group_id is empty"
        if self.num_partitions <= 0:
            return ErrorCode.NOT_COORDINATOR, "the offsets topic does not exist yet"
        return self.ownership.error(self.partition_for(group_id))

    # -- ownership: load, unload ---------------------------------------------------------

    def begin_load(self, partition: int, leader_epoch: int) -> None:
        self.unload(partition)
        self.ownership.begin(partition, leader_epoch)

    def load_record(self, partition: int, key: bytes | None, value: bytes | None,
                    log_offset: int) -> None:
        self.ownership.apply(partition, key, value, log_offset)

    def finish_load(self, partition: int) -> None:
        for group in self.ownership.finish(partition):
            self.groups[group.group_id] = group
            for member in group.members.values():
                self.keep_alive(group, member)

    def unload(self, partition: int) -> None:
        self.ownership.forget(partition)
        for group in [g for g in self.groups.values() if g.partition == partition]:
            self._unload_group(group, ErrorCode.NOT_COORDINATOR)

    def _unload_group(self, group: Group, code: ErrorCode) -> None:
        del self.groups[group.group_id]
        self.join_purgatory.cancel_for_key(group.group_id)
        for member_id in list(group.pending_members):
            self.sessions.cancel(group.group_id, member_id)
        for member in group.members.values():
            self.sessions.cancel(group.group_id, member.member_id)
            self._answer_parked(member, code)
        group.transition(GroupEvent.UNLOAD, self.clock.now_ms())

    def shutdown(self) -> None:
        """Stop: drop every group without answering parked requests (the broker stops)."""
        for group in self.groups.values():
            for member in group.members.values():
                member.join_respond = member.sync_respond = None
        for partition in self.ownership.partitions():
            self.unload(partition)
        self.join_purgatory.shutdown()
        self.sessions.shutdown()

    # -- shared by the protocol ----------------------------------------------------------

    def keep_alive(self, group: Group, member: GroupMember) -> None:
        """The member showed it is alive: restart its session timeout."""
        self.sessions.keep_alive(group, member)

    def _answer_parked(self, member: GroupMember, code: ErrorCode) -> None:
        join, member.join_respond = member.join_respond, None
        if join is not None:
            join(join_error(member.member_id, code))
        sync, member.sync_respond = member.sync_respond, None
        if sync is not None:
            sync(sync_answer(None, code))

    def _store_group(self, group: Group, assignments: dict[str, bytes] | None,
                     done: Done) -> None:
        key = encode_group_metadata_key(GroupMetadataKey(group.group_id))
        value = encode_group_metadata_value(group.metadata_value(assignments))
        self.log.append(group.partition, [(key, value)], done)

    def _maybe_drop(self, group: Group) -> None:
        """Forget a group that never had a generation and holds nothing."""
        if (group.is_(_S.EMPTY) and not group.members and not group.pending_members
                and not group.offsets and group.generation_id == 0
                and self.groups.get(group.group_id) is group):
            del self.groups[group.group_id]

    # -- DeleteGroups ----------------------------------------------------------------

    def delete_groups(self, group_ids: list[str],
                      respond: Callable[[list[tuple[str, ErrorCode]]], None]) -> None:
        """DeleteGroups: ``respond`` gets ``(group_id, error)`` for each id, in order.

        Only an Empty group (no members; it may hold committed offsets) is deleted:
        GROUP_ID_NOT_FOUND for a group this coordinator does not have, NON_EMPTY_GROUP
        for one with members, the coordinator errors (NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS) as for any group request.  A deleted group leaves
        memory at once (Dead) and tombstones for its metadata and every committed offset
        are written to its offsets partition; the answer waits for them (a failed write
        maps as :func:`store_error` says)."""
        codes: dict[str, ErrorCode] = {}
        tombstones: dict[int, list[tuple[bytes, bytes | None]]] = {}
        waiting: dict[int, list[str]] = {}
        for group_id in group_ids:
            if group_id in codes:
                continue
            error = self.coordinator_error(group_id)
            group = self.groups.get(group_id)
            if error is not None:
                codes[group_id] = error[0]
            elif group is None or group.is_(_S.DEAD):
                codes[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_(_S.EMPTY):
                codes[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                records = tombstones.setdefault(group.partition, [])
                records.append((encode_group_metadata_key(GroupMetadataKey(group_id)), None))
                records.extend((encode_offset_commit_key(OffsetCommitKey(group_id, *tp)), None)
                               for tp in sorted(group.offsets))
                waiting.setdefault(group.partition, []).append(group_id)
                self._unload_group(group, ErrorCode.UNKNOWN_MEMBER_ID)
                log.info("group %s: deleted", group_id)
        left = len(tombstones)

        def answer() -> None:
            respond([(g, codes[g]) for g in dict.fromkeys(group_ids)])

        def stored(partition: int, code: ErrorCode) -> None:
            nonlocal left
            for group_id in waiting[partition]:
                codes[group_id] = store_error(code)
            left -= 1
            if left == 0:
                answer()

        if not tombstones:
            answer()
        for partition, records in tombstones.items():
            def done(code: ErrorCode, _offset: int, p: int = partition) -> None:
                stored(p, code)
            self.log.append(partition, records, done)

    # -- JoinGroup -------------------------------------------------------------------

    def join_group(self, body: Body, respond: Respond, client_id: str = "",
                   client_host: str = "", require_member_id: bool = True) -> None:
        """JoinGroup; ``require_member_id`` False (requests below v4, before KIP-394): a
        new member gets its id and joins at once instead of MEMBER_ID_REQUIRED."""
        group_id, member_id = body["group_id"], body["member_id"]
        instance = body.get("group_instance_id")
        error = self.coordinator_error(group_id)
        session_ms = body["session_timeout_ms"]
        if error is None and not (self.config.min_session_timeout_ms <= session_ms
                                  <= self.config.max_session_timeout_ms):
            error = (ErrorCode.INVALID_SESSION_TIMEOUT,
                     f"session_timeout_ms {session_ms} is outside "
                     f"[{self.config.min_session_timeout_ms}, "
                     f"{self.config.max_session_timeout_ms}]")
        group = self.groups.get(group_id)
        if error is None and group is None and member_id:
            error = ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has no members"
        if error is not None:
            respond(join_error(member_id, *error))
            return
        if group is None:
            group = self.groups[group_id] = Group(group_id, self.partition_for(group_id),
                                                  self.clock.now_ms())
        protocols = [(p["name"], bytes(p["metadata"])) for p in body["protocols"]]
        rebalance_ms = body["rebalance_timeout_ms"]
        member = GroupMember(member_id, instance, client_id, client_host, session_ms,
                        rebalance_ms if rebalance_ms > 0 else session_ms,
                        body["protocol_type"], protocols)
        refused = self._footprint_refusal(group, member)
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
        self._maybe_drop(group)

    def _footprint_refusal(self, group: Group, request: GroupMember) -> Error | None:
        """Why a JoinGroup must be refused for the memory it would hold (None: it fits).
        A member's own protocols and ids over ``max_member_metadata_bytes``:
        INVALID_REQUEST; the group's or this coordinator's total over its bound:
        GROUP_MAX_SIZE_REACHED (the group is full, bytes-wise).  A rejoin that adds no
        bytes is never refused."""
        config = self.config
        need = request.footprint_bytes()
        if not request.member_id:  # the id it is about to get: "<prefix>-<uuid4>"
            need += len(request.group_instance_id or request.client_id or "member") + 37
        if need > config.max_member_metadata_bytes:
            return (ErrorCode.INVALID_REQUEST,
                    f"the member's protocols and ids take {need} bytes, more than "
                    f"group_max_member_metadata_bytes {config.max_member_metadata_bytes}")
        known = group.members.get(request.member_id) if request.member_id else None
        if known is None and request.group_instance_id is not None:
            known = group.members.get(group.static_members.get(request.group_instance_id, ""))
        added = need - (known.footprint_bytes() - len(known.assignment) if known else 0)
        if added <= 0:
            return None
        if group.footprint_bytes + added > config.max_metadata_bytes:
            return (ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"group {group.group_id!r} holds {group.footprint_bytes} bytes of member "
                    f"metadata; {added} more would pass group_max_metadata_bytes "
                    f"{config.max_metadata_bytes}")
        held = self.footprint_bytes()
        if held + added > config.coordinator_max_metadata_bytes:
            return (ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"this coordinator's groups hold {held} bytes of member metadata; {added} "
                    "more would pass group_coordinator_max_metadata_bytes "
                    f"{config.coordinator_max_metadata_bytes}")
        return None

    def footprint_bytes(self) -> int:
        """Member metadata held by every group of this coordinator (O(groups))."""
        return sum(g.footprint_bytes for g in self.groups.values())

    def _join_new_member(self, group: Group, member: GroupMember, respond: Respond,
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

    def member_error(self, group: Group, member_id: str, instance: str | None) -> Error | None:
        if instance is not None:
            known = group.static_members.get(instance)
            if known is not None and known != member_id:
                return (ErrorCode.FENCED_INSTANCE_ID, f"instance {instance!r} is now member "
                        f"{known!r}, not {member_id!r}")
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not a member of the group"
        return None

    def _join_known_member(self, group: Group, request: GroupMember, respond: Respond) -> None:
        member_id = request.member_id
        pending = group.pending_members.pop(member_id, None)
        if pending is not None:
            self.sessions.satisfy(pending)
            self._add_member_and_rebalance(group, request, respond)
            return
        error = self.member_error(group, member_id, request.group_instance_id)
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
        self._park_join_answer(group, member, respond)
        self._rebalance_or_check(group)

    def _update_member(self, group: Group, member: GroupMember, request: GroupMember) -> None:
        group.update_member(member, request.protocols, request.session_timeout_ms,
                            request.rebalance_timeout_ms)

    def _park_join_answer(self, group: Group, member: GroupMember, respond: Respond) -> None:
        if member.join_respond is not None:
            member.join_respond(join_error(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS,
                                           "superseded by a newer JoinGroup"))
        member.join_respond = respond

    def _add_member_and_rebalance(self, group: Group, member: GroupMember,
                                  respond: Respond) -> None:
        member.join_respond = respond
        group.add(member)
        group.new_member_added = True
        member.heartbeat = self.sessions.schedule(group, member.member_id,
                                                    member.session_timeout_ms)
        self._rebalance_or_check(group)

    def _replace_static_member(self, group: Group, old_id: str, request: GroupMember,
                               respond: Respond) -> None:
        old = group.members[old_id]
        self._answer_parked(old, ErrorCode.FENCED_INSTANCE_ID)
        self.sessions.satisfy(old.heartbeat)
        member = group.rename(old_id, request.member_id)
        member.heartbeat = self.sessions.schedule(group, member.member_id,
                                                    request.session_timeout_ms)
        if member.protocols != request.protocols or group.is_(_S.PREPARING_REBALANCE):
            self._update_member(group, member, request)
            member.join_respond = respond
            self._rebalance_or_check(group)
        elif group.is_(_S.STABLE):
            generation = group.generation_id

            def stored(code: ErrorCode, _offset: int) -> None:
                if code != ErrorCode.NONE or generation != group.generation_id:
                    respond(join_error(member.member_id, store_error(code) if code else
                                       ErrorCode.REBALANCE_IN_PROGRESS))
                else:
                    respond(self._join_answer(group, member))

            self._store_group(group, None, stored)
        else:
            respond(self._join_answer(group, member))

    def _rebalance_or_check(self, group: Group) -> None:
        if group.is_(_S.PREPARING_REBALANCE):
            self.join_purgatory.check_and_complete(group.group_id)
        elif group.is_(_S.EMPTY, _S.STABLE, _S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: Group) -> None:
        if group.is_(_S.COMPLETING_REBALANCE):
            self._reset_assignments(group, ErrorCode.REBALANCE_IN_PROGRESS)
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
        if self.groups.get(group.group_id) is not group or not group.is_(
                _S.PREPARING_REBALANCE):
            return
        for member in [m for m in group.members.values() if m.join_respond is None]:
            self.sessions.satisfy(member.heartbeat)
            group.remove(member.member_id)
        group.generation_id += 1
        now = self.clock.now_ms()
        if not group.members:
            group.protocol_name = None
            group.transition(GroupEvent.ALL_MEMBERS_GONE, now)
            self._store_group(group, None, lambda code, offset: None)
            self._maybe_drop(group)
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
            self.keep_alive(group, member)

    def _join_answer(self, group: Group, member: GroupMember) -> Body:
        leader = member.member_id == group.leader_id
        return {"error_code": 0, "error_message": None, "generation_id": group.generation_id,
                "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                "leader": group.leader_id or "", "member_id": member.member_id,
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "metadata": m.metadata_for(group.protocol_name)}
                            for m in group.members.values()] if leader else []}

    # -- SyncGroup -------------------------------------------------------------------

    def sync_group(self, body: Body, respond: Respond) -> None:
        group, error = self.member_request(body)
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
            self.keep_alive(group, member)
            respond(sync_answer(group, ErrorCode.NONE, member.assignment))
        elif group.is_(_S.COMPLETING_REBALANCE):
            if member.sync_respond is not None:
                member.sync_respond(sync_answer(None, ErrorCode.REBALANCE_IN_PROGRESS))
            member.sync_respond = respond
            self.keep_alive(group, member)
            if member.member_id == group.leader_id:
                assignments = {a["member_id"]: bytes(a["assignment"])
                               for a in body["assignments"] if a["member_id"] in group.members}
                generation = group.generation_id
                added = (sum(map(len, assignments.values()))
                         - sum(len(m.assignment) for m in group.members.values()))
                if added > 0 and (
                        group.footprint_bytes + added > self.config.max_metadata_bytes
                        or self.footprint_bytes() + added
                        > self.config.coordinator_max_metadata_bytes):
                    # as Kafka answers a group record too large to store
                    log.warning("group %s: the leader's assignments (%d bytes more) pass "
                                "group_max_metadata_bytes or "
                                "group_coordinator_max_metadata_bytes; not stored",
                                group.group_id, added)
                    self._assignment_stored(group, generation, assignments,
                                            ErrorCode.MESSAGE_TOO_LARGE)
                    return
                self._store_group(group, assignments, lambda code, _offset: (
                    self._assignment_stored(group, generation, assignments, code)))
        else:
            respond(sync_answer(None, ErrorCode.UNKNOWN_MEMBER_ID))

    def _assignment_stored(self, group: Group, generation: int, assignments: dict[str, bytes],
                           code: ErrorCode) -> None:
        if (self.groups.get(group.group_id) is not group or group.generation_id != generation
                or not group.is_(_S.COMPLETING_REBALANCE)):
            return
        if code != ErrorCode.NONE:
            self._reset_assignments(group, store_error(code))
            self._prepare_rebalance(group)
            return
        for member in group.members.values():
            group.set_assignment(member, assignments.get(member.member_id, b""))
        group.transition(GroupEvent.ASSIGNMENT_SYNCED, self.clock.now_ms())
        for member in group.members.values():
            respond, member.sync_respond = member.sync_respond, None
            if respond is not None:
                respond(sync_answer(group, ErrorCode.NONE, member.assignment))

    def _reset_assignments(self, group: Group, code: ErrorCode) -> None:
        for member in group.members.values():
            group.set_assignment(member, b"")
            respond, member.sync_respond = member.sync_respond, None
            if respond is not None:
                respond(sync_answer(None, code))

    # -- Heartbeat, LeaveGroup -------------------------------------------------------

    def heartbeat(self, body: Body, respond: Respond) -> None:
        group, error = self.member_request(body)
        if group is None or error is not None:
            code, message = error or (ErrorCode.UNKNOWN_MEMBER_ID, None)
            respond({"error_code": int(code), "error_message": message})
            return
        self.keep_alive(group, group.members[body["member_id"]])
        code = (ErrorCode.REBALANCE_IN_PROGRESS if group.is_(_S.PREPARING_REBALANCE)
                else ErrorCode.NONE)
        respond({"error_code": int(code), "error_message": None})

    def member_request(self, body: Body) -> tuple[Group | None, Error | None]:
        """Checks shared by SyncGroup, Heartbeat and OffsetCommit of a member."""
        group_id = body["group_id"]
        error = self.coordinator_error(group_id)
        if error is not None:
            return None, error
        group = self.groups.get(group_id)
        if group is None:
            return None, (ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has no members")
        error = self.member_error(group, body["member_id"], body.get("group_instance_id"))
        if error is None and body["generation_id"] != group.generation_id:
            error = (ErrorCode.ILLEGAL_GENERATION, f"generation {body['generation_id']} is "
                     f"not the group's {group.generation_id}")
        return group, error

    def leave_group(self, body: Body, respond: Respond) -> None:
        group_id = body["group_id"]
        error = self.coordinator_error(group_id)
        if error is not None:
            respond({"error_code": int(error[0]), "error_message": error[1], "members": []})
            return
        group = self.groups.get(group_id)
        results = []
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
            self._maybe_drop(group)

    def _leave(self, group: Group | None, member_id: str) -> ErrorCode:
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        pending = group.pending_members.pop(member_id, None)
        if pending is not None:
            self.sessions.satisfy(pending)
            if group.is_(_S.PREPARING_REBALANCE):
                self.join_purgatory.check_and_complete(group.group_id)
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        log.info("group %s: member %s leaves", group.group_id, member_id)
        self._remove_member_and_rebalance(group, member)
        return ErrorCode.NONE

    def _remove_member_and_rebalance(self, group: Group, member: GroupMember) -> None:
        self.sessions.satisfy(member.heartbeat)
        self._answer_parked(member, ErrorCode.UNKNOWN_MEMBER_ID)
        group.remove(member.member_id)
        self._rebalance_or_check(group)

    def on_heartbeat_expired(self, op: DelayedHeartbeat) -> None:
        """A session timeout passed (called by :class:`MemberSessions`)."""
        group = op.group
        if self.groups.get(group.group_id) is not group:
            return
        if group.pending_members.get(op.member_id) is op:
            del group.pending_members[op.member_id]
            if group.is_(_S.PREPARING_REBALANCE):
                self.join_purgatory.check_and_complete(group.group_id)
            self._maybe_drop(group)
            return
        member = group.members.get(op.member_id)
        if member is None or member.heartbeat is not op:
            return
        if member.join_respond is not None or member.sync_respond is not None:
            self.keep_alive(group, member)  # parked in a request: alive
            return
        log.info("group %s: member %s missed its session timeout (%d ms)", group.group_id,
                 member.member_id, member.session_timeout_ms)
        self._remove_member_and_rebalance(group, member)

