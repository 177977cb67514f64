"""Split a batch the broker refused as too large, as Kafka's producer does.

When a partition's Produce answer is MESSAGE_TOO_LARGE (the batch is above the topic's
``max.message.bytes``), a batch of more than one record is not failed: its records are
decoded from its own bytes (decompressed if needed) and appended again, in order, to new
batches of at most ``batch_size`` bytes and at most half the records each (a record
larger than ``batch_size`` gets a batch of its own; halving guarantees progress when
the topic's limit is below ``batch_size`` too: pieces are split again until they fit).
The sender puts them back at the head of the partition's queue as retries.  A
single-record batch cannot be split: it fails with the error (unless it shared the
answer with other batches of the partition; then it is retried alone first, since it
may not have been the one too large).  ``send_bulk`` batches are split the same way:
their parts take the batch's place in the call's
:class:`~clients.producer.batch.BulkTracker` (:meth:`~clients.producer.batch.BulkTracker.split`),
so its :class:`~clients.types.BulkResult` lists every part as a batch of its own.

What stays the same across a split::

    big batch    records 0..n-1, sequences S..S+n-1, one BatchResult (the futures' handle)
    parts        [0..a-1] [a..b-1] [b..n-1], sequences S, S+a, S+b (Kafka's rule: the range
                 is cut in order, so every later batch's sequence stays valid)
    futures      the big BatchResult is chained to the parts' (BatchResult.chain): each
                 RecordFuture finds its part by index; done when every part is
    send_bulk    the batch's BulkSlot is replaced by one per part (BulkTracker.split);
                 the call's future resolves when every part is done

Parts take the big batch's producer id and epoch, compression, creation time (the
delivery timeout keeps counting), attempts and ``maybe_written``.

Memory: parts live in heap memory, not the producer's pool (the sender thread must
never wait for the pool, which appending threads may hold); the big batch's pooled
buffer goes back to the pool when the parts are queued.  So a split briefly holds about
one batch's bytes beyond ``buffer_memory``; splits are rare (a topic whose
``max.message.bytes`` is below the producer's batch sizes).

Costs: one decode and one re-encode of the batch's records, O(record bytes).  Thread
safety: none; the sender calls it under its lock.
"""

from __future__ import annotations

from clients.producer.batch import BulkSlot, ProducerBatch, record_size_bound
from clients.producer.idempotence import NO_SEQUENCE, increment_sequence
from clients.records.batch import HEADER_SIZE
from clients.records.bulk_decode import decode_batch_bulk


def can_split(batch: ProducerBatch) -> bool:
    """More than one record, and not split already (a part may be split again)."""
    if batch.record_count <= 1:
        return False
    if batch.bulk is not None:
        return True  # a split bulk batch is not itself sent again (its parts are)
    return batch.result is not None and not batch.result.chained


def split_batch(batch: ProducerBatch, batch_size: int) -> list[ProducerBatch]:
    """The parts of ``batch`` (see the module docstring), chained to its futures.

    ``batch`` must be closed (its bytes final) and :func:`can_split`.
    """
    if not can_split(batch):
        raise ValueError(f"{batch!r} cannot be split")
    records = decode_batch_bulk(batch.wire(), 0).to_records()
    most = (len(records) + 1) // 2
    parts: list[ProducerBatch] = []
    firsts: list[int] = []
    part: ProducerBatch | None = None
    for index, record in enumerate(records):
        headers = record.headers
        if part is None or part.record_count >= most or part.try_append(
                record.timestamp, record.key, record.value, headers) is None:  # fmt: skip
            size = max(batch_size,
                       HEADER_SIZE + record_size_bound(record.key, record.value, headers))
            part = ProducerBatch(batch.tp, memoryview(bytearray(size)), batch.created_ms,
                                 batch.codec, batch.compress)  # fmt: skip
            if part.try_append(record.timestamp, record.key, record.value, headers) is None:
                raise AssertionError("a part sized for the record must take it")
            parts.append(part)
            firsts.append(index)
    sequence = batch.base_sequence
    for first, piece in zip(firsts, parts, strict=True):
        piece.full = True  # no more appends: only the split records travel in it
        piece.attempts = batch.attempts
        piece.maybe_written = batch.maybe_written
        if sequence != NO_SEQUENCE:
            piece.set_producer_state(batch.producer_id, batch.producer_epoch,
                                     increment_sequence(sequence, first),
                                     transactional=batch.transactional)  # fmt: skip
    if batch.bulk is not None:
        tracker, slot = batch.bulk
        slots = [BulkSlot(slot.chunk, slot.partition, piece.record_count) for piece in parts]
        for piece, piece_slot in zip(parts, slots, strict=True):
            piece.result = None  # the call's tracker resolves its records, not a future
            piece.bulk = (tracker, piece_slot)
        tracker.split(slot, slots)
        return parts
    assert batch.result is not None
    batch.result.chain([(first, piece.result) for first, piece in zip(firsts, parts, strict=True)
                         if piece.result is not None])  # fmt: skip
    return parts

