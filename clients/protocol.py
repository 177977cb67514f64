"""Native wire protocol: length-prefixed frames carrying msgpack meta and raw record bytes.

Frame layout (integers big-endian)::

    | offset       | size            | field        | meaning                                  |
    |--------------|-----------------|--------------|------------------------------------------|
    | 0            | 4               | frame_length | int32, bytes after this field;           |
    |              |                 |              | 5 <= frame_length <= max_frame_bytes     |
    | 4            | 4               | meta_length  | uint32, 1 <= meta_length <= frame_length-4|
    | 8            | meta_length     | meta         | msgpack (see below)                      |
    | 8+meta_length| frame_length-4  | tail         | raw Records bytes, concatenated in the   |
    |              |   -meta_length  |              | depth-first order of the body's fields   |

    request meta  = [api_key, api_version, correlation_id, client_id, body]
    response meta = [correlation_id, body]

``body`` is a msgpack map declared per API and version in :mod:`clients.api`.  A Records
field is encoded in the body as its byte length; its bytes go to the tail.  Decoding
replaces each length with a memoryview slice of the tail: record batches are never
copied, and their ``.obj`` is the buffer the frame was read into.

In this module a *frame* passed to a ``decode_*`` function is the ``frame_length``
bytes after the length field (what :class:`FrameDecoder` and :func:`read_frame` return);
``encode_*`` functions produce complete frames, length field included, as a list of
buffers for ``socket.sendmsg`` (the record bytes are passed through, not joined).

Errors: a bad length, bad meta, bad shape or bad field raises :class:`ProtocolError`
(oversize: its subclass :class:`FrameTooLargeError`); an API key we do not know raises
:class:`UnknownApiKeyError` and a version we do not support
:class:`UnsupportedVersionError`, both only after the header decoded, so the broker
knows the correlation id to answer with UNSUPPORTED_VERSION.  Messages name the API,
version and field path, e.g. ``Produce v0 request: topics[0].partitions[1].index:
expected int32, got str``.  Encoding a frame over ``max_frame_bytes`` raises
:class:`MessageTooLargeError`.

Costs: O(frame meta) per frame: one msgpack pack/unpack (C) plus one Python closure call
per body value; zero per record byte on decode.  Thread/process safety: functions are
pure and re-entrant; a :class:`FrameDecoder` belongs to one connection (one thread).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from clients.api import APIS, Api, ApiKey
from clients.errors import MessageTooLargeError, ProtocolError, UnsupportedVersionError
from clients.schema import FieldError, Tail, describe, records_length

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
MIN_FRAME_BYTES = 5  # meta_length field + at least one byte of msgpack
MAX_CLIENT_ID_LENGTH = 32767
_INT32_MAX = (1 << 31) - 1
_IOV_MAX = 1024

_LENGTH = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")
_META_LENGTH = struct.Struct(">I")


class FrameTooLargeError(ProtocolError):
    """A frame length above ``max_frame_bytes`` (the connection should be closed)."""


class UnknownApiKeyError(UnsupportedVersionError):
    """The request's API key is not one we declare (answered as UNSUPPORTED_VERSION)."""

    def __init__(self, api_key: int) -> None:
        self.api_key = api_key
        super().__init__(f"unknown api key {api_key}")


@dataclass(frozen=True, slots=True)
class RecordsRef:
    """A Records value known only by length (e.g. file regions sent with sendfile)."""

    length: int


