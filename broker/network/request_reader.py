"""Reading requests in a network process: length field, pool buffer, frame, hand-over.

Per connection (a mixin of :class:`broker.network.process.NetworkProcess`):

1. read the 4-byte big-endian frame length; outside ``MIN_FRAME_BYTES..max_request_bytes``
   -> close the connection at once (nothing allocated);
2. allocate a pool buffer with ``max_block_ms=0`` (``poolable_size`` when the frame fits
   one slot: the free-list fast path). No memory (or ``max_queued_requests`` requests
   already with the main process, or the pool would drop below
   ``request_headroom_bytes``, which is kept for responses) -> the connection is parked
   in a FIFO and not read (backpressure); parked connections are retried after every
   response and every ``memory_retry_ms`` tick;
3. ``recv_into`` the buffer until the frame is complete, send
   ``REQUEST [conn_id, handle, frame_len]`` (see :mod:`broker.network`) and
   mute the connection (lazily: it is taken out of epoll only if data arrives meanwhile).

Costs per request: 2-3 ``recv`` syscalls, one ``post`` on the channel, 2 pool lock round
trips (allocate, release to the main process), no copy of the frame in Python.
Thread-safety: none; the one thread of its network process.  This code only touches
buffers it allocated and has not handed over.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from typing import TYPE_CHECKING

from broker.network.channel_codec import REQUEST, ChannelFullError
from broker.network.channel_endpoint import ChannelEndpoint
from broker.network.connection import EPOLLIN, _Conn
from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import BufferPoolError
from clients.memory.handles import Buffer
from clients.protocol.framing import MIN_FRAME_BYTES

log = logging.getLogger("broker.network")

_LENGTH = struct.Struct(">i")


class NetworkRequestReader:
    """Request reading of :class:`~broker.network.process.NetworkProcess`."""

    if TYPE_CHECKING:  # provided by NetworkProcess
        channel: ChannelEndpoint
        pool: BufferPool
        index: int
        max_request_bytes: int
        max_queued_requests: int
        headroom: int
        poolable: int
        waiters: deque[_Conn]
        in_flight: int
        stopping: bool

        def _set_mask(self, conn: _Conn, mask: int) -> None: ...
        def _close(self, conn: _Conn, reason: str, *, notify: bool = True) -> None: ...
        def _free(self, buffer: Buffer | tuple[int, int, int]) -> None: ...

    # reading requests -------------------------------------------------------------
    def _read(self, conn: _Conn) -> None:
        if conn.frame_len == 0:
            hf = conn.header_filled
            try:
                if hf == 0:
                    n = conn.sock.recv_into(conn.header)
                else:
                    n = conn.sock.recv_into(memoryview(conn.header)[hf:])
            except BlockingIOError:
                if conn.mask != EPOLLIN:
                    self._set_mask(conn, EPOLLIN)
                return
            except OSError as exc:
                self._close(conn, f"recv failed: {exc}")
                return
            if n == 0:
                self._close(conn, "client closed")
                return
            hf += n
            if hf < 4:
                conn.header_filled = hf
                return
            conn.header_filled = 0
            length = _LENGTH.unpack(conn.header)[0]
            if not MIN_FRAME_BYTES <= length <= self.max_request_bytes:
                self._close(
                    conn,
                    f"frame length {length} outside {MIN_FRAME_BYTES}..{self.max_request_bytes}",
                )
                return
            conn.frame_len = length
            if not self._allocate(conn):
                self._set_mask(conn, 0)
                self.waiters.append(conn)
                return
        self._read_body(conn)

    def _allocate(self, conn: _Conn) -> bool:
        """Give ``conn`` a request buffer now, or return False (never blocks)."""
        if self.in_flight >= self.max_queued_requests:
            return False
        length = conn.frame_len
        size = self.poolable if length <= self.poolable else length
        pool = self.pool
        if self.headroom and pool.available_memory() - size < self.headroom:
            return False
        try:
            conn.buffer = pool.allocate(size, 0)
        except BufferPoolError:
            return False
        conn.filled = 0
        return True

    def _retry_waiters(self) -> None:
        waiters = self.waiters
        while waiters:
            conn = waiters[0]
            if conn.closed:
                waiters.popleft()
                continue
            if not self._allocate(conn):
                return
            waiters.popleft()
            self._read_body(conn)  # watches EPOLLIN again only if the body is not all there

    def _read_body(self, conn: _Conn) -> None:
        buf = conn.buffer
        assert buf is not None
        view, length, recv_into = buf.memory, conn.frame_len, conn.sock.recv_into
        filled = conn.filled
        while filled < length:
            try:
                n = recv_into(view[filled:length])
            except BlockingIOError:
                conn.filled = filled
                if conn.mask != EPOLLIN:
                    self._set_mask(conn, EPOLLIN)
                return
            except OSError as exc:
                self._close(conn, f"recv failed: {exc}")
                return
            if n == 0:
                self._close(conn, "client closed mid-frame")
                return
            filled += n
        self._hand_over(conn, buf, length)

    def _hand_over(self, conn: _Conn, buf: Buffer, length: int) -> None:
        conn.buffer = None
        conn.frame_len = conn.filled = 0
        handle = (buf.slot, buf.size, buf.generation)
        buf.release()
        try:
            sent = self.channel.post((REQUEST, conn.conn_id, handle, length))
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
