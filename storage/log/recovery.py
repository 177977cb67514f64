"""Log recovery at open: load the segments of a directory and make them consistent.

:func:`load_segments` is the open-time procedure (clean sanity checks or unclean rescan,
truncation of a torn/corrupt tail, the :class:`RecoveryReport`);
:func:`finish_interrupted_swaps` completes or rolls back a cleaner swap cut short by a
crash.  The batch rules a rescan applies (shared with append validation) are in
:mod:`storage.log.validator`, the log's structural check in :mod:`storage.log.invariants`.

Holes at a boundary.  A power cut keeps whatever pages the kernel happened to write: a
rolled segment's unflushed tail can vanish at a batch boundary while the next segment's
first batches survive, and every batch left still has a valid CRC.  Rescanned segments
(those above the recovery point) must therefore end exactly where the next one starts.
That rule holds for every log the broker writes: a roll starts the new segment at the
log end offset even when a follower's batch starts above it (a compacted leader's gap
then lies inside the new segment), and the cleaner ends each cleaned segment with its
inputs' last batch (an empty header if its records went), so it ends where they did.
Two cases it misreads as a lost tail, both cut and fetched again (the later segments
quarantined, never deleted): a compacted gap wider than 2**31 offsets at a roll, and a
boundary with a gap written by older code above the recovery point.

Costs: O(files) to list the directory; a clean open is O(index bytes) per segment; an
unclean one rescans (CRC + header walk) every byte from the segment holding the recovery
point.  :func:`load_segments` mutates the files of one directory and must be its only
user (one thread per directory).
"""

from __future__ import annotations

import bisect
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from storage.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    CorruptCheckpointError,
    LeaderEpochCheckpointFile,
)
from storage.errors import CorruptIndexError
from storage.file_io import fsync_dir
from storage.log.validator import SegmentScan, scan_segment
from storage.segment import Segment, segment_file

__all__ = ["RecoveryReport", "finish_interrupted_swaps", "load_segments"]


@dataclass
class RecoveryReport:
    """What :meth:`storage.log.log.Log.open` did to make the log consistent."""

    had_clean_shutdown: bool
    segments_loaded: int = 0
    segments_rescanned: int = 0
    bytes_rescanned: int = 0
    indexes_rebuilt: int = 0  # segments whose .index/.timeindex were rebuilt
    truncated_bytes: int = 0
    truncated_at_offset: int | None = None  # log end offset after a truncation
    segments_deleted: int = 0  # whole segments moved out of the log after a corrupt point
    quarantine: Path | None = None  # where they went (kept for an operator, not served)
    problems: list[str] = field(default_factory=list)

SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
STRAY_SUFFIXES = (".deleted", ".cleaned", ".swap")
QUARANTINE_PREFIX = "quarantine-"
INDEX_SUFFIXES = (".index", ".timeindex")


def load_segments(
    directory: Path,
    *,
    recovery_point: int,
    had_clean_shutdown: bool,
    open_segment: Callable[[int], Segment],
) -> tuple[list[Segment], RecoveryReport]:
    """Open every segment of ``directory``; rescan from the recovery point if unclean.

    After a clean shutdown each segment gets a cheap sanity check (index sizes, monotonic
    entries, last entry on a real batch header); a failure rebuilds that segment's
    indexes by a CRC rescan.  After an unclean shutdown every segment from the one holding
    ``recovery_point`` onwards is rescanned.  The first torn or corrupt batch truncates its
    segment there, and so does a rescanned segment whose batches end below the next
    segment's base offset (see "Holes at a boundary" below); every later segment leaves
    the log (a log cannot have a hole) but is
    not deleted: its files move to ``quarantine-<ms>/`` in the log directory, intact, for
    an operator (a replica fetches the range again from its leader; the report's
    ``quarantine`` names the directory).  An interrupted cleaner swap is completed or
    rolled back first (:func:`finish_interrupted_swaps`); indexes without a ``.log`` are
    removed.
    """
    report = RecoveryReport(had_clean_shutdown=had_clean_shutdown)
    finish_interrupted_swaps(directory, report)
    bases: list[int] = []
    names: set[str] = set()
    for entry in os.scandir(directory):
        if entry.name.endswith(STRAY_SUFFIXES):
            os.unlink(entry.path)
            report.problems.append(f"removed stray file {entry.name}")
            continue
        names.add(entry.name)
        match = SEGMENT_NAME.match(entry.name)
        if match:
            bases.append(int(match.group(1)))
    bases.sort()
    for name in names:
        stem, dot, suffix = name.partition(".")
        if dot and "." + suffix in INDEX_SUFFIXES and stem + ".log" not in names:
            os.unlink(directory / name)
            report.problems.append(f"removed index {name} without a .log")
    segments = [open_segment(base) for base in bases]
    report.segments_loaded = len(segments)
    first_rescan = len(segments)
    epochs: list[tuple[int, int]] = []
    if not had_clean_shutdown:
        first_rescan = max(0, bisect.bisect_right(bases, recovery_point) - 1)
        epochs = _checkpointed_epochs(directory, report)
    prev_next: int | None = None
    for i, seg in enumerate(segments):
        min_offset = seg.base_offset if prev_next is None else max(seg.base_offset, prev_next)
        scan: SegmentScan | None = None
        following = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if i >= first_rescan:
            scan = _rescan(seg, min_offset, report, strict_from=recovery_point, epochs=epochs,
                           next_segment_offset=following)
        else:
            try:
                seg.load_clean()
            except CorruptIndexError as exc:
                report.problems.append(f"rebuilding indexes: {exc}")
                scan = _rescan(seg, min_offset, report, next_segment_offset=following)
        if (scan is not None and scan.error is None and i >= first_rescan
                and following is not None and seg.next_offset < following):
            scan.error = (f"its batches end at offset {seg.next_offset}, the next segment "
                          f"starts at {following}: an unflushed tail was lost")
        if scan is not None and scan.error is not None:
            report.problems.append(f"{seg.log_path}: {scan.error}; truncated")
            report.truncated_at_offset = seg.next_offset
            if segments[i + 1:]:
                _quarantine(directory, segments[i + 1:], report)
            del segments[i + 1:]
            break
        prev_next = seg.next_offset
    return segments, report


