"""Reading requests in a network process: length field, pool buffer, frame.

:class:`RequestReader` reads one connection's request in three steps, each a call from
the loop (:class:`broker.network.process.NetworkProcess`), which decides what happens
in between:

1. :meth:`~RequestReader.read_length` - the 4-byte big-endian frame length; outside
   ``MIN_FRAME_BYTES..max_request_bytes`` -> :class:`CloseConnection` (nothing allocated);
2. :meth:`~RequestReader.allocate` - a pool buffer with ``max_block_ms=0``
   (``poolable_size`` when the frame fits one slot: the free-list fast path), or False
   when the pool has no memory or would drop below ``request_headroom_bytes`` (kept for
   responses).  The loop asks only while fewer than ``max_queued_requests`` requests are
   with the main process, and parks the connection otherwise (backpressure);
3. :meth:`~RequestReader.read_frame` - ``recv_into`` the buffer until the frame is
   complete, then release the buffer for the hand-over and return its handle.

Contract: the reader owns the read half of a :class:`Connection` (``header``,
``header_filled``, ``frame_len``, ``filled``, ``buffer``) and the request buffer from
allocation until :meth:`~RequestReader.read_frame` returns it (or :meth:`~RequestReader.drop`
frees it when the loop closes the connection).  It never touches epoll, the channel or
the connection's mute state: every step returns to the loop, and a connection that must
be closed raises :class:`CloseConnection`.

Costs per request: 2-3 ``recv`` syscalls, 2 pool lock round trips (allocate, release to
the main process), no copy of the frame in Python.  Thread-safety: none; the one thread
of its network process.  It only touches buffers it allocated and has not handed over.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from broker.network.channel_codec import Handle
from broker.network.connection import CloseConnection, Connection
from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import BufferPoolError
from clients.memory.handles import Buffer
from clients.protocol.framing import MIN_FRAME_BYTES

_LENGTH = struct.Struct(">i")


class RequestReader:
    """Reads request frames of connections into pool buffers (contract: module docstring).

    ``free`` gives a buffer back to the pool (the loop's, which logs a stale handle
    instead of raising).
    """

    def __init__(
        self,
        pool: BufferPool,
        *,
        max_request_bytes: int,
        request_headroom_bytes: int,
        free: Callable[[Buffer | Handle], None],
    ) -> None:
        self.pool = pool
        self.max_request_bytes = max_request_bytes
        self.headroom = request_headroom_bytes
        self.poolable = pool.poolable_size
        self._free = free

    def read_length(self, conn: Connection) -> bool:
        """Read the length field; True once ``conn.frame_len`` is known, False when the
        socket has no more bytes now.  Raises :class:`CloseConnection`."""
        hf = conn.header_filled
        try:
            if hf == 0:
                n = conn.sock.recv_into(conn.header)
            else:
                n = conn.sock.recv_into(memoryview(conn.header)[hf:])
        except BlockingIOError:
            return False
        except OSError as exc:
            raise CloseConnection(f"recv failed: {exc}") from None
        if n == 0:
            raise CloseConnection("client closed")
        hf += n
        if hf < 4:
            conn.header_filled = hf
            return False
        conn.header_filled = 0
        length = _LENGTH.unpack(conn.header)[0]
        if not MIN_FRAME_BYTES <= length <= self.max_request_bytes:
            raise CloseConnection(
                f"frame length {length} outside {MIN_FRAME_BYTES}..{self.max_request_bytes}"
            )
        conn.frame_len = length
        return True

    def allocate(self, conn: Connection) -> bool:
        """Give ``conn`` a buffer for its frame now, or return False (never blocks)."""
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

    def read_frame(self, conn: Connection) -> tuple[Handle, int] | None:
        """Read the frame into ``conn.buffer``.  Complete: the buffer is released by this
        process and ``(handle, frame_len)`` returned for the hand-over (the read half is
        reset for the next request); None when the socket has no more bytes now.
        Raises :class:`CloseConnection`."""
        buf = conn.buffer
        assert buf is not None
        view, length, recv_into = buf.memory, conn.frame_len, conn.sock.recv_into
        filled = conn.filled
        while filled < length:
            try:
                n = recv_into(view[filled:length])
            except BlockingIOError:
                conn.filled = filled
                return None
            except OSError as exc:
                raise CloseConnection(f"recv failed: {exc}") from None
            if n == 0:
                raise CloseConnection("client closed mid-frame")
            filled += n
        conn.buffer = None
        conn.frame_len = conn.filled = 0
        handle = (buf.slot, buf.size, buf.generation)
        buf.release()
        return handle, length

    def drop(self, conn: Connection) -> None:
        """Free the request buffer of a connection being closed."""
        if conn.buffer is not None:
            self._free(conn.buffer)
            conn.buffer = None
