"""The structural invariants of a partition log, checked by walking every batch.

:func:`check_log_invariants` takes a log's :class:`~storage.log.segment_list.SegmentList`
(the segments and the offsets that describe them) and backs
:meth:`storage.log.log.Log.check_invariants` (tests, the state-machine and simulation
suites, debugging tools).  It reads every segment file and both indexes; it never
changes anything.

Costs: O(log bytes) of reads plus O(batches + index entries) of Python.  Not
thread-safe: call it on the thread that owns the log, between its operations.
"""

from __future__ import annotations

import os

from storage.errors import LogInvariantError
from storage.index.time_index import NO_TIMESTAMP
from storage.log.segment_list import SegmentList

__all__ = ["check_log_invariants"]


def check_log_invariants(log: SegmentList) -> None:
    """Walk every batch of ``log``; raise LogInvariantError naming the first broken rule.

    Rules: segments sorted with matching file names and sizes; only the last may be empty;
    batch offsets strictly increasing within and across segments and at or above each
    segment's base; each segment's next offset and largest timestamp match its batches;
    every offset-index entry points at a batch start with that base offset and every
    time-index entry at a batch base offset, both strictly increasing; LEO equals the
    active segment's next offset; log start in [first base, LEO]; recovery point <= LEO.
    A segment with a damaged tail kept by recovery (``Segment.damage``) is walked up to
    the damage; it must not be the last one, and it ends where the next one starts.
    """
    segs = log.segments
    if not segs:
        raise LogInvariantError(f"{log.dir}: no segments")
    prev_next = segs[0].base_offset
    for i, seg in enumerate(segs):
        where = f"{log.dir}/{seg.log_path.name}"
        if seg.base_offset < prev_next:
            raise LogInvariantError(f"{where}: base offset below previous end {prev_next}")
        if os.fstat(seg.fd).st_size != seg.size:
            raise LogInvariantError(f"{where}: file size differs from tracked size {seg.size}")
        if seg.size == 0 and i != len(segs) - 1:
            raise LogInvariantError(f"{where}: empty segment that is not the active one")
        starts: dict[int, int] = {}
        expected, max_ts = max(prev_next, seg.base_offset), NO_TIMESTAMP
        end = 0
        for batch in seg.iter_batches(0):
            if batch.base_offset < expected:
                raise LogInvariantError(
                    f"{where}: batch at {batch.position} has base offset {batch.base_offset} "
                    f"< {expected}")
            starts[batch.position] = batch.base_offset
            expected = batch.last_offset + 1
            max_ts = max(max_ts, batch.max_timestamp)
            end = batch.position + batch.size
        if end != seg.trusted_size:
            raise LogInvariantError(f"{where}: batches end at {end}, trusted size "
                                    f"{seg.trusted_size} (file size {seg.size})")
        next_offset = expected if starts else seg.base_offset
        if seg.damage is not None:
            if i == len(segs) - 1 or seg.next_offset != segs[i + 1].base_offset:
                raise LogInvariantError(f"{where}: damaged tail {seg.damage} in the last "
                                        "segment, or not ending where the next one starts")
            next_offset = seg.next_offset
        if seg.next_offset != next_offset or seg.max_timestamp != max_ts:
            raise LogInvariantError(
                f"{where}: tracked next_offset/max_timestamp {seg.next_offset}/"
                f"{seg.max_timestamp}, batches say {next_offset}/{max_ts}")
        bases = set(starts.values())
        entries = seg.index.to_array()
        for rel, pos in zip(entries["rel"].tolist(), entries["pos"].tolist(), strict=True):
            if starts.get(pos) != seg.base_offset + rel:
                raise LogInvariantError(f"{where}: index entry ({rel}, {pos}) is not a batch start")
        if len(entries) > 1 and not (bool((entries["rel"][1:] > entries["rel"][:-1]).all())
                                     and bool((entries["pos"][1:] > entries["pos"][:-1]).all())):
            raise LogInvariantError(f"{where}: offset index not strictly increasing")
        times = seg.time_index.to_array()
        for ts, rel in zip(times["ts"].tolist(), times["rel"].tolist(), strict=True):
            if seg.base_offset + rel not in bases or ts > max_ts:
                raise LogInvariantError(f"{where}: time index entry ({ts}, {rel}) is invalid")
        if len(times) > 1 and not (bool((times["ts"][1:] > times["ts"][:-1]).all())
                                   and bool((times["rel"][1:] > times["rel"][:-1]).all())):
            raise LogInvariantError(f"{where}: time index not strictly increasing")
        prev_next = seg.next_offset
    if log.log_end_offset != segs[-1].next_offset:
        raise LogInvariantError(
            f"{log.dir}: log end offset {log.log_end_offset} != active segment end "
            f"{segs[-1].next_offset}")
    if not segs[0].base_offset <= log.log_start_offset <= log.log_end_offset:
        raise LogInvariantError(f"{log.dir}: log start offset {log.log_start_offset} out of range")
    if log.recovery_point > log.log_end_offset:
        raise LogInvariantError(f"{log.dir}: recovery point {log.recovery_point} > LEO")
