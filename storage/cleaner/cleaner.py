"""Log compaction for compacted topics: :class:`LogCleaner`.

A log is the cleaner's when "compact" is in its ``cleanup_policy``
(:attr:`~storage.config.LogConfig.compact`: ``compact``, or ``compact,delete`` whose time
and size retention deletes old segments meanwhile; a pass whose segments retention
deleted is aborted, see below, and the next pass starts from the new log start).

A pass over one log (Kafka's algorithm, cut into bounded steps)
--------------------------------------------------------------
The *cleanable* range of a log is ``[log_start, end)``, ``end`` being the base offset of
the active segment (never touched) or of the first segment holding a record younger than
``min_compaction_lag_ms``, or of the segment holding the bound the broker passes (the
partition's last stable offset: Kafka's; below it every transaction has ended, so the
cleaner knows which aborted; a caller passing no bound vouches that no transaction is
open in the log).  The *first dirty offset* (``cleaner-offset-checkpoint``) splits
it into a clean head (compacted before) and a dirty tail.  A log is chosen when its dirty
bytes / cleanable bytes reach ``min_cleanable_dirty_ratio`` (the filthiest first), or
when a delete horizon it is waiting for has passed.

1. **Map**: the dirty tail is read batch by batch into an
   :class:`~storage.cleaner.offset_map.OffsetMap` (key -> latest offset) until the map's memory
   budget would be exceeded; ``map_end`` is the end of the last batch that fit.
2. **Clean**: every segment with base offset < ``map_end`` is rewritten, consecutive
   segments grouped into one output (inputs sum to <= ``segment_bytes``, index entries
   and relative offsets fit one segment).  In each batch below ``map_end`` a record goes
   when a later offset holds its key, when it has no key (as Kafka's cleaner does; the
   broker should refuse such a produce to a compacted topic with INVALID_RECORD, 87), or
   when it is a tombstone whose batch's delete horizon has passed
   (:mod:`storage.cleaner.batch_filter` has the byte-level rules), or when it belongs
   to an aborted transaction; a transaction marker goes after its delete horizon once no
   data of its transaction is left (:mod:`storage.cleaner.txn_filter`).  Batches at or
   above ``map_end`` are copied as they are.
3. **Swap** each finished group in (:mod:`storage.cleaner.swap`: ``.cleaned`` ->
   ``.swap`` -> final name, old files via ``.deleted``; ``Log.open`` completes or rolls
   back an interrupted swap), then checkpoint ``first dirty = map_end``.

Guarantees and choices:

* Offsets never change: a kept batch keeps base offset, ``last_offset_delta``, leader
  epoch and producer fields; CRCs are recomputed; the indexes of each new segment are
  built as it is written.  Readers see holes; ``Log.read`` returns the first batch whose
  last offset is >= the fetch offset (Kafka's semantics).
* A batch whose records all go is dropped, except that an empty header (record_count 0)
  stays (a) for an idempotent producer's last batch (known from the dirty range and the
  previous pass over the log), or any emptied batch of a producer whose later batches
  are unknown (a few spare 61-byte headers, never a lost producer state), and (b) for
  the last batch of each group, so a cleaned segment is never empty and ends where its
  inputs ended.  The empty header of a transactional batch or marker has no producer
  (:func:`~storage.cleaner.batch_filter.empty_batch`).
* Tombstones (Kafka's KIP-534 rule): the first pass that keeps a tombstone stamps its
  batch with the delete horizon ``now + delete_retention_ms``; a pass at or after it
  drops the batch's tombstones.  The earliest pending horizon per log is kept in memory
  (after a restart only new dirt triggers a pass, as in Kafka).
* Transactions (Kafka's rules; :mod:`storage.cleaner.txn_filter` follows each walk with
  the aborted transactions of the range from the ``.txnindex`` files): the records of an
  aborted transaction are removed and never put in the offset map (an aborted record
  supersedes nothing); committed transactional records are compacted by key like any
  other.  A marker stays while any batch of its transaction is kept; once none is, the
  pass stamps it with a delete horizon (``now + delete_retention_ms``, as a tombstone's
  batch) and a pass at or after the horizon that still finds no data of it drops it,
  with the ``.txnindex`` entry it ends (:mod:`storage.cleaner.swap` keeps an entry only
  with its marker).  A marker that may be its producer's last batch stays whole (Kafka
  keeps an empty batch there, so the producer's state survives a rebuild from the log):
  the cleaner remembers each producer's last batch offset per log from one pass to the
  next (memory: one int per producer id seen, at most :data:`MAX_PRODUCERS_REMEMBERED`
  per log, else none; lost on restart; a marker of a producer it does not know waits
  for that producer's next write).  A ``.txnindex`` found damaged when a walk reads
  the aborted transactions is rebuilt from the log first (:func:`aborted_transactions`).
* A corrupt batch (CRC, framing) or one with more keys than the whole map holds makes
  the log *uncleanable* until restart (:meth:`LogCleaner.uncleanable` says why); the log
  itself is left as it was.  A truncation, deletion or reopen of the log, or retention
  deleting a segment of the pass (``compact,delete``), under a pass aborts the pass (its
  ``.cleaned`` file is removed).
* Known gap: a truncation below the first dirty offset is not reported to the cleaner,
  so re-appended records there count as clean until a later pass re-reads them (they
  are kept, never lost; only compacted later).

``cleaner-offset-checkpoint`` (data directory): the offset checkpoint format of
:mod:`storage.checkpoint` (``0``, count, ``topic partition first_dirty_offset`` lines).

Costs: a pass reads the dirty tail once for the map and the cleanable range once for the
rewrite: O(bytes) CRC-32C + O(records) Python, and writes the kept bytes.
:meth:`LogCleaner.clean_step` reads at most ``max_bytes`` plus one batch; a step that
finishes a group adds its swap (O(index entries) + a few fsyncs).  Choosing a log is
O(compacted logs x segments).  Memory: the offset map (``dedupe_buffer_bytes``,
accounted) plus one step's input.

Parts: the value types (:class:`~storage.cleaner.config.CleanerConfig`,
:class:`~storage.cleaner.config.CleanerStats`, :class:`~storage.cleaner.config.CleanStepResult`)
are in :mod:`storage.cleaner.config`, a pass's state and the segment grouping in
:mod:`storage.cleaner.clean_pass`; byte-level record rules in
:mod:`storage.cleaner.batch_filter`, the swap in :mod:`storage.cleaner.swap`.

Not thread-safe: one owner (the broker's event loop, through the LogManager) calls every
method, on the thread that owns the logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from crc32c import crc32c

from clients.protocol.errors import CorruptRecordError
from clients.protocol.topics import TopicPartition
from clients.records.batch import ATTRIBUTES_OFFSET, CONTROL_MASK, LOG_OVERHEAD, TRANSACTIONAL_MASK
from storage.checkpoint import OffsetCheckpointFile
from storage.cleaner.batch_filter import BatchFilter, Header, empty_batch, keys_of, read_batches
from storage.cleaner.clean_pass import CleanPass, batch_max_timestamp, group_segments
from storage.cleaner.config import MAX_ERRORS_KEPT, CleanerConfig, CleanerStats, CleanStepResult
from storage.cleaner.offset_map import OffsetMap
from storage.cleaner.swap import CleanedSegmentWriter, SwapHook
from storage.cleaner.txn_filter import TxnFilter
from storage.errors import CorruptIndexError, StorageError
from storage.index.txn_index import AbortedTxn
from storage.log.log import Log, wall_clock_ms
from storage.log.txn_rebuild import rebuild_txn_indexes

__all__ = ["CLEANER_CHECKPOINT", "MAX_PRODUCERS_REMEMBERED", "LogCleaner", "aborted_transactions"]

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
logger = logging.getLogger(__name__)
# producers whose last batch offset the cleaner remembers per log between passes (~100 B
# each); a log with more is not remembered
MAX_PRODUCERS_REMEMBERED = 10_000


class LogCleaner:
    """Compacts the compacted logs it is given, one pass and one bounded step at a time."""

    def __init__(self, config: CleanerConfig | None = None, *,
                 clock_ms: Callable[[], int] = wall_clock_ms,
                 checkpoint_path: str | Path | None = None) -> None:
        self.config = config if config is not None else CleanerConfig()
        self._clock_ms = clock_ms
        self._checkpoint = (OffsetCheckpointFile(checkpoint_path)
                            if checkpoint_path is not None else None)
        self._first_dirty: dict[TopicPartition, int] = {}
        self._pending_horizon: dict[TopicPartition, int] = {}
        # producer id -> base offset of its last batch, as the last pass over the log saw
        self._producer_last: dict[TopicPartition, dict[int, int]] = {}
        self._uncleanable: dict[TopicPartition, str] = {}
        self._map = OffsetMap(self.config.dedupe_buffer_bytes)
        self._pass: CleanPass | None = None
        self.stats = CleanerStats()
        self.swap_hook: SwapHook | None = None  # tests: crash between file operations

    def set_clock(self, clock_ms: Callable[[], int]) -> None:
        """Tests: take time (delete horizons, compaction lag) from an injected clock.
        In a broker it is wall-clock time: horizons are stamped into the batches."""
        self._clock_ms = clock_ms

    # -- checkpoint and bookkeeping ---------------------------------------------------

    def load_checkpoint(self) -> None:
        if self._checkpoint is not None:
            self._first_dirty.update(self._checkpoint.read())

    def write_checkpoint(self) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write(self._first_dirty)

    def first_dirty_offset(self, tp: TopicPartition) -> int | None:
        return self._first_dirty.get(tp)

    def uncleanable(self) -> dict[TopicPartition, str]:
        """Logs the cleaner gave up on (corrupt batch, a batch too big for the map)."""
        return dict(self._uncleanable)

    def forget(self, tp: TopicPartition) -> None:
        """The log is gone (deleted): drop its pass and its state."""
        if self._pass is not None and self._pass.tp == tp:
            self.abort()
        if self._first_dirty.pop(tp, None) is not None:
            self.write_checkpoint()  # a new log of the same name starts all dirty
        self._pending_horizon.pop(tp, None)
        self._producer_last.pop(tp, None)
        self._uncleanable.pop(tp, None)

    def abort_pass_of(self, tp: TopicPartition) -> None:
        """Abandon the pass in progress if it cleans ``tp`` (a segment repair takes the
        log: :mod:`storage.segment_repair`)."""
        if self._pass is not None and self._pass.tp == tp:
            self.abort()

    def abort(self) -> None:
        """Abandon the pass in progress (its ``.cleaned`` files are removed)."""
        p, self._pass = self._pass, None
        if p is not None:
            if p.group is not None:
                p.group.discard()
            self._map.clear()
            self.stats.passes_aborted += 1

    # -- choosing a log ---------------------------------------------------------------

    def cleanable_range(self, tp: TopicPartition, log: Log, high_watermark: int | None = None
                        ) -> tuple[int, int, int, int]:
        """``(first_dirty, end, dirty_bytes, cleanable_bytes)`` of a compacted log; with
        ``high_watermark`` only segments wholly below it are cleanable (Kafka: nothing at
        or above the HW is compacted, so followers and acks=all see every record)."""
        cfg = log.config
        segs = log.segments
        now = self._clock_ms()
        k = len(segs) - 1  # the active segment is never cleaned
        if cfg.min_compaction_lag_ms > 0:
            for i in range(k):
                if segs[i].largest_timestamp > now - cfg.min_compaction_lag_ms:
                    k = i
                    break
        while high_watermark is not None and k > 0 and segs[k].base_offset > high_watermark:
            k -= 1
        end = segs[k].base_offset
        first_dirty = min(max(self._first_dirty.get(tp, 0), log.log_start_offset), end)
        dirty = cleanable = 0
        for seg in segs[:k]:
            cleanable += seg.size
            if seg.next_offset <= first_dirty:
                continue
            batch = seg.find_batch(first_dirty) if seg.base_offset < first_dirty else None
            dirty += seg.size - (batch.position if batch is not None else 0)
        return first_dirty, end, dirty, cleanable

    def _choose(self, logs: Mapping[TopicPartition, Log],
                high_watermarks: Mapping[TopicPartition, int] | None) -> CleanPass | None:
        now = self._clock_ms()
        best: tuple[float, TopicPartition, Log, int, int] | None = None
        for tp, log in logs.items():
            if not log.config.compact or log.closed or tp in self._uncleanable:
                continue
            if any(seg.damage is not None for seg in log.segments):
                continue  # a damaged tail kept by recovery: repaired first (same files)
            if high_watermarks is not None and tp not in high_watermarks:
                continue  # not hosted as a partition: no HW, leave it alone
            first_dirty, end, dirty, cleanable = self.cleanable_range(
                tp, log, None if high_watermarks is None else high_watermarks[tp])
            if cleanable == 0:
                continue
            ratio = dirty / cleanable
            due = self._pending_horizon.get(tp, now + 1) <= now
            if not (dirty and ratio >= log.config.min_cleanable_dirty_ratio) and not due:
                continue
            if best is None or ratio > best[0]:
                best = (ratio, tp, log, first_dirty, end)
        if best is None:
            return None
        _, tp, log, first_dirty, end = best
        self._map.clear()
        segments = [s for s in log.segments if s.base_offset < end]
        p = CleanPass(tp, log, first_dirty, end, segments, self._map, now)
        leo = log.log_end_offset  # (what a truncation cut is forgotten)
        p.producer_last.update((pid, offset) for pid, offset
                               in self._producer_last.get(tp, {}).items() if offset < leo)
        if first_dirty >= end:
            p.map_end = end
        return p

    # -- stepping ---------------------------------------------------------------------

    def clean_step(self, logs: Mapping[TopicPartition, Log], max_bytes: int | None = None,
                   high_watermarks: Mapping[TopicPartition, int] | None = None
                   ) -> CleanStepResult:
        """Do at most ``max_bytes`` (default ``config.step_bytes``) of cleaning work; a
        new pass only cleans below each log's HW when ``high_watermarks`` is given."""
        budget = self.config.step_bytes if max_bytes is None else max_bytes
        if budget <= 0:
            raise ValueError(f"max_bytes must be positive, got {budget}")
        if self._pass is None:
            self._pass = self._choose(logs, high_watermarks)
            if self._pass is None:
                return CleanStepResult(None, 0, False)
        p = self._pass
        read = 0
        try:
            if not self._still_valid(p, logs):
                self.abort()
                return CleanStepResult(p.tp, 0, False)
            while read < budget or read == 0:
                if p.map_end < 0:
                    read += self._map_step(p, budget - read)
                    continue
                if not p.grouped:
                    p.groups = group_segments(p.log.config, [s for s in p.segments
                                                             if s.base_offset < p.map_end])
                    p.grouped = True
                if p.group_i >= len(p.groups):
                    self._finish_pass(p)
                    return CleanStepResult(p.tp, read, True)
                read += self._clean_step(p, budget - read)
        except (CorruptRecordError, StorageError, OSError) as exc:
            self._give_up(p, exc)
        finally:
            self.stats.bytes_read += read
        return CleanStepResult(p.tp, read, False)

    def clean_until_idle(self, logs: Mapping[TopicPartition, Log],
                         max_steps: int = 100_000) -> int:
        """Test hook: step until no log needs cleaning; returns passes completed."""
        done = 0
        for _ in range(max_steps):
            result = self.clean_step(logs)
            done += result.pass_done
            if result.topic_partition is None:
                return done
        raise RuntimeError(f"cleaner still busy after {max_steps} steps")

    def _still_valid(self, p: CleanPass, logs: Mapping[TopicPartition, Log]) -> bool:
        """The pass's segments are still the log's, inactive and unchanged."""
        log = p.log
        if logs.get(p.tp) is not log or log.closed:
            return False
        live = {id(s) for s in log.segments[:-1]}
        segs = [s for group in p.groups[p.group_i:] for s in group] if p.grouped else p.segments
        return all(id(s) in live and s.fd >= 0 for s in segs)

    def _give_up(self, p: CleanPass, exc: BaseException) -> None:
        message = f"{p.tp[0]}-{p.tp[1]}: {exc}"
        self._uncleanable[p.tp] = message
        self.stats.errors = [*self.stats.errors, message][-MAX_ERRORS_KEPT:]
        self.abort()

    # -- phase 1: the offset map --------------------------------------------------------

    def _map_step(self, p: CleanPass, budget: int) -> int:
        segs = p.segments
        if p.map_pos < 0:  # find the first dirty batch
            starts = [i for i, s in enumerate(segs) if s.next_offset > p.first_dirty]
            if not starts:
                p.map_end = p.end
                return 0
            p.map_seg = starts[0]
            batch = segs[p.map_seg].find_batch(p.first_dirty)
            p.map_pos = batch.position if batch is not None else 0
            p.map_txn = TxnFilter(aborted_transactions(p.log, p.first_dirty, p.end))
        seg = segs[p.map_seg]
        data, used, headers = read_batches(seg, p.map_pos, budget)
        txn = p.map_txn
        assert txn is not None
        keys: list[bytes]
        offsets: list[int]
        for rel, h in headers:
            if h[5] & CONTROL_MASK:
                txn.end(h[9], h[0], None)
                keys, offsets = [], []
            elif h[5] & TRANSACTIONAL_MASK and txn.is_aborted(h[9], h[0] + h[6]):
                keys, offsets = [], []  # an aborted record supersedes nothing
            else:
                keys, offsets = keys_of(data, rel, h)
            if not p.offset_map.try_put_batch(keys, offsets):
                if not len(p.offset_map):
                    raise StorageError(
                        f"batch at offset {h[0]} has more keys than the dedupe buffer holds "
                        f"({p.offset_map.capacity_bytes} bytes)")
                p.map_end = h[0]
                return rel
            if h[9] >= 0:
                p.producer_last[h[9]] = h[0]
        p.map_pos += used
        if p.map_pos >= seg.size:
            p.map_seg, p.map_pos = p.map_seg + 1, 0
            if p.map_seg >= len(segs):
                p.map_end = p.end
        return used

    # -- phase 2: cleaning groups --------------------------------------------------------

    def _clean_step(self, p: CleanPass, budget: int) -> int:
        if p.rules is None:
            txn = TxnFilter(aborted_transactions(p.log, p.log.log_start_offset, p.end))
            p.rules = BatchFilter(p.offset_map, p.map_end, p.now_ms,
                                  p.log.config.delete_retention_ms, p.producer_last, txn)
        if p.group is None:
            p.group = CleanedSegmentWriter(p.log, p.groups[p.group_i])
        g, rules = p.group, p.rules
        seg = g.segments[g.seg_i]
        data, used, headers = read_batches(seg, g.position, budget)
        h: Header | None = None
        for rel, h in headers:
            raw = data[rel:rel + h[1] + LOG_OVERHEAD]
            if crc32c(memoryview(raw)[ATTRIBUTES_OFFSET:]) != h[4]:
                raise CorruptRecordError(f"{seg.log_path}: CRC-32C mismatch in the batch at "
                                         f"offset {h[0]} (position {g.position + rel})")
            out = rules.filter(raw, h)
            if out is not raw:
                g.changed = True
            if out is not None:
                g.write(out, h[0], h[8] if out is raw else batch_max_timestamp(out))
                if h[9] >= 0 and p.producer_last.get(h[9], -1) < h[0]:
                    p.producer_last[h[9]] = h[0]
        g.position += used
        if g.position >= seg.size:
            g.seg_i, g.position = g.seg_i + 1, 0
            if g.seg_i >= len(g.segments):
                assert h is not None
                self._finish_group(p, g, h)
        return used

    def _finish_group(self, p: CleanPass, g: CleanedSegmentWriter, last: Header) -> None:
        """End the group with its last input batch, then swap it in (or drop the copy)."""
        if g.last_base != last[0]:
            g.write(empty_batch(last), last[0], last[8])
        if g.changed:
            g.swap_in(self._clock_ms(), self.swap_hook)
            self.stats.bytes_written += g.size
            self.stats.segments_swapped += 1
        else:
            g.discard()
        p.group, p.group_i = None, p.group_i + 1

    def _finish_pass(self, p: CleanPass) -> None:
        rules = p.rules
        self._first_dirty[p.tp] = p.map_end
        self._pending_horizon.pop(p.tp, None)
        if rules is not None:
            stats = self.stats
            stats.records_dropped += rules.records_dropped
            stats.tombstones_dropped += rules.tombstones_dropped
            stats.keyless_dropped += rules.keyless_dropped
            stats.aborted_dropped += rules.aborted_dropped
            stats.markers_dropped += rules.markers_dropped
            if len(p.producer_last) <= MAX_PRODUCERS_REMEMBERED:
                self._producer_last[p.tp] = p.producer_last
            else:  # (their markers then wait for their producers' next writes)
                self._producer_last.pop(p.tp, None)
            if rules.min_horizon is not None:
                self._pending_horizon[p.tp] = rules.min_horizon
        self._pass = None
        self._map.clear()
        self.stats.passes_completed += 1
        self.write_checkpoint()


def aborted_transactions(log: Log, start: int, end: int) -> list[AbortedTxn]:
    """``log.collect_aborted_transactions(start, end)``; a ``.txnindex`` found damaged is
    first rebuilt from the log (:mod:`storage.log.txn_rebuild`, as a swap does), so a
    damaged index never stops compaction nor feeds it wrong entries."""
    try:
        return log.collect_aborted_transactions(start, end)
    except CorruptIndexError:
        damaged = set()
        for seg in log.segments:
            try:
                _ = seg.txn_index.entries
            except CorruptIndexError:
                damaged.add(seg.base_offset)
        rebuild_txn_indexes(log.segments, damaged)
        logger.warning("%s: damaged .txnindex of segment(s) %s rebuilt from the log",
                       log.dir, sorted(damaged))
        return log.collect_aborted_transactions(start, end)
