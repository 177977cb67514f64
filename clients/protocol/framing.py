"""Kafka's framing: a byte stream split into length-prefixed frames.

Every request and response travels as one frame (integers big-endian)::

    | offset | size         | field        | meaning                                    |
    |--------|--------------|--------------|--------------------------------------------|
    | 0      | 4            | frame_length | int32, bytes after this field;             |
    |        |              |              | 4 <= frame_length <= max_frame_bytes       |
    | 4      | frame_length | frame        | header and body                            |
    |        |              |              | (layout in :mod:`clients.protocol.codec`)  |

This module reads and checks the length field before any buffer is allocated for the
frame (:func:`frame_length_of`), splits a non-blocking stream incrementally
(:class:`FrameDecoder`), reads one frame from a blocking socket (:func:`read_frame`) and
sends a list of buffers with ``sendmsg`` (:func:`send_buffers`).  A *frame* here is the
``frame_length`` bytes after the length field.  Both take an ``ssl.SSLSocket`` too: it
has no ``sendmsg``, so its buffers go out with ``sendall`` in chunks of up to 256 KiB,
small buffers joined first (one copy) so that a frame's small pieces do not each become
a TLS record of their own; a buffer of 256 KiB or more is sent without a copy.

Errors: a length below the minimum, a connection closed inside a frame or any other
framing fault raises :class:`ProtocolError`; a length above ``max_frame_bytes`` raises
its subclass :class:`FrameTooLargeError` (the connection should be closed).

Costs: O(1) per frame to check its length; a frame lying whole in a ``bytes`` chunk is
a zero-copy slice, any other frame is copied once.  At most one partial frame
(<= ``max_frame_bytes`` + 4 bytes) is buffered per decoder.  Thread/process safety:
the functions are re-entrant (the socket belongs to the caller); a
:class:`FrameDecoder` belongs to one connection (one thread).
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Iterable
from typing import Any

from clients.protocol.errors import ProtocolError

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
MIN_FRAME_BYTES = 4  # a response header v0 (the correlation id) and an empty body
_INT32_MAX = (1 << 31) - 1
_IOV_MAX = 1024
_TLS_CHUNK = 256 * 1024  # bytes per sendall on an SSLSocket (small buffers joined)

_LENGTH = struct.Struct(">i")


class FrameTooLargeError(ProtocolError):
    """A frame length above ``max_frame_bytes`` (the connection should be closed)."""


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

    @property
    def bytes_to_frame_end(self) -> int:
        """The bytes that complete the frame under way (its length field first: 4
        between frames), so a reader can take no byte past it."""
        if self._frame is None:
            return 4 - self._header_filled
        return len(self._frame) - self._filled

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
    """Blocking ``sendmsg`` of all buffers (partial sends resumed); returns bytes sent.

    An ``ssl.SSLSocket`` (no ``sendmsg``) gets ``sendall`` of coalesced chunks instead.
    """
    if isinstance(sock, ssl.SSLSocket):
        return _send_coalesced(sock, buffers)
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


def _send_coalesced(sock: ssl.SSLSocket, buffers: Iterable[Any]) -> int:
    """``sendall`` of the buffers joined into chunks of at most ``_TLS_CHUNK`` bytes; a
    buffer of ``_TLS_CHUNK`` bytes or more goes alone, uncopied."""
    total = 0
    chunk = bytearray()
    for b in buffers:
        view = memoryview(b).cast("B")
        n = view.nbytes
        if not n:
            continue
        if len(chunk) + n > _TLS_CHUNK:
            if chunk:
                sock.sendall(chunk)
                total += len(chunk)
                chunk = bytearray()
            if n >= _TLS_CHUNK:
                sock.sendall(view)
                total += n
                continue
        chunk += view
    if chunk:
        sock.sendall(chunk)
        total += len(chunk)
    return total
