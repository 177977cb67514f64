"""RecordAccumulator: per-partition queues of record batches built in BufferPool buffers.

Kafka's producer accumulator.  Each partition has a deque of :class:`ProducerBatch`;
only the last one is open for appends.  A batch owns one buffer of the producer's
private :class:`~clients.buffer_pool.BufferPool` (``buffer_memory`` total,
``batch_size`` poolable size) and its records are encoded straight into that buffer,
after 61 bytes left for the header (layout: :mod:`clients.records`)::

    buffer: | 61-byte batch header (written by close()) | record | record | ... | unused |
              ^ wire() = memoryview of [0, size) is sent as is, no copy

A record larger than ``batch_size`` gets a buffer of its own size.  ``append`` blocks
up to ``max_block_ms`` for memory (then the pool's BufferPoolTimeoutError).

Readiness (:meth:`RecordAccumulator.ready`), per partition, looking at its first batch:
sendable when a batch is full (or more than one is queued), its ``linger_ms`` passed,
a flush or close is in progress, or someone is blocked waiting for memory; a batch being
retried waits ``retry_backoff_ms`` instead of ``linger_ms``.

Ordering without idempotence: **one in-flight request per partition** (a partition is
*muted* from drain to the end of its response).  A drain may put several consecutive
batches of a partition into that one request (up to ``max_request_size``; the broker
appends them in order), so throughput does not suffer from the rule; a retried batch
goes back to the head of its deque, so no later batch can overtake it.

Ordering with idempotence (an :class:`~clients.idempotence.IdempotenceManager` is
given): no muting; the manager decides per partition whether its head batch may go
(up to 5 batches in flight, retries one at a time, nothing before a producer id).  A
drain takes consecutive new batches of a partition while it stays within that bound
(a retried batch travels alone), stamps each with producer id, epoch and base sequence
the first time it is drained (so sequences follow send order), then closes it (header
and CRC written; a batch closed earlier, e.g. by ``send_bulk``, is restamped and its
CRC recomputed).  Choice: Kafka sends one batch per partition per request; allowing
up to 5 new batches in one request measured 1.5x the one-partition bulk throughput at
``batch_size=16384`` (the broker checks the batches of a request in order).

Delivery timeout: batches that are not in flight and are older than
``delivery_timeout_ms`` are taken out by :meth:`expired_batches`; the sender fails them.

Costs: append O(record bytes) plus O(1) deque work; ready and drain O(partitions with
data); close of a batch is one CRC-32C pass over it.

Thread safety: every public method takes the accumulator lock; ``append`` may be called
from any number of threads while the sender thread calls ready/drain/reenqueue.  The
blocking buffer allocation happens outside the lock.
"""

from __future__ import annotations

import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from crc32c import crc32c

from clients.buffer_pool import Buffer, BufferPool
from clients.cluster_metadata import ClusterMetadata
from clients.errors import MiniKafkaError
from clients.idempotence import NO_SEQUENCE, SEQUENCE_MODULUS, IdempotenceManager
from clients.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    encode_varint,
)
from clients.types import BulkResult, Header, RecordMetadata, TopicPartition

_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. record_count
_PREFIX = struct.Struct(">qiibI")  # base_offset, batch_length, epoch, magic, crc
_PRODUCER = struct.Struct(">qhi")  # producer_id, producer_epoch, base_sequence
_PRODUCER_OFFSET = 43
RECORD_OVERHEAD_BOUND = 5 + 1 + 10 + 5 + 5 + 5 + 5  # varints around key/value, no headers


class AccumulatorClosedError(MiniKafkaError):
    """append after the producer was closed."""


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


def _zigzag_bytes(value: int) -> bytes:
    out = bytearray()
    encode_varint(value, out)
    return bytes(out)


_SMALL_VARINTS = [_zigzag_bytes(v) for v in range(4096)]  # varints of 0..4095, precomputed
_NULL = b"\x01"  # zig-zag -1


def _varint(value: int) -> bytes:
    return _SMALL_VARINTS[value] if 0 <= value < 4096 else _zigzag_bytes(value)


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> bytes:
    """One record as the batch carries it (length varint included)."""
    parts = [b"\x00", _varint(timestamp_delta), _varint(offset_delta)]
    if key is None:
        parts.append(_NULL)
    else:
        parts += (_varint(len(key)), key)
    if value is None:
        parts.append(_NULL)
    else:
        parts += (_varint(len(value)), value)
    parts.append(_varint(len(headers)))
    for h_key, h_value in headers:
        raw = h_key.encode("utf-8")
        parts += (_varint(len(raw)), raw)
        if h_value is None:
            parts.append(_NULL)
        else:
            parts += (_varint(len(h_value)), h_value)
    body = b"".join(parts)
    return _varint(len(body)) + body


