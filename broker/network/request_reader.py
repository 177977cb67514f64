"""Reading requests in a network process: length field, pool memory as the bytes arrive, frame.

:class:`RequestReader` reads one connection's request in two steps, each a call from the
loop (:class:`broker.network.process.NetworkProcess`), which decides what happens in
between (queue room, parking, deadlines):

1. :meth:`~RequestReader.read_length` - the 4-byte big-endian frame length, which may
   arrive in pieces (any split; the bytes read so far are kept in ``conn.header``);
   outside ``MIN_FRAME_BYTES..max_request_bytes`` -> :class:`CloseConnection` (nothing
   allocated);
2. :meth:`~RequestReader.read_frame` - the frame's bytes into pool memory, taken **as the
   bytes arrive**, never for bytes only promised by the length field:

   - a frame of at most ``poolable_size`` bytes gets one pool slot (the free-list fast
     path); if no byte of it has arrived yet the slot is given back at once, so an idle
     connection that sent only a length holds no memory;
   - a larger frame whose bytes are all in the socket already (``FIONREAD``) gets one
     buffer of its size and is read straight into it (no copy: the usual case for an
     honest client);
   - otherwise it is read into ``poolable_size`` slots (``conn.chunks``), one more taken
     only when the previous is full and more bytes came; once the frame is complete it
     is copied into one buffer of its size (taken without the response headroom: it
     replaces the same amount of chunks, freed right after) and handed over.

   So a connection holds at most one slot more than the bytes it actually sent.
   At most ``READ_TURN_BYTES`` (1 MiB) are read from one connection per call; the loop
   (level-triggered) comes back for the rest after serving the others.
   Every allocation is non-blocking (``max_block_ms=0``) and, except the final copy,
   leaves ``request_headroom_bytes`` free for responses; when memory is short
   ``read_frame`` returns :data:`NEED_MEMORY` and the loop parks the connection.

Partial frames (issue 30): the slots of a frame larger than ``poolable_size`` whose
bytes are not all here - its chunks, and on TLS connections (where ``FIONREAD`` counts
ciphertext, so the plaintext may still stop short) its in-place buffer, counted whole
when taken - are counted in the broker-wide
:class:`~broker.network.connection_shares.PartialFrameBudget`
(``max_partial_request_bytes``; ``conn.partial_slots``), taken before the pool is asked
and given back when the frame is handed over or dropped.  A frame refused by the
budget's shared part takes the designation when no frame holds it (the reader keeps
that frame in ``designated``); otherwise :data:`NEED_MEMORY`.  Not counted, so always
admitted while the pool has memory: a frame of at most ``poolable_size`` (one slot per
connection, so ``max_connections`` slots per network process at most, each for at most
``request_read_timeout_ms``), and on plain TCP a frame whose bytes are all in the socket
(it cannot stall: it is read within ``frame_len / READ_TURN_BYTES`` turns).  So however
many connections stall half-way through large frames, they hold at most
``max_partial_request_bytes`` of the pool and small requests still find memory.

Contract: the reader owns the read half of a :class:`Connection` (``header``,
``header_filled``, ``frame_len``, ``filled``, ``buffer``, ``chunks``,
``partial_slots``) and the request
memory from allocation until :meth:`~RequestReader.read_frame` returns the frame's handle
(or :meth:`~RequestReader.drop` frees it when the loop closes the connection).  It never
touches epoll, the channel or the connection's mute state: every step returns to the
loop, and a connection that must be closed raises :class:`CloseConnection`.

Costs per request: small frame 2-3 ``recv`` syscalls and 2 pool lock round trips
(allocate, release to the main process), no copy; large frame +1 ``ioctl``; a large
frame that trickles in adds one pool lock round trip and one budget step (two ``fcntl``
calls) each way per ``poolable_size`` slot, and one copy of the frame (C ``memcpy``).
Thread-safety: none; the one thread of its network process.  It only touches buffers it
allocated and has not handed over.
"""

from __future__ import annotations

import fcntl
import struct
import termios
from collections.abc import Callable
from typing import Final

