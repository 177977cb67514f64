"""Which offsets partitions a group coordinator serves, and loading one into groups.

:class:`PartitionOwnership` is the group cache's ownership collaborator:

- owns the map of loaded partitions (partition -> leader epoch) and of partitions being
  loaded (leader epoch, and the groups rebuilt so far, which nobody else sees);
- reads only the injected clock (a loaded group's state timestamp);
- is called by the group cache
  (:class:`~broker.group.metadata_manager.GroupMetadataManager`): :meth:`begin`,
  :meth:`apply` for every record of the partition in log order (and
  :meth:`apply_marker` for every transaction marker), :meth:`finish` at its
  end, :meth:`forget` when leadership is lost, :meth:`error` to check a request's group;
  the offsets-topic adapter reads :meth:`epochs` and :meth:`loading_epoch` to compare
  with the partitions this broker leads.

Loading applies records in order into fresh groups: an offset commit replaces the
cached offset of its (topic, partition) (a tombstone removes it), a group-metadata record
replaces members, generation, protocol and leader (a tombstone empties the group).
Transactions (Kafka's loader): an offset commit of a transactional batch is pending for
its producer (:mod:`broker.group.txn_offsets`; a tombstone there drops the pending one,
a plain tombstone drops every producer's pending offset of its partition, as Kafka's
replay does)
until that producer's marker (:meth:`apply_marker`): a COMMIT makes its pending offsets
of the partition's groups committed, each only over an offset (or tombstone) written
earlier in the log, an ABORT drops them; those without a marker yet stay pending in the
loaded groups (a later marker completes them through the group cache).  A
record that cannot be decoded (no key, an unknown version, a body that is not what its
version says: forged or damaged bytes) is skipped, as is a batch whose records do not
decode (:meth:`skip`); the first :data:`LOGGED_SKIPS` of a load are logged one by one and
the load's end logs how many were skipped, so hostile records never stop a load.  At the
end a group with members is Stable, one without is Empty, and one that holds nothing
(deleted) is dropped; the group cache then installs the groups and the coordinator starts
their members' session timeouts.

Costs: ``apply`` O(size of the record); ``apply_marker`` O(the producer's pending
offsets in the partition); ``finish`` O(groups of the partition); the rest O(1).
Not thread-safe: the broker's event loop (or a test's thread) owns it.
"""

from __future__ import annotations

import logging

