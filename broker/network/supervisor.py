"""Starts, watches, restarts and stops the broker's network processes (main-process side).

For each index ``0..num_network_processes-1`` the supervisor makes a SOCK_SEQPACKET
socketpair, keeps one end as a :class:`~broker.network.channel.main_side.MainChannelEndpoint` and
passes the other to ``python -m broker.network`` (``subprocess.Popen(pass_fds=...)``, a
fresh interpreter, ``PYTHONPATH`` pointing at this source tree).  The supervisor binds the
listening socket itself (``config.port``, 0 = any free port; a port another process holds
fails the start with the OS's error) and every network process inherits that one socket
(``--listener-fd``), restarted ones too.  No SO_REUSEPORT: a second broker, or a second
cluster started on the same ports, cannot bind beside this one and steal its clients.
A broker with ``internal_port >= 0`` gets a second listening socket the same way
(``internal_host:internal_port``, ``--internal-listener-fd``): the internal listener its
followers fetch from (:attr:`internal_port`).
``start(listening=False)`` binds both sockets without listening on them (a connect is
refused, as by a broker that is not running) and starts the processes with
``--await-listen``; :meth:`~NetworkProcessSupervisor.start_listening` makes the sockets
listen and sends LISTEN to every process (a broker with a controller does that once its
metadata image caught up: docs/broker.md).  The ports are known from ``start`` on (a
broker registers them with its controller before it serves).
The supervisor also creates the table the processes share
(:mod:`~broker.network.connection_shares`: open-connection counts, to spread new
connections evenly, and the budget of pool memory partial request frames may hold,
``max_partial_request_bytes`` for all of them), inherited the same way; a dead
process's slot is retired (its partial frames and designation dropped) until its
successor publishes its own.  And the table of request times the processes record in
(:mod:`broker.metrics.request_times`, ``--request-times-fd``; the main process reads it
on a scrape: :attr:`request_times`), kept across restarts so its counters never go back.

``poll()`` (call it periodically and whenever an endpoint reaches EOF) notices a dead
process (``Popen.poll``), drains what it left in its channel, closes the old endpoint
(detaching it from the asyncio loop), frees the responses it may not have written,
calls ``pool.reclaim_dead()`` for the buffers it held, and starts a new process with
the same index and port without waiting for its READY; it returns one
:class:`NetworkRestart` per restart, naming the connection ids that were lost.

``stop()`` sends SIGTERM to every live process by PID, waits up to ``stop_timeout_ms``,
then SIGKILLs the rest by PID and reaps them.

Costs: ``poll`` is O(processes) ``waitpid`` calls; a restart adds O(connections) and
one O(slots) reclaim. Thread-safety: one thread (the main event loop) owns a supervisor.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from broker.config import BrokerConfig
from broker.metrics.request_times import RequestTimesTable
from broker.network.channel.codec import REQUEST, ChannelProtocolError
from broker.network.channel.endpoint import ChannelEndpoint
from broker.network.channel.main_side import MainChannelEndpoint
from broker.network.connection_shares import ConnectionShares
from broker.network.tls import server_context
from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import BufferPoolClosedError
from clients.memory.handles import ReclaimReport
from clients.protocol.errors import MiniKafkaError

__all__ = ["NetworkProcessError", "NetworkProcessSupervisor", "NetworkRestart"]

_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])  # the tree holding broker/



BIND_BUSY_RETRY_S = 2.0  # a port in use is tried again this long (open_listener)


def open_listener(host: str, port: int, backlog: int,
                  busy_retry_s: float = BIND_BUSY_RETRY_S) -> socket.socket:
    """A non-blocking listening socket, bound once here and inherited by every network
    process: :func:`bind_listener`, then :func:`listen_on`."""
    sock = bind_listener(host, port, busy_retry_s)
    try:
        listen_on(sock, backlog, busy_retry_s)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_listener(host: str, port: int,
                  busy_retry_s: float = BIND_BUSY_RETRY_S) -> socket.socket:
    """A non-blocking socket bound to ``host:port``, not listening yet (a connection to
    it is refused; SO_REUSEADDR only: a port in TIME_WAIT is reused, a port in use is
    not).

    A port in use is tried again every 50 ms for ``busy_retry_s``: a restarted broker's
    port can be held for a moment as the local port of another process's outgoing
    connection (a peer's fetcher retrying against this dead broker got it as an
    ephemeral port; the connect fails at once and frees it).  Still in use after that:
    the OSError (another process listens there).  While bound and not listening, the
    port is no ephemeral port for anyone's connections, but another socket with
    SO_REUSEADDR could still bind it (Linux allows that until one listens):
    :func:`listen_on` then fails with EADDRINUSE."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    deadline = time.monotonic() + busy_retry_s
    while True:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.setblocking(False)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE or port == 0 or time.monotonic() >= deadline:
                raise
        except BaseException:
            sock.close()
            raise
        time.sleep(0.05)


