"""BulkAppender: the chunking half of ``Producer.send_bulk`` (numpy-encoded batches).

:meth:`~clients.producer.producer.Producer.send_bulk` checks its arguments and waits
for the topic's metadata, then hands the records to :meth:`BulkAppender.append`.
Records are cut into chunks whose worst-case encoded size
(:func:`~clients.records.bulk_encode.batch_size_bound`) fits one batch (at least one
record per chunk, and fewer than ``MAX_BOUNDED_RECORDS``): ``batch_size`` when a
partition's share of the call fits one such batch, else ``batch_max_size`` (KIP-782's
``batch.max.size``, 256 KiB by default).  A call with more than a batch for a partition
is a backlog by itself, and ``send`` grows its batches to ``batch_max_size`` behind a
backlog too (:mod:`clients.producer.accumulator`): cut at ``batch_size`` (16 KiB, 16
records of 1 KiB), bulk batches cost the broker a batch each and a 2,000-record call of
1 KiB values ran at a third of ``send``'s rate (issue 30, ``bench/bulk_defaults.py``).
Each chunk is encoded
straight into one pool buffer by :func:`~clients.records.bulk_encode.encode_batch_bulk_into`
(bytes identical to :mod:`clients.records.record`), its records compressed with the
producer's ``compression_type`` (:func:`~clients.producer.compression.compress_records`),
and queued as an already closed
batch (:meth:`~clients.producer.accumulator.RecordAccumulator.append_closed`); with
idempotence its producer fields are stamped on its first drain and its CRC recomputed.
Partitioning: an explicit partition takes every record; with keys, records are grouped
by their key's partition (``murmur2``; order kept within a partition); otherwise each
chunk goes to the sticky partition, which moves on after every chunk.  One
:class:`~clients.producer.batch.BulkTracker` resolves the call's future once all its
batches are done (or fails it with the first error).

``values`` / ``keys``: a sequence of bytes/None, a fixed-size ``S<n>`` array or a 2-D
uint8 array (one row per record; numpy rows are read as raw bytes, so trailing NULs
of ``S<n>`` items are kept).

Costs: O(bytes) numpy encoding and O(chunks) Python per call; keys are hashed one by
one (murmur2) and sequence (non-numpy) inputs are measured and gathered item by item.
Pool memory is waited for per chunk, up to the caller's deadline.

Thread safety: any thread, as ``send``: the sticky partitioner is used under the lock
the producer's ``send`` holds for it; the accumulator takes its own lock.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from clients.producer.accumulator import RecordAccumulator
from clients.producer.batch import BulkTracker
from clients.producer.compression import compress_records
from clients.producer.config import check_partition
from clients.producer.future import ProducerFuture
from clients.producer.partitioner import StickyPartitioner, partition_for_key
from clients.protocol.errors import MessageTooLargeError
from clients.protocol.topics import TopicPartition
from clients.records.batch import HEADER_SIZE
from clients.records.bulk_encode import (
    MAX_BOUNDED_RECORDS,
    batch_size_bound,
    encode_batch_bulk_into,
    item_lengths,
)
from clients.types import BulkResult


class BulkAppender:
    """Cuts one ``send_bulk`` call into batches and queues them (see the module docstring).

    Owns no state of its own beyond its settings.  Reads: the producer's
    ``batch_size``, ``batch_max_size`` and ``max_request_size``; the accumulator
    (buffers from its pool, closed batches appended to it); the producer's sticky
    partitioner, used only under ``partitioner_lock`` (the lock ``Producer.send`` takes
    for it).  Called by
    :meth:`~clients.producer.producer.Producer.send_bulk` once the arguments are checked
    and the topic's partition count is known; waking the sender is the caller's job.
    Thread contract: any number of caller threads at once.
    """

    def __init__(
        self,
        accumulator: RecordAccumulator,
        partitioner: StickyPartitioner,
        partitioner_lock: threading.Lock,
        *,
        batch_size: int,
        batch_max_size: int,
        max_request_size: int,
    ) -> None:
        self._accumulator = accumulator
        self._partitioner = partitioner
        self._partitioner_lock = partitioner_lock
        self.batch_size = batch_size
        self.batch_max_size = max(batch_max_size, batch_size)
        self.max_request_size = max_request_size

    def append(
        self,
        topic: str,
        num_partitions: int,
        values: Sequence[bytes | None] | np.ndarray,
        keys: Sequence[bytes | None] | np.ndarray | None,
        partition: int | None,
        timestamp_ms: int,
        deadline: float,
    ) -> ProducerFuture[BulkResult]:
        """Queue ``values`` (non-empty; ``keys`` of the same length or None) as batches.

        The future resolves to a :class:`~clients.types.BulkResult` once every batch is
        done.  ``deadline`` (seconds on the accumulator's ``clock_ms`` clock) bounds the
        wait for pool memory; if it runs out midway the error is raised (the future fails
        with it) and the chunks already queued are still sent.
        """
        n = len(values)
        future: ProducerFuture[BulkResult] = ProducerFuture()
        value_lengths = _lengths(values)
        key_lengths = np.full(n, -1, dtype=np.int64) if keys is None else _lengths(keys)
        bounds = batch_size_bound(value_lengths, key_lengths)
        groups = self._bulk_groups(topic, n, partition, keys, num_partitions)
        chunks: list[tuple[int | None, np.ndarray | slice]] = []
        for p, index in groups:
            chunks.extend((p, c) for c in self._chunks(bounds, index))
        tracker = BulkTracker(topic, future, len(chunks))
        lengths = (value_lengths, None if keys is None else key_lengths, bounds)
        for i, (p, rows) in enumerate(chunks):
            try:
                self._queue_chunk(topic, p, num_partitions, values, keys, lengths, rows,
                                  timestamp_ms, tracker, i, deadline)  # fmt: skip
            except BaseException as e:
                for j in range(i, len(chunks)):
                    tracker.batch_done(tracker.slot(j), -1, e)
                raise
        return future

    def _bulk_groups(
        self, topic: str, n: int, partition: int | None, keys: Any, num_partitions: int
    ) -> list[tuple[int | None, np.ndarray | slice]]:
        if partition is not None:
            check_partition(topic, partition, num_partitions)
            return [(partition, slice(0, n))]
        if keys is None:
            return [(None, slice(0, n))]
        parts = np.fromiter(
            (-1 if k is None else partition_for_key(bytes(k), num_partitions)
             for k in _rows(keys)),
            dtype=np.int64, count=n,
        )  # fmt: skip
        if (parts < 0).any():
            raise ValueError("send_bulk with keys needs a key for every record (no None)")
        return [(int(p), np.flatnonzero(parts == p)) for p in np.unique(parts)]

    def _chunks(self, bounds: np.ndarray, index: np.ndarray | slice) -> list[np.ndarray | slice]:
        """Split rows so each chunk's records fit one batch (>= 1 record): ``batch_size``
        when they all fit one, else ``batch_max_size``."""
        cum = np.cumsum(bounds[index])
        capacity = self.batch_size - HEADER_SIZE
        if len(cum) and int(cum[-1]) > capacity:
            capacity = self.batch_max_size - HEADER_SIZE
        base = index.start if isinstance(index, slice) else 0
        out: list[np.ndarray | slice] = []
        start, done = 0, 0
        total = len(cum)
        while start < total:
            end = int(np.searchsorted(cum, done + capacity, side="right"))
            end = min(max(end, start + 1), start + MAX_BOUNDED_RECORDS - 1)
            if isinstance(index, slice):
                out.append(slice(base + start, base + end))
            else:
                out.append(index[start:end])
            done = int(cum[end - 1])
            start = end
        return out

    def _queue_chunk(
        self, topic: str, partition: int | None, num_partitions: int, values: Any, keys: Any,
        lengths: tuple[np.ndarray, np.ndarray | None, np.ndarray], rows: np.ndarray | slice,
        timestamp: int, tracker: BulkTracker, index: int, deadline: float,
    ) -> None:  # fmt: skip
        """Encode one chunk straight into a pool buffer and queue it as a closed batch."""
        value_lengths, key_lengths, bounds = lengths
        chunk_values = _take(values, rows)
        chunk_keys = None if keys is None else _take(keys, rows)
        bound = HEADER_SIZE + int(bounds[rows].sum())
        remaining_ms = max(0.0, (deadline - self._accumulator.clock_ms() / 1000) * 1000)
        buffer = self._accumulator.allocate(max(self.batch_size, bound), remaining_ms)
        try:
            size = encode_batch_bulk_into(
                buffer.memory, chunk_values, chunk_keys, timestamp,
                value_lengths=value_lengths[rows],
                key_lengths=None if key_lengths is None else key_lengths[rows],
            )  # fmt: skip
            acc = self._accumulator
            if acc.compress is not None:
                size = compress_records(buffer.memory, size, acc.codec, acc.compress)
            if size > self.max_request_size:
                raise MessageTooLargeError(
                    f"a record batch of {size} bytes exceeds max_request_size "
                    f"{self.max_request_size}"
                )
        except BaseException:
            self._accumulator.deallocate_buffer(buffer)
            raise
        sticky = partition is None
        if sticky:
            with self._partitioner_lock:
                partition = self._partitioner.partition(topic, num_partitions)
        assert partition is not None
        count = len(chunk_values)
        self._accumulator.append_closed(
            TopicPartition(topic, partition), buffer, size, count, tracker, index
        )
        if sticky:
            with self._partitioner_lock:
                self._partitioner.on_new_batch(topic, num_partitions, partition)


def _lengths(items: Any) -> np.ndarray:
    if isinstance(items, np.ndarray):
        width = items.shape[1] if items.ndim == 2 else items.dtype.itemsize
        return np.full(len(items), width, dtype=np.int64)
    return item_lengths(items)


def _rows(items: Any) -> Any:
    """Iterate raw rows (numpy S<n> items would lose trailing NULs, so use uint8 views)."""
    if isinstance(items, np.ndarray):
        if items.ndim == 1:
            items = np.ascontiguousarray(items).view(np.uint8).reshape(len(items), -1)
        return (row.tobytes() for row in items)
    return iter(items)


def _take(items: Any, rows: np.ndarray | slice) -> Any:
    if isinstance(items, np.ndarray) or isinstance(rows, slice):
        return items[rows]
    return [items[i] for i in rows.tolist()]
