"""Writing responses in a network process: the prefix bytes, then ``sendfile`` regions.

On ``RESPONSE [conn_id, handle, prefix_len, regions_len]`` the loop
(:class:`broker.network.process.NetworkProcess`) checks the connection is waiting for an
answer, then calls :meth:`ResponseWriter.start`: attach the response buffer, parse the
msgpack array of segments stored after its first ``prefix_len`` bytes (format and file
identity rules: :mod:`broker.network.regions`).  :meth:`ResponseWriter.write` writes the
``prefix_len`` bytes (without segments), or the segments in order: ``[n]`` the next
``n`` buffer bytes, a region with ``os.sendfile``; it frees the buffer once all is
written.
On a TLS connection (:mod:`broker.network.tls`) regions are read and encrypted instead
of ``sendfile``'d, and a response is done only when its last TLS records are out.
A socket that would block makes ``write`` return False (the loop watches EPOLLOUT);
writing resumes where it stopped (``resp_sent``, ``region_index``/``region_pos``/
``region_left``).

A region that cannot be sent as promised raises :class:`CloseConnection`.  Closing is
the only correct answer at that point: the frame length and the per-partition record
lengths are already promised (the prefix may be on the wire), and sending other bytes
would hand the client garbage; the client sees a retriable network error, refreshes
metadata and fetches again from the same offset.

Contract: the writer owns the write half of a :class:`Connection` (``resp``,
``resp_view``, ``resp_sent``, ``regions``, ``region*``; the loop queues answers in
``answers`` and starts them one after the other), the response buffer from
:meth:`~ResponseWriter.start` until it is written or :meth:`~ResponseWriter.drop` frees
it (the loop closing the connection), and the :class:`FileCache` of segment descriptors
(closed by :meth:`~ResponseWriter.close`).  It never touches epoll, the channel or the
connection's mute state; it logs as ``network <index>``.

Costs per response: one ``send`` per socket-buffer-full of prefix, one ``sendfile`` per
region (more if the socket blocks), one msgpack decode of the regions, 2 pool lock round
trips (attach, free), no copy of record bytes in Python.
Thread-safety: none; the one thread of its network process.  This code only touches
response buffers handed to this process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from broker.network.channel.codec import Handle
from broker.network.connection import CloseConnection, Connection
from broker.network.regions import FileCache, RegionError, parse_regions
from broker.network.tls import TlsTransport
from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import StaleBufferHandleError
from clients.memory.handles import Buffer

log = logging.getLogger("broker.network")


class ResponseWriter:
    """Writes answers of the main process to connections (contract: module docstring).

    ``free`` gives a buffer back to the pool (the loop's, which logs a stale handle
    instead of raising).
    """

    def __init__(
        self,
        pool: BufferPool,
        *,
        index: int,
        file_cache_size: int,
        free: Callable[[Buffer | Handle], None],
    ) -> None:
        self.pool = pool
        self.index = index
        self.files = FileCache(file_cache_size)
        self._free = free

    def start(self, conn: Connection, handle: Handle, prefix_len: int, regions_len: int) -> None:
        """Take the response ``handle`` for ``conn`` (not writing one now); raises
        :class:`CloseConnection` for a stale handle or malformed regions."""
        try:
            buf = self.pool.attach_buffer(handle)
        except StaleBufferHandleError as exc:
            log.error("network %d: stale response handle: %s", self.index, exc)
            raise CloseConnection("stale response handle") from None
        conn.resp, conn.resp_sent = buf, 0
        conn.resp_view = buf.memory[:prefix_len]
        if regions_len:
            try:
                conn.regions = parse_regions(buf.memory[prefix_len : prefix_len + regions_len],
                                             prefix_len)
            except RegionError as exc:
                log.error("network %d: connection %d: %s", self.index, conn.conn_id, exc)
                raise CloseConnection("bad regions") from None
            conn.region_index = 0
            conn.inline_left = 0

    def write(self, conn: Connection) -> bool:
        """Write what the socket takes; True once the whole response is sent (its buffer
        freed), False when the socket would block.  Raises :class:`CloseConnection`."""
        view = conn.resp_view
        assert view is not None
        try:
            if conn.regions is None:
                sent, total = conn.resp_sent, len(view)
                while sent < total:
                    sent += conn.sock.send(view[sent:] if sent else view)
                    conn.resp_sent = sent
            else:
                self._send_segments(conn, view)
            if isinstance(conn.sock, TlsTransport) and not conn.sock.flush():
                return False  # the last TLS records wait for the socket: EPOLLOUT
        except BlockingIOError:
            return False
        except RegionError as exc:
            log.warning("network %d: connection %d: %s; closing it", self.index, conn.conn_id, exc)
            raise CloseConnection("region not sendable") from None
        except OSError as exc:
            raise CloseConnection(f"send failed: {exc}") from None
        buf = conn.resp
        conn.resp = conn.resp_view = None
        conn.regions = None
        if buf is not None:
            self._free(buf)
        return True

    def _send_segments(self, conn: Connection, view: memoryview) -> None:
        regions = conn.regions
        assert regions is not None
        out_fd, files = conn.fd, self.files
        tls = conn.sock if isinstance(conn.sock, TlsTransport) else None
        while True:
            while conn.inline_left:
                sent = conn.resp_sent
                n = conn.sock.send(view[sent : sent + conn.inline_left])
                conn.resp_sent = sent + n
                conn.inline_left -= n
            entry = conn.region
            if entry is None:
                if conn.region_index >= len(regions):
                    return
                region = regions[conn.region_index]
                conn.region_index += 1
                if len(region) == 1:
                    conn.inline_left = region[0]
                    continue
                path, position, length = region[0], region[1], region[2]
                if length == 0:
                    continue
                entry = files.acquire(path, (region[3], region[4]) if len(region) == 5 else None)
                conn.region = entry
                if position + length > entry.size:
                    raise RegionError(
                        f"region [{path!r}, {position}, {length}] beyond file size {entry.size}"
                    )
                conn.region_pos, conn.region_left = position, length
            while conn.region_left:
                if tls is not None:  # records must be encrypted: read and send
                    n = tls.sendfile(entry.fd, conn.region_pos, conn.region_left)
                else:
                    n = os.sendfile(out_fd, entry.fd, conn.region_pos, conn.region_left)
                if n == 0:
                    raise RegionError(f"file {entry.path!r} shorter than promised (truncated?)")
                conn.region_pos += n
                conn.region_left -= n
            conn.region = None
            files.release(entry)

    def drop(self, conn: Connection) -> None:
        """Free the response of a connection being closed (and the answers queued behind
        it, ``conn.answers``) and release its open file."""
        if conn.resp is not None:
            conn.resp_view = None
            self._free(conn.resp)
            conn.resp = None
        for answer in conn.answers:
            if answer[0] is not None:
                self._free(answer[0])
        conn.answers.clear()
        if conn.region is not None:
            self.files.release(conn.region)
            conn.region = None

    def close(self) -> None:
        """Close every cached descriptor (the process is shutting down)."""
        self.files.close()
