"""One replica's damage marks: the log ranges a CRC check found bad, and their repair.

:class:`DamageMarks` is the collaborator a :class:`replication.partition.Partition` owns
for its log's damage; the decision what to do when damage is found is
:mod:`replication.damage`, the segment rewrite itself :mod:`storage.segment_repair`.

Contract:

* A range ``[first bad offset, the end of its segment)`` is never served, nor read across
  (:meth:`DamageMarks.read_bound`): a fetch below it stops before it, a fetch inside it is
  KAFKA_STORAGE_ERROR (retriable: clients keep the records before it and retry, so they
  never read corrupt bytes or skip the range), a fetch from its end on is served (a
  follower at its log end, or repairing a damaged range of its own higher up, still gets
  the intact later segments).  Ranges are ascending and disjoint; overlapping marks merge.
* At most one segment is repaired at a time (:attr:`DamageMarks.repair`): it is written
  again from the leader's batches and swapped in; every later segment is kept all along
  (they may hold the only intact copy of another replica's damage).  The mark ends when
  the repaired segment is in (:meth:`DamageMarks.feed_repair`), when the log is cut below
  it (:meth:`DamageMarks.cut_point`, then :meth:`DamageMarks.forget_outside`), or when
  the log start moves past the whole range (DeleteRecords, retention).
* Damage that log recovery found and kept in place (``Segment.damage``) is marked at
  construction; the owner then starts the repair as for the scrubber's findings.
* The log cleaner stays away while anything is marked or under repair
  (:attr:`DamageMarks.blocks_compaction`): it would rewrite the same segments.

The owner checks the replica's role (only a follower feeds a repair) and cuts its log
when a repair cannot fit (:class:`~storage.segment_repair.SegmentRepairError`).

Costs: marks and read bounds O(ranges) (almost always zero or one); a repair's start
copies the segment's intact prefix.  Not thread-safe: the partition's owner thread.
"""

from __future__ import annotations

from clients.protocol.errors import ErrorCode, MiniKafkaError
from storage.log.log import Log
from storage.segment_repair import SegmentRepair

__all__ = ["DamageMarks"]


class DamageMarks:
    """The damaged ranges of one replica's log and the repair of one (module docstring)."""

    def __init__(self, log: Log) -> None:
        self._log = log
        # [first offset a CRC check found bad, the end of its segment), ascending, disjoint
        self.ranges: list[tuple[int, int]] = []
        self.repair: SegmentRepair | None = None
        for seg in log.segments:  # damage recovery kept in place (storage.log.recovery)
            if seg.damage is not None:
                self.mark(seg.damage[1], seg.next_offset)

    @property
    def blocks_compaction(self) -> bool:
        return self.repair is not None or bool(self.ranges)

    def mark(self, offset: int, until: int) -> None:
        """The log cannot be trusted in ``[offset, until)``.  Overlapping ranges merge."""
        merged: list[tuple[int, int]] = []
        for first, end in sorted([*self.ranges, (offset, until)]):
            if merged and first < merged[-1][1]:  # the same segment found again
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((first, end))
        self.ranges = merged

    def forget_outside(self, log_start_offset: int, log_end_offset: int) -> None:
        """Drop ranges the log no longer holds: wholly below the log start (retention,
        DeleteRecords: not before, the rest of the segment is not trusted either), or at
        or above the log end (cut away)."""
        self.ranges = [(first, end) for first, end in self.ranges
                       if end > log_start_offset and first < log_end_offset]

    def clear(self) -> None:
        """The log restarted empty: nothing is marked or repaired any more."""
        self.abort_repair()
        self.ranges = []

    def read_bound(self, name: str, fetch_offset: int, upper: int) -> int:
        """Where a read from ``fetch_offset`` must stop (``upper`` or the first damaged
        offset above it); KAFKA_STORAGE_ERROR inside a damaged range."""
        if not self.ranges:
            return upper
        self.forget_outside(self._log.log_start_offset, self._log.log_end_offset)
        for first_bad, until in self.ranges:
            if fetch_offset >= until:
                continue
            if fetch_offset >= first_bad:
                raise MiniKafkaError(
                    f"{name}: offsets [{first_bad}, {until}) failed this leader's CRC "
                    "check and are not served until a replica holding a good copy leads "
                    "(see the broker's log)", ErrorCode.KAFKA_STORAGE_ERROR)
            return min(upper, first_bad)
        return upper

    def begin_repair(self, segment_base_offset: int, position: int) -> SegmentRepair | None:
        """Start writing the closed segment ``segment_base_offset`` again from byte
        ``position`` on; marks the range damaged.  None when another segment's repair is
        under way.  :class:`~storage.segment_repair.SegmentRepairError` when it cannot be
        repaired in place (the active segment, or the prefix is bad too)."""
        if self.repair is not None:
            if self.repair.valid:
                return (self.repair if self.repair.segment.base_offset == segment_base_offset
                        else None)
            self.abort_repair()
        self.repair = SegmentRepair(self._log, segment_base_offset, position)
        self.mark(self.repair.first_bad_offset, self.repair.end_offset)
        return self.repair

    def feed_repair(self, records: bytes | bytearray | memoryview, now_ms: int) -> bool:
        """Write the leader's batches for the range under repair; True once the repaired
        segment is swapped in (its mark ends).  A segment that changed meanwhile ends the
        repair.  :class:`~storage.segment_repair.SegmentRepairError` (the batches do not
        fit the range) leaves the repair in place for the owner's cut;
        :class:`~clients.protocol.errors.CorruptRecordError`: the leader's copy is bad
        too; nothing was written."""
        repair = self.repair
        if repair is None:
            return False
        if not repair.valid:
            self.abort_repair()
            self.forget_outside(self._log.log_start_offset, self._log.log_end_offset)
            return False
        repair.append(records)
        if not repair.done:
            return False
        repair.commit(now_ms)
        self.repair = None
        self.ranges = [(first, end) for first, end in self.ranges
                       if not repair.segment.base_offset <= first < repair.end_offset]
        return True

    def abort_repair(self) -> None:
        """Drop the repair under way (its file is removed; the damage mark stays)."""
        if self.repair is not None:
            self.repair.abort()
            self.repair = None

    def cut_point(self, offset: int) -> int:
        """Where a truncation to ``offset`` must cut: a cut reaching the segment under
        repair would leave it active with its bad batches, so it cuts before them and the
        repair ends (nothing later is kept anyway)."""
        if self.repair is not None and offset < self.repair.end_offset:
            offset = min(offset, self.repair.first_bad_offset)
            self.abort_repair()
        return offset
