"""Network process: TCP connections <-> pool buffers <-> descriptor channel to the main process.

This module is its entry point (arguments, listener, start-up handshake; the line above
is the ``--help`` description).  Run as ``python -m broker.network --listener-fd FD
--pool-name NAME --channel-fd FD --max-request-bytes N --max-connections N --index I``
plus optional limits (``--max-connections-per-ip``, ``--max-connections-per-ip-overrides``,
``--connections-max-idle-ms``, ``--request-read-timeout-ms``,
``--max-partial-request-bytes``, ``--internal-listener-fd``
with ``--max-internal-connections`` for a broker with an internal listener, and
``--await-listen`` for a broker whose listeners do not listen yet; see
:func:`build_parser`)
(see :func:`main`); started and restarted by
:class:`broker.network.supervisor.NetworkProcessSupervisor`.  :func:`main` attaches the
shared-memory pool, takes the listening socket the supervisor bound and passed down
(every network process shares that one socket: no SO_REUSEPORT, so no stranger can bind
the broker's port beside it) and the table of connection counts they balance accepts
with (``--shares-fd``, :mod:`~broker.network.connection_shares`), builds a
:class:`~broker.network.process.NetworkProcess` (the epoll loop, which owns a request
reader and a response writer), sends ``READY`` with the bound port and pid on the
descriptor channel, and runs the loop.

Exit status: 0 after SIGTERM/SIGINT or channel EOF, 1 if READY cannot be sent, 2 for a
bad configuration (pool not attachable, port not bindable, invalid sizes).
Costs: see :mod:`broker.network.process` (per request 2-3 ``recv`` syscalls, one channel
message each way, 3 pool lock round trips, no copy of frames or responses in Python).
Process-safety: one network process per channel; it only touches buffers it allocated
and has not handed over, or response buffers handed to it.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket

from broker.config import parse_ip_overrides
from broker.metrics.request_times import RequestTimesTable
from broker.network.channel.codec import encode_ready
from broker.network.channel.endpoint import ChannelEndpoint
from broker.network.connection_shares import ConnectionShares
from broker.network.process import NetworkProcess
from broker.network.tls import CLIENT_AUTH_MODES, server_context
from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import BufferPoolError
from clients.protocol.errors import InvalidConfigError

__all__ = ["build_parser", "main"]

log = logging.getLogger("broker.network")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m broker.network", description=__doc__.split("\n")[0])
    p.add_argument("--listener-fd", type=int, required=True,
                   help="the listening socket, inherited from the supervisor")
    p.add_argument("--internal-listener-fd", type=int, default=None,
                   help="the internal (replication) listening socket, if the broker has one")
    p.add_argument("--max-internal-connections", type=int, default=100)
    p.add_argument("--pool-name", required=True)
    p.add_argument("--channel-fd", type=int, required=True)
    p.add_argument("--max-request-bytes", type=int, required=True)
    p.add_argument("--max-connections", type=int, required=True)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--max-connections-per-ip", type=int, default=None)
    p.add_argument("--max-connections-per-ip-overrides", default="")
    p.add_argument("--connections-max-idle-ms", type=int, default=600_000)
    p.add_argument("--request-read-timeout-ms", type=int, default=30_000)
    p.add_argument("--max-queued-requests", type=int, default=500)
    # requests of one connection with the main process at once (1: Kafka's rule); the
    # broker's main process passes MAX_PIPELINED_REQUESTS (it answers them in order)
    p.add_argument("--max-pipelined-requests", type=int, default=1)
    p.add_argument("--max-partial-request-bytes", type=int, default=0,
                   help="0: auto (broker.network.connection_shares.partial_request_bytes)")
    p.add_argument("--request-headroom-bytes", type=int, default=0)
    p.add_argument("--file-cache-size", type=int, default=128)
    p.add_argument("--memory-retry-ms", type=float, default=2.0)
    p.add_argument("--shares-fd", type=int, default=None,
                   help="the shared table of connection counts (a memfd), inherited")
    p.add_argument("--shares-slots", type=int, default=0)
    p.add_argument("--accept-yield-ms", type=float, default=5.0)
    p.add_argument("--request-times-fd", type=int, default=None,
                   help="the shared table of request times (a memfd), inherited")
    p.add_argument("--ssl-certfile", default="", help="set: the port speaks TLS")
    p.add_argument("--ssl-keyfile", default="")
    p.add_argument("--ssl-cafile", default="")
    p.add_argument("--ssl-client-auth", default="none", choices=CLIENT_AUTH_MODES)
    p.add_argument("--await-listen", action="store_true",
                   help="accept on no listener until the main process sends LISTEN (the "
                        "sockets are bound, not listening yet)")
    p.add_argument("--log-level", default="WARNING")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s network[{args.index}] %(levelname)s %(message)s",
    )
    channel_sock = socket.socket(fileno=args.channel_fd)
    channel_sock.set_inheritable(False)
    channel = ChannelEndpoint(channel_sock, max_queued_messages=4 * args.max_connections + 64)
    try:
        pool = BufferPool.attach(args.pool_name)
    except (OSError, BufferPoolError) as exc:
        log.error("cannot attach buffer pool %r: %s", args.pool_name, exc)
        channel.close()
        return 2
    try:
        try:
            listener = socket.socket(fileno=args.listener_fd)
            listener.set_inheritable(False)
            listener.setblocking(False)
        except OSError as exc:
            log.error("no listening socket at fd %d: %s", args.listener_fd, exc)
            return 2
        internal = None
        if args.internal_listener_fd is not None:
            try:
                internal = socket.socket(fileno=args.internal_listener_fd)
                internal.set_inheritable(False)
            except OSError as exc:
                log.error("no internal listening socket at fd %d: %s",
                          args.internal_listener_fd, exc)
                listener.close()
                return 2
        shares = None
        if args.shares_fd is not None:
            try:
                shares = ConnectionShares(args.shares_fd, args.shares_slots)
            except (OSError, ValueError) as exc:
                log.error("no connection-count table at fd %d: %s", args.shares_fd, exc)
                listener.close()
                if internal is not None:
                    internal.close()
                return 2
        request_times = None
        if args.request_times_fd is not None:
            try:
                request_times = RequestTimesTable(args.request_times_fd,
                                                  max(1, args.shares_slots))
            except (OSError, ValueError) as exc:
                log.error("no request-times table at fd %d: %s", args.request_times_fd, exc)
                listener.close()
                if internal is not None:
                    internal.close()
                return 2
        try:
            tls = (server_context(args.ssl_certfile, args.ssl_keyfile, args.ssl_cafile,
                                  args.ssl_client_auth) if args.ssl_certfile else None)
            process = NetworkProcess(
                listener=listener,
                channel=channel,
                pool=pool,
                index=args.index,
                max_request_bytes=args.max_request_bytes,
                max_connections=args.max_connections,
                max_connections_per_ip=args.max_connections_per_ip,
                max_connections_per_ip_overrides=parse_ip_overrides(
                    args.max_connections_per_ip_overrides),
                connections_max_idle_ms=args.connections_max_idle_ms,
                request_read_timeout_ms=args.request_read_timeout_ms,
                max_queued_requests=args.max_queued_requests,
                max_partial_request_bytes=args.max_partial_request_bytes,
                request_headroom_bytes=args.request_headroom_bytes,
                file_cache_size=args.file_cache_size,
                memory_retry_ms=args.memory_retry_ms,
                shares=shares,
                accept_yield_ms=args.accept_yield_ms,
                tls_context=tls,
                internal_listener=internal,
                max_internal_connections=args.max_internal_connections,
                request_times=(None if request_times is None
                               else request_times.writer(args.index)),
                listening=not args.await_listen,
                max_pipelined_requests=args.max_pipelined_requests,
            )
        except InvalidConfigError as exc:
            listener.close()
            if internal is not None:
                internal.close()
            log.error("%s", exc)
            return 2
        process.install_signal_handlers()
        if not channel.send(encode_ready(listener.getsockname()[1], os.getpid())):
            process.shutdown()
            return 1
        return process.run()
    finally:
        channel.close()
        pool.close()
