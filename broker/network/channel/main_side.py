"""The main process's side of the descriptor channel to one network process.

Buffer ownership (who frees, and whose death reclaims what): a request buffer is
allocated by the network process and *claimed* by the main process when the REQUEST is
received (:class:`MainChannelEndpoint` does it), so a network process that dies later
cannot take it with it; the main process frees it. A response buffer is allocated and
owned by the main process and freed by the network process once written (or at once
when its connection is already gone); :class:`MainChannelEndpoint` remembers the last
response handles of every connection (one per request it may pipeline, plus one) so the
supervisor can free the ones a dead network process never wrote (a handle the network
process did free is stale by then, thanks to the slot generation, and is skipped).

Answer order: answers given with a ticket (``send_response`` / ``send_no_response``
``ticket=``) go through :attr:`MainChannelEndpoint.answers`, an
:class:`~broker.network.channel.answer_order.AnswerOrder`, which posts one connection's
answers in request order (held ones are freed when the connection closes);
``on_answered`` is told after each (the server starts the connection's waiting requests,
:mod:`broker.requests.pipeline`).  Without a ticket an answer is posted at once (a
connection with one request at a time).

Costs: O(1) per message on top of :class:`~broker.network.channel.endpoint.ChannelEndpoint`
(one pool lock round trip to claim a request buffer); memory O(connections) plus a ring
of ``closed_ring_size`` handles.  Thread-safety: belongs to one thread (the main
process's event loop).
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from collections.abc import Callable, Iterable

from broker.network.channel.answer_order import AnswerOrder
from broker.network.channel.codec import (
    CLOSE,
    CLOSED,
    LISTEN,
    MAX_PIPELINED_REQUESTS,
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
    lock round trip), remembers how many requests of each connection are in flight and
    its last response handles (O(1) per message, bounded by the network process's
    connections times ``MAX_PIPELINED_REQUESTS`` + 1, plus a ring of
    ``closed_ring_size`` recently closed ones), so
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
        self._in_flight: dict[int, int] = {}  # conn -> requests not answered
        # conn -> its last responses handed over (the network process may still be
        # writing or holding all of them: one per pipelined request, plus one)
        self._responses: dict[int, deque[Handle]] = {}
        self.answers = AnswerOrder(self._post, self._free)
        # told each time a ticketed answer is given (the server starts waiting requests)
        self.on_answered: Callable[[int], None] | None = None
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
                self._in_flight[conn_id] = self._in_flight.get(conn_id, 0) + 1
                if conn_id not in self._responses:
                    self._responses[conn_id] = deque(maxlen=MAX_PIPELINED_REQUESTS + 1)
            elif kind == CLOSED:
                self._in_flight.pop(msg[1], None)
                self.answers.forget(msg[1])
                self._closed_responses.extend(self._responses.pop(msg[1], ()))
            elif kind == READY:
                self.port, self.pid = msg[2], msg[3]
            out.append(msg)
        return out

    def send_response(
        self, conn_id: int, handle: Handle, prefix_len: int, regions_len: int = 0,
        timing: Timing | tuple[()] = (), *, ticket: int | None = None,
    ) -> bool:
        """Hand a response buffer to the network process (which frees it). If the
        channel is closed the buffer is freed here and False is returned.  ``timing``:
        the request's metric slots and the main process's instants (codec); ``ticket``:
        the request's place in the connection's answer order (:attr:`answers`; None:
        posted at once, for a connection with one request at a time)."""
        if not (prefix_len >= 0 and regions_len >= 0 and prefix_len + regions_len <= handle[1]):
            raise ValueError(
                f"prefix_len={prefix_len} + regions_len={regions_len} outside buffer "
                f"of {handle[1]} bytes"
            )
        self._answered(conn_id)
        return self._answer(conn_id, ticket,
                            (RESPONSE, conn_id, handle, prefix_len, regions_len, *timing))

    def send_no_response(self, conn_id: int, timing: Timing | tuple[()] = (), *,
                         ticket: int | None = None) -> bool:
        self._answered(conn_id)
        return self._answer(conn_id, ticket, (NO_RESPONSE, conn_id, *timing))

    def send_close(self, conn_id: int) -> bool:
        self._in_flight.pop(conn_id, None)
        self.answers.forget(conn_id)
        return self._post((CLOSE, conn_id))

    def _answer(self, conn_id: int, ticket: int | None, message: Message) -> bool:
        if ticket is None:
            return self._post(message)
        try:
            posted = self.answers.answer(conn_id, ticket, message)
        except ValueError as exc:  # a second answer to one request: a handler's bug
            log.error("network process %d: %s; closing it", self.index, exc)
            if message[0] == RESPONSE:
                self._free(message[2])
            return self.send_close(conn_id) and False
        if self.on_answered is not None:
            self.on_answered(conn_id)
        return posted

    def _answered(self, conn_id: int) -> None:
        left = self._in_flight.get(conn_id, 0) - 1
        if left > 0:
            self._in_flight[conn_id] = left
        else:
            self._in_flight.pop(conn_id, None)

    def send_listen(self) -> bool:
        """LISTEN: the listeners listen now; the network process accepts on them."""
        return self._post((LISTEN,))

    def _post(self, message: Message) -> bool:
        """Batched when attached to a loop, sent at once otherwise.  A RESPONSE's
        buffer is remembered for :meth:`release_unwritten_responses`, or freed here
        when the channel is gone (False)."""
        posted = (self.post(message) if self._loop is not None
                  else self.send(encode_packet([message])))
        if message[0] == RESPONSE:
            handle = message[2]
            if not posted:
                self._free(handle)
            elif (kept := self._responses.get(message[1])) is not None:
                kept.append(handle)
            else:
                self._closed_responses.append(handle)
        return posted

    def in_flight_conn_ids(self) -> set[int]:
        """Connections whose request this process has not answered yet."""
        return set(self._in_flight)  # the keys

    def known_conn_ids(self) -> set[int]:
        """Connections that sent a request and were not reported CLOSED."""
        return set(self._responses) | set(self._in_flight)

    def release_unwritten_responses(self) -> int:
        """After the peer died: free every response buffer it may not have written.
        Handles it did free are stale and skipped. Returns how many were freed."""
        handles: Iterable[Handle] = [h for kept in self._responses.values() for h in kept]
        freed = sum(self._free(h) for h in [*handles, *self._closed_responses])
        freed += self.answers.forget_all()
        self._responses.clear()
        self._closed_responses.clear()
        return freed

    def _free(self, handle: Handle) -> bool:
        try:
            self.pool.deallocate(handle)  # type: ignore[arg-type]
        except StaleBufferHandleError:
            return False
        return True
