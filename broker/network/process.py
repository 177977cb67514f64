"""The event loop of one network process: epoll, the channel, backpressure, closing.

One epoll loop (level-triggered, ``select.epoll``), no threads.  :class:`NetworkProcess`
owns its collaborators: an :class:`~broker.network.acceptor.Acceptor` (the listeners and
the connection caps), a :class:`~broker.network.request_reader.RequestReader` (the
read half of each connection: length field, request buffer, frame), a
:class:`~broker.network.response_writer.ResponseWriter` (the write half: prefix bytes,
``sendfile`` regions, the descriptor cache), a
:class:`~broker.network.channel.process_side.MainProcessChannel` (requests handed over
and counted, answers taken back) and :class:`~broker.network.waiters.Waiters` (the
parked connections' FIFOs).  They return to the loop after every step; the reader and
the writer raise :class:`~broker.network.connection.CloseConnection` for a connection
that must go; the loop owns everything between them:

- epoll interest of every connection (``mask``): read while fewer than
  ``max_pipelined_requests`` of its requests are with the main process, mute lazily
  (taken out of epoll only if data arrives meanwhile), EPOLLOUT while a response is
  blocked (no reading meanwhile);
- accepting (the acceptor: at most ``max_connections``, and ``max_connections_per_ip`` from one
  address; extra ones are closed at once, as Kafka does); with ``shares`` (several
  network processes on one socket) a process holding more connections than the lightest
  other one steps aside for ``accept_yield_ms``; when no other process accepted
  meanwhile it takes one connection past the check, twice as many each such round in a
  row (the counting and the stepping aside:
  :class:`~broker.network.connection_shares.ConnectionQuotas`);
- deadlines (:class:`~broker.network.deadlines.ConnectionDeadlines`), checked by a
  sweep every ``sweep_interval_s`` (a tenth of the smaller of the two timeouts, within
  10 ms..1 s): a frame started more than
  ``request_read_timeout_ms`` ago and not complete closes its connection, also while
  the connection is parked for memory (so a stalled frame cannot stay by waiting; time
  parked for queue room does not count: the main process is behind, not the client,
  and the deadline restarts when reading resumes);
  a connection with no request with the main process, no frame started and no event
  (read, write, answer) for ``connections_max_idle_ms`` is closed - also one whose
  response is stuck because the client does not read it (its buffer is freed);
- the channel to the main process: REQUEST/CLOSED batched per loop iteration (a
  connection's first REQUEST preceded by PEER, its address: the main process counts
  failed logins per address);
  RESPONSE/NO_RESPONSE/CLOSE handled as they arrive; the listener stops accepting while
  the channel backlog reaches ``max_connections``; a process made with
  ``listening=False`` accepts on neither listener until the main process sends LISTEN
  (its broker serves once its metadata image caught up: docs/broker.md);
- backpressure: at most ``max_queued_requests`` requests with the main process
  (``MainProcessChannel.in_flight``); a connection whose frame cannot go on (no queue
  room when it starts, or the reader finds no memory for its next bytes) is parked and
  not read.  Two FIFOs,
  each retried head first after every response and every ``memory_retry_ms`` tick,
  its head keeping its turn when it cannot go on: ``waiters`` (queue room, or one slot
  for a frame of at most ``buffer_poolable_bytes``) and ``large_waiters`` (larger
  frames waiting for the partial-frame budget or the pool; the frame holding the
  budget's designation goes first), so small requests never wait behind large ones.
  The reader takes memory only for bytes that arrived, and large frames still arriving
  hold at most ``max_partial_request_bytes`` of the pool, broker-wide (see
  :mod:`~broker.network.request_reader` and :mod:`~broker.network.connection_shares`):
  stalled senders cannot hold the pool, and each is closed at its deadline;
- pipelining: a connection has at most ``max_pipelined_requests`` requests with the main
  process (default 1, Kafka's rule: muted while the main process holds one; the broker
  runs its network processes with :data:`~broker.network.channel.codec.
  MAX_PIPELINED_REQUESTS`), so the rest of what a client pipelines waits in the kernel's
  socket buffer - the unread backlog per connection is bounded by ``SO_RCVBUF`` and TCP
  flow control, never by memory of this process.  The main process answers one
  connection's requests in order; an answer arriving while an earlier one is still
  being written waits in ``conn.answers`` (at most one per pending request) and is
  written after it, so every request is answered, in order;
- the internal listener (``internal_listener``, when the broker has one): connections
  other brokers open to fetch as followers.  They get ids from
  :data:`~broker.network.channel.codec.INTERNAL_CONN_ID_BASE` up (so the main process
  knows the listener of every request), count against their own cap
  ``max_internal_connections`` and not against ``max_connections`` or the per-IP caps,
  so clients filling their listener cannot keep followers out; they are read, answered,
  timed out and closed like client connections, and one that sends nothing within
  ``request_read_timeout_ms`` of its accept is closed (brokers speak first);
- closing connections (the reader and the writer free what the connection holds; the
  main process told with CLOSED if it knew the connection);
- TLS (``tls_context``): each accepted socket is wrapped in a
  :class:`~broker.network.tls.TlsTransport`; bytes it holds decrypted in user space are
  invisible to epoll, so a connection that stops reading with some (end of a read turn,
  a frame handed over, a park) is queued in ``tls_ready`` and read on the next
  iteration (epoll polled without waiting), or when it is unmuted.

Request times (``request_times``, :mod:`broker.metrics.request_times`): a frame handed
over is stamped (``read_at``, the iteration's time); an answer carries the main
process's instants, and when its last byte is written (a NO_RESPONSE: when it arrives)
the request's six phases go into this process's region of the broker's shared table.
A connection closed before its answer is out is not counted.

The channel reaching EOF (main process gone) or SIGTERM/SIGINT ends the loop: every
connection is closed, buffers this process holds are freed, exit status 0.

Costs per request: 2-3 ``recv`` syscalls, 1 ``send`` on the channel, one msgpack
encode/decode each way, 3 pool lock round trips (allocate, attach, free), no copy of the
frame or response in Python, one clock read and the request times' record (~1.5 us).
Memory: O(connections) small objects; frames live in the
pool. Process-safety: this process only touches buffers it allocated and has not handed
over, or response buffers handed to it.  Thread-safety: one thread; signal handlers only
set a flag (via a wakeup fd).
"""

