"""The scrubber: a rate-limited background CRC check of every closed segment.

Recovery revalidates only what a crash may have torn (from the recovery point on); a bit
flip in an older segment would otherwise stay until a consumer trips over it.  The
scrubber walks the logs in name order and, in each, the *closed* segments (the active
one is still written; recovery covers its tail) from the oldest, checking every batch as
recovery does (:func:`storage.records.scan.scan_segment`: length, magic, CRC-32C,
offsets in order).  Each :meth:`LogScrubber.step` reads at most ``step_bytes``; a caller
that runs one step every ``interval_ms`` scrubs at ``step_bytes / interval_ms`` (the
broker's ``log_scrub_bytes_per_second``).  When every log has been walked, the next
round starts ``round_pause_ms`` later (the broker's ``log_scrub_round_pause_ms``, an
hour by default: a healthy broker does not spend its CPU re-reading the same bytes).

Findings are :class:`DamagedRange` values: the partition, the segment, the byte position
and the base offset of the first bad batch (the records from there to the segment's end
cannot be trusted), the reason, and when.  The scrubber logs each one (ERROR) and keeps
them (:attr:`LogScrubber.findings`, at most :data:`MAX_KEPT_FINDINGS`); a range found
again on a later round is returned again but logged once (:meth:`forget_findings` drops
a segment's findings once it is repaired).  What to do about one is the owner's business
(a broker rewrites that segment from another replica's copy:
:mod:`storage.segment_repair`).
A segment that changed under the scrubber (compacted, deleted, truncated) is skipped.

Transaction indexes: when a closed segment has been read to its end without damage, its
``.txnindex`` is checked too.  A damaged file
(:meth:`~storage.index.txn_index.TxnIndex.sanity_check`) is rewritten; so is one whose
entries differ from what the segment's batches give, which the scrubber knows when it
has read the log from its first segment on in this round: it feeds every transactional
batch it reads to a :class:`~storage.log.txn_rebuild.TxnTracker` (open transactions
carried from segment to segment, no extra reads).  That is how a file lost from a
segment recovery did not rescan is found.  A rewrite takes the tracker's entries, or,
for a damaged file met without that history (the round started mid-log), a rebuild
from the log (:func:`storage.log.txn_rebuild.rebuild_txn_indexes`: the batch headers
from the log's first segment up to this one, in this step); each is logged (WARNING)
and counted (:attr:`LogScrubber.txn_indexes_rebuilt`).

Progress is kept in ``scrubber-checkpoint`` (version line, count line, then ``topic
partition segment_base position`` lines, written atomically) so a restart goes on where
the last run stopped instead of starting every log again (the log manager's clean
shutdown writes no position when this run found damage, so the next run starts over and
finds a range that may still be unrepaired within a round, not a round pause later).

Costs: ``step_bytes`` of ``pread`` plus one CRC pass per step; O(logs) to pick the next
log.  Thread-safety: none (the broker's main loop runs it between other work, as it
does the cleaner).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from clients.protocol.topics import TopicPartition
from storage.errors import CorruptIndexError
from storage.file_io import atomic_write_text
from storage.log.log import Log
from storage.log.txn_rebuild import TxnTracker, rebuild_txn_indexes
from storage.records.scan import scan_segment
from storage.segment import Segment

__all__ = ["SCRUBBER_CHECKPOINT", "DamagedRange", "LogScrubber"]

log = logging.getLogger(__name__)

SCRUBBER_CHECKPOINT = "scrubber-checkpoint"
_VERSION = "0"
_HEADER_BYTES = 61  # a batch header: the least a scan step reads
_POSITION = re.compile(r"position (\d+)")  # the scan's positions are the chunk's
MAX_KEPT_FINDINGS = 1000  # distinct damaged ranges remembered (and logged once each)


@dataclass(frozen=True)
class DamagedRange:
    """A closed segment whose batches cannot be trusted from ``position`` on."""

    topic: str
    partition: int
    segment_base_offset: int
    position: int
    first_bad_offset: int  # the bad batch's base offset (the segment's first offset
    #                        past the last good batch when the header itself is bad)
    reason: str
    found_at_ms: int


class LogScrubber:
    """Walks closed segments and CRC-checks them, ``step_bytes`` per :meth:`step`."""

    def __init__(self, checkpoint_path: Path, step_bytes: int, round_pause_ms: int = 0
                 ) -> None:
        if step_bytes < _HEADER_BYTES:
            raise ValueError(f"step_bytes must be >= {_HEADER_BYTES}, got {step_bytes}")
        self.checkpoint_path = checkpoint_path
        self.step_bytes = step_bytes
        self.round_pause_ms = round_pause_ms
        self._next_round_ms = 0  # no step before this (the pause after a round)
        # where the walk is: the log, the segment (base offset) and the byte position
        self.cursor: tuple[TopicPartition, int, int] | None = None
        self.findings: list[DamagedRange] = []
        self.rounds_completed = 0
        self.bytes_checked = 0
        self._reported: set[tuple[TopicPartition, int, int]] = set()
        self.txn_indexes_rebuilt = 0
        # transactional batches of the segment being read; the open transactions of the
        # log read so far and the segment they lead into (None: not read from its start)
        self._events: list[tuple[int, int, int]] = []
        self._txn: tuple[TopicPartition, int, TxnTracker] | None = None

    # -- progress --------------------------------------------------------------------

    def load_checkpoint(self) -> None:
        """Resume from the checkpoint (a missing or damaged one starts a new round)."""
        try:
            lines = self.checkpoint_path.read_text().splitlines()
            if lines[:2] != [_VERSION, "1"]:
                raise ValueError("unexpected header")
            topic, partition, base, position = lines[2].rsplit(" ", 3)
            self.cursor = (TopicPartition(topic, int(partition)), int(base), int(position))
        except FileNotFoundError:
            self.cursor = None
        except (OSError, ValueError, IndexError) as exc:
            log.warning("%s unreadable (%s): scrubbing from the start", self.checkpoint_path,
                        exc)
            self.cursor = None

    def write_checkpoint(self) -> None:
        if self.cursor is None:
            text = f"{_VERSION}\n0\n"
        else:
            tp, base, position = self.cursor
            text = f"{_VERSION}\n1\n{tp.topic} {tp.partition} {base} {position}\n"
        atomic_write_text(self.checkpoint_path, text)

    def forget_findings(self, tp: TopicPartition, segment_base_offset: int) -> None:
        """The segment was repaired: drop its findings (damage found there again later
        is new, and logged)."""
        self.findings = [f for f in self.findings
                         if (f.topic, f.partition, f.segment_base_offset)
                         != (tp.topic, tp.partition, segment_base_offset)]
        self._reported = {r for r in self._reported if r[:2] != (tp, segment_base_offset)}

    # -- the walk --------------------------------------------------------------------

    def step(self, logs: Mapping[TopicPartition, Log], now_ms: int) -> list[DamagedRange]:
        """Check up to ``step_bytes`` of closed segments; returns new findings."""
        if now_ms < self._next_round_ms:
            return []
        budget = self.step_bytes
        found: list[DamagedRange] = []
        visited = 0
        while budget >= _HEADER_BYTES and logs and visited <= len(logs):
            target = self._current(logs)
            if target is None:
                visited += 1
                if self._advance_log(logs):
                    self._next_round_ms = now_ms + self.round_pause_ms
                    break  # a round ends with its step: the next one starts afresh
                continue
            tp, segment, position = target
            if position == 0:
                self._events = []
                if segment is logs[tp].segments[0]:
                    self._txn = (tp, segment.base_offset, TxnTracker())
            used, finding = self._check(tp, segment, position, budget, now_ms)
            if finding is not None:
                self._txn = None
            elif position + used >= segment.size:
                self._check_txn_index(tp, logs[tp], segment)
            budget -= max(used, 1)
            self.bytes_checked += used
            if finding is not None:
                found.append(finding)
            if finding is not None or position + used >= segment.size:
                self.cursor = (tp, segment.base_offset + 1, 0)  # the next closed one, if any
            else:
                self.cursor = (tp, segment.base_offset, position + used)
        for f in found:
            key = (TopicPartition(f.topic, f.partition), f.segment_base_offset, f.position)
            if key in self._reported:
                continue  # found again on a later round: still returned, logged once
            log.error("scrubber: %s-%d segment %d: %s (byte %d: offsets from %d on cannot "
                      "be trusted)", f.topic, f.partition, f.segment_base_offset, f.reason,
                      f.position, f.first_bad_offset)
            if len(self._reported) < MAX_KEPT_FINDINGS:
                self._reported.add(key)
                self.findings.append(f)
        return found

    def _current(self, logs: Mapping[TopicPartition, Log]
                 ) -> tuple[TopicPartition, Segment, int] | None:
        """The segment and position to check next (None: this log has nothing left)."""
        if self.cursor is None:
            first = min(logs)
            self.cursor = (first, -1, 0)
        tp, base, position = self.cursor
        log_ = logs.get(tp)
        if log_ is None:
            return None
        for segment in log_.segments[:-1]:  # closed ones only
            if segment.base_offset == base:
                return tp, segment, position
            if segment.base_offset > base:
                return tp, segment, 0  # the one we were in is gone (cleaned, deleted)
        return None

    def _advance_log(self, logs: Mapping[TopicPartition, Log]) -> bool:
        """Move to the next log; True when that ended a round."""
        assert self.cursor is not None
        later = sorted(k for k in logs if k > self.cursor[0])
        if later:
            self.cursor = (later[0], -1, 0)
            return False
        self.rounds_completed += 1
        self.cursor = (min(logs), -1, 0)
        return True

    def _check(self, tp: TopicPartition, segment: Segment, position: int, budget: int,
               now_ms: int) -> tuple[int, DamagedRange | None]:
        """Scan ``segment`` from ``position`` (whole batches within ``budget`` bytes, at
        least one); returns (bytes consumed, a finding)."""
        end = segment.size
        want = min(end - position, max(budget, _HEADER_BYTES))
        try:
            data = os.pread(segment.fd, want, position)
        except OSError as exc:  # closed or deleted meanwhile: the log moved on
            log.debug("scrubber: %s changed under it (%s)", segment.log_path, exc)
            return end - position, None
        scan = scan_segment(data, segment.base_offset, min_offset=segment.base_offset,
                            index_interval_bytes=1 << 30, max_offset_entries=1,
                            max_time_entries=1)
        self._events += scan.txn_events
        if scan.error is None or (scan.error.startswith("torn")
                                  and position + len(data) < end):
            if scan.valid_bytes == 0 and position + len(data) < end:
                # one batch larger than the budget: read it whole this time
                return self._check(tp, segment, position, self._batch_length(data), now_ms)
            return scan.valid_bytes, None
        bad_position = position + scan.valid_bytes
        first_bad = int.from_bytes(data[scan.valid_bytes:scan.valid_bytes + 8], "big") \
            if len(data) - scan.valid_bytes >= 8 else scan.next_offset
        if not segment.base_offset <= first_bad < segment.next_offset:
            first_bad = scan.next_offset if scan.batches else segment.base_offset
        reason = _POSITION.sub(lambda m: f"position {int(m.group(1)) + position}", scan.error)
        return end - position, DamagedRange(tp.topic, tp.partition, segment.base_offset,
                                            bad_position, first_bad, reason, now_ms)

    def _check_txn_index(self, tp: TopicPartition, log_: Log, segment: Segment) -> None:
        """``segment`` was read to its end: its ``.txnindex`` against its batches."""
        closed = log_.segments[:-1]
        if segment.fd < 0 or not any(s is segment for s in closed):
            self._txn = None  # it changed under the scrubber
            return
        expected = None
        if self._txn is not None and self._txn[:2] == (tp, segment.base_offset):
            tracker = self._txn[2]
            expected = tracker.entries(self._events)
            later = [s.base_offset for s in closed if s.base_offset > segment.base_offset]
            self._txn = (tp, later[0], tracker) if later else None
        index = segment.txn_index
        try:
            index.sanity_check()
            if expected is None or index.entries == expected:
                return
            why = (f"{len(index.entries)} entries, the batches give {len(expected)} "
                   "(or different ones)")
        except CorruptIndexError as exc:
            why = str(exc)
        if expected is not None:
            index.replace_entries(expected)
        else:
            rebuild_txn_indexes(log_.segments, {segment.base_offset})
        log.warning("scrubber: %s: %s; rewritten from the log", index.path, why)
        self.txn_indexes_rebuilt += 1

    @staticmethod
    def _batch_length(data: bytes) -> int:
        """Bytes of the batch at the start of ``data`` (from its length field)."""
        return 12 + max(0, int.from_bytes(data[8:12], "big", signed=True))
