"""The main process's side of the descriptor channel to one network process.

Buffer ownership (who frees, and whose death reclaims what): a request buffer is
allocated by the network process and *claimed* by the main process when the REQUEST is
received (:class:`MainChannelEndpoint` does it), so a network process that dies later
cannot take it with it; the main process frees it. A response buffer is allocated and
owned by the main process and freed by the network process once written (or at once
when its connection is already gone); :class:`MainChannelEndpoint` remembers the last
response handle of every connection so the supervisor can free the ones a dead network
process never wrote (a handle the network process did free is stale by then, thanks to
the slot generation, and is skipped).

Costs: O(1) per message on top of :class:`~broker.network.channel.endpoint.ChannelEndpoint`
(one pool lock round trip to claim a request buffer); memory O(connections) plus a ring
of ``closed_ring_size`` handles.  Thread-safety: belongs to one thread (the main
process's event loop).
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from collections.abc import Iterable

from broker.network.channel.codec import (
    CLOSE,
    CLOSED,
    LISTEN,
    NO_RESPONSE,
    READY,
    REQUEST,
    RESPONSE,
    Handle,
    Message,
    Timing,
    encode_packet,
)
from broker.network.channel.endpoint import ChannelEndpoint
from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import StaleBufferHandleError

log = logging.getLogger("broker.network")


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
            kind = msg[0]
            if kind == REQUEST:
                conn_id = msg[1]
                try:
                    claim(msg[2])
                except StaleBufferHandleError as exc:
                    log.error("network process %d sent a stale handle: %s", self.index, exc)
                    self.send_close(conn_id)
                    continue
                self._in_flight.add(conn_id)
                self._responses[conn_id] = None
            elif kind == CLOSED:
                self._in_flight.discard(msg[1])
                handle = self._responses.pop(msg[1], None)
                if handle is not None:
                    self._closed_responses.append(handle)
            elif kind == READY:
                self.port, self.pid = msg[2], msg[3]
            out.append(msg)
        return out

    def send_response(
        self, conn_id: int, handle: Handle, prefix_len: int, regions_len: int = 0,
        timing: Timing | tuple[()] = (),
    ) -> bool:
        """Hand a response buffer to the network process (which frees it). If the
        channel is closed the buffer is freed here and False is returned.  ``timing``:
        the request's metric slots and the main process's instants (codec)."""
        if not (prefix_len >= 0 and regions_len >= 0 and prefix_len + regions_len <= handle[1]):
            raise ValueError(
                f"prefix_len={prefix_len} + regions_len={regions_len} outside buffer "
                f"of {handle[1]} bytes"
            )
        self._in_flight.discard(conn_id)
        if self._post((RESPONSE, conn_id, handle, prefix_len, regions_len, *timing)):
            if conn_id in self._responses:
                self._responses[conn_id] = handle
            else:
                self._closed_responses.append(handle)
            return True
        self._free(handle)
        return False

    def send_no_response(self, conn_id: int, timing: Timing | tuple[()] = ()) -> bool:
        self._in_flight.discard(conn_id)
        return self._post((NO_RESPONSE, conn_id, *timing))

    def send_close(self, conn_id: int) -> bool:
        self._in_flight.discard(conn_id)
        return self._post((CLOSE, conn_id))

    def send_listen(self) -> bool:
        """LISTEN: the listeners listen now; the network process accepts on them."""
        return self._post((LISTEN,))

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