def record_size_bound(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    size = RECORD_OVERHEAD_BOUND + (len(key) if key else 0) + (len(value) if value else 0)
    for h_key, h_value in headers:
        size += 10 + len(h_key) * 4 + (len(h_value) if h_value else 0)
    return size


def _sequenced_before(a: ProducerBatch, b: ProducerBatch) -> bool:
    """``a`` holds a sequence assigned before ``b``'s (both in a window < 2**30 wide)."""
    if a.base_sequence == NO_SEQUENCE:
        return False
    return 0 < (b.base_sequence - a.base_sequence) % SEQUENCE_MODULUS < SEQUENCE_MODULUS // 2


class BulkTracker:
    """Resolves one ``send_bulk`` future when all of its batches are done."""

    __slots__ = ("_lock", "future", "offsets", "partitions", "pending", "record_counts", "topic")

    def __init__(self, topic: str, future: Future[BulkResult], count: int) -> None:
        self.topic = topic
        self.future = future
        self.partitions = [-1] * count
        self.offsets = [-1] * count
        self.record_counts = [0] * count
        self.pending = count
        self._lock = threading.Lock()

    def batch_done(self, index: int, base_offset: int, error: BaseException | None) -> None:
        with self._lock:
            self.offsets[index] = base_offset
            self.pending -= 1
            last = self.pending == 0
        if error is not None:
            if not self.future.done():
                self.future.set_exception(error)
        elif last and not self.future.done():
            self.future.set_result(
                BulkResult(self.topic, self.partitions, self.offsets, self.record_counts)
            )


class ProducerBatch:
    """A batch being filled in a pooled buffer, then sent, maybe retried, then done."""

    __slots__ = (
        "attempts", "base_sequence", "base_timestamp", "buffer", "bulk", "closed",
        "created_ms", "done", "full", "futures", "in_flight", "max_timestamp",
        "maybe_written", "memory", "producer_epoch", "producer_id", "record_count",
        "retry_at_ms", "size", "tp",
    )  # fmt: skip

    def __init__(self, tp: TopicPartition, buffer: Buffer, created_ms: float) -> None:
        self.tp = tp
        self.buffer = buffer
        self.memory = buffer.memory
        self.size = HEADER_SIZE
        self.record_count = 0
        self.base_timestamp = 0
        self.max_timestamp = 0
        self.futures: list[tuple[Future[RecordMetadata], int]] = []
        self.bulk: tuple[BulkTracker, int] | None = None
        self.created_ms = created_ms
        self.attempts = 0
        self.retry_at_ms = 0.0
        self.full = False  # no more appends (a record did not fit, or closed)
        self.closed = False  # header written; bytes final
        self.in_flight = False
        self.done = False
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = NO_SEQUENCE
        # an attempt's outcome is unknown (lost response): resending under a new epoch
        # could duplicate it
        self.maybe_written = False

    def __repr__(self) -> str:
        return f"ProducerBatch({self.tp}, records={self.record_count}, bytes={self.size})"

    def try_append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        future: Future[RecordMetadata],
    ) -> bool:
        if self.full:
            return False
        if self.record_count == 0:
            self.base_timestamp = self.max_timestamp = timestamp
        record = encode_record(
            self.record_count, timestamp - self.base_timestamp, key, value, headers
        )
        end = self.size + len(record)
        if end > len(self.memory):
            self.full = True
            return False
        self.memory[self.size : end] = record
        self.size = end
        self.record_count += 1
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        self.futures.append((future, timestamp))
        return True

    def close(self) -> None:
        """Write header and CRC (idempotent); the batch is then immutable."""
        if self.closed:
            return
        self.full = self.closed = True
        mem = self.memory
        _AFTER_CRC.pack_into(
            mem, ATTRIBUTES_OFFSET, 0, self.record_count - 1, self.base_timestamp,
            self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
            self.record_count,
        )  # fmt: skip
        crc = crc32c(mem[ATTRIBUTES_OFFSET : self.size])
        _PREFIX.pack_into(mem, 0, 0, self.size - LOG_OVERHEAD, -1, MAGIC, crc)

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Stamp the idempotence fields (rewrites header and CRC if already closed).

        Only while the batch is not in flight: its buffer may be on the wire otherwise.
        """
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        if self.closed:
            mem = self.memory
            _PRODUCER.pack_into(mem, _PRODUCER_OFFSET, producer_id, producer_epoch, base_sequence)
            struct.pack_into(">I", mem, CRC_OFFSET, crc32c(mem[ATTRIBUTES_OFFSET : self.size]))

    def wire(self) -> memoryview:
        return self.memory[: self.size]

    def complete(
        self, base_offset: int, log_append_time_ms: int, error: BaseException | None
    ) -> None:
        """Resolve every future of the batch (exactly once)."""
        if self.done:
            return
        self.done = True
        futures, self.futures = self.futures, []
        if self.bulk is not None:
            tracker, index = self.bulk
            tracker.batch_done(index, base_offset, error)
            return
        topic, partition = self.tp
        for i, (future, timestamp) in enumerate(futures):
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                offset = base_offset + i if base_offset >= 0 else -1
                ts = log_append_time_ms if log_append_time_ms >= 0 else timestamp
                future.set_result(RecordMetadata(topic, partition, offset, ts))


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
    ) -> None:
        self.pool = pool
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
        future: Future[RecordMetadata],
        max_block_ms: float,
    ) -> tuple[bool, bool]:
        """Append one record; returns ``(batch_is_full, new_batch_created)``."""
        with self._cond:
            self._check_open()
            dq = self._batches.setdefault(tp, deque())
            if dq and dq[-1].try_append(timestamp, key, value, headers, future):
                return dq[-1].full or len(dq) > 1, False
        size = max(self.batch_size, HEADER_SIZE + record_size_bound(key, value, headers))
        buffer = self._allocate(size, max_block_ms)
        with self._cond:
            try:
                self._check_open()
            except AccumulatorClosedError:
                self.pool.deallocate(buffer)
                raise
            dq = self._batches.setdefault(tp, deque())
            if dq and dq[-1].try_append(timestamp, key, value, headers, future):
                self.pool.deallocate(buffer)  # someone else opened a batch meanwhile
                return dq[-1].full or len(dq) > 1, False
            batch = ProducerBatch(tp, buffer, self.clock_ms())
            if not batch.try_append(timestamp, key, value, headers, future):
                self.pool.deallocate(buffer)
                raise AssertionError("a fresh batch sized for the record must take it")
            dq.append(batch)
            self._incomplete += 1
            return len(dq) > 1 or batch.full, True

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
        batch = ProducerBatch(tp, buffer, self.clock_ms())
        batch.size = size
        batch.record_count = record_count
        batch.full = batch.closed = True
        batch.bulk = (tracker, index)
        tracker.partitions[index] = tp.partition
        tracker.record_counts[index] = record_count
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
                    taken = self._take_idempotent(tp, dq, max_request_size, sizes.get(leader, 0))
                else:
                    taken = self._take(dq, max_request_size, sizes.get(leader, 0))
                    if taken:
                        self._muted.add(tp)
                if taken:
                    out.setdefault(leader, []).extend(taken)
                    sizes[leader] = sizes.get(leader, 0) + sum(b.size for b in taken)
        return out

    def _take(
        self, dq: deque[ProducerBatch], max_request_size: int, used: int
    ) -> list[ProducerBatch]:
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

    def _sendable(self, tp: TopicPartition, dq: deque[ProducerBatch]) -> bool:
        if not dq:
            return False
        if self.idempotence is None:
            return tp not in self._muted
        return self.idempotence.can_send(tp, dq[0].base_sequence != NO_SEQUENCE)

    def _take_idempotent(
        self, tp: TopicPartition, dq: deque[ProducerBatch], max_request_size: int, used: int
    ) -> list[ProducerBatch]:
        """Batches stamped with (producer id, epoch, sequence) on their first drain.

        A retry (a batch holding a sequence) travels alone; new batches go together
        while the partition stays within its in-flight batch bound.
        """
        manager = self.idempotence
        assert manager is not None
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
                batch.set_producer_state(manager.producer_id, manager.producer_epoch, sequence)
            batch.close()
            batch.in_flight = True
            manager.on_send(tp)
            taken.append(batch)
            used += batch.size
            if retry:
                break
        return taken

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
                while index < len(dq) and _sequenced_before(dq[index], batch):
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
        self.pool.deallocate(batch.buffer)
        with self._cond:
            self._incomplete -= 1
            if self._incomplete == 0:
                self._cond.notify_all()

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
