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

Lost tails and rot are told apart by the recovery point (everything below it was
fsync'd).  Damage at or above it after an unclean stop is a lost or torn tail: the
bytes were never made durable, on this replica or (after a whole-cluster power cut) on
any other, so the log is cut there as Kafka does, and later segments, written after
those bytes and unflushed too, are moved to ``quarantine-<ms>/``.  Damage below it (found
when a segment's index check fails and the segment is rescanned, after a clean stop
too) is rot in bytes that were durable, and another replica almost surely holds an
intact copy: it is kept, not cut (never destroy what is intact).  The segment keeps its
bytes and its offsets up to the next segment's base, with
:attr:`~storage.segment.Segment.damage` set, every later segment stays in the log, and
the report lists the range in :attr:`RecoveryReport.damaged`.  The log's owner marks the
range unserved and repairs the segment in place from another replica
(:mod:`replication.damage`, :mod:`storage.segment_repair`); until then a walk of the
log's batches skips it.  The last (active) segment is always cut at its first bad batch.

A cut is recorded before it is made.  Whoever owns the log must learn that recovery cut
it (a broker reports the cut to the controller, which must not elect this replica while
another may hold the records it lost), and a second open finds nothing left to cut: so
before the first byte is truncated or the first segment moved to quarantine,
:func:`load_segments` writes (and fsyncs) the file :data:`RECOVERY_CUT_MARKER` in the log
directory, and every open while it is there reports ``cut_unacknowledged``, until the
owner has recorded the cut its own way and calls :func:`acknowledge_cut`.  A process
killed between the cut and the owner's record loses nothing of it (issue 30, item 11:
without the marker, a broker killed during its startup, after its recovery had cut its
replica and before it had saved its own mark, came back with a log that recovered
clean, reported no cut and led).

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
from storage.file_io import fsync_dir, write_file_fsynced
from storage.log.txn_rebuild import check_txn_indexes
from storage.records.scan import SegmentScan, scan_segment
from storage.segment import DAMAGE_MARK_SUFFIX, Segment, segment_file

__all__ = ["RECOVERY_CUT_MARKER", "RecoveryReport", "acknowledge_cut",
           "finish_interrupted_swaps", "load_segments"]

