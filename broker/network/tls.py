"""TLS on the broker's port: the server context, and a non-blocking transport a network
process reads and writes like a socket.

A broker with ``ssl_certfile`` set speaks TLS on its one port (Kafka's ``SSL`` listener;
``SASL_SSL`` when ``client_auth_required`` asks for a SASL login inside it):
:func:`server_context` builds the context (TLS 1.2+, the certificate chain and key, and
with ``ssl_client_auth`` = ``requested``/``required`` the CA that client certificates
must chain to).  :func:`client_context` is the other end, for the broker's own
connections to other brokers' ports (replica fetches): it verifies the peer against
``ssl_cafile`` and presents the broker's certificate, so a cluster whose brokers require
client certificates still replicates.

:class:`TlsTransport` wraps an accepted, non-blocking socket in an ``ssl.SSLObject``
over two memory BIOs (the sans-IO shape: the TLS state machine never touches the
socket; this class moves bytes between it and the socket).  It offers what
:class:`~broker.network.request_reader.RequestReader` and
:class:`~broker.network.response_writer.ResponseWriter` call on a plain socket -
``recv_into``, ``send``, ``fileno``, ``close`` - with the same contract: a call that
would block raises ``BlockingIOError``; ``recv_into`` returns 0 at the end of the stream
(a close_notify or the peer closing); a TLS failure (bad handshake, bad record) raises
``ssl.SSLError`` (an ``OSError``, so the reader and writer close the connection).  Plus
what TLS adds:

- :meth:`TlsTransport.sendfile` replaces ``os.sendfile``: record bytes must be encrypted,
  so the region is read (``os.pread``, at most :data:`FILE_CHUNK_BYTES` a call) and sent.
  Zero-copy is lost on TLS connections, as in Kafka.
- ``pending_output``: ciphertext not yet taken by the socket.  ``send`` accepts new
  plaintext only when none is left, so at most one chunk (:data:`SEND_CHUNK_BYTES`
  plaintext) is ever buffered per connection; the writer finishes a response only once
  :meth:`TlsTransport.flush` says it is all out.
- ``buffered_input``: bytes that arrived and are decrypted or decryptable without a
  ``recv`` - epoll does not report them, so the loop reads them itself.

Handshake, session tickets and alerts are produced while reading; they are written at
once, and the little that the kernel cannot take then (it can: these are a few KiB and
the peer waits for them) goes out with the next write or read.

Costs: one ``recv`` of up to :data:`RECV_BYTES` per decrypt round, the copies TLS
needs (ciphertext in, plaintext out), no copy of a request beyond the decrypt into its
buffer.  Thread-safety: none; the one thread of a network process.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
from pathlib import Path
from typing import cast

from clients.protocol.errors import InvalidConfigError

__all__ = ["CLIENT_AUTH_MODES", "FILE_CHUNK_BYTES", "RECV_BYTES", "SEND_CHUNK_BYTES",
           "TlsTransport", "client_context", "server_context"]

CLIENT_AUTH_MODES = ("none", "requested", "required")
RECV_BYTES = 64 * 1024
SEND_CHUNK_BYTES = 256 * 1024
FILE_CHUNK_BYTES = 256 * 1024


def _readable(name: str, path: str) -> None:
    if not Path(path).is_file() or not os.access(path, os.R_OK):
        raise InvalidConfigError(f"{name}: {path!r} is not a readable file")


def server_context(certfile: str, keyfile: str, cafile: str = "",
                   client_auth: str = "none") -> ssl.SSLContext:
    """The broker port's TLS context; a bad file or setting -> ``InvalidConfigError``
    naming it."""
    if client_auth not in CLIENT_AUTH_MODES:
        raise InvalidConfigError(
            f"ssl_client_auth must be one of {', '.join(CLIENT_AUTH_MODES)}, got {client_auth!r}")
    if client_auth != "none" and not cafile:
        raise InvalidConfigError(f"ssl_client_auth={client_auth} needs ssl_cafile (the CA "
                                 "client certificates must chain to)")
    _readable("ssl_certfile", certfile)
    if keyfile:
        _readable("ssl_keyfile", keyfile)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile, keyfile or None)
        if cafile:
            _readable("ssl_cafile", cafile)
            context.load_verify_locations(cafile)
    except ssl.SSLError as exc:
        raise InvalidConfigError(f"ssl_certfile/ssl_keyfile/ssl_cafile: {exc}") from None
    context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                           "required": ssl.CERT_REQUIRED}[client_auth]
    return context


def client_context(cafile: str, certfile: str = "", keyfile: str = "") -> ssl.SSLContext:
    """A broker's context for connecting to another broker's TLS port: the peer must
    chain to ``cafile`` (the system's CAs when empty) and match its host name or IP;
    ``certfile`` is presented when the peer asks for a client certificate."""
    try:
        context = ssl.create_default_context(cafile=cafile or None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if certfile:
            context.load_cert_chain(certfile, keyfile or None)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfigError(f"inter-broker TLS (ssl_cafile/ssl_certfile): {exc}") from None
    return context


class TlsTransport:
    """A server-side TLS connection over a non-blocking socket (module docstring)."""

    __slots__ = ("_in", "_out", "_pending", "_ready", "_tls", "sock")

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        self.sock = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_side=True)
        self._pending = b""  # ciphertext the socket has not taken yet
        self._ready = False  # handshake done

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    @property
    def pending_output(self) -> bool:
        return bool(self._pending) or self._out.pending > 0

    @property
    def buffered_input(self) -> bool:
        return self._tls.pending() > 0 or self._in.pending > 0

    def flush(self) -> bool:
        """Write buffered ciphertext; True when none is left."""
        if self._out.pending:
            self._pending += self._out.read()
        while self._pending:
            try:
                n = self.sock.send(self._pending)
            except BlockingIOError:
                return False
            self._pending = self._pending[n:]
        return True

    def recv_into(self, buffer: memoryview | bytearray, nbytes: int = 0) -> int:
        """Decrypt into ``buffer``; 0 at the end of the stream; ``BlockingIOError`` when
        nothing is decryptable and the socket has nothing either."""
        size = nbytes or len(buffer)
        while True:
            try:
                if not self._ready:
                    self._tls.do_handshake()
                    self._ready = True
                n = cast(int, self._tls.read(size, buffer))  # type: ignore[arg-type]
                if self._out.pending:  # e.g. session tickets after the handshake
                    self.flush()
                return n
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return 0
            except ssl.SSLError:
                with contextlib.suppress(OSError):
                    self.flush()  # the alert saying why (e.g. no client certificate)
                raise
            self.flush()  # handshake flights go out before we wait for the peer
            data = self.sock.recv(RECV_BYTES)  # BlockingIOError propagates
            if not data:
                self._in.write_eof()
            else:
                self._in.write(data)

    def send(self, data: memoryview | bytes) -> int:
        """Encrypt up to :data:`SEND_CHUNK_BYTES` of ``data`` once earlier ciphertext is
        out; returns the plaintext bytes taken.  ``BlockingIOError`` while the socket
        still holds back earlier ciphertext."""
        if not self.flush():
            raise BlockingIOError("earlier TLS records not yet sent")
        chunk = data[:SEND_CHUNK_BYTES]
        try:
            n = self._tls.write(chunk)
        except ssl.SSLWantReadError:  # the handshake is not done: it needs the peer
            self.flush()
            raise BlockingIOError("TLS handshake in progress") from None
        self.flush()
        return n

    def sendfile(self, in_fd: int, offset: int, count: int) -> int:
        """``os.sendfile`` through TLS: read up to :data:`FILE_CHUNK_BYTES` of the file
        at ``offset`` and send it; returns the file bytes taken (0: the file ends)."""
        if not self.flush():
            raise BlockingIOError("earlier TLS records not yet sent")
        data = os.pread(in_fd, min(count, FILE_CHUNK_BYTES), offset)
        if not data:
            return 0
        taken = 0
        while taken < len(data):
            try:
                taken += self.send(memoryview(data)[taken:])
            except BlockingIOError:
                if taken == 0:
                    raise
                break
        return taken