from __future__ import annotations

import logging
import select
import signal
import socket
import ssl
import time
from typing import Any

from broker.metrics.request_times import RequestTimesWriter
from broker.network.acceptor import Acceptor
from broker.network.channel.codec import (
    CLOSE,
    LISTEN,
    NO_RESPONSE,
    RESPONSE,
    Handle,
)
from broker.network.channel.endpoint import ChannelEndpoint
from broker.network.channel.process_side import MainProcessChannel
from broker.network.connection import (
    EPOLLHUP_ERR,
    EPOLLIN,
    EPOLLOUT,
    CloseConnection,
    Connection,
)
from broker.network.connection_shares import (
    ConnectionQuotas,
    ConnectionShares,
    PartialFrameBudget,
    partial_request_bytes,
)
from broker.network.deadlines import ConnectionDeadlines
from broker.network.request_reader import NEED_DATA, NEED_MEMORY, RequestReader
from broker.network.response_writer import ResponseWriter
from broker.network.tls import TlsTransport
from broker.network.waiters import Waiters
from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import StaleBufferHandleError
from clients.memory.handles import Buffer
from clients.protocol.errors import InvalidConfigError

log = logging.getLogger("broker.network")


class NetworkProcess:
    """The event loop of one network process (see the module docstring)."""

    def __init__(
        self,
        *,
        listener: socket.socket,
        channel: ChannelEndpoint,
        pool: BufferPool,
        index: int,
        max_request_bytes: int,
        max_connections: int,
        max_connections_per_ip: int | None = None,
        max_connections_per_ip_overrides: dict[str, int] | None = None,
        connections_max_idle_ms: int = 600_000,
        request_read_timeout_ms: int = 30_000,
        max_queued_requests: int = 500,
        max_partial_request_bytes: int = 0,
        request_headroom_bytes: int = 0,
        file_cache_size: int = 128,
        memory_retry_ms: float = 2.0,
        shares: ConnectionShares | None = None,
        accept_yield_ms: float = 5.0,
        tls_context: ssl.SSLContext | None = None,
        internal_listener: socket.socket | None = None,
        max_internal_connections: int = 100,
        request_times: RequestTimesWriter | None = None,
        listening: bool = True,
        max_pipelined_requests: int = 1,
    ) -> None:
        if max_connections_per_ip is None:
            max_connections_per_ip = max_connections
        for name, value in (
            ("max_request_bytes", max_request_bytes),
            ("max_connections", max_connections),
            ("max_connections_per_ip", max_connections_per_ip),
            ("connections_max_idle_ms", connections_max_idle_ms),
            ("request_read_timeout_ms", request_read_timeout_ms),
            ("max_queued_requests", max_queued_requests),
            ("max_internal_connections", max_internal_connections),
            ("max_pipelined_requests", max_pipelined_requests),
        ):
            if value <= 0:
                raise InvalidConfigError(f"{name} must be positive, got {value}")
        if not 0 <= request_headroom_bytes <= pool.total_bytes - max_request_bytes:
            raise InvalidConfigError(
                f"request_headroom_bytes={request_headroom_bytes} must be in 0.."
                f"{pool.total_bytes - max_request_bytes} (pool total_bytes={pool.total_bytes}, "
                f"max_request_bytes={max_request_bytes})"
            )
        partial_bytes = partial_request_bytes(max_partial_request_bytes, pool.total_bytes,
                                              max_request_bytes)
        if partial_bytes < max_request_bytes:
            raise InvalidConfigError(
                f"max_partial_request_bytes={partial_bytes} must be at least "
                f"max_request_bytes={max_request_bytes}")
        self.pool, self.index = pool, index
        self.epoll = select.epoll()
        self.main = MainProcessChannel(channel, index=index,
                                       max_queued_requests=max_queued_requests,
                                       max_backlog=max_connections, free=self._free,
                                       max_pipelined_requests=max_pipelined_requests)
        # the partial-frame budget lives in the table shared with the other network
        # processes; alone (no table given), in one of its own
        self._own_table = None if shares is not None else ConnectionShares.create(index + 1)
        table = shares if shares is not None else self._own_table
        assert table is not None
        poolable = pool.poolable_size
        self.reader = RequestReader(
            pool,
            max_request_bytes=max_request_bytes,
            request_headroom_bytes=request_headroom_bytes,
            free=self._free,
            budget=PartialFrameBudget(
                table, index,
                limit_slots=-(-partial_bytes // poolable),
                reserve_slots=-(-max_request_bytes // poolable)),
        )
        self.writer = ResponseWriter(
            pool, index=index, file_cache_size=file_cache_size, free=self._free
        )
        self.acceptor = Acceptor(self.epoll, listener, internal_listener, ConnectionQuotas(
            index=index, shares=shares, max_connections=max_connections,
            max_connections_per_ip=max_connections_per_ip,
            per_ip_overrides=dict(max_connections_per_ip_overrides or {}),
            max_internal_connections=max_internal_connections,
            accept_yield_s=max(accept_yield_ms, 0.1) / 1000.0), index=index,
            listening=listening)
        self.retry_s = max(memory_retry_ms, 0.1) / 1000.0
        self.conns: dict[int, Connection] = {}  # by fd
        self.by_id: dict[int, Connection] = {}
        self.now = time.monotonic()  # of the current loop iteration
        self.deadlines = ConnectionDeadlines(
            connections_max_idle_ms=connections_max_idle_ms,
            request_read_timeout_ms=request_read_timeout_ms, now=self.now)
        self.waiters = Waiters()  # parked for queue room or memory
        self.stopping = False
        self.shares = shares
        self.tls_context = tls_context
        self.request_times = request_times  # None: requests not timed (tests, benches)
        self.tls_ready: list[Connection] = []  # TLS input buffered in user space: read it
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self.epoll.register(channel.fileno(), EPOLLIN)
        self.epoll.register(self._wake_r.fileno(), EPOLLIN)

    # lifecycle -------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT end the loop cleanly (via a wakeup fd; handlers do nothing
        else, so no pool lock is ever interrupted half-way)."""
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def run(self) -> int:
        """Serve until SIGTERM or the channel closes; returns the exit status."""
        epoll, conns, main, acceptor = self.epoll, self.conns, self.main, self.acceptor
        deadlines = self.deadlines
        listen_fd, internal_fd = acceptor.fds()
        chan_fd, wake_fd = main.fileno(), self._wake_r.fileno()
        try:
            while not (self.stopping or main.gone):
                waiting = bool(self.waiters)
                timeout = self.retry_s if waiting else deadlines.sweep_interval_s
                if self.tls_ready:
                    timeout = 0.0
                paused_until = acceptor.quotas.paused_until
                if paused_until:
                    timeout = max(0.0, min(timeout, paused_until - self.now))
                events = epoll.poll(timeout)
                now = self.now = time.monotonic()
                for fd, ev in events:
                    conn = conns.get(fd)
                    if conn is not None:
                        conn.active_at = now
                        if ev & EPOLLOUT and conn.resp is not None:
                            self._write(conn)
                        elif ev & EPOLLIN and not conn.muted and conn.mask == EPOLLIN:
                            self._read(conn)
                        elif ev & EPOLLHUP_ERR:
                            self._close(conn, "hang-up")
                        elif ev & EPOLLIN and conn.mask != 0:
                            self._set_mask(conn, 0)  # lazy mute: data waits in the kernel
                    elif fd == chan_fd:
                        self._on_channel(ev)
                    elif fd == listen_fd:
                        self._add(acceptor.accept(now))
                    elif fd == internal_fd:
                        self._add(acceptor.accept_internal())
                    elif fd == wake_fd:
                        self._drain_wakeup()
                if self.waiters:
                    self._retry_waiters()
                if self.tls_ready:
                    self._read_tls_buffered()
                if deadlines.due(now):
                    for conn, reason in deadlines.expired(list(conns.values()), now):
                        self._close(conn, reason)
                main.flush_posted()  # this iteration's REQUEST/CLOSED: one packet
                main.update_interest(epoll)
                acceptor.update_interest(main.backlogged, now)
            return 0
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        for conn in list(self.conns.values()):
            self._close(conn, "shutdown", notify=False)
        self.writer.close()
        self.acceptor.close()
        for s in (self._wake_r, self._wake_w):
            s.close()
        self.epoll.close()
        self.main.close()
        if self.shares is not None:
            self.shares.close()
        if self._own_table is not None:
            self._own_table.close()

    def _drain_wakeup(self) -> None:
        try:
            while self._wake_r.recv(512):
                pass
        except BlockingIOError:
            pass

    # connections ---------------------------------------------------------------------
    def _add(self, accepted: list[tuple[socket.socket, str, int]]) -> None:
        for sock, ip, conn_id in accepted:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            transport = (sock if self.tls_context is None
                         else TlsTransport(sock, self.tls_context))
            conn = Connection(conn_id, transport, ip, self.now)
            self.conns[conn.fd] = conn
            self.by_id[conn.conn_id] = conn
            self.epoll.register(conn.fd, EPOLLIN)

    def _set_mask(self, conn: Connection, mask: int) -> None:
        if conn.mask != mask:
            self.epoll.modify(conn.fd, mask)
            conn.mask = mask

    # requests ------------------------------------------------------------------------
    def _read(self, conn: Connection) -> None:
        """Read what ``conn`` sent: the length field, then the frame."""
        self._read_socket(conn)
        if conn.tls:
            self._note_tls_buffered(conn)

    def _note_tls_buffered(self, conn: Connection) -> None:
        """A TLS connection that stopped reading (a turn's end, a frame handed over)
        with decrypted or decryptable bytes in user space: epoll will not report them,
        so the loop reads them next (once the connection may read)."""
        sock = conn.sock
        if (not conn.closed and isinstance(sock, TlsTransport) and sock.buffered_input
                and conn not in self.tls_ready):
            self.tls_ready.append(conn)

    def _read_tls_buffered(self) -> None:
        ready, self.tls_ready = self.tls_ready, []
        for conn in ready:
            if conn.closed:
                continue
            if conn.muted or conn.parked or conn.mask != EPOLLIN:
                continue  # _unmute / _retry_waiters come back to it
            self._read(conn)

    def _read_socket(self, conn: Connection) -> None:
        if conn.frame_len == 0:
            try:
                if not self.reader.read_length(conn):  # (an answer being written: EPOLLOUT)
                    self._set_mask(conn, EPOLLIN if conn.resp is None else EPOLLOUT)
                    self._track_deadline(conn)
                    return
            except CloseConnection as exc:
                self._close(conn, exc.reason)
                return
        self._read_frame(conn)

    def _read_frame(self, conn: Connection) -> bool:
        """Go on with ``conn``'s frame; False when it was parked (no queue room for a new
        frame, or no memory for its next bytes)."""
        reader = self.reader
        if self.main.queue_full and not reader.holds_memory(conn):
            self._park(conn, large=False, for_memory=False)
            return False
        try:
            frame = reader.read_frame(conn)
        except CloseConnection as exc:
            self._close(conn, exc.reason)
            return True
        if frame is NEED_MEMORY:
            self._park(conn, large=conn.frame_len > reader.poolable, for_memory=True)
            return False
        if frame is NEED_DATA:  # (a pipelined connection read from a waiter FIFO)
            self._set_mask(conn, EPOLLIN if conn.resp is None else EPOLLOUT)
            self._track_deadline(conn)
        else:
            assert isinstance(frame, tuple)
            conn.frame_deadline = 0.0
            if not self.main.hand_over(conn, *frame, self.now):
                self._close(conn, "channel full")
        return True

    def _park(self, conn: Connection, *, large: bool, for_memory: bool) -> None:
        """Stop reading ``conn`` until :meth:`_retry_waiters` finds room for it.  Parked
        for memory the read deadline keeps running (started now if it was not); for
        queue room it is off.  An answer being written keeps its EPOLLOUT."""
        self._set_mask(conn, 0 if conn.resp is None else EPOLLOUT)
        if not conn.parked:
            if for_memory:
                self._track_deadline(conn)
            else:
                conn.frame_deadline = 0.0  # waiting for the main process, not the client
            self.waiters.park(conn, large=large, first=self.reader.designated is conn)

    def _track_deadline(self, conn: Connection) -> None:
        """Start the read deadline when a frame is started (kept while it goes on)."""
        if self.reader.in_frame(conn):
            self.deadlines.start_frame(conn, self.now)

    def _retry_waiters(self) -> None:
        self.waiters.retry(self._go_on)

    def _go_on(self, conn: Connection) -> bool:
        if not self._read_frame(conn):
            return False
        if conn.tls:
            self._note_tls_buffered(conn)
        return True

    # responses -----------------------------------------------------------------------
    def _on_response(
        self, conn: Connection | None, handle: Handle | None, prefix_len: int,
        regions_len: int, timing: tuple[Any, ...],
    ) -> None:
        """An answer (None: NO_RESPONSE) to ``conn``'s oldest request, queued in order."""
        if conn is None or (read_at := self.main.answered(conn)) is None:
            if conn is not None:
                self._close(conn, "unexpected answer")
            if handle is not None:
                self._free(handle)  # connection gone: nobody else will free it
            return
        conn.answers.append((handle, prefix_len, regions_len, timing, self.now, read_at))
        if conn.resp is None:
            self._write(conn)

    def _write(self, conn: Connection) -> None:
        """Write ``conn``'s answers in order until one blocks (EPOLLOUT) or none is left
        (then it may read again); a NO_RESPONSE only has its times recorded."""
        while conn.resp is not None or conn.answers:
            try:
                if conn.resp is None:
                    (handle, prefix_len, regions_len, conn.timing, conn.answered_at,
                     conn.read_at) = conn.answers.popleft()
                    if handle is None:
                        if conn.timing:
                            self._record(conn, conn.answered_at)
                        continue
                    self.writer.start(conn, handle, prefix_len, regions_len)
                done = self.writer.write(conn)
            except CloseConnection as exc:
                self._close(conn, exc.reason)
                return
            if not done:
                self._set_mask(conn, EPOLLOUT)
                return
            if conn.timing:
                self._record(conn, time.monotonic())
        self._unmute(conn)

    # channel ------------------------------------------------------------------------
    def _on_channel(self, ev: int) -> None:
        """Act on what the main process sent: responses, NO_RESPONSE, CLOSE, LISTEN."""
        by_id = self.by_id
        for msg in self.main.receive(ev):
            kind = msg[0]
            if kind == LISTEN:
                self.acceptor.start_listening()
                continue
            conn = by_id.get(msg[1])
            if kind == RESPONSE:
                self._on_response(conn, msg[2], msg[3], msg[4], msg[5:])
            elif conn is None:
                continue
            elif kind == NO_RESPONSE:
                self._on_response(conn, None, 0, 0, msg[2:])
            elif kind == CLOSE:
                self._close(conn, "closed by the main process")
            else:
                log.error("network %d: unexpected message %r from main", self.index, msg)

    def _record(self, conn: Connection, sent_at: float) -> None:
        """The answer to ``conn``'s request is out: its times into the shared table."""
        if self.request_times is not None:
            slots, dequeued_at, local_at, responded_at = conn.timing
            self.request_times.record(slots, conn.read_at, dequeued_at, local_at,
                                      responded_at, conn.answered_at, sent_at)
        conn.timing = ()

    def _unmute(self, conn: Connection) -> None:
        """The answers of ``conn`` that arrived are out: read it again if it may."""
        conn.active_at = self.now  # the idle clock starts when the answer is out
        if conn.muted or conn.parked:  # still at its bound, or waiting in a FIFO
            self._set_mask(conn, 0)
        elif conn.mask == 0 or (isinstance(conn.sock, TlsTransport)
                                and conn.sock.buffered_input):
            self._read(conn)  # data arrived while muted: read it now, no epoll round trip
        elif conn.mask != EPOLLIN:
            self._set_mask(conn, EPOLLIN)
        if self.waiters:
            self._retry_waiters()

    # closing --------------------------------------------------------------------------
    def _close(self, conn: Connection, reason: str, *, notify: bool = True) -> None:
        if conn.closed:
            return
        conn.closed = True
        log.debug("network %d: closing connection %d: %s", self.index, conn.conn_id, reason)
        self.epoll.unregister(conn.fd)
        del self.conns[conn.fd]
        del self.by_id[conn.conn_id]
        self.acceptor.release(conn.ip, conn.conn_id)
        self.waiters.discard(conn)
        self.reader.drop(conn)
        self.writer.drop(conn)
        self.main.closed(conn, notify=notify)
        conn.sock.close()

    def _free(self, buffer: Buffer | Handle) -> None:
        """Give ``buffer`` back to the pool; a stale handle is logged, not raised."""
        try:
            self.pool.deallocate(buffer)  # type: ignore[arg-type]
        except StaleBufferHandleError as exc:
            log.error("network %d: freeing a buffer failed: %s", self.index, exc)
