"""Network process: TCP connections <-> pool buffers <-> descriptor channel to the main process.

Run as ``python -m broker.network --host H --port P --pool-name NAME --channel-fd FD
--max-request-bytes N --max-connections N --index I`` (see :func:`main`); started and
restarted by :class:`broker.network_supervisor.NetworkProcessSupervisor`.

One epoll loop (level-triggered, ``select.epoll``), no threads. Per connection:

1. read the 4-byte big-endian frame length; outside ``MIN_FRAME_BYTES..max_request_bytes``
   -> close the connection at once (nothing allocated);
2. allocate a pool buffer with ``max_block_ms=0`` (``poolable_size`` when the frame fits
   one slot: the free-list fast path). No memory (or ``max_queued_requests`` requests
   already with the main process, or the pool would drop below
   ``request_headroom_bytes``, which is kept for responses) -> the connection is parked
   in a FIFO and not read (backpressure); parked connections are retried after every
   response and every ``memory_retry_ms`` tick;
3. ``recv_into`` the buffer until the frame is complete, send
   ``REQUEST [conn_id, handle, frame_len]`` (see :mod:`broker.request_channel`) and
   mute the connection (lazily: it is taken out of epoll only if data arrives meanwhile);
4. on ``RESPONSE`` write the prefix bytes, then ``os.sendfile`` each ``[path, position,
   length, st_dev, st_ino]`` region (``storage.log.FileRegion.wire``; the legacy
   ``[path, position, length]`` skips the identity check).  Files are opened through a
   bounded LRU of descriptors, re-opened when the path now names another file.  A
   region is sent only from a descriptor of the very file the main process read
   (same device and inode): a cached descriptor of that file still serves it even if
   the path was since replaced or unlinked (segment bytes below the log end offset
   never change in place), and the stale entry then leaves the cache; otherwise a
   missing, too short or *replaced* file (compaction swapped a rewritten ``B.log`` in,
   retention deleted it, the topic was re-created) closes the connection.  Closing is
   the only correct answer at that point: the frame length and the per-partition
   record lengths are already promised (the prefix may be on the wire), and sending
   other bytes would hand the client garbage; the client sees a retriable network
   error, refreshes metadata and fetches again from the same offset.  Then free the
   buffer, unmute.

The channel reaching EOF (main process gone) or SIGTERM/SIGINT ends the loop: every
connection is closed, buffers this process holds are freed, exit status 0.

Costs per request: 2-3 ``recv`` syscalls, 1 ``send`` on the channel, one msgpack
encode/decode each way, 3 pool lock round trips (allocate, attach, free), no copy of the
frame or response in Python. Memory: O(connections) small objects; frames live in the
pool. Process-safety: this process only touches buffers it allocated and has not handed
over, or response buffers handed to it.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import select
import signal
import socket
import struct
import sys
from collections import OrderedDict, deque
from typing import Any

import msgpack

from broker.request_channel import (
    CLOSE,
    CLOSED,
    NO_RESPONSE,
    REQUEST,
    RESPONSE,
    ChannelEndpoint,
    ChannelFullError,
    ChannelProtocolError,
    encode_ready,
)
from clients.buffer_pool import Buffer, BufferPool
from clients.buffer_pool_errors import BufferPoolError, StaleBufferHandleError
from clients.errors import InvalidConfigError
from clients.protocol import MIN_FRAME_BYTES

log = logging.getLogger("broker.network")

EPOLLIN, EPOLLOUT = select.EPOLLIN, select.EPOLLOUT
EPOLLHUP_ERR = select.EPOLLHUP | select.EPOLLERR
_LENGTH = struct.Struct(">i")
_MAX_ACCEPTS_PER_EVENT = 64


class RegionError(Exception):
    """A fetch region cannot be sent as promised (missing or short file, bad entry)."""


class _OpenFile:
    __slots__ = ("dev", "fd", "ino", "path", "refs", "size")

    def __init__(self, path: str, fd: int, st: os.stat_result) -> None:
        self.path, self.fd, self.refs = path, fd, 0
        self.dev, self.ino, self.size = st.st_dev, st.st_ino, st.st_size


class FileCache:
    """LRU of open read-only descriptors by path, at most ``capacity`` idle entries.

    ``acquire(path, identity)`` stats the path (one syscall) and reuses the cached
    descriptor only if it still names the same file (device + inode), so a deleted and
    re-created segment is never read through a stale descriptor.  With ``identity``
    (the ``(st_dev, st_ino)`` the region was read from) the returned descriptor is
    always of that file: a cached descriptor of it is used even when the path was
    replaced or removed meanwhile (and leaves the cache, so the old file's space is
    freed on release); a path that now names another file raises :class:`RegionError`.
    A path found missing or replaced drops its cached entry.  Entries in use by a
    connection are never closed; an entry replaced while in use is closed on its last
    ``release``.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise InvalidConfigError(f"file cache capacity must be positive, got {capacity}")
        self.capacity = capacity
        self._files: OrderedDict[str, _OpenFile] = OrderedDict()

    def __len__(self) -> int:
        return len(self._files)

    def acquire(self, path: str, identity: tuple[int, int] | None = None) -> _OpenFile:
        files = self._files
        entry = files.get(path)
        try:
            st: os.stat_result | None = os.stat(path)
            stat_error = ""
        except OSError as exc:
            st, stat_error = None, exc.strerror or str(exc)
        if entry is not None:
            current = st is not None and entry.ino == st.st_ino and entry.dev == st.st_dev
            if current or (entry.dev, entry.ino) == identity:
                entry.refs += 1
                if current:
                    assert st is not None
                    entry.size = st.st_size
                    files.move_to_end(path)
                else:  # the path moved on: serve this region, then let the file go
                    entry.size = os.fstat(entry.fd).st_size
                    del files[path]
                return self._checked(entry, identity)
            del files[path]
            self._close_if_idle(entry)
        if st is None:
            raise RegionError(f"cannot stat {path!r}: {stat_error}")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise RegionError(f"cannot open {path!r}: {exc.strerror}") from None
        entry = _OpenFile(path, fd, os.fstat(fd))
        entry.refs = 1
        files[path] = entry
        if len(files) > self.capacity:
            self._trim()
        return self._checked(entry, identity)

    def _checked(self, entry: _OpenFile, identity: tuple[int, int] | None) -> _OpenFile:
        if identity is None or (entry.dev, entry.ino) == identity:
            return entry
        self.release(entry)
        raise RegionError(
            f"{entry.path!r} is not the file the fetch read (device/inode {identity}, now "
            f"{(entry.dev, entry.ino)}): replaced by a compaction swap or a re-created topic"
        )

    def release(self, entry: _OpenFile) -> None:
        entry.refs -= 1
        if self._files.get(entry.path) is not entry:
            self._close_if_idle(entry)
        elif len(self._files) > self.capacity:
            self._trim()

    def _trim(self) -> None:
        files = self._files
        idle = [e for e in files.values() if e.refs == 0][: len(files) - self.capacity]
        for entry in idle:  # least recently used first
            del files[entry.path]
            os.close(entry.fd)
            entry.fd = -1

    @staticmethod
    def _close_if_idle(entry: _OpenFile) -> None:
        if entry.refs == 0 and entry.fd >= 0:
            os.close(entry.fd)
            entry.fd = -1

    def close(self) -> None:
        for entry in self._files.values():
            os.close(entry.fd)
            entry.fd = -1
        self._files.clear()


