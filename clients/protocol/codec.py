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

``body`` is a msgpack map declared per API and version in
:mod:`clients.protocol.registry`.  A Records field is encoded in the body as its byte
length; its bytes go to the tail.  Decoding replaces each length with a memoryview slice
of the tail: record batches are never copied, and their ``.obj`` is the buffer the frame
was read into.

Splitting the byte stream into frames (the length field, :class:`FrameDecoder`,
:func:`read_frame`, :func:`send_buffers`) lives in :mod:`clients.protocol.framing`
; this module encodes and decodes what a frame carries.

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
pure and re-entrant.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.errors import MessageTooLargeError, ProtocolError, UnsupportedVersionError
from clients.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    MIN_FRAME_BYTES,
)
from clients.protocol.registry import APIS
from clients.protocol.wire_types import FieldError, Tail, describe, records_length

__all__ = [
    "MAX_CLIENT_ID_LENGTH",
    "RecordsRef",
    "Request",
    "RequestHeader",
    "Response",
    "ResponseHeader",
    "UnknownApiKeyError",
    "decode_request",
    "decode_request_body",
    "decode_request_header",
    "decode_response",
    "decode_response_body",
    "decode_response_header",
    "encode_request",
    "encode_request_bytes",
    "encode_response",
    "encode_response_bytes",
    "encode_response_prefix",
]

MAX_CLIENT_ID_LENGTH = 32767
_INT32_MAX = (1 << 31) - 1

_PREFIX = struct.Struct(">iI")
_META_LENGTH = struct.Struct(">I")


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
