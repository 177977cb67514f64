"""One side of a descriptor channel (SOCK_SEQPACKET socketpair, see :mod:`broker.network`).

:class:`ChannelEndpoint` wraps one side: non-blocking ``send`` with a bounded queue of
messages the kernel did not take yet (:class:`ChannelFullError` beyond the bound), and
``recv_messages`` returning every message available now. From asyncio use
:meth:`ChannelEndpoint.attach_loop` (``add_reader``, and ``add_writer`` only while the
queue is non-empty); the network process registers :meth:`fileno` in its own epoll.

Costs: one ``send``/``recv`` syscall per packet (a packet may batch up to
``MAX_BATCH_MESSAGES`` posted messages), one msgpack call per packet; memory bounded by
``max_queued_messages`` packets plus one ``MAX_MESSAGE_BYTES`` receive buffer.
Thread-safety: an endpoint belongs to one thread (its event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections import deque
from collections.abc import Callable
from typing import Any, Self

from broker.network.channel.codec import (
    MAX_BATCH_MESSAGES,
    MAX_MESSAGE_BYTES,
    SOCKET_BUFFER_BYTES,
    ChannelFullError,
    ChannelProtocolError,
    Message,
    decode_packet,
    encode_packet,
)

log = logging.getLogger("broker.network")


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
