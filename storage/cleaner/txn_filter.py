"""Transactions in log compaction: which transactional batches and markers a pass removes.

Kafka's ``CleanedTransactionMetadata``.  A pass walks the batches of a log in offset
order (the map phase from the first dirty offset, the clean phase from the log start);
a :class:`TxnFilter` made from the log's aborted transactions over that range
(:meth:`storage.log.log.Log.collect_aborted_transactions`, read from the segments'
``.txnindex``, format :mod:`storage.index.txn_index`) follows it and says:

* of a transactional data batch, whether its transaction was **aborted** (an index entry
  of its producer has ``first_offset`` <= the batch's last offset and its ABORT marker
  is not passed yet): its records are removed and never put in the offset map;
  otherwise it is **committed** (the cleaner's upper bound is the last stable offset,
  so every transaction below it has ended) and is compacted by key like any record;
* of a marker (control batch), whether it is **removable**: no batch of its transaction
  was kept by this pass (an ABORT whose data all went, a COMMIT whose records were all
  compacted away, or a transaction with no data in the log).  A removable marker is
  stamped with a delete horizon (``now + delete_retention_ms``, the KIP-534 stamp of
  :mod:`storage.cleaner.batch_filter`) and dropped by the first pass at or after it
  that still finds it removable (:class:`~storage.cleaner.batch_filter.BatchFilter`
  applies this; it also keeps a marker that may be its producer's last batch).

The caller reports every batch it writes out with :meth:`TxnFilter.kept`; a marker of an
unknown control type (not ABORT or COMMIT) is never removable.

Costs: O(aborted transactions of the range) memory (one small tuple each, the range's
index entries) plus one entry per producer with a transaction in progress in the walk;
O(1) amortised per batch.  A per-pass object on the cleaner's thread: not thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from clients.records.control import ControlType
from storage.index.txn_index import AbortedTxn

__all__ = ["TxnFilter"]


@dataclass
class _Aborted:
    entry: AbortedTxn
    kept: bool = False  # a batch of this aborted transaction was written out


class TxnFilter:
    """Follows one walk of a log's batches and classifies its transactional ones."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda e: e.first_offset)
        self._next = 0
        self._aborted: dict[int, _Aborted] = {}  # producer id -> its open aborted txn
        self._committed_kept: set[int] = set()  # producers with a kept committed batch

    def _consume_up_to(self, offset: int) -> None:
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= offset:
            entry = pending[self._next]
            self._aborted[entry.producer_id] = _Aborted(entry)
            self._next += 1

    def is_aborted(self, producer_id: int, last_offset: int) -> bool:
        """Whether the transactional data batch of ``producer_id`` ending at
        ``last_offset`` (the next in the walk) belongs to an aborted transaction."""
        self._consume_up_to(last_offset)
        return producer_id in self._aborted

    def kept(self, producer_id: int) -> None:
        """A transactional data batch of ``producer_id`` (after :meth:`is_aborted`) was
        written out: its transaction's marker must stay."""
        state = self._aborted.get(producer_id)
        if state is not None:
            state.kept = True
        else:
            self._committed_kept.add(producer_id)

    def end(self, producer_id: int, offset: int, control_type: int | None) -> bool:
        """The marker of ``producer_id`` at ``offset`` (``control_type``: its
        :class:`~clients.records.control.ControlType` value, None when unreadable) ends
        its transaction; returns whether no batch of that transaction was kept."""
        self._consume_up_to(offset)
        state = self._aborted.pop(producer_id, None)
        committed_kept = producer_id in self._committed_kept
        self._committed_kept.discard(producer_id)
        if control_type not in (ControlType.ABORT, ControlType.COMMIT):
            return False
        # (an ABORT after data taken for committed: its index entry is missing; keep it)
        return not committed_kept and (state is None or not state.kept)
