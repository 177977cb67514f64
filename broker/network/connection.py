"""Per-connection state of a network process, and the epoll masks it uses.

A ``_Conn`` tracks one client socket through its cycle: reading the 4-byte length field
(``header``), the request frame (``buffer``, owned by this process until handed over),
``muted`` while the main process holds its request, then the response being written
(``resp``: the pool buffer handed back, ``resp_view`` its prefix, and the ``regions``
with the one currently sent through ``sendfile``).

Costs: O(1) per connection (slotted object).  Thread-safety: none; owned by the one
thread of its network process.
"""

from __future__ import annotations

import select
import socket
from typing import Any

from broker.network.regions import _OpenFile
from clients.memory.handles import Buffer

EPOLLIN, EPOLLOUT = select.EPOLLIN, select.EPOLLOUT
EPOLLHUP_ERR = select.EPOLLHUP | select.EPOLLERR


class _Conn:
    __slots__ = (
        "buffer",
        "closed",
        "conn_id",
        "fd",
        "filled",
        "frame_len",
        "header",
        "header_filled",
        "known",
        "mask",
        "muted",
        "region",
        "region_index",
        "region_left",
        "region_pos",
        "regions",
        "resp",
        "resp_sent",
        "resp_view",
        "sock",
    )

    def __init__(self, conn_id: int, sock: socket.socket) -> None:
        self.conn_id = conn_id
        self.sock = sock
        self.fd = sock.fileno()
        self.header = bytearray(4)
        self.header_filled = 0
        self.frame_len = 0  # 0: reading the length field
        self.filled = 0
        self.buffer: Buffer | None = None  # request being read (owned by this process)
        self.muted = False  # a request is with the main process
        self.known = False  # the main process has seen this connection
        self.mask = EPOLLIN
        self.closed = False
        self.resp: Buffer | None = None  # response being written
        self.resp_view: memoryview | None = None
        self.resp_sent = 0
        self.regions: list[Any] | None = None
        self.region_index = 0
        self.region: _OpenFile | None = None
        self.region_pos = 0
        self.region_left = 0
