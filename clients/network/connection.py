"""Client side of one TCP connection to a broker: the socket adapter of a sans-IO channel.

Wire format: Kafka's request and response frames (:mod:`clients.protocol.codec`).
Requests go out with ``socket.sendmsg`` of the buffer list that
:func:`~clients.protocol.codec.encode_request` returns, so record batches are written from
their (pooled) buffers without being joined.

TLS (``security_protocol`` SSL / SASL_SSL): with an ``ssl_context``
(:func:`clients.network.tls.ssl_context_of`) :meth:`BrokerConnection.connect` wraps the
socket right after the TCP connect (server name: the host connected to, so the broker's
certificate is checked against it), before ApiVersions and any SASL login.  Requests
then go out with ``sendall`` of coalesced chunks (:func:`~clients.protocol.framing.send_buffers`).
Responses are read with the socket switched to non-blocking for the read and drained
until the TLS layer would block: bytes it already decrypted (``SSLSocket.pending()``)
never wake the selector, so leaving any there could strand a response until its
timeout; :class:`~clients.network.poller.Poller` also treats a connection with such
bytes as readable.  A
certificate failure raises :class:`~clients.network.tls.SslAuthenticationError` (an
AuthenticationError: not retriable); any other TLS failure is a :class:`NetworkError`
naming the SSL reason.

Versions: :meth:`BrokerConnection.connect` asks the broker for its versions first
(ApiVersions v3, and Kafka's fallback: an UNSUPPORTED_VERSION answer names the versions
of ApiVersions to retry with), then logs in with a SASL login; both steps are the
channel's sans-IO :class:`~clients.protocol.request_channel.Handshake` (this module only
sends the bytes it returns and reads, without a selector, at most the rest of the answer
it awaits).  A request then goes out at the highest version both
sides serve (:meth:`BrokerConnection.version_for`; our side is the declaration in
:mod:`clients.protocol.registry`); an API the broker does not serve, or no common
version, raises :class:`~clients.protocol.errors.UnsupportedVersionError` without
sending anything.  A body whose shape depends on the version (LeaveGroup ``member_id``
before v3, ``members`` from v3; OffsetFetch ``groups`` from v8; ...) is passed as a
*builder*, a callable taking the chosen version and returning the body; the version a
request went out at is :attr:`~clients.protocol.request_channel.InFlightRequest.api_version`,
and :meth:`BrokerConnection.request_with_version` returns it with the answer, so callers
read a response in the shape of its version.

The protocol state of the connection lives in a sans-IO
:class:`~clients.protocol.request_channel.RequestChannel` (correlation ids, framing,
in-flight requests and their deadlines on the injected ``now_ms`` clock, the version
negotiation and login at connect time); this module is its socket adapter: it writes the
buffers the channel encodes, feeds it what ``recv`` returns and turns its verdicts (a
protocol violation, an expired deadline) into closing the socket.  Waiting on several
connections at once is :mod:`clients.network.poller`'s.  A broker answers the requests of one
connection strictly in order, so the oldest in-flight request must own the next
response (a different correlation id is a protocol violation and closes the
connection).

Bounds and timeouts:

- at most ``max_in_flight`` requests awaiting a response (:meth:`BrokerConnection.send`
  raises ``IllegalStateError``-style :class:`TooManyInFlightError` beyond it; callers
  check :attr:`BrokerConnection.can_send`);
- the TCP connect and the TLS handshake take at most ``connect_timeout_ms`` together;
  each step of the ApiVersions / SASL exchange that follows at most
  ``connect_timeout_ms`` again (a deadline on the channel's clock); a send blocks at most
  ``request_timeout_ms``; a request not answered within its timeout fails with
  :class:`~clients.protocol.errors.RequestTimedOutError` and the connection is closed (as Kafka
  does: its response could still arrive and be mistaken for another);
- a lost connection fails every in-flight request with :class:`NetworkError`
  (NETWORK_EXCEPTION, retriable).

Failures of in-flight requests are *returned* as :class:`ClientResponse` with
``error`` set, never raised from :meth:`~clients.network.poller.Poller.poll`, so one dead
broker does not disturb the handling of the others.

Costs: send is O(buffers) plus the compiled encode of the header and body (records are
not copied); reading is O(bytes received) (frames wholly inside one ``recv`` chunk are
not copied).  Connecting costs one ApiVersions round trip (plus, with TLS, the
handshake; and TLS's cost per byte, see :mod:`clients.network.tls`).

Thread safety: none.  A connection and a poller belong to one thread (the producer's
sender thread, or the thread calling the consumer/admin).
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clients.network.poller import Poller
from clients.network.sasl import SaslLogin
from clients.network.tls import certificate_failure
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import (
    AuthenticationError,
    ErrorCode,
    MiniKafkaError,
    RequestTimedOutError,
    UnsupportedVersionError,
)
from clients.protocol.fetch_session.handler import highest_fetch_version
from clients.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameTooLargeError,
    send_buffers,
)
from clients.protocol.request_channel import (
    ClientResponse,
    Handshake,
    InFlightRequest,
    ProtocolViolation,
    RequestChannel,
    negotiated_version,
)

_RECV_BYTES = 256 * 1024

# A request body, or a builder of the body for the version the request goes out at.
Body = Mapping[str, Any] | Callable[[int], Mapping[str, Any]]


class NetworkError(MiniKafkaError):
    """The connection failed or was lost (retriable: reconnect and resend)."""

    code = ErrorCode.NETWORK_EXCEPTION


class TooManyInFlightError(MiniKafkaError):
    """``send`` on a connection that already has ``max_in_flight`` requests waiting."""

    code = ErrorCode.INVALID_REQUEST


def _handshake_failure(e: OSError | MiniKafkaError, where: str, *, tls: bool,
                       ) -> MiniKafkaError:
    """The error :meth:`BrokerConnection.connect` raises for a failed ApiVersions / SASL
    exchange: a refusal as it is, anything else a NetworkError with a hint at the cause."""
    if isinstance(e, UnsupportedVersionError | AuthenticationError):
        return e
    # with TLS 1.3 a broker rejects our certificate after the handshake: here
    refused = certificate_failure(e, where)
    if refused is not None:
        return refused
    hint = ""
    if not tls and isinstance(e, FrameTooLargeError | ConnectionResetError):
        # a TLS listener answers a plaintext request with an alert, or resets
        hint = " (if the listener speaks TLS, use security_protocol='SSL' or 'SASL_SSL')"
    elif tls and isinstance(e, ssl.SSLEOFError | ConnectionError | NetworkError):
        # TLS 1.3: a broker rejecting our certificate closes after the handshake; if our
        # request reached it first, the reset can discard its alert
        hint = (" (closed right after the TLS handshake: if the broker requires client "
                "certificates, check ssl_certfile / ssl_keyfile)")
    return NetworkError(f"{where}: version handshake failed: {e}{hint}")


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class _Stats:
    requests_sent: int = 0
    bytes_sent: int = 0
    responses: int = 0
    disconnects: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class BrokerConnection:
    """One connection to ``host:port`` (lazy: :meth:`connect` opens it)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str | None = None,
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 10_000,
        max_in_flight: int = 5,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        now_ms: Callable[[], int] = _monotonic_ms,
        sasl: SaslLogin | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if request_timeout_ms <= 0 or connect_timeout_ms <= 0:
            raise ValueError("request_timeout_ms and connect_timeout_ms must be > 0")
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.max_in_flight = max_in_flight
        self.max_frame_bytes = max_frame_bytes
        self.sasl = sasl  # log in right after ApiVersions (clients.network.sasl)
        self.ssl_context = ssl_context  # TLS right after the TCP connect (None: plaintext)
        self.now_ms = now_ms  # the clock request deadlines are on
        self._sock: socket.socket | None = None
        # framing, correlation ids and deadlines (sans I/O)
        self._channel = RequestChannel(now_ms, client_id=client_id, node_id=node_id,
                                       max_frame_bytes=max_frame_bytes)
        self._in_flight = self._channel.in_flight
        self._failed: list[ClientResponse] = []  # failed by a send error, not yet reported
        self.stats = _Stats()
        # the broker's (min, max) version per API key, learned on connect
        self.api_versions: dict[int, tuple[int, int]] = {}

    def __repr__(self) -> str:
        state = "connected" if self._sock is not None else "closed"
        return f"BrokerConnection(node={self.node_id}, {self.host}:{self.port}, {state})"

    # ------------------------------------------------------------ state
    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    @property
    def can_send(self) -> bool:
        return self._sock is not None and len(self._in_flight) < self.max_in_flight

    @property
    def sock(self) -> socket.socket | None:
        """The open socket (None when closed): a poller tells a reconnection by it."""
        return self._sock

    def fileno(self) -> int:
        return self._sock.fileno() if self._sock is not None else -1

    def connect(self) -> None:
        """Open the connection (no-op when open): TCP, TLS with an ``ssl_context``,
        ApiVersions, SASL with a login.

        Raises NetworkError (retriable) when the broker cannot be reached or a step
        fails, AuthenticationError for a refused login and its subclass
        SslAuthenticationError for a certificate failure, UnsupportedVersionError when
        no ApiVersions version is common.
        """
        if self._sock is not None:
            return
        timeout_s = self.connect_timeout_ms / 1000
        deadline_ms = self.now_ms() + self.connect_timeout_ms
        try:
            sock = socket.create_connection((self.host, self.port), timeout=timeout_s)
        except OSError as e:
            raise NetworkError(
                f"cannot connect to node {self.node_id} at {self.host}:{self.port}: {e}"
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_context is not None:
            sock = self._tls_handshake(sock, self.ssl_context, deadline_ms)
        self._channel.reset(NetworkError("reconnected"))  # nothing is in flight here
        try:
            self.api_versions = self._handshake(sock)
        except (OSError, MiniKafkaError) as e:
            sock.close()
            self._channel.reset(NetworkError("handshake failed"))  # its request in flight
            raise _handshake_failure(e, self._where(), tls=self.ssl_context is not None) from None
        sock.settimeout(self.request_timeout_ms / 1000)  # bounds a blocking send
        self._sock = sock

    def _where(self) -> str:
        return f"node {self.node_id} at {self.host}:{self.port}"

    def _tls_handshake(self, sock: socket.socket, context: ssl.SSLContext,
                       deadline_ms: int) -> ssl.SSLSocket:
        """``sock`` wrapped in TLS, the handshake done by ``deadline_ms`` (closed on failure)."""
        remaining = (deadline_ms - self.now_ms()) / 1000
        try:
            if remaining <= 0:
                raise TimeoutError("no time left after the TCP connect")
            sock.settimeout(remaining)  # do_handshake applies it to the whole handshake
            return context.wrap_socket(sock, server_hostname=self.host)
        except (OSError, ValueError) as e:
            sock.close()  # wrap_socket closed its own socket; this one is detached or unused
            refused = certificate_failure(e, self._where())
            if refused is not None:
                raise refused from None
            if isinstance(e, TimeoutError):
                raise NetworkError(
                    f"{self._where()}: TLS handshake not finished within connect_timeout_ms="
                    f"{self.connect_timeout_ms} ({e})") from None
            reason = getattr(e, "reason", None) or e
            raise NetworkError(
                f"{self._where()}: TLS handshake failed: {reason} (is it a TLS listener, "
                f"and does it accept TLS 1.2+?)") from None

    def _handshake(self, sock: socket.socket) -> dict[int, tuple[int, int]]:
        """Move the bytes of the channel's connect-time exchange (ApiVersions, SASL):
        every decision and deadline is the sans-IO :class:`Handshake`'s."""
        handshake = Handshake(self._channel, timeout_ms=self.connect_timeout_ms,
                              login=self.sasl)
        outgoing = handshake.start()
        while True:
            remaining_ms = handshake.remaining_ms()
            if remaining_ms <= 0 and not handshake.done:
                raise handshake.timed_out()
            sock.settimeout(max(remaining_ms, 1) / 1000)
            if outgoing:
                send_buffers(sock, outgoing)
            if handshake.done:
                return handshake.api_versions
            try:
                data = sock.recv(handshake.bytes_wanted())  # never past the answer
            except TimeoutError:
                raise handshake.timed_out() from None
            if not data:
                raise handshake.closed_error() or NetworkError(
                    "the broker closed the connection during ApiVersions")
            outgoing = handshake.receive_data(data)

    def version_for(self, api_key: int) -> int:
        """The highest version of ``api_key`` that we and the broker both serve."""
        return negotiated_version(api_key, self.api_versions.get(api_key), self.node_id)

    # ------------------------------------------------------------ sending
    def send(
        self,
        api_key: ApiKey,
        body: Body,
        *,
        api_version: int | None = None,
        expect_response: bool = True,
        timeout_ms: int | None = None,
        context: Any = None,
    ) -> InFlightRequest | None:
        """Send one request; returns its in-flight record (None without a response).

        ``body`` may be a builder (called with the version chosen).  Raises
        NetworkError when not connected or the send fails (the connection is
        closed and the *other* in-flight requests are failed on the next poll),
        TooManyInFlightError when the in-flight bound is reached, ProtocolError /
        MessageTooLargeError when the body cannot be encoded (connection untouched).
        """
        sock = self._sock
        if sock is None:
            raise NetworkError(f"node {self.node_id} ({self.host}:{self.port}) is not connected")
        if expect_response and len(self._in_flight) >= self.max_in_flight:
            raise TooManyInFlightError(
                f"node {self.node_id}: {len(self._in_flight)} requests in flight "
                f"(max_in_flight={self.max_in_flight})"
            )
        if api_version is None:
            api_version = self.version_for(api_key)
            if api_key == ApiKey.FETCH and not callable(body):  # v13+ only by topic id
                api_version = highest_fetch_version(body, api_version)
        if callable(body):
            body = body(api_version)
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        request, buffers = self._channel.send_request(
            api_key, api_version, body, timeout_ms=timeout, expect_response=expect_response,
            context=context)
        try:
            sent = send_buffers(sock, buffers)
        except OSError as e:  # includes socket.timeout
            error = NetworkError(f"node {self.node_id}: send failed: {e}")
            # This request's failure is the raised error; reporting it again from
            # take_failed would settle its caller's work twice (a producer batch
            # retried twice and completed twice: its buffer freed twice).
            self._failed.extend(r for r in self.close(error) if r.request is not request)
            raise error from None
        self.stats.requests_sent += 1
        self.stats.bytes_sent += sent
        return request

    # ------------------------------------------------------------ receiving
    def read(self) -> list[ClientResponse]:
        """Read what the socket has (call when readable); complete responses in order."""
        sock = self._sock
        if sock is None:
            return self._fail_all(NetworkError(f"node {self.node_id} is not connected"))
        if isinstance(sock, ssl.SSLSocket):
            return self._read_tls(sock)
        try:
            data = sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError as e:
            return self.close(NetworkError(f"node {self.node_id}: connection lost: {e}"))
        if not data:
            return self.close(
                NetworkError(f"node {self.node_id} ({self.host}:{self.port}) closed the connection")
            )
        return self._feed([data])

    def _read_tls(self, sock: ssl.SSLSocket) -> list[ClientResponse]:
        """Read until the TLS layer would block, so nothing stays decrypted but unread
        (``pending()``: invisible to the selector); then EOF or an error closes."""
        chunks: list[bytes] = []
        lost: MiniKafkaError | None = None
        sock.setblocking(False)  # a record still in transit must not block the poller
        try:
            while True:
                try:
                    data = sock.recv(_RECV_BYTES)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError,
                        InterruptedError):  # fmt: skip
                    break  # nothing decrypted is left (recv would have returned it)
                except OSError as e:
                    lost = NetworkError(f"node {self.node_id}: connection lost: {e}")
                    break
                if not data:
                    lost = NetworkError(
                        f"node {self.node_id} ({self.host}:{self.port}) closed the connection")
                    break
                chunks.append(data)
        finally:
            if self._sock is sock:
                sock.settimeout(self.request_timeout_ms / 1000)  # bounds a blocking send
        out = self._feed(chunks) if chunks else []
        if lost is not None and self._sock is sock:
            out += self.close(lost)
        return out

    @property
    def buffered_input(self) -> int:
        """Bytes the TLS layer decrypted but not yet handed out (0 without TLS)."""
        sock = self._sock
        return sock.pending() if isinstance(sock, ssl.SSLSocket) else 0

    def _feed(self, chunks: list[bytes]) -> list[ClientResponse]:
        out: list[ClientResponse] = []
        try:
            for data in chunks:
                out.extend(self._channel.receive_data(data))
        except ProtocolViolation as e:
            return out + e.completed + self.close(
                NetworkError(f"node {self.node_id}: bad response, closing: {e.message}")
            )
        self.stats.responses += len(out)
        return out

    def expire(self) -> list[ClientResponse]:
        """Fail everything and close if any in-flight request is past its deadline."""
        if self._channel.expired():
            oldest = self._in_flight[0]
            return self.close(
                RequestTimedOutError(
                    f"node {self.node_id}: {oldest.api_key.name} request "
                    f"{oldest.correlation_id} not answered in time, disconnecting"
                )
            )
        return []

    def take_failed(self) -> list[ClientResponse]:
        """In-flight requests failed by a send error (reported once)."""
        failed, self._failed = self._failed, []
        return failed

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline of a request in flight, on :attr:`now_ms`'s clock."""
        return self._channel.next_deadline_ms()

    def poll(self, timeout_ms: float) -> list[ClientResponse]:
        """Wait up to ``timeout_ms`` for responses on this connection alone."""
        poller = Poller()
        try:
            return poller.poll([self], timeout_ms)
        finally:
            poller.close()

    def request(
        self,
        api_key: ApiKey,
        body: Body,
        *,
        timeout_ms: int | None = None,
        others: list[ClientResponse] | None = None,
    ) -> dict[str, Any]:
        """Blocking round trip: send, wait for this request's response, return its body.

        Responses to other requests that arrive meanwhile are appended to ``others``
        (dropped if it is None).  Raises the response's transport error (NetworkError /
        RequestTimedOutError).
        """
        return self.request_with_version(api_key, body, timeout_ms=timeout_ms,
                                         others=others)[1]

    def request_with_version(
        self,
        api_key: ApiKey,
        body: Body,
        *,
        timeout_ms: int | None = None,
        others: list[ClientResponse] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """Like :meth:`request`; returns (the version the request went out at, body)."""
        self.connect()
        request = self.send(api_key, body, timeout_ms=timeout_ms)
        assert request is not None
        while True:
            remaining_ms = max(0, request.deadline_ms - self.now_ms())
            for response in self.poll(remaining_ms + 1):
                if response.request is not request:
                    if others is not None:
                        others.append(response)
                    continue
                if response.error is not None:
                    raise response.error
                assert response.body is not None
                return request.api_version, response.body

    # ------------------------------------------------------------ closing
    def close(self, error: MiniKafkaError | None = None) -> list[ClientResponse]:
        """Close the socket; every in-flight request comes back failed with ``error``."""
        self._drop()
        return self._fail_all(error or NetworkError(f"connection to node {self.node_id} closed"))

    def _drop(self) -> None:
        if self._sock is not None:
            self.stats.disconnects += 1
            try:
                self._sock.close()
            finally:
                self._sock = None

    def _fail_all(self, error: MiniKafkaError) -> list[ClientResponse]:
        return self._channel.reset(error)