def _quarantine(directory: Path, later: list[Segment], report: RecoveryReport) -> None:
    """Move ``later`` (closed first) out of the log into ``quarantine-<ms>/``."""
    target = directory / f"{QUARANTINE_PREFIX}{int(time.time() * 1000)}"
    target.mkdir(exist_ok=True)
    for seg in later:
        report.truncated_bytes += seg.size
        report.segments_deleted += 1
        seg.close()
        for suffix in (".log", *INDEX_SUFFIXES):
            path = segment_file(directory, seg.base_offset, suffix)
            if path.exists():
                os.rename(path, target / path.name)
    fsync_dir(target)
    fsync_dir(directory)
    report.quarantine = target
    report.problems.append(f"{len(later)} later segment(s) moved, intact, to {target.name} "
                           "(not served; remove them once the replica has them again)")


SWAP_LOG = re.compile(r"^(\d{20})\.log\.swap$")
SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")


def finish_interrupted_swaps(directory: Path, report: RecoveryReport) -> None:
    """Complete or roll back a cleaner swap cut short by a crash.

    The protocol (S0-S4) is in :mod:`storage.cleaner`.  ``.cleaned`` files (no commit
    yet) and ``.deleted`` files (old files of a committed swap) are removed.  Each
    ``B.log.swap`` is committed: every segment file (``.log``, ``.index``, ``.timeindex``)
    with a base offset in ``[B, end of the swap file)`` is removed - the old segments it
    replaces and its own half-renamed indexes, rebuilt on load - and it becomes
    ``B.log``.  Any other ``.swap`` file is an index of an uncommitted swap: removed.
    Cost: O(files) + a CRC scan of each swap file (only after a crash mid-swap).
    """
    changed = False
    for entry in list(os.scandir(directory)):
        if entry.name.endswith((".cleaned", ".deleted")):
            os.unlink(entry.path)
            report.problems.append(f"removed {entry.name} (interrupted cleaner swap)")
            changed = True
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        match = SWAP_LOG.match(entry.name)
        if match is None:
            continue
        base = int(match.group(1))
        with open(entry.path, "rb") as f:
            data = f.read()
        end = scan_segment(data, base, min_offset=base, index_interval_bytes=1 << 30,
                           max_offset_entries=1, max_time_entries=1).next_offset
        for other in os.scandir(directory):
            seg = SEGMENT_FILE.match(other.name)
            if seg is not None and base <= int(seg.group(1)) < max(end, base + 1):
                os.unlink(other.path)
        os.rename(entry.path, segment_file(directory, base, ".log"))
        report.problems.append(f"completed the interrupted cleaner swap of {entry.name} "
                               f"(offsets [{base}, {end}))")
        changed = True
    for entry in list(os.scandir(directory)):
        if entry.name.endswith(".swap"):
            os.unlink(entry.path)
            report.problems.append(f"removed {entry.name} (uncommitted cleaner swap)")
            changed = True
    if changed:
        fsync_dir(directory)


def _checkpointed_epochs(directory: Path, report: RecoveryReport) -> list[tuple[int, int]]:
    """The leader-epoch checkpoint's entries (none if missing or unreadable: then the
    epochs of unflushed batches go unchecked)."""
    try:
        return LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT).read()
    except CorruptCheckpointError as exc:
        report.problems.append(f"not checking leader epochs: {exc}")
        return []


def _rescan(seg: Segment, min_offset: int, report: RecoveryReport, *,
            next_segment_offset: int | None, strict_from: int | None = None,
            epochs: list[tuple[int, int]] | None = None) -> SegmentScan:
    """Rescan ``seg`` (the header checks: :func:`~storage.log.validator.scan_segment`)."""
    before = seg.size
    scan = seg.recover(min_offset, strict_from=strict_from, epochs=epochs or (),
                       next_segment_offset=next_segment_offset)
    report.segments_rescanned += 1
    report.bytes_rescanned += before
    report.indexes_rebuilt += 1
    report.truncated_bytes += before - seg.size
    return scan
