"""Producer: ``send`` records into a RecordAccumulator; a sender thread ships batches.

Data path::

    send()/send_bulk()  --append-->  RecordAccumulator (BufferPool buffers, per partition)
                                          |  ready()/drain(): per leader node
    sender thread  <---------------------'
       one Produce request per node (v3-12, the connection's highest common version):
       topics -> partitions -> records (the batches of a partition concatenated; a
       single batch is sent straight from its pooled buffer)
       responses -> futures resolved, buffers returned to the pool

Semantics (Kafka's, simplified):

- ``acks`` 0 / 1 / ``"all"`` (= -1, the default).  With acks=0 no response is awaited
  and futures resolve with offset -1 once the request is written.
- **Idempotence** (``enable_idempotence``, on by default, see :mod:`clients.producer.idempotence`
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
- **Transactions** (``transactional_id``, ``transaction_timeout_ms`` = 60000; Kafka's
  Java-client semantics, see :mod:`clients.producer.transactions` and docs/producer.md):
  ``init_transactions()`` once, then ``begin_transaction()``, ``send``s (each partition
  is added to the transaction before its first batch goes out; the batches carry the
  transactional attribute), ``send_offsets_to_transaction(offsets, group_metadata)``,
  and ``commit_transaction()`` (flushes first) or ``abort_transaction()`` (queued
  records fail with ``TransactionAbortedError``).  Each waits at most ``max_block_ms``
  (then ``RequestTimedOutError``: call the same method again to keep waiting).  Wrong
  call order raises ``IllegalTransactionStateError``; a failed transaction
  ``TransactionAbortableError`` (abort it); another producer with the same
  ``transactional_id`` makes this one fenced (``ProducerFencedError``, fatal).
  ``send_bulk`` in a transaction adds the partition given, or every partition of the
  topic.
- ``batch_size`` (16 KiB) is the size of a new batch; ``batch_max_size`` (KIP-782's
  ``batch.max.size``; default 16 x ``batch_size`` = 256 KiB, capped by
  ``max_request_size`` and a quarter of ``buffer_memory``; 0 turns it off) is how large
  a batch may grow while its partition has a backlog
  (:mod:`clients.producer.accumulator`).  A batch the broker refuses as too large is
  split (at most ``batch_size`` bytes and half its records per piece) and resent, as
  Kafka's producer does (:mod:`clients.producer.split`).
- ``compression_type`` (Kafka's names: ``none``, ``gzip``, ``snappy``, ``lz4``,
  ``zstd``): each batch's records are compressed when it closes (kept plain when that
  is not smaller; see :mod:`clients.producer.compression`).
- ``key_serializer`` / ``value_serializer``: callables turning what ``send`` is given
  into bytes (never called for None: a null stays null); a serializer's error is
  raised from ``send`` as :class:`~clients.producer.config.SerializationError` and
  nothing is queued.  ``send_bulk`` takes bytes (or numpy arrays) only.
- futures (:class:`~clients.producer.future.ProducerFuture`) have ``get(timeout)`` as
  Kafka's clients spell it, next to ``result(timeout)``.
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
- **Security**: ``security_protocol``, ``sasl_*`` and ``ssl_*`` as in
  :class:`~clients.consumer.consumer.Consumer` (its docstring lists them).  A refused
  login, or a certificate refused by either side
  (:class:`~clients.network.tls.SslAuthenticationError`, an AuthenticationError), is
  fatal: pending futures fail and ``send`` raises it.
- ``send`` blocks at most ``max_block_ms`` (metadata for the topic, then memory in the
  pool); beyond that it raises :class:`~clients.protocol.errors.RequestTimedOutError` (for memory
  the pool's ``BufferPoolTimeoutError`` subclass); for metadata its code names the real
  cause when there is one: ``NETWORK_EXCEPTION`` with the last connection error
  ("Connection refused") when no broker ever answered, the topic's error
  (``UNKNOWN_TOPIC_OR_PARTITION``) when the cluster answered without it.

Memory: one private BufferPool (``buffer_memory`` rounded down to a multiple of
``batch_size``, at least one batch) holds every unsent byte; nothing else grows with
the backlog.  Costs: ``send`` is O(record bytes) plus a lock and a Future; ``send_bulk``
encodes ``batch_size`` chunks with numpy (O(bytes); see :mod:`clients.producer.bulk`).

Modules: settings and record-argument checks are :mod:`clients.producer.config`;
``send_bulk`` checks its arguments and waits for metadata here, then hands the records
to a :class:`~clients.producer.bulk.BulkAppender` (chunking and numpy encoding); batches
and their encoding :mod:`clients.producer.batch`; queues :mod:`clients.producer.accumulator`;
the sender thread :mod:`clients.producer.sender`.

Thread safety: ``send``, ``send_bulk`` and ``flush`` may be called from any threads;
futures are resolved on the sender thread (keep callbacks short).

The GIL: a thread calling ``send`` in a loop holds the GIL nearly all the time, and
CPython makes a thread that wants it (the sender, woken by a response) wait up to the
switch interval (5 ms) before the holder must give it up.  Responses would then be
handled, and the next request sent, up to 5 ms late: the pool fills and ``send``
waits.  So ``send`` gives the GIL up (``time.sleep(0)``) each time it starts a new
batch, about once per ``batch_size`` bytes: 1 KiB records went from 80-94 k to 165-193 k
records/s (acks=all, RF 3, one partition, 100,000 records) and 100 B records from
372-378 k to 390-399 k/s, one run each on 2026-11-28.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from clients.memory.buffer_pool import BufferPool
from clients.network.cluster_metadata import ClusterMetadata, parse_bootstrap
from clients.network.connection import NetworkError
from clients.network.sasl import sasl_login_of
from clients.network.tls import ssl_context_of
from clients.producer.accumulator import RecordAccumulator
from clients.producer.batch import RECORD_OVERHEAD_BOUND, record_size_bound
from clients.producer.bulk import BulkAppender
from clients.producer.compression import compression_codec, compressor
from clients.producer.config import (
    SerializationError,
    as_bytes,
    check_config,
    check_headers,
    check_partition,
    check_transactional,
    resolve_batch_max_size,
    resolve_idempotence,
)
from clients.producer.future import ProducerFuture, RecordFuture
from clients.producer.idempotence import IdempotenceManager
from clients.producer.partitioner import StickyPartitioner, partition_for_key
from clients.producer.sender import Sender
from clients.producer.transactions.calls import TransactionCalls
from clients.producer.transactions.manager import TransactionManager
from clients.producer.transactions.state import IllegalTransactionStateError
from clients.protocol.errors import (
    InvalidConfigError,
    MessageTooLargeError,
    RequestTimedOutError,
)
from clients.protocol.topics import TopicPartition, validate_topic_name
from clients.records.batch import HEADER_SIZE
from clients.types import BulkResult, ConsumerGroupMetadata, Header, OffsetAndMetadata

_MAX_TOPICS_SEEN = 10_000
_PLAIN_RECORD_BOUND = HEADER_SIZE + RECORD_OVERHEAD_BOUND  # a header-less record's bound
Serializer = Callable[[Any], bytes]


def metadata_wait_error(topic: str, max_block_ms: int, metadata: ClusterMetadata,
                        refused: NetworkError | None) -> RequestTimedOutError:
    """What a metadata wait that ran out raises: a RequestTimedOutError (Kafka's
    TimeoutException) whose code is the real cause when there is one: no broker ever
    answered, NETWORK_EXCEPTION with ``refused`` (the last connection error); the
    cluster answered without the topic, the topic's error (UNKNOWN_TOPIC_OR_PARTITION)."""
    what = f"topic {topic!r} not present in metadata after max_block_ms={max_block_ms}"
    if refused is not None and not metadata.brokers():
        return RequestTimedOutError(f"{what}: {refused.message}", refused.code)
    return RequestTimedOutError(what, metadata.topic_error(topic))