RECOVERY_CUT_MARKER = "recovery-cut"  # in a log directory: a cut not yet acknowledged


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
    segments_deleted: int = 0  # whole segments moved out of the log after a cut
    quarantine: Path | None = None  # where they went (kept for an operator, not served)
    # damaged ranges kept in closed segments: (segment base, byte position, first bad
    # offset, end offset = the next segment's base), to be repaired from another replica
    damaged: list[tuple[int, int, int, int]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # this open or an earlier one cut the log and its owner has not acknowledged it
    # (:data:`RECOVERY_CUT_MARKER`, :func:`acknowledge_cut`)
    cut_unacknowledged: bool = False

    @property
    def intact_end_offset(self) -> int | None:
        """Where the log's intact prefix ends when recovery kept damage (else None)."""
        return min(d[2] for d in self.damaged) if self.damaged else None

SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
STRAY_SUFFIXES = (".deleted", ".cleaned", ".swap")
QUARANTINE_PREFIX = "quarantine-"
DURABLE = 2**63 - 1  # ``keep_damaged_below`` for segments whose every byte was fsync'd
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")
SIDE_FILE_SUFFIXES = (*INDEX_SUFFIXES, DAMAGE_MARK_SUFFIX)  # removed without their .log


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
    ``recovery_point`` onwards is rescanned.  A torn or corrupt batch at or above the
    recovery point truncates its segment there, and so does a rescanned segment whose
    batches end below the next segment's base offset (see "Holes at a boundary" above);
    every later segment leaves the log but is not deleted: its files move to
    ``quarantine-<ms>/`` in the log directory, intact, for an operator (the report's
    ``quarantine`` names it).  A corrupt batch below the recovery point in a segment that
    is not the last is kept as damage (see "Lost tails and rot" above) and the loading
    goes on.  An interrupted cleaner swap is completed or rolled back first
    (:func:`finish_interrupted_swaps`); indexes without a ``.log`` are removed.  Last,
    the transaction indexes are checked against what recovery left (damaged ones and
    rescanned segments missing entries are rebuilt, entries past a segment's end
    dropped: :func:`storage.log.txn_rebuild.check_txn_indexes`).
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
        if dot and "." + suffix in SIDE_FILE_SUFFIXES and stem + ".log" not in names:
            os.unlink(directory / name)
            report.problems.append(f"removed {name} without a .log")
    marked = {base for base in bases
              if segment_file(directory, base, DAMAGE_MARK_SUFFIX).name in names}
    report.cut_unacknowledged = RECOVERY_CUT_MARKER in names

    def record_cut() -> None:
        """Before the first byte is cut: the marker, durable (see "A cut is recorded")."""
        if not report.cut_unacknowledged:
            write_file_fsynced(directory / RECOVERY_CUT_MARKER, b"")
            fsync_dir(directory)
            report.cut_unacknowledged = True

    segments = [open_segment(base) for base in bases]
    report.segments_loaded = len(segments)
    first_rescan = len(segments)
    epochs: list[tuple[int, int]] = []
    if not had_clean_shutdown:
        first_rescan = max(0, bisect.bisect_right(bases, recovery_point) - 1)
        epochs = _checkpointed_epochs(directory, report)
    prev_next: int | None = None
    events: dict[int, list[tuple[int, int, int]]] = {}  # rescanned: transactional batches
    for i, seg in enumerate(segments):
        min_offset = seg.base_offset if prev_next is None else max(seg.base_offset, prev_next)
        scan: SegmentScan | None = None
        following = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if i >= first_rescan:
            scan = _rescan(seg, min_offset, report, strict_from=recovery_point, epochs=epochs,
                           next_segment_offset=following, keep_damaged_below=recovery_point,
                           before_cut=record_cut)
        elif seg.base_offset in marked:
            report.problems.append(f"{seg.log_path}: marked damaged before the last stop; "
                                   "rescanned")
            scan = _rescan(seg, min_offset, report, next_segment_offset=following,
                           keep_damaged_below=DURABLE, before_cut=record_cut)
        else:
            try:
                seg.load_clean()
            except CorruptIndexError as exc:
                report.problems.append(f"rebuilding indexes: {exc}")
                scan = _rescan(seg, min_offset, report, next_segment_offset=following,
                               keep_damaged_below=DURABLE, before_cut=record_cut)
        if (scan is not None and scan.error is None and i >= first_rescan
                and following is not None and seg.next_offset < following):
            scan.error = (f"its batches end at offset {seg.next_offset}, the next segment "
                          f"starts at {following}: an unflushed tail was lost")
        if scan is not None:
            events[seg.base_offset] = scan.txn_events
        if seg.base_offset in marked or seg.damage is not None:
            _keep_damage_mark(seg, report)
        if scan is not None and scan.error is not None:
            if seg.damage is not None and following is not None:
                position, first_bad = seg.damage
                report.damaged.append((seg.base_offset, position, first_bad, following))
                report.problems.append(
                    f"{seg.log_path}: {scan.error}; offsets [{first_bad}, {following}) from "
                    f"byte {position} were durable and are damaged: kept with every later "
                    "segment, to be repaired from another replica")
            else:
                report.problems.append(f"{seg.log_path}: {scan.error}; truncated")
                report.truncated_at_offset = seg.next_offset
                if segments[i + 1:]:
                    record_cut()
                    _quarantine(directory, segments[i + 1:], report)
                del segments[i + 1:]
                break
        prev_next = seg.next_offset
    report.problems += check_txn_indexes(segments, events)
    return segments, report


def acknowledge_cut(directory: Path) -> None:
    """The log's owner has recorded the cut its recovery made: the marker goes (were the
    removal lost, the next open would report the cut again, which errs on the safe side)."""
    marker = directory / RECOVERY_CUT_MARKER
    if marker.exists():
        marker.unlink()
        fsync_dir(directory)


def _keep_damage_mark(seg: Segment, report: RecoveryReport) -> None:
    """Make ``seg``'s damage mark say what recovery found: damage kept in place is marked
    (a later restart's clean load would not find it again), a mark whose segment now
    rescans intact (or was cut at the damage) is removed."""
    if seg.damage is not None:
        seg.write_damage_mark(*seg.damage)
    elif seg.damage_mark_path.exists():
        seg.clear_damage_mark()
        report.problems.append(f"{seg.damage_mark_path.name}: no damage left in the "
                               "segment; mark removed")


def _quarantine(directory: Path, later: list[Segment], report: RecoveryReport) -> None:
    """Move ``later`` (closed first) out of the log into ``quarantine-<ms>/``."""
    target = directory / f"{QUARANTINE_PREFIX}{int(time.time() * 1000)}"
    target.mkdir(exist_ok=True)
    for seg in later:
        report.truncated_bytes += seg.size
        report.segments_deleted += 1
        seg.close()
        for suffix in (".log", *SIDE_FILE_SUFFIXES):
            path = segment_file(directory, seg.base_offset, suffix)
            if path.exists():
                os.rename(path, target / path.name)
    fsync_dir(target)
    fsync_dir(directory)
    report.quarantine = target
    report.problems.append(f"{len(later)} later segment(s) moved, intact, to {target.name} "
                           "(not served; remove them once the replica has them again)")


SWAP_LOG = re.compile(r"^(\d{20})\.log\.swap$")
SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")


def finish_interrupted_swaps(directory: Path, report: RecoveryReport) -> None:
    """Complete or roll back a cleaner swap cut short by a crash.

    The protocol (S0-S4) is in :mod:`storage.cleaner`.  ``.cleaned`` files (no commit
    yet) and ``.deleted`` files (old files of a committed swap) are removed.  Each
    ``B.log.swap`` is committed: every segment file (``.log``, ``.index``, ``.timeindex``,
    ``.txnindex``) with a base offset in ``[B, end of the swap file)`` is removed - the
    old segments it replaces and its own half-renamed indexes, rebuilt on load (the
    ``.txnindex`` from the log, as its rescan finds ABORT markers without entries) -
    and it becomes ``B.log``.  Any other ``.swap`` file is an index of an uncommitted swap: removed.
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
            next_segment_offset: int | None, keep_damaged_below: int,
            before_cut: Callable[[], None], strict_from: int | None = None,
            epochs: list[tuple[int, int]] | None = None) -> SegmentScan:
    """Rescan ``seg`` (the header checks: :func:`~storage.records.scan.scan_segment`);
    damage starting below ``keep_damaged_below`` is kept (see "Lost tails and rot")."""
    before = seg.size
    scan = seg.recover(min_offset, strict_from=strict_from, epochs=epochs or (),
                       next_segment_offset=next_segment_offset,
                       keep_damaged_below=keep_damaged_below, before_cut=before_cut)
    report.segments_rescanned += 1
    report.bytes_rescanned += before
    report.indexes_rebuilt += 1
    report.truncated_bytes += before - seg.size
    return scan