from broker.network.channel.codec import Handle
from broker.network.connection import CloseConnection, Connection
from broker.network.connection_shares import PartialFrameBudget
from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import BufferPoolError
from clients.memory.handles import Buffer
from clients.protocol.framing import MIN_FRAME_BYTES

_LENGTH = struct.Struct(">i")
READ_TURN_BYTES = 1 << 20  # bytes read from one connection before the loop serves others
_INT = struct.Struct("i")  # FIONREAD answers a native int
_INT_ZERO = bytes(4)


class _Wait:
    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"<wait for {self.what}>"


NEED_DATA: Final = _Wait("data")  # the socket has no more bytes now: watch EPOLLIN
NEED_MEMORY: Final = _Wait("memory")  # no pool memory now: park, retry later


class RequestReader:
    """Reads request frames of connections into pool buffers (contract: module docstring).

    ``free`` gives a buffer back to the pool (the loop's, which logs a stale handle
    instead of raising); ``budget`` counts the slots of partial frames.
    """

    def __init__(
        self,
        pool: BufferPool,
        *,
        max_request_bytes: int,
        request_headroom_bytes: int,
        free: Callable[[Buffer | Handle], None],
        budget: PartialFrameBudget,
    ) -> None:
        self.pool = pool
        self.max_request_bytes = max_request_bytes
        self.headroom = request_headroom_bytes
        self.poolable = pool.poolable_size
        self._free = free
        self.budget = budget
        self.designated: Connection | None = None  # holds the budget's designation

    @staticmethod
    def in_frame(conn: Connection) -> bool:
        """A frame of ``conn`` is started (part of its length or body was read)."""
        return conn.header_filled > 0 or conn.frame_len > 0

    @staticmethod
    def holds_memory(conn: Connection) -> bool:
        return conn.buffer is not None or bool(conn.chunks)

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
        conn.filled = 0
        return True

    # memory ---------------------------------------------------------------------------
    def _take(self, size: int, *, headroom: bool = True) -> Buffer | None:
        """A pool buffer of ``size`` bytes now, or None (never blocks)."""
        pool = self.pool
        if headroom and self.headroom and pool.available_memory() - size < self.headroom:
            return None
        try:
            return pool.allocate(size, 0)
        except BufferPoolError:
            return None

    def _charge(self, conn: Connection, slots: int) -> bool:
        """Count ``slots`` more of ``conn``'s frame in the partial-frame budget, taking
        the designation if the shared part is full and no frame holds it."""
        budget = self.budget
        if budget.try_take(slots, designated=self.designated is conn):
            conn.partial_slots += slots
            return True
        if self.designated is None and budget.try_designate(conn.partial_slots):
            self.designated = conn
            if budget.try_take(slots, designated=True):
                conn.partial_slots += slots
                return True
        return False

    def _uncharge(self, conn: Connection, slots: int) -> None:
        self.budget.give(slots, designated=self.designated is conn)
        conn.partial_slots -= slots

    def _settle(self, conn: Connection) -> None:
        """``conn``'s frame is handed over or dropped: give its slots and designation back."""
        if conn.partial_slots:
            self._uncharge(conn, conn.partial_slots)
        if self.designated is conn:
            self.designated = None
            self.budget.release_designation()

    def _pending_bytes(self, conn: Connection) -> int:
        try:
            return int(_INT.unpack(fcntl.ioctl(conn.fd, termios.FIONREAD, _INT_ZERO))[0])
        except OSError:
            return 0

    # frame ----------------------------------------------------------------------------
    def read_frame(self, conn: Connection) -> tuple[Handle, int] | _Wait:
        """Read the frame (``conn.frame_len`` known) into pool memory taken as its bytes
        arrive.  Complete: the frame's buffer is released by this process and
        ``(handle, frame_len)`` returned for the hand-over (the read half is reset for the
        next request); :data:`NEED_DATA` when the socket has no more bytes now;
        :data:`NEED_MEMORY` when the pool has no memory for the next bytes.
        Raises :class:`CloseConnection`."""
        length = conn.frame_len
        if conn.buffer is None and not conn.chunks:
            if length <= self.poolable:
                conn.buffer = self._take(self.poolable)
                if conn.buffer is None:
                    return NEED_MEMORY
            elif self._pending_bytes(conn) >= length:
                if not conn.tls:
                    conn.buffer = self._take(length)  # all there: read it in place
                else:  # ciphertext: the frame may still stop short, so it is counted
                    slots = -(-length // self.poolable)
                    if self._charge(conn, slots):
                        conn.buffer = self._take(length)
                        if conn.buffer is None:
                            self._uncharge(conn, slots)
        if conn.buffer is not None:
            return self._read_contiguous(conn)
        return self._read_chunks(conn)

    def _read_contiguous(self, conn: Connection) -> tuple[Handle, int] | _Wait:
        buf = conn.buffer
        assert buf is not None
        view, length, recv_into = buf.memory, conn.frame_len, conn.sock.recv_into
        filled = conn.filled
        turn_end = filled + READ_TURN_BYTES
        while filled < length:
            if filled >= turn_end:  # fairness: the loop comes back (level-triggered)
                conn.filled = filled
                return NEED_DATA
            try:
                n = recv_into(view[filled:length])
            except BlockingIOError:
                conn.filled = filled
                if filled == 0:  # nothing of the frame arrived: hold no memory meanwhile
                    conn.buffer = None
                    self._free(buf)
                    self._settle(conn)
                return NEED_DATA
            except OSError as exc:
                raise CloseConnection(f"recv failed: {exc}") from None
            if n == 0:
                raise CloseConnection("client closed mid-frame")
            filled += n
        conn.buffer = None
        return self._hand_over(conn, buf)

    def _read_chunks(self, conn: Connection) -> tuple[Handle, int] | _Wait:
        length, poolable, chunks = conn.frame_len, self.poolable, conn.chunks
        recv_into = conn.sock.recv_into
        turn_end = conn.filled + READ_TURN_BYTES
        while conn.filled < length:
            if conn.filled >= turn_end:  # fairness: the loop comes back (level-triggered)
                return NEED_DATA
            index, offset = divmod(conn.filled, poolable)
            if index == len(chunks):
                if not self._charge(conn, 1):
                    return NEED_MEMORY
                chunk = self._take(poolable)
                if chunk is None:
                    self._uncharge(conn, 1)
                    return NEED_MEMORY
                chunks.append(chunk)
            chunk = chunks[index]
            end = min(poolable, length - index * poolable)
            try:
                n = recv_into(chunk.memory[offset:end])
            except BlockingIOError:
                if offset == 0:  # nothing arrived for this slot: give it back
                    chunks.pop()
                    self._free(chunk)
                    self._uncharge(conn, 1)
                    if not chunks:  # nothing held: no designation either
                        self._settle(conn)
                return NEED_DATA
            except OSError as exc:
                raise CloseConnection(f"recv failed: {exc}") from None
            if n == 0:
                raise CloseConnection("client closed mid-frame")
            conn.filled += n
        # complete: one buffer of the frame's size, taken without the headroom (the
        # chunks it replaces are freed right after), then the chunks copied in
        buf = self._take(length, headroom=False)
        if buf is None:
            return NEED_MEMORY
        memory = buf.memory
        for index, chunk in enumerate(chunks):
            start = index * poolable
            end = min(start + poolable, length)
            memory[start:end] = chunk.memory[: end - start]
            self._free(chunk)
        chunks.clear()
        return self._hand_over(conn, buf)

    def _hand_over(self, conn: Connection, buf: Buffer) -> tuple[Handle, int]:
        self._settle(conn)
        length = conn.frame_len
        conn.frame_len = conn.filled = 0
        handle = (buf.slot, buf.size, buf.generation)
        buf.release()
        return handle, length

    def drop(self, conn: Connection) -> None:
        """Free the request memory of a connection being closed."""
        if conn.buffer is not None:
            self._free(conn.buffer)
            conn.buffer = None
        for chunk in conn.chunks:
            self._free(chunk)
        conn.chunks.clear()
        self._settle(conn)