@dataclass(slots=True)
class RequestHeader:
    """A request whose header is validated; the body is checked by decode_request_body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    raw_body: Any  # unvalidated msgpack body; decode_request_body validates it in place
    tail: memoryview


@dataclass(slots=True)
class Request:
    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    body: dict[str, Any]


@dataclass(slots=True)
class ResponseHeader:
    correlation_id: int
    raw_body: Any
    tail: memoryview


@dataclass(slots=True)
class Response:
    correlation_id: int
    body: dict[str, Any]


# ---------------------------------------------------------------- framing


def check_frame_length(length: int, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> int:
    """Validate a frame length read from the wire; return it."""
    if length < MIN_FRAME_BYTES:
        raise ProtocolError(f"frame length {length} is below the minimum of {MIN_FRAME_BYTES}")
    if length > max_frame_bytes:
        raise FrameTooLargeError(f"frame length {length} exceeds max_frame_bytes {max_frame_bytes}")
    return length


def frame_length_of(
    header: bytes | bytearray | memoryview, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> int:
    """Decode and validate the 4-byte length field, before allocating the frame buffer."""
    if len(header) != 4:
        raise ProtocolError(f"frame length field needs 4 bytes, got {len(header)}")
    return check_frame_length(_LENGTH.unpack(header)[0], max_frame_bytes)


class FrameDecoder:
    """Incremental frame splitter for one connection: ``feed(data) -> complete frames``.

    Buffers at most one partial frame (<= max_frame_bytes + 4 bytes), allocated when its
    length field has arrived and been validated.  A frame lying whole inside a ``bytes``
    chunk is returned as a slice of that chunk (no copy); other frames are copied once
    into their own bytearray.  After a ProtocolError the decoder stays failed: the stream
    has lost its framing and the connection must be closed.
    """

    __slots__ = ("_error", "_filled", "_frame", "_header", "_header_filled", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not MIN_FRAME_BYTES <= max_frame_bytes <= _INT32_MAX:
            raise ValueError(f"max_frame_bytes must be in {MIN_FRAME_BYTES}..{_INT32_MAX}")
        self.max_frame_bytes = max_frame_bytes
        self._header = bytearray(4)
        self._header_filled = 0
        self._frame: bytearray | None = None
        self._filled = 0
        self._error: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the incomplete frame held so far (length field included)."""
        return self._header_filled + (4 + self._filled if self._frame is not None else 0)

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        if self._error is not None:
            raise ProtocolError(f"frame decoder already failed: {self._error.message}")
        try:
            return self._feed(data)
        except ProtocolError as e:
            self._error = e
            raise

    def _feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        aliasable = type(data) is bytes
        frames: list[memoryview] = []
        pos, end = 0, len(view)
        while pos < end:
            frame = self._frame
            if frame is None:
                if self._header_filled == 0 and end - pos >= 4:
                    n = frame_length_of(view[pos : pos + 4], self.max_frame_bytes)
                    pos += 4
                    if aliasable and end - pos >= n:
                        frames.append(view[pos : pos + n])
                        pos += n
                        continue
                else:
                    take = min(4 - self._header_filled, end - pos)
                    self._header[self._header_filled : self._header_filled + take] = view[
                        pos : pos + take
                    ]
                    self._header_filled += take
                    pos += take
                    if self._header_filled < 4:
                        break
                    self._header_filled = 0
                    n = frame_length_of(self._header, self.max_frame_bytes)
                frame = self._frame = bytearray(n)
                self._filled = 0
            take = min(len(frame) - self._filled, end - pos)
            frame[self._filled : self._filled + take] = view[pos : pos + take]
            self._filled += take
            pos += take
            if self._filled == len(frame):
                frames.append(memoryview(frame))
                self._frame = None
        return frames


def _recv_exactly(sock: socket.socket, view: memoryview) -> int:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            break
        got += n
    return got


