"""The network process's side of the descriptor channel: its link to the main process.

:class:`MainProcessChannel` is what Kafka's processor sees of its ``RequestChannel``: it
hands a connection's request frame over (PEER first, the connection's address, then
REQUEST; both batched per loop iteration), counts the requests the main process holds
(``in_flight``, bounded by ``max_queued_requests``: the loop parks frames when
:attr:`MainProcessChannel.queue_full`), takes the answers back (RESPONSE, NO_RESPONSE,
CLOSE, returned to the loop, which acts on its connections) and reports connections the
main process knew as CLOSED.  It sets ``gone`` when the main process is gone (channel
EOF, a post refused) or sent a bad message: the loop then ends.

Contract with the loop (:class:`~broker.network.process.NetworkProcess`): each request
handed over counts once in its connection's ``pending`` and in ``in_flight`` until
:meth:`MainProcessChannel.answered` (the loop closes the connection when that returns
False: an answer to no request) or :meth:`MainProcessChannel.closed`; a connection with
``max_pipelined_requests`` pending is ``muted`` (the loop reads no more of it) until an
answer comes.  With the default of 1 that is Kafka's rule (one request of a connection
at a time); the broker passes :data:`~broker.network.channel.codec.MAX_PIPELINED_REQUESTS`
and its main process keeps the answers of one connection in request order
(:mod:`broker.requests.pipeline`).  A frame that cannot be posted is freed here.

Costs: O(1) per message on top of :class:`~broker.network.channel.endpoint.
ChannelEndpoint` (one batched ``send`` per loop iteration).  Thread-safety: none; the
one thread of its network process.
"""

from __future__ import annotations

import logging
import select
from collections.abc import Callable

from broker.network.channel.codec import (
    CLOSED,
    MAX_PEER_CHARS,
    PEER,
    REQUEST,
    ChannelFullError,
    ChannelProtocolError,
    Handle,
    Message,
)
from broker.network.channel.endpoint import ChannelEndpoint
from broker.network.connection import EPOLLHUP_ERR, EPOLLIN, EPOLLOUT, Connection

log = logging.getLogger("broker.network")


class MainProcessChannel:
    """The network process's channel to the main process (see the module docstring).

    ``max_backlog``: while this many packets wait for the main process to read them,
    :attr:`backlogged` is true and the loop stops accepting connections (bounds the
    CLOSED/REQUEST backlog).
    """

    def __init__(self, endpoint: ChannelEndpoint, *, index: int, max_queued_requests: int,
                 max_backlog: int, free: Callable[[Handle], None],
                 max_pipelined_requests: int = 1) -> None:
        self.endpoint = endpoint
        self.max_pipelined = max_pipelined_requests
        self.index = index
        self.max_queued_requests = max_queued_requests
        self.max_backlog = max_backlog
        self._free = free
        self.in_flight = 0  # requests handed over, not answered
        self.gone = False  # main process gone or misbehaving: the loop ends
        self._mask = EPOLLIN

    def fileno(self) -> int:
        return self.endpoint.fileno()

    @property
    def queue_full(self) -> bool:
        """As many requests with the main process as ``max_queued_requests``."""
        return self.in_flight >= self.max_queued_requests

    @property
    def backlogged(self) -> bool:
        return self.endpoint.queued >= self.max_backlog

    # requests out ---------------------------------------------------------------------
    def hand_over(self, conn: Connection, handle: Handle, frame_len: int, now: float) -> bool:
        """Post ``conn``'s frame (PEER first when the main process does not know it yet);
        the connection is muted once it has ``max_pipelined_requests`` pending, until
        one is answered.  False when the channel is full: the
        frame is freed and the caller closes the connection.  A channel that is gone
        frees the frame and sets ``gone``."""
        endpoint = self.endpoint
        try:
            if not conn.known:  # the main process learns the address once, first
                if not endpoint.post((PEER, conn.conn_id, conn.ip[:MAX_PEER_CHARS])):
                    self._free(handle)
                    self.gone = True
                    return True
                conn.known = True  # told: it hears CLOSED too, whatever happens next
            sent = endpoint.post((REQUEST, conn.conn_id, handle, frame_len))
        except ChannelFullError as exc:
            log.error("network %d: %s; closing connection %d", self.index, exc, conn.conn_id)
            self._free(handle)
            return False
        if not sent:  # main process gone: the loop ends on channel EOF
            self._free(handle)
            self.gone = True
            return True
        conn.known = True
        conn.pending += 1
        conn.read_ats.append(now)  # its request times (broker.metrics.request_times)
        conn.muted = conn.pending >= self.max_pipelined
        self.in_flight += 1
        conn.active_at = now
        return True

    def closed(self, conn: Connection, *, notify: bool) -> None:
        """``conn`` is closing: its requests (if any) no longer count, and the main
        process hears CLOSED if it knew the connection (and ``notify``)."""
        self.in_flight -= conn.pending
        conn.pending = 0
        conn.read_ats.clear()
        conn.muted = False
        endpoint = self.endpoint
        if conn.known and notify and not endpoint.at_eof:
            try:
                endpoint.post((CLOSED, conn.conn_id))
            except ChannelFullError as exc:
                log.error("network %d: CLOSED %d not sent: %s", self.index, conn.conn_id, exc)

    def flush_posted(self) -> None:
        """This loop iteration's REQUEST/CLOSED messages: one packet."""
        self.endpoint.flush_posted()

    # answers in -----------------------------------------------------------------------
    def receive(self, events: int) -> list[Message]:
        """Flush queued packets when writable; the messages the main process sent
        (RESPONSE, NO_RESPONSE, CLOSE; the loop acts on them, calling :meth:`answered`).
        A bad message or EOF sets ``gone``."""
        endpoint = self.endpoint
        messages: list[Message] = []
        if events & EPOLLOUT:
            endpoint.flush()
        if events & (EPOLLIN | EPOLLHUP_ERR):
            try:
                messages = endpoint.recv_messages()
            except ChannelProtocolError as exc:
                log.error("network %d: bad message from the main process: %s", self.index, exc)
                self.gone = True
                return []
        if endpoint.at_eof:
            log.info("network %d: channel closed (main process gone); exiting", self.index)
            self.gone = True
        return messages

    def answered(self, conn: Connection) -> float | None:
        """An answer (RESPONSE or NO_RESPONSE) for ``conn``'s oldest pending request
        arrived: no longer counted, unmuted; when that request was handed over.  None
        when ``conn`` had no request with the main process (the caller closes it)."""
        if not conn.pending:
            log.error("network %d: answer for connection %d that has no request",
                      self.index, conn.conn_id)
            return None
        conn.pending -= 1
        conn.muted = False
        self.in_flight -= 1
        return conn.read_ats.popleft()

    # the loop's epoll ------------------------------------------------------------------
    def update_interest(self, epoll: select.epoll) -> None:
        """Watch for writability only while packets wait for the kernel."""
        endpoint = self.endpoint
        mask = EPOLLIN | EPOLLOUT if endpoint.wants_write else EPOLLIN
        if mask != self._mask and not endpoint.closed:
            epoll.modify(endpoint.fileno(), mask)
            self._mask = mask

    def close(self) -> None:
        self.endpoint.close()
