"""Descriptor channel between the broker's main process and one network process.

Transport: one ``AF_UNIX``/``SOCK_SEQPACKET`` socketpair per network process (packet
boundaries kept by the kernel, in order, reliable; EOF when the peer process dies).
A packet (at most :data:`MAX_MESSAGE_BYTES` bytes) holds one message - a msgpack array
as below - or a batch: a msgpack array of up to :data:`MAX_BATCH_MESSAGES` messages,
processed in order (messages posted in one event-loop iteration share one syscall). The
payloads (request frames, responses) live in buffers of the broker's shared-memory
:class:`~clients.buffer_pool.BufferPool`, a ``handle`` is ``[slot, size, generation]``:

| direction  | message                                          | meaning                          |
|------------|--------------------------------------------------|----------------------------------|
| net → main | ``[0, "ready", port, pid]``                      | READY: listening on ``port``     |
| net → main | ``[1, conn_id, handle, frame_len]``              | REQUEST: frame bytes (no length  |
|            |                                                  | field) in ``handle[:frame_len]`` |
| net → main | ``[2, conn_id]``                                 | CLOSED: a connection that sent a |
|            |                                                  | request is gone                  |
| main → net | ``[3, conn_id, handle, prefix_len, regions_len]``| RESPONSE: write ``prefix_len``   |
|            |                                                  | bytes, then sendfile the msgpack |
|            |                                                  | ``[[path, position, length],..]``|
|            |                                                  | stored after them; free; unmute  |
| main → net | ``[4, conn_id]``                                 | NO_RESPONSE (acks=0): unmute     |
| main → net | ``[5, conn_id]``                                 | CLOSE: close the connection      |

Buffer ownership (who frees, and whose death reclaims what): a request buffer is
allocated by the network process and *claimed* by the main process when the REQUEST is
received (:class:`MainChannelEndpoint` does it), so a network process that dies later
cannot take it with it; the main process frees it. A response buffer is allocated and
owned by the main process and freed by the network process once written (or at once
when its connection is already gone); :class:`MainChannelEndpoint` remembers the last
response handle of every connection so the supervisor can free the ones a dead network
process never wrote (a handle the network process did free is stale by then, thanks to
the slot generation, and is skipped).

:class:`ChannelEndpoint` wraps one side: non-blocking ``send`` with a bounded queue of
messages the kernel did not take yet (:class:`ChannelFullError` beyond the bound), and
``recv_messages`` returning every message available now. From asyncio use
:meth:`ChannelEndpoint.attach_loop` (``add_reader``, and ``add_writer`` only while the
queue is non-empty); the network process registers :meth:`fileno` in its own epoll.

Costs: encode/decode of one message is one msgpack call (~1 us); one ``send``/``recv``
syscall per message. Thread-safety: an endpoint belongs to one thread (its event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Self

import msgpack

from clients.buffer_pool import BufferPool
from clients.buffer_pool_errors import StaleBufferHandleError
from clients.errors import MiniKafkaError, ProtocolError

__all__ = [
    "CLOSE",
    "CLOSED",
    "MAX_MESSAGE_BYTES",
    "NO_RESPONSE",
    "READY",
    "REQUEST",
    "RESPONSE",
    "ChannelEndpoint",
    "ChannelFullError",
    "ChannelProtocolError",
    "Handle",
    "MainChannelEndpoint",
    "decode_message",
    "decode_packet",
    "encode_close",
    "encode_closed",
    "encode_no_response",
    "encode_packet",
    "encode_ready",
    "encode_request",
    "encode_response",
]

log = logging.getLogger(__name__)

READY, REQUEST, CLOSED, RESPONSE, NO_RESPONSE, CLOSE = range(6)
MAX_BATCH_MESSAGES = 256
MAX_MESSAGE_BYTES = 64 * 1024  # one packet: a batch of MAX_BATCH_MESSAGES fits easily
SOCKET_BUFFER_BYTES = 1 << 20  # asked for; the kernel caps it at net.core.[rw]mem_max
_ARITY = (4, 4, 2, 5, 2, 2)  # message length by type
_NAMES = ("READY", "REQUEST", "CLOSED", "RESPONSE", "NO_RESPONSE", "CLOSE")

Handle = tuple[int, int, int]  # (slot, size, generation), e.g. a BufferHandle
Message = tuple[Any, ...]

_packb = msgpack.packb
_unpackb = msgpack.unpackb


class ChannelProtocolError(ProtocolError):
    """A channel message that is not one of the declared messages."""


class ChannelFullError(MiniKafkaError):
    """More messages waiting for the peer than ``max_queued_messages``."""


# ----------------------------------------------------------------------- codec


def encode_ready(port: int, pid: int) -> bytes:
    return _packb((READY, "ready", port, pid))  # type: ignore[no-any-return]


def encode_request(conn_id: int, handle: Handle, frame_len: int) -> bytes:
    return _packb((REQUEST, conn_id, handle, frame_len))  # type: ignore[no-any-return]


def encode_closed(conn_id: int) -> bytes:
    return _packb((CLOSED, conn_id))  # type: ignore[no-any-return]


def encode_response(conn_id: int, handle: Handle, prefix_len: int, regions_len: int) -> bytes:
    return _packb((RESPONSE, conn_id, handle, prefix_len, regions_len))  # type: ignore[no-any-return]


def encode_no_response(conn_id: int) -> bytes:
    return _packb((NO_RESPONSE, conn_id))  # type: ignore[no-any-return]


def encode_close(conn_id: int) -> bytes:
    return _packb((CLOSE, conn_id))  # type: ignore[no-any-return]


def _is_int(value: object) -> bool:
    return type(value) is int


def _is_handle(value: object) -> bool:
    return (
        type(value) is tuple
        and len(value) == 3
        and all(type(v) is int for v in value)
        and value[0] >= 0
        and value[1] > 0
    )


def decode_message(data: bytes | memoryview) -> Message:
    """Decode and validate one message; returns a tuple shaped as in the table above
    (a handle is a ``(slot, size, generation)`` tuple)."""
    return _validate(_unpack(data))


def decode_packet(data: bytes | memoryview) -> list[Message]:
    """Decode one channel packet: a single message, or an array of messages (a batch)."""
    obj = _unpack(data)
    if type(obj) is tuple and obj and type(obj[0]) is tuple:
        if len(obj) > MAX_BATCH_MESSAGES:
            raise ChannelProtocolError(f"batch of {len(obj)} messages > {MAX_BATCH_MESSAGES}")
        return [_validate(msg) for msg in obj]
    return [_validate(obj)]


def encode_packet(messages: list[Message]) -> bytes:
    """One packet for 1..MAX_BATCH_MESSAGES message tuples."""
    return _packb(messages[0] if len(messages) == 1 else messages)  # type: ignore[no-any-return]


def _unpack(data: bytes | memoryview) -> Any:
    try:
        return _unpackb(data, use_list=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ChannelProtocolError(f"channel message is not msgpack: {exc}") from None


def _validate(msg: Any) -> Message:
    if type(msg) is not tuple or not msg or type(msg[0]) is not int:
        raise ChannelProtocolError(f"channel message must be an array [type, ...], got {msg!r}")
    kind = msg[0]
    if not 0 <= kind < len(_ARITY):
        raise ChannelProtocolError(f"unknown channel message type {kind}")
    if len(msg) != _ARITY[kind]:
        raise ChannelProtocolError(
            f"{_NAMES[kind]} message needs {_ARITY[kind]} fields, got {len(msg)}: {msg!r}"
        )
    if kind == REQUEST:
        ok = _is_int(msg[1]) and _is_handle(msg[2]) and _is_int(msg[3]) and msg[3] > 0
    elif kind == RESPONSE:
        ok = (
            _is_int(msg[1])
            and _is_handle(msg[2])
            and _is_int(msg[3])
            and _is_int(msg[4])
            and msg[3] >= 0
            and msg[4] >= 0
            and msg[3] + msg[4] <= msg[2][1]
        )
    elif kind == READY:
        ok = msg[1] == "ready" and _is_int(msg[2]) and 0 < msg[2] < 65536 and _is_int(msg[3])
    else:
        ok = _is_int(msg[1])
    if not ok:
        raise ChannelProtocolError(f"malformed {_NAMES[kind]} message: {msg!r}")
    return msg


# -------------------------------------------------------------------- endpoint


class ChannelEndpoint:
    """One side of a descriptor channel over a SOCK_SEQPACKET socket (made non-blocking).

    ``send`` never blocks: what the kernel refuses waits in a FIFO of at most
    ``max_queued_messages`` messages, written by :meth:`flush` when the socket is
    writable (``wants_write`` tells when to watch for that). ``recv_messages`` returns
    the decoded messages available now; ``at_eof`` turns true when the peer is gone.
    """

    def __init__(self, sock: socket.socket, *, max_queued_messages: int = 4096) -> None:
        if max_queued_messages <= 0:
            raise ValueError(f"max_queued_messages must be positive, got {max_queued_messages}")
        sock.setblocking(False)
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            with contextlib.suppress(OSError):  # best effort
                sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
        self._sock = sock
        self._fd = sock.fileno()
        self._queue: deque[bytes] = deque()  # packets the kernel did not take yet
        self._batch: list[Message] = []  # posted, not yet packed
        self._rbuf = bytearray(MAX_MESSAGE_BYTES + 1)
        self._rview = memoryview(self._rbuf)
        self.max_queued_messages = max_queued_messages
        self.at_eof = False
        self.closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writer_registered = False
        self._on_messages: Callable[[list[Message]], None] | None = None
        self._on_eof: Callable[[], None] | None = None

    @classmethod
    def pair(cls, **kwargs: Any) -> tuple[Self, socket.socket]:
        """A new endpoint plus the raw peer socket (to pass to a child process)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        return cls(mine, **kwargs), theirs

    def fileno(self) -> int:
        return self._fd

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def wants_write(self) -> bool:
        return bool(self._queue) and not self.at_eof

    # sending -------------------------------------------------------------------
    def send(self, data: bytes) -> bool:
        """Send or queue one message. False if the channel is closed (message dropped);
        ChannelFullError if the queue bound would be exceeded."""
        if self.at_eof:
            return False
        if not self._queue:
            try:
                self._sock.send(data)
                return True
            except BlockingIOError:
                pass
            except OSError as exc:
                self._broken(exc)
                return False
        if len(self._queue) >= self.max_queued_messages:
            raise ChannelFullError(
                f"{len(self._queue)} channel messages wait for the peer "
                f"(max_queued_messages={self.max_queued_messages})"
            )
        self._queue.append(data)
        if self._loop is not None and not self._writer_registered:
            self._loop.add_writer(self._fd, self._on_writable)
            self._writer_registered = True
        return True

    def post(self, message: Message) -> bool:
        """Add a message to the current batch (sent as one packet by
        :meth:`flush_posted`; when attached to a loop that is scheduled with
        ``call_soon``, so every message posted in one loop iteration shares a syscall).
        False if the channel is closed (message dropped)."""
        if self.at_eof:
            return False
        batch = self._batch
        batch.append(message)
        if len(batch) >= MAX_BATCH_MESSAGES:
            self.flush_posted()
        elif len(batch) == 1 and self._loop is not None:
            self._loop.call_soon(self.flush_posted)
        return True

    def flush_posted(self) -> None:
        """Send the posted messages as one packet (no-op when there are none)."""
        batch = self._batch
        if batch:
            data = encode_packet(batch)
            batch.clear()
            self.send(data)

    def flush(self) -> bool:
        """Write queued messages until the kernel refuses; True when none is left."""
        queue, send = self._queue, self._sock.send
        while queue and not self.at_eof:
            try:
                send(queue[0])
            except BlockingIOError:
                return False
            except OSError as exc:
                self._broken(exc)
                break
            queue.popleft()
        return not queue or self.at_eof

    # receiving -----------------------------------------------------------------
    def recv_messages(self, max_messages: int = 1024) -> list[Message]:
        """Every message available now (reading stops once ``max_messages`` are
        decoded; a batch is never split); sets ``at_eof``
        when the peer closed. Raises ChannelProtocolError for a bad message."""
        out: list[Message] = []
        if self.at_eof:
            return out
        recv_into, buf, view = self._sock.recv_into, self._rbuf, self._rview
        while len(out) < max_messages:
            try:
                n = recv_into(buf)
            except BlockingIOError:
                break
            except OSError as exc:
                self._broken(exc)
                break
            if n == 0:
                self.at_eof = True
                break
            if n > MAX_MESSAGE_BYTES:
                raise ChannelProtocolError(f"channel packet longer than {MAX_MESSAGE_BYTES} bytes")
            out += decode_packet(view[:n])
        return out

    def _broken(self, exc: OSError) -> None:
        if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF):
            log.warning("channel fd %d failed: %s", self._fd, exc)
        self.at_eof = True

    # asyncio integration -------------------------------------------------------
    def attach_loop(
        self,
        loop: asyncio.AbstractEventLoop,
        on_messages: Callable[[list[Message]], None],
        on_eof: Callable[[], None],
    ) -> None:
        """Deliver incoming messages to ``on_messages`` (batches, in order) from
        ``loop``; call ``on_eof`` once when the peer is gone. Queued sends are flushed
        by an ``add_writer`` callback registered only while the queue is non-empty."""
        if self._loop is not None:
            raise RuntimeError("channel endpoint already attached to a loop")
        self._loop, self._on_messages, self._on_eof = loop, on_messages, on_eof
        loop.add_reader(self._fd, self._on_readable)
        if self._queue:
            loop.add_writer(self._fd, self._on_writable)
            self._writer_registered = True

    def detach_loop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        loop.remove_reader(self._fd)
        if self._writer_registered:
            loop.remove_writer(self._fd)
            self._writer_registered = False
        self._loop = self._on_messages = self._on_eof = None

    def _on_readable(self) -> None:
        messages = self.recv_messages()
        if messages and self._on_messages is not None:
            self._on_messages(messages)
        if self.at_eof and self._loop is not None:
            on_eof = self._on_eof
            self.detach_loop()
            if on_eof is not None:
                on_eof()

    def _on_writable(self) -> None:
        if self.flush() and self._loop is not None and self._writer_registered:
            self._loop.remove_writer(self._fd)
            self._writer_registered = False

    def close(self) -> None:
        """Detach from the loop and close the socket (queued messages are dropped)."""
        if self.closed:
            return
        self.detach_loop()
        self.closed = self.at_eof = True
        self._queue.clear()
        self._batch.clear()
        self._sock.close()


