"""The group coordinator (sans-IO): the classic group protocol over the groups of the
offsets partitions this broker leads, composed of rooms as Kafka's GroupCoordinator and
GroupMetadataManager are.

One per broker.  It serves the groups whose offsets-topic partition this broker leads
(:func:`broker.coordination.placement.partition_for`, Kafka's formula).  The adapter
(:mod:`broker.group.offsets_topic`) tells it which partitions it owns: :meth:`begin_load`,
:meth:`load_record` for every record of the partition (and :meth:`load_marker` for every
transaction marker), :meth:`finish_load`, and :meth:`unload` when leadership is lost, and
tells it of every transaction marker written on an owned partition
(:meth:`complete_txn`: the producer's pending transactional offsets are committed or
dropped); it keeps :attr:`num_partitions` (the offsets
topic's) and reads :attr:`ownership` (the partitions owned or loading, with their leader
epochs).  Requests for a group of a partition being loaded get
COORDINATOR_LOAD_IN_PROGRESS; of a partition not owned, NOT_COORDINATOR.

:class:`GroupCoordinator` is the entry point (the request handlers and the adapter call
only it) and owns its rooms, built at construction:

- ``manager`` (:class:`~broker.group.metadata_manager.GroupMetadataManager`): the group
  cache (``groups``, id -> :class:`Group`), the partitions owned or loading, and every
  write to the offsets topic;
- ``sessions`` (:class:`~broker.group.sessions.MemberSessions`): member liveness; an
  expiry goes to ``membership``;
- ``rebalancer`` (:class:`~broker.group.rebalance.Rebalancer`): JoinGroup and the join
  phase;
- ``membership`` (:class:`~broker.group.membership.GroupMembership`): SyncGroup,
  Heartbeat, LeaveGroup, session expiry;
- ``offsets`` (:class:`~broker.group.offsets.GroupOffsets`): OffsetCommit,
  TxnOffsetCommit, OffsetFetch;
- ``consumer`` (:class:`~broker.group.consumer.coordinator.ConsumerGroupCoordinator`):
  KIP-848 consumer groups; ``classic_members`` (:class:`~broker.group.consumer.
  classic_members.ClassicMembers`): the classic requests of a consumer group's members
  (JoinGroup, SyncGroup, Heartbeat, LeaveGroup of a consumer group's id go there);
  ``conversion`` (:class:`~broker.group.consumer.conversion.GroupConversion`): a classic
  group converts when a KIP-848 member joins it, and back when the last one leaves.

Itself it answers ListGroups, DescribeGroups, DeleteGroups and OffsetDelete (over the
cache), and does
what crosses the rooms: a loaded group's members start their session timeouts; an
unloaded or deleted group leaves the cache, its join phase and session timeouts are
cancelled, its parked JoinGroup/SyncGroup requests are answered (NOT_COORDINATOR on
unload) and it is marked Dead.  Memory bounds: :mod:`broker.group.footprint`.

Writes go through the injected :class:`~broker.group.protocol.OffsetsLog`: ``append(partition,
records, done)`` appends ``(key, value)`` records to the offsets partition and calls
``done(error_code, base_offset)`` once they are committed (acks=all) or failed.
``partition_exists(topic, index)`` (injected; default: every partition exists) is what an
OffsetCommit checks its partitions against.

Requests and answers are the wire bodies of :mod:`clients.protocol.registry`, typed with
their generated TypedDicts (:mod:`clients.protocol.message_types`, e.g.
``JoinGroupRequest`` in, ``Respond[JoinGroupResponse]`` out), so mypy checks every field
name the rooms read or write; every ``respond`` is called exactly once.  Time comes from
the injected clock; delays (join phase, session timeouts) are operations in two
purgatories on the injected timer, so tests drive everything with a ManualClock.

Costs: as each room says; ListGroups O(groups); DescribeGroups O(members); DeleteGroups
O(groups named + their offsets); load O(records); unload O(groups of the partition x
members).  Not thread-safe: the broker's event loop owns it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from broker.group.consumer.classic_members import ClassicMembers
from broker.group.consumer.conversion import GroupConversion
from broker.group.consumer.coordinator import ConsumerGroupConfig, ConsumerGroupCoordinator
from broker.group.consumer.group import TopicsView
from broker.group.consumer.member import TopicVisibility, every_topic
from broker.group.consumer.protocol_views import described_members
from broker.group.consumer.records import KEY_VERSIONS as CONSUMER_KEY_VERSIONS
from broker.group.consumer.records import key_version
from broker.group.members import CONSUMER_PROTOCOL_TYPE, Group
from broker.group.membership import GroupMembership
from broker.group.metadata import GroupRecordError
from broker.group.metadata_manager import GroupMetadataManager
from broker.group.offsets import GroupOffsets
from broker.group.ownership import PartitionOwnership
from broker.group.protocol import (
    GroupCoordinatorConfig,
    OffsetsLog,
    answer_parked,
    store_error,
)
from broker.group.rebalance import Rebalancer
from broker.group.sessions import DelayedHeartbeat, MemberSessions
from broker.group.state import GroupEvent, GroupState
from broker.requests.respond import Respond
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    ConsumerGroupDescribeResponseGroup,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeGroupsResponseGroup,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsResponse,
    ListGroupsResponseGroup,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequestTopic,
    OffsetFetchResponseTopic,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from clients.protocol.topics import TopicPartition
from replication.producer_state import VerificationGuard
from timer.clock import Clock
from timer.purgatory import TimerLike

log = logging.getLogger(__name__)

_S = GroupState
CLASSIC = "classic"  # ListGroups' group types: the classic protocol's groups
CONSUMER = "consumer"  # and KIP-848's (broker.group.consumer)


class GroupCoordinator:
    """The classic group protocol over the groups of the owned offsets partitions; see
    the module docstring."""

    def __init__(self, config: GroupCoordinatorConfig, clock: Clock, timer: TimerLike,
                 log_: OffsetsLog, num_partitions: int = 0,
                 partition_exists: Callable[[str, int], bool] = lambda topic, index: True,
                 topics: Callable[[], TopicsView] = dict,
                 consumer_config: ConsumerGroupConfig | None = None) -> None:
        self.clock = clock
        self.manager = GroupMetadataManager(clock, log_, num_partitions)
        self.sessions = MemberSessions(timer, self._session_expired)
        self.rebalancer = Rebalancer(config, clock, timer, self.manager, self.sessions)
        self.membership = GroupMembership(config, clock, self.manager, self.sessions,
                                          self.rebalancer)
        self.offsets = GroupOffsets(config, clock, self.manager, self.sessions,
                                    partition_exists)
        self.consumer = ConsumerGroupCoordinator(
            consumer_config or ConsumerGroupConfig(), clock, timer, self.manager, log_, topics,
            after_removal=lambda group_id: self.conversion.maybe_downgrade(group_id))
        self.conversion = GroupConversion(clock, self.manager, self.sessions, self.rebalancer,
                                          self.consumer)
        self.classic_members = ClassicMembers(config, self.consumer)

    @property
    def groups(self) -> dict[str, Group]:
        """The cached groups (id -> group) of the owned partitions."""
        return self.manager.groups

    @property
    def ownership(self) -> PartitionOwnership:
        return self.manager.ownership

    @property
    def num_partitions(self) -> int:
        """Partitions of the offsets topic (0: no topic yet); the adapter keeps it."""
        return self.manager.num_partitions

    @num_partitions.setter
    def num_partitions(self, count: int) -> None:
        self.manager.num_partitions = count

    def footprint_bytes(self) -> int:
        """Member metadata held by every group of this coordinator (O(groups))."""
        return self.manager.footprint_bytes()

    # -- the requests --------------------------------------------------------------------

    def join_group(self, body: JoinGroupRequest, respond: Respond[JoinGroupResponse],
                   client_id: str = "", client_host: str = "",
                   require_member_id: bool = True) -> None:
        """JoinGroup; of a consumer group (KIP-848), served by ``classic_members``
        (an empty one becomes a classic group first if the migration policy allows)."""
        if self._served_by_consumer_group(body["group_id"]) \
                and not self.conversion.forget_empty(body["group_id"]):
            self.classic_members.join_group(body, respond, client_id, client_host,
                                            require_member_id)
            return
        self.rebalancer.join_group(body, respond, client_id, client_host, require_member_id)

    def _served_by_consumer_group(self, group_id: str) -> bool:
        return self.consumer.is_consumer_group(group_id) \
            and self.manager.coordinator_error(group_id) is None

    def sync_group(self, body: SyncGroupRequest,
                   respond: Respond[SyncGroupResponse]) -> None:
        if self._served_by_consumer_group(body["group_id"]):
            self.classic_members.sync_group(body, respond)
            return
        self.membership.sync_group(body, respond)

    def heartbeat(self, body: HeartbeatRequest,
                  respond: Respond[HeartbeatResponse]) -> None:
        if self._served_by_consumer_group(body["group_id"]):
            self.classic_members.heartbeat(body, respond)
            return
        self.membership.heartbeat(body, respond)

    def leave_group(self, body: LeaveGroupRequest,
                    respond: Respond[LeaveGroupResponse]) -> None:
        if self._served_by_consumer_group(body["group_id"]):
            self.classic_members.leave_group(body, respond)
            return
        self.membership.leave_group(body, respond)

    def consumer_group_heartbeat(self, body: ConsumerGroupHeartbeatRequest, version: int,
                                 respond: Respond[ConsumerGroupHeartbeatResponse],
                                 client_id: str = "", client_host: str = "",
                                 may_describe: TopicVisibility = every_topic) -> None:
        """ConsumerGroupHeartbeat of a member whose principal may Describe the topics
        ``may_describe`` says; a first one naming a classic group with members may
        convert it first (``conversion``, Kafka's online upgrade)."""
        self.conversion.maybe_upgrade(body, version)
        self.consumer.heartbeat(body, version, respond, client_id, client_host, may_describe)

    def consumer_group_describe(self, group_id: str) -> ConsumerGroupDescribeResponseGroup:
        return self.consumer.describe(group_id)

    def commit_offsets(self, body: OffsetCommitRequest,
                       respond: Respond[OffsetCommitResponse], version: int = 9) -> None:
        """OffsetCommit; to a consumer group (KIP-848) the generation is the member
        epoch, checked by :meth:`ConsumerGroupCoordinator.commit_error` (its error is
        every partition's), and the offsets are then written as the classic room's."""
        if self.consumer.is_consumer_group(body["group_id"]):
            error = self.consumer.commit_error(
                body["group_id"], body["member_id"], body["generation_id"],
                ErrorCode.STALE_MEMBER_EPOCH if version >= 9 else ErrorCode.ILLEGAL_GENERATION)
            if error is not None:
                respond({"topics": [{"name": t["name"], "partitions": [
                    {"partition_index": p["partition_index"], "error_code": int(error[0]),
                     "error_message": error[1]} for p in t["partitions"]]}
                    for t in body["topics"]]})
                return
            body = {**body, "generation_id": -1, "member_id": "", "group_instance_id": None}
        self.offsets.commit_offsets(body, respond)

    def commit_txn_offsets(self, body: TxnOffsetCommitRequest,
                           respond: Respond[TxnOffsetCommitResponse],
                           guard: VerificationGuard | None = None,
                           verification_required: bool = False) -> None:
        if self.consumer.is_consumer_group(body["group_id"]) and (
                body.get("member_id") or body.get("generation_id", -1) >= 0):
            error = self.consumer.commit_error(body["group_id"], body.get("member_id", ""),
                                               body.get("generation_id", -1))
            if error is not None:
                respond({"throttle_time_ms": 0, "topics": [{"name": t["name"], "partitions": [
                    {"partition_index": p["partition_index"], "error_code": int(error[0])}
                    for p in t["partitions"]]} for t in body["topics"]]})
                return
            body = {**body, "generation_id": -1, "member_id": "", "group_instance_id": None}
        self.offsets.commit_txn_offsets(body, respond, guard, verification_required)

    def fetch_offsets(self, group_id: str,
                      wanted: Sequence[OffsetFetchRequestTopic] | None,
                      require_stable: bool = False, member_id: str | None = None,
                      member_epoch: int = -1
                      ) -> tuple[ErrorCode, list[OffsetFetchResponseTopic]]:
        """OffsetFetch of one group; ``member_id`` / ``member_epoch`` (v9) are checked
        against a consumer group's member (:meth:`ConsumerGroupCoordinator.fetch_error`)."""
        if self.manager.coordinator_error(group_id) is None:
            error = self.consumer.fetch_error(group_id, member_id, member_epoch)
            if error is not None:
                return error[0], []
        return self.offsets.fetch_offsets(group_id, wanted, require_stable)

    def complete_txn(self, partition: int, producer_id: int, committed: bool) -> None:
        """A COMMIT (``committed``) or ABORT marker of ``producer_id`` was written on
        offsets ``partition`` (see :meth:`GroupMetadataManager.complete_txn`)."""
        self.manager.complete_txn(partition, producer_id, committed)

    def _session_expired(self, op: DelayedHeartbeat) -> None:
        self.membership.on_heartbeat_expired(op)

    def list_groups(self, states: list[str], types: list[str]) -> ListGroupsResponse:
        """ListGroups: the groups of this coordinator, filtered as Kafka does: by state
        (case-insensitive; an unknown state matches nothing) and by type (``classic`` or
        ``consumer``, KIP-848's, whose protocol type is ``consumer``); an empty filter
        matches everything."""
        wanted = {s.lower() for s in states}
        kinds = {t.lower() for t in types} or {CLASSIC, CONSUMER}
        consumer = self.consumer.groups
        groups: list[ListGroupsResponseGroup] = [
            {"group_id": g.group_id, "protocol_type": g.protocol_type or "",
             "group_state": g.state.value, "group_type": CLASSIC}
            for g in self.groups.values() if CLASSIC in kinds and g.group_id not in consumer
            and (not wanted or g.state.value.lower() in wanted)]
        groups += [{"group_id": g.group_id, "protocol_type": CONSUMER_PROTOCOL_TYPE,
                    "group_state": g.state, "group_type": CONSUMER}
                   for g in consumer.values()
                   if CONSUMER in kinds and (not wanted or g.state.lower() in wanted)]
        loading = self.ownership.is_loading
        code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE
        return {"error_code": int(code), "groups": sorted(groups, key=lambda g: g["group_id"])}

    def describe_groups(self, body: DescribeGroupsRequest) -> DescribeGroupsResponse:
        """DescribeGroups: each group's state, protocol and members (assignments only
        when Stable); a group this coordinator does not have is Dead."""
        out: list[DescribeGroupsResponseGroup] = []
        for group_id in body["groups"]:
            entry: DescribeGroupsResponseGroup = {
                "error_code": 0, "error_message": None, "group_id": group_id,
                "group_state": _S.DEAD.value, "protocol_type": "", "protocol_data": "",
                "members": []}
            out.append(entry)
            error = self.manager.coordinator_error(group_id)
            group = self.groups.get(group_id)
            consumer = self.consumer.groups.get(group_id)
            if error is not None:
                entry.update({"error_code": int(error[0]), "error_message": error[1]})
            elif consumer is not None:  # Kafka's asDescribedGroup of a consumer group
                entry.update({"group_state": consumer.state,
                              "protocol_type": CONSUMER_PROTOCOL_TYPE,
                              "protocol_data": consumer.assignor_name,
                              "members": described_members(consumer, self.consumer.topics())})
            elif group is not None:
                stable = group.is_(_S.STABLE)
                entry.update({
                    "group_state": group.state.value, "protocol_type": group.protocol_type or "",
                    "protocol_data": group.protocol_name or "", "members": [{
                        "member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id, "client_host": m.client_host,
                        "member_metadata": m.metadata_for(group.protocol_name),
                        "member_assignment": m.assignment if stable else b""}
                        for m in group.members.values()]})
        return {"groups": out}

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
        deleted: dict[int, list[Group]] = {}  # offsets partition -> its deleted groups
        for group_id in group_ids:
            if group_id in codes:
                continue
            error = self.manager.coordinator_error(group_id)
            group = self.groups.get(group_id)
            was_consumer = self.consumer.is_consumer_group(group_id)
            if error is None:
                consumer_error = self.consumer.delete_error(group_id)
                error = None if consumer_error is None else (consumer_error, "")
            if error is not None:
                codes[group_id] = error[0]
            elif was_consumer and group is None:
                codes[group_id] = ErrorCode.NONE  # an empty consumer group without offsets
            elif group is None or group.is_(_S.DEAD):
                codes[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_(_S.EMPTY):
                codes[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                deleted.setdefault(group.partition, []).append(group)
                self.manager.remove(group)
                self._end_group(group, ErrorCode.UNKNOWN_MEMBER_ID)
                log.info("group %s: deleted", group_id)
        left = len(deleted)

        def answer() -> None:
            respond([(g, codes[g]) for g in dict.fromkeys(group_ids)])

        def stored(partition: int, code: ErrorCode) -> None:
            nonlocal left
            for group in deleted[partition]:
                codes[group.group_id] = store_error(code)
            left -= 1
            if left == 0:
                answer()

        if not deleted:
            answer()
        for partition, groups in deleted.items():
            def done(code: ErrorCode, p: int = partition) -> None:
                stored(p, code)
            self.manager.store_tombstones(partition, groups, done)

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition],
                       respond: Callable[[ErrorCode, dict[TopicPartition, ErrorCode]], None]
                       ) -> None:
        """OffsetDelete: ``respond(group error, {partition: error})``.

        The coordinator errors as for any group request; GROUP_ID_NOT_FOUND for a group
        this coordinator does not have (or Dead).  Kafka's ``handleDeleteOffsets``: of a
        group with members and protocol type ``consumer``, partitions of a topic the
        members subscribe to (:meth:`Group.subscribed_topics`; every topic when that is
        unknown) answer GROUP_SUBSCRIBED_TO_TOPIC and the others are deleted; a group of
        another protocol type with members answers NON_EMPTY_GROUP.  The committed
        offsets to delete leave the cache at once and tombstones are written; the answer
        waits for them (a failed write maps as :func:`store_error` says).  A partition
        without an offset is no error."""
        error = self.manager.coordinator_error(group_id)
        group = self.groups.get(group_id)
        if error is not None:
            respond(error[0], {})
            return
        if group is None or group.is_(_S.DEAD):
            respond(ErrorCode.GROUP_ID_NOT_FOUND, {})
            return
        subscribed: frozenset[str] | None = frozenset()
        if not group.is_(_S.EMPTY):
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                respond(ErrorCode.NON_EMPTY_GROUP, {})
                return
            subscribed = group.subscribed_topics()
        results = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                   if subscribed is None or tp.topic in subscribed else ErrorCode.NONE
                   for tp in partitions}
        partitions = [tp for tp in partitions if results[tp] == ErrorCode.NONE]
        gone = sorted({tp for tp in partitions if tp in group.offsets})
        for tp in gone:
            del group.offsets[tp]
        if not gone:
            respond(ErrorCode.NONE, results)
            return

        def stored(code: ErrorCode) -> None:
            mapped = store_error(code)
            for tp in gone:
                results[tp] = mapped
            log.info("group %s: deleted offsets of %d partition(s)", group_id, len(gone))
            respond(ErrorCode.NONE, results)

        self.manager.store_offset_tombstones(group, gone, stored)

    # -- ownership: load, unload -----------------------------------------------------------

    def epochs(self) -> dict[int, int]:
        """Owned and loading offsets partitions and their leader epochs."""
        return self.ownership.epochs()

    def loading_epoch(self, partition: int) -> int | None:
        return self.ownership.loading_epoch(partition)

    def begin_load(self, partition: int, leader_epoch: int) -> None:
        self.unload(partition)
        self.manager.begin_load(partition, leader_epoch)
        self.consumer.begin_load(partition)

    def load_record(self, partition: int, key: bytes | None, value: bytes | None,
                    log_offset: int, txn_producer_id: int = -1) -> None:
        """One record of a partition being loaded: a KIP-848 consumer group's record
        (its key version, :mod:`broker.group.consumer.records`) goes to ``consumer``
        (skipped and counted when it does not decode), any other to ``manager``."""
        if key is not None and key_version(key) in CONSUMER_KEY_VERSIONS:
            try:
                self.consumer.load_record(partition, key, value)
            except GroupRecordError as exc:
                self.ownership.skip(partition, log_offset, str(exc))
            return
        self.manager.load_record(partition, key, value, log_offset, txn_producer_id)

    def load_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        self.manager.load_marker(partition, producer_id, committed)

    def finish_load(self, partition: int) -> None:
        self.consumer.finish_load(partition)
        for group in self.manager.finish_load(partition):
            for member in group.members.values():
                self.sessions.keep_alive(group, member)

    def unload(self, partition: int) -> None:
        self.consumer.unload(partition)
        for group in self.manager.unload(partition):
            self._end_group(group, ErrorCode.NOT_COORDINATOR)

    def _end_group(self, group: Group, code: ErrorCode) -> None:
        """``group`` left the cache: cancel its timers, answer its parked requests with
        ``code``, mark it Dead."""
        self.rebalancer.cancel(group)
        for member_id in list(group.pending_members):
            self.sessions.cancel(group.group_id, member_id)
        for member in group.members.values():
            self.sessions.cancel(group.group_id, member.member_id)
            answer_parked(member, code)
        group.transition(GroupEvent.UNLOAD, self.clock.now_ms())

    def shutdown(self) -> None:
        """Stop: drop every group without answering parked requests (the broker stops)."""
        for group in self.groups.values():
            for member in group.members.values():
                member.join_respond = member.sync_respond = None
        for partition in self.ownership.partitions():
            self.unload(partition)
        self.rebalancer.shutdown()
        self.sessions.shutdown()
        self.consumer.shutdown()
