"""One client connection's protocol state, sans I/O: framing, correlation ids, request
deadlines, and the connect-time exchange (ApiVersions negotiation, then a SASL login).

:class:`RequestChannel` is fed the bytes a socket (or an asyncio stream) delivered and
returns what it made of them; it is asked for the bytes of a request and returns them.
It never touches a socket, a selector, an event loop or the system clock: time comes
from the ``now_ms`` callable passed in at construction (for example
``timer.clock.MonotonicClock().now_ms``, or a ``ManualClock``'s in tests).

Contract:

- :meth:`RequestChannel.send_request` gives the request the next correlation id (0, 1,
  ... wrapping at 2**31 - 1 back to 0), encodes it (:func:`~clients.protocol.codec.
  encode_request`: a list of buffers, records not copied) and, when a response is
  expected, records it in flight with the deadline ``now_ms() + timeout_ms``;
- :meth:`RequestChannel.receive_data` splits the bytes into frames (any split across
  calls) and completes requests strictly in order: a broker answers the requests of one
  connection in the order it received them, so the oldest in-flight request owns the
  next frame.  A frame with no request in flight, or with another correlation id, or that
  does not decode, breaks the channel: :class:`ProtocolViolation` is raised carrying the
  responses completed before it, and the caller closes the connection;
- :meth:`RequestChannel.expired` names the in-flight requests whose deadline has passed
  (the caller decides what failing them means: Kafka closes the connection, since a late
  answer would be taken for another request's);
- :func:`negotiated_version` picks the version a request goes out at from the broker's
  ApiVersions answer and our declarations (:mod:`clients.protocol.registry`);
  :func:`api_versions_request` / :func:`api_versions_answer` are one ApiVersions round
  with Kafka's fallback (an UNSUPPORTED_VERSION answer names the versions to retry with;
  it is always encoded at v0, so an ApiVersions answer that does not decode at the
  version asked is read at v0).

The connect-time exchange (:class:`Handshake`) runs on the channel of a new connection
before any other request: ApiVersions at our highest version (once more at the broker's
after the fallback answer), then, with credentials, the SASL login of
:func:`~clients.protocol.sasl_exchange.sasl_login`.  It is driven the same way: the
adapter sends the buffers :meth:`Handshake.start` / :meth:`Handshake.receive_data`
return, feeds it what the socket delivered (reading at most
:meth:`Handshake.bytes_wanted`: bytes after an answer belong to requests not yet sent),
and waits at most :meth:`Handshake.remaining_ms` on the injected clock (each step of the
exchange gets its own ``timeout_ms``).  Its requests are numbered 0, 1, ... by the
handshake itself (as Kafka's SASL authenticator numbers its own), so the channel's first
ordinary request is still correlation id 0.

Costs: a send is the compiled encode of header and body; receiving is O(bytes) (frames
wholly inside one chunk are not copied, see :class:`~clients.protocol.framing.
FrameDecoder`); at most ``max_frame_bytes`` + 4 bytes are buffered.

Thread-safety: none; a channel belongs to the one thread or event loop of its connection.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import Response, decode_response, encode_request
from clients.protocol.errors import (
    AuthenticationError,
    ErrorCode,
    MiniKafkaError,
    ProtocolError,
    RequestTimedOutError,
    UnsupportedVersionError,
)
from clients.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from clients.protocol.message_types import ApiVersionsRequest, ApiVersionsResponse
from clients.protocol.registry import APIS
from clients.protocol.sasl_exchange import SaslCredentials, SaslRequest, sasl_login

_INT32_MAX = (1 << 31) - 1

# The body our ApiVersions requests carry (the versions that have these fields use them).
_SOFTWARE: ApiVersionsRequest = {"client_software_name": "minikafka",
                                 "client_software_version": "0.1.0"}


@dataclass(slots=True)
class InFlightRequest:
    correlation_id: int
    api_key: ApiKey
    api_version: int
    deadline_ms: int  # on the channel's clock
    context: Any = None
    node_id: int = -1


@dataclass(slots=True)
class ClientResponse:
    """A response body, or the error that replaced it (timeout, connection loss, bad frame)."""

    request: InFlightRequest
    body: dict[str, Any] | None = None
    error: MiniKafkaError | None = None


class ProtocolViolation(ProtocolError):
    """A frame broke the protocol; ``completed`` holds the responses decoded before it,
    ``cause`` the error the frame raised (e.g. a FrameTooLargeError)."""

    def __init__(self, message: str, completed: list[ClientResponse],
                 cause: ProtocolError | None = None) -> None:
        super().__init__(message)
        self.completed = completed
        self.cause = cause


class RequestChannel:
    """Correlation, framing and deadlines of one connection (see the module docstring)."""

    def __init__(self, now_ms: Callable[[], int], *, client_id: str | None = None,
                 node_id: int = -1, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.now_ms = now_ms  # the clock deadlines are on
        self.client_id = client_id
        self.node_id = node_id
        self.max_frame_bytes = max_frame_bytes
        self._decoder = FrameDecoder(max_frame_bytes)
        self._in_flight: deque[InFlightRequest] = deque()
        self._next_correlation_id = 0

    @property
    def in_flight(self) -> deque[InFlightRequest]:
        """The requests awaiting a response, oldest first (read-only by convention)."""
        return self._in_flight

    @property
    def bytes_to_frame_end(self) -> int:
        """The bytes that complete the frame being received (4 between frames)."""
        return self._decoder.bytes_to_frame_end

    def send_request(self, api_key: int, api_version: int, body: Mapping[str, Any], *,
                     timeout_ms: int, expect_response: bool = True, context: Any = None,
                     correlation_id: int | None = None,
                     ) -> tuple[InFlightRequest | None, list[Any]]:
        """The request's in-flight record (None without a response) and its buffers.

        ``correlation_id`` given (the handshake's own numbering): used as it is, the
        channel's sequence does not move.  Raises ProtocolError / MessageTooLargeError
        when the body cannot be encoded (the channel is untouched: no correlation id is
        used up, nothing is in flight).
        """
        cid = self._next_correlation_id if correlation_id is None else correlation_id
        buffers = encode_request(api_key, api_version, cid, self.client_id, body,
                                 max_frame_bytes=self.max_frame_bytes)
        if correlation_id is None:
            self._next_correlation_id = 0 if cid == _INT32_MAX else cid + 1
        if not expect_response:
            return None, buffers
        request = InFlightRequest(cid, ApiKey(api_key), api_version,
                                  self.now_ms() + timeout_ms, context, self.node_id)
        self._in_flight.append(request)
        return request, buffers

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[ClientResponse]:
        """The responses completed by ``data``, in order (ProtocolViolation: see above)."""
        out: list[ClientResponse] = []
        try:
            for frame in self._decoder.feed(data):
                out.append(self._complete(frame))
        except ProtocolError as e:
            raise ProtocolViolation(e.message, out, e) from None
        return out

    def _complete(self, frame: memoryview) -> ClientResponse:
        if not self._in_flight:
            raise ProtocolError("response received with no request in flight")
        request = self._in_flight[0]
        if request.api_key == ApiKey.API_VERSIONS:
            response = _decode_api_versions(frame, request.api_version)
        else:
            response = decode_response(frame, request.api_key, request.api_version)
        if response.correlation_id != request.correlation_id:
            raise ProtocolError(
                f"correlation id {response.correlation_id} does not match the oldest "
                f"request in flight ({request.correlation_id})")
        self._in_flight.popleft()
        return ClientResponse(request, response.body)

    def expired(self) -> list[InFlightRequest]:
        """The in-flight requests whose deadline is now or past, oldest first."""
        if not self._in_flight:
            return []
        now = self.now_ms()
        return [r for r in self._in_flight if r.deadline_ms <= now]

    def next_deadline_ms(self) -> int | None:
        return min((r.deadline_ms for r in self._in_flight), default=None)

    def reset(self, error: MiniKafkaError) -> list[ClientResponse]:
        """Forget the stream (a new connection follows): every in-flight request comes
        back failed with ``error``; buffered partial frames are dropped."""
        failed = [ClientResponse(r, None, error) for r in self._in_flight]
        self._in_flight.clear()
        self._decoder = FrameDecoder(self.max_frame_bytes)
        return failed


def negotiated_version(api_key: int, theirs: tuple[int, int] | None, node_id: int = -1) -> int:
    """The highest version of ``api_key`` that we and the broker (``theirs``: its
    (min, max), None if it does not serve the API) both serve; UnsupportedVersionError
    when there is none."""
    ours = APIS[api_key]
    if theirs is None:
        raise UnsupportedVersionError(f"node {node_id} does not serve {ours.name}")
    version = min(ours.max_version, theirs[1])
    if version < max(ours.min_version, theirs[0]):
        raise UnsupportedVersionError(
            f"{ours.name}: we serve v{ours.min_version}-{ours.max_version}, node "
            f"{node_id} v{theirs[0]}-{theirs[1]}")
    return version


def api_versions_request() -> tuple[int, ApiVersionsRequest]:
    """The first ApiVersions request: (our highest version, body)."""
    return APIS[ApiKey.API_VERSIONS].max_version, _SOFTWARE.copy()


def _decode_api_versions(frame: bytes | bytearray | memoryview, version: int) -> Response:
    """An ApiVersions answer to a request at ``version``: Kafka's UNSUPPORTED_VERSION
    fallback answer is always v0, whatever we asked."""
    try:
        return decode_response(frame, ApiKey.API_VERSIONS, version)
    except ProtocolError:
        return decode_response(frame, ApiKey.API_VERSIONS, 0)


def api_versions_answer(frame: bytes | bytearray | memoryview, version: int, node_id: int = -1,
                        ) -> dict[int, tuple[int, int]] | tuple[int, ApiVersionsRequest]:
    """Read the ApiVersions answer to a request at ``version``: the broker's (min, max)
    per API key, or, after Kafka's UNSUPPORTED_VERSION fallback, the request to retry
    with (version, body).  Raises UnsupportedVersionError when no ApiVersions version is
    common, MiniKafkaError for any other error code."""
    answer = cast(ApiVersionsResponse, _decode_api_versions(frame, version).body)
    return _read_api_versions(answer, node_id)


def _read_api_versions(answer: ApiVersionsResponse, node_id: int,
                       ) -> dict[int, tuple[int, int]] | tuple[int, ApiVersionsRequest]:
    versions = {e["api_key"]: (e["min_version"], e["max_version"]) for e in answer["api_keys"]}
    if answer["error_code"] == 0:
        return versions
    if answer["error_code"] != ErrorCode.UNSUPPORTED_VERSION:
        raise MiniKafkaError("ApiVersions failed", ErrorCode(answer["error_code"]))
    ours = APIS[ApiKey.API_VERSIONS]
    theirs = versions.get(ApiKey.API_VERSIONS, (0, 0))
    retry = min(ours.max_version, theirs[1])
    if retry < max(ours.min_version, theirs[0]):
        raise UnsupportedVersionError(
            f"node {node_id}: no ApiVersions version in common with the broker")
    return retry, _SOFTWARE.copy()


class Handshake:
    """The connect-time exchange of one connection, sans I/O (see the module docstring):
    ApiVersions with Kafka's fallback, then the SASL login when ``login`` is given.

    :attr:`api_versions` holds the broker's (min, max) per API key once learned;
    :attr:`done` turns True when the connection may carry other requests.  Raises
    UnsupportedVersionError (no ApiVersions version in common), AuthenticationError (a
    refused login), ProtocolError (a frame that breaks the protocol) from
    :meth:`receive_data`.
    """

    _MAX_VERSION_ROUNDS = 2  # our highest version, then the broker's

    def __init__(self, channel: RequestChannel, *, timeout_ms: int,
                 login: SaslCredentials | None = None) -> None:
        self._channel = channel
        self._timeout_ms = timeout_ms  # per step of the exchange
        self._login = login
        self._steps: Generator[SaslRequest, dict[str, Any], None] | None = None
        self._next_correlation_id = 0
        self._version_rounds = 0
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.done = False

    def start(self) -> list[Any]:
        """The buffers of the first request (ApiVersions at our highest version)."""
        return self._send(ApiKey.API_VERSIONS, *api_versions_request())

    def bytes_wanted(self) -> int:
        """The most bytes to read next: no more than the answer being received."""
        return self._channel.bytes_to_frame_end

    def remaining_ms(self) -> int:
        """Time left for the step under way, on the channel's clock (0: it expired)."""
        deadline = self._channel.next_deadline_ms()
        return 0 if deadline is None else max(0, deadline - self._channel.now_ms())

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Any]:
        """Feed received bytes; the buffers of the next request to send ([] while the
        answer is incomplete, or once :attr:`done`)."""
        try:
            responses = self._channel.receive_data(data)
        except ProtocolViolation as e:
            raise (e.cause or e) from None
        out: list[Any] = []
        for response in responses:  # one request is in flight at a time: one answer
            assert response.body is not None
            out = self._answered(response.request, response.body)
        return out

    def timed_out(self) -> RequestTimedOutError:
        """The error of the step that did not finish within ``timeout_ms``."""
        waiting = self._channel.in_flight
        step = waiting[0].api_key.name if waiting else "handshake"
        return RequestTimedOutError(
            f"node {self._channel.node_id}: {step} not answered within {self._timeout_ms} ms")

    def closed_error(self) -> AuthenticationError | None:
        """What the broker closing the connection now means: a refused login while
        logging in (not retriable), else None (a network failure: the caller's)."""
        waiting = self._channel.in_flight
        if self._steps is None or not waiting:
            return None
        return AuthenticationError(
            f"the broker closed the connection during {waiting[0].api_key.name}")

    def _answered(self, request: InFlightRequest, body: dict[str, Any]) -> list[Any]:
        if request.api_key == ApiKey.API_VERSIONS:
            answer = _read_api_versions(cast(ApiVersionsResponse, body), self._channel.node_id)
            if isinstance(answer, tuple):
                if self._version_rounds >= self._MAX_VERSION_ROUNDS:
                    raise UnsupportedVersionError(f"node {self._channel.node_id}: no "
                                                  "ApiVersions version in common with the broker")
                return self._send(ApiKey.API_VERSIONS, *answer)
            self.api_versions = answer
            if self._login is None:
                self.done = True
                return []
            self._steps = sasl_login(self._login, answer)
            return self._send(*next(self._steps))
        assert self._steps is not None
        try:
            return self._send(*self._steps.send(body))
        except StopIteration:
            self.done = True
            return []

    def _send(self, api_key: ApiKey, version: int, body: Mapping[str, Any]) -> list[Any]:
        if api_key == ApiKey.API_VERSIONS:
            self._version_rounds += 1
        cid = self._next_correlation_id
        self._next_correlation_id += 1
        _, buffers = self._channel.send_request(api_key, version, body,
                                                timeout_ms=self._timeout_ms,
                                                correlation_id=cid)
        return buffers