class Producer:
    """Kafka-like producer (see the module docstring)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str | None = None,
        acks: int | str | None = None,
        enable_idempotence: bool | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        linger_ms: int = 5,
        batch_size: int = 16384,
        batch_max_size: int | None = None,
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
        compression_type: str = "none",
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        security_protocol: str = "PLAINTEXT",
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | bytes | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_password: str | None = None,
        ssl_check_hostname: bool = True,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        sasl = sasl_login_of(security_protocol, sasl_mechanism, sasl_plain_username,
                             sasl_plain_password)
        tls = ssl_context_of(security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile,
                             ssl_password, ssl_check_hostname, ssl_context)
        codec = compression_codec(compression_type)
        for name, fn in (("key_serializer", key_serializer),
                         ("value_serializer", value_serializer)):  # fmt: skip
            if fn is not None and not callable(fn):
                raise InvalidConfigError(f"{name} must be callable (object -> bytes), got "
                                         f"{type(fn).__name__}")
        compress = compressor(codec)
        self.compression_type = compression_type.lower()
        self.key_serializer = key_serializer
        self.value_serializer = value_serializer
        self.acks = check_config(
            acks=acks,
            linger_ms=linger_ms,
            batch_size=batch_size,
            buffer_memory=buffer_memory,
            max_block_ms=max_block_ms,
            retries=retries,
            retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            max_in_flight_requests_per_connection=max_in_flight_requests_per_connection,
            max_request_size=max_request_size,
            debug_drop_response_ratio=debug_drop_response_ratio,
        )
        enable_idempotence = check_transactional(transactional_id, transaction_timeout_ms,
                                                 enable_idempotence)
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.enable_idempotence = resolve_idempotence(
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
        pool_bytes = buffer_memory - buffer_memory % batch_size
        self.batch_max_size = resolve_batch_max_size(batch_max_size, batch_size,
                                                     max_request_size, pool_bytes)
        self._pool = BufferPool.create(pool_bytes, batch_size)
        idempotence = (
            IdempotenceManager(max_in_flight_requests_per_connection)
            if self.enable_idempotence else None
        )  # fmt: skip
        transaction = None
        if idempotence is not None and transactional_id is not None:
            transaction = TransactionManager(transactional_id, transaction_timeout_ms,
                                             idempotence)  # fmt: skip
            idempotence.transaction = transaction
        self._accumulator = RecordAccumulator(
            self._pool,
            batch_size=batch_size,
            linger_ms=linger_ms,
            retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            idempotence=idempotence,
            codec=codec,
            compress=compress,
            batch_max_size=self.batch_max_size,
        )
        self._partitioner = StickyPartitioner()
        self._partitioner_lock = threading.Lock()
        self._bulk = BulkAppender(
            self._accumulator,
            self._partitioner,
            self._partitioner_lock,
            batch_size=batch_size,
            batch_max_size=self.batch_max_size,
            max_request_size=max_request_size,
        )
        self._closed = False
        # a record (with its batch header) must fit a request and the pool
        self._max_record_bytes = min(max_request_size, self._pool.total_bytes)
        self._send_now = linger_ms == 0  # nothing to wait for: ship from this thread
        self._topics_seen: set[str] = set()  # validated and registered with the metadata
        # topic -> (its partitions, the metadata version they were read at): send's fast
        # path, valid while the metadata version stays the same
        self._partitions: dict[str, tuple[list[TopicPartition], int]] = {}
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
            transaction=transaction,
            debug_drop_response_ratio=float(debug_drop_response_ratio),
            debug_drop_seed=debug_drop_seed,
            sasl=sasl,
            ssl_context=tls,
        )
        self._txn: TransactionCalls | None = None
        if transaction is not None:
            self._txn = TransactionCalls(transaction, self._accumulator,
                                         wakeup=self._sender.wakeup, max_block_ms=max_block_ms)
        self._sender.start()

    # ------------------------------------------------------------ sending
    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        """Queue one record; the future resolves to its RecordMetadata or fails.

        ``key`` and ``value`` are bytes (None: null) or, with a ``key_serializer`` /
        ``value_serializer``, whatever it takes (never called for None).  The future is
        a :class:`~clients.producer.future.RecordFuture` (``result``/``get``,
        ``add_done_callback``, ...).
        """
        if self._closed or self._sender.fatal_error is not None:
            self._check_usable()
        if self.key_serializer is not None:
            key = _serialized(self.key_serializer, "key", topic, key)
        if self.value_serializer is not None:
            value = _serialized(self.value_serializer, "value", topic, value)
        if key is not None and type(key) is not bytes:
            key = as_bytes("key", key)
        if value is not None and type(value) is not bytes:
            value = as_bytes("value", value)
        if headers:
            hdrs = check_headers(headers)
            size = HEADER_SIZE + record_size_bound(key, value, hdrs)
        else:
            hdrs = ()
            size = _PLAIN_RECORD_BOUND + (len(key) if key else 0) + (len(value) if value else 0)
        if size > self._max_record_bytes:
            raise MessageTooLargeError(
                f"record of about {size} bytes exceeds max_request_size "
                f"{self.max_request_size} or buffer_memory {self._pool.total_bytes}"
            )
        timestamp = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        remaining_ms: float = self.max_block_ms
        cached = self._partitions.get(topic)
        if cached is None or cached[1] != self._metadata.version:
            deadline = self._monotonic_s() + self.max_block_ms / 1000
            cached = self._topic_partitions(topic, deadline)
            remaining_ms = max(0.0, (deadline - self._monotonic_s()) * 1000)
        tps = cached[0]
        num_partitions = len(tps)
        sticky = False
        if partition is not None:
            check_partition(topic, partition, num_partitions)
        elif key is not None:
            partition = partition_for_key(key, num_partitions)
        else:
            with self._partitioner_lock:
                partition = self._partitioner.partition(topic, num_partitions)
            sticky = True
        if self._txn is not None:
            self._txn.manager.maybe_add_partition(tps[partition])
        future, filled, new_batch = self._accumulator.append(
            tps[partition], timestamp, key, value, hdrs, remaining_ms
        )
        if sticky and filled:
            with self._partitioner_lock:
                self._partitioner.on_new_batch(topic, num_partitions, partition)
        if self._send_now:
            self._sender.send_now()
        elif new_batch:
            self._sender.notify_data()
            # let the sender thread have the GIL if it is waiting (see the docstring)
            time.sleep(0)
        return future

    def send_bulk(
        self,
        topic: str,
        values: Sequence[bytes | None] | np.ndarray,
        partition: int | None = None,
        keys: Sequence[bytes | None] | np.ndarray | None = None,
        timestamp_ms: int | None = None,
    ) -> ProducerFuture[BulkResult]:
        """Queue many header-less records at once, encoded batch by batch with numpy.

        ``values`` (and ``keys``): a sequence of bytes/None, a fixed-size ``S<n>`` array
        or a 2-D uint8 array (one row per record).  Records are cut into chunks that fit
        ``batch_size``; each chunk becomes one batch.  With keys, records are grouped by
        their key's partition (order kept within a partition); without keys and
        partition, each chunk goes to the sticky partition.  The future resolves to a
        :class:`BulkResult` (partition, base offset and record count per batch).  If
        ``max_block_ms`` runs out midway the error is raised and the chunks already
        queued are still sent.  See :mod:`clients.producer.bulk`.
        """
        self._check_usable()
        validate_topic_name(topic)
        n = len(values)
        if n == 0:
            future: ProducerFuture[BulkResult] = ProducerFuture()
            future.set_result(BulkResult(topic, [], [], []))
            return future
        if keys is not None and len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        timestamp = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        deadline = self._monotonic_s() + self.max_block_ms / 1000
        num_partitions = self._wait_on_metadata(topic, deadline)
        if self._txn is not None:
            for p in range(num_partitions) if partition is None else [partition]:
                self._txn.manager.maybe_add_partition(TopicPartition(topic, p))
        bulk_future = self._bulk.append(
            topic, num_partitions, values, keys, partition, timestamp, deadline
        )
        self._sender.notify_data()
        return bulk_future

    def _topic_partitions(self, topic: str,
                          deadline: float) -> tuple[list[TopicPartition], int]:  # fmt: skip
        """``send``'s slow path: the topic's partitions (waiting for metadata up to
        ``deadline``) and the metadata version they were read at; remembered for the
        next ``send`` until the metadata changes."""
        validate_topic_name(topic)
        version = self._metadata.version  # read first: a change meanwhile is seen next time
        n = self._wait_on_metadata(topic, deadline)
        cached = ([TopicPartition(topic, p) for p in range(n)], version)
        if topic in self._partitions or len(self._partitions) < _MAX_TOPICS_SEEN:
            self._partitions[topic] = cached
        return cached

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
            remaining = deadline - self._monotonic_s()
            if remaining <= 0:
                raise metadata_wait_error(topic, self.max_block_ms, md,
                                          self._sender.last_connection_error)
            version = md.request_update()
            self._sender.wakeup()
            md.wait_for_update(version, min(remaining, 0.5))
            self._check_usable()  # a refused login fails here, not after max_block_ms

    def _monotonic_s(self) -> float:
        """Now on the producer's clock (the accumulator's ``clock_ms``), in seconds."""
        return self._accumulator.clock_ms() / 1000

    def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic`` (waits for metadata up to ``max_block_ms``)."""
        n = self._wait_on_metadata(topic, self._monotonic_s() + self.max_block_ms / 1000)
        return list(range(n))

    # ------------------------------------------------------------ transactions
    def init_transactions(self) -> None:
        """Get the producer id of ``transactional_id`` from its coordinator, fencing any
        older producer with the same id and finishing (aborting) its open transaction."""
        self._transactions().init_transactions()

    def begin_transaction(self) -> None:
        self._transactions().begin_transaction()

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:  # fmt: skip
        """Commit a consumer group's offsets with the transaction (``group_metadata``:
        ``Consumer.group_metadata()``, or a group id: generation and member unchecked)."""
        self._transactions().send_offsets_to_transaction(offsets, group_metadata)

    def commit_transaction(self) -> None:
        """Flush, then commit (EndTxn); raises the transaction's error if it failed."""
        self._transactions().commit_transaction()

    def abort_transaction(self) -> None:
        """Abort: queued records fail, sent ones are aborted by the coordinator's markers."""
        self._transactions().abort_transaction()

    def _transactions(self) -> TransactionCalls:
        self._check_open()
        if self._txn is None:
            raise IllegalTransactionStateError(
                "transactional method invoked on a non-transactional producer "
                "(create it with transactional_id=...)")  # fmt: skip
        return self._txn

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
            from clients.producer.accumulator import AccumulatorClosedError

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
        if self._txn is not None:
            out["transaction_state"] = self._txn.manager.state.value
        return out


def _serialized(serializer: Serializer | None, what: str, topic: str, data: Any) -> Any:
    """``serializer(data)`` (None stays None); its failure as a SerializationError."""
    if serializer is None or data is None:
        return data
    try:
        return serializer(data)
    except Exception as e:
        raise SerializationError(
            f"{what}_serializer failed for a record to {topic!r}: {type(e).__name__}: {e}"
        ) from e
