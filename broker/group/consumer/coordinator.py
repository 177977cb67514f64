"""The KIP-848 consumer groups of one group coordinator: ConsumerGroupHeartbeat,
ConsumerGroupDescribe, the member checks of OffsetCommit/OffsetFetch, and member
liveness on the broker's timer (Kafka's consumer-group path of ``GroupMetadataManager``).

:class:`ConsumerGroupCoordinator` is built by :class:`~broker.group.coordinator.
GroupCoordinator` and called only by it.  It is given the config, the clock and timer,
the classic room's :class:`~broker.group.metadata_manager.GroupMetadataManager` (which
offsets partitions are owned, and the classic groups: one id is a classic group or a
consumer group, never both) and ``topics()``, the cluster's topics (name -> (id,
partition count)).

ConsumerGroupHeartbeat, in Kafka's order of checks:

- the request: an empty group id, a negative epoch other than -1 / -2 with no member
  id, ids longer than ``max_id_length`` or more than ``max_subscribed_topics`` names
  (our memory bounds), a first heartbeat (epoch 0) without a rebalance timeout or a
  subscription, or (v1) without a member id -> INVALID_REQUEST; an unknown ``server_assignor`` ->
  UNSUPPORTED_ASSIGNOR; a regular expression RE2 would not accept ->
  INVALID_REGULAR_EXPRESSION (:func:`~broker.group.consumer.group.regex_error`);
- the coordinator (NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS); a classic group of
  that id with members -> GROUP_ID_NOT_FOUND, unless it was converted just before (the
  group coordinator asks :mod:`~broker.group.consumer.conversion` first: Kafka's online
  upgrade, ``migration_policy``); an empty classic group, one holding only offsets,
  becomes a consumer group;
- epoch 0 joins (v0 with an empty member id: the coordinator generates one; a member id
  already in the group rejoins: its old incarnation is removed first), up to
  ``max_size`` members (GROUP_MAX_SIZE_REACHED); epoch -1 leaves; any other epoch needs the member
  (UNKNOWN_MEMBER_ID) at its epoch (FENCED_MEMBER_EPOCH; the previous epoch is accepted
  after a lost answer, :meth:`ConsumerGroup.epoch_error`);
- then :meth:`ConsumerGroup.heartbeat` (with the principal's Describe check the handler
  passes: a regular expression resolves only to topics it allows) and the answer: the
  member id and epoch, the heartbeat interval, and the assignment when it changed (null
  otherwise).

Liveness: every accepted heartbeat restarts the member's session timeout
(``session_timeout_ms``; a member speaking the classic protocol, served by
:mod:`~broker.group.consumer.classic_members`, has its own from its JoinGroup); a
member that must revoke partitions gets its rebalance timeout (its own
``rebalance_timeout_ms``) to do so.  Either expiring removes (fences) the member: its
partitions are released and the group epoch moves on.  After a member left or was
fenced, ``after_removal(group_id)`` is called (the group coordinator's downgrade check).

Offsets: a consumer group's committed offsets live in the classic room's group of the
same id (``manager.groups``, created Empty when needed, written and loaded as before).
:meth:`commit_error` / :meth:`fetch_error` are Kafka's member checks: an unknown member
-> UNKNOWN_MEMBER_ID; another epoch -> STALE_MEMBER_EPOCH (OffsetCommit v9+ and
TxnOffsetCommit; ILLEGAL_GENERATION before v9, and always for a member speaking the
classic protocol); a commit without member (epoch < 0 and no member id) only while the
group has no members.

Persistence: every change is written to the group's offsets partition as Kafka's
records (:mod:`~broker.group.consumer.records`) before the heartbeat is answered; a load
rebuilds the groups (:meth:`begin_load`, :meth:`load_record`, :meth:`finish_load`) and
their members' session timeouts start afresh, so a new coordinator keeps the members,
their epochs and assignments.

Static members (``instance_id``, Kafka's rules): epoch -2 leaves for now, keeping the
partitions (the session timeout still runs); a join with the same instance id under a
new member id takes the old member's place, epoch and assignment without a rebalance,
or gets UNRELEASED_INSTANCE_ID while the old one is active; a heartbeat naming an
instance id another member holds gets FENCED_INSTANCE_ID.

Not done (said plainly): the settings are Kafka's defaults (``ConsumerGroupConfig``),
not yet broker settings.

Costs: a heartbeat as :mod:`~broker.group.consumer.group` says, plus O(1) timer work;
describe O(members x partitions); unload O(groups of the partition x members).  Not
thread-safe: the broker's event loop owns it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from broker.group.consumer.assignors import ASSIGNORS, UNIFORM, Assignment
from broker.group.consumer.group import (
    STATIC_LEFT_EPOCH,
    ConsumerGroup,
    TopicsView,
    assignment_topics,
    owned_partitions,
    regex_error,
)
from broker.group.consumer.member import (
    ConsumerGroupMember,
    ReconciliationState,
    TopicVisibility,
    every_topic,
)
from broker.group.consumer.migration import MigrationPolicy
from broker.group.consumer.records import GroupLoader, GroupSnapshot, group_records
from broker.group.metadata_manager import GroupMetadataManager
from broker.group.protocol import Error, OffsetsLog, store_error
from broker.group.state import GroupState
from broker.requests.respond import Respond
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    ConsumerGroupDescribeResponseAssignment,
    ConsumerGroupDescribeResponseGroup,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from timer.clock import Clock
from timer.delayed_operation import DelayedOperation
from timer.purgatory import Purgatory, TimerLike

log = logging.getLogger(__name__)

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
FIRST_CLIENT_MEMBER_ID_VERSION = 1  # KIP-1082: v1 clients generate their member id
FIRST_MEMBER_EPOCH_COMMIT_VERSION = 9  # OffsetCommit v9: STALE_MEMBER_EPOCH


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """Kafka's ``group.consumer.*`` settings (defaults: Kafka's)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    # ours (memory bounds of a member): topic names one member may subscribe to by name,
    # and the length of its ids (member, instance and rack id)
    max_subscribed_topics: int = 10_000
    max_id_length: int = 255
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL


