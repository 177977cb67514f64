"""What a replica does when a CRC check finds a damaged range in one of its segments.

Sans-IO: :func:`on_damage_found` changes only the :class:`Partition`'s
:class:`~replication.damage_marks.DamageMarks` (its damage marks and its repair, and so
its log's files) and says what the owner must do next; the broker
(:meth:`broker.replica.damage_repair.DamageRepair.run_scrubber`) and the simulation
(``tests/sim``) act on the answer with their own clock, network and logging.

The rules, in order:

1. The range ``[first bad offset, the segment's end)`` is marked damaged at once
   (:meth:`replication.damage_marks.DamageMarks.mark`): a leader never serves it nor reads
   across it.  The segment gets a damage mark on disk
   (:meth:`storage.segment.Segment.write_damage_mark`): after a restart its recovery
   finds the range again and the repair starts over.
2. Found again while that segment's repair is under way: ``ALREADY_REPAIRING``.
3. The segment's repair begins (:meth:`DamageMarks.begin_repair`): the replica keeps its
   whole log and rewrites only that segment from the leader's copy.  Another segment's
   repair under way: ``QUEUED`` (one at a time; the scrubber finds this one again).
   A follower: ``REPAIR`` (its fetcher's repair Fetches do the rest).  A leader:
   ``RESIGN`` (it hands leadership to an in-sync replica, then repairs as a follower;
   alone in its ISR it keeps the range unserved until one joins).
4. The segment cannot be repaired in place (the active one, or bad batches before the
   damaged position): ``CUT``: the owner cuts the log before the damage and fetches the
   rest again (a leader resigns first).

Costs: the marks O(ranges), plus one small fsync'd file per damaged segment; a repair's
start copies the segment's intact prefix (:mod:`storage.segment_repair`).  Not
thread-safe: the partition's owner thread.
"""

from __future__ import annotations

import enum

from replication.partition import Partition
from storage.segment_repair import SegmentRepairError

__all__ = ["DamageAction", "on_damage_found"]


class DamageAction(enum.Enum):
    ALREADY_REPAIRING = "already repairing"
    QUEUED = "queued behind another segment's repair"
    REPAIR = "repair from the leader"
    RESIGN = "resign, then repair"
    CUT = "cut the log before the damage"


def on_damage_found(partition: Partition, segment_base_offset: int, position: int,
                    first_bad_offset: int) -> tuple[DamageAction, str]:
    """Apply the rules above for damage found at byte ``position`` (offset
    ``first_bad_offset``) of the segment based at ``segment_base_offset``; returns the
    action and a reason for the log (empty unless ``CUT``)."""
    segments = partition.log.segments
    ends = [seg.base_offset for seg in segments if seg.base_offset > segment_base_offset]
    until = ends[0] if ends else partition.log_end_offset
    partition.damage.mark(min(max(first_bad_offset, segment_base_offset), until), until)
    for seg in segments:
        if seg.base_offset == segment_base_offset:  # a restart must not forget it
            seg.write_damage_mark(position, first_bad_offset)
    repair = partition.repair
    if repair is not None and repair.segment.base_offset == segment_base_offset:
        return DamageAction.ALREADY_REPAIRING, ""
    try:
        repair = partition.damage.begin_repair(segment_base_offset, position)
    except SegmentRepairError as exc:
        return DamageAction.CUT, str(exc)
    if repair is None:
        return DamageAction.QUEUED, ""
    return (DamageAction.RESIGN if partition.is_leader else DamageAction.REPAIR), ""
