"""RecordAccumulator: per-partition queues of record batches built in BufferPool buffers.

Kafka's producer accumulator.  Each partition has a deque of
:class:`~clients.producer.batch.ProducerBatch` (buffer layout and header stamping live
there); only the last one is open for appends.  Batches take their buffers from the
producer's private :class:`~clients.memory.buffer_pool.BufferPool` (``buffer_memory`` total,
``batch_size`` poolable size); a record larger than ``batch_size`` gets a buffer of its
own size.  ``append`` blocks up to ``max_block_ms`` for memory (then the pool's
BufferPoolTimeoutError).

Batch growth (KIP-782's ``batch.max.size``, ``batch_max_size`` here): when a partition
already has ``GROW_AFTER_QUEUED_BATCHES`` undrained batches as a new one is opened, its
records are waiting behind the in-flight window anyway (an idempotent partition has at
most 5 batches in flight: 5 x 16 KiB per round trip caps one partition at a few tens
of MB/s), so the new batch takes a ``batch_max_size`` buffer if the pool has one free
right now (:meth:`~clients.memory.buffer_pool.BufferPool.try_allocate`, never waiting)
and ``batch_size`` otherwise.  A partition that keeps up never grows a batch.  A batch
the broker refuses as too large (MESSAGE_TOO_LARGE, e.g. a topic's lower
``max.message.bytes``) is split and resent (:mod:`clients.producer.split`).

Readiness (:meth:`RecordAccumulator.ready`), per partition, looking at its first batch:
sendable when a batch is full (or more than one is queued), its ``linger_ms`` passed,
a flush or close is in progress, or someone is blocked waiting for memory; a batch being
retried waits ``retry_backoff_ms`` instead of ``linger_ms``.

Draining (:meth:`RecordAccumulator.drain`): partitions are visited round-robin from a
rotating start; what one partition contributes to its leader's request follows the
ordering rules of :mod:`clients.producer.drain` (without idempotence the partition
is *muted* from drain to the end of its response: one in-flight request per partition;
with idempotence the :class:`~clients.producer.idempotence.IdempotenceManager` bounds the
batches in flight and sequences are stamped on the first drain).  A retried batch goes
back to the head of its deque (after queued batches with earlier sequences), so no
later batch can overtake it.

Delivery timeout: batches that are not in flight and are older than
``delivery_timeout_ms`` are taken out by :meth:`expired_batches`; the sender fails them.

Costs: append O(record bytes) plus O(1) deque work; ready and drain O(partitions with
data); close of a batch is one CRC-32C pass over it.

Thread safety: every public method takes the accumulator lock; ``append`` may be called
from any number of threads while the sender thread calls ready/drain/reenqueue.  The
blocking buffer allocation happens outside the lock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from clients.memory.buffer_pool import BufferPool
from clients.memory.handles import Buffer
from clients.network.cluster_metadata import ClusterMetadata
from clients.producer.batch import BulkTracker, ProducerBatch, record_size_bound
from clients.producer.compression import Compressor
from clients.producer.drain import sequenced_before, take_batches, take_idempotent
from clients.producer.future import RecordFuture
from clients.producer.idempotence import NO_SEQUENCE, IdempotenceManager
from clients.protocol.errors import MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.records.batch import HEADER_SIZE
from clients.types import Header

__all__ = ["AccumulatorClosedError", "RecordAccumulator", "monotonic_ms"]


class AccumulatorClosedError(MiniKafkaError):
    """append after the producer was closed."""


GROW_AFTER_QUEUED_BATCHES = 2  # undrained batches of a partition that mean a backlog


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class RecordAccumulator:
    """Per-partition batch queues over a BufferPool (see the module docstring)."""

    def __init__(
        self,
        pool: BufferPool,
        *,
        batch_size: int,
        linger_ms: float,
        retry_backoff_ms: float,
        delivery_timeout_ms: float,
        clock_ms: Callable[[], float] = monotonic_ms,
        idempotence: IdempotenceManager | None = None,
        codec: int = 0,
        compress: Compressor | None = None,
        batch_max_size: int = 0,
    ) -> None:
        self.pool = pool
        # a backlogged partition's new batch may take a buffer this large (0: batch_size)
        self.batch_max_size = max(batch_max_size, batch_size)
        self.codec = codec  # compression_type of new batches (compressed when they close)
        self.compress = compress
        self.idempotence = idempotence
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.clock_ms = clock_ms
        self._cond = threading.Condition(threading.Lock())
        self._batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._muted: set[TopicPartition] = set()
        self._incomplete = 0
        self._waiting_for_memory = 0
        self._flushes = 0
        self._closed = False
        self._drain_start = 0

    # ------------------------------------------------------------ appending
    def append(
        self,
        tp: TopicPartition,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        max_block_ms: float,
    ) -> tuple[RecordFuture, bool, bool]:
        """Append one record; returns ``(its future, a_batch_filled, new_batch_created)``.

        A batch fills only when a record no longer fits, which is also the only way a new
        batch starts behind it: so ``a_batch_filled`` (the partition's open batch was
        full and a new one took the record) is when the sticky partitioner moves on, and
        ``new_batch_created`` is the one moment the sender needs a wake-up (a new batch
        to linger on, or a full one to send).  An append into the open batch reports
        ``(False, False)``: nothing the sender does not know already - waking it per
        record cost a socket write each while batches queued behind the in-flight ones.
        """
        backlog = 0
        with self._cond:
            self._check_open()
            dq = self._batches.get(tp)
            if dq:
                future = dq[-1].try_append(timestamp, key, value, headers)
                if future is not None:
                    return future, False, False
                backlog = len(dq)
        size = max(self.batch_size, HEADER_SIZE + record_size_bound(key, value, headers))
        buffer = None
        if backlog >= GROW_AFTER_QUEUED_BATCHES and self.batch_max_size > size:
            buffer = self.pool.try_allocate(self.batch_max_size)  # only if free right now
        if buffer is None:
            buffer = self._allocate(size, max_block_ms)
        with self._cond:
            try:
                self._check_open()
            except AccumulatorClosedError:
                self.pool.deallocate(buffer)
                raise
            dq = self._batches.setdefault(tp, deque())
            if dq:
                future = dq[-1].try_append(timestamp, key, value, headers)
                if future is not None:
                    self.pool.deallocate(buffer)  # someone else opened a batch meanwhile
                    return future, False, False
            batch = ProducerBatch(tp, buffer, self.clock_ms(), self.codec, self.compress)
            future = batch.try_append(timestamp, key, value, headers)
            if future is None:
                self.pool.deallocate(buffer)
                raise AssertionError("a fresh batch sized for the record must take it")
            dq.append(batch)
            self._incomplete += 1
            return future, len(dq) > 1, True

    def allocate(self, size: int, max_block_ms: float) -> Buffer:
        """A buffer for a caller-built batch (send_bulk), counted as waiting for memory."""
        return self._allocate(size, max_block_ms)

    def _allocate(self, size: int, max_block_ms: float) -> Buffer:
        with self._cond:
            self._waiting_for_memory += 1
        try:
            return self.pool.allocate(size, max_block_ms)
        finally:
            with self._cond:
                self._waiting_for_memory -= 1

    def deallocate_buffer(self, buffer: Buffer) -> None:
        """Give back a buffer from :meth:`allocate` that was never queued."""
        self.pool.deallocate(buffer)

    def append_closed(
        self, tp: TopicPartition, buffer: Buffer, size: int, record_count: int,
        tracker: BulkTracker, index: int,
    ) -> None:  # fmt: skip
        """Queue a batch whose bytes are already final in ``buffer[:size]`` (bulk path)."""
        # the codec of its records (compressed already), should a split re-encode them
        batch = ProducerBatch(tp, buffer, self.clock_ms(), self.codec, self.compress)
        batch.size = size
        batch.record_count = record_count
        batch.full = batch.closed = True
        slot = tracker.slot(index)
        slot.partition, slot.record_count = tp.partition, record_count
        batch.bulk = (tracker, slot)
        with self._cond:
            try:
                self._check_open()
            except AccumulatorClosedError:
                self.pool.deallocate(buffer)
                raise
            dq = self._batches.setdefault(tp, deque())
            if dq:
                dq[-1].full = True  # earlier records of the partition keep their order
            dq.append(batch)
            self._incomplete += 1

    def _check_open(self) -> None:
        if self._closed:
            raise AccumulatorClosedError("producer is closed")

    # ------------------------------------------------------------ sender side
    def ready(self, metadata: ClusterMetadata, now_ms: float) -> tuple[set[int], float, set[str]]:
        """``(nodes with sendable data, ms until the next check, topics without a leader)``."""
        ready: set[int] = set()
        unknown: set[str] = set()
        next_ms = float("inf")
        with self._cond:
            exhausted = self._waiting_for_memory > 0
            forced = exhausted or self._flushes > 0 or self._closed
            for tp, dq in self._batches.items():
                if not self._sendable(tp, dq):
                    continue
                leader = metadata.leader_for(tp)
                if leader is None:
                    unknown.add(tp.topic)
                    continue
                if leader in ready:
                    continue
                first = dq[0]
                backing_off = first.attempts > 0 and now_ms < first.retry_at_ms
                if backing_off:
                    next_ms = min(next_ms, first.retry_at_ms - now_ms)
                    continue
                if forced or first.full or len(dq) > 1:
                    ready.add(leader)
                    continue
                waited = now_ms - first.created_ms
                if waited >= self.linger_ms:
                    ready.add(leader)
                else:
                    next_ms = min(next_ms, self.linger_ms - waited)
        return ready, next_ms, unknown

    def drain(
        self, metadata: ClusterMetadata, nodes: set[int], max_request_size: int, now_ms: float
    ) -> dict[int, list[ProducerBatch]]:
        """Take sendable batches for each node (one request each); mutes their partitions."""
        out: dict[int, list[ProducerBatch]] = {}
        with self._cond:
            tps = [tp for tp, dq in self._batches.items() if self._sendable(tp, dq)]
            if not tps:
                return out
            start = self._drain_start % len(tps)
            self._drain_start += 1
            sizes: dict[int, int] = {}
            for tp in tps[start:] + tps[:start]:
                leader = metadata.leader_for(tp)
                if leader is None or leader not in nodes:
                    continue
                dq = self._batches[tp]
                if dq[0].attempts > 0 and now_ms < dq[0].retry_at_ms:
                    continue
                if self.idempotence is not None:
                    taken = take_idempotent(
                        self.idempotence, tp, dq, max_request_size, sizes.get(leader, 0)
                    )
                else:
                    taken = take_batches(dq, max_request_size, sizes.get(leader, 0))
                    if taken:
                        self._muted.add(tp)
                if taken:
                    out.setdefault(leader, []).extend(taken)
                    sizes[leader] = sizes.get(leader, 0) + sum(b.size for b in taken)
        return out

    def _sendable(self, tp: TopicPartition, dq: deque[ProducerBatch]) -> bool:
        if not dq:
            return False
        if self.idempotence is None:
            return tp not in self._muted
        return self.idempotence.can_send(tp, dq[0].base_sequence != NO_SEQUENCE)

    def reset_sequences(self, abandon: Callable[[ProducerBatch], bool]) -> list[ProducerBatch]:
        """Before an epoch bump: batches holding a sequence lose it or are taken out.

        ``abandon(batch)`` True removes the batch and returns it (the caller fails it);
        otherwise its sequence is cleared and it will be restamped on its next drain.
        """
        out: list[ProducerBatch] = []
        with self._cond:
            for dq in self._batches.values():
                if not any(b.base_sequence != NO_SEQUENCE for b in dq):
                    continue
                keep = []
                for b in dq:
                    if b.base_sequence == NO_SEQUENCE:
                        keep.append(b)
                    elif abandon(b):
                        out.append(b)
                    else:
                        b.set_producer_state(-1, -1, NO_SEQUENCE)
                        keep.append(b)
                dq.clear()
                dq.extend(keep)
        return out

    def unmute(self, tp: TopicPartition) -> None:
        with self._cond:
            self._muted.discard(tp)

    def reenqueue(self, batches: Sequence[ProducerBatch], now_ms: float) -> None:
        """Put batches back at the head of their deques, in their original order.

        A batch with a sequence goes after the queued batches with earlier sequences
        (batches of one partition may come back from different requests in any order).
        """
        with self._cond:
            for batch in reversed(batches):
                batch.in_flight = False
                batch.attempts += 1
                batch.retry_at_ms = now_ms + self.retry_backoff_ms
                dq = self._batches.setdefault(batch.tp, deque())
                if batch.base_sequence == NO_SEQUENCE:
                    dq.appendleft(batch)
                    continue
                index = 0
                while index < len(dq) and sequenced_before(dq[index], batch):
                    index += 1
                dq.insert(index, batch)

    def expired_batches(self, now_ms: float) -> list[ProducerBatch]:
        """Remove and return queued batches past ``delivery_timeout_ms``."""
        out: list[ProducerBatch] = []
        limit = now_ms - self.delivery_timeout_ms
        with self._cond:
            for dq in self._batches.values():
                if dq and dq[0].created_ms <= limit:
                    keep = [b for b in dq if b.created_ms > limit]
                    out.extend(b for b in dq if b.created_ms <= limit)
                    dq.clear()
                    dq.extend(keep)
        return out

    def is_expired(self, batch: ProducerBatch, now_ms: float) -> bool:
        return now_ms - batch.created_ms >= self.delivery_timeout_ms

    def deallocate(self, batch: ProducerBatch) -> None:
        """The batch is done: return its buffer and count it complete."""
        if batch.buffer is not None:
            self.pool.deallocate(batch.buffer)
        with self._cond:
            self._incomplete -= 1
            if self._incomplete == 0:
                self._cond.notify_all()

    def replace_split(self, batch: ProducerBatch, parts: Sequence[ProducerBatch]) -> None:
        """``batch`` (drained, not queued) was split into ``parts``: they count as
        incomplete from now (the caller re-enqueues them) and ``batch`` is done."""
        with self._cond:
            self._incomplete += len(parts)
        self.deallocate(batch)

    def undrained_batches(self) -> list[ProducerBatch]:
        with self._cond:
            out = [b for dq in self._batches.values() for b in dq]
            for dq in self._batches.values():
                dq.clear()
            return out

    # ------------------------------------------------------------ flush / close
    @property
    def incomplete(self) -> int:
        with self._cond:
            return self._incomplete

    def has_undrained(self) -> bool:
        with self._cond:
            return any(self._batches.values())

    def begin_flush(self) -> None:
        with self._cond:
            self._flushes += 1

    def end_flush(self) -> None:
        with self._cond:
            self._flushes -= 1

    def await_completion(self, timeout_s: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._incomplete == 0, timeout=timeout_s)

    def close(self) -> None:
        """No more appends; everything queued becomes sendable at once."""
        with self._cond:
            self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def metrics(self) -> dict[str, Any]:
        with self._cond:
            return {
                "incomplete_batches": self._incomplete,
                "queued_batches": sum(len(dq) for dq in self._batches.values()),
                "muted_partitions": len(self._muted),
                "waiting_for_memory": self._waiting_for_memory,
            }