class _MemberTimeout(DelayedOperation):
    """A member's session or rebalance timeout; ``on_expired`` fences it."""

    __slots__ = ("group_id", "kind", "member_id", "on_expired", "satisfied")

    def __init__(self, kind: str, group_id: str, member_id: str, timeout_ms: int,
                 on_expired: Callable[[_MemberTimeout], None]) -> None:
        super().__init__(timeout_ms)
        self.kind = kind
        self.group_id = group_id
        self.member_id = member_id
        self.on_expired = on_expired
        self.satisfied = False

    def try_complete(self) -> bool:
        return self.force_complete() if self.satisfied else False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.on_expired(self)


def _error(code: ErrorCode, message: str, member_id: str | None = None,
           epoch: int = -1) -> ConsumerGroupHeartbeatResponse:
    return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message,
            "member_id": member_id, "member_epoch": epoch, "heartbeat_interval_ms": 0,
            "assignment": None}


class ConsumerGroupCoordinator:
    """The consumer groups of one coordinator; see the module docstring."""

    def __init__(self, config: ConsumerGroupConfig, clock: Clock, timer: TimerLike,
                 manager: GroupMetadataManager, log_: OffsetsLog,
                 topics: Callable[[], TopicsView] = dict,
                 after_removal: Callable[[str], None] = lambda group_id: None) -> None:
        self.config = config
        self.after_removal = after_removal  # a member left or was fenced: may downgrade
        self.clock = clock
        self.manager = manager
        self.log = log_
        self.topics = topics
        self.groups: dict[str, ConsumerGroup] = {}
        self.loading: dict[int, GroupLoader] = {}  # offsets partition -> its load
        self.timeouts: Purgatory[_MemberTimeout] = Purgatory("consumer-group", timer)
        self._ops: dict[tuple[str, str, str], _MemberTimeout] = {}

    # -- ConsumerGroupHeartbeat --------------------------------------------------------

    def request_error(self, body: ConsumerGroupHeartbeatRequest, version: int) -> Error | None:
        """Why the request itself is refused (None: it is well-formed); see the module
        docstring."""
        epoch, member_id = body["member_epoch"], body["member_id"]
        if not body["group_id"]:
            return ErrorCode.INVALID_REQUEST, "GroupId can't be empty"
        if epoch < STATIC_LEAVE_EPOCH:
            return ErrorCode.INVALID_REQUEST, f"MemberEpoch {epoch} is invalid"
        if not member_id and (epoch != 0 or version >= FIRST_CLIENT_MEMBER_ID_VERSION):
            return ErrorCode.INVALID_REQUEST, "MemberId can't be empty"
        limit = self.config.max_id_length
        for name, value in (("MemberId", member_id), ("InstanceId", body["instance_id"]),
                            ("RackId", body["rack_id"])):
            if value is not None and len(value) > limit:
                return ErrorCode.INVALID_REQUEST, f"{name} is longer than {limit} characters"
        names = body["subscribed_topic_names"]
        if names is not None and len(names) > self.config.max_subscribed_topics:
            return ErrorCode.INVALID_REQUEST, f"more than {self.config.max_subscribed_topics} " \
                "subscribed topic names"
        if epoch == 0:
            if body["rebalance_timeout_ms"] <= 0:
                return ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be set when joining"
            if body["subscribed_topic_names"] is None and body.get("subscribed_topic_regex") \
                    is None:
                return (ErrorCode.INVALID_REQUEST, "SubscribedTopicNames or "
                        "SubscribedTopicRegex must be set when joining")
        assignor = body["server_assignor"]
        if assignor is not None and assignor not in ASSIGNORS:
            return ErrorCode.UNSUPPORTED_ASSIGNOR, f"assignor {assignor!r} is not supported " \
                f"(supported: {', '.join(sorted(ASSIGNORS))})"
        regex = body.get("subscribed_topic_regex")
        problem = regex_error(regex) if regex else None
        if problem is not None:
            return ErrorCode.INVALID_REGULAR_EXPRESSION, problem
        return None

    def heartbeat(self, body: ConsumerGroupHeartbeatRequest, version: int,
                  respond: Respond[ConsumerGroupHeartbeatResponse],
                  client_id: str = "", client_host: str = "",
                  may_describe: TopicVisibility = every_topic) -> None:
        """One ConsumerGroupHeartbeat (see the module docstring) of a member whose
        principal may Describe the topics ``may_describe`` says (its regular expression
        resolves to those only, :mod:`~broker.group.consumer.group`): applied at once and
        answered once the records of what changed are written (acks=all); a failed write
        answers its mapped error (:func:`~broker.group.protocol.store_error`; the change
        stays applied in memory, unlike Kafka's rollback: a failed write means the
        partition is being lost, and its groups with it)."""
        group = self.groups.get(body["group_id"])
        before = GroupSnapshot.of(group)
        answer = self._heartbeat(body, version, client_id, client_host, may_describe)
        group = self.groups.get(body["group_id"])

        def written(code: ErrorCode) -> None:
            respond(answer if code == ErrorCode.NONE else _error(
                code, f"write failed: {code.name}", answer["member_id"]))

        if group is None:
            respond(answer)
            return
        self.write(group, before, done=written)
        if body["member_epoch"] in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH) \
                and answer["error_code"] == ErrorCode.NONE:
            self.after_removal(group.group_id)

    def write(self, group: ConsumerGroup, before: GroupSnapshot,
              after: GroupSnapshot | None = None,
              done: Callable[[ErrorCode], None] | None = None) -> None:
        """Write what changed since ``before``; ``done`` (if any) gets the write's error
        mapped by :func:`~broker.group.protocol.store_error` once it is committed (at
        once when nothing changed)."""
        records = group_records(group.group_id, before, after or GroupSnapshot.of(group),
                                group.assignor_name)
        if not records:
            if done is not None:
                done(ErrorCode.NONE)
            return

        def written(code: ErrorCode, _offset: int) -> None:
            if done is not None:
                done(store_error(code))

        self.log.append(group.partition, records, written)

    def _heartbeat(self, body: ConsumerGroupHeartbeatRequest, version: int,
                   client_id: str, client_host: str,
                   may_describe: TopicVisibility) -> ConsumerGroupHeartbeatResponse:
        group_id, epoch = body["group_id"], body["member_epoch"]
        member_id = body["member_id"]
        error = self.request_error(body, version) or self.manager.coordinator_error(group_id)
        if error is None:
            classic = self.manager.groups.get(group_id)
            if group_id not in self.groups and classic is not None \
                    and (classic.members or not classic.is_(GroupState.EMPTY)):
                error = (ErrorCode.GROUP_ID_NOT_FOUND,
                         f"group {group_id!r} is a classic group, not a consumer group")
        if error is not None:
            return _error(error[0], error[1], member_id or None)
        group = self.groups.get(group_id)
        instance = body["instance_id"]
        if group is not None and instance is not None and epoch != 0 \
                and group.static_members.get(instance, member_id) != member_id:
            return _error(ErrorCode.FENCED_INSTANCE_ID, f"instance id {instance!r} belongs "
                          "to another member", member_id)
        if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            leaving = group.members.get(member_id) if group is not None else None
            if group is None or leaving is None:
                return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not "
                              f"in group {group_id!r}", member_id)
            if epoch == STATIC_LEAVE_EPOCH and leaving.instance_id is not None:
                group.static_leave(leaving)  # its session timeout keeps running
                self._cancel("rebalance", group_id, member_id)
            else:
                self.remove_member(group, member_id, "left")
            return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "member_id": member_id, "member_epoch": epoch,
                    "heartbeat_interval_ms": 0, "assignment": None}
        if epoch == 0:
            if group is None:
                group = self.groups[group_id] = ConsumerGroup(
                    group_id, self.manager.partition_for(group_id), self.config.max_size)
            if not member_id:
                member_id = str(uuid.uuid4())
            if member_id in group.members:
                self.remove_member(group, member_id, "rejoined")
            member = ConsumerGroupMember(member_id, client_id, client_host)
            static = group.members.get(group.static_members.get(instance or "", ""))
            if static is not None:  # a static member's instance id, under a new member id
                if static.member_epoch != STATIC_LEFT_EPOCH:
                    return _error(ErrorCode.UNRELEASED_INSTANCE_ID, f"instance id "
                                  f"{instance!r} is still held by an active member",
                                  member_id)
                for kind in ("session", "rebalance"):
                    self._cancel(kind, group_id, static.member_id)
                group.replace_static(static, member)
            elif len(group.members) >= self.config.max_size:
                return _error(ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {group_id!r} has "
                              f"{self.config.max_size} members", member_id)
        else:
            member_or_none = group.members.get(member_id) if group is not None else None
            if group is None or member_or_none is None:
                return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not "
                              f"in group {group_id!r}", member_id)
            member = member_or_none
            fenced = group.epoch_error(member, epoch, owned_partitions(body))
            if fenced is not None:
                return _error(ErrorCode.FENCED_MEMBER_EPOCH, fenced, member_id)
        send = group.heartbeat(member, body, self.topics(), may_describe)
        self.restart_timeouts(group, member)
        answer: ConsumerGroupHeartbeatResponse = {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "member_id": member_id, "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": self.config.heartbeat_interval_ms, "assignment": None}
        if send:
            answer["assignment"] = {"topic_partitions": [
                {"topic_id": t, "partitions": ps}
                for t, ps in assignment_topics(member.assignment.assigned)]}
        return answer

    # -- liveness ----------------------------------------------------------------------

    def _schedule(self, kind: str, group_id: str, member_id: str, timeout_ms: int) -> None:
        self._cancel(kind, group_id, member_id)
        op = _MemberTimeout(kind, group_id, member_id, timeout_ms, self._expired)
        self._ops[(kind, group_id, member_id)] = op
        self.timeouts.try_complete_else_watch(op, [(kind, group_id, member_id)])

    def _cancel(self, kind: str, group_id: str, member_id: str) -> None:
        op = self._ops.pop((kind, group_id, member_id), None)
        if op is not None and not op.is_completed:
            op.satisfied = True
            self.timeouts.check_and_complete((kind, group_id, member_id))

    def restart_timeouts(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """The member was heard from: its session timeout (a classic member's own, from
        its JoinGroup) starts again; its rebalance timeout runs while it must revoke."""
        session_ms = self.config.session_timeout_ms if member.classic is None \
            else member.classic.session_timeout_ms
        self._schedule("session", group.group_id, member.member_id, session_ms)
        revoking = member.assignment.state == ReconciliationState.UNREVOKED_PARTITIONS
        key = ("rebalance", group.group_id, member.member_id)
        if revoking and key not in self._ops:
            self._schedule("rebalance", group.group_id, member.member_id,
                           member.rebalance_timeout_ms)
        elif not revoking:
            self._cancel(*key)

    def _expired(self, op: _MemberTimeout) -> None:
        if self._ops.get((op.kind, op.group_id, op.member_id)) is not op:
            return
        group = self.groups.get(op.group_id)
        if group is not None and op.member_id in group.members:
            before = GroupSnapshot.of(group)
            self.remove_member(group, op.member_id, f"{op.kind} timeout expired")
            self.write(group, before)
            self.after_removal(group.group_id)

    def rename_member(self, group: ConsumerGroup, old: ConsumerGroupMember,
                      member_id: str) -> ConsumerGroupMember:
        """A static classic member rejoined under ``member_id``: its timeouts move to the
        new id (:meth:`ConsumerGroup.rename`)."""
        for kind in ("session", "rebalance"):
            self._cancel(kind, group.group_id, old.member_id)
        member = group.rename(old, member_id)
        self.restart_timeouts(group, member)
        log.info("consumer group %s: static member %s is now %s", group.group_id,
                 old.member_id, member_id)
        return member

    def remove_member(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        """The member leaves the group now (its timeouts are cancelled)."""
        for kind in ("session", "rebalance"):
            self._cancel(kind, group.group_id, member_id)
        group.remove(member_id)
        log.info("consumer group %s: member %s %s (group epoch %d)", group.group_id,
                 member_id, why, group.group_epoch)

    # -- offsets -----------------------------------------------------------------------

    def is_consumer_group(self, group_id: str) -> bool:
        return group_id in self.groups

    def commit_error(self, group_id: str, member_id: str, epoch: int,
                     stale: ErrorCode = ErrorCode.STALE_MEMBER_EPOCH) -> Error | None:
        """Kafka's member check of an offset commit to consumer group ``group_id``
        (``stale``: the error of another epoch, ILLEGAL_GENERATION before OffsetCommit
        v9)."""
        group = self.groups[group_id]
        if epoch < 0 and not member_id:
            if group.members:
                return (ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has members: "
                        "commits need a member id and epoch")
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in the group"
        if epoch != member.member_epoch:  # a classic member: its generation (Kafka's)
            code = stale if member.classic is None else ErrorCode.ILLEGAL_GENERATION
            return code, f"epoch {epoch} is not the member's {member.member_epoch}"
        return None

    def fetch_error(self, group_id: str, member_id: str | None, epoch: int) -> Error | None:
        """OffsetFetch v9's member check (none without a member id or with epoch -1)."""
        if member_id is None or epoch < 0 or group_id not in self.groups:
            return None
        return self.commit_error(group_id, member_id, epoch)

    # -- ConsumerGroupDescribe, ListGroups, DeleteGroups ---------------------------------

    def describe(self, group_id: str) -> ConsumerGroupDescribeResponseGroup:
        entry: ConsumerGroupDescribeResponseGroup = {
            "error_code": 0, "error_message": None, "group_id": group_id,
            "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
            "assignor_name": "", "members": []}
        error = self.manager.coordinator_error(group_id)
        group = self.groups.get(group_id)
        if error is None and group is None:
            classic = group_id in self.manager.groups
            error = ErrorCode.GROUP_ID_NOT_FOUND, (
                f"group {group_id!r} is not a consumer group" if classic
                else f"group {group_id!r} not found")
        if error is not None or group is None:
            assert error is not None
            entry.update({"error_code": int(error[0]), "error_message": error[1]})
            return entry
        names = {topic_id: name for name, (topic_id, _) in self.topics().items()}

        def described(a: Assignment) -> ConsumerGroupDescribeResponseAssignment:
            return {"topic_partitions": [
                {"topic_id": t, "topic_name": names.get(t, ""), "partitions": ps}
                for t, ps in assignment_topics(a)]}

        entry.update({
            "group_state": group.state, "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor_name": group.assignor_name or UNIFORM, "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id,
                "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": described(m.assignment.assigned),
                "target_assignment": described(group.target.get(m.member_id, {}))}
                for m in group.members.values()]})
        return entry

    def delete_error(self, group_id: str) -> ErrorCode | None:
        """DeleteGroups of a consumer group: NON_EMPTY_GROUP while it has members; an
        empty one is forgotten (its offsets are the classic room's to delete)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        self.write(group, GroupSnapshot.of(group), GroupSnapshot.of(None))
        del self.groups[group_id]
        return None

    # -- conversion (broker.group.consumer.conversion) ---------------------------------

    def adopt(self, group: ConsumerGroup) -> None:
        """A classic group converted: ``group`` joins the cache, its records are
        written (no answer waits for them) and its members' session timeouts start."""
        self.groups[group.group_id] = group
        self.write(group, GroupSnapshot.of(None))
        for member in group.members.values():
            self.restart_timeouts(group, member)

    def drop(self, group: ConsumerGroup) -> None:
        """The group converts back to a classic group: it leaves the cache, its
        members' timeouts are cancelled and its records get tombstones."""
        for member_id in list(group.members):
            for kind in ("session", "rebalance"):
                self._cancel(kind, group.group_id, member_id)
        self.write(group, GroupSnapshot.of(group), GroupSnapshot.of(None))
        del self.groups[group.group_id]

    # -- load --------------------------------------------------------------------------

    def begin_load(self, partition: int) -> None:
        self.loading[partition] = GroupLoader(partition, self.config.max_size)

    def load_record(self, partition: int, key: bytes, value: bytes | None) -> None:
        """One consumer group record of a partition being loaded, in log order (raises
        :class:`~broker.group.metadata.GroupRecordError` for one that does not decode)."""
        self.loading[partition].apply(key, value)

    def finish_load(self, partition: int) -> None:
        """The partition's consumer groups enter the cache; every member's session
        timeout starts now."""
        loader = self.loading.pop(partition, None)
        for group in loader.finish() if loader is not None else []:
            self.groups[group.group_id] = group
            for member in group.members.values():
                self.restart_timeouts(group, member)

    # -- unload ------------------------------------------------------------------------

    def unload(self, partition: int) -> None:
        """Leadership of offsets ``partition`` was lost: its consumer groups are dropped."""
        self.loading.pop(partition, None)
        for group in [g for g in self.groups.values() if g.partition == partition]:
            for member_id in list(group.members):
                for kind in ("session", "rebalance"):
                    self._cancel(kind, group.group_id, member_id)
            del self.groups[group.group_id]

    def shutdown(self) -> None:
        self.timeouts.shutdown()

