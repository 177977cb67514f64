"""A poller: waits on several broker connections (and an optional wake-up socket) at
once, then reads the readable ones and reports expired requests.

It is the selector half of the clients' network layer (Kafka's ``Selector``): a
connection (:class:`~clients.network.connection.BrokerConnection`) moves one socket's
bytes through its sans-IO request channel; the poller decides which connections to
read.  It depends on connections only through the narrow :class:`Pollable` protocol.

Contract: :meth:`Poller.poll` returns the responses (and failures: a lost connection, an
expired request) of the given connections within ``timeout_ms``; it returns early at the
first readable socket, a wake-up, or the earliest request deadline.  Failures are
returned, never raised, so one dead broker does not disturb the others.  A connection
holding TLS-decrypted bytes (``buffered_input``) is read without waiting, since those
bytes never wake a selector.  :meth:`Poller.prepare`, :meth:`Poller.wait` and
:meth:`Poller.collect` split ``poll`` so a caller can hold its own lock around all but
the blocking wait (the producer's sender does).

Costs: one ``select`` per poll plus O(connections) to sync the wait set (a socket
re-registers only when it changed).  Thread safety: none; a poller belongs to one thread
(the wake-up socket may be written from any).
"""

from __future__ import annotations

import selectors
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from clients.protocol.request_channel import ClientResponse


class Pollable(Protocol):
    """What the poller needs of a connection."""

    @property
    def connected(self) -> bool: ...

    @property
    def sock(self) -> socket.socket | None: ...

    @property
    def buffered_input(self) -> int: ...

    @property
    def now_ms(self) -> Callable[[], int]: ...

    def fileno(self) -> int: ...

    def next_deadline_ms(self) -> int | None: ...

    def take_failed(self) -> list[ClientResponse]: ...

    def read(self) -> list[ClientResponse]: ...

    def expire(self) -> list[ClientResponse]: ...


class Poller:
    """Waits on several connections (plus an optional wake-up socket) at once."""

    def __init__(self, wakeup: socket.socket | None = None) -> None:
        self._selector = selectors.DefaultSelector()
        # fd -> (connection, the socket object registered for it)
        self._registered: dict[int, tuple[Pollable, socket.socket | None]] = {}
        self._wakeup = wakeup
        if wakeup is not None:
            wakeup.setblocking(False)
            self._selector.register(wakeup, selectors.EVENT_READ, None)

    def _sync(self, connections: Iterable[Pollable]) -> None:
        """Make the wait set the sockets of ``connections`` that are open now.

        An entry is keyed by fd but stands for one *socket*: a connection that was
        closed and reconnected usually gets the same fd number back (the lowest free
        one), and the kernel dropped the old socket from the epoll set when it was
        closed.  Comparing the connection alone would keep the stale entry and never
        watch the new socket, so a response already in its receive buffer would wait
        for the request's timeout (seen as a Fetch unanswered for request_timeout_ms
        after a failover).  The entry is therefore replaced whenever the socket object
        differs.
        """
        wanted = {c.fileno(): c for c in connections if c.connected}
        registered = self._registered
        for fd in list(registered):
            conn, sock = registered[fd]
            if wanted.get(fd) is not conn or conn.sock is not sock:
                self._selector.unregister(fd)  # a closed fd is tolerated (OSError ignored)
                del registered[fd]
        for fd, conn in wanted.items():
            if fd not in registered:
                self._selector.register(fd, selectors.EVENT_READ, conn)
                registered[fd] = (conn, conn.sock)

    def poll(
        self, connections: Iterable[Pollable], timeout_ms: float
    ) -> list[ClientResponse]:
        """Responses (and failures) of the given connections within ``timeout_ms``.

        The wait ends early at the first readable socket, a wake-up, or the earliest
        request deadline (whose expiry is then reported).
        """
        conns = list(connections)
        out, timeout_s = self.prepare(conns, timeout_ms)
        return out + self.collect(conns, self.wait(timeout_s))

    def prepare(
        self, conns: Sequence[Pollable], timeout_ms: float
    ) -> tuple[list[ClientResponse], float]:
        """Register ``conns``; returns failures already known and the wait in seconds.

        With :meth:`wait` and :meth:`collect` this splits :meth:`poll` so a caller can
        hold its own lock around prepare/collect but not around the blocking wait.
        """
        self._sync(conns)
        timeout_s = max(0.0, timeout_ms / 1000)
        out: list[ClientResponse] = []
        for c in conns:
            d = c.next_deadline_ms()
            if d is not None:
                timeout_s = min(timeout_s, max(0.0, (d - c.now_ms()) / 1000))
            failed = c.take_failed()
            if failed:
                out.extend(failed)
                timeout_s = 0.0
            if c.buffered_input:  # decrypted bytes wake no selector: do not wait
                timeout_s = 0.0
        return out, timeout_s

    def wait(self, timeout_s: float) -> list[Pollable]:
        """Block up to ``timeout_s`` (no state touched but the wake-up socket)."""
        ready: list[Pollable] = []
        for key, _ in self._selector.select(timeout_s):
            if key.data is None:
                self._drain_wakeup()
            else:
                ready.append(key.data)
        return ready

    def is_registered(self, conn: Pollable) -> bool:
        """True when ``conn``'s socket is in the wait set (its responses wake :meth:`wait`)."""
        entry = self._registered.get(conn.fileno())
        return entry is not None and entry[0] is conn and entry[1] is conn.sock

    def collect(
        self, conns: Sequence[Pollable], readable: Sequence[Pollable]
    ) -> list[ClientResponse]:
        """Read the readable connections (and those with TLS-decrypted bytes waiting),
        then report expired requests of ``conns``."""
        out: list[ClientResponse] = []
        for c in readable:
            out.extend(c.read())
        for c in conns:
            if c.buffered_input and c not in readable:
                out.extend(c.read())
        for c in conns:
            out.extend(c.expire())
        return out

    def _drain_wakeup(self) -> None:
        assert self._wakeup is not None
        try:
            while self._wakeup.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def close(self) -> None:
        self._selector.close()
        self._registered.clear()
