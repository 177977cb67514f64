"""The groups of the offsets partitions a coordinator owns, and their storage (Kafka's
GroupMetadataManager): the group cache, loading and unloading partitions, every write to
the offsets topic.

:class:`GroupMetadataManager` is shared by the rooms of the group coordinator
(:mod:`broker.group.coordinator`, :mod:`broker.group.rebalance`,
:mod:`broker.group.membership`, :mod:`broker.group.offsets`):

- ``groups`` (id -> :class:`Group`) holds the groups of the loaded partitions only;
  :meth:`coordinator_error` says why a group cannot be served here (INVALID_GROUP_ID for
  an empty id, NOT_COORDINATOR without an offsets topic or for a partition not owned,
  COORDINATOR_LOAD_IN_PROGRESS while its partition loads); :meth:`member_request` adds
  the member and generation checks of SyncGroup, Heartbeat and a member's OffsetCommit.
- Loading (records applied by :class:`~broker.group.ownership.PartitionOwnership`):
  :meth:`begin_load`, :meth:`load_record` (with the producer id of a transactional
  batch), :meth:`load_marker` (a COMMIT/ABORT control batch), :meth:`finish_load` (the
  loaded groups enter the cache and are returned, so the caller starts their members'
  session timeouts);
  :meth:`unload` takes a partition's groups out of the cache and returns them (the caller
  ends their timers and parked requests).
- Writes go through the injected :class:`~broker.group.protocol.OffsetsLog`
  (``append(partition, records, done)``, ``done(error_code, base_offset)`` once the
  records are committed, acks=all, or failed): a group's record (:meth:`store_group`),
  committed offsets (:meth:`store_offsets`: the cache takes them only once written, and
  only over an offset cached from earlier in the log), transactional offsets
  (:meth:`store_txn_offsets`: one transactional batch of the producer; pending in the
  group, :mod:`broker.group.txn_offsets`, from before the write), tombstones of deleted
  groups (:meth:`store_tombstones`) and of deleted offsets
  (:meth:`store_offset_tombstones`).  Each ``done`` is called exactly once.
- Transaction markers: :meth:`complete_txn` (the marker listener's call once a COMMIT or
  ABORT of a producer is replicated on a partition) commits or drops that producer's
  pending offsets in the partition's groups, found through ``txn_producers`` (producer id
  -> ids of the groups holding its pending offsets; Kafka's ``openGroupsForProducer``),
  kept by the writes, the loads and the unloads.

It answers no request and holds no timer: the coordinator's rooms do.

Costs: :meth:`footprint_bytes` O(groups); :meth:`unload` O(groups + their pending
producers); a write O(records); :meth:`complete_txn` O(the producer's pending offsets);
loading as :mod:`broker.group.ownership` says; the rest O(1).  Not thread-safe: the
broker's event loop (or a test's thread) owns it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from broker.coordination.placement import partition_for
from broker.group.members import Group
from broker.group.metadata import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from broker.group.ownership import PartitionOwnership
from broker.group.protocol import (
    Done,
    Error,
    OffsetsLog,
    TxnProducer,
    member_error,
)
from broker.group.state import GroupState
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import HeartbeatRequest, OffsetCommitRequest, SyncGroupRequest
from clients.protocol.topics import TopicPartition
from timer.clock import Clock

Stored = Callable[[ErrorCode], None]


class GroupMetadataManager:
    """The group cache of the owned offsets partitions and its writes; see the module
    docstring."""

    def __init__(self, clock: Clock, log_: OffsetsLog, num_partitions: int = 0) -> None:
        self.clock = clock
        self.log = log_
        self.num_partitions = num_partitions  # of the offsets topic; 0 = no topic yet
        self.groups: dict[str, Group] = {}
        self.ownership = PartitionOwnership(clock)
        # producer id -> ids of the cached groups with its pending transactional offsets
        self.txn_producers: dict[int, set[str]] = {}

    # -- the cache ---------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def coordinator_error(self, group_id: str) -> Error | None:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, "group_id is empty"
        if self.num_partitions <= 0:
            return ErrorCode.NOT_COORDINATOR, "the offsets topic does not exist yet"
        return self.ownership.error(self.partition_for(group_id))

    def member_request(self, body: SyncGroupRequest | HeartbeatRequest | OffsetCommitRequest
                       ) -> tuple[Group | None, Error | None]:
        """Checks shared by SyncGroup, Heartbeat and OffsetCommit of a member."""
        group_id = body["group_id"]
        error = self.coordinator_error(group_id)
        if error is not None:
            return None, error
        group = self.groups.get(group_id)
        if group is None:
            return None, (ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has no members")
        error = member_error(group, body["member_id"], body.get("group_instance_id"))
        if error is None and body["generation_id"] != group.generation_id:
            error = (ErrorCode.ILLEGAL_GENERATION, f"generation {body['generation_id']} is "
                     f"not the group's {group.generation_id}")
        return group, error

    def is_current(self, group: Group) -> bool:
        """Whether ``group`` is still the cached group of its id (not unloaded, deleted or
        replaced meanwhile)."""
        return self.groups.get(group.group_id) is group

    def add_group(self, group_id: str) -> Group:
        """A new, Empty group of this coordinator (the caller checked
        :meth:`coordinator_error`)."""
        group = self.groups[group_id] = Group(group_id, self.partition_for(group_id),
                                              self.clock.now_ms())
        return group

    def maybe_drop(self, group: Group) -> None:
        """Forget a group that never had a generation and holds nothing."""
        if (group.is_(GroupState.EMPTY) and not group.members and not group.pending_members
                and not group.offsets and not group.pending_txn and not group.commits_in_flight
                and group.generation_id == 0 and self.is_current(group)):
            del self.groups[group.group_id]

    def remove(self, group: Group) -> None:
        """Take ``group`` out of the cache (deleted)."""
        del self.groups[group.group_id]
        for producer_id in group.pending_txn.producers():
            self._forget_txn(producer_id, group.group_id)

    def footprint_bytes(self) -> int:
        """Member metadata held by every group of this coordinator (O(groups))."""
        return sum(g.footprint_bytes for g in self.groups.values())

    # -- loading and unloading ---------------------------------------------------------

    def begin_load(self, partition: int, leader_epoch: int) -> None:
        """Start loading ``partition`` (the caller has unloaded it first)."""
        self.ownership.begin(partition, leader_epoch)

    def load_record(self, partition: int, key: bytes | None, value: bytes | None,
                    log_offset: int, txn_producer_id: int = -1) -> None:
        """One record of ``partition`` in log order; ``txn_producer_id``: the producer
        of its transactional batch (-1: a plain batch)."""
        self.ownership.apply(partition, key, value, log_offset, txn_producer_id)

    def load_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        """A COMMIT (``committed``) or ABORT marker of ``producer_id`` read in the load."""
        self.ownership.apply_marker(partition, producer_id, committed)

    def finish_load(self, partition: int) -> list[Group]:
        """End the load: ``partition`` is owned; its groups enter the cache and are
        returned."""
        loaded = self.ownership.finish(partition)
        for group in loaded:
            self.groups[group.group_id] = group
            for producer_id in group.pending_txn.producers():
                self.txn_producers.setdefault(producer_id, set()).add(group.group_id)
        return loaded

    def unload(self, partition: int) -> list[Group]:
        """Stop owning (or loading) ``partition``; its groups leave the cache and are
        returned."""
        self.ownership.forget(partition)
        gone = [g for g in self.groups.values() if g.partition == partition]
        for group in gone:
            del self.groups[group.group_id]
            for producer_id in group.pending_txn.producers():
                self._forget_txn(producer_id, group.group_id)
        return gone

    def _forget_txn(self, producer_id: int, group_id: str) -> None:
        group_ids = self.txn_producers.get(producer_id)
        if group_ids is not None:
            group_ids.discard(group_id)
            if not group_ids:
                del self.txn_producers[producer_id]

    # -- transaction markers -----------------------------------------------------------

    def complete_txn(self, partition: int, producer_id: int, committed: bool) -> None:
        """``producer_id``'s COMMIT (``committed``) or ABORT marker is on ``partition``:
        its pending offsets in the partition's groups are committed (each only over an
        offset written earlier in the log) or dropped."""
        for group_id in list(self.txn_producers.get(producer_id, ())):
            group = self.groups.get(group_id)
            if group is None:
                self._forget_txn(producer_id, group_id)
            elif group.partition == partition:
                for tp, value, position in group.pending_txn.complete(producer_id, committed):
                    group.apply_offset(tp, value, position)
                self._forget_txn(producer_id, group_id)

    # -- writes ------------------------------------------------------------------------

    def store_group(self, group: Group, assignments: dict[str, bytes] | None,
                    done: Done) -> None:
        """Write the group's record (members, generation; ``assignments`` None: the
        members' current ones)."""
        key = encode_group_metadata_key(GroupMetadataKey(group.group_id))
        value = encode_group_metadata_value(group.metadata_value(assignments))
        self.log.append(group.partition, [(key, value)], done)

    def store_offsets(self, group: Group,
                      offsets: Sequence[tuple[TopicPartition, OffsetCommitValue]],
                      done: Stored) -> None:
        """Write ``offsets`` as one batch to the group's partition; once written, each
        enters the cache unless the cached one was written later in the log.  ``done``
        gets the write's error (NONE once committed)."""
        in_flight = group.commits_in_flight
        for tp, _value in offsets:
            in_flight[tp] = in_flight.get(tp, 0) + 1

        def stored(code: ErrorCode, base_offset: int) -> None:
            for i, (tp, value) in enumerate(offsets):
                if code == ErrorCode.NONE:
                    group.apply_offset(tp, value, base_offset + i)
                in_flight[tp] -= 1
                if not in_flight[tp]:
                    del in_flight[tp]
            done(code)

        self.log.append(group.partition, _offset_records(group, offsets), stored)

    def store_txn_offsets(self, group: Group, producer: TxnProducer,
                          offsets: Sequence[tuple[TopicPartition, OffsetCommitValue]],
                          done: Stored) -> None:
        """Write ``offsets`` as one transactional batch of ``producer`` to the group's
        partition; they are pending from now on (invisible to OffsetFetch) until the
        producer's marker (:meth:`complete_txn`); a failed write takes them back.
        ``done`` gets the write's error (NONE once committed)."""
        producer_id = producer.producer_id
        pending = group.pending_txn
        entries = [(tp, pending.prepare(producer_id, tp, value)) for tp, value in offsets]
        self.txn_producers.setdefault(producer_id, set()).add(group.group_id)

        def stored(code: ErrorCode, base_offset: int) -> None:
            for i, (tp, entry) in enumerate(entries):
                if code != ErrorCode.NONE:
                    pending.failed(producer_id, tp, entry)
                    continue
                landed = pending.written(entry, base_offset + i)
                if landed is not None:  # committed while in flight
                    group.apply_offset(*landed)
            if not pending.pending(producer_id) and self.is_current(group):
                self._forget_txn(producer_id, group.group_id)
            done(code)

        self.log.append(group.partition, _offset_records(group, offsets), stored, producer)

    def store_tombstones(self, partition: int, groups: Sequence[Group], done: Stored) -> None:
        """Write tombstones of ``groups`` (all of ``partition``): their metadata and every
        committed offset, and every partition with a pending transactional offset (so a
        reload drops those too and a later COMMIT does not bring them back: Kafka's
        ``deleteAllOffsets``), one batch."""
        records: list[tuple[bytes, bytes | None]] = []
        for group in groups:
            records.append((encode_group_metadata_key(GroupMetadataKey(group.group_id)), None))
            records.extend((encode_offset_commit_key(OffsetCommitKey(group.group_id, *tp)),
                            None) for tp in sorted(set(group.offsets)
                                                   | group.pending_txn.partitions()))
        self.log.append(partition, records, lambda code, _offset: done(code))

    def store_offset_tombstones(self, group: Group, partitions: Sequence[TopicPartition],
                                done: Stored) -> None:
        """Write tombstones of the group's committed offsets of ``partitions`` (OffsetDelete;
        the caller dropped them from the cache), one batch."""
        records: list[tuple[bytes, bytes | None]] = [
            (encode_offset_commit_key(OffsetCommitKey(group.group_id, *tp)), None)
            for tp in partitions]
        self.log.append(group.partition, records, lambda code, _offset: done(code))


def _offset_records(group: Group, offsets: Sequence[tuple[TopicPartition, OffsetCommitValue]]
                    ) -> list[tuple[bytes, bytes | None]]:
    return [(encode_offset_commit_key(OffsetCommitKey(group.group_id, tp[0], tp[1])),
             encode_offset_commit_value(value)) for tp, value in offsets]
