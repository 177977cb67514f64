"""One client connection's protocol state, sans I/O: framing, correlation ids, request
deadlines and ApiVersions negotiation.

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
  with Kafka's fallback (an UNSUPPORTED_VERSION answer names the versions to retry with).

Costs: a send is the compiled encode of header and body; receiving is O(bytes) (frames
wholly inside one chunk are not copied, see :class:`~clients.protocol.framing.
FrameDecoder`); at most ``max_frame_bytes`` + 4 bytes are buffered.

Thread-safety: none; a channel belongs to the one thread or event loop of its connection.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response, encode_request
from clients.protocol.errors import (
    ErrorCode,
    MiniKafkaError,
    ProtocolError,
    UnsupportedVersionError,
)
from clients.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from clients.protocol.registry import APIS

_INT32_MAX = (1 << 31) - 1

# The body our ApiVersions requests carry (the versions that have these fields use them).
_SOFTWARE = {"client_software_name": "minikafka", "client_software_version": "0.1.0"}


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
    """A frame broke the protocol; ``completed`` holds the responses decoded before it."""

    def __init__(self, message: str, completed: list[ClientResponse]) -> None:
        super().__init__(message)
        self.completed = completed


class RequestChannel:
    """Correlation, framing and deadlines of one connection (see the module docstring)."""

    def __init__(self, now_ms: Callable[[], int], *, client_id: str | None = None,
                 node_id: int = -1, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._now_ms = now_ms
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

    def send_request(self, api_key: int, api_version: int, body: dict[str, Any], *,
                     timeout_ms: int, expect_response: bool = True,
                     context: Any = None) -> tuple[InFlightRequest | None, list[Any]]:
        """The request's in-flight record (None without a response) and its buffers.

        Raises ProtocolError / MessageTooLargeError when the body cannot be encoded (the
        channel is untouched: no correlation id is used up, nothing is in flight).
        """
        cid = self._next_correlation_id
        buffers = encode_request(api_key, api_version, cid, self.client_id, body,
                                 max_frame_bytes=self.max_frame_bytes)
        self._next_correlation_id = 0 if cid == _INT32_MAX else cid + 1
        if not expect_response:
            return None, buffers
        request = InFlightRequest(cid, ApiKey(api_key), api_version,
                                  self._now_ms() + timeout_ms, context, self.node_id)
        self._in_flight.append(request)
        return request, buffers

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[ClientResponse]:
        """The responses completed by ``data``, in order (ProtocolViolation: see above)."""
        out: list[ClientResponse] = []
        try:
            for frame in self._decoder.feed(data):
                out.append(self._complete(frame))
        except ProtocolError as e:
            raise ProtocolViolation(e.message, out) from None
        return out

    def _complete(self, frame: memoryview) -> ClientResponse:
        if not self._in_flight:
            raise ProtocolError("response received with no request in flight")
        request = self._in_flight[0]
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
        now = self._now_ms()
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


def api_versions_request() -> tuple[int, dict[str, Any]]:
    """The first ApiVersions request: (our highest version, body)."""
    return APIS[ApiKey.API_VERSIONS].max_version, dict(_SOFTWARE)


def api_versions_answer(frame: bytes | bytearray | memoryview, version: int, node_id: int = -1,
                        ) -> dict[int, tuple[int, int]] | tuple[int, dict[str, Any]]:
    """Read the ApiVersions answer to a request at ``version``: the broker's (min, max)
    per API key, or, after Kafka's UNSUPPORTED_VERSION fallback, the request to retry
    with (version, body).  Raises UnsupportedVersionError when no ApiVersions version is
    common, MiniKafkaError for any other error code."""
    try:
        answer = decode_response(frame, ApiKey.API_VERSIONS, version).body
    except ProtocolError:
        # Kafka's fallback answer is always v0, whatever we asked
        answer = decode_response(frame, ApiKey.API_VERSIONS, 0).body
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
    return retry, dict(_SOFTWARE)