class MainChannelEndpoint(ChannelEndpoint):
    """The main process's side of the channel to network process ``index``.

    On top of :class:`ChannelEndpoint`: claims each received request buffer (one pool
    lock round trip), remembers which connections have a request in flight and the last
    response handle per connection (both O(1) per message, bounded by the network
    process's connections plus a ring of ``closed_ring_size`` recently closed ones), so
    that when the network process dies the supervisor can name the lost connections and
    free the responses it never wrote. Also records ``port``/``pid`` from READY.
    """

    def __init__(
        self,
        sock: socket.socket,
        pool: BufferPool,
        index: int,
        *,
        max_queued_messages: int = 4096,
        closed_ring_size: int = 1024,
    ) -> None:
        super().__init__(sock, max_queued_messages=max_queued_messages)
        self.pool = pool
        self.index = index
        self.port = 0
        self.pid = 0
        self._in_flight: set[int] = set()
        self._responses: dict[int, Handle | None] = {}
        self._closed_responses: deque[Handle] = deque(maxlen=closed_ring_size)

    @property
    def ready(self) -> bool:
        return self.port != 0

    def recv_messages(self, max_messages: int = 1024) -> list[Message]:
        """Like :meth:`ChannelEndpoint.recv_messages`; REQUEST buffers are claimed by
        this process before they are returned. A REQUEST whose handle is stale (cannot
        happen unless the peer misbehaves) is answered with CLOSE and not returned."""
        out: list[Message] = []
        claim = self.pool.claim
        for msg in super().recv_messages(max_messages):
            kind, conn_id = msg[0], msg[1]
            if kind == REQUEST:
                try:
                    claim(msg[2])
                except StaleBufferHandleError as exc:
                    log.error("network process %d sent a stale handle: %s", self.index, exc)
                    self.send_close(conn_id)
                    continue
                self._in_flight.add(conn_id)
                self._responses[conn_id] = None
            elif kind == CLOSED:
                self._in_flight.discard(conn_id)
                handle = self._responses.pop(conn_id, None)
                if handle is not None:
                    self._closed_responses.append(handle)
            elif kind == READY:
                self.port, self.pid = msg[2], msg[3]
            out.append(msg)
        return out

    def send_response(
        self, conn_id: int, handle: Handle, prefix_len: int, regions_len: int = 0
    ) -> bool:
        """Hand a response buffer to the network process (which frees it). If the
        channel is closed the buffer is freed here and False is returned."""
        if not (prefix_len >= 0 and regions_len >= 0 and prefix_len + regions_len <= handle[1]):
            raise ValueError(
                f"prefix_len={prefix_len} + regions_len={regions_len} outside buffer "
                f"of {handle[1]} bytes"
            )
        self._in_flight.discard(conn_id)
        if self._post((RESPONSE, conn_id, handle, prefix_len, regions_len)):
            if conn_id in self._responses:
                self._responses[conn_id] = handle
            else:
                self._closed_responses.append(handle)
            return True
        self._free(handle)
        return False

    def send_no_response(self, conn_id: int) -> bool:
        self._in_flight.discard(conn_id)
        return self._post((NO_RESPONSE, conn_id))

    def send_close(self, conn_id: int) -> bool:
        self._in_flight.discard(conn_id)
        return self._post((CLOSE, conn_id))

    def _post(self, message: Message) -> bool:
        """Batched when attached to a loop, sent at once otherwise."""
        if self._loop is not None:
            return self.post(message)
        return self.send(encode_packet([message]))

    def in_flight_conn_ids(self) -> set[int]:
        """Connections whose request this process has not answered yet."""
        return set(self._in_flight)

    def known_conn_ids(self) -> set[int]:
        """Connections that sent a request and were not reported CLOSED."""
        return set(self._responses) | self._in_flight

    def release_unwritten_responses(self) -> int:
        """After the peer died: free every response buffer it may not have written.
        Handles it did free are stale and skipped. Returns how many were freed."""
        handles: Iterable[Handle | None] = list(self._responses.values()) + list(
            self._closed_responses
        )
        freed = sum(self._free(h) for h in handles if h is not None)
        self._responses.clear()
        self._closed_responses.clear()
        return freed

    def _free(self, handle: Handle) -> bool:
        try:
            self.pool.deallocate(handle)  # type: ignore[arg-type]
        except StaleBufferHandleError:
            return False
        return True
