"""Keeping the segments' ``.txnindex`` files true to the log: checks at open, rebuilds.

An aborted-transaction index (:mod:`storage.index.txn_index`) is derived data: its
entries follow from the batches.  Walking the log from its first batch
(:class:`TxnTracker`), per producer id the first offset of its open transaction is the
base offset of its first transactional (attributes bit 4) data batch since its last
marker; its marker (a control batch, bit 5; format: :mod:`clients.records.control`)
ends it, and an ABORT of a transaction that wrote data here gives the entry
``(producer_id, first_offset, marker offset, LSO)``, the LSO being the first offset of
the earliest other open transaction, else the marker's offset + 1 (Kafka's
``lastStableOffset`` of a completed transaction; the partition writes the same).  The
entry goes to the segment holding the marker.  A marker of a producer with no open
transaction here (an empty transaction) gives no entry, as in Kafka.  A transaction
whose data starts below the first segment's base (deleted by retention) starts, for a
rebuild, at its first batch still in the log.

When :meth:`storage.log.log.Log.open` runs :func:`check_txn_indexes` (from
:func:`storage.log.recovery.load_segments`):

* every segment's file is read and sanity-checked; a damaged one (size not a multiple of
  34, bad version, entries out of order: :class:`~storage.errors.CorruptIndexError`) is
  rebuilt;
* entries at or past their segment's end after recovery (a crash kept the index's
  writes but lost or cut the log's unflushed tail) are dropped;
* a segment recovery rescanned (after an unclean stop, or to rebuild its other indexes)
  is checked against the transactional batches the rescan saw (:func:`lacking_entries`):
  an ABORT marker without an entry, of a producer whose data precedes it in the segment,
  means a lost entry; one whose producer has no earlier batch in the segment may be an
  empty transaction or one that started in an earlier segment, and only a rebuild can
  tell.  Either way the index is rebuilt.  A file lost from a segment that is not
  rescanned is found by the scrubber (:mod:`storage.scrubber`), which tracks open
  transactions across a log's segments as it reads them and compares every index with
  what the batches give.

Costs: the open-time check is O(txnindex bytes); a rebuild walks the batch headers of
every segment from the log's first up to the last one rebuilt (the state at a segment's
start depends on everything before it): O(batches) Python and one mmap page per header
touched, plus a decode of each control batch (~80 bytes); all segments to rebuild at one
open share one walk.  Rebuilds are rare (damage, a crash that lost an index write, an
empty aborted transaction in a rescanned tail).  Not thread-safe: the log's owner thread
calls these.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterable, Iterator, Sequence

from clients.protocol.errors import MiniKafkaError
from clients.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader, iter_batches
from clients.records.control import ControlType
from storage.errors import CorruptIndexError
from storage.index.txn_index import AbortedTxn
from storage.records.scan import TXN_DATA, marker_kind
from storage.segment import Segment

__all__ = ["TxnTracker", "check_txn_indexes", "lacking_entries", "rebuild_txn_indexes",
           "txn_events"]

TxnEvent = tuple[int, int, int]  # (offset, producer id, TXN_DATA or a ControlType)


class TxnTracker:
    """The open transactions of a log walked in offset order (module docstring)."""

    def __init__(self) -> None:
        self.open: dict[int, int] = {}  # producer id -> first offset, in that order

    def feed(self, offset: int, producer_id: int, kind: int) -> AbortedTxn | None:
        """One transactional batch; the entry an ABORT of a non-empty transaction gives."""
        if kind == TXN_DATA:
            self.open.setdefault(producer_id, offset)
            return None
        first = self.open.pop(producer_id, None)
        if first is None or kind != ControlType.ABORT:
            return None
        return AbortedTxn(producer_id, first, offset, min(self.open.values(),
                                                          default=offset + 1))

    def entries(self, events: Iterable[TxnEvent]) -> list[AbortedTxn]:
        """Feed ``events`` (one segment's, in order); the entries they give."""
        out = (self.feed(*event) for event in events)
        return [entry for entry in out if entry is not None]


def check_txn_indexes(segments: Sequence[Segment], rescanned: dict[int, list[TxnEvent]]
                      ) -> list[str]:
    """The open-time check (module docstring); ``rescanned``: base offset -> the
    transactional batches of each segment recovery rescanned.  Returns what it did."""
    problems: list[str] = []
    targets: set[int] = set()
    for seg in segments:
        index = seg.txn_index
        try:
            index.sanity_check()
        except CorruptIndexError as exc:
            problems.append(f"rebuilding the transaction index: {exc}")
            targets.add(seg.base_offset)
            continue
        before = len(index.entries)
        index.truncate_to(seg.next_offset)
        if len(index.entries) < before:
            problems.append(f"{index.path.name}: dropped {before - len(index.entries)} "
                            f"entries at or past the segment's end {seg.next_offset}")
        missing = lacking_entries(seg, rescanned.get(seg.base_offset, ()))
        if missing:
            problems.append(f"{index.path.name}: ABORT markers at {missing[:5]} have no "
                            "entry: rebuilding it")
            targets.add(seg.base_offset)
    if targets:
        rebuild_txn_indexes(segments, targets)
    return problems


def lacking_entries(seg: Segment, events: Iterable[TxnEvent]) -> list[int]:
    """The ABORT markers among ``events`` (``seg``'s, in order) that have no entry in its
    index and may need one: not those of a producer whose last batch before it in the
    segment was a marker (an empty transaction, certainly)."""
    covered = {e.last_offset for e in seg.txn_index.entries}
    last_kind: dict[int, int] = {}
    missing: list[int] = []
    for offset, pid, kind in events:
        if kind == ControlType.ABORT and offset not in covered and last_kind.get(pid) in (
                None, TXN_DATA):
            missing.append(offset)
        last_kind[pid] = kind
    return missing


def rebuild_txn_indexes(segments: Sequence[Segment], targets: set[int]) -> dict[int, int]:
    """Rebuild the index of every segment whose base offset is in ``targets`` from the
    batches of ``segments`` (the log's, oldest first); returns base -> entries written."""
    tracker = TxnTracker()
    written: dict[int, int] = {}
    for seg in segments:
        if not targets or seg.base_offset > max(targets):
            break
        entries = tracker.entries(txn_events(seg))
        if seg.base_offset in targets:
            seg.txn_index.replace_entries(entries)
            written[seg.base_offset] = len(entries)
    return written


def txn_events(seg: Segment) -> Iterator[TxnEvent]:
    """The transactional batches of ``seg`` up to its trusted size, as a rescan reports
    them (:attr:`storage.records.scan.SegmentScan.txn_events`), without CRC checks."""
    size = seg.trusted_size
    if size == 0:
        return
    mm = mmap.mmap(seg.fd, size, access=mmap.ACCESS_READ)
    view = memoryview(mm)
    try:
        for pos, header in _headers(view):
            attrs = header.attributes
            if attrs & TRANSACTIONAL_MASK:
                kind = marker_kind(view, pos) if attrs & CONTROL_MASK else TXN_DATA
                if kind is not None:
                    yield header.base_offset, header.producer_id, kind
    finally:
        view.release()
        mm.close()


def _headers(view: memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """The batch headers in ``view``; a torn or unreadable tail ends the walk (recovery
    or the scrubber deal with it)."""
    with contextlib.suppress(MiniKafkaError):
        yield from iter_batches(view, validate=False)
