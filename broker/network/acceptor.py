"""Accepting connections in a network process: the two listeners and their epoll interest.

:class:`Acceptor` (Kafka's ``Acceptor``, here inside the network process's one loop)
owns the client listener and, when the broker has one, the internal listener (other
brokers' follower connections).  It accepts at most ``MAX_ACCEPTS_PER_EVENT`` sockets
per listener event, asks :class:`~broker.network.connection_shares.ConnectionQuotas`
which to keep (extra ones are closed at once, as Kafka does; on the client listener a
process holding more connections than the lightest other one steps aside, see
:mod:`~broker.network.connection_shares`) and gives each kept socket its connection id:
from 1 on the client listener, from
:data:`~broker.network.channel.codec.INTERNAL_CONN_ID_BASE` on the internal one (so the
main process knows the listener of every request).  It also turns a listener's epoll
interest off while the channel to the main process is backlogged, and the client
listener's while the process steps aside (the internal one never does).
An acceptor made with ``listening=False`` (a broker still catching up with its metadata
log: its sockets are bound, not listening yet) watches neither listener until
:meth:`Acceptor.start_listening` (the main process's LISTEN): a socket that is not
listening would wake epoll with EPOLLHUP forever.

Contract: :meth:`Acceptor.accept` / :meth:`Acceptor.accept_internal` return the kept
``(socket, ip, conn_id)``; the loop makes them connections and calls
:meth:`Acceptor.release` once each closes.  Costs: one ``accept`` syscall per socket,
O(1) bookkeeping.  Thread-safety: none; the one thread of its network process.
"""

from __future__ import annotations

import logging
import select
import socket

from broker.network.channel.codec import INTERNAL_CONN_ID_BASE
from broker.network.connection import EPOLLIN
from broker.network.connection_shares import MAX_ACCEPTS_PER_EVENT, ConnectionQuotas

log = logging.getLogger("broker.network")

Accepted = tuple[socket.socket, str, int]  # (socket, peer ip, connection id)


class Acceptor:
    """The listeners of one network process (see the module docstring).  Registers
    them (non-blocking) in ``epoll``."""

    def __init__(self, epoll: select.epoll, listener: socket.socket,
                 internal_listener: socket.socket | None, quotas: ConnectionQuotas, *,
                 index: int, listening: bool = True) -> None:
        self.epoll = epoll
        self.listener = listener
        self.internal_listener = internal_listener
        self.quotas = quotas
        self.index = index
        self.next_conn_id = 1
        self.next_internal_conn_id = INTERNAL_CONN_ID_BASE
        self.listening = False  # the listeners are in epoll (start_listening)
        self._accepting = True
        self._accepting_internal = True
        listener.setblocking(False)
        if internal_listener is not None:
            internal_listener.setblocking(False)
        if listening:
            self.start_listening()

    def start_listening(self) -> None:
        """Watch both listeners from now on (the main process made them listen).
        Idempotent."""
        if self.listening:
            return
        self.listening = True
        self._accepting = self._accepting_internal = True
        self.epoll.register(self.listener.fileno(), EPOLLIN)
        if self.internal_listener is not None:
            self.epoll.register(self.internal_listener.fileno(), EPOLLIN)

    def fds(self) -> tuple[int, int]:
        """The client listener's fd and the internal one's (-1 without it)."""
        internal = self.internal_listener
        return self.listener.fileno(), -1 if internal is None else internal.fileno()

    def accept(self, now: float) -> list[Accepted]:
        """Accept on the client listener: the connection caps, then the balance between
        network processes (stepping aside until ``quotas.paused_until``)."""
        quotas = self.quotas
        unchecked = quotas.accept_round()  # accepts allowed past the balance check
        kept: list[Accepted] = []
        for _ in range(MAX_ACCEPTS_PER_EVENT):
            if unchecked > 0:
                unchecked -= 1
            elif quotas.step_aside(now):
                break
            try:
                sock, address = self.listener.accept()
            except BlockingIOError:
                break
            except OSError as exc:  # EMFILE, ECONNABORTED...
                log.warning("network %d: accept failed: %s", self.index, exc)
                break
            ip = address[0] if isinstance(address, tuple) else str(address)
            refusal = quotas.admit_client(ip)
            if refusal is not None:
                log.info("network %d: refusing %s: %s", self.index, ip, refusal)
                sock.close()  # Kafka closes extra connections too
                continue
            kept.append((sock, ip, self.next_conn_id))
            self.next_conn_id += 1
        return kept

    def accept_internal(self) -> list[Accepted]:
        """Accept on the internal listener: its own cap, no per-IP caps, no balancing
        (brokers open a handful of these; the main process checks who they are)."""
        assert self.internal_listener is not None
        kept: list[Accepted] = []
        for _ in range(MAX_ACCEPTS_PER_EVENT):
            try:
                sock, address = self.internal_listener.accept()
            except BlockingIOError:
                break
            except OSError as exc:
                log.warning("network %d: internal accept failed: %s", self.index, exc)
                break
            ip = address[0] if isinstance(address, tuple) else str(address)
            refusal = self.quotas.admit_internal()
            if refusal is not None:
                log.info("network %d: refusing %s on the internal listener: %s",
                         self.index, ip, refusal)
                sock.close()
                continue
            kept.append((sock, ip, self.next_internal_conn_id))
            self.next_internal_conn_id += 1
        return kept

    def release(self, ip: str, conn_id: int) -> None:
        """A connection this acceptor gave out closed."""
        self.quotas.release(ip, internal=conn_id >= INTERNAL_CONN_ID_BASE)

    def update_interest(self, backlogged: bool, now: float) -> None:
        """Listen while the channel is not ``backlogged`` (bounds the CLOSED/REQUEST
        backlog) and, on the client listener, while not stepping aside."""
        if not self.listening:
            return
        paused = self.quotas.paused(now)  # a pause that is over ends here
        accepting = not backlogged and not paused
        if accepting != self._accepting:
            self.epoll.modify(self.listener.fileno(), EPOLLIN if accepting else 0)
            self._accepting = accepting
        internal = not backlogged  # never yields to other processes
        if self.internal_listener is not None and internal != self._accepting_internal:
            self.epoll.modify(self.internal_listener.fileno(), EPOLLIN if internal else 0)
            self._accepting_internal = internal

    def close(self) -> None:
        self.listener.close()
        if self.internal_listener is not None:
            self.internal_listener.close()
