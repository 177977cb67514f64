"""The event loop of one network process: epoll, accept, the channel, closing.

One epoll loop (level-triggered, ``select.epoll``), no threads.  :class:`NetworkProcess`
owns two collaborators: a :class:`~broker.network.request_reader.RequestReader` (the
read half of each connection: length field, request buffer, frame) and a
:class:`~broker.network.response_writer.ResponseWriter` (the write half: prefix bytes,
``sendfile`` regions, the descriptor cache).  They return to the loop after every step
and raise :class:`~broker.network.connection.CloseConnection` for a connection that must
go; the loop owns everything between them:

- epoll interest of every connection (``mask``): read while no request is with the main
  process, mute lazily (taken out of epoll only if data arrives meanwhile), EPOLLOUT
  while a response is blocked;
- accepting (at most ``max_connections``, and ``max_connections_per_ip`` from one
  address; extra ones are closed at once, as Kafka does); with ``shares`` (several
  network processes on one socket) a process holding more connections than the lightest
  other one steps aside for ``accept_yield_ms``; when no other process accepted
  meanwhile it takes one connection past the check, twice as many each such round in a
  row (the counting and the stepping aside:
  :class:`~broker.network.connection_shares.ConnectionQuotas`);
- deadlines, checked by a sweep every ``sweep_interval_s`` (a tenth of the smaller of
  the two timeouts, within 10 ms..1 s): a frame started more than
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
  the channel backlog reaches ``max_connections``;
- backpressure: at most ``max_queued_requests`` requests with the main process
  (``in_flight``); a connection whose frame cannot go on (no queue room when it starts,
  or the reader finds no memory for its next bytes) is parked and not read.  Two FIFOs,
  each retried head first after every response and every ``memory_retry_ms`` tick,
  its head keeping its turn when it cannot go on: ``waiters`` (queue room, or one slot
  for a frame of at most ``buffer_poolable_bytes``) and ``large_waiters`` (larger
  frames waiting for the partial-frame budget or the pool; the frame holding the
  budget's designation goes first), so small requests never wait behind large ones.
  The reader takes memory only for bytes that arrived, and large frames still arriving
  hold at most ``max_partial_request_bytes`` of the pool, broker-wide (see
  :mod:`~broker.network.request_reader` and :mod:`~broker.network.connection_shares`):
  stalled senders cannot hold the pool, and each is closed at its deadline;
- pipelining: a connection is read one request at a time (muted while the main process
  holds it), so what a client pipelines waits in the kernel's socket buffer - the unread
  backlog per connection is bounded by ``SO_RCVBUF`` and TCP flow control, never by
  memory of this process - and every request is answered, in order;
- the internal listener (``internal_listener``, when the broker has one): connections
  other brokers open to fetch as followers.  They get ids from
  :data:`~broker.network.channel_codec.INTERNAL_CONN_ID_BASE` up (so the main process
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

The channel reaching EOF (main process gone) or SIGTERM/SIGINT ends the loop: every
connection is closed, buffers this process holds are freed, exit status 0.

Costs per request: 2-3 ``recv`` syscalls, 1 ``send`` on the channel, one msgpack
encode/decode each way, 3 pool lock round trips (allocate, attach, free), no copy of the
frame or response in Python. Memory: O(connections) small objects; frames live in the
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
from collections import deque

from broker.config import partial_request_bytes
from broker.network.channel_codec import (
    CLOSE,
    CLOSED,
    INTERNAL_CONN_ID_BASE,
    MAX_PEER_CHARS,
    NO_RESPONSE,
    PEER,
    REQUEST,
    RESPONSE,
    ChannelFullError,
    ChannelProtocolError,
    Handle,
)
from broker.network.channel_endpoint import ChannelEndpoint
from broker.network.connection import (
    EPOLLHUP_ERR,
    EPOLLIN,
    EPOLLOUT,
    CloseConnection,
    Connection,
)
from broker.network.connection_shares import (
    MAX_ACCEPTS_PER_EVENT,
    ConnectionQuotas,
    ConnectionShares,
    PartialFrameBudget,
)
from broker.network.request_reader import NEED_DATA, NEED_MEMORY, RequestReader
from broker.network.response_writer import ResponseWriter
from broker.network.tls import TlsTransport
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
        self.listener, self.channel, self.pool, self.index = listener, channel, pool, index
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
        self.max_connections = max_connections
        self.quotas = ConnectionQuotas(
            index=index, shares=shares, max_connections=max_connections,
            max_connections_per_ip=max_connections_per_ip,
            per_ip_overrides=dict(max_connections_per_ip_overrides or {}),
            max_internal_connections=max_internal_connections,
            accept_yield_s=max(accept_yield_ms, 0.1) / 1000.0)
        self.idle_s = connections_max_idle_ms / 1000.0
        self.read_timeout_s = request_read_timeout_ms / 1000.0
        self.sweep_interval_s = min(1.0, max(0.01, min(self.idle_s, self.read_timeout_s) / 10))
        self.max_queued_requests = max_queued_requests
        self.retry_s = max(memory_retry_ms, 0.1) / 1000.0
        self.conns: dict[int, Connection] = {}  # by fd
        self.by_id: dict[int, Connection] = {}
        self.now = time.monotonic()  # of the current loop iteration
        self._next_sweep = self.now + self.sweep_interval_s
        self.waiters: deque[Connection] = deque()  # parked for queue room / a slot, FIFO
        self.large_waiters: deque[Connection] = deque()  # larger frames parked for memory
        self.in_flight = 0  # requests handed over, not answered
        self.next_conn_id = 1
        self.internal_listener = internal_listener
        self.next_internal_conn_id = INTERNAL_CONN_ID_BASE
        self._accepting_internal = True
        self.stopping = False
        self.epoll = select.epoll()
        self._channel_mask = EPOLLIN
        self._accepting = True
        self.shares = shares
        self.tls_context = tls_context
        self.tls_ready: list[Connection] = []  # TLS input buffered in user space: read it
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (listener, self._wake_r, self._wake_w):
            s.setblocking(False)
        self.epoll.register(listener.fileno(), EPOLLIN)
        if internal_listener is not None:
            internal_listener.setblocking(False)
            self.epoll.register(internal_listener.fileno(), EPOLLIN)
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
        epoll, conns = self.epoll, self.conns
        listen_fd, chan_fd, wake_fd = (
            self.listener.fileno(),
            self.channel.fileno(),
            self._wake_r.fileno(),
        )
        internal_fd = -1 if self.internal_listener is None else self.internal_listener.fileno()
        try:
            while not self.stopping:
                waiting = self.waiters or self.large_waiters
                timeout = self.retry_s if waiting else self.sweep_interval_s
                if self.tls_ready:
                    timeout = 0.0
                if self.quotas.paused_until:
                    timeout = max(0.0, min(timeout, self.quotas.paused_until - self.now))
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
                        self._accept()
                    elif fd == internal_fd:
                        self._accept_internal()
                    elif fd == wake_fd:
                        self._drain_wakeup()
                if self.waiters or self.large_waiters:
                    self._retry_waiters()
                if self.tls_ready:
                    self._read_tls_buffered()
                if now >= self._next_sweep:
                    self._sweep(now)
                self.channel.flush_posted()  # this iteration's REQUEST/CLOSED: one packet
                self._update_channel_interest()
            return 0
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        for conn in list(self.conns.values()):
            self._close(conn, "shutdown", notify=False)
        self.writer.close()
        for s in (self.listener, self._wake_r, self._wake_w):
            s.close()
        if self.internal_listener is not None:
            self.internal_listener.close()
        self.epoll.close()
        self.channel.close()
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

    # accept ------------------------------------------------------------------------
    def _accept(self) -> None:
        quotas = self.quotas
        unchecked = quotas.accept_round()  # accepts allowed past the balance check
        for _ in range(MAX_ACCEPTS_PER_EVENT):
            if unchecked > 0:
                unchecked -= 1
            elif quotas.step_aside(self.now):
                return
            try:
                sock, address = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # EMFILE, ECONNABORTED...
                log.warning("network %d: accept failed: %s", self.index, exc)
                return
            ip = address[0] if isinstance(address, tuple) else str(address)
            refusal = quotas.admit_client(ip)
            if refusal is not None:
                log.info("network %d: refusing %s: %s", self.index, ip, refusal)
                sock.close()  # Kafka closes extra connections too
                continue
            self._add(sock, ip, self.next_conn_id)
            self.next_conn_id += 1

    def _accept_internal(self) -> None:
        """Accept on the internal listener: its own cap, no per-IP caps, no balancing
        (brokers open a handful of these; the main process checks who they are)."""
        assert self.internal_listener is not None
        for _ in range(MAX_ACCEPTS_PER_EVENT):
            try:
                sock, address = self.internal_listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                log.warning("network %d: internal accept failed: %s", self.index, exc)
                return
            ip = address[0] if isinstance(address, tuple) else str(address)
            refusal = self.quotas.admit_internal()
            if refusal is not None:
                log.info("network %d: refusing %s on the internal listener: %s",
                         self.index, ip, refusal)
                sock.close()
                continue
            self._add(sock, ip, self.next_internal_conn_id)
            self.next_internal_conn_id += 1

    def _add(self, sock: socket.socket, ip: str, conn_id: int) -> None:
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
                if not self.reader.read_length(conn):
                    self._set_mask(conn, EPOLLIN)
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
        if self.in_flight >= self.max_queued_requests and not reader.holds_memory(conn):
            self._park(conn, self.waiters, for_memory=False)
            return False
        try:
            frame = reader.read_frame(conn)
        except CloseConnection as exc:
            self._close(conn, exc.reason)
            return True
        if frame is NEED_MEMORY:
            large = conn.frame_len > reader.poolable
            self._park(conn, self.large_waiters if large else self.waiters, for_memory=True)
            return False
        if frame is NEED_DATA:
            self._set_mask(conn, EPOLLIN)
            self._track_deadline(conn)
        else:
            assert isinstance(frame, tuple)
            conn.frame_deadline = 0.0
            self._hand_over(conn, *frame)
        return True

    def _park(self, conn: Connection, queue: deque[Connection], *, for_memory: bool) -> None:
        """Stop reading ``conn`` until :meth:`_retry_waiters` finds room for it: at the
        back of ``queue``, or at its front for the frame holding the budget's
        designation (it must go on for the others to).  Parked for memory the read
        deadline keeps running (started now if it was not); for queue room it is off."""
        self._set_mask(conn, 0)
        if not conn.parked:
            conn.parked = True
            if for_memory:
                self._track_deadline(conn)
            else:
                conn.frame_deadline = 0.0  # waiting for the main process, not the client
            if self.reader.designated is conn:
                queue.appendleft(conn)
            else:
                queue.append(conn)

    def _track_deadline(self, conn: Connection) -> None:
        """Start the read deadline when a frame is started (kept while it goes on)."""
        if conn.frame_deadline == 0.0 and self.reader.in_frame(conn):
            conn.frame_deadline = self.now + self.read_timeout_s

    def _retry_waiters(self) -> None:
        """Go on with parked connections: the small FIFO, then the large one, each until
        its head cannot go on (a large frame parked again goes to the large FIFO and the
        small one goes on)."""
        self._retry(self.waiters)
        self._retry(self.large_waiters)

    def _retry(self, queue: deque[Connection]) -> None:
        while queue:
            conn = queue.popleft()
            conn.parked = False
            if not self._read_frame(conn):  # parked again
                if queue and queue[0] is conn:  # at the front already (designated)
                    return
                if queue and queue[-1] is conn:  # at the back: it keeps its turn
                    queue.pop()
                    queue.appendleft(conn)
                    return
                continue  # moved to the other FIFO
            if conn.tls:
                self._note_tls_buffered(conn)

    def _sweep(self, now: float) -> None:
        """Close connections past their read deadline or idle too long."""
        self._next_sweep = now + self.sweep_interval_s
        idle_before = now - self.idle_s
        silent_before = now - self.read_timeout_s
        for conn in list(self.conns.values()):
            if conn.frame_deadline:
                if now > conn.frame_deadline:
                    self._close(conn, "request read timeout")
            elif conn.active_at < idle_before and not conn.muted and not conn.parked:
                self._close(conn, "idle")  # incl. a response the client does not read
            elif (conn.conn_id >= INTERNAL_CONN_ID_BASE and not conn.known
                  and conn.active_at < silent_before):
                # a place on the internal listener held without a word: brokers speak first
                self._close(conn, "silent on the internal listener")

    def _hand_over(self, conn: Connection, handle: Handle, frame_len: int) -> None:
        try:
            if not conn.known:  # the main process learns the address once, first
                if not self.channel.post((PEER, conn.conn_id, conn.ip[:MAX_PEER_CHARS])):
                    self._free(handle)
                    self.stopping = True
                    return
                conn.known = True  # told: it hears CLOSED too, whatever happens next
            sent = self.channel.post((REQUEST, conn.conn_id, handle, frame_len))
        except ChannelFullError as exc:
            log.error("network %d: %s; closing connection %d", self.index, exc, conn.conn_id)
            self._free(handle)
            self._close(conn, "channel full")
            return
        if not sent:  # main process gone: the loop ends on channel EOF
            self._free(handle)
            self.stopping = True
            return
        conn.muted = conn.known = True
        self.in_flight += 1
        conn.active_at = self.now

    # responses -----------------------------------------------------------------------
    def _on_response(
        self, conn: Connection | None, handle: Handle, prefix_len: int, regions_len: int
    ) -> None:
        if conn is None or conn.resp is not None or not self._answered(conn):
            if conn is not None and conn.resp is not None:
                self._close(conn, "second response while one is being written")
            self._free(handle)  # connection gone: nobody else will free it
            return
        try:
            self.writer.start(conn, handle, prefix_len, regions_len)
        except CloseConnection as exc:
            self._close(conn, exc.reason)
            return
        self._write(conn)

    def _write(self, conn: Connection) -> None:
        try:
            done = self.writer.write(conn)
        except CloseConnection as exc:
            self._close(conn, exc.reason)
            return
        if done:
            self._unmute(conn)
        else:
            self._set_mask(conn, EPOLLOUT)

    # channel ------------------------------------------------------------------------
    def _on_channel(self, ev: int) -> None:
        channel = self.channel
        if ev & EPOLLOUT:
            channel.flush()
        if ev & (EPOLLIN | EPOLLHUP_ERR):
            try:
                messages = channel.recv_messages()
            except ChannelProtocolError as exc:
                log.error("network %d: bad message from the main process: %s", self.index, exc)
                self.stopping = True
                return
            by_id = self.by_id
            for msg in messages:
                kind = msg[0]
                conn = by_id.get(msg[1])
                if kind == RESPONSE:
                    self._on_response(conn, msg[2], msg[3], msg[4])
                elif conn is None:
                    continue
                elif kind == NO_RESPONSE:
                    self._answered(conn)
                    self._unmute(conn)
                elif kind == CLOSE:
                    self._close(conn, "closed by the main process")
                else:
                    log.error("network %d: unexpected message %r from main", self.index, msg)
        if channel.at_eof:
            log.info("network %d: channel closed (main process gone); exiting", self.index)
            self.stopping = True

    def _update_channel_interest(self) -> None:
        channel = self.channel
        mask = EPOLLIN | EPOLLOUT if channel.wants_write else EPOLLIN
        if mask != self._channel_mask and not channel.closed:
            self.epoll.modify(channel.fileno(), mask)
            self._channel_mask = mask
        paused = self.quotas.paused(self.now)  # a pause that is over ends here
        accepting = channel.queued < self.max_connections and not paused
        if accepting != self._accepting:  # bound the CLOSED/REQUEST backlog
            self.epoll.modify(self.listener.fileno(), EPOLLIN if accepting else 0)
            self._accepting = accepting
        internal = channel.queued < self.max_connections  # never yields to other processes
        if self.internal_listener is not None and internal != self._accepting_internal:
            self.epoll.modify(self.internal_listener.fileno(), EPOLLIN if internal else 0)
            self._accepting_internal = internal

    def _answered(self, conn: Connection) -> bool:
        if not conn.muted:
            log.error(
                "network %d: answer for connection %d that has no request", self.index, conn.conn_id
            )
            self._close(conn, "unexpected answer")
            return False
        conn.muted = False
        self.in_flight -= 1
        return True

    def _unmute(self, conn: Connection) -> None:
        conn.active_at = self.now  # the idle clock starts when the answer is out
        sock = conn.sock
        if conn.mask == 0 or (isinstance(sock, TlsTransport) and sock.buffered_input):
            self._read(conn)  # data arrived while muted: read it now, no epoll round trip
        elif conn.mask != EPOLLIN:
            self._set_mask(conn, EPOLLIN)
        if self.waiters or self.large_waiters:
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
        self.quotas.release(conn.ip, internal=conn.conn_id >= INTERNAL_CONN_ID_BASE)
        if conn.parked:
            conn.parked = False
            for queue in (self.waiters, self.large_waiters):
                if conn in queue:
                    queue.remove(conn)
        self.reader.drop(conn)
        self.writer.drop(conn)
        if conn.muted:
            conn.muted = False
            self.in_flight -= 1
        if conn.known and notify and not self.channel.at_eof:
            try:
                self.channel.post((CLOSED, conn.conn_id))
            except ChannelFullError as exc:
                log.error("network %d: CLOSED %d not sent: %s", self.index, conn.conn_id, exc)
        conn.sock.close()

    def _free(self, buffer: Buffer | Handle) -> None:
        """Give ``buffer`` back to the pool; a stale handle is logged, not raised."""
        try:
            self.pool.deallocate(buffer)  # type: ignore[arg-type]
        except StaleBufferHandleError as exc:
            log.error("network %d: freeing a buffer failed: %s", self.index, exc)
