"""Kafka request and response frames: headers, bodies, and the errors of bad ones.

A frame is a 4-byte big-endian length, then (the *frame* passed to ``decode_*``)::

    request  = header + body        response = header + body

    request header v1 | api_key int16 | api_version int16 | correlation_id int32 |
                      | client_id: int16 length (-1 = null) + UTF-8                |
    request header v2 | v1, then tagged fields (uvarint count, ...)                 |
    response header v0| correlation_id int32                                          |
    response header v1| correlation_id int32, then tagged fields                      |

Which header version an API version uses, and the body's layout, come from its
declaration (:class:`~clients.protocol.api_keys.Api`, registry in
:mod:`clients.protocol.registry`).  The client id stays a classic (non-compact) string
even in header v2, as in Kafka.

Encoding returns a list of buffers for ``socket.sendmsg``: the first holds the length
field, header and body bytes; a large ``RECORDS`` value (record batches, or a file region
a broker sends with ``sendfile``: any object with ``__len__``) is its own buffer between
byte chunks, never copied.  Decoding takes the frame as a ``memoryview`` and returns
``RECORDS`` values as zero-copy slices of it (their ``.obj`` is the frame's buffer).

Errors: a frame too short for its header, a bad client id, a body that does not match
its schema, or trailing bytes raise :class:`ProtocolError` with the API, version and
field path (``Produce v9 request: topics[0].partitions[1].records: records of 900 bytes
runs past the end``).  An API key we do not declare raises :class:`UnknownApiKeyError`,
a version we do not serve :class:`UnsupportedVersionError`; both only after the header
is read, so a broker knows the correlation id to answer ApiVersions with (Kafka's v0
fallback).  Encoding a frame over ``max_frame_bytes`` raises
:class:`MessageTooLargeError`; encoding a bad body raises :class:`ProtocolError` with
the path.

Costs: O(fields) per frame in straight-line compiled code (see
:mod:`clients.protocol.compiler`), zero per record byte on decode and on encode of large
records.  Thread/process safety: functions are pure and re-entrant.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clients.protocol import reference
from clients.protocol.api_keys import Api
from clients.protocol.compiler import read_uvarint, records_length
from clients.protocol.errors import MessageTooLargeError, ProtocolError, UnsupportedVersionError
from clients.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from clients.protocol.registry import APIS

MAX_CLIENT_ID_LENGTH = 32767
REQUEST_HEADER_BYTES = 10  # v1 with a null client id: the shortest request header

_REQUEST_HEAD = struct.Struct(">ihhih")  # length, api_key, api_version, correlation_id, id len
_REQUEST_FIXED = struct.Struct(">hhih")
_RESPONSE_HEAD = struct.Struct(">ii")  # length, correlation_id
_INT32 = struct.Struct(">i")
_INT32_MAX = (1 << 31) - 1


class UnknownApiKeyError(UnsupportedVersionError):
    """The request's API key is not one we declare (answered as UNSUPPORTED_VERSION)."""

    def __init__(self, api_key: int) -> None:
        self.api_key = api_key
        super().__init__(f"unknown api key {api_key}")


@dataclass(slots=True)
class RequestHeader:
    """A request whose header is read; :func:`decode_request_body` reads the body.

    ``body_offset`` is -1 when the API or version is not served (the header's tagged
    fields, if any, were not read).
    """

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    frame: memoryview
    body_offset: int