def read_frame(
    sock: socket.socket, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> memoryview | None:
    """Blocking read of one frame; None on a clean EOF between frames."""
    header = bytearray(4)
    got = _recv_exactly(sock, memoryview(header))
    if got == 0:
        return None
    if got < 4:
        raise ProtocolError(f"connection closed inside a frame length ({got} of 4 bytes)")
    length = frame_length_of(header, max_frame_bytes)
    buf = bytearray(length)
    got = _recv_exactly(sock, memoryview(buf))
    if got < length:
        raise ProtocolError(f"connection closed inside a frame ({got} of {length} bytes)")
    return memoryview(buf)


def send_buffers(sock: socket.socket, buffers: Iterable[Any]) -> int:
    """Blocking ``sendmsg`` of all buffers (partial sends resumed); returns bytes sent."""
    pending = [memoryview(b).cast("B") for b in buffers]
    pending = [b for b in pending if b.nbytes]
    total = 0
    while pending:
        sent = sock.sendmsg(pending[:_IOV_MAX])
        total += sent
        done = 0
        while done < len(pending) and sent >= pending[done].nbytes:
            sent -= pending[done].nbytes
            done += 1
        del pending[:done]
        if sent:
            pending[0] = pending[0][sent:]
    return total


# ---------------------------------------------------------------- encoding


def _api_for(api_key: int, api_version: int) -> Api:
    api = APIS.get(api_key)
    if api is None:
        raise UnknownApiKeyError(api_key)
    if not api.supports(api_version):
        raise UnsupportedVersionError(
            f"{api.name} v{api_version} is not supported "
            f"(versions {api.min_version}-{api.max_version})"
        )
    return api


def _field_error(api: Api, version: int, kind: str, e: FieldError) -> ProtocolError:
    return ProtocolError(f"{api.name} v{version} {kind}: {e.where()}: {e.reason}")


def _encode(
    head: list[Any], api: Api, version: int, is_response: bool, body: Any, max_frame_bytes: int
) -> tuple[bytes, list[Any]]:
    kind = "response" if is_response else "request"
    records: list[Any] = []
    try:
        head.append(api.codec(version, is_response, True)(body, records))
    except FieldError as e:
        raise _field_error(api, version, kind, e) from None
    try:
        meta = msgpack.packb(head, use_bin_type=True)
    except (ValueError, TypeError, OverflowError) as e:  # UnicodeEncodeError is a ValueError
        raise ProtocolError(f"{api.name} v{version} {kind}: cannot encode: {e}") from None
    tail_length = sum(records_length(r) for r in records) if records else 0
    frame_length = 4 + len(meta) + tail_length
    if frame_length > max_frame_bytes:
        raise MessageTooLargeError(
            f"{api.name} v{version} {kind} frame of {frame_length} bytes exceeds "
            f"max_frame_bytes {max_frame_bytes}"
        )
    return _PREFIX.pack(frame_length, len(meta)) + meta, records


def _check_correlation_id(correlation_id: Any) -> None:
    if type(correlation_id) is not int or not -(1 << 31) <= correlation_id <= _INT32_MAX:
        raise ProtocolError(f"correlation_id: expected int32, got {describe(correlation_id)}")


def _as_buffers(prefix: bytes, records: list[Any]) -> list[Any]:
    for r in records:
        if type(r) not in (bytes, bytearray, memoryview):
            raise ProtocolError(
                f"Records value {type(r).__name__} has no bytes; "
                "use encode_response_prefix to send it yourself"
            )
    return [prefix, *records]


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: dict[str, Any],
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> list[Any]:
    """Encode a request frame as buffers for ``sendmsg`` (prefix, then record bytes)."""
    api = _api_for(api_key, api_version)
    _check_correlation_id(correlation_id)
    if client_id is not None and (
        type(client_id) is not str or len(client_id) > MAX_CLIENT_ID_LENGTH
    ):
        raise ProtocolError(f"client_id: expected nullable str, got {describe(client_id)}")
    head = [int(api.key), api_version, correlation_id, client_id]
    return _as_buffers(*_encode(head, api, api_version, False, body, max_frame_bytes))


def encode_request_bytes(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: dict[str, Any],
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> bytes:
    """Like :func:`encode_request`, joined into one bytes object (copies the records)."""
    return b"".join(
        encode_request(
            api_key, api_version, correlation_id, client_id, body, max_frame_bytes=max_frame_bytes
        )
    )


def encode_response_prefix(
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: dict[str, Any],
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> tuple[bytes, list[Any]]:
    """Encode a response whose Records may be length-only (:class:`RecordsRef`, file regions).

    Returns ``(prefix, records)``: send ``prefix`` (length fields + meta), then each value
    of ``records`` in order, exactly ``records_length(r)`` bytes each (e.g. with
    ``os.sendfile``).
    """
    api = _api_for(api_key, api_version)
    _check_correlation_id(correlation_id)
    return _encode([correlation_id], api, api_version, True, body, max_frame_bytes)


def encode_response(
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: dict[str, Any],
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> list[Any]:
    """Encode a response frame as buffers for ``sendmsg`` (Records must be bytes-like)."""
    return _as_buffers(
        *encode_response_prefix(
            api_key, api_version, correlation_id, body, max_frame_bytes=max_frame_bytes
        )
    )


def encode_response_bytes(
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: dict[str, Any],
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> bytes:
    return b"".join(
        encode_response(api_key, api_version, correlation_id, body, max_frame_bytes=max_frame_bytes)
    )


# ---------------------------------------------------------------- decoding


def _split(frame: bytes | bytearray | memoryview, kind: str) -> tuple[Any, memoryview]:
    view = frame if type(frame) is memoryview else memoryview(frame)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    size = len(view)
    if size < MIN_FRAME_BYTES:
        raise ProtocolError(
            f"{kind} frame of {size} bytes is below the minimum of {MIN_FRAME_BYTES}"
        )
    meta_length = _META_LENGTH.unpack_from(view)[0]
    if not 1 <= meta_length <= size - 4:
        raise ProtocolError(
            f"{kind} meta_length {meta_length} outside 1..{size - 4} (frame of {size} bytes)"
        )
    try:
        meta = msgpack.unpackb(view[4 : 4 + meta_length], raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises ValueError, ExtraData, StackError, Unicode...
        raise ProtocolError(f"{kind} meta is not valid msgpack: {type(e).__name__}: {e}") from None
    return meta, view[4 + meta_length :]


def _decode_body(api: Api, version: int, is_response: bool, raw: Any, tail: memoryview) -> Any:
    cursor = Tail(tail)
    try:
        body = api.codec(version, is_response, False)(raw, cursor)
    except FieldError as e:
        raise _field_error(api, version, "response" if is_response else "request", e) from None
    if cursor.pos != len(tail):
        kind = "response" if is_response else "request"
        raise ProtocolError(
            f"{api.name} v{version} {kind}: Records fields take {cursor.pos} "
            f"bytes but the tail has {len(tail)}"
        )
    return body


def decode_request_header(frame: bytes | bytearray | memoryview) -> RequestHeader:
    """Decode the meta and check the header fields; the body is left unvalidated."""
    meta, tail = _split(frame, "request")
    if type(meta) is not list or len(meta) != 5:
        raise ProtocolError(
            "request meta must be a 5-element array [api_key, api_version, "
            f"correlation_id, client_id, body], got {describe(meta)}"
            + (f" of {len(meta)}" if type(meta) is list else "")
        )
    api_key, api_version, correlation_id, client_id, body = meta
    if type(api_key) is not int or not 0 <= api_key <= 32767:
        raise ProtocolError(
            f"request header: api_key: expected int16 >= 0, got {describe(api_key)}"
        )
    if type(api_version) is not int or not -32768 <= api_version <= 32767:
        raise ProtocolError(
            f"request header: api_version: expected int16, got {describe(api_version)}"
        )
    _check_correlation_id(correlation_id)
    if client_id is not None and (
        type(client_id) is not str or len(client_id) > MAX_CLIENT_ID_LENGTH
    ):
        raise ProtocolError(
            f"request header: client_id: expected nullable str, got {describe(client_id)}"
        )
    return RequestHeader(api_key, api_version, correlation_id, client_id, body, tail)


def decode_request_body(header: RequestHeader) -> Request:
    """Validate the body of a decoded header (call once per header: it works in place)."""
    api = _api_for(header.api_key, header.api_version)
    body = _decode_body(api, header.api_version, False, header.raw_body, header.tail)
    return Request(api.key, header.api_version, header.correlation_id, header.client_id, body)


def decode_request(frame: bytes | bytearray | memoryview) -> Request:
    return decode_request_body(decode_request_header(frame))


def decode_response_header(frame: bytes | bytearray | memoryview) -> ResponseHeader:
    """Decode a response's meta far enough to read its correlation id."""
    meta, tail = _split(frame, "response")
    if type(meta) is not list or len(meta) != 2:
        raise ProtocolError(
            "response meta must be a 2-element array [correlation_id, body], "
            f"got {describe(meta)}" + (f" of {len(meta)}" if type(meta) is list else "")
        )
    _check_correlation_id(meta[0])
    return ResponseHeader(meta[0], meta[1], tail)


def decode_response_body(header: ResponseHeader, api_key: int, api_version: int) -> dict[str, Any]:
    """Validate a response body against the request's API and version (once per header)."""
    api = _api_for(api_key, api_version)
    body: dict[str, Any] = _decode_body(api, api_version, True, header.raw_body, header.tail)
    return body


def decode_response(
    frame: bytes | bytearray | memoryview, api_key: int, api_version: int
) -> Response:
    header = decode_response_header(frame)
    return Response(header.correlation_id, decode_response_body(header, api_key, api_version))