class _Conn:
    __slots__ = (
        "buffer",
        "closed",
        "conn_id",
        "fd",
        "filled",
        "frame_len",
        "header",
        "header_filled",
        "known",
        "mask",
        "muted",
        "region",
        "region_index",
        "region_left",
        "region_pos",
        "regions",
        "resp",
        "resp_sent",
        "resp_view",
        "sock",
    )

    def __init__(self, conn_id: int, sock: socket.socket) -> None:
        self.conn_id = conn_id
        self.sock = sock
        self.fd = sock.fileno()
        self.header = bytearray(4)
        self.header_filled = 0
        self.frame_len = 0  # 0: reading the length field
        self.filled = 0
        self.buffer: Buffer | None = None  # request being read (owned by this process)
        self.muted = False  # a request is with the main process
        self.known = False  # the main process has seen this connection
        self.mask = EPOLLIN
        self.closed = False
        self.resp: Buffer | None = None  # response being written
        self.resp_view: memoryview | None = None
        self.resp_sent = 0
        self.regions: list[Any] | None = None
        self.region_index = 0
        self.region: _OpenFile | None = None
        self.region_pos = 0
        self.region_left = 0


class NetworkProcess:
    """The event loop of one network process (see the module docstring)."""

    def __init__(
        self,
        *,
        listener: socket.socket,
        channel: ChannelEndpoint,
        pool: BufferPool,
        index: int,
        max_request_bytes: int,
        max_connections: int,
        max_queued_requests: int = 500,
        request_headroom_bytes: int = 0,
        file_cache_size: int = 128,
        memory_retry_ms: float = 2.0,
    ) -> None:
        for name, value in (
            ("max_request_bytes", max_request_bytes),
            ("max_connections", max_connections),
            ("max_queued_requests", max_queued_requests),
        ):
            if value <= 0:
                raise InvalidConfigError(f"{name} must be positive, got {value}")
        if not 0 <= request_headroom_bytes <= pool.total_bytes - max_request_bytes:
            raise InvalidConfigError(
                f"request_headroom_bytes={request_headroom_bytes} must be in 0.."
                f"{pool.total_bytes - max_request_bytes} (pool total_bytes={pool.total_bytes}, "
                f"max_request_bytes={max_request_bytes})"
            )
        self.listener, self.channel, self.pool, self.index = listener, channel, pool, index
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        self.max_queued_requests = max_queued_requests
        self.headroom = request_headroom_bytes
        self.retry_s = max(memory_retry_ms, 0.1) / 1000.0
        self.files = FileCache(file_cache_size)
        self.conns: dict[int, _Conn] = {}  # by fd
        self.by_id: dict[int, _Conn] = {}
        self.waiters: deque[_Conn] = deque()  # parked for memory / queue room, FIFO
        self.in_flight = 0  # requests handed over, not answered
        self.next_conn_id = 1
        self.stopping = False
        self.poolable = pool.poolable_size
        self.epoll = select.epoll()
        self._channel_mask = EPOLLIN
        self._accepting = True
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (listener, self._wake_r, self._wake_w):
            s.setblocking(False)
        self.epoll.register(listener.fileno(), EPOLLIN)
        self.epoll.register(channel.fileno(), EPOLLIN)
        self.epoll.register(self._wake_r.fileno(), EPOLLIN)

    # lifecycle -------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT end the loop cleanly (via a wakeup fd; handlers do nothing
        else, so no pool lock is ever interrupted half-way)."""
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def run(self) -> int:
        """Serve until SIGTERM or the channel closes; returns the exit status."""
        epoll, conns = self.epoll, self.conns
        listen_fd, chan_fd, wake_fd = (
            self.listener.fileno(),
            self.channel.fileno(),
            self._wake_r.fileno(),
        )
        try:
            while not self.stopping:
                events = epoll.poll(self.retry_s if self.waiters else -1)
                for fd, ev in events:
                    conn = conns.get(fd)
                    if conn is not None:
                        if ev & EPOLLOUT and conn.resp is not None:
                            self._write(conn)
                        elif ev & EPOLLIN and not conn.muted and conn.mask == EPOLLIN:
                            self._read(conn)
                        elif ev & EPOLLHUP_ERR:
                            self._close(conn, "hang-up")
                        elif ev & EPOLLIN and conn.mask != 0:
                            self._set_mask(conn, 0)  # lazy mute: data waits in the kernel
                    elif fd == chan_fd:
                        self._on_channel(ev)
                    elif fd == listen_fd:
                        self._accept()
                    elif fd == wake_fd:
                        self._drain_wakeup()
                if self.waiters:
                    self._retry_waiters()
                self.channel.flush_posted()  # this iteration's REQUEST/CLOSED: one packet
                self._update_channel_interest()
            return 0
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        for conn in list(self.conns.values()):
            self._close(conn, "shutdown", notify=False)
        self.files.close()
        for s in (self.listener, self._wake_r, self._wake_w):
            s.close()
        self.epoll.close()
        self.channel.close()

    def _drain_wakeup(self) -> None:
        try:
            while self._wake_r.recv(512):
                pass
        except BlockingIOError:
            pass

    # accept ------------------------------------------------------------------------
    def _accept(self) -> None:
        for _ in range(_MAX_ACCEPTS_PER_EVENT):
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # EMFILE, ECONNABORTED...
                log.warning("network %d: accept failed: %s", self.index, exc)
                return
            if len(self.conns) >= self.max_connections:
                sock.close()  # Kafka closes extra connections too
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(self.next_conn_id, sock)
            self.next_conn_id += 1
            self.conns[conn.fd] = conn
            self.by_id[conn.conn_id] = conn
            self.epoll.register(conn.fd, EPOLLIN)

    def _set_mask(self, conn: _Conn, mask: int) -> None:
        if conn.mask != mask:
            self.epoll.modify(conn.fd, mask)
            conn.mask = mask

    # reading requests -------------------------------------------------------------
    def _read(self, conn: _Conn) -> None:
        if conn.frame_len == 0:
            hf = conn.header_filled
            try:
                if hf == 0:
                    n = conn.sock.recv_into(conn.header)
                else:
                    n = conn.sock.recv_into(memoryview(conn.header)[hf:])
            except BlockingIOError:
                if conn.mask != EPOLLIN:
                    self._set_mask(conn, EPOLLIN)
                return
            except OSError as exc:
                self._close(conn, f"recv failed: {exc}")
                return
            if n == 0:
                self._close(conn, "client closed")
                return
            hf += n
            if hf < 4:
                conn.header_filled = hf
                return
            conn.header_filled = 0
            length = _LENGTH.unpack(conn.header)[0]
            if not MIN_FRAME_BYTES <= length <= self.max_request_bytes:
                self._close(
                    conn,
                    f"frame length {length} outside {MIN_FRAME_BYTES}..{self.max_request_bytes}",
                )
                return
            conn.frame_len = length
            if not self._allocate(conn):
                self._set_mask(conn, 0)
                self.waiters.append(conn)
                return
        self._read_body(conn)

    def _allocate(self, conn: _Conn) -> bool:
        """Give ``conn`` a request buffer now, or return False (never blocks)."""
        if self.in_flight >= self.max_queued_requests:
            return False
        length = conn.frame_len
        size = self.poolable if length <= self.poolable else length
        pool = self.pool
        if self.headroom and pool.available_memory() - size < self.headroom:
            return False
        try:
            conn.buffer = pool.allocate(size, 0)
        except BufferPoolError:
            return False
        conn.filled = 0
        return True

    def _retry_waiters(self) -> None:
        waiters = self.waiters
        while waiters:
            conn = waiters[0]
            if conn.closed:
                waiters.popleft()
                continue
            if not self._allocate(conn):
                return
            waiters.popleft()
            self._read_body(conn)  # watches EPOLLIN again only if the body is not all there

    def _read_body(self, conn: _Conn) -> None:
        buf = conn.buffer
        assert buf is not None
        view, length, recv_into = buf.memory, conn.frame_len, conn.sock.recv_into
        filled = conn.filled
        while filled < length:
            try:
                n = recv_into(view[filled:length])
            except BlockingIOError:
                conn.filled = filled
                if conn.mask != EPOLLIN:
                    self._set_mask(conn, EPOLLIN)
                return
            except OSError as exc:
                self._close(conn, f"recv failed: {exc}")
                return
            if n == 0:
                self._close(conn, "client closed mid-frame")
                return
            filled += n
        self._hand_over(conn, buf, length)

    def _hand_over(self, conn: _Conn, buf: Buffer, length: int) -> None:
        conn.buffer = None
        conn.frame_len = conn.filled = 0
        handle = (buf.slot, buf.size, buf.generation)
        buf.release()
        try:
            sent = self.channel.post((REQUEST, conn.conn_id, handle, length))
        except ChannelFullError as exc:
            log.error("network %d: %s; closing connection %d", self.index, exc, conn.conn_id)
            self._free(handle)
            self._close(conn, "channel full")
            return
        if not sent:  # main process gone: the loop ends on channel EOF
            self._free(handle)
            self.stopping = True
            return
        conn.muted = conn.known = True
        self.in_flight += 1

    # channel ------------------------------------------------------------------------
    def _on_channel(self, ev: int) -> None:
        channel = self.channel
        if ev & EPOLLOUT:
            channel.flush()
        if ev & (EPOLLIN | EPOLLHUP_ERR):
            try:
                messages = channel.recv_messages()
            except ChannelProtocolError as exc:
                log.error("network %d: bad message from the main process: %s", self.index, exc)
                self.stopping = True
                return
            by_id = self.by_id
            for msg in messages:
                kind = msg[0]
                conn = by_id.get(msg[1])
                if kind == RESPONSE:
                    self._on_response(conn, msg[2], msg[3], msg[4])
                elif conn is None:
                    continue
                elif kind == NO_RESPONSE:
                    self._answered(conn)
                    self._unmute(conn)
                elif kind == CLOSE:
                    self._close(conn, "closed by the main process")
                else:
                    log.error("network %d: unexpected message %r from main", self.index, msg)
        if channel.at_eof:
            log.info("network %d: channel closed (main process gone); exiting", self.index)
            self.stopping = True

    def _update_channel_interest(self) -> None:
        channel = self.channel
        mask = EPOLLIN | EPOLLOUT if channel.wants_write else EPOLLIN
        if mask != self._channel_mask and not channel.closed:
            self.epoll.modify(channel.fileno(), mask)
            self._channel_mask = mask
        accepting = channel.queued < self.max_connections
        if accepting != self._accepting:  # bound the CLOSED/REQUEST backlog
            self.epoll.modify(self.listener.fileno(), EPOLLIN if accepting else 0)
            self._accepting = accepting

    def _answered(self, conn: _Conn) -> bool:
        if not conn.muted:
            log.error(
                "network %d: answer for connection %d that has no request", self.index, conn.conn_id
            )
            self._close(conn, "unexpected answer")
            return False
        conn.muted = False
        self.in_flight -= 1
        return True

    def _unmute(self, conn: _Conn) -> None:
        if conn.mask == 0:  # data arrived while muted: read it now, no epoll round trip
            self._read(conn)
        elif conn.mask != EPOLLIN:
            self._set_mask(conn, EPOLLIN)
        if self.waiters:
            self._retry_waiters()

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

    # closing --------------------------------------------------------------------------
    def _close(self, conn: _Conn, reason: str, *, notify: bool = True) -> None:
        if conn.closed:
            return
        conn.closed = True
        log.debug("network %d: closing connection %d: %s", self.index, conn.conn_id, reason)
        self.epoll.unregister(conn.fd)
        del self.conns[conn.fd]
        del self.by_id[conn.conn_id]
        if conn.buffer is not None:
            self._free(conn.buffer)
            conn.buffer = None
        if conn.resp is not None:
            conn.resp_view = None
            self._free(conn.resp)
            conn.resp = None
        if conn.region is not None:
            self.files.release(conn.region)
            conn.region = None
        if conn.muted:
            conn.muted = False
            self.in_flight -= 1
        if conn.known and notify and not self.channel.at_eof:
            try:
                self.channel.post((CLOSED, conn.conn_id))
            except ChannelFullError as exc:
                log.error("network %d: CLOSED %d not sent: %s", self.index, conn.conn_id, exc)
        conn.sock.close()

    def _free(self, buffer: Buffer | tuple[int, int, int]) -> None:
        try:
            self.pool.deallocate(buffer)  # type: ignore[arg-type]
        except StaleBufferHandleError as exc:
            log.error("network %d: freeing a buffer failed: %s", self.index, exc)


def _parse_regions(data: memoryview) -> list[Any]:
    try:
        regions = msgpack.unpackb(data)
    except Exception as exc:
        raise RegionError(f"regions are not msgpack: {exc}") from None
    if type(regions) is not list:
        raise RegionError(f"regions must be a list, got {type(regions).__name__}")
    for region in regions:
        if (
            type(region) is not list
            or len(region) not in (3, 5)
            or type(region[0]) not in (str, bytes)
            or not all(type(v) is int for v in region[1:])
            or region[1] < 0
            or region[2] < 0
        ):
            raise RegionError(
                "region must be [path, position >= 0, length >= 0(, st_dev, st_ino)], "
                f"got {region!r}"
            )
    return regions


# ------------------------------------------------------------------------------ entry


def open_listener(host: str, port: int, backlog: int) -> socket.socket:
    """A non-blocking listening socket with SO_REUSEPORT (shared by the network processes)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m broker.network", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--pool-name", required=True)
    p.add_argument("--channel-fd", type=int, required=True)
    p.add_argument("--max-request-bytes", type=int, required=True)
    p.add_argument("--max-connections", type=int, required=True)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--max-queued-requests", type=int, default=500)
    p.add_argument("--request-headroom-bytes", type=int, default=0)
    p.add_argument("--file-cache-size", type=int, default=128)
    p.add_argument("--memory-retry-ms", type=float, default=2.0)
    p.add_argument("--log-level", default="WARNING")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s network[{args.index}] %(levelname)s %(message)s",
    )
    channel_sock = socket.socket(fileno=args.channel_fd)
    channel_sock.set_inheritable(False)
    channel = ChannelEndpoint(channel_sock, max_queued_messages=4 * args.max_connections + 64)
    try:
        pool = BufferPool.attach(args.pool_name)
    except (OSError, BufferPoolError) as exc:
        log.error("cannot attach buffer pool %r: %s", args.pool_name, exc)
        channel.close()
        return 2
    try:
        try:
            listener = open_listener(
                args.host, args.port, min(4096, max(128, args.max_connections))
            )
        except OSError as exc:
            log.error("cannot listen on %s:%d: %s", args.host, args.port, exc)
            return 2
        try:
            process = NetworkProcess(
                listener=listener,
                channel=channel,
                pool=pool,
                index=args.index,
                max_request_bytes=args.max_request_bytes,
                max_connections=args.max_connections,
                max_queued_requests=args.max_queued_requests,
                request_headroom_bytes=args.request_headroom_bytes,
                file_cache_size=args.file_cache_size,
                memory_retry_ms=args.memory_retry_ms,
            )
        except InvalidConfigError as exc:
            listener.close()
            log.error("%s", exc)
            return 2
        process.install_signal_handlers()
        if not channel.send(encode_ready(listener.getsockname()[1], os.getpid())):
            process.shutdown()
            return 1
        return process.run()
    finally:
        channel.close()
        pool.close()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        sys.exit(1)
