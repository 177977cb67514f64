"""The producer's sender thread: drains the accumulator into Produce requests.

One loop iteration: refresh metadata if due (one Metadata request at a time, to the
least loaded connected broker, else a bootstrap address); ask the accumulator which
leader nodes have sendable batches; connect to them; drain one request per node (only
nodes whose connection has room under ``max_in_flight``); expire queued batches past
``delivery_timeout_ms``; then wait for responses (bounded by the next linger/backoff
deadline, and woken early by ``wakeup()`` through a socketpair).

Produce v0 request built per node::

    {acks, timeout_ms, topics: [{name, partitions: [{index, records}]}]}

``records`` is the one batch's pooled buffer (zero copy) or, when a drain took several
consecutive batches of the partition, their concatenation.  The response's
``base_offset`` belongs to the first batch; the following batches get consecutive
offsets.

Error handling per partition: NONE resolves the futures; a retriable code (or a lost
connection / request timeout for the whole request) puts the batches back at the head
of their queue with ``retry_backoff_ms`` unless ``retries`` or ``delivery_timeout_ms``
are exhausted (then their futures fail); leadership/unknown-topic errors and lost
connections also request a metadata refresh; other codes fail the futures at once.

Idempotence (an :class:`~clients.idempotence.IdempotenceManager` is given): before the
first batch goes out the sender asks the least loaded broker for ApiVersions (a broker
that does not list InitProducerId makes the producer fail with
:class:`~clients.idempotence.IdempotenceUnsupportedError`, telling the user to set
``enable_idempotence=False``), then InitProducerId; batches wait in the accumulator
meanwhile.  Produce errors are classified by the manager (retry with the same
sequence, fail, bump the epoch, or fatal); an epoch bump waits until nothing is in
flight, abandons or restamps the batches holding sequences, then sends InitProducerId
with the current (id, epoch).  Fatal errors (fenced, unsupported) fail every pending
batch and make ``Producer.send`` raise.  InitProducerId itself is retried after
``retry_backoff_ms`` on connection loss and retriable codes; other codes are fatal.

Test-only fault hook ``debug_drop_response_ratio``: that fraction of produce responses
(chosen by a ``random.Random(debug_drop_seed)``) is discarded after the broker answered,
as if lost on the network: the batches are retried and their outcome counts as unknown.

Latency path (``linger_ms=0``): the producer calls :meth:`Sender.send_now` from the
sending thread, which writes the request itself when the leader's connection is idle
and already watched by the sender thread (no wake-up hop); the response is still read
by the sender thread.  Finished batches are queued and their futures resolved right
before the thread blocks in ``select``, so a woken caller does not then queue for the
GIL behind the rest of the loop.

Thread safety: connections, poller registrations, in-flight state and the completion
queue are guarded by one lock, held by the sender loop except while it blocks in
``select`` and by ``send_now`` callers (try-lock only: a busy lock means "wake the
thread").  Other threads call only ``wakeup``, ``send_now``, ``initiate_close``,
``force_close`` and ``metrics``.  Futures are resolved with no lock held.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
from typing import Any

from clients.accumulator import ProducerBatch, RecordAccumulator, monotonic_ms
from clients.api import ApiKey
from clients.cluster_metadata import ClusterMetadata
from clients.connection import BrokerConnection, ClientResponse, NetworkError, Poller
from clients.errors import (
    ErrorCode,
    MiniKafkaError,
    RequestTimedOutError,
    error_for,
)
from clients.idempotence import (
    NO_SEQUENCE,
    Action,
    IdempotenceManager,
    ProducerFencedError,
    SequenceAbandonedError,
)
from clients.types import TopicPartition

_REFRESH_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.BROKER_NOT_AVAILABLE,
    }
)
_MAX_POLL_MS = 100.0
_API_VERSIONS = "api_versions"  # request contexts besides "metadata" and produce
_INIT_PRODUCER_ID = "init_producer_id"


class DeliveryTimeoutError(RequestTimedOutError):
    """A batch was not acknowledged within ``delivery_timeout_ms`` of its creation."""


class ProducerClosedError(MiniKafkaError):
    """The producer was force-closed before the record was acknowledged."""


class Sender(threading.Thread):
    def __init__(
        self,
        bootstrap: list[tuple[str, int]],
        metadata: ClusterMetadata,
        accumulator: RecordAccumulator,
        *,
        client_id: str,
        acks: int,
        retries: int,
        retry_backoff_ms: int,
        request_timeout_ms: int,
        max_in_flight: int,
        max_request_size: int,
        idempotence: IdempotenceManager | None = None,
        debug_drop_response_ratio: float = 0.0,
        debug_drop_seed: int | None = None,
    ) -> None:
        super().__init__(name=f"minikafka-sender-{client_id}", daemon=True)
        self._bootstrap_servers = bootstrap
        self._metadata = metadata
        self._acc = accumulator
        self._client_id = client_id
        self._acks = acks
        self._retries = retries
        self._retry_backoff_ms = retry_backoff_ms
        self._request_timeout_ms = request_timeout_ms
        self._max_in_flight = max_in_flight
        self._max_request_size = max_request_size
        self._conns: dict[int, BrokerConnection] = {}  # node id (bootstrap: -1 - index)
        self._node_backoff: dict[int, float] = {}  # node id -> monotonic ms
        self._next_bootstrap = 0
        self._metadata_in_flight = False
        self._running = True
        self._forced = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._poller = Poller(self._wake_r)
        self._stats = {"produce_requests": 0, "retries": 0, "failed_batches": 0,
                       "debug_dropped_responses": 0}  # fmt: skip
        self._idem = idempotence
        self._pid_in_flight = False
        self._pid_backoff_until = 0.0  # monotonic ms
        self._verified: set[tuple[str, int]] = set()  # (host, port) listing API 22
        self._drop_ratio = debug_drop_response_ratio
        self._drop_rng = random.Random(debug_drop_seed)
        # Guards connections, poller registrations and in-flight state: held by the
        # sender loop except while it blocks in select, and by send_now callers.
        self._lock = threading.Lock()
        self._may_sleep = True  # see notify_data
        self._completions: list[tuple[ProducerBatch, int, int, BaseException | None]] = []

    # ------------------------------------------------------------ control (any thread)
    def wakeup(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\x00")

    def notify_data(self) -> None:
        """New data was queued: wake the thread only if it may be about to block.

        ``_may_sleep`` is set before the loop looks at the accumulator and cleared after
        it wakes, so while it is False the loop is bound to see the new data anyway.
        """
        if self._may_sleep:
            self.wakeup()

    def initiate_close(self) -> None:
        self._running = False
        self.wakeup()

    def force_close(self) -> None:
        self._forced = True
        self._running = False
        self.wakeup()

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self._stats)
        if self._idem is not None:
            out.update(self._idem.metrics())
        return out

    @property
    def fatal_error(self) -> MiniKafkaError | None:
        """Set once the producer cannot go on (fenced, idempotence unsupported)."""
        return self._idem.fatal_error if self._idem is not None else None

    # ------------------------------------------------------------ loop
    def run(self) -> None:
        try:
            while self._running:
                self._run_once()
            while not self._forced and self._acc.incomplete > 0:
                self._run_once()
        finally:
            with self._lock:
                self._shutdown()
            self._fire_completions()

    def _shutdown(self) -> None:
        error = ProducerClosedError("producer closed before the record was acknowledged")
        for conn in self._conns.values():
            for response in conn.close(error):
                self._handle(response, monotonic_ms())
        for batch in self._acc.undrained_batches():
            self._fail(batch, error)
        self._poller.close()
        self._wake_r.close()
        self._wake_w.close()

    def _run_once(self) -> None:
        with self._lock:
            self._may_sleep = True
            now = monotonic_ms()
            self._maybe_update_metadata(now)
            if self._idem is not None:
                self._maybe_init_producer_id(now)
            next_ms, stalled = self._send_ready(now)
            for batch in self._acc.expired_batches(now):
                self._fail(batch, self._expiry_error(batch, now))
            timeout = min(next_ms, _MAX_POLL_MS, self._metadata.time_to_next_update_ms(now / 1000))
            if stalled:
                timeout = min(timeout, self._retry_backoff_ms or 1)
            conns = list(self._conns.values())
            failed, timeout_s = self._poller.prepare(conns, max(0.0, timeout))
            for response in failed:
                self._handle(response, now)
        # Futures resolve right before this thread blocks, so the woken callers do not
        # then wait for the GIL while the loop is still running.
        self._fire_completions()
        readable = self._poller.wait(timeout_s)
        self._may_sleep = False
        with self._lock:
            for response in self._poller.collect(conns, readable):
                self._handle(response, monotonic_ms())

    def _send_ready(self, now: float) -> tuple[float, bool]:
        """Connect to and drain every ready leader; ``(ms to next check, stalled)``."""
        ready, next_ms, unknown = self._acc.ready(self._metadata, now)
        if unknown:
            self._metadata.add_topics(unknown)
            self._metadata.request_update()
        sendable = set()
        for node in ready:
            conn = self._connection(node, now)
            if conn is not None and conn.can_send:
                sendable.add(node)
        if sendable:
            for node, batches in self._acc.drain(
                self._metadata, sendable, self._max_request_size, now
            ).items():
                self._send_produce(node, batches, now)
        return next_ms, bool(ready) and not sendable

    def send_now(self) -> None:
        """Caller-thread fast path (``linger_ms=0``): send ready batches without a hop.

        Batches go out from the calling thread only when every ready leader has an
        idle (nothing in flight, so ``sendmsg`` cannot block), connected connection
        that the sender thread is already waiting on; its response is read by the
        sender thread as usual.  Anything else (lock busy, connecting, metadata,
        send failure) wakes the sender thread instead.
        """
        if not self._lock.acquire(blocking=False):
            self.notify_data()
            return
        handled = False
        try:
            if self._running:
                handled = self._send_idle(monotonic_ms())
        finally:
            self._lock.release()
        if not handled:
            self.wakeup()
        self._fire_completions()

    def _send_idle(self, now: float) -> bool:
        if self._idem is not None and not self._idem.ready:
            return False  # the sender thread gets the producer id first
        ready, _, unknown = self._acc.ready(self._metadata, now)
        if unknown or not ready:
            return not unknown
        for node in ready:
            conn = self._conns.get(node)
            if (conn is None or not conn.connected or conn.in_flight_count
                    or not self._poller.is_registered(conn)):  # fmt: skip
                return False
        ok = True
        for node, batches in self._acc.drain(
            self._metadata, ready, self._max_request_size, now
        ).items():
            ok = self._send_produce(node, batches, now) and ok
        return ok

    def _fire_completions(self) -> bool:
        """Resolve the futures of finished batches and free their buffers (no lock held)."""
        if not self._completions:
            return False
        with self._lock:
            done, self._completions = self._completions, []
        for batch, base, log_append_time_ms, error in done:
            batch.complete(base, log_append_time_ms, error)
            self._acc.deallocate(batch)
        return True

    # ------------------------------------------------------------ connections
    def _connection(self, node: int, now: float) -> BrokerConnection | None:
        conn = self._conns.get(node)
        if conn is not None and conn.connected:
            return conn
        if self._node_backoff.get(node, 0.0) > now:
            return None
        if conn is None:
            if node >= 0:
                broker = self._metadata.broker(node)
                if broker is None:
                    return None
                host, port = broker.host, broker.port
            else:
                host, port = self._bootstrap_servers[-1 - node]
            conn = BrokerConnection(
                host, port, node_id=node, client_id=self._client_id,
                request_timeout_ms=self._request_timeout_ms, max_in_flight=self._max_in_flight,
            )  # fmt: skip
            self._conns[node] = conn
        try:
            conn.connect()
        except NetworkError:
            self._node_backoff[node] = now + max(self._retry_backoff_ms, 50)
            self._metadata.request_update()
            return None
        return conn

    def _maybe_update_metadata(self, now: float) -> None:
        # The metadata cache runs on monotonic seconds; ``now`` is monotonic ms.
        if self._metadata_in_flight or not self._metadata.update_needed(now / 1000):
            return
        conn = self._least_loaded(now)
        if conn is None:
            self._metadata.failed_update(now / 1000)
            return
        topics = self._metadata.topics_of_interest
        self._metadata.attempt_started(now / 1000)
        try:
            conn.send(ApiKey.METADATA, {"topics": [{"name": t} for t in topics]},
                      context="metadata")  # fmt: skip
            self._metadata_in_flight = True
        except MiniKafkaError:
            self._metadata.failed_update(now / 1000)

    def _least_loaded(self, now: float) -> BrokerConnection | None:
        live = [c for c in self._conns.values() if c.can_send]
        if live:
            return min(live, key=lambda c: c.in_flight_count)
        candidates = [b.node_id for b in self._metadata.brokers()]
        candidates += [-1 - i for i in range(len(self._bootstrap_servers))]
        for _ in range(len(candidates)):
            node = candidates[self._next_bootstrap % len(candidates)]
            self._next_bootstrap += 1
            conn = self._connection(node, now)
            if conn is not None and conn.can_send:
                return conn
        return None

    # ------------------------------------------------------------ producer id
    def _maybe_init_producer_id(self, now: float) -> None:
        """Idempotence: fail everything once fatal; get or bump the producer id when due."""
        idem = self._idem
        assert idem is not None
        if idem.fatal_error is not None:
            for batch in self._acc.undrained_batches():
                self._fail(batch, idem.fatal_error)
            return
        if self._pid_in_flight or not idem.needs_producer_id or now < self._pid_backoff_until:
            return
        if idem.producer_id < 0 and self._acc.incomplete == 0:
            return  # lazily: the id is fetched before the first batch goes out
        if idem.bump_reason is not None:
            why = idem.bump_reason
            for batch in self._acc.reset_sequences(lambda b: b.maybe_written):
                self._fail(batch, SequenceAbandonedError(
                    f"{batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition} "
                    f"(sequence {batch.base_sequence}): an earlier attempt's outcome is unknown "
                    f"and the producer epoch is being bumped ({why}); not resent, to avoid "
                    "a duplicate: the records may or may not be in the log"
                ))  # fmt: skip
        conn = self._least_loaded(now)
        if conn is None:
            self._pid_backoff_until = now + max(self._retry_backoff_ms, 50)
            return
        self._send_pid_request(conn, now)

    def _send_pid_request(self, conn: BrokerConnection, now: float) -> None:
        """ApiVersions first on a connection not yet checked, else InitProducerId."""
        assert self._idem is not None
        try:
            if (conn.host, conn.port) not in self._verified:
                conn.send(ApiKey.API_VERSIONS, {"client_software_name": "minikafka",
                                                "client_software_version": ""},
                          context=(_API_VERSIONS, conn))  # fmt: skip
            else:
                body = {"transactional_id": None, "transaction_timeout_ms": -1,
                        **self._idem.init_request()}  # fmt: skip
                conn.send(ApiKey.INIT_PRODUCER_ID, body, context=(_INIT_PRODUCER_ID, conn))
            self._pid_in_flight = True
        except MiniKafkaError:
            self._pid_backoff_until = now + self._retry_backoff_ms

    def _handle_pid_response(self, response: ClientResponse, now: float) -> None:
        idem = self._idem
        assert idem is not None
        kind, conn = response.request.context
        self._pid_in_flight = False
        body = response.body
        if response.error is not None or body is None:
            self._pid_backoff_until = now + self._retry_backoff_ms
            self._metadata.request_update()
            return
        if kind == _API_VERSIONS:
            idem.on_api_versions(body, f"{conn.host}:{conn.port}")
            if idem.fatal_error is None:
                self._verified.add((conn.host, conn.port))
                if conn.can_send:
                    self._send_pid_request(conn, now)
        elif idem.on_init_response(body):
            self._pid_backoff_until = now + self._retry_backoff_ms

    # ------------------------------------------------------------ produce
    def _send_produce(self, node: int, batches: list[ProducerBatch], now: float) -> bool:
        """Build and write one Produce request; False when the send failed (retried)."""
        by_tp: dict[TopicPartition, list[ProducerBatch]] = {}
        for b in batches:
            by_tp.setdefault(b.tp, []).append(b)
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, bl in by_tp.items():
            records = bl[0].wire() if len(bl) == 1 else b"".join(b.wire() for b in bl)
            topics.setdefault(tp.topic, []).append({"index": tp.partition, "records": records})
        body = {
            "acks": self._acks,
            "timeout_ms": self._request_timeout_ms,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        conn = self._conns[node]
        self._stats["produce_requests"] += 1
        try:
            request = conn.send(ApiKey.PRODUCE, body, expect_response=self._acks != 0,
                                context=by_tp)  # fmt: skip
        except MiniKafkaError as e:
            for tp, bl in by_tp.items():  # not (wholly) written: the broker drops the frame
                self._attempt_failed(tp, bl, e, now, maybe_written=False)
            return False
        if request is None:  # acks=0: written is all we will ever know
            for tp, bl in by_tp.items():
                for b in bl:
                    self._done(b, -1, -1, None)
                self._acc.unmute(tp)
        return True

    def _handle(self, response: ClientResponse, now: float) -> None:
        context = response.request.context
        if context == "metadata":
            self._metadata_in_flight = False
            if response.error is not None or response.body is None:
                self._metadata.failed_update(now / 1000)
            else:
                self._metadata.update(response.body, now / 1000)
            return
        if isinstance(context, tuple):
            self._handle_pid_response(response, now)
            return
        by_tp: dict[TopicPartition, list[ProducerBatch]] = context
        error = response.error
        if error is None and response.body is None:
            error = NetworkError("empty response")
        if error is None and self._drop_ratio and self._drop_rng.random() < self._drop_ratio:
            self._stats["debug_dropped_responses"] += 1
            error = NetworkError("produce response discarded (debug_drop_response_ratio)")
        if error is not None:
            self._metadata.request_update()
            for tp, bl in by_tp.items():
                self._attempt_failed(tp, bl, error, now, maybe_written=True)
            return
        assert response.body is not None
        seen: set[TopicPartition] = set()
        for topic in response.body["responses"]:
            for p in topic["partition_responses"]:
                tp = TopicPartition(topic["name"], p["index"])
                found = by_tp.get(tp)
                if found is None or tp in seen:
                    continue
                seen.add(tp)
                self._complete_partition(tp, found, p, now)
        for tp, bl in by_tp.items():
            if tp not in seen:
                err = MiniKafkaError(f"produce response has no result for {tp}")
                self._attempt_failed(tp, bl, err, now, maybe_written=True)

    def _attempt_failed(
        self, tp: TopicPartition, bl: list[ProducerBatch], error: MiniKafkaError, now: float,
        maybe_written: bool,
    ) -> None:  # fmt: skip
        """An attempt ended without a result for ``tp`` (send failure, lost response)."""
        self._attempt_ended(tp, bl)
        if maybe_written:
            for b in bl:
                b.maybe_written = True
        self._retry_or_fail(tp, bl, error, now)

    def _attempt_ended(self, tp: TopicPartition, bl: list[ProducerBatch]) -> None:
        if self._idem is not None:
            for _ in bl:
                self._idem.on_attempt_done(tp)

    def _complete_partition(
        self, tp: TopicPartition, bl: list[ProducerBatch], p: dict[str, Any], now: float
    ) -> None:
        self._attempt_ended(tp, bl)
        code = p["error_code"]
        idem = self._idem
        if code == ErrorCode.NONE or (idem is not None
                                      and code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER):  # fmt: skip
            base = p["base_offset"] if code == ErrorCode.NONE else -1
            for b in bl:
                if idem is not None:
                    idem.on_acked(tp, b.base_sequence, base, b.record_count, b.attempts > 0)
                    if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                        idem.duplicates += 1
                self._done(b, base, p["log_append_time_ms"], None)
                if base >= 0:
                    base += b.record_count
            self._acc.unmute(tp)
            return
        error = error_for(code, p.get("error_message") or f"produce to {tp} failed")
        if error.code in _REFRESH_CODES:
            self._metadata.request_update()
        if idem is None:
            self._retry_or_fail(tp, bl, error, now)
            return
        for b in bl:
            action = idem.classify(tp, b.base_sequence, error)
            if action is Action.FATAL:
                fenced = ProducerFencedError(
                    f"producer id {b.producer_id} epoch {b.producer_epoch} is fenced on "
                    f"{tp.topic}-{tp.partition} (a newer epoch wrote there): {error.message}"
                )
                idem.set_fatal(fenced)
                self._fail(b, fenced)
            else:
                self._retry_or_fail(tp, [b], error, now, retriable=action is not Action.FAIL)

    def _retry_or_fail(
        self, tp: TopicPartition, bl: list[ProducerBatch], error: MiniKafkaError, now: float,
        retriable: bool | None = None,
    ) -> None:  # fmt: skip
        first = bl[0]
        if retriable is None:
            retriable = error.retriable
        if (
            retriable
            and not self._forced
            and first.attempts < self._retries
            and not self._acc.is_expired(first, now)
        ):
            self._stats["retries"] += 1
            if error.code in _REFRESH_CODES:
                self._metadata.request_update()
            if self._idem is not None:
                for b in bl:
                    self._idem.on_retry(tp, b.base_sequence)
            self._acc.reenqueue(bl, now)
        else:
            for b in bl:
                if retriable and self._acc.is_expired(b, now):
                    self._fail(b, self._expiry_error(b, now, error))
                else:
                    self._fail(b, error)
        self._acc.unmute(tp)

    def _expiry_error(
        self, batch: ProducerBatch, now: float, cause: MiniKafkaError | None = None
    ) -> DeliveryTimeoutError:
        why = f"; last error: {cause}" if cause is not None else ""
        return DeliveryTimeoutError(
            f"expiring {batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition}: "
            f"{now - batch.created_ms:.0f} ms has passed since batch creation "
            f"(delivery_timeout_ms={self._acc.delivery_timeout_ms:g}){why}"
        )

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        self._stats["failed_batches"] += 1
        if self._idem is not None and batch.base_sequence != NO_SEQUENCE:
            self._idem.on_failed(batch.tp, batch.base_sequence, f"failed: {error}")
        self._done(batch, -1, -1, error)

    def _done(
        self, batch: ProducerBatch, base: int, log_append_time_ms: int,
        error: BaseException | None,
    ) -> None:  # fmt: skip
        """Queue the batch's completion; :meth:`_fire_completions` runs it unlocked."""
        self._completions.append((batch, base, log_append_time_ms, error))
