"""The producer's sender thread: drains the accumulator into Produce requests.

One loop iteration: refresh metadata if due (one Metadata request at a time, to the
least loaded connected broker, else a bootstrap address); ask the accumulator which
leader nodes have sendable batches; connect to them; drain one request per node (only
nodes whose connection has room under ``max_in_flight``); expire queued batches past
``delivery_timeout_ms``; then wait for responses (bounded by the next linger/backoff
deadline, a transactional coordinator request's retry backoff included, and woken
early by ``wakeup()`` through a socketpair).

What goes on the wire is split by concept into two collaborators the sender owns:
Produce requests and the outcome of their batches (retries, failures, the Produce
body at the connection's version, the finished-batch queue) are a
:class:`~clients.producer.produce_requests.ProduceRequests`; with idempotence (an
:class:`~clients.producer.idempotence.IdempotenceManager` is given) the producer id comes
from a :class:`~clients.producer.producer_id.ProducerIdExchange` (InitProducerId and
epoch bumps; the broker's versions come from each connection's ApiVersions exchange),
which the loop asks each iteration before draining.  A transactional producer (a
:class:`~clients.producer.transactions.manager.TransactionManager` is given) gets its id
from the transaction manager instead: its coordinator requests (FindCoordinator,
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn) go out
from this loop through a
:class:`~clients.producer.transactions.coordinator_requests.TxnRequestSender`, on the
sender's connections (a coordinator FindCoordinator named is connected to by its
answered address when the metadata does not list it).
The sender keeps the loop, the connections, metadata requests and the routing of
responses by request context.  Fatal idempotence errors (fenced,
unsupported) fail every pending batch and make ``Producer.send`` raise.

Latency path (``linger_ms=0``): the producer calls :meth:`Sender.send_now` from the
sending thread, which writes the request itself when the leader's connection is idle
and already watched by the sender thread (no wake-up hop); the response is still read
by the sender thread.  Finished batches are queued and their futures resolved right
before the thread blocks in ``select``, so a woken caller does not then queue for the
GIL behind the rest of the loop.

Thread safety: connections, poller registrations, in-flight state and the
collaborators' state (the completion queue among it) are guarded by one lock, held by
the sender loop except while it blocks in ``select`` and by ``send_now`` callers
(try-lock only: a busy lock means "wake the thread").  Other threads call only
``wakeup``, ``send_now``, ``initiate_close``, ``force_close`` and ``metrics``, and read
``last_connection_error`` (one reference, replaced whole).  Futures
are resolved with no lock held.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from typing import Any, cast

from clients.network.cluster_metadata import ClusterMetadata
from clients.network.connection import BrokerConnection, NetworkError
from clients.network.poller import Poller
from clients.network.sasl import SaslLogin
from clients.producer.accumulator import RecordAccumulator
from clients.producer.idempotence import IdempotenceManager
from clients.producer.produce_requests import ProduceRequests
from clients.producer.producer_id import ProducerIdExchange
from clients.producer.transactions.coordinator_requests import TxnRequestSender
from clients.producer.transactions.manager import TransactionManager
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import AuthenticationError, MiniKafkaError
from clients.protocol.message_types import MetadataRequest, MetadataResponse
from clients.protocol.request_channel import ClientResponse

_MAX_POLL_MS = 100.0


class ProducerClosedError(MiniKafkaError):
    """The producer was force-closed before the record was acknowledged."""


class Sender(threading.Thread):
    """The sender thread of one producer (see the module docstring)."""

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
        transaction: TransactionManager | None = None,
        debug_drop_response_ratio: float = 0.0,
        debug_drop_seed: int | None = None,
        sasl: SaslLogin | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(name=f"minikafka-sender-{client_id}", daemon=True)
        self._sasl = sasl
        self._ssl_context = ssl_context
        self._auth_error: AuthenticationError | None = None  # a refused login: fatal
        # the last failed connect (cleared by a successful one): what a metadata wait
        # that runs out reports when no broker ever answered
        self.last_connection_error: NetworkError | None = None
        self._bootstrap_servers = bootstrap
        self._metadata = metadata
        self._acc = accumulator
        self._client_id = client_id
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
        self._idem = idempotence
        self._produce = ProduceRequests(
            accumulator,
            metadata,
            acks=acks,
            retries=retries,
            request_timeout_ms=request_timeout_ms,
            idempotence=idempotence,
            transactional_id=None if transaction is None else transaction.transactional_id,
            debug_drop_response_ratio=debug_drop_response_ratio,
            debug_drop_seed=debug_drop_seed,
        )
        self._pid: ProducerIdExchange | None = None  # with idempotence: gets the id
        self._txn: TxnRequestSender | None = None  # transactional: coordinator requests
        self._addresses: dict[int, tuple[str, int]] = {}  # coordinators' FindCoordinator
        if idempotence is not None and transaction is not None:
            self._txn = TxnRequestSender(
                transaction,
                idempotence,
                accumulator,
                retry_backoff_ms=retry_backoff_ms,
                least_loaded=self._least_loaded,
                connect=self._coordinator_connection,
                fail=self._produce.fail,
            )
        elif idempotence is not None:
            self._pid = ProducerIdExchange(
                idempotence,
                accumulator,
                metadata,
                retry_backoff_ms=retry_backoff_ms,
                least_loaded=self._least_loaded,
                fail=self._produce.fail,
            )
        # Guards connections, poller registrations and in-flight state: held by the
        # sender loop except while it blocks in select, and by send_now callers.
        self._lock = threading.Lock()
        self._may_sleep = True  # see notify_data

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
        self._produce.stop_retries()
        self._running = False
        self.wakeup()

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = self._produce.metrics()
        if self._idem is not None:
            out.update(self._idem.metrics())
        return out

    @property
    def fatal_error(self) -> MiniKafkaError | None:
        """Set once the producer cannot go on (login refused, fenced, idempotence
        unsupported)."""
        if self._auth_error is not None:
            return self._auth_error
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
                self._handle(response, self._acc.clock_ms())
        for batch in self._acc.undrained_batches():
            self._produce.fail(batch, error)
        self._poller.close()
        self._wake_r.close()
        self._wake_w.close()

    def _run_once(self) -> None:
        with self._lock:
            self._may_sleep = True
            now = self._acc.clock_ms()
            self._maybe_update_metadata(now)
            if self._pid is not None:
                self._pid.maybe_init_producer_id(now)
            if self._txn is not None:
                self._txn.maybe_send(now)
            next_ms, stalled = self._send_ready(now)
            for batch in self._acc.expired_batches(now):
                self._produce.expire(batch, now)
            timeout = min(next_ms, _MAX_POLL_MS, self._metadata.time_to_next_update_ms(now / 1000))
            if self._txn is not None:  # a coordinator request's retry is due then
                timeout = min(timeout, self._txn.time_to_next_send_ms(now))
            if stalled:
                timeout = min(timeout, self._retry_backoff_ms or 1)
            conns = list(self._conns.values())
            failed, timeout_s = self._poller.prepare(conns, max(0.0, timeout))
            for response in failed:
                self._handle(response, now)
        # Futures resolve right before this thread blocks, so the woken callers do not
        # then wait for the GIL while the loop is still running.
        if self._fire_completions() and self._txn is not None:
            timeout_s = 0.0  # an EndTxn may wait for exactly these batches
        readable = self._poller.wait(timeout_s)
        self._may_sleep = False
        with self._lock:
            for response in self._poller.collect(conns, readable):
                self._handle(response, self._acc.clock_ms())

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
                self._produce.send(self._conns[node], batches, now)
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
                handled = self._send_idle(self._acc.clock_ms())
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
            ok = self._produce.send(self._conns[node], batches, now) and ok
        return ok

    def _fire_completions(self) -> bool:
        """Resolve the futures of finished batches and free their buffers (no lock held)."""
        if not self._produce.has_completions:
            return False
        with self._lock:
            done = self._produce.take_completions()
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
                if broker is not None:
                    host, port = broker.host, broker.port
                elif node in self._addresses:
                    host, port = self._addresses[node]
                else:
                    return None
            else:
                host, port = self._bootstrap_servers[-1 - node]
            conn = BrokerConnection(
                host, port, node_id=node, client_id=self._client_id,
                request_timeout_ms=self._request_timeout_ms, max_in_flight=self._max_in_flight,
                sasl=self._sasl, ssl_context=self._ssl_context,
                now_ms=lambda: int(self._acc.clock_ms()),
            )  # fmt: skip
            self._conns[node] = conn
        if self._auth_error is not None:
            return None
        try:
            conn.connect()
        except AuthenticationError as exc:  # the same password/certificate will not do better
            self._auth_error = exc
            for batch in self._acc.undrained_batches():
                self._produce.fail(batch, exc)
            return None
        except NetworkError as exc:
            self.last_connection_error = exc
            self._node_backoff[node] = now + max(self._retry_backoff_ms, 50)
            self._metadata.request_update()
            return None
        self.last_connection_error = None
        return conn

    def _coordinator_connection(self, node: int, host: str, port: int,
                                now: float) -> BrokerConnection | None:  # fmt: skip
        """A connection to a coordinator FindCoordinator named (maybe not in the metadata)."""
        self._addresses[node] = (host, port)
        return self._connection(node, now)

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
        body: MetadataRequest = {"topics": [{"name": t} for t in topics]}
        try:
            conn.send(ApiKey.METADATA, body, context="metadata")
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

    # ------------------------------------------------------------ responses
    def _handle(self, response: ClientResponse, now: float) -> None:
        context = response.request.context
        if context == "metadata":
            self._metadata_in_flight = False
            if response.error is not None or response.body is None:
                self._metadata.failed_update(now / 1000)
            else:
                self._metadata.update(cast(MetadataResponse, response.body), now / 1000)
            return
        if isinstance(context, tuple) and context[0] in ("txn", "txn-find"):
            assert self._txn is not None
            self._txn.handle_response(response, now)
            return
        if isinstance(context, tuple):
            assert self._pid is not None
            self._pid.handle_response(response, now)
            return
        self._produce.handle_response(response, now)
