"""Writing a cleaned segment and swapping it in for the segments it replaces.

A group of consecutive inactive segments ``o1 < o2 < ... < ok`` becomes one segment
named ``b = o1`` (``B`` = ``f"{b:020d}"``; every file in the partition directory).  Its
``.log`` is a concatenation of batches (format: :mod:`storage.log.validator`); its ``.index``
and ``.timeindex`` (formats: :mod:`storage.index.offset_index`, :mod:`storage.index.time_index`)
are built while writing, with the index-point rule of
:func:`storage.records.scan.scan_segment` (first batch, then every ``index_interval_bytes``;
one final time entry), trimmed to their entries.  Its ``.txnindex`` (format:
:mod:`storage.index.txn_index`) carries the entries of the segments it replaces whose
ABORT marker it keeps (:attr:`CleanedSegmentWriter.markers_kept`), as they are: a
marker goes only once no data of its transaction is left, so a kept entry still
describes the data it covers and no entry outlives the marker that ends it for a
``read_committed`` reader (a source index that turns out damaged is rebuilt from the
log after the swap: :mod:`storage.log.txn_rebuild`).  The
new segment always ends with the last batch of ``ok`` (an empty header if its records
were dropped), so it covers exactly the offsets ``[o1, end of ok)``.

Swap protocol (Kafka's ``.cleaned``/``.swap``/``.deleted`` renames):

====  ============================================================================
S0    write ``B.log.cleaned``, ``B.index.cleaned``, ``B.timeindex.cleaned`` (and
      ``B.txnindex.cleaned`` when there are entries); fsync each; fsync the directory
S1    rename ``B.index.cleaned`` -> ``B.index.swap``, ``B.timeindex.cleaned`` ->
      ``B.timeindex.swap`` (``B.txnindex`` likewise), then ``B.log.cleaned`` ->
      ``B.log.swap``: the COMMIT point; fsync the directory
S2    for each old segment O: rename ``O.log``, ``O.index``, ``O.timeindex`` (and an
      ``O.txnindex``) to ``O.log.deleted``, ``O.index.deleted``, ...
S3    rename ``B.index.swap`` -> ``B.index``, ``B.timeindex.swap`` ->
      ``B.timeindex`` (``B.txnindex`` likewise), then ``B.log.swap`` -> ``B.log``;
      fsync the directory; the Log object swaps its segment list
      (:meth:`storage.log.log.Log.replace_segments`)
S4    unlink every ``.deleted`` file of the group
====  ============================================================================

A crash before the commit leaves the old segments whole (the next open removes the
``.cleaned`` and index ``.swap`` files); after it, the next open completes the swap
(:func:`storage.log.recovery.finish_interrupted_swaps`: every segment file with a base in
``[b, end of B.log.swap)`` is removed, its own indexes too - rebuilt on load - and
``B.log.swap`` becomes ``B.log``).

Costs: writing O(bytes) (one ``os.write`` per batch) + O(batches) index bookkeeping;
the swap O(index entries) + 3 fsyncs of files, 3 of the directory, 3 x (k + 1) renames.
Not thread-safe: used by the cleaner on the thread that owns the log.  A reader in
another process that opened the old ``.log`` keeps reading the old inode; one that
opens the path after S3 reads the new file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from clients.records.batch import ATTRIBUTES_OFFSET, CONTROL_MASK
from storage.errors import CorruptIndexError
from storage.file_io import fsync_dir, write_all, write_file_fsynced
from storage.index.offset_index import OffsetIndex
from storage.index.time_index import NO_TIMESTAMP, TimeIndex
from storage.index.txn_index import ENTRY, TXN_INDEX_VERSION
from storage.log.log import Log
from storage.log.txn_rebuild import rebuild_txn_indexes
from storage.segment import Segment, segment_file

SwapHook = Callable[[str], None]


class CleanedSegmentWriter:
    """``<base>.log.cleaned`` being written for a group of segments, with its indexes."""

    def __init__(self, log: Log, segments: list[Segment]) -> None:
        self.log = log
        self.segments = segments
        self.base = segments[0].base_offset
        self.path = segment_file(log.dir, self.base, ".log.cleaned")
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self.seg_i, self.position, self.size = 0, 0, 0  # input cursor; output size
        self.changed = len(segments) > 1
        self.last_base: int | None = None  # base offset of the last batch written
        self.markers_kept: set[int] = set()  # offsets of the control batches written
        cfg = log.config
        self._interval = cfg.index_interval_bytes
        self._max_offset_entries = cfg.segment_index_bytes // OffsetIndex.ENTRY_SIZE
        self._max_time_entries = cfg.segment_index_bytes // TimeIndex.ENTRY_SIZE
        self._off_rel: list[int] = []
        self._off_pos: list[int] = []
        self._ts_val: list[int] = []
        self._ts_rel: list[int] = []
        self._max_ts, self._off_of_max = NO_TIMESTAMP, -1
        self._since, self._last_ts = 0, NO_TIMESTAMP

    def write(self, data: bytes, base: int, max_ts: int) -> None:
        """Append one batch (``base``: its base offset, ``max_ts``: its max timestamp)."""
        if max_ts > self._max_ts:
            self._max_ts, self._off_of_max = max_ts, base
        if not self._off_rel or self._since >= self._interval:
            if len(self._off_rel) < self._max_offset_entries:
                self._off_rel.append(base - self.base)
                self._off_pos.append(self.size)
            if self._max_ts > self._last_ts and len(self._ts_val) < self._max_time_entries - 1:
                self._ts_val.append(self._max_ts)
                self._ts_rel.append(self._off_of_max - self.base)
                self._last_ts = self._max_ts
            self._since = 0
        if data[ATTRIBUTES_OFFSET + 1] & CONTROL_MASK:  # (the low byte of the int16)
            self.markers_kept.add(base)
        write_all(self.fd, data)
        self._since += len(data)
        self.size += len(data)
        self.last_base = base

    def _finish(self) -> tuple[bytes, bytes]:
        """fsync and close the log file; the offset and time index bytes."""
        if self._max_ts > self._last_ts and len(self._ts_val) < self._max_time_entries:
            self._ts_val.append(self._max_ts)
            self._ts_rel.append(self._off_of_max - self.base)
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        offsets = np.zeros(len(self._off_rel), dtype=OffsetIndex.DTYPE)
        offsets["rel"], offsets["pos"] = self._off_rel, self._off_pos
        times = np.zeros(len(self._ts_val), dtype=TimeIndex.DTYPE)
        times["ts"], times["rel"] = self._ts_val, self._ts_rel
        return offsets.tobytes(), times.tobytes()

    def discard(self) -> None:
        """Close and remove the ``.cleaned`` files (abort, or nothing changed)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for suffix in (".log.cleaned", ".index.cleaned", ".timeindex.cleaned",
                       ".txnindex.cleaned"):
            segment_file(self.log.dir, self.base, suffix).unlink(missing_ok=True)

    def swap_in(self, now_ms: int, hook: SwapHook | None = None) -> Segment:
        """Run S0-S4; returns the new segment, already in the log's segment list.

        ``hook`` (tests) is called after every file operation with its step name.
        """
        index_bytes, time_bytes = self._finish()
        txn_bytes, txn_damaged = self._txn_entries()
        log, base = self.log, self.base
        directory = log.dir
        step = hook or _no_hook

        def name(offset: int, suffix: str) -> Path:
            return segment_file(directory, offset, suffix)

        write_file_fsynced(name(base, ".index.cleaned"), index_bytes)
        write_file_fsynced(name(base, ".timeindex.cleaned"), time_bytes)
        indexes: tuple[str, ...] = (".index", ".timeindex")
        if txn_bytes:
            write_file_fsynced(name(base, ".txnindex.cleaned"), txn_bytes)
            indexes += (".txnindex",)
        fsync_dir(directory)
        step("S0 cleaned files written")
        for kind in (*indexes, ".log"):
            os.rename(name(base, kind + ".cleaned"), name(base, kind + ".swap"))
            step(f"S1 {kind}.cleaned -> {kind}.swap")
        fsync_dir(directory)
        deleted: list[tuple[int, str]] = []
        for seg in self.segments:
            seg.txn_index.close()
            for kind in (".log", ".index", ".timeindex", ".txnindex"):
                if kind == ".txnindex" and not name(seg.base_offset, kind).exists():
                    continue
                os.rename(name(seg.base_offset, kind), name(seg.base_offset, kind + ".deleted"))
                deleted.append((seg.base_offset, kind))
                step(f"S2 {seg.base_offset}{kind} -> .deleted")
        for kind in (*indexes, ".log"):
            os.rename(name(base, kind + ".swap"), name(base, kind))
            step(f"S3 {kind}.swap -> {kind}")
        fsync_dir(directory)
        new = Segment(directory, base, log.config, create=False, now_ms=now_ms)
        new.load_clean()
        log.replace_segments(self.segments, new)
        if txn_damaged:
            rebuild_txn_indexes(log.segments, {base})
        for offset, kind in deleted:
            name(offset, kind + ".deleted").unlink(missing_ok=True)
            step(f"S4 unlink {offset}{kind}.deleted")
        for seg in self.segments:
            seg.clear_damage_mark()  # the damaged bytes it marked are gone
        return new

    def _txn_entries(self) -> tuple[bytes, bool]:
        """The ``.txnindex`` bytes of the new segment (the old ones' entries whose ABORT
        marker was written) and whether an old one was damaged (then it is rebuilt after
        the swap)."""
        try:
            entries = [e for seg in self.segments for e in seg.txn_index.entries
                       if e.last_offset in self.markers_kept]
        except CorruptIndexError:
            return b"", True
        return b"".join(ENTRY.pack(TXN_INDEX_VERSION, *e) for e in entries), False


def _no_hook(_step: str) -> None:
    return None
