"""The metrics port: a small HTTP/1.1 server on the process's event loop, serving
Prometheus' text exposition of one ``CollectorRegistry`` (prometheus_client renders it).

``GET /metrics`` (or ``/``) answers 200 with ``generate_latest(registry)`` and the text
format's content type; another path 404, another method 405; every answer closes the
connection (``Connection: close``: Prometheus opens one per scrape).

Where it lives, and why on the event loop: a broker is a main process (the logs, the
core) plus network processes (the client sockets).  Every request is decoded, handled
and answered by the main process (the network processes move frames and never parse a
request header), so the request counts and latencies are measured there
(:mod:`broker.metrics.request_metrics`) and all the state the metrics read lives there:
the endpoint is a listener of the main process, on its loop, and a scrape reads the core
on the thread that owns it, with no lock and no copy (prometheus_client's own server
runs each request on a new thread, which would read the core concurrently with the loop,
and takes any number of connections; its multiprocess mode is for counters written by
several processes, which we do not have).  The controller runs the same endpoint on its
loop.

Bounds: at most ``max_connections`` open connections (``metrics_max_connections``; more
are closed at once); a request head of at most :data:`MAX_HEAD_BYTES`, which must arrive
within ``read_timeout_s`` (else the connection is closed unanswered); the answer must be
taken by the client within the same time.

Logins: ``authenticate`` (None: none asked) checks HTTP Basic credentials - the broker
passes its SCRAM users' check when clients must log in (``client_auth_required``), and
its authorizer's ``Describe`` on ``Cluster`` when ACLs are on; a missing or wrong login
is answered 401, a refused one 403.  The check runs on the loop (one PBKDF2 of the
user's SCRAM iterations, a few ms, as a SASL/PLAIN login costs).

Costs: a scrape is one rendering of the registry (its collectors' cost) on the loop.
Not thread-safe: start, stop and every connection run on the loop that started it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
from collections.abc import Callable

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 8 * 1024  # request line and headers
# (user, password) -> None if allowed, else the HTTP status: 401 (no such login) or 403
Authenticate = Callable[[str, bytes], int | None]


class MetricsEndpoint:
    """An HTTP listener serving a registry; see the module docstring."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int,
                 max_connections: int, read_timeout_s: float,
                 authenticate: Authenticate | None = None) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.max_connections = max_connections
        self.read_timeout_s = read_timeout_s
        self.authenticate = authenticate
        self.scrapes = 0
        self._open = 0
        self._server: asyncio.Server | None = None

    @property
    def open_connections(self) -> int:
        return self._open

    async def start(self) -> None:
        """Listen (``port`` 0: a free port, then :attr:`port` says which)."""
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, reuse_address=True, limit=MAX_HEAD_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), self.read_timeout_s)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= self.max_connections:
            writer.close()  # over metrics_max_connections: no answer
            return
        self._open += 1
        try:
            async with asyncio.timeout(self.read_timeout_s):
                head = await reader.readuntil(b"\r\n\r\n")
                status, body = await self._answer(head)
                writer.write(_response(status, body))
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):
            pass  # slow, oversized or gone: closed unanswered
        except Exception:  # a collector's bug must not take the process down
            log.exception("metrics scrape failed")
        finally:
            self._open -= 1
            writer.close()

    async def _answer(self, head: bytes) -> tuple[int, bytes]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, b"bad request line\n"
        method, target = parts[0], parts[1].split("?", 1)[0]
        if target not in ("/metrics", "/"):
            return 404, b"not found: GET /metrics\n"
        if method != "GET":
            return 405, b"only GET\n"
        if self.authenticate is not None:
            refused = self._check_login(lines[1:])
            if refused is not None:
                return refused, b"login refused\n" if refused == 403 else b"login needed\n"
        self.scrapes += 1
        return 200, generate_latest(self.registry)

    def _check_login(self, headers: list[str]) -> int | None:
        assert self.authenticate is not None
        for line in headers:
            name, _, value = line.partition(":")
            if name.strip().lower() != "authorization":
                continue
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() != "basic":
                return 401
            try:
                user, sep, password = base64.b64decode(token, validate=True).partition(b":")
            except (binascii.Error, ValueError):
                return 401
            if not sep:
                return 401
            return self.authenticate(user.decode("utf-8", "replace"), password)
        return 401


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 405: "Method Not Allowed"}


def _response(status: int, body: bytes) -> bytes:
    content_type = CONTENT_TYPE_LATEST if status == 200 else "text/plain; charset=utf-8"
    extra = 'WWW-Authenticate: Basic realm="minikafka"\r\n' if status == 401 else ""
    return (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
            ).encode("latin-1") + body
