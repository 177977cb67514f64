"""A small asyncio client for broker-to-broker and broker-to-controller requests.

Used inside a broker's (or the controller's) event loop: replica fetchers, the metadata
follower (registration, heartbeats, metadata fetches) and forwarded admin requests.
One :class:`AsyncConnection` is one TCP connection with pipelined requests matched by
correlation id; ``request()`` returns the decoded response body or raises.  It is the
asyncio adapter of a sans-IO :class:`~clients.protocol.request_channel.RequestChannel`
(correlation ids, framing, in-order completion, deadlines; the client's socket
connection drives the same one): this module writes the buffers the channel encodes,
feeds it what the stream reads and hands each completed response to the waiting future.
A frame that breaks the protocol (an unexpected correlation id, a bad frame) fails every
waiter still waiting with that ProtocolError (the responses completed before it are
delivered) and closes the connection.

Bounds: ``max_in_flight`` requests per connection (further callers wait), frames up to
``max_frame_bytes``, every request has ``timeout_ms`` (then RequestTimedOutError and the
connection is closed, since a late answer would desynchronise nothing but is useless).
Deadlines are the channel's, on the injected ``clock``: the adapter only arms one loop
timer for the earliest deadline (:meth:`AsyncConnection.expire` when it fires, which
asks the channel which requests expired); no ``asyncio.wait_for`` per request.
A connection that fails raises a retriable NETWORK_EXCEPTION error to every waiter and
is reconnected by the next ``request()``.

With ``login`` the connection authenticates right after it opens (SaslHandshake v1 and
SaslAuthenticate, SCRAM-SHA-256: :mod:`clients.protocol.sasl_exchange`) before any
request; a refusal raises :class:`AuthenticationError` and closes it.

Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Any, Protocol

from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import (
    ErrorCode,
    MiniKafkaError,
    RequestTimedOutError,
)
from clients.protocol.fetch_session.handler import highest_fetch_version
from clients.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from clients.protocol.registry import APIS
from clients.protocol.request_channel import ClientResponse, ProtocolViolation, RequestChannel
from clients.protocol.sasl_exchange import sasl_exchange
from timer.clock import Clock, MonotonicClock

CONNECT_TIMEOUT_S = 5.0
AUTH_TIMEOUT_MS = 10_000
SCRAM_MECHANISM = "SCRAM-SHA-256"
_READ_BYTES = 256 * 1024



class ControllerChannel(Protocol):
    """What the broker's parts ask of their connection to the controller (the core, the
    handlers that forward to it, the offsets topic creating itself): one request,
    answered or failed within ``timeout_ms`` (each voter tried within
    ``attempt_timeout_ms`` when given), and where it goes (``address``, for log
    lines).  :class:`AsyncConnection` implements it, and
    :class:`broker.metadata.controller_channel.ControllerQuorumChannel` (the active
    controller of a quorum, the one brokers use)."""

    @property
    def address(self) -> str: ...

    async def request(self, api_key: int, body: dict[str, Any], *,
                      api_version: int | None = None, timeout_ms: int = 30_000,
                      attempt_timeout_ms: int | None = None) -> dict[str, Any]: ...

class BrokerUnreachableError(MiniKafkaError):
    code = ErrorCode.NETWORK_EXCEPTION


def _complete(responses: list[ClientResponse]) -> None:
    for response in responses:
        future: asyncio.Future[Any] = response.request.context[0]
        if not future.done():  # a waiter that gave up (cancelled) is skipped
            future.set_result(response.body)


class AsyncConnection:
    def __init__(self, host: str, port: int, *, client_id: str = "broker",
                 max_in_flight: int = 16, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 login: tuple[str, bytes] | None = None,
                 ssl_context: ssl.SSLContext | None = None,
                 clock: Clock | None = None) -> None:
        self.host = host
        self.ssl_context = ssl_context  # TLS to the peer's port (broker.network.tls)
        self.login = login  # (username, password): SCRAM-SHA-256 right after connecting
        self.port = port
        self.client_id = client_id
        self.max_frame_bytes = max_frame_bytes
        self._slots = asyncio.Semaphore(max_in_flight)
        self._clock = clock if clock is not None else MonotonicClock()
        self._channel = RequestChannel(self._clock.now_ms, client_id=client_id,
                                       max_frame_bytes=max_frame_bytes)
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connect_lock = asyncio.Lock()
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._armed_ms: int | None = None  # the deadline the timer wakes up for

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _ensure_connected(self) -> asyncio.StreamWriter:
        async with self._connect_lock:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        self.host, self.port, ssl=self.ssl_context,
                        server_hostname=self.host if self.ssl_context else None),
                    CONNECT_TIMEOUT_S)
            except (TimeoutError, OSError) as exc:  # incl. a failed TLS handshake
                raise BrokerUnreachableError(f"cannot connect to {self.address}: {exc}") \
                    from None
            self._writer = writer
            self._reader_task = asyncio.get_running_loop().create_task(self._read_loop(reader))
            if self.login is not None:
                try:
                    await self._authenticate(writer, *self.login)
                except BaseException:
                    self.close()
                    raise
            return writer

    async def _authenticate(self, writer: asyncio.StreamWriter, username: str,
                            password: bytes) -> None:
        """SaslHandshake v1 and two SaslAuthenticate rounds (SCRAM-SHA-256), the requests
        and checks from the sans-IO :func:`~clients.protocol.sasl_exchange.sasl_exchange`."""
        steps = sasl_exchange(SCRAM_MECHANISM, username, password,
                              APIS[ApiKey.SASL_AUTHENTICATE].max_version)
        request = next(steps)
        while True:
            answer = await self._round_trip(writer, *request, AUTH_TIMEOUT_MS)
            try:
                request = steps.send(answer)
            except StopIteration:
                return

    def _send(self, writer: asyncio.StreamWriter, api_key: int, api_version: int,
              body: dict[str, Any], timeout_ms: int) -> asyncio.Future[Any]:
        """Encode through the channel and write; the future the response will complete."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        request, buffers = self._channel.send_request(api_key, api_version, body,
                                                      timeout_ms=timeout_ms,
                                                      context=(future, timeout_ms))
        writer.writelines(buffers)
        assert request is not None
        self._arm(request.deadline_ms)
        return future

    def _arm(self, deadline_ms: int) -> None:
        """Wake up at ``deadline_ms`` (channel clock) unless woken earlier already."""
        if self._armed_ms is not None and self._armed_ms <= deadline_ms:
            return
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        delay_s = max(0, deadline_ms - self._clock.now_ms()) / 1000
        self._armed_ms = deadline_ms
        self._deadline_timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer)

    def _disarm(self) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_timer = self._armed_ms = None

    def _on_timer(self) -> None:
        self._deadline_timer = self._armed_ms = None
        self.expire()
        next_ms = self._channel.next_deadline_ms()
        if next_ms is not None:
            self._arm(next_ms)

    def expire(self) -> None:
        """Fail the requests whose deadline passed on the clock (RequestTimedOutError)
        and close the connection (every other waiter fails with a retriable error);
        nothing when none did.  Called by the deadline timer; tests call it after moving
        a manual clock."""
        expired = self._channel.expired()
        if not expired:
            return
        for request in expired:
            future, timeout_ms = request.context
            if not future.done():
                future.set_exception(RequestTimedOutError(
                    f"no answer from {self.address} within {timeout_ms} ms"))
        self.close()

    async def _round_trip(self, writer: asyncio.StreamWriter, api_key: int, api_version: int,
                          body: dict[str, Any], timeout_ms: int) -> dict[str, Any]:
        future = self._send(writer, api_key, api_version, body, timeout_ms)
        await writer.drain()
        return await future  # type: ignore[no-any-return]

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        error: MiniKafkaError = BrokerUnreachableError(f"connection to {self.address} closed")
        try:
            while True:
                data = await reader.read(_READ_BYTES)
                if not data:
                    raise asyncio.IncompleteReadError(b"", None)
                try:
                    responses = self._channel.receive_data(data)
                except ProtocolViolation as exc:
                    _complete(exc.completed)  # answered before the bad frame
                    raise
                _complete(responses)
        except (asyncio.IncompleteReadError, OSError) as exc:
            error = BrokerUnreachableError(f"connection to {self.address} lost: {exc}")
        except MiniKafkaError as exc:
            error = exc
        except asyncio.CancelledError:
            pass
        finally:
            if self._reader_task in (None, asyncio.current_task()):  # not replaced yet
                self._fail_all(error)

    def _fail_all(self, error: MiniKafkaError) -> None:
        self._disarm()
        for failed in self._channel.reset(error):
            future: asyncio.Future[Any] = failed.request.context[0]
            if not future.done():
                future.set_exception(error)
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    async def request(self, api_key: int, body: dict[str, Any], *,
                      api_version: int | None = None, timeout_ms: int = 30_000,
                      attempt_timeout_ms: int | None = None) -> dict[str, Any]:
        """One round trip (one attempt: ``attempt_timeout_ms`` is for a channel to a
        quorum, :class:`ControllerChannel`); ``api_version`` defaults to the highest we
        serve (the peers of this client are our own brokers and controller, which serve
        the same), for a Fetch the highest its topics allow (v13+ only by topic id)."""
        if api_version is None:
            api_version = APIS[api_key].max_version
            if api_key == ApiKey.FETCH:
                api_version = highest_fetch_version(body, api_version)
        async with self._slots:
            writer = await self._ensure_connected()
            future = self._send(writer, api_key, api_version, body, timeout_ms)
            try:
                await writer.drain()
                return await future  # type: ignore[no-any-return]
            except OSError as exc:
                self.close()
                raise BrokerUnreachableError(f"{self.address}: {exc}") from None

    def close(self) -> None:
        """Close the stream; every waiter fails now (a retriable NETWORK_EXCEPTION)."""
        if self._reader_task is not None:
            self._reader_task.cancel()
            self._reader_task = None
        self._fail_all(BrokerUnreachableError(f"connection to {self.address} closed"))

    async def aclose(self) -> None:
        task = self._reader_task
        self.close()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
