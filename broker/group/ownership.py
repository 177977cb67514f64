"""What a group coordinator owns, and member liveness (base of :class:`GroupCoordinator`).

Ownership: the adapter (:mod:`broker.group.offsets_topic`) calls :meth:`begin_load` when this
broker becomes leader of an offsets partition, :meth:`load_record` for every record of
it in log order, :meth:`finish_load` at its end, and :meth:`unload` when leadership is
lost.  Loading applies records in order into fresh groups: an offset commit replaces the
cached offset of its (topic, partition) (a tombstone removes it), a group-metadata record
replaces members, generation, protocol and leader (a tombstone empties the group).  At
the end a group with members is Stable (each member on a fresh session timeout), one
without is Empty.  Unloading answers parked JoinGroup/SyncGroup requests with
NOT_COORDINATOR, cancels the group's timers and marks it Dead.

Liveness: each member (and each pending KIP-394 id) has one
:class:`~broker.group.join.DelayedHeartbeat` in the heartbeat purgatory; any sign of
life (:meth:`keep_alive`) completes it and parks a new one.

Costs: load O(records); unload O(groups of the partition x members); keep_alive O(1).
Not thread-safe: the broker's event loop owns it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from broker.group.join import DelayedHeartbeat, DelayedJoin
from broker.group.members import Group, GroupMember
from broker.group.metadata import (
    GroupMetadataKey,
    GroupRecordError,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from broker.group.protocol import (
    Done,
    Error,
    GroupCoordinatorConfig,
    OffsetsLog,
    join_error,
    partition_for,
    sync_answer,
)
from broker.group.state import GroupEvent, GroupState
from clients.protocol.errors import ErrorCode
from timer.clock import Clock
from timer.purgatory import Purgatory, TimerLike

log = logging.getLogger(__name__)

_S = GroupState


class GroupOwnership:
    def __init__(self, config: GroupCoordinatorConfig, clock: Clock, timer: TimerLike,
                 log_: OffsetsLog, num_partitions: int = 0) -> None:
        self.config = config
        self.clock = clock
        self.log = log_
        self.num_partitions = num_partitions  # of the offsets topic; 0 = no topic yet
        self.groups: dict[str, Group] = {}
        self.owned: dict[int, int] = {}  # loaded partition -> leader epoch
        self.loading: dict[int, dict[str, Group]] = {}  # partition -> groups being loaded
        self.loading_epochs: dict[int, int] = {}
        self.join_purgatory: Purgatory[DelayedJoin] = Purgatory("group-join", timer)
        self.heartbeat_purgatory: Purgatory[DelayedHeartbeat] = Purgatory("heartbeat", timer)
        self.partition_exists: Callable[[str, int], bool] = lambda topic, index: True

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def coordinator_error(self, group_id: str) -> Error | None:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, "group_id is empty"
        if self.num_partitions <= 0:
            return ErrorCode.NOT_COORDINATOR, "the offsets topic does not exist yet"
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    f"loading offsets partition {partition}")
        if partition not in self.owned:
            return (ErrorCode.NOT_COORDINATOR,
                    f"this broker does not lead offsets partition {partition}")
        return None

    def begin_load(self, partition: int, leader_epoch: int) -> None:
        self.unload(partition)
        self.loading[partition] = {}
        self.loading_epochs[partition] = leader_epoch

    def load_record(self, partition: int, key: bytes | None, value: bytes | None,
                    log_offset: int) -> None:
        groups = self.loading[partition]
        if key is None:
            return
        try:
            decoded = decode_key(key)
            group = groups.get(decoded.group_id)
            if group is None:
                group = groups[decoded.group_id] = Group(decoded.group_id, partition,
                                                         self.clock.now_ms())
            if isinstance(decoded, OffsetCommitKey):
                tp = (decoded.topic, decoded.partition)
                if value is None:
                    group.offsets.pop(tp, None)
                else:
                    group.offsets[tp] = decode_offset_commit_value(value)
                    group.offset_positions[tp] = log_offset
            elif isinstance(decoded, GroupMetadataKey):
                if value is None:
                    group.members.clear()
                    group.static_members.clear()
                    group.generation_id = 0
                else:
                    group.load_metadata(decode_group_metadata_value(value))
        except GroupRecordError as exc:
            log.warning("offsets partition %d offset %d: skipping record: %s", partition,
                        log_offset, exc)

    def finish_load(self, partition: int) -> None:
        groups = self.loading.pop(partition)
        self.owned[partition] = self.loading_epochs.pop(partition)
        for group in groups.values():
            if not group.members and not group.offsets and group.generation_id == 0:
                continue  # deleted
            group.state = _S.STABLE if group.members else _S.EMPTY
            self.groups[group.group_id] = group
            for member in group.members.values():
                self.keep_alive(group, member)
        log.info("offsets partition %d loaded: %d groups", partition, len(groups))

    def unload(self, partition: int) -> None:
        self.loading.pop(partition, None)
        self.loading_epochs.pop(partition, None)
        self.owned.pop(partition, None)
        for group in [g for g in self.groups.values() if g.partition == partition]:
            self._unload_group(group, ErrorCode.NOT_COORDINATOR)

    def _unload_group(self, group: Group, code: ErrorCode) -> None:
        del self.groups[group.group_id]
        self.join_purgatory.cancel_for_key(group.group_id)
        for member_id in list(group.pending_members):
            self.heartbeat_purgatory.cancel_for_key((group.group_id, member_id))
        for member in group.members.values():
            self.heartbeat_purgatory.cancel_for_key((group.group_id, member.member_id))
            self._answer_parked(member, code)
        group.transition(GroupEvent.UNLOAD, self.clock.now_ms())

    def shutdown(self) -> None:
        """Stop: drop every group without answering parked requests (the broker stops)."""
        for group in self.groups.values():
            for member in group.members.values():
                member.join_respond = member.sync_respond = None
        for partition in list(self.owned) + list(self.loading):
            self.unload(partition)
        self.join_purgatory.shutdown()
        self.heartbeat_purgatory.shutdown()

    def _answer_parked(self, member: GroupMember, code: ErrorCode) -> None:
        join, member.join_respond = member.join_respond, None
        if join is not None:
            join(join_error(member.member_id, code))
        sync, member.sync_respond = member.sync_respond, None
        if sync is not None:
            sync(sync_answer(None, code))

    def _schedule_heartbeat(self, group: Group, member_id: str,
                            timeout_ms: int) -> DelayedHeartbeat:
        op = DelayedHeartbeat(self, group, member_id, timeout_ms)
        self.heartbeat_purgatory.try_complete_else_watch(op, [(group.group_id, member_id)])
        return op

    def _satisfy(self, op: Any) -> None:
        if op is not None and not op.is_completed:
            op.satisfied = True
            self.heartbeat_purgatory.check_and_complete((op.group.group_id, op.member_id))

    def keep_alive(self, group: Group, member: GroupMember) -> None:
        """The member showed it is alive: restart its session timeout."""
        self._satisfy(member.heartbeat)
        member.heartbeat = self._schedule_heartbeat(group, member.member_id,
                                                    member.session_timeout_ms)

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

    def on_heartbeat_expired(self, op: DelayedHeartbeat) -> None:
        """A session timeout passed (the coordinator removes the member)."""
        raise NotImplementedError
