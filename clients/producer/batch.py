"""ProducerBatch: one partition's record batch, encoded in place in a pooled buffer.

A batch owns one buffer of the producer's private :class:`~clients.memory.buffer_pool.BufferPool`
(``batch_size`` poolable size; a record larger than that gets a buffer of its own size;
a backlogged partition's batch may get ``batch_max_size``), or heap memory when it is a
part of a split batch (:mod:`clients.producer.split`).
Records are encoded straight into the buffer after 61 bytes left for the header
(layout: :mod:`clients.records`)::

    buffer: | 61-byte batch header (written by close()) | record | record | ... | unused |
              ^ wire() = memoryview of [0, size) is sent as is, no copy

What this module writes into the header (offsets as in :mod:`clients.records`)::

    offset  size  field                   written by
    0       8     base_offset (0)         close()
    8       4     batch_length            close()
    12      4     partition_leader_epoch  close() (-1; the leader stamps it)
    16      1     magic (2)               close()
    17      4     crc                     close(); recomputed by set_producer_state()
    21      2     attributes              close(): 0, or the codec (compression_type);
                                          bit 4 in a transaction (``transactional``;
                                          set_producer_state() on a closed batch)
    23      4     last_offset_delta       close()
    27      8     base_timestamp          close()
    35      8     max_timestamp           close()
    43      8     producer_id             close(); set_producer_state() on a closed batch
    51      2     producer_epoch          close(); set_producer_state() on a closed batch
    53      4     base_sequence           close(); set_producer_state() on a closed batch
    57      4     record_count            close()

With ``compression_type`` the records after the header are compressed in place when
the batch closes (:mod:`clients.producer.compression`; kept plain when that is not
smaller), so ``size`` shrinks; records are always appended uncompressed.

Lifecycle: filled by ``try_append`` (open, last of its partition's queue), full, then
closed on its first drain (records compressed, header and CRC written; the bytes are
final), in flight,
maybe re-enqueued for a retry, then ``complete`` resolves its futures exactly once.
With idempotence the (producer id, epoch, base sequence) fields are stamped on the
first drain; a batch closed earlier (``send_bulk``) is restamped and its CRC recomputed.
:class:`BulkTracker` resolves one ``send_bulk`` future over the batches it was cut into.

Futures: the records of a batch share one :class:`~clients.producer.future.BatchResult`;
``try_append`` hands out a light :class:`~clients.producer.future.RecordFuture` (the
shared result, the record's index, its timestamp) and ``complete`` resolves them all at
once.

Costs: ``try_append`` is O(record bytes) (small varints come from a precomputed
table; a header-less record takes a shorter path); ``close`` and a restamp are one
CRC-32C pass over the batch; ``complete`` is O(1) plus the callbacks added to the
records' futures.

Thread safety: a ProducerBatch is not locked itself: it is appended to under the
accumulator lock and, once drained, owned by the sender thread.  ``BulkTracker``
takes its own lock, so batches of one ``send_bulk`` may complete on any thread.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Sequence
from concurrent.futures import Future

from crc32c import crc32c

from clients.memory.handles import Buffer
from clients.producer.compression import Compressor, pack_records
from clients.producer.future import BatchResult, RecordFuture
from clients.producer.idempotence import NO_SEQUENCE
from clients.protocol.topics import TopicPartition
from clients.records.batch import (
    AFTER_CRC,
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    PREFIX,
    TRANSACTIONAL_MASK,
)
from clients.records.varint import encode_varint
from clients.types import BulkResult, Header

_PRODUCER = struct.Struct(">qhi")  # producer_id, producer_epoch, base_sequence
_PRODUCER_OFFSET = 43
_ATTRIBUTES = struct.Struct(">h")
RECORD_OVERHEAD_BOUND = 5 + 1 + 10 + 5 + 5 + 5 + 5  # varints around key/value, no headers


def _zigzag_bytes(value: int) -> bytes:
    out = bytearray()
    encode_varint(value, out)
    return bytes(out)


_SMALL_VARINTS = [_zigzag_bytes(v) for v in range(4096)]  # varints of 0..4095, precomputed
_NULL = b"\x01"  # zig-zag -1


def _varint(value: int) -> bytes:
    return _SMALL_VARINTS[value] if 0 <= value < 4096 else _zigzag_bytes(value)


def _encode_plain(offset_delta: int, timestamp_delta: int, key: bytes | None,
                  value: bytes | None) -> bytes:
    """:func:`encode_record` of a header-less record (the common case, ~2x faster)."""
    body = b"".join((b"\x00", _varint(timestamp_delta), _varint(offset_delta),
                     _NULL if key is None else _varint(len(key)) + key,
                     _NULL if value is None else _varint(len(value)) + value, b"\x00"))
    return _varint(len(body)) + body


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> bytes:
    """One record as the batch carries it (length varint included)."""
    if not headers:
        return _encode_plain(offset_delta, timestamp_delta, key, value)
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


class BulkSlot:
    """One batch's entry in a ``send_bulk`` result: where it went and how many records.

    ``chunk`` is the index of the chunk the call was cut into that the batch carries
    records of (a split batch's parts share it)."""

    __slots__ = ("base_offset", "chunk", "partition", "record_count")

    def __init__(self, chunk: int, partition: int = -1, record_count: int = 0) -> None:
        self.chunk = chunk
        self.partition = partition
        self.record_count = record_count
        self.base_offset = -1


class BulkTracker:
    """Resolves one ``send_bulk`` future when all of its batches are done.

    The call is cut into ``count`` chunks, one batch each when queued; chunk ``i``'s
    batch is :meth:`slot` ``(i)``.  A batch the broker refused as too large is split
    (:mod:`clients.producer.split`): :meth:`split` puts its parts' slots in its place,
    so the :class:`~clients.types.BulkResult` has one entry per batch as written, in
    record order.
    """

    __slots__ = ("_chunks", "_lock", "_settled", "future", "pending", "topic")

    def __init__(self, topic: str, future: Future[BulkResult], count: int) -> None:
        self.topic = topic
        self.future = future
        self._chunks = [[BulkSlot(i)] for i in range(count)]
        self.pending = count
        self._settled = False
        self._lock = threading.Lock()

    def slot(self, chunk: int) -> BulkSlot:
        """The slot of chunk ``chunk``'s batch (before any split of it)."""
        return self._chunks[chunk][0]

    def split(self, slot: BulkSlot, parts: Sequence[BulkSlot]) -> None:
        """``slot``'s batch now travels as ``parts`` (in record order); call before any
        part can complete."""
        with self._lock:
            slots = self._chunks[slot.chunk]
            at = next(i for i, s in enumerate(slots) if s is slot)
            slots[at:at + 1] = parts
            self.pending += len(parts) - 1

    def batch_done(self, slot: BulkSlot, base_offset: int, error: BaseException | None) -> None:
        with self._lock:
            slot.base_offset = base_offset
            self.pending -= 1
            last = self.pending == 0
            # decided under the lock: two batches failing at once must not both settle it
            settle = not self._settled and (error is not None or last)
            self._settled = self._settled or settle
        if not settle:
            return
        if error is not None:
            self.future.set_exception(error)
            return
        slots = [s for chunk in self._chunks for s in chunk]
        self.future.set_result(BulkResult(self.topic, [s.partition for s in slots],
                                          [s.base_offset for s in slots],
                                          [s.record_count for s in slots]))


class ProducerBatch:
    """A batch being filled in a pooled buffer, then sent, maybe retried, then done."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "base_timestamp",
        "buffer",
        "bulk",
        "closed",
        "codec",
        "compress",
        "created_ms",
        "done",
        "full",
        "in_flight",
        "max_timestamp",
        "maybe_written",
        "memory",
        "producer_epoch",
        "producer_id",
        "record_count",
        "result",
        "retry_at_ms",
        "size",
        "tp",
        "transactional",
    )  # fmt: skip

    def __init__(
        self, tp: TopicPartition, buffer: Buffer | memoryview, created_ms: float,
        codec: int = 0, compress: Compressor | None = None,
    ) -> None:  # fmt: skip
        self.tp = tp
        self.codec = codec  # compression_type's codec number (0: none)
        self.compress = compress
        # a pooled buffer, or None for heap memory (the parts of a split batch)
        self.buffer: Buffer | None = buffer if isinstance(buffer, Buffer) else None
        self.memory = buffer.memory if isinstance(buffer, Buffer) else buffer
        self.size = HEADER_SIZE
        self.record_count = 0
        self.base_timestamp = 0
        self.max_timestamp = 0
        # the outcome every record's future shares (made by the first try_append)
        self.result: BatchResult | None = None
        self.bulk: tuple[BulkTracker, BulkSlot] | None = None
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
        self.transactional = False  # attributes bit 4 (set before the batch closes)
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
    ) -> RecordFuture | None:
        """Encode the record into the buffer; its future, or None when it does not fit."""
        if self.full:
            return None
        count = self.record_count
        if count == 0:
            self.base_timestamp = self.max_timestamp = timestamp
            self.result = BatchResult(self.tp.topic, self.tp.partition)
        delta = timestamp - self.base_timestamp
        record = (encode_record(count, delta, key, value, headers) if headers
                  else _encode_plain(count, delta, key, value))  # fmt: skip
        start = self.size
        end = start + len(record)
        if end > len(self.memory):
            self.full = True
            return None
        self.memory[start:end] = record
        self.size = end
        self.record_count = count + 1
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        assert self.result is not None
        return RecordFuture(self.result, count, timestamp)

    def close(self) -> None:
        """Write header and CRC (idempotent); the batch is then immutable."""
        if self.closed:
            return
        self.full = self.closed = True
        mem = self.memory
        attributes = 0
        if self.compress is not None and self.record_count:
            self.size, attributes = pack_records(mem, self.size, self.codec, self.compress)
        if self.transactional:
            attributes |= TRANSACTIONAL_MASK
        AFTER_CRC.pack_into(
            mem, ATTRIBUTES_OFFSET, attributes, self.record_count - 1, self.base_timestamp,
            self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
            self.record_count,
        )  # fmt: skip
        crc = crc32c(mem[ATTRIBUTES_OFFSET : self.size])
        PREFIX.pack_into(mem, 0, 0, self.size - LOG_OVERHEAD, -1, MAGIC, crc)

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int,
                           transactional: bool = False) -> None:
        """Stamp the idempotence fields and the transactional bit (rewrites header and
        CRC if already closed: a ``send_bulk`` batch is closed when it is queued).

        Only while the batch is not in flight: its buffer may be on the wire otherwise.
        """
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.transactional = transactional
        if self.closed:
            mem = self.memory
            (attributes,) = _ATTRIBUTES.unpack_from(mem, ATTRIBUTES_OFFSET)
            attributes = (attributes | TRANSACTIONAL_MASK if transactional
                          else attributes & ~TRANSACTIONAL_MASK)  # fmt: skip
            _ATTRIBUTES.pack_into(mem, ATTRIBUTES_OFFSET, attributes)
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
        if self.bulk is not None:
            tracker, slot = self.bulk
            tracker.batch_done(slot, base_offset, error)
        elif self.result is not None:
            self.result.complete(base_offset, log_append_time_ms, error)
