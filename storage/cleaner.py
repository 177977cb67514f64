"""Log compaction for compacted topics (``cleanup_policy="compact"``): :class:`LogCleaner`.

What a pass does (Kafka's algorithm, in bounded steps)
------------------------------------------------------
The *cleanable* range of a log is ``[log_start, end)`` where ``end`` is the base offset
of the active segment, or of the first segment holding a record younger than
``min_compaction_lag_ms``.  It splits at the *first dirty offset* (from the
``cleaner-offset-checkpoint``) into a clean head (compacted before) and a dirty tail.

1. **Map**: scan the dirty tail batch by batch into an :class:`~storage.offset_map.OffsetMap`
   (key -> latest offset) until the map's memory budget is reached; ``map_end`` is the
   end of the last batch that fit (a batch boundary).
2. **Clean**: rewrite every segment with base offset < ``map_end``, consecutive small
   segments grouped into one output segment (inputs sum to <= ``segment_bytes``, index
   entries and relative offsets fit).  For each batch below ``map_end`` a record is
   dropped when a later offset holds its key (``map[key] > offset``), when it has no key
   (Kafka's cleaner does the same; the broker should refuse such a produce to a compacted
   topic with INVALID_RECORD, code 87), or when it is a tombstone (null value) whose
   batch's delete horizon has passed.  Batches at or above ``map_end`` and control
   batches are copied as they are.
3. **Swap** each finished group in (protocol below), then checkpoint
   ``first dirty = map_end``.

Offsets never change: a batch keeps its base offset, ``last_offset_delta``, leader epoch
and producer fields; only ``record_count``, ``batch_length``, ``max_timestamp`` (max of the
kept records; LogAppendTime batches keep theirs), the CRC and, for the delete horizon, the
attributes and ``base_timestamp`` are rewritten.  Kept records are copied byte for byte
(their offset and timestamp deltas stay relative to the unchanged base) unless the
batch gets a delete horizon.  A batch whose records all go is dropped, except that an
empty header (``record_count`` 0, same offsets) is kept (a) for the last batch of an
idempotent producer in the dirty range (or any emptied producer batch of the clean head,
whose later batches are unknown: a few spare 61-byte headers, never a lost producer
state), and (b) for the last batch of each group, so an output segment is never empty
and ends at exactly the offset its inputs ended at.  Readers see holes in the offsets;
``Log.read`` already returns the first batch whose last offset is >= the fetch offset.

Tombstones (Kafka's KIP-534 rule): the first pass that keeps a tombstone stamps its batch
with a delete horizon ``now + delete_retention_ms``: attributes bit 6 (0x40) is set and
``base_timestamp`` holds the horizon, each record's timestamp delta re-encoded relative
to it (absolute timestamps are unchanged).  A later pass at or after the horizon drops
the batch's tombstones.  The cleaner remembers the earliest pending horizon per log and
cleans again once it passes (in memory: after a restart only dirt triggers a pass, as in
Kafka).  Transactions are not supported by this broker: control batches are kept.

Swap protocol (one group of old segments ``o1 < o2 < ... < ok`` -> one new segment named
``b = o1``; ``B`` = ``f"{b:020d}"``, files in the partition directory)
-------------------------------------------------------------------------------------
====  ============================================================================
S0    write ``B.log.cleaned``, ``B.index.cleaned``, ``B.timeindex.cleaned``
      (formats of ``.log``/``.index``/``.timeindex``); fsync each; fsync the directory
S1    rename ``B.index.cleaned`` -> ``B.index.swap``, ``B.timeindex.cleaned`` ->
      ``B.timeindex.swap``, then ``B.log.cleaned`` -> ``B.log.swap``: the COMMIT
      point; fsync the directory
S2    for each old segment: rename ``O.log``, ``O.index``, ``O.timeindex`` ->
      ``O.log.deleted``, ``O.index.deleted``, ``O.timeindex.deleted``
S3    rename ``B.index.swap`` -> ``B.index``, ``B.timeindex.swap`` -> ``B.timeindex``,
      then ``B.log.swap`` -> ``B.log``; fsync the directory
S4    unlink every ``.deleted`` file of the group
====  ============================================================================

Recovery (:func:`storage.recovery.finish_interrupted_swaps`, run by every ``Log.open``):
``.cleaned`` and ``.deleted`` files are removed (no commit yet / old files of a committed
swap); a ``B.log.swap`` is committed: every ``.log``/``.index``/``.timeindex`` whose base
lies in ``[b, end of B.log.swap)`` is removed (its own index files too: rebuilt on load)
and it is renamed to ``B.log``; any other ``.swap`` (an index of an uncommitted S1) is
removed.  Because the new segment ends exactly where ``ok`` ended, that range is exactly
the group.

Costs: a pass reads the whole cleanable range once for the clean and the dirty tail once
more for the map: O(bytes) CRC-32C + O(records) Python (one varint walk per record), and
writes the kept bytes plus the indexes.  :meth:`LogCleaner.clean_step` reads at most
``max_bytes`` (but at least one batch); a group swap adds O(index entries) and a few
fsyncs.  Choosing a log is O(compacted logs x segments).  Memory: the offset map
(``dedupe_buffer_bytes``, accounted) plus one step's input.

Not thread-safe: one owner (the broker's event loop, through the LogManager) calls every
method, the same thread that owns the logs.  Readers in other processes holding an open
descriptor keep reading the old file; one that opens a handed-out path after S3 sees
the new file (see docs/storage.md, Compaction).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
from crc32c import crc32c

from clients.errors import CorruptRecordError, InvalidConfigError
from clients.records import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    assemble_batch,
    decode_varint,
    decode_varint32,
    encode_varint,
)
from storage.checkpoint import OffsetCheckpointFile, fsync_dir
from storage.errors import StorageError
from storage.log import Log
from storage.offset_index import OffsetIndex
from storage.offset_map import OffsetMap
from storage.recovery import HEADER, INT32_MAX
from storage.segment import Segment, segment_file
from storage.time_index import NO_TIMESTAMP, TimeIndex

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
DELETE_HORIZON_MASK = 0x40
MAX_ERRORS_KEPT = 32
TopicPartition = tuple[str, int]
# base, length, epoch, magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq, count
Header = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class CleanerConfig:
    """``dedupe_buffer_bytes``: offset map budget (Kafka's log.cleaner.dedupe.buffer.size);
    ``step_bytes``: default input bytes per :meth:`LogCleaner.clean_step`."""

    dedupe_buffer_bytes: int = 32 * 1024 * 1024
    step_bytes: int = 512 * 1024

    def __post_init__(self) -> None:
        for name, low in (("dedupe_buffer_bytes", 1024), ("step_bytes", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidConfigError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclass
class CleanerStats:
    passes_completed: int = 0
    passes_aborted: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_dropped: int = 0
    tombstones_dropped: int = 0
    keyless_dropped: int = 0
    segments_swapped: int = 0
    errors: list[str] = field(default_factory=list)  # the last MAX_ERRORS_KEPT


class CleanStepResult(NamedTuple):
    topic_partition: TopicPartition | None  # the log worked on (None: nothing to do)
    bytes_read: int
    pass_done: bool  # this step finished a pass


class _Group:
    """One output segment being written: ``<base>.log.cleaned`` + index entries."""

    def __init__(self, log: Log, segments: list[Segment]) -> None:
        self.segments = segments
        self.base = segments[0].base_offset
        self.path = segment_file(log.dir, self.base, ".log.cleaned")
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self.seg_i, self.position, self.size = 0, 0, 0
        self.changed = len(segments) > 1
        self.last_header: Header | None = None
        self.last_written: int | None = None  # base offset of the last batch written
        cfg = log.config
        self.interval = cfg.index_interval_bytes
        self.max_offset_entries = cfg.segment_index_bytes // OffsetIndex.ENTRY_SIZE
        self.max_time_entries = cfg.segment_index_bytes // TimeIndex.ENTRY_SIZE
        self.off_rel: list[int] = []
        self.off_pos: list[int] = []
        self.ts_val: list[int] = []
        self.ts_rel: list[int] = []
        self.max_ts, self.off_of_max, self.since, self.last_ts = NO_TIMESTAMP, -1, 0, NO_TIMESTAMP

    def write(self, data: bytes | memoryview, base: int, max_ts: int) -> None:
        """Append one batch; index points follow :func:`storage.recovery.scan_segment`."""
        if max_ts > self.max_ts:
            self.max_ts, self.off_of_max = max_ts, base
        if not self.off_rel or self.since >= self.interval:
            if len(self.off_rel) < self.max_offset_entries:
                self.off_rel.append(base - self.base)
                self.off_pos.append(self.size)
            if self.max_ts > self.last_ts and len(self.ts_val) < self.max_time_entries - 1:
                self.ts_val.append(self.max_ts)
                self.ts_rel.append(self.off_of_max - self.base)
                self.last_ts = self.max_ts
            self.since = 0
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        self.since += len(data)
        self.size += len(data)
        self.last_written = base

    def finish(self) -> tuple[bytes, bytes]:
        """fsync the log; the offset and time index bytes."""
        if self.max_ts > self.last_ts and len(self.ts_val) < self.max_time_entries:
            self.ts_val.append(self.max_ts)
            self.ts_rel.append(self.off_of_max - self.base)
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        offsets = np.zeros(len(self.off_rel), dtype=OffsetIndex.DTYPE)
        offsets["rel"], offsets["pos"] = self.off_rel, self.off_pos
        times = np.zeros(len(self.ts_val), dtype=TimeIndex.DTYPE)
        times["ts"], times["rel"] = self.ts_val, self.ts_rel
        return offsets.tobytes(), times.tobytes()

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for suffix in (".log.cleaned", ".index.cleaned", ".timeindex.cleaned"):
            segment_file(self.path.parent, self.base, suffix).unlink(missing_ok=True)


@dataclass
class _Pass:
    tp: TopicPartition
    log: Log
    first_dirty: int
    end: int  # first uncleanable offset
    segments: list[Segment]  # every segment with base < end, at the start of the pass
    offset_map: OffsetMap
    now_ms: int
    map_end: int = -1
    map_seg: int = 0
    map_pos: int = -1
    producer_last: dict[int, int] = field(default_factory=dict)
    groups: list[list[Segment]] = field(default_factory=list)
    grouped: bool = False
    group_i: int = 0
    group: _Group | None = None
    min_horizon: int | None = None


class LogCleaner:
    """Compacts the compacted logs it is given, one pass and one bounded step at a time."""

    def __init__(self, config: CleanerConfig | None = None, *,
                 clock_ms: Callable[[], int] = _wall_clock_ms,
                 checkpoint_path: str | Path | None = None) -> None:
        self.config = config if config is not None else CleanerConfig()
        self._clock_ms = clock_ms
        self._checkpoint = (OffsetCheckpointFile(checkpoint_path)
                            if checkpoint_path is not None else None)
        self._first_dirty: dict[TopicPartition, int] = {}
        self._pending_horizon: dict[TopicPartition, int] = {}
        self._uncleanable: dict[TopicPartition, str] = {}
        self._map = OffsetMap(self.config.dedupe_buffer_bytes)
        self._pass: _Pass | None = None
        self.stats = CleanerStats()
        self.swap_hook: Callable[[str], None] | None = None  # tests: crash between steps

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
        self._uncleanable.pop(tp, None)

    def abort(self) -> None:
        """Abandon the pass in progress (its ``.cleaned`` files are removed)."""
        p, self._pass = self._pass, None
        if p is not None:
            if p.group is not None:
                p.group.discard()
            self._map.clear()
            self.stats.passes_aborted += 1

    # -- choosing a log ---------------------------------------------------------------

    def cleanable_range(self, tp: TopicPartition, log: Log) -> tuple[int, int, int, int]:
        """``(first_dirty, end, dirty_bytes, cleanable_bytes)`` of a compacted log."""
        cfg = log.config
        segs = log.segments
        now = self._clock_ms()
        k = len(segs) - 1  # the active segment is never cleaned
        if cfg.min_compaction_lag_ms > 0:
            for i in range(k):
                if segs[i].largest_timestamp > now - cfg.min_compaction_lag_ms:
                    k = i
                    break
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

    def _choose(self, logs: Mapping[TopicPartition, Log]) -> _Pass | None:
        now = self._clock_ms()
        best: tuple[float, TopicPartition, Log, int, int] | None = None
        for tp, log in logs.items():
            if not log.config.compact or log.closed or tp in self._uncleanable:
                continue
            first_dirty, end, dirty, cleanable = self.cleanable_range(tp, log)
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
        p = _Pass(tp, log, first_dirty, end, segments, self._map, now)
        if first_dirty >= end:
            p.map_end = end
        return p

    # -- stepping ---------------------------------------------------------------------

    def clean_step(self, logs: Mapping[TopicPartition, Log],
                   max_bytes: int | None = None) -> CleanStepResult:
        """Do at most ``max_bytes`` (default ``config.step_bytes``) of cleaning work."""
        budget = self.config.step_bytes if max_bytes is None else max_bytes
        if budget <= 0:
            raise ValueError(f"max_bytes must be positive, got {budget}")
        if self._pass is None:
            self._pass = self._choose(logs)
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
                    p.groups = _group_segments(p.log, [s for s in p.segments
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

    def _still_valid(self, p: _Pass, logs: Mapping[TopicPartition, Log]) -> bool:
        """The pass's segments are still the log's, inactive and unchanged."""
        log = p.log
        if logs.get(p.tp) is not log or log.closed:
            return False
        live = {id(s) for s in log.segments[:-1]}
        if p.grouped:
            segs = [s for group in p.groups[p.group_i:] for s in group]
        else:
            segs = p.segments
        return all(id(s) in live and s.fd >= 0 for s in segs)

    def _give_up(self, p: _Pass, exc: BaseException) -> None:
        message = f"{p.tp[0]}-{p.tp[1]}: {exc}"
        self._uncleanable[p.tp] = message
        self.stats.errors = [*self.stats.errors, message][-MAX_ERRORS_KEPT:]
        self.abort()

    # -- phase 1: the offset map --------------------------------------------------------

    def _map_step(self, p: _Pass, budget: int) -> int:
        segs = p.segments
        if p.map_pos < 0:  # find the first dirty batch
            starts = [i for i, s in enumerate(segs) if s.next_offset > p.first_dirty]
            if not starts:
                p.map_end = p.end
                return 0
            p.map_seg = starts[0]
            batch = segs[p.map_seg].find_batch(p.first_dirty)
            p.map_pos = batch.position if batch is not None else 0
        seg = segs[p.map_seg]
        data, used, headers = _read_batches(seg, p.map_pos, budget)
        for rel, h in headers:
            keys, offsets = _keys_of(data, rel, h)
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

    def _clean_step(self, p: _Pass, budget: int) -> int:
        if p.group is None:
            p.group = _Group(p.log, p.groups[p.group_i])
        g = p.group
        seg = g.segments[g.seg_i]
        data, used, headers = _read_batches(seg, g.position, budget)
        for rel, h in headers:
            g.last_header = h
            out = self._filter(p, data, rel, h)
            if out is not None:
                g.write(out, h[0], HEADER.unpack_from(out, 0)[8])
        g.position += used
        if g.position >= seg.size:
            g.seg_i, g.position = g.seg_i + 1, 0
            if g.seg_i >= len(g.segments):
                self._swap(p, g)
                p.group, p.group_i = None, p.group_i + 1
        return max(used, 1)

    def _filter(self, p: _Pass, data: bytes, pos: int, h: Header) -> bytes | None:
        """The batch to write for ``h``: itself, a rewrite, an empty header, or None."""
        g = p.group
        assert g is not None
        raw = data[pos:pos + h[1] + LOG_OVERHEAD]
        if crc32c(memoryview(raw)[ATTRIBUTES_OFFSET:]) != h[4]:
            raise CorruptRecordError(f"CRC-32C mismatch in the batch at offset {h[0]} of "
                                     f"{g.segments[g.seg_i].log_path}")
        if h[0] >= p.map_end or h[5] & CONTROL_MASK:
            return raw
        kept, horizon_needed, tombstones_kept = self._select(p, raw, h)
        attrs, base_ts = h[5], h[7]
        if horizon_needed:
            attrs = attrs | DELETE_HORIZON_MASK
            base_ts = p.now_ms + p.log.config.delete_retention_ms
        if tombstones_kept and attrs & DELETE_HORIZON_MASK:
            p.min_horizon = base_ts if p.min_horizon is None else min(p.min_horizon, base_ts)
        if kept is None:
            return raw
        g.changed = True
        if not kept:
            pid = h[9]
            if pid >= 0 and p.producer_last.get(pid, h[0]) <= h[0]:
                return _empty_batch(h)  # the producer's last batch: keep its header
            return None
        body = bytearray()
        max_ts = NO_TIMESTAMP
        for start, end, attr_at, ts_end, ts in kept:
            if ts > max_ts:
                max_ts = ts
            if base_ts == h[7]:
                body += raw[start:end]
            else:  # re-encode the timestamp delta against the delete horizon
                rec = bytearray(raw[attr_at:attr_at + 1])
                encode_varint(ts - base_ts, rec)
                rec += raw[ts_end:end]
                encode_varint(len(rec), body)
                body += rec
        if h[5] & TIMESTAMP_TYPE_MASK:
            max_ts = h[8]
        return _rebuild(h, body, len(kept), attrs, base_ts, max_ts)

    def _select(self, p: _Pass, raw: bytes, h: Header
                ) -> tuple[list[tuple[int, int, int, int, int]] | None, bool, bool]:
        """``(kept records, or None when the batch stays as it is; horizon needed;
        tombstones kept)``; a kept record is (start, end, attributes position,
        timestamp-delta end, absolute timestamp)."""
        m = p.offset_map
        base, base_ts, count = h[0], h[7], h[12]
        has_horizon = bool(h[5] & DELETE_HORIZON_MASK)
        expired = has_horizon and p.now_ms >= base_ts
        kept: list[tuple[int, int, int, int, int]] = []
        tombstones = 0
        stats = self.stats
        pos, end = HEADER_SIZE, len(raw)
        for _ in range(count):
            length, q = decode_varint32(raw, pos)
            rec_end = q + length
            if length < 0 or rec_end > end:
                raise CorruptRecordError(f"record length runs past the batch at offset {base}")
            ts_delta, ts_end = decode_varint(raw, q + 1)
            off_delta, r = decode_varint32(raw, ts_end)
            klen, r = decode_varint32(raw, r)
            if klen < 0:
                stats.keyless_dropped += 1
                stats.records_dropped += 1
                pos = rec_end
                continue
            latest = m.get(raw[r:r + klen])
            if latest is not None and latest > base + off_delta:
                stats.records_dropped += 1
                pos = rec_end
                continue
            if decode_varint32(raw, r + klen)[0] < 0:  # a tombstone
                if expired:
                    stats.tombstones_dropped += 1
                    stats.records_dropped += 1
                    pos = rec_end
                    continue
                tombstones += 1
            kept.append((pos, rec_end, q, ts_end, base_ts + ts_delta))
            pos = rec_end
        horizon_needed = tombstones > 0 and not has_horizon
        if len(kept) == count and not horizon_needed:
            return None, False, tombstones > 0
        return kept, horizon_needed, tombstones > 0

    # -- swap ---------------------------------------------------------------------------

    def _swap(self, p: _Pass, g: _Group) -> None:
        """End the group with its last input batch, then swap it in (S0-S4 above)."""
        h = g.last_header
        assert h is not None  # inactive segments are never empty
        if g.last_written != h[0]:
            g.write(_empty_batch(h), h[0], h[8])
        if not g.changed:
            g.discard()
            return
        index_bytes, time_bytes = g.finish()
        self.stats.bytes_written += g.size
        log = p.log
        directory = log.dir
        hook = self.swap_hook or _no_hook

        def name(base: int, suffix: str) -> Path:
            return segment_file(directory, base, suffix)

        _write_file(name(g.base, ".index.cleaned"), index_bytes)
        _write_file(name(g.base, ".timeindex.cleaned"), time_bytes)
        fsync_dir(directory)
        hook("S0 cleaned files written")
        for kind in (".index", ".timeindex", ".log"):
            os.rename(name(g.base, kind + ".cleaned"), name(g.base, kind + ".swap"))
            hook(f"S1 {kind}.cleaned -> {kind}.swap")
        fsync_dir(directory)
        for seg in g.segments:
            for kind in (".log", ".index", ".timeindex"):
                os.rename(name(seg.base_offset, kind), name(seg.base_offset, kind + ".deleted"))
                hook(f"S2 {seg.base_offset}{kind} -> .deleted")
        for kind in (".index", ".timeindex", ".log"):
            os.rename(name(g.base, kind + ".swap"), name(g.base, kind))
            hook(f"S3 {kind}.swap -> {kind}")
        fsync_dir(directory)
        new = Segment(directory, g.base, log.config, create=False, now_ms=self._clock_ms())
        new.load_clean()
        log.replace_segments(g.segments, new)
        for seg in g.segments:
            for kind in (".log", ".index", ".timeindex"):
                name(seg.base_offset, kind + ".deleted").unlink(missing_ok=True)
                hook(f"S4 unlink {seg.base_offset}{kind}.deleted")
        self.stats.segments_swapped += 1

    def _finish_pass(self, p: _Pass) -> None:
        self._first_dirty[p.tp] = p.map_end
        if p.min_horizon is not None:
            self._pending_horizon[p.tp] = p.min_horizon
        else:
            self._pending_horizon.pop(p.tp, None)
        self._pass = None
        self._map.clear()
        self.stats.passes_completed += 1
        self.write_checkpoint()


# -- helpers ------------------------------------------------------------------------------


def _no_hook(_step: str) -> None:
    return None


def _read_batches(seg: Segment, pos: int, budget: int
                  ) -> tuple[bytes, int, list[tuple[int, Header]]]:
    """Whole batches from ``pos``: about ``budget`` bytes, at least one batch.

    Returns ``(data, bytes used, [(position in data, header), ...])``.
    """
    want = min(max(budget, HEADER_SIZE), seg.size - pos)
    data = seg.read_bytes(pos, want)
    headers: list[tuple[int, Header]] = []
    rel = 0
    unpack = HEADER.unpack_from
    while rel + HEADER_SIZE <= len(data):
        h: Header = unpack(data, rel)
        size = h[1] + LOG_OVERHEAD
        if h[3] != 2 or size < HEADER_SIZE:
            raise CorruptRecordError(f"{seg.log_path}: no batch header at position {pos + rel}")
        if rel + size > len(data):
            if not headers:  # one batch larger than the budget: read it whole
                data = seg.read_bytes(pos, size)
                continue
            break
        headers.append((rel, h))
        rel += size
    if not headers:
        raise CorruptRecordError(f"{seg.log_path}: torn batch at position {pos}")
    return data, rel, headers


def _keys_of(data: bytes, pos: int, h: Header) -> tuple[list[bytes], list[int]]:
    """Keys and offsets of the keyed records of the batch at ``pos`` (control: none)."""
    keys: list[bytes] = []
    offsets: list[int] = []
    if h[5] & CONTROL_MASK:
        return keys, offsets
    base = h[0]
    p = pos + HEADER_SIZE
    end = pos + h[1] + LOG_OVERHEAD
    for _ in range(h[12]):
        length, q = decode_varint32(data, p)
        p = q + length
        if length < 0 or p > end:
            raise CorruptRecordError(f"record length runs past the batch at offset {base}")
        _ts, r = decode_varint(data, q + 1)
        off_delta, r = decode_varint32(data, r)
        klen, r = decode_varint32(data, r)
        if klen >= 0:
            keys.append(data[r:r + klen])
            offsets.append(base + off_delta)
    return keys, offsets


def _rebuild(h: Header, body: bytes | bytearray, count: int, attributes: int,
             base_timestamp: int, max_timestamp: int) -> bytes:
    return assemble_batch(
        body, record_count=count, last_offset_delta=h[6], base_timestamp=base_timestamp,
        max_timestamp=max_timestamp, base_offset=h[0], partition_leader_epoch=h[2],
        producer_id=h[9], producer_epoch=h[10], base_sequence=h[11], attributes=attributes)


def _empty_batch(h: Header) -> bytes:
    """The header of ``h`` with no records (same offsets, epoch and producer fields)."""
    return _rebuild(h, b"", 0, h[5] & ~DELETE_HORIZON_MASK, h[7], h[8])


def _write_file(path: Path, content: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _group_segments(log: Log, segments: list[Segment]) -> list[list[Segment]]:
    """Consecutive segments whose sizes sum to <= ``segment_bytes`` (one output each);
    their index entries and relative offsets must fit one segment too."""
    cfg = log.config
    max_entries = cfg.segment_index_bytes // TimeIndex.ENTRY_SIZE - 1
    groups: list[list[Segment]] = []
    size = entries = 0
    for seg in segments:
        if groups:
            group = groups[-1]
            if (size + seg.size <= cfg.segment_bytes
                    and entries + seg.index.entries <= max_entries
                    and seg.next_offset - 1 - group[0].base_offset <= INT32_MAX):
                group.append(seg)
                size += seg.size
                entries += seg.index.entries
                continue
        groups.append([seg])
        size, entries = seg.size, seg.index.entries
    return groups
