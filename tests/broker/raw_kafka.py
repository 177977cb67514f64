"""Raw Kafka frames over plain sockets, for tests that act as a hostile or sloppy client.

No client library: requests are built with :func:`clients.protocol.codec.encode_request_bytes`
and written (whole, split, pipelined) with ``socket.sendall``; answers are read frame by
frame.  Also: what ``/proc`` says about a process's descriptors and TCP sockets, so a
test can show that closed connections were reaped; :func:`stall_frames` (connections
that send part of a large frame and stop, issue 30) and :func:`pool_of` (a read-only
attachment to a broker's buffer pool, for its metrics).
"""

from __future__ import annotations

import itertools
import os
import re
import select
import socket
import struct
import time
from pathlib import Path
from typing import Any

from clients.memory.buffer_pool import BufferPool
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response, encode_request_bytes
from clients.protocol.registry import APIS

API_VERSIONS_V = 3
METADATA_V = APIS[ApiKey.METADATA].max_version
_ids = itertools.count(1)


def connect(port: int, timeout_s: float = 30.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def request(api: ApiKey, version: int, body: dict[str, Any], correlation_id: int | None = None,
            client_id: str = "raw") -> bytes:
    cid = next(_ids) if correlation_id is None else correlation_id
    return encode_request_bytes(api, version, cid, client_id, body,
                                max_frame_bytes=1 << 30)


def api_versions(correlation_id: int | None = None) -> bytes:
    return request(ApiKey.API_VERSIONS, API_VERSIONS_V, {}, correlation_id)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def recv_frame(sock: socket.socket) -> bytes:
    (length,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, length)


def correlation_of(frame: bytes) -> int:
    return int(struct.unpack_from(">i", frame)[0])


def call(sock: socket.socket, api: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
    sock.sendall(request(api, version, body))
    return decode_response(recv_frame(sock), api, version).body


def served(port: int, timeout_s: float = 10.0) -> bool:
    """A fresh connection gets an ApiVersions answer within ``timeout_s``."""
    try:
        with connect(port, timeout_s) as sock:
            sock.sendall(api_versions(7))
            return correlation_of(recv_frame(sock)) == 7
    except OSError:
        return False


def closed_by_peer(sock: socket.socket, timeout_s: float = 10.0) -> bool:
    """True once the peer closed ``sock`` (EOF or reset) within ``timeout_s``."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(1 << 16):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def socket_inodes(pid: int) -> set[int]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def tcp_states(pid: int) -> dict[str, int]:
    """Count of ``pid``'s TCP sockets per state name (from /proc/net/tcp{,6})."""
    names = {"01": "ESTABLISHED", "06": "TIME_WAIT", "08": "CLOSE_WAIT", "0A": "LISTEN",
             "04": "FIN_WAIT1", "05": "FIN_WAIT2", "07": "CLOSE", "09": "LAST_ACK"}
    inodes = socket_inodes(pid)
    counts: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[9]) in inodes:
                state = names.get(fields[3], fields[3])
                counts[state] = counts.get(state, 0) + 1
    return counts


def wait_for(condition: Any, timeout_s: float, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
    return True


def _ping_forever(port: int, out: Any, ready: Any, stop: Any) -> None:
    """In a process of its own: ApiVersions round trips every ~1 ms, (time, seconds) each."""
    sock = connect(port)
    samples = []
    while not stop.is_set():
        started = time.perf_counter()
        sock.sendall(api_versions(1))
        recv_frame(sock)
        samples.append((time.time(), time.perf_counter() - started))
        ready.set()
        time.sleep(0.001)
    out.put(samples)


class LoopProbe:
    """Measures how long a broker keeps small requests waiting: a spawned process (not a
    thread: this process's GIL and garbage collector would be measured too) pings it with
    ApiVersions on a connection of its own; :meth:`worst` is the slowest round trip
    within a time window (after :meth:`stop`)."""

    def __init__(self, port: int) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._out = ctx.Queue()
        self._ready = ctx.Event()
        self._stop = ctx.Event()
        self._proc = ctx.Process(target=_ping_forever,
                                 args=(port, self._out, self._ready, self._stop), daemon=True)
        self.samples: list[tuple[float, float]] = []

    def __enter__(self) -> LoopProbe:
        self._proc.start()
        if not self._ready.wait(60):
            self.stop()
            raise AssertionError("the ping process did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._proc.pid is None or self._stop.is_set():
            return
        self._stop.set()
        try:
            self.samples = self._out.get(timeout=30)
        except Exception:
            self.samples = []
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()

    def worst(self, start: float, end: float) -> float:
        """Slowest round trip (seconds) of a ping sent within ``[start, end]`` (wall time)."""
        return max((s for t, s in self.samples if start - 0.01 <= t <= end + 0.05), default=0.0)


def stall_frames(port: int, connections: int, frame_bytes: int, send_bytes: int,
                 no_progress_s: float = 1.0) -> tuple[list[socket.socket], int]:
    """Open ``connections`` connections; each announces a frame of ``frame_bytes`` and
    sends ``send_bytes`` of it (zeros), then nothing more.  Sends are non-blocking and
    round robin; a socket the broker stops reading (kernel buffers full) is given up
    after ``no_progress_s`` without progress.  Returns the sockets (open, blocking again)
    and the bytes sent in all, length fields included."""
    socks, left = [], []
    for _ in range(connections):
        sock = connect(port)
        sock.setblocking(False)
        socks.append(sock)
        left.append(4 + send_bytes)
    head = struct.pack(">i", frame_bytes)
    body = bytes(1 << 20)
    sent_total, last_progress = 0, time.monotonic()
    while any(left) and time.monotonic() - last_progress < no_progress_s:
        busy = [s for s, n in zip(socks, left, strict=True) if n]
        _, writable, _ = select.select([], busy, [], 0.05)
        for sock in writable:
            i = socks.index(sock)
            done = 4 + send_bytes - left[i]
            chunk = (head[done:] + body) if done < 4 else body
            try:
                n = sock.send(chunk[: left[i]])
            except BlockingIOError:
                continue
            left[i] -= n
            sent_total += n
            last_progress = time.monotonic()
    for sock in socks:
        sock.setblocking(True)
    return socks, sent_total


_SHM = re.compile(r"/dev/shm/(\S+)")


def pool_of(pid: int) -> BufferPool:
    """Attach (never unlink) the buffer pool a broker's main process ``pid`` created,
    found in its memory maps; read it with ``metrics()`` and close it."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        match = _SHM.search(line)
        if match:
            return BufferPool.attach(match.group(1))
    raise LookupError(f"process {pid} maps no shared-memory segment")
