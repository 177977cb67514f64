"""Writing responses in a network process: the prefix bytes, then ``sendfile`` regions.

On ``RESPONSE [conn_id, handle, prefix_len, regions_len]`` (a mixin of
:class:`broker.network.process.NetworkProcess`): attach the response buffer, write its
first ``prefix_len`` bytes, then ``os.sendfile`` each region of the msgpack array stored
after them (format and file identity rules: :mod:`broker.network.regions`).  A region
that cannot be sent as promised closes the connection.  Closing is the only correct
answer at that point: the frame length and the per-partition record lengths are
already promised (the prefix may be on the wire), and sending other bytes would hand
the client garbage; the client sees a retriable network error, refreshes metadata and
fetches again from the same offset.  Then free the buffer, unmute.  A socket that
would block leaves the connection watching EPOLLOUT; writing resumes where it stopped
(``resp_sent``, ``region_index``/``region_pos``/``region_left``).

Costs per response: one ``send`` per socket-buffer-full of prefix, one ``sendfile`` per
region (more if the socket blocks), one msgpack decode of the regions, 2 pool lock round
trips (attach, free), no copy of record bytes in Python.
Thread-safety: none; the one thread of its network process.  This code only touches
response buffers handed to this process.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from broker.network.connection import EPOLLOUT, _Conn
from broker.network.regions import FileCache, RegionError, _parse_regions
from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import StaleBufferHandleError
from clients.memory.handles import Buffer

log = logging.getLogger("broker.network")


class NetworkResponseWriter:
    """Response writing of :class:`~broker.network.process.NetworkProcess`."""

    if TYPE_CHECKING:  # provided by NetworkProcess
        pool: BufferPool
        index: int
        files: FileCache

        def _set_mask(self, conn: _Conn, mask: int) -> None: ...
        def _close(self, conn: _Conn, reason: str, *, notify: bool = True) -> None: ...
        def _free(self, buffer: Buffer | tuple[int, int, int]) -> None: ...
        def _answered(self, conn: _Conn) -> bool: ...
        def _unmute(self, conn: _Conn) -> None: ...

    # writing responses --------------------------------------------------------------
    def _on_response(
        self, conn: _Conn | None, handle: tuple[int, int, int], prefix_len: int, regions_len: int
    ) -> None:
        if conn is None or conn.resp is not None or not self._answered(conn):
            if conn is not None and conn.resp is not None:
                self._close(conn, "second response while one is being written")
            self._free(handle)  # connection gone: nobody else will free it
            return
        try:
            buf = self.pool.attach_buffer(handle)
        except StaleBufferHandleError as exc:
            log.error("network %d: stale response handle: %s", self.index, exc)
            self._close(conn, "stale response handle")
            return
        conn.resp, conn.resp_sent = buf, 0
        conn.resp_view = buf.memory[:prefix_len]
        if regions_len:
            try:
                conn.regions = _parse_regions(buf.memory[prefix_len : prefix_len + regions_len])
            except RegionError as exc:
                log.error("network %d: connection %d: %s", self.index, conn.conn_id, exc)
                self._close(conn, "bad regions")
                return
            conn.region_index = 0
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        view = conn.resp_view
        assert view is not None
        try:
            sent, total = conn.resp_sent, len(view)
            while sent < total:
                sent += conn.sock.send(view[sent:] if sent else view)
                conn.resp_sent = sent
            if conn.regions is not None:
                self._send_regions(conn)
        except BlockingIOError:
            self._set_mask(conn, EPOLLOUT)
            return
        except RegionError as exc:
            log.warning("network %d: connection %d: %s; closing it", self.index, conn.conn_id, exc)
            self._close(conn, "region not sendable")
            return
        except OSError as exc:
            self._close(conn, f"send failed: {exc}")
            return
        buf = conn.resp
        conn.resp = conn.resp_view = None
        conn.regions = None
        if buf is not None:
            self._free(buf)
        self._unmute(conn)

    def _send_regions(self, conn: _Conn) -> None:
        regions = conn.regions
        assert regions is not None
        out_fd, files = conn.fd, self.files
        while True:
            entry = conn.region
            if entry is None:
                if conn.region_index >= len(regions):
                    return
                region = regions[conn.region_index]
                path, position, length = region[0], region[1], region[2]
                conn.region_index += 1
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
                n = os.sendfile(out_fd, entry.fd, conn.region_pos, conn.region_left)
                if n == 0:
                    raise RegionError(f"file {entry.path!r} shorter than promised (truncated?)")
                conn.region_pos += n
                conn.region_left -= n
            conn.region = None
            files.release(entry)