from broker.group.members import Group
from broker.group.metadata import (
    GroupMetadataKey,
    GroupRecordError,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from broker.group.protocol import Error
from broker.group.state import GroupState
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from timer.clock import Clock

log = logging.getLogger(__name__)

LOGGED_SKIPS = 3  # skipped records of one load logged one by one; the rest only counted


class PartitionOwnership:
    """The offsets partitions a coordinator owns or loads; see the module docstring."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.owned: dict[int, int] = {}  # loaded partition -> leader epoch
        self._loading: dict[int, dict[str, Group]] = {}  # partition -> groups so far
        self._loading_epochs: dict[int, int] = {}
        self._skipped: dict[int, int] = {}  # loading partition -> records skipped so far
        # loading partition -> producer id -> ids of the groups with its pending offsets
        self._txn_producers: dict[int, dict[int, set[str]]] = {}

    @property
    def is_loading(self) -> bool:
        return bool(self._loading)

    def epochs(self) -> dict[int, int]:
        """Partition -> leader epoch, for every partition owned or being loaded."""
        return {**self.owned, **self._loading_epochs}

    def loading_epoch(self, partition: int) -> int | None:
        return self._loading_epochs.get(partition)

    def error(self, partition: int) -> Error | None:
        """Why a group of ``partition`` cannot be served now (None: it can)."""
        if partition in self._loading:
            return (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    f"loading offsets partition {partition}")
        if partition not in self.owned:
            return (ErrorCode.NOT_COORDINATOR,
                    f"this broker does not lead offsets partition {partition}")
        return None

    def begin(self, partition: int, leader_epoch: int) -> None:
        """Start loading ``partition`` (the caller has forgotten it first)."""
        self._loading[partition] = {}
        self._loading_epochs[partition] = leader_epoch
        self._skipped[partition] = 0
        self._txn_producers[partition] = {}

    def skip(self, partition: int, log_offset: int, why: str) -> None:
        """Count a record (or batch) of ``partition``'s load that cannot be applied."""
        skipped = self._skipped[partition] = self._skipped.get(partition, 0) + 1
        if skipped <= LOGGED_SKIPS:
            log.warning("offsets partition %d offset %d: skipping: %s%s", partition,
                        log_offset, why, " (further skips are only counted)"
                        if skipped == LOGGED_SKIPS else "")

    def apply(self, partition: int, key: bytes | None, value: bytes | None,
              log_offset: int, txn_producer_id: int = -1) -> None:
        """Apply one record of ``partition`` (in log order) to the groups being loaded;
        ``txn_producer_id``: the producer of its transactional batch (-1: plain)."""
        groups = self._loading[partition]
        if key is None:
            self.skip(partition, log_offset, "a record without a key")
            return
        try:
            decoded = decode_key(key)
            group = groups.get(decoded.group_id)
            if group is None:
                group = groups[decoded.group_id] = Group(decoded.group_id, partition,
                                                         self.clock.now_ms())
            if isinstance(decoded, OffsetCommitKey):
                tp = TopicPartition(decoded.topic, decoded.partition)
                offset = None if value is None else decode_offset_commit_value(value)
                if txn_producer_id >= 0:
                    group.pending_txn.load(txn_producer_id, tp, offset, log_offset)
                    self._txn_producers[partition].setdefault(
                        txn_producer_id, set()).add(group.group_id)
                elif offset is None:
                    group.offsets.pop(tp, None)
                    group.offset_positions[tp] = log_offset
                    group.pending_txn.drop(tp)
                else:
                    group.offsets[tp] = offset
                    group.offset_positions[tp] = log_offset
            elif isinstance(decoded, GroupMetadataKey):
                if value is None:
                    group.clear_members()
                    group.generation_id = 0
                else:
                    group.load_metadata(decode_group_metadata_value(value))
        except GroupRecordError as exc:
            self.skip(partition, log_offset, str(exc))

    def apply_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        """A COMMIT (``committed``) or ABORT marker of ``producer_id`` in ``partition``'s
        load: its pending offsets are committed or dropped."""
        groups = self._loading[partition]
        for group_id in self._txn_producers[partition].pop(producer_id, ()):
            group = groups[group_id]
            for tp, offset, position in group.pending_txn.complete(producer_id, committed):
                group.apply_offset(tp, offset, position)

    def finish(self, partition: int) -> list[Group]:
        """End the load: ``partition`` is owned; returns its groups (Stable or Empty)."""
        groups = self._loading.pop(partition)
        self.owned[partition] = self._loading_epochs.pop(partition)
        self._txn_producers.pop(partition, None)
        loaded = []
        for group in groups.values():
            if not group.members and not group.offsets and not group.pending_txn \
                    and group.generation_id == 0:
                continue  # deleted
            group.state = GroupState.STABLE if group.members else GroupState.EMPTY
            loaded.append(group)
        skipped = self._skipped.pop(partition, 0)
        if skipped:
            log.warning("offsets partition %d loaded: %d groups; %d records skipped that "
                        "did not decode", partition, len(groups), skipped)
        else:
            log.info("offsets partition %d loaded: %d groups", partition, len(groups))
        return loaded

    def forget(self, partition: int) -> None:
        """Stop owning (or loading) ``partition``."""
        self._loading.pop(partition, None)
        self._loading_epochs.pop(partition, None)
        self._skipped.pop(partition, None)
        self._txn_producers.pop(partition, None)
        self.owned.pop(partition, None)

    def partitions(self) -> list[int]:
        """Every partition owned or being loaded."""
        return list(self.owned) + list(self._loading)
