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
     is gathered into one buffer of its size (below) and handed over.

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

Gathering a chunked frame (issue 32).  The main process decodes a request in place, so
it gets one contiguous buffer.  Usually a run of free memory of the frame's length is
taken (without the response headroom: it replaces as many chunks, freed right after)
and the chunks copied in.  But chunks are single slots, handed out LIFO from the free
list, so the chunks of a few frames can fragment the pool: no free run of a frame's
length although half the pool is free.  The budget gives the designated frame room to
complete, not a contiguous run; complete frames then waited for memory that only their
own chunks held, until ``request_read_timeout_ms`` closed them (a 16-slot pool, 4-slot
frames, two frames' chunks: 8 slots free, longest run 3).  So when no free run is long
enough, :meth:`BufferPool.try_allocate_over
<clients.memory.buffer_pool.BufferPool.try_allocate_over>` takes the first run whose
slots are free or hold a chunk of *this process* (``chunked`` lists the connections
holding chunks), atomically and without waiting; the chunks inside the run become part
of the new buffer, bytes in place; then the bytes are moved (a parallel move, cycles
broken through a one-slot copy): the frame's chunks to their place in the run, chunks
of other frames that were in the run into the frame's own chunks outside it (there are
always enough: the run is as long as the frame's chunks), the rest of those freed.
The pool holds no more memory after than before (the free slots taken equal the chunks
freed) and the budget counts stay as they were (the other frames keep as many slots).
So a complete frame never waits for chunks of its own network process: it is handed
over whenever some run of its length holds only free slots and this process's chunks
(with one network process, the default, always, unless buffers of the main process or
small requests are in every such run: those are freed as the broker answers).
Not covered: chunks of *other* network processes and TLS frames read in place (not
movable from here); in a broker with several network processes, frames of different
processes can still block each other's runs until one of them is handed over or
closed at its deadline.  Costs, only when no free run is long enough: an
O(num_slots + chunks held) scan under the pool lock (about 0.3 ms for 2048 slots and
512 chunks, paid again on each retry of a parked frame while no run exists), and at
most two slot copies per slot of the frame (instead of one).  Weighed and not done: handing the
main process the chunk list (the channel carries one handle, the handlers decode one
contiguous buffer in place, a produce writes it to the segment in one piece: the copy
would move into the main process's loop, into memory outside the pool or into a pool
run with the same problem); placing a designated frame's chunks in a run reserved when
it is designated (that run may not exist at designation either, the pool keeps only one
reservation, the blocking head waiter's, and frames completing in the shared part
would still need a copy).

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
calls) each way per ``poolable_size`` slot, and one copy of the frame (C ``memcpy``;
up to two when the pool is fragmented, see "Gathering").
Thread-safety: none; the one thread of its network process.  It only touches buffers it
allocated and has not handed over (gathering may move another connection's chunk into
a slot of the frame being gathered: it replaces that chunk in ``conn.chunks``).
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
        self.chunked: set[Connection] = set()  # connections whose frame holds chunks

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
                self.chunked.add(conn)
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
                        self.chunked.discard(conn)
                        self._settle(conn)
                return NEED_DATA
            except OSError as exc:
                raise CloseConnection(f"recv failed: {exc}") from None
            if n == 0:
                raise CloseConnection("client closed mid-frame")
            conn.filled += n
        buf = self._gather(conn)
        if buf is None:
            return NEED_MEMORY
        return self._hand_over(conn, buf)

    def _gather(self, conn: Connection) -> Buffer | None:
        """The complete chunked frame of ``conn`` in one buffer of its size, its chunks
        given up; None when the pool has no run for it even counting every chunk of this
        process as movable (see the module docstring, "Gathering")."""
        length, poolable, chunks = conn.frame_len, self.poolable, conn.chunks
        # a run of free memory, taken without the headroom (the chunks it replaces are
        # freed right after): the usual case, a plain copy
        buf = self._take(length, headroom=False)
        if buf is None:  # fragmented: a run over free slots and this process's chunks
            movable = [chunk for c in self.chunked for chunk in c.chunks]
            try:
                buf = self.pool.try_allocate_over(length, movable)
            except BufferPoolError:
                return None
            if buf is None:
                return None
        first, last = buf.slot, buf.slot + len(chunks)
        memory = buf.memory
        moves: list[_Move] = []
        spare: list[Buffer] = []  # this frame's chunks outside the run
        for index, chunk in enumerate(chunks):
            if not first <= chunk.slot < last:
                spare.append(chunk)
            if chunk.slot != first + index:
                start = index * poolable
                moves.append((chunk.slot, chunk.memory[: min(poolable, length - start)],
                              first + index, memory[start : start + poolable]))
        absorbed = [chunk for chunk in chunks if first <= chunk.slot < last]
        for other in self.chunked:  # chunks of other frames inside the run move out,
            if other is conn:  # into this frame's slots outside it (as many as needed:
                continue  # the run holds len(chunks) slots)
            for index, chunk in enumerate(other.chunks):
                if first <= chunk.slot < last:
                    into = spare.pop()
                    moves.append((chunk.slot, chunk.memory, into.slot, into.memory))
                    other.chunks[index] = into
                    absorbed.append(chunk)
        _move_all(moves)
        for chunk in absorbed:  # part of the new buffer now: only our views go
            chunk.release()
        for chunk in spare:
            self._free(chunk)
        chunks.clear()
        self.chunked.discard(conn)
        return buf

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
        self.chunked.discard(conn)
        self._settle(conn)


_Move = tuple[int, memoryview, int, memoryview]  # source slot, its bytes, target slot, view


def _move_all(moves: list[_Move]) -> None:
    """Copy every move's bytes to its target as if all at once (a parallel move): each
    slot is the source of at most one move and the target of at most one, so the moves
    form chains, done from the end that overwrites nothing still needed, and cycles,
    broken by saving one slot's bytes aside."""
    by_target = {move[2]: move for move in moves}
    needed = {move[0] for move in moves}  # slots whose bytes are still to be copied
    ready = [move for move in moves if move[2] not in needed]
    while by_target:
        if not ready:  # only cycles left: one source aside frees its slot
            source, data, target, view = next(iter(by_target.values()))
            by_target[target] = (-1, memoryview(bytes(data)), target, view)
            needed.discard(source)
            ready.append(by_target[source])
        while ready:
            source, data, target, view = ready.pop()
            view[: len(data)] = data
            del by_target[target]
            needed.discard(source)
            follow = by_target.get(source)  # the move into the slot just read
            if follow is not None:
                ready.append(follow)
