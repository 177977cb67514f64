"""A group's transactional offset commits that are not committed or aborted yet (Kafka's
``pendingTransactionalOffsetCommits`` of GroupMetadata).

A TxnOffsetCommit writes its offsets to the group's offsets partition as a transactional
batch of the producer; they stay *pending*, invisible to OffsetFetch, until the
producer's transaction ends on that partition: a COMMIT marker makes them the group's
committed offsets, an ABORT drops them.  :class:`PendingTxnOffsets` is that state for one
group (held by :class:`~broker.group.members.Group` as ``pending_txn``), keyed by producer
id then partition; a later commit of the same producer and partition replaces the
earlier one (the last written wins, as in the log).

Life of an entry (:class:`PendingTxnOffset`), in the coordinator's order:

- :meth:`prepare` before the write: the entry is pending with no log position (-1); the
  one it replaces is kept as ``previous``;
- :meth:`written` once the write is replicated: it takes its log position;
  :meth:`failed` if the write failed: the entry goes and ``previous`` (if it was still
  the pending one) comes back, since a failed write is not in the log;
- :meth:`complete` when the producer's marker is on the partition: an ABORT drops the
  producer's entries; a COMMIT returns the written ones ``(partition, value, position)``
  for the group to take if newer in log order than its committed offset (Kafka's
  ``olderThan`` rule, :meth:`~broker.group.members.Group.apply_offset`).  An entry whose
  write is still in flight at a COMMIT (the marker is later in the log than its batch)
  lands: :meth:`written` returns it then, to be applied at its position (Kafka throws
  there: it cannot happen with a well-behaved producer), and :meth:`failed` forgets it;
- :meth:`load`: a loader's record (already in the log, so written; a tombstone drops the
  partition's entry); :meth:`drop`: a plain tombstone of a partition (a deleted group's)
  drops every producer's entry of it.

:meth:`has_pending` answers OffsetFetch ``require_stable`` (UNSTABLE_OFFSET_COMMIT).

Costs: every operation O(1) but :meth:`complete` (O(the producer's entries)),
:meth:`has_pending` and :meth:`drop` (O(the group's producers)) and :meth:`partitions`
(O(entries)).  Pure, no
clock, no I/O.  Not thread-safe: the group's owner (the broker's event loop).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.group.metadata import OffsetCommitValue
from clients.protocol.topics import TopicPartition

NOT_WRITTEN = -1  # the log position of an entry whose write is in flight


@dataclass(slots=True, eq=False)
class PendingTxnOffset:
    """One pending transactional offset: its value, its record's log position once
    written (:data:`NOT_WRITTEN` before), and the pending entry it replaced."""

    value: OffsetCommitValue
    position: int = NOT_WRITTEN
    previous: PendingTxnOffset | None = None


Applied = tuple[TopicPartition, OffsetCommitValue, int]  # partition, value, log position


class PendingTxnOffsets:
    """One group's pending transactional offsets; see the module docstring."""

    __slots__ = ("_by_producer", "_landing")

    def __init__(self) -> None:
        self._by_producer: dict[int, dict[TopicPartition, PendingTxnOffset]] = {}
        # entries committed while their write was in flight (see the module docstring)
        self._landing: dict[PendingTxnOffset, TopicPartition] = {}

    def __bool__(self) -> bool:
        return bool(self._by_producer) or bool(self._landing)

    def producers(self) -> list[int]:
        """Producer ids with pending entries."""
        return list(self._by_producer)

    def has_pending(self, tp: TopicPartition) -> bool:
        """Whether a transactional offset of ``tp`` is pending (or landing)."""
        return (any(tp in e for e in self._by_producer.values())
                or tp in self._landing.values())

    def partitions(self) -> set[TopicPartition]:
        """Every partition with a pending offset (of any producer)."""
        return {tp for entries in self._by_producer.values() for tp in entries}

    def drop(self, tp: TopicPartition) -> None:
        """A plain tombstone of ``tp`` (its group deleted): every producer's pending
        offset of it goes (Kafka's replay of an offset tombstone)."""
        for producer_id in list(self._by_producer):
            entries = self._by_producer[producer_id]
            entries.pop(tp, None)
            if not entries:
                del self._by_producer[producer_id]

    def pending(self, producer_id: int) -> dict[TopicPartition, OffsetCommitValue]:
        """The producer's pending offsets (for tests and descriptions)."""
        return {tp: e.value for tp, e in self._by_producer.get(producer_id, {}).items()}

    def prepare(self, producer_id: int, tp: TopicPartition,
                value: OffsetCommitValue) -> PendingTxnOffset:
        """A commit of ``tp`` by ``producer_id`` is being written: pending from now on."""
        entries = self._by_producer.setdefault(producer_id, {})
        entry = entries[tp] = PendingTxnOffset(value, NOT_WRITTEN, entries.get(tp))
        return entry

    def written(self, entry: PendingTxnOffset, position: int) -> Applied | None:
        """``entry``'s write is replicated at ``position``; returns it when a COMMIT came
        while it was in flight (the caller applies it), else None."""
        entry.position = position
        entry.previous = None
        tp = self._landing.pop(entry, None)
        return None if tp is None else (tp, entry.value, position)

    def failed(self, producer_id: int, tp: TopicPartition, entry: PendingTxnOffset) -> None:
        """``entry``'s write failed: it never was in the log."""
        self._landing.pop(entry, None)
        entries = self._by_producer.get(producer_id)
        if entries is None or entries.get(tp) is not entry:
            return  # completed or replaced meanwhile
        previous = entry.previous
        while previous is not None and previous.position == NOT_WRITTEN:
            previous = previous.previous  # its own write is in flight: it will not do
        if previous is None:
            del entries[tp]
            if not entries:
                del self._by_producer[producer_id]
        else:
            entries[tp] = previous

    def complete(self, producer_id: int, committed: bool) -> list[Applied]:
        """The producer's marker: its entries leave; with ``committed`` the written ones
        are returned, to be applied, and those in flight land when written."""
        entries = self._by_producer.pop(producer_id, {})
        if not committed:
            return []
        applied: list[Applied] = []
        for tp, head in entries.items():
            entry: PendingTxnOffset | None = head
            while entry is not None and entry.position == NOT_WRITTEN:
                self._landing[entry] = tp
                entry = entry.previous
            if entry is not None:
                applied.append((tp, entry.value, entry.position))
        return applied

    def load(self, producer_id: int, tp: TopicPartition, value: OffsetCommitValue | None,
             position: int) -> None:
        """A transactional offset record read from the log (None: a tombstone)."""
        if value is None:
            entries = self._by_producer.get(producer_id)
            if entries is not None:
                entries.pop(tp, None)
                if not entries:
                    del self._by_producer[producer_id]
            return
        self._by_producer.setdefault(producer_id, {})[tp] = PendingTxnOffset(value, position)
