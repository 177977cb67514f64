"""Per-connection state of a network process, the epoll masks it uses, and the signal to
close a connection.

A :class:`Connection` tracks one client socket through its cycle.  Its fields come in
four groups, each written by one party of :class:`~broker.network.process.NetworkProcess`:

- read half (:class:`~broker.network.request_reader.RequestReader`): ``header`` and
  ``header_filled`` (the 4-byte length field), ``frame_len``, ``buffer`` (the request
  frame, owned by this process until handed over) or ``chunks`` (the pool slots a large
  frame is read into as its bytes arrive), ``filled``, and ``partial_slots`` (slots of
  the frame counted in the partial-frame budget);
- write half (:class:`~broker.network.response_writer.ResponseWriter`): ``resp`` (the
  pool buffer handed back), ``resp_view`` (its prefix) and ``resp_sent``, then the
  ``regions`` with the one currently sent through ``sendfile`` (``region``,
  ``region_index``, ``region_pos``, ``region_left``);
- ``sock``: the socket, or a :class:`~broker.network.tls.TlsTransport` over it (``tls``
  set) that reads and writes like one;
- the channel's process side
  (:class:`~broker.network.channel.process_side.MainProcessChannel`): ``pending`` (its
  requests the main process holds), ``muted`` (as many as the connection may have there:
  no more is read), ``known`` (the main process has seen it);
- the loop's (``NetworkProcess``): ``mask`` (epoll interest), ``closed``, ``ip`` (the
  peer address, for ``max_connections_per_ip``), ``active_at`` (monotonic time of the
  last event, for ``connections_max_idle_ms``), ``frame_deadline`` (when the frame being
  read must be complete, ``request_read_timeout_ms``; 0 when no frame is started) and
  ``parked`` (waiting for memory or queue room: not read; the read deadline keeps
  running while it waits for memory, not while it waits for queue room), ``answers``
  (answers that arrived while an earlier one is still being written, in request order,
  at most one per pending request), and the request's instants for its times
  (:mod:`broker.metrics.request_times`): ``read_ats`` (when each pending request was
  handed over, oldest first), ``read_at``, ``timing`` (the main process's, with the
  answer) and ``answered_at`` of the answer being written.

The reader and the writer raise :class:`CloseConnection` when a connection must be
closed; only the loop closes connections.

Costs: O(1) per connection (slotted object).  Thread-safety: none; owned by the one
thread of its network process.
"""

from __future__ import annotations

import select
import socket
from collections import deque
from typing import Any

from broker.network.regions import OpenFile
from broker.network.tls import TlsTransport
from clients.memory.handles import Buffer

EPOLLIN, EPOLLOUT = select.EPOLLIN, select.EPOLLOUT
EPOLLHUP_ERR = select.EPOLLHUP | select.EPOLLERR


class CloseConnection(Exception):
    """The connection must be closed, for the reason given (the only argument).

    Raised by the request reader and the response writer; caught by the loop, which
    closes the connection (and logs the reason at debug level).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Connection:
    """One client socket of a network process (the field groups: module docstring)."""

    __slots__ = (
        "active_at",
        "answered_at",
        "answers",
        "buffer",
        "chunks",
        "closed",
        "conn_id",
        "fd",
        "filled",
        "frame_deadline",
        "frame_len",
        "header",
        "header_filled",
        "inline_left",
        "ip",
        "known",
        "mask",
        "muted",
        "parked",
        "partial_slots",
        "pending",
        "read_at",
        "read_ats",
        "region",
        "region_index",
        "region_left",
        "region_pos",
        "regions",
        "resp",
        "resp_sent",
        "resp_view",
        "sock",
        "timing",
        "tls",
    )

    def __init__(self, conn_id: int, sock: socket.socket | TlsTransport, ip: str = "",
                 now: float = 0.0) -> None:
        self.conn_id = conn_id
        self.sock = sock
        self.tls = isinstance(sock, TlsTransport)
        self.fd = sock.fileno()
        self.ip = ip
        self.active_at = now
        self.frame_deadline = 0.0
        self.parked = False
        self.chunks: list[Buffer] = []  # a large frame's slots, filled in order
        self.partial_slots = 0  # of this frame, counted in the partial-frame budget
        self.header = bytearray(4)
        self.header_filled = 0
        self.frame_len = 0  # 0: reading the length field
        self.filled = 0
        self.buffer: Buffer | None = None  # request being read (owned by this process)
        self.pending = 0  # requests with the main process, not answered
        self.muted = False  # pending reached the connection's bound: not read
        self.known = False  # the main process has seen this connection
        self.mask = EPOLLIN
        self.closed = False
        self.resp: Buffer | None = None  # response being written
        self.resp_view: memoryview | None = None
        self.resp_sent = 0
        self.regions: list[Any] | None = None
        self.region_index = 0
        self.region: OpenFile | None = None
        self.region_pos = 0
        self.region_left = 0
        self.inline_left = 0  # buffer bytes of the current [n] segment still to send
        # answers queued behind the one being written: (handle or None for a
        # NO_RESPONSE, prefix_len, regions_len, timing, answered_at, read_at)
        self.answers: deque[tuple[Any, ...]] = deque()
        self.read_ats: deque[float] = deque()  # pending requests: when handed over
        self.read_at = 0.0  # request times (broker.metrics.request_times): frame handed over
        self.timing: tuple[Any, ...] = ()  # the answer's: the main process's, from RESPONSE
        self.answered_at = 0.0  # the answer arrived
