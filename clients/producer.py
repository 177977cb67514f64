"""Producer: ``send`` records into a RecordAccumulator; a sender thread ships batches.

Data path::

    send()/send_bulk()  --append-->  RecordAccumulator (BufferPool buffers, per partition)
                                          |  ready()/drain(): per leader node
    sender thread  <---------------------'
       one Produce v0 request per node: topics -> partitions -> Records (the batches of
       a partition concatenated; a single batch is sent straight from its pooled buffer)
       responses -> futures resolved, buffers returned to the pool

Semantics (Kafka's, simplified):

- ``acks`` 0 / 1 / ``"all"`` (= -1, the default).  With acks=0 no response is awaited
  and futures resolve with offset -1 once the request is written.
- **Idempotence** (``enable_idempotence``, on by default, see :mod:`clients.idempotence`
  and docs/producer.md): the producer gets a producer id (InitProducerId) and stamps
  every batch with (producer id, epoch, sequence) per partition, so a batch resent after
  a lost response is recognised by the broker and appended once; up to
  ``max_in_flight_requests_per_connection`` (<= 5) batches per partition are in flight
  and order is kept across retries.  As in Kafka 3: when ``enable_idempotence`` is left
  unset, idempotence is on unless a setting conflicts with it (``acks`` 0/1,
  ``retries=0``, more than 5 in flight), in which case it is off (at-least-once); set
  to True explicitly, such a conflict is an :class:`InvalidConfigError`.  A fenced
  producer (a newer epoch of its id wrote to a partition) or a broker that does not
  serve InitProducerId is fatal: pending futures fail and ``send`` raises the error.
- keyed records go to ``murmur2(key) % partitions``; null keys use the sticky
  partitioner (switches partition when a batch fills).
- retriable errors (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, connection loss,
  request timeout, ...) are retried after ``retry_backoff_ms`` (metadata refreshed first
  for leadership errors) while ``retries`` and ``delivery_timeout_ms`` allow; then the
  batch's futures fail with the error.
- **Ordering** without idempotence: at most one in-flight request per partition
  (several batches of a partition may share it), and a retried batch returns to the
  head of its queue, so a partition's records are appended in send order even across
  retries and reconnects.  ``max_in_flight_requests_per_connection`` bounds requests
  per broker (partitions of one broker are spread over them).  Without idempotence a
  retry after a lost response may duplicate a batch (at-least-once), as in Kafka.
- ``debug_drop_response_ratio`` (test-only fault hook, default 0): that fraction of
  produce responses is discarded after the broker answered, as if lost on the network
  (chosen by ``random.Random(debug_drop_seed)``), so batches are retried; with
  idempotence off this shows duplicates, with it on it must not.
- ``send`` blocks at most ``max_block_ms`` (metadata for the topic, then memory in the
  pool); beyond that it raises :class:`~clients.errors.RequestTimedOutError` (for memory
  the pool's ``BufferPoolTimeoutError`` subclass).

Memory: one private BufferPool (``buffer_memory`` rounded down to a multiple of
``batch_size``, at least one batch) holds every unsent byte; nothing else grows with
the backlog.  Costs: ``send`` is O(record bytes) plus a lock and a Future; ``send_bulk``
encodes ``batch_size`` chunks with numpy (O(bytes), no per-record Python).

Thread safety: ``send``, ``send_bulk`` and ``flush`` may be called from any threads;
futures are resolved on the sender thread (keep callbacks short).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from clients.accumulator import (
    HEADER_SIZE,
    RECORD_OVERHEAD_BOUND,
    BulkTracker,
    RecordAccumulator,
    record_size_bound,
)
from clients.buffer_pool import BufferPool
from clients.cluster_metadata import ClusterMetadata, parse_bootstrap
from clients.errors import InvalidConfigError, MessageTooLargeError, RequestTimedOutError
from clients.idempotence import MAX_IN_FLIGHT_PER_PARTITION, IdempotenceManager
from clients.partitioner import StickyPartitioner, partition_for_key
from clients.records_bulk import (
    MAX_BOUNDED_RECORDS,
    batch_size_bound,
    encode_batch_bulk_into,
    item_lengths,
)
from clients.sender import DeliveryTimeoutError, Sender
from clients.topics import validate_topic_name
from clients.types import BulkResult, Header, RecordMetadata, TopicPartition

__all__ = ["DeliveryTimeoutError", "Producer"]

_MAX_TOPICS_SEEN = 10_000
_ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}


def _check_positive(name: str, value: Any, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidConfigError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class Producer:
    """Kafka-like producer (see the module docstring)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str | None = None,
        acks: int | str | None = None,
        enable_idempotence: bool | None = None,
        linger_ms: int = 5,
        batch_size: int = 16384,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: int = 60_000,
        retries: int = 2_147_483_647,
        retry_backoff_ms: int = 100,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        max_in_flight_requests_per_connection: int = 5,
        max_request_size: int = 1024 * 1024,
        metadata_max_age_ms: int = 300_000,
        debug_drop_response_ratio: float = 0.0,
        debug_drop_seed: int | None = None,
    ) -> None:
        if acks is not None and acks not in _ACKS:
            raise InvalidConfigError(f"acks must be 0, 1, -1 or 'all', got {acks!r}")
        _check_positive("linger_ms", linger_ms, 0)
        _check_positive("batch_size", batch_size, HEADER_SIZE + RECORD_OVERHEAD_BOUND)
        _check_positive("buffer_memory", buffer_memory, batch_size)
        _check_positive("max_block_ms", max_block_ms, 0)
        _check_positive("retries", retries, 0)
        _check_positive("retry_backoff_ms", retry_backoff_ms, 0)
        _check_positive("request_timeout_ms", request_timeout_ms)
        _check_positive("max_in_flight_requests_per_connection",
                        max_in_flight_requests_per_connection)  # fmt: skip
        _check_positive("max_request_size", max_request_size, HEADER_SIZE + RECORD_OVERHEAD_BOUND)
        if delivery_timeout_ms < linger_ms + request_timeout_ms:
            raise InvalidConfigError(
                f"delivery_timeout_ms ({delivery_timeout_ms}) must be >= linger_ms + "
                f"request_timeout_ms ({linger_ms + request_timeout_ms})"
            )
        if not (isinstance(debug_drop_response_ratio, int | float)
                and 0.0 <= debug_drop_response_ratio < 1.0):  # fmt: skip
            raise InvalidConfigError(
                f"debug_drop_response_ratio must be in [0, 1), got {debug_drop_response_ratio!r}"
            )
        self.acks = -1 if acks is None else _ACKS[acks]
        self.enable_idempotence = _resolve_idempotence(
            enable_idempotence, self.acks, retries, max_in_flight_requests_per_connection
        )
        self.client_id = client_id or f"producer-{os.getpid()}-{id(self):x}"
        self.batch_size = batch_size
        self.max_block_ms = max_block_ms
        self.max_request_size = max_request_size
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self._metadata = ClusterMetadata(
            retry_backoff_ms=retry_backoff_ms, metadata_max_age_ms=metadata_max_age_ms
        )
        self._pool = BufferPool.create(buffer_memory - buffer_memory % batch_size, batch_size)
        idempotence = (
            IdempotenceManager(max_in_flight_requests_per_connection)
            if self.enable_idempotence else None
        )  # fmt: skip
        self._accumulator = RecordAccumulator(
            self._pool,
            batch_size=batch_size,
            linger_ms=linger_ms,
            retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            idempotence=idempotence,
        )
        self._partitioner = StickyPartitioner()
        self._partitioner_lock = threading.Lock()
        self._closed = False
        self._send_now = linger_ms == 0  # nothing to wait for: ship from this thread
        self._topics_seen: set[str] = set()  # validated and registered with the metadata
        self._sender = Sender(
            parse_bootstrap(bootstrap_servers),
            self._metadata,
            self._accumulator,
            client_id=self.client_id,
            acks=self.acks,
            retries=retries,
            retry_backoff_ms=retry_backoff_ms,
            request_timeout_ms=request_timeout_ms,
            max_in_flight=max_in_flight_requests_per_connection,
            max_request_size=max_request_size,
            idempotence=idempotence,
            debug_drop_response_ratio=float(debug_drop_response_ratio),
            debug_drop_seed=debug_drop_seed,
        )
        self._sender.start()

    # ------------------------------------------------------------ sending
    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Future[RecordMetadata]:
        """Queue one record; the future resolves to its RecordMetadata or fails."""
        self._check_usable()
        if topic not in self._topics_seen:
            validate_topic_name(topic)
        key = _as_bytes("key", key)
        value = _as_bytes("value", value)
        hdrs = _check_headers(headers)
        timestamp = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        size = HEADER_SIZE + record_size_bound(key, value, hdrs)
        if size > self.max_request_size or size > self._pool.total_bytes:
            raise MessageTooLargeError(
                f"record of about {size} bytes exceeds max_request_size "
                f"{self.max_request_size} or buffer_memory {self._pool.total_bytes}"
            )
        deadline = time.monotonic() + self.max_block_ms / 1000
        num_partitions = self._wait_on_metadata(topic, deadline)
        sticky = False
        if partition is not None:
            _check_partition(topic, partition, num_partitions)
        elif key is not None:
            partition = partition_for_key(key, num_partitions)
        else:
            with self._partitioner_lock:
                partition = self._partitioner.partition(topic, num_partitions)
            sticky = True
        future: Future[RecordMetadata] = Future()
        remaining_ms = max(0.0, (deadline - time.monotonic()) * 1000)
        full, new_batch = self._accumulator.append(
            TopicPartition(topic, partition), timestamp, key, value, hdrs, future, remaining_ms
        )
        if sticky and full:
            with self._partitioner_lock:
                self._partitioner.on_new_batch(topic, num_partitions, partition)
        if self._send_now:
            self._sender.send_now()
        elif full or new_batch:
            self._sender.notify_data()
        return future

    def send_bulk(
        self,
        topic: str,
        values: Sequence[bytes | None] | np.ndarray,
        partition: int | None = None,
        keys: Sequence[bytes | None] | np.ndarray | None = None,
        timestamp_ms: int | None = None,
    ) -> Future[BulkResult]:
        """Queue many header-less records at once, encoded batch by batch with numpy.

        ``values`` (and ``keys``): a sequence of bytes/None, a fixed-size ``S<n>`` array
        or a 2-D uint8 array (one row per record).  Records are cut into chunks that fit
        ``batch_size``; each chunk becomes one batch.  With keys, records are grouped by
        their key's partition (order kept within a partition); without keys and
        partition, each chunk goes to the sticky partition.  The future resolves to a
        :class:`BulkResult` (partition, base offset and record count per batch).  If
        ``max_block_ms`` runs out midway the error is raised and the chunks already
        queued are still sent.
        """
        self._check_usable()
        validate_topic_name(topic)
        n = len(values)
        future: Future[BulkResult] = Future()
        if n == 0:
            future.set_result(BulkResult(topic, [], [], []))
            return future
        if keys is not None and len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        timestamp = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        deadline = time.monotonic() + self.max_block_ms / 1000
        num_partitions = self._wait_on_metadata(topic, deadline)
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
                                  timestamp, tracker, i, deadline)  # fmt: skip
            except BaseException as e:
                for j in range(i, len(chunks)):
                    tracker.batch_done(j, -1, e)
                raise
        self._sender.notify_data()
        return future

    def _bulk_groups(
        self, topic: str, n: int, partition: int | None, keys: Any, num_partitions: int
    ) -> list[tuple[int | None, np.ndarray | slice]]:
        if partition is not None:
            _check_partition(topic, partition, num_partitions)
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
        """Split rows so each chunk's records fit one batch_size batch (>= 1 record)."""
        capacity = self.batch_size - HEADER_SIZE
        cum = np.cumsum(bounds[index])
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
        remaining_ms = max(0.0, (deadline - time.monotonic()) * 1000)
        buffer = self._accumulator.allocate(max(self.batch_size, bound), remaining_ms)
        try:
            size = encode_batch_bulk_into(
                buffer.memory, chunk_values, chunk_keys, timestamp,
                value_lengths=value_lengths[rows],
                key_lengths=None if key_lengths is None else key_lengths[rows],
            )  # fmt: skip
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

    def _wait_on_metadata(self, topic: str, deadline: float) -> int:
        md = self._metadata
        if topic not in self._topics_seen:
            if md.add_topics([topic]):
                self._sender.wakeup()
            if len(self._topics_seen) < _MAX_TOPICS_SEEN:
                self._topics_seen.add(topic)
        while True:
            n = md.partition_count(topic)
            if n is not None:
                return n
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                error = md.topic_error(topic)
                why = f" (last error {error.name})" if error is not None else ""
                raise RequestTimedOutError(
                    f"topic {topic!r} not present in metadata after max_block_ms="
                    f"{self.max_block_ms}{why}"
                )
            version = md.request_update()
            self._sender.wakeup()
            md.wait_for_update(version, min(remaining, 0.5))
            self._check_open()

    def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic`` (waits for metadata up to ``max_block_ms``)."""
        n = self._wait_on_metadata(topic, time.monotonic() + self.max_block_ms / 1000)
        return list(range(n))

    # ------------------------------------------------------------ flush / close
    def flush(self, timeout_s: float | None = None) -> None:
        """Send everything queued now and wait until every batch is done."""
        self._check_open()
        if timeout_s is None:
            timeout_s = (self.delivery_timeout_ms + self.request_timeout_ms) / 1000
        self._accumulator.begin_flush()
        try:
            self._sender.wakeup()
            if not self._accumulator.await_completion(timeout_s):
                raise RequestTimedOutError(
                    f"flush did not complete within {timeout_s:g} s "
                    f"({self._accumulator.incomplete} batches incomplete)"
                )
        finally:
            self._accumulator.end_flush()

    def close(self, timeout_s: float | None = None) -> None:
        """Send what is queued (up to ``timeout_s``), then stop; unsent records fail."""
        if self._closed:
            return
        self._closed = True
        if timeout_s is None:
            timeout_s = (self.delivery_timeout_ms + self.request_timeout_ms) / 1000
        self._accumulator.close()
        self._sender.initiate_close()
        self._sender.join(timeout_s)
        if self._sender.is_alive():
            self._sender.force_close()
            self._sender.join(max(10.0, self.request_timeout_ms / 1000))
        self._pool.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            from clients.accumulator import AccumulatorClosedError

            raise AccumulatorClosedError("producer is closed")

    def _check_usable(self) -> None:
        """Open and not stopped by a fatal error (fenced, idempotence unsupported)."""
        self._check_open()
        fatal = self._sender.fatal_error
        if fatal is not None:
            raise fatal

    def metrics(self) -> dict[str, Any]:
        out = self._accumulator.metrics()
        out.update(self._sender.metrics())
        out["buffer_pool_available_bytes"] = self._pool.available_memory()
        out["idempotent"] = self.enable_idempotence
        return out


def _resolve_idempotence(
    requested: bool | None, acks: int, retries: int, max_in_flight: int
) -> bool:
    """Kafka 3's rule: explicit True must fit; unset means on unless something conflicts."""
    if requested is not None and not isinstance(requested, bool):
        raise InvalidConfigError(f"enable_idempotence must be a bool, got {requested!r}")
    conflicts = []
    if acks != -1:
        conflicts.append(f"acks must be 'all' (-1), got {acks}")
    if retries < 1:
        conflicts.append(f"retries must be > 0, got {retries}")
    if max_in_flight > MAX_IN_FLIGHT_PER_PARTITION:
        conflicts.append(
            f"max_in_flight_requests_per_connection must be <= {MAX_IN_FLIGHT_PER_PARTITION}, "
            f"got {max_in_flight}"
        )
    if requested and conflicts:
        raise InvalidConfigError(
            "enable_idempotence=True: " + "; ".join(conflicts)
            + " (or set enable_idempotence=False)"
        )
    return requested is not False and not conflicts


# ---------------------------------------------------------------- input checks


def _as_bytes(name: str, v: Any) -> bytes | None:
    if v is None or type(v) is bytes:
        return v
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise TypeError(f"{name} must be bytes or None, got {type(v).__name__}")


def _check_headers(headers: Sequence[Header] | None) -> Sequence[Header]:
    if not headers:
        return ()
    out = []
    for item in headers:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"headers must be (str, bytes | None) pairs, got {item!r:.60}")
        out.append((item[0], _as_bytes(f"header {item[0]!r} value", item[1])))
    return out


def _check_partition(topic: str, partition: int, num_partitions: int) -> None:
    if not isinstance(partition, int) or not 0 <= partition < num_partitions:
        raise ValueError(
            f"partition {partition!r} is not in 0..{num_partitions - 1} for topic {topic!r}"
        )


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