@dataclass(slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: dict[str, Any]


@dataclass(slots=True)
class ResponseHeader:
    correlation_id: int
    frame: memoryview


@dataclass(slots=True)
class Response:
    correlation_id: int
    body: dict[str, Any]


def api_for(api_key: int, api_version: int) -> Api:
    """The declaration serving ``api_version`` of ``api_key``, or the precise error."""
    api = APIS.get(api_key)
    if api is None:
        raise UnknownApiKeyError(api_key)
    if not api.supports(api_version):
        raise UnsupportedVersionError(
            f"{api.name} v{api_version} is not supported "
            f"(versions {api.min_version}-{api.max_version})"
        )
    return api


def _view(frame: bytes | bytearray | memoryview) -> memoryview:
    view = frame if type(frame) is memoryview else memoryview(frame)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _skip_tagged_fields(view: memoryview, pos: int, kind: str) -> int:
    try:
        count, pos = read_uvarint(view, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(view, pos)
            size, pos = read_uvarint(view, pos)
            pos += size
    except (IndexError, ValueError):
        raise ProtocolError(f"{kind} header: truncated tagged fields") from None
    if pos > len(view):
        raise ProtocolError(f"{kind} header: tagged fields run past the end of the frame")
    return pos


# ---------------------------------------------------------------- encoding


def _encode_body(api: Api, version: int, is_response: bool, body: Any, out: bytearray,
                 kind: str) -> list[Any]:
    parts: list[Any] = []
    try:
        out = api.encoder(version, is_response)(body, out, parts)
    except Exception as exc:  # any failure of the fast path: find the precise reason
        st = api.response if is_response else api.request
        try:
            reference.encode(st, version, api.is_flexible(version), body)
        except reference.FieldError as e:
            raise ProtocolError(f"{api.name} v{version} {kind}: {e}") from None
        raise ProtocolError(
            f"{api.name} v{version} {kind}: cannot encode: {type(exc).__name__}: {exc}"
        ) from None
    parts.append(out)
    return parts


def _finish(parts: list[Any], api: Api, version: int, kind: str, max_frame_bytes: int) -> None:
    length = sum(records_length(p) for p in parts) - 4
    if length > max_frame_bytes or length > _INT32_MAX:
        raise MessageTooLargeError(
            f"{api.name} v{version} {kind} frame of {length} bytes exceeds "
            f"max_frame_bytes {max_frame_bytes}"
        )
    _INT32.pack_into(parts[0], 0, length)


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: Mapping[str, Any],
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> list[Any]:
    """A request frame as buffers for ``sendmsg`` (length field first)."""
    api = api_for(api_key, api_version)
    if type(correlation_id) is not int or not -(1 << 31) <= correlation_id <= _INT32_MAX:
        raise ProtocolError(
            f"correlation_id: expected int32, got {reference.describe(correlation_id)}")
    if client_id is None:
        out = bytearray(_REQUEST_HEAD.pack(0, api.key, api_version, correlation_id, -1))
    else:
        if type(client_id) is not str:
            raise ProtocolError(f"client_id: expected str, got {reference.describe(client_id)}")
        raw = client_id.encode()
        if len(raw) > MAX_CLIENT_ID_LENGTH:
            raise ProtocolError(f"client_id of {len(raw)} bytes exceeds {MAX_CLIENT_ID_LENGTH}")
        out = bytearray(_REQUEST_HEAD.pack(0, api.key, api_version, correlation_id, len(raw)))
        out += raw
    if api.is_flexible(api_version):
        out += b"\x00"  # no tagged fields in the header
    parts = _encode_body(api, api_version, False, body, out, "request")
    _finish(parts, api, api_version, "request", max_frame_bytes)
    return parts


def encode_request_bytes(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: Mapping[str, Any],
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> bytes:
    """Like :func:`encode_request`, joined into one bytes object (copies the records)."""
    return b"".join(encode_request(api_key, api_version, correlation_id, client_id, body,
                                   max_frame_bytes=max_frame_bytes))


def encode_response(
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: dict[str, Any],
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> list[Any]:
    """A response frame as buffers (length field first).

    ``RECORDS`` values pass through as their own buffers when large or not bytes-like
    (a broker's file regions: objects with ``__len__``, sent with ``sendfile``).
    """
    api = api_for(api_key, api_version)
    if type(correlation_id) is not int or not -(1 << 31) <= correlation_id <= _INT32_MAX:
        raise ProtocolError(
            f"correlation_id: expected int32, got {reference.describe(correlation_id)}")
    out = bytearray(_RESPONSE_HEAD.pack(0, correlation_id))
    if api.response_header_version(api_version) == 1:
        out += b"\x00"
    parts = _encode_body(api, api_version, True, body, out, "response")
    _finish(parts, api, api_version, "response", max_frame_bytes)
    return parts


def encode_response_bytes(
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: dict[str, Any],
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> bytes:
    """Like :func:`encode_response`, joined (every ``RECORDS`` value must be bytes-like)."""
    return b"".join(encode_response(api_key, api_version, correlation_id, body,
                                    max_frame_bytes=max_frame_bytes))


# ---------------------------------------------------------------- decoding


def _decode_body(api: Api, version: int, is_response: bool, view: memoryview, pos: int,
                 kind: str) -> dict[str, Any]:
    end = len(view)
    try:
        body, pos = api.decoder(version, is_response)(view, pos, end)
    except Exception as exc:  # any failure of the fast path: find the precise reason
        st = api.response if is_response else api.request
        try:
            reference.decode(st, version, api.is_flexible(version), view, pos, end)
        except reference.FieldError as e:
            raise ProtocolError(f"{api.name} v{version} {kind}: {e}") from None
        raise ProtocolError(
            f"{api.name} v{version} {kind}: cannot decode: {type(exc).__name__}: {exc}"
        ) from None
    if pos != end and is_response:
        raise ProtocolError(f"{api.name} v{version} {kind}: {end - pos} bytes after the body")
    # A request may carry bytes after its body: Kafka's broker ignores them, and
    # librdkafka 2.16 sends a Metadata v12 "all topics" request with 3 bytes of padding.
    return body


def decode_request_header(frame: bytes | bytearray | memoryview) -> RequestHeader:
    """Read a request's header; the body is left for :func:`decode_request_body`."""
    view = _view(frame)
    if len(view) < REQUEST_HEADER_BYTES:
        raise ProtocolError(f"request frame of {len(view)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, id_length = _REQUEST_FIXED.unpack_from(view)
    pos = REQUEST_HEADER_BYTES
    client_id: str | None = None
    if id_length >= 0:
        if pos + id_length > len(view):
            raise ProtocolError(f"request header: client_id of {id_length} bytes runs past the end")
        try:
            client_id = str(view[pos : pos + id_length], "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("request header: client_id is not UTF-8") from None
        pos += id_length
    elif id_length != -1:
        raise ProtocolError(f"request header: client_id length {id_length}")
    api = APIS.get(api_key)
    if api is None or not api.supports(api_version):
        return RequestHeader(api_key, api_version, correlation_id, client_id, view, -1)
    if api.request_header_version(api_version) == 2:
        pos = _skip_tagged_fields(view, pos, "request")
    return RequestHeader(api_key, api_version, correlation_id, client_id, view, pos)


def decode_request_body(header: RequestHeader) -> Request:
    """Decode the body of a request whose header was read."""
    api = api_for(header.api_key, header.api_version)
    body = _decode_body(api, header.api_version, False, header.frame, header.body_offset,
                        "request")
    return Request(api.key, header.api_version, header.correlation_id, header.client_id, body)


def decode_request(frame: bytes | bytearray | memoryview) -> Request:
    """Header and body in one step (the broker's path: one lookup, no header object)."""
    view = frame if type(frame) is memoryview and frame.format == "B" else _view(frame)
    if len(view) >= REQUEST_HEADER_BYTES:
        api_key, api_version, correlation_id, id_length = _REQUEST_FIXED.unpack_from(view)
        entry = _REQUEST_ENTRIES[(api_key, api_version)]
        end = REQUEST_HEADER_BYTES + max(id_length, 0)
        if entry is not None and id_length >= -1 and end <= len(view):
            api, decoder, header_v2 = entry
            client_id: str | None = None
            if id_length >= 0:
                try:
                    client_id = str(view[REQUEST_HEADER_BYTES:end], "utf-8")
                except UnicodeDecodeError:
                    raise ProtocolError("request header: client_id is not UTF-8") from None
            pos = end
            if header_v2:
                if pos < len(view) and view[pos] == 0:
                    pos += 1
                else:
                    pos = _skip_tagged_fields(view, pos, "request")
            try:
                body, pos = decoder(view, pos, len(view))
            except Exception:  # the slow path below gives the precise reason
                pass
            else:
                if pos == len(view):
                    return Request(api.key, api_version, correlation_id, client_id, body)
    return decode_request_body(decode_request_header(frame))


class _RequestEntries(dict[tuple[int, int], "tuple[Api, Any, bool] | None"]):
    """(api key, version) -> (declaration, body decoder, header v2?) or None when not
    served; filled on first use."""

    def __missing__(self, key: tuple[int, int]) -> tuple[Api, Any, bool] | None:
        api = APIS.get(key[0])
        if api is None or not api.supports(key[1]):
            return None
        entry = (api, api.decoder(key[1], False), api.request_header_version(key[1]) == 2)
        self[key] = entry
        return entry


_REQUEST_ENTRIES = _RequestEntries()


def decode_response_header(frame: bytes | bytearray | memoryview) -> ResponseHeader:
    """Read a response's correlation id (its tagged fields are read with the body)."""
    view = _view(frame)
    if len(view) < 4:
        raise ProtocolError(f"response frame of {len(view)} bytes has no correlation id")
    return ResponseHeader(_INT32.unpack_from(view)[0], view)


def decode_response_body(header: ResponseHeader, api_key: int, api_version: int) -> dict[str, Any]:
    """Decode a response body for the request's API and version."""
    api = api_for(api_key, api_version)
    pos = 4
    if api.response_header_version(api_version) == 1:
        pos = _skip_tagged_fields(header.frame, pos, "response")
    return _decode_body(api, api_version, True, header.frame, pos, "response")


def decode_response(frame: bytes | bytearray | memoryview, api_key: int,
                    api_version: int) -> Response:
    header = decode_response_header(frame)
    return Response(header.correlation_id, decode_response_body(header, api_key, api_version))