def listen_on(sock: socket.socket, backlog: int,
              busy_retry_s: float = BIND_BUSY_RETRY_S) -> None:
    """Make a bound socket listen; EADDRINUSE (another socket listens on its port) is
    tried again every 50 ms for ``busy_retry_s``, then raised."""
    deadline = time.monotonic() + busy_retry_s
    while True:
        try:
            sock.listen(backlog)
            return
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                raise
        time.sleep(0.05)

class NetworkProcessError(MiniKafkaError):
    """A network process could not be started (exited or stayed silent)."""


@dataclass(frozen=True)
class NetworkRestart:
    """What ``poll()`` did about one dead network process."""

    index: int
    old_pid: int
    returncode: int
    new_pid: int
    lost_conn_ids: frozenset[int]  # connections of the dead process the main knew
    reclaimed: ReclaimReport  # buffers the dead process held (pool.reclaim_dead)
    freed_responses: int  # response buffers it never wrote, freed by the supervisor


class NetworkProcessSupervisor:
    """Owns the network processes of one broker and their channel endpoints."""

    def __init__(
        self,
        config: BrokerConfig,
        pool: BufferPool,
        *,
        request_headroom_bytes: int | None = None,
        start_timeout_ms: int = 30_000,
        stop_timeout_ms: int = 5_000,
        memory_retry_ms: float = 2.0,
        file_cache_size: int = 128,
        log_level: str = "WARNING",
        python: str = sys.executable,
        max_pipelined_requests: int = 1,
    ) -> None:
        self.config = config
        self.pool = pool
        if request_headroom_bytes is None:  # keep a quarter of the pool for responses
            request_headroom_bytes = min(
                pool.total_bytes // 4, pool.total_bytes - config.max_request_bytes
            )
        self.request_headroom_bytes = max(0, request_headroom_bytes)
        self.start_timeout_ms = start_timeout_ms
        self.stop_timeout_ms = stop_timeout_ms
        self._extra = [
            "--max-connections-per-ip", str(config.max_connections_per_ip),
            "--max-connections-per-ip-overrides", config.max_connections_per_ip_overrides,
            "--connections-max-idle-ms", str(config.connections_max_idle_ms),
            "--request-read-timeout-ms", str(config.request_read_timeout_ms),
            "--max-queued-requests", str(config.queued_max_requests),
            "--max-partial-request-bytes", str(config.max_partial_request_bytes),
            "--request-headroom-bytes", str(self.request_headroom_bytes),
            "--memory-retry-ms", str(memory_retry_ms),
            "--file-cache-size", str(file_cache_size),
            "--max-pipelined-requests", str(max_pipelined_requests),
            "--log-level", log_level,
        ]  # fmt: skip
        if config.ssl_certfile:
            server_context(config.ssl_certfile, config.ssl_keyfile, config.ssl_cafile,
                           config.ssl_client_auth)  # a bad file fails here, precisely
            self._extra += ["--ssl-certfile", config.ssl_certfile,
                            "--ssl-keyfile", config.ssl_keyfile,
                            "--ssl-cafile", config.ssl_cafile,
                            "--ssl-client-auth", config.ssl_client_auth]
        self._python = python
        self._procs: list[subprocess.Popen[bytes]] = []
        self._endpoints: list[MainChannelEndpoint] = []
        self._port = config.port
        self._listener: socket.socket | None = None  # bound by start(), shared by all
        self._internal: socket.socket | None = None  # the internal listener, if any
        self._internal_port = config.internal_port
        self._listening = False  # the listeners listen: start(), or start_listening()
        self._shares: ConnectionShares | None = None  # created by start(), shared by all
        self._request_times: RequestTimesTable | None = None  # likewise
        self.restarts = 0

    # start ---------------------------------------------------------------------------
    def start(self, listening: bool = True) -> None:
        """Bind the listeners, start every network process and wait (blocking) until each
        is ready; OSError if a port cannot be bound (e.g. another process holds it).
        ``listening=False``: the sockets stay bound and not listening (a client's
        connect is refused) and the processes accept nothing until
        :meth:`start_listening`."""
        if self._procs:
            raise RuntimeError("network processes already started")
        cfg = self.config
        self._listener = bind_listener(cfg.host, cfg.port)
        self._port = self._listener.getsockname()[1]
        if cfg.internal_port >= 0:
            try:
                self._internal = bind_listener(cfg.internal_host or cfg.host,
                                               cfg.internal_port)
            except BaseException:
                self._listener.close()
                self._listener = None
                raise
            self._internal_port = self._internal.getsockname()[1]
        if listening:
            try:
                self._listen()
            except BaseException:
                self.stop()
                raise
        self._shares = ConnectionShares.create(self.config.num_network_processes)
        self._request_times = RequestTimesTable.create(self.config.num_network_processes)
        try:
            for index in range(self.config.num_network_processes):
                proc, endpoint = self._spawn(index)
                self._procs.append(proc)
                self._endpoints.append(endpoint)
                self._wait_ready(proc, endpoint)
        except BaseException:
            self.stop()
            raise

    def start_listening(self) -> None:
        """Make both listeners listen and every network process accept on them (LISTEN);
        processes restarted from now on accept at once.  OSError (EADDRINUSE) if another
        socket took a port meanwhile (see :func:`bind_listener`).  Idempotent."""
        if self._listening:
            return
        self._listen()
        for endpoint in self._endpoints:
            endpoint.send_listen()

    def _listen(self) -> None:
        if self._listener is None:
            raise RuntimeError("the listener is not bound (start() first)")
        listen_on(self._listener, min(4096, max(128, self.config.max_connections)))
        if self._internal is not None:
            listen_on(self._internal, 128)
        self._listening = True

    @property
    def listening(self) -> bool:
        """Whether the listeners listen (clients can connect)."""
        return self._listening

    def _spawn(self, index: int) -> tuple[subprocess.Popen[bytes], MainChannelEndpoint]:
        cfg = self.config
        mine, theirs = _socketpair()
        endpoint = MainChannelEndpoint(
            mine, self.pool, index, max_queued_messages=2 * cfg.max_connections + 64
        )
        argv = [
            self._python, "-m", "broker.network",
            "--listener-fd", str(self._listening_fd()),
            "--pool-name", self.pool.name,
            "--channel-fd", str(theirs.fileno()),
            "--max-request-bytes", str(cfg.max_request_bytes),
            "--max-connections", str(cfg.max_connections),
            "--index", str(index),
            "--shares-fd", str(self._shares_fd()),
            "--shares-slots", str(self.config.num_network_processes),
            "--request-times-fd", str(self.request_times.fileno()),
            *self._extra,
        ]  # fmt: skip
        if not self._listening:  # LISTEN comes later (start_listening)
            argv.append("--await-listen")
        fds = [theirs.fileno(), self._listening_fd(), self._shares_fd(),
               self.request_times.fileno()]
        if self._internal is not None:
            argv += ["--internal-listener-fd", str(self._internal.fileno()),
                     "--max-internal-connections", str(cfg.max_internal_connections)]
            fds.append(self._internal.fileno())
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_SOURCE_ROOT, env.get("PYTHONPATH")) if p)
        try:
            proc = subprocess.Popen(
                argv, pass_fds=fds,
                stdin=subprocess.DEVNULL, env=env
            )
        except BaseException:
            endpoint.close()
            raise
        finally:
            theirs.close()  # the child has its copy; ours would hide the child's death
        return proc, endpoint

    def _listening_fd(self) -> int:
        if self._listener is None:
            raise RuntimeError("the listener is not bound (start() first)")
        return self._listener.fileno()

    def _shares_fd(self) -> int:
        if self._shares is None:
            raise RuntimeError("the connection-count table is missing (start() first)")
        return self._shares.fileno()

    def _wait_ready(self, proc: subprocess.Popen[bytes], endpoint: MainChannelEndpoint) -> None:
        deadline = time.monotonic() + self.start_timeout_ms / 1000
        while not endpoint.ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NetworkProcessError(
                    f"network process {endpoint.index} (pid {proc.pid}) not ready within "
                    f"{self.start_timeout_ms} ms"
                )
            poller = select.poll()  # not select.select: a broker with many logs has fds > 1023
            poller.register(endpoint.fileno(), select.POLLIN)
            poller.poll(min(remaining, 0.1) * 1000)
            endpoint.recv_messages(max_messages=1)  # READY is the first message
            if not endpoint.ready and (endpoint.at_eof or proc.poll() is not None):
                raise NetworkProcessError(
                    f"network process {endpoint.index} (pid {proc.pid}) exited with "
                    f"status {proc.wait()} before it was ready (see its stderr)"
                )

    # accessors -----------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The port every network process listens on."""
        return self._port

    @property
    def internal_port(self) -> int:
        """The internal listener's port (-1: the broker has none)."""
        return self._internal_port

    @property
    def request_times(self) -> RequestTimesTable:
        """The request times every network process records (read it on a scrape)."""
        if self._request_times is None:
            raise RuntimeError("the request-times table is missing (start() first)")
        return self._request_times

    @property
    def endpoints(self) -> list[MainChannelEndpoint]:
        return list(self._endpoints)

    def endpoint(self, index: int) -> MainChannelEndpoint:
        return self._endpoints[index]

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        return list(self._procs)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    # watch ---------------------------------------------------------------------------
    def poll(self) -> list[NetworkRestart]:
        """Restart every network process that died since the last call."""
        reports = []
        for index, proc in enumerate(self._procs):
            returncode = proc.poll()
            if returncode is not None:
                reports.append(self._restart(index, proc, returncode))
        return reports

    def _restart(
        self, index: int, proc: subprocess.Popen[bytes], returncode: int
    ) -> NetworkRestart:
        old = self._endpoints[index]
        lost = old.known_conn_ids()
        try:  # messages it sent that nobody read: requests it still owns, reclaimed below
            for msg in ChannelEndpoint.recv_messages(old):
                if msg[0] == REQUEST:
                    lost.add(msg[1])
        except ChannelProtocolError:
            pass
        old.close()
        if self._shares is not None:
            self._shares.retire(index)
        freed = old.release_unwritten_responses()
        reclaimed = self.pool.reclaim_dead()
        new_proc, endpoint = self._spawn(index)
        self._procs[index], self._endpoints[index] = new_proc, endpoint
        self.restarts += 1
        return NetworkRestart(
            index=index,
            old_pid=proc.pid,
            returncode=returncode,
            new_pid=new_proc.pid,
            lost_conn_ids=frozenset(lost),
            reclaimed=reclaimed,
            freed_responses=freed,
        )

    # stop ----------------------------------------------------------------------------
    def stop(self, timeout_ms: int | None = None) -> dict[int, int | None]:
        """SIGTERM every process, SIGKILL what is left after ``timeout_ms``; close the
        endpoints. Returns {pid: exit status}. Idempotent."""
        timeout_ms = self.stop_timeout_ms if timeout_ms is None else timeout_ms
        procs = self._procs
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_ms / 1000
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        for endpoint in self._endpoints:
            endpoint.close()
        with contextlib.suppress(BufferPoolClosedError):  # pool closed first: nothing to free
            for endpoint in self._endpoints:
                endpoint.release_unwritten_responses()
            if procs:
                self.pool.reclaim_dead()
        codes = {p.pid: p.returncode for p in procs}
        self._procs, self._endpoints = [], []
        self._listening = False
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._internal is not None:
            self._internal.close()
            self._internal = None
        if self._shares is not None:
            self._shares.close()
            self._shares = None
        if self._request_times is not None:
            self._request_times.close()
            self._request_times = None
        return codes

    def __enter__(self) -> NetworkProcessSupervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _socketpair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
