"""Network processes against a fake main process (asyncio loop in a thread of the test).

The fake main attaches every :class:`MainChannelEndpoint` of a real
:class:`NetworkProcessSupervisor` to its loop and answers by the first byte of the frame:

| frame      | answer                                                                  |
|------------|-------------------------------------------------------------------------|
| ``E...``   | echo: response prefix = 4-byte length + the frame bytes                 |
| ``F`` + mp | fetch-like: prefix = 4-byte length of the regions (segment ``[4]``),    |
|            | then the msgpack regions of the frame, sent with sendfile               |
| ``H...``   | hold: keep the request buffer, answer later (``release_held``)          |
| ``N...``   | NO_RESPONSE                                                             |
| ``C...``   | CLOSE                                                                   |

Like the real main process (:mod:`broker.requests.responses`), the fake never waits for
pool memory on its loop: an answer that finds none waits in a
:class:`~broker.requests.response_parking.ResponseParking` (arrival order) and is retried
from a loop timer.  A main that blocks in ``pool.allocate`` instead becomes the pool's
head waiter: it reserves a window that can cover a partial frame's slots, every other
allocation fails meanwhile (the pool serves waiters first), so that frame can neither
finish nor give its slots back, and the requests queued behind the blocked loop hold
their memory too - a deadlock until the allocation times out and the answer is lost
(``test_the_fake_main_never_waits_on_the_pool_so_partial_frames_finish``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import select
import signal
import socket
import ssl
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import broker.network.supervisor as supervisor_module
from broker.config import BrokerConfig
from broker.network.channel.codec import (
    CLOSE,
    CLOSED,
    INTERNAL_CONN_ID_BASE,
    PEER,
    READY,
    REQUEST,
    RESPONSE,
    ChannelFullError,
    ChannelProtocolError,
    decode_message,
    decode_packet,
    encode_close,
    encode_closed,
    encode_no_response,
    encode_packet,
    encode_peer,
    encode_ready,
    encode_request,
    encode_response,
    is_internal_connection,
)
from broker.network.channel.endpoint import ChannelEndpoint
from broker.network.channel.main_side import MainChannelEndpoint
from broker.network.connection import Connection
from broker.network.connection_shares import ConnectionShares, PartialFrameBudget
from broker.network.regions import FileCache, RegionError
from broker.network.request_reader import NEED_DATA, RequestReader
from broker.network.supervisor import NetworkProcessSupervisor, NetworkRestart, open_listener
from broker.requests.response_parking import ResponseParking
from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import BufferPoolTimeoutError
from clients.memory.handles import BufferHandle
from tests.broker.raw_kafka import recv_frame
from tests.broker.raw_kafka import wait_for as raw_wait_for
from tests.tls_certs import make_certs

T = TypeVar("T")
KiB = 1024
MiB = 1024 * 1024
DEADLINE_S = 30.0
ANSWER_RETRY_S = 0.002  # how often the fake main retries answers parked for pool memory


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class FakeMain:
    """A stand-in for broker/server.py: one asyncio loop owning the endpoints."""

    def __init__(self, supervisor: NetworkProcessSupervisor, pool: BufferPool) -> None:
        self.sup, self.pool = supervisor, pool
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.requests: list[tuple[int, int, bytes]] = []  # (index, conn_id, frame)
        self.held: list[tuple[MainChannelEndpoint, int, tuple[int, int, int], int]] = []
        self.closed: list[tuple[int, int]] = []
        self.restarts: list[NetworkRestart] = []
        self.errors: list[BaseException] = []
        # (endpoint, conn_id, prefix, regions) waiting for pool memory, in arrival order
        self.answers: ResponseParking[tuple[MainChannelEndpoint, int, bytes, bytes]] = (
            ResponseParking(max_parked=10_000, timeout_ms=int(DEADLINE_S * 1000),
                            clock_ms=lambda: time.monotonic() * 1000))
        self._answer_timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self.thread.start()
        self.call(self._attach_all)
        self.call(self._schedule_poll)

    def call(self, fn: Callable[[], T]) -> T:
        future: Future[T] = Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return future.result(timeout=DEADLINE_S)

    def stop(self) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(DEADLINE_S)
        self.loop.close()

    # loop side ------------------------------------------------------------------
    def _attach_all(self) -> None:
        for ep in self.sup.endpoints:
            self._attach(ep)

    def _attach(self, ep: MainChannelEndpoint) -> None:
        ep.attach_loop(self.loop, lambda msgs: self._on_messages(ep, msgs), self._poll)

    def _schedule_poll(self) -> None:
        self._poll()
        self.loop.call_later(0.05, self._schedule_poll)

    def _poll(self) -> None:
        for report in self.sup.poll():
            self.restarts.append(report)
            self._attach(self.sup.endpoint(report.index))

    def _on_messages(self, ep: MainChannelEndpoint, messages: list[tuple[Any, ...]]) -> None:
        for msg in messages:
            try:
                if msg[0] == REQUEST:
                    self._on_request(ep, msg[1], msg[2], msg[3])
                elif msg[0] == CLOSED:
                    self.closed.append((ep.index, msg[1]))
            except BaseException as exc:
                self.errors.append(exc)

    def _on_request(
        self, ep: MainChannelEndpoint, conn_id: int, handle: tuple[int, int, int], length: int
    ) -> None:
        buf = self.pool.attach_buffer(handle)
        frame = bytes(buf.memory[:length])
        buf.release()
        self.requests.append((ep.index, conn_id, frame))
        kind = frame[:1]
        if kind == b"H":
            self.held.append((ep, conn_id, handle, length))
            return
        self.pool.deallocate(BufferHandle(*handle))
        if kind == b"E":
            self._respond(ep, conn_id, struct.pack(">i", length) + frame, b"")
        elif kind == b"F":
            regions = msgpack.unpackb(frame[1:])
            total = sum(r[2] for r in regions)  # the 4-byte length first ([4]), then regions
            self._respond(ep, conn_id, struct.pack(">i", total), msgpack.packb([[4], *regions]))
        elif kind == b"N":
            ep.send_no_response(conn_id)
        else:
            ep.send_close(conn_id)

    def _respond(
        self, ep: MainChannelEndpoint, conn_id: int, prefix: bytes, regions: bytes
    ) -> None:
        """Answer now if the pool has room and no earlier answer waits, else park the
        answer (never wait on the loop: see the module docstring)."""
        self.answers.offer((ep, conn_id, prefix, regions), self._try_answer, self._give_up)
        self._schedule_answers()

    def _try_answer(self, answer: tuple[MainChannelEndpoint, int, bytes, bytes]) -> bool:
        ep, conn_id, prefix, regions = answer
        try:
            buf = self.pool.allocate(len(prefix) + len(regions), 0)
        except BufferPoolTimeoutError:
            return False
        buf.memory[: len(prefix)] = prefix
        buf.memory[len(prefix) :] = regions
        handle = buf.handle
        buf.release()
        ep.send_response(conn_id, handle, len(prefix), len(regions))
        return True

    def _give_up(self, answer: tuple[MainChannelEndpoint, int, bytes, bytes], why: str) -> None:
        self.errors.append(AssertionError(f"answer to connection {answer[1]} lost: {why}"))
        answer[0].send_close(answer[1])

    def _schedule_answers(self) -> None:
        if self.answers and self._answer_timer is None:
            self._answer_timer = self.loop.call_later(ANSWER_RETRY_S, self.retry_answers)

    def retry_answers(self) -> None:
        """Deliver parked answers in order while the pool has room (the loop's timer)."""
        self._answer_timer = None
        try:
            self.answers.retry(self._try_answer, self._give_up)
        except BaseException as exc:
            self.errors.append(exc)
        self._schedule_answers()

    def release_held(self, *, respond: bool = True) -> int:
        def run() -> int:
            held, self.held = self.held, []
            for ep, conn_id, handle, length in held:
                buf = self.pool.attach_buffer(handle)
                frame = bytes(buf.memory[:length])
                buf.release()
                self.pool.deallocate(BufferHandle(*handle))
                if respond:
                    self._respond(ep, conn_id, struct.pack(">i", length) + frame, b"")
            return len(held)

        return self.call(run)


# ---------------------------------------------------------------- fixtures/helpers


def make_config(**overrides: Any) -> BrokerConfig:
    base: dict[str, Any] = {
        "port": 0,
        "max_request_bytes": 4 * MiB,
        "buffer_pool_bytes": 16 * MiB,
        "buffer_poolable_bytes": 64 * KiB,
    }
    base.update(overrides)
    return BrokerConfig(**base).validate()


@contextlib.contextmanager
def running(
    config: BrokerConfig, *, pool_bytes: int | None = None, **sup_kwargs: Any
) -> Iterator[tuple[NetworkProcessSupervisor, FakeMain, BufferPool]]:
    pool = BufferPool.create(pool_bytes or config.buffer_pool_bytes, config.buffer_poolable_bytes)
    sup = NetworkProcessSupervisor(config, pool, **sup_kwargs)
    main: FakeMain | None = None
    try:
        sup.start()
        main = FakeMain(sup, pool)
        main.start()
        yield sup, main, pool
        assert not main.errors, main.errors
    finally:
        if main is not None:
            main.stop()
        sup.stop()  # SIGTERM, then SIGKILL by PID after the deadline
        pool.close()


def connect(port: int, *, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(DEADLINE_S)
    sock.connect(("127.0.0.1", port))
    return sock


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def recv_until_closed(sock: socket.socket) -> bytes:
    out = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            return bytes(out)
        if not chunk:
            return bytes(out)
        out += chunk


def echo(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(frame(b"E" + payload))
    assert recv_frame(sock) == b"E" + payload


def assert_pool_clean(pool: BufferPool) -> None:
    wait_for(lambda: pool.metrics().allocated_bytes == 0, "all buffers freed")
    pool.check_accounting()


# ---------------------------------------------------------------- channel codec


def test_channel_codec_round_trips() -> None:
    handle = (3, 4096, 7)
    assert decode_message(encode_ready(9092, 123)) == (READY, "ready", 9092, 123)
    assert decode_message(encode_request(5, handle, 100)) == (REQUEST, 5, handle, 100)
    assert decode_message(encode_closed(5)) == (CLOSED, 5)
    assert decode_message(encode_response(5, handle, 10, 20)) == (RESPONSE, 5, handle, 10, 20)
    assert decode_message(encode_no_response(5))[0] == 4
    assert decode_message(encode_close(5)) == (CLOSE, 5)
    assert decode_message(encode_peer(5, "2001:db8::1")) == (PEER, 5, "2001:db8::1")


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        (b"\xc1", "not msgpack"),
        (msgpack.packb(7), "must be an array"),
        (msgpack.packb([9, 1]), "unknown channel message type 9"),
        (msgpack.packb([1, 5, [3, 4096, 7]]), "REQUEST message needs 4 fields"),
        (msgpack.packb([1, 5, [3, 4096], 10]), "malformed REQUEST"),
        (msgpack.packb([3, 5, [3, 100, 7], 60, 50]), "malformed RESPONSE"),
        (msgpack.packb([0, "ready", 0, 1]), "malformed READY"),
        (msgpack.packb([2, "x"]), "malformed CLOSED"),
        (msgpack.packb([6, 5, "x" * 65]), "malformed PEER"),
    ],
)
def test_channel_codec_rejects_bad_messages(message: bytes, fragment: str) -> None:
    with pytest.raises(ChannelProtocolError, match=fragment):
        decode_message(message)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_channel_decode_never_fails_otherwise(data: bytes) -> None:
    try:
        msg = decode_message(data)
    except ChannelProtocolError:
        return
    assert isinstance(msg, tuple) and 0 <= msg[0] <= PEER


def test_endpoint_queue_is_bounded_and_flushes_in_order() -> None:
    ep, peer = ChannelEndpoint.pair(max_queued_messages=8)
    try:
        peer.setblocking(False)
        sent = 0
        with pytest.raises(ChannelFullError, match="max_queued_messages=8"):
            while True:  # the kernel buffer fills first, then our bounded queue
                ep.send(encode_closed(sent))
                sent += 1
        assert ep.queued == 8 and ep.wants_write
        got: list[int] = []
        while len(got) < sent:
            with contextlib.suppress(BlockingIOError):
                while True:
                    got.append(decode_message(peer.recv(256))[1])
            ep.flush()
        assert got == list(range(sent)) and ep.queued == 0
        peer.close()
        assert ep.recv_messages() == [] and ep.at_eof
        assert ep.send(encode_closed(1)) is False
    finally:
        ep.close()
        peer.close()


def test_batched_packets_decode_in_order() -> None:
    messages = [(REQUEST, 1, (0, 10, 1), 10), (CLOSED, 2), (RESPONSE, 3, (4, 100, 2), 60, 40)]
    assert decode_packet(encode_packet(messages)) == messages
    assert decode_packet(encode_packet(messages[:1])) == messages[:1]
    with pytest.raises(ChannelProtocolError, match="malformed CLOSED"):
        decode_packet(msgpack.packb([[2, 1], [2, "x"]]))


def test_main_endpoint_claims_requests_and_frees_unwritten_responses() -> None:
    pool = BufferPool.create(64 * KiB, 4 * KiB)
    ep, net = MainChannelEndpoint.pair(pool=pool, index=0)
    try:
        request = pool.allocate(4 * KiB, 0)
        net.send(encode_packet([(READY, "ready", 9092, 42), (REQUEST, 7, request.handle, 100)]))
        net.send(encode_request(8, (63, 4096, 0), 10))  # stale handle: answered with CLOSE
        wait_for(lambda: select.select([ep], [], [], 0)[0], "readable")
        messages = ep.recv_messages()
        assert [m[0] for m in messages] == [READY, REQUEST] and (ep.port, ep.pid) == (9092, 42)
        assert decode_message(net.recv(256)) == (CLOSE, 8)
        assert ep.in_flight_conn_ids() == {7}
        pool.deallocate(request)
        written, unwritten = pool.allocate(100, 0), pool.allocate(100, 0)
        ep.send_response(7, written.handle, 100)
        ep.send_response(9, unwritten.handle, 50, 50)  # conn 9 unknown: kept in the ring
        assert ep.in_flight_conn_ids() == set() and ep.known_conn_ids() == {7}
        pool.deallocate(written)  # as the network process does after writing it
        net.send(encode_closed(7))
        wait_for(lambda: ep.recv_messages() == [(CLOSED, 7)], "CLOSED")
        assert ep.known_conn_ids() == set()
        assert ep.release_unwritten_responses() == 1  # ``written`` was stale: skipped
        assert pool.metrics().allocated_bytes == 0
        net.close()
        wait_for(lambda: ep.recv_messages() == [] and ep.at_eof, "EOF")
        orphan = pool.allocate(100, 0)
        assert ep.send_response(1, orphan.handle, 100) is False  # closed: freed here
        pool.check_accounting()
        assert pool.metrics().allocated_bytes == 0
    finally:
        ep.close()
        net.close()
        pool.close()


def test_file_cache_reopens_replaced_files_and_stays_bounded(tmp_path: Path) -> None:
    cache = FileCache(capacity=2)
    paths = [tmp_path / f"{i}.log" for i in range(3)]
    for i, p in enumerate(paths):
        p.write_bytes(bytes([i]) * 10)
    try:
        first = cache.acquire(str(paths[0]))
        assert os.pread(first.fd, 1, 0) == b"\x00"
        cache.release(first)
        assert cache.acquire(str(paths[0])) is first
        cache.release(first)
        paths[0].unlink()
        paths[0].write_bytes(b"new")  # same path, another file
        again = cache.acquire(str(paths[0]))
        assert again is not first and os.pread(again.fd, 3, 0) == b"new" and first.fd == -1
        in_use = [again] + [cache.acquire(str(p)) for p in paths[1:]]
        assert len(cache) == 3  # entries in use are never closed under a connection
        for entry in in_use:
            cache.release(entry)
        assert len(cache) == 2 and in_use[0].fd == -1  # least recently used went first
        with pytest.raises(RegionError, match="cannot stat"):
            cache.acquire(str(tmp_path / "missing"))
    finally:
        cache.close()


# ---------------------------------------------------------------- network processes


@pytest.mark.multiprocess
def test_round_trip_ordering_no_response_and_close() -> None:
    with running(make_config()) as (sup, main, pool):
        a, b = connect(sup.port), connect(sup.port)
        try:
            payloads = [b"E-%03d" % i + b"x" * (i % 7) for i in range(100)]
            a.sendall(b"".join(frame(p) for p in payloads))  # pipelined: answered in order
            b.sendall(frame(b"N-no-response") + frame(b"E-after"))
            assert [recv_frame(a) for _ in payloads] == payloads
            assert recv_frame(b) == b"E-after"
            b.sendall(frame(b"C-please-close"))
            assert recv_until_closed(b) == b""
            echo(a, b"still-alive")
            wait_for(lambda: any(c for c in main.closed), "CLOSED after CLOSE")
        finally:
            a.close()
            b.close()
        assert_pool_clean(pool)


@pytest.mark.multiprocess
def test_two_network_processes_share_the_port() -> None:
    with running(make_config(num_network_processes=2)) as (sup, main, pool):
        assert len(set(sup.pids)) == 2
        assert {ep.port for ep in sup.endpoints} == {sup.port}
        clients = [connect(sup.port) for _ in range(40)]
        try:
            for i, c in enumerate(clients):
                echo(c, b"client-%d" % i)
        finally:
            for c in clients:
                c.close()
        # one socket, two processes: on an idle broker the first to call accept would
        # take every connection; the shared counts make them split (within the slack)
        served = Counter(index for index, _, _ in main.requests)
        assert sorted(served) == [0, 1] and min(served.values()) >= 10, served
        assert_pool_clean(pool)


@pytest.mark.multiprocess
def test_a_stopped_network_process_does_not_shut_new_clients_out() -> None:
    # the other process steps aside for the lighter one, sees that it takes nothing, and
    # accepts anyway: every new client is served while process 0 is stopped
    with running(make_config(num_network_processes=2)) as (sup, main, pool):
        stopped = sup.pids[0]
        os.kill(stopped, signal.SIGSTOP)
        clients: list[socket.socket] = []
        try:
            for i in range(30):
                clients.append(connect(sup.port))
                echo(clients[-1], b"while-stopped-%d" % i)
        finally:
            os.kill(stopped, signal.SIGCONT)
            for c in clients:
                c.close()
        assert Counter(index for index, _, _ in main.requests) == {1: 30}
        assert_pool_clean(pool)


@pytest.mark.multiprocess
def test_sendfile_regions_are_byte_exact(tmp_path: Path) -> None:
    big, small = tmp_path / "00000000000000000000.log", tmp_path / "small.log"
    big_bytes, small_bytes = os.urandom(5 * MiB), os.urandom(1000)
    big.write_bytes(big_bytes)
    small.write_bytes(small_bytes)
    regions = [[str(big), 123, 4 * MiB], [str(small), 10, 900], [str(big), 0, 0]]
    with running(make_config()) as (sup, _main, pool):
        slow = connect(sup.port, rcvbuf=16 * KiB)  # forces partial sendfile calls
        try:
            for _ in range(2):  # second time through the cached descriptors
                slow.sendall(frame(b"F" + msgpack.packb(regions)))
                body = recv_frame(slow)
                assert body == big_bytes[123 : 123 + 4 * MiB] + small_bytes[10:910]
            echo(slow, b"after-fetch")
        finally:
            slow.close()
        assert_pool_clean(pool)


@pytest.mark.multiprocess
@pytest.mark.parametrize("problem", ["missing", "short"])
def test_unsendable_region_closes_only_that_connection(tmp_path: Path, problem: str) -> None:
    path = tmp_path / "segment.log"
    path.write_bytes(b"x" * 1000)
    region = [str(tmp_path / "gone.log"), 0, 10] if problem == "missing" else [str(path), 500, 600]
    with running(make_config()) as (sup, _main, pool):
        bad, good = connect(sup.port), connect(sup.port)
        try:
            bad.sendall(frame(b"F" + msgpack.packb([region])))
            received = recv_until_closed(bad)
            assert received == struct.pack(">i", region[2])  # prefix only, then closed
            echo(good, b"unaffected")
        finally:
            bad.close()
            good.close()
        assert_pool_clean(pool)


@pytest.mark.multiprocess
def test_bad_frame_length_closes_the_connection() -> None:
    lengths = [0, -1, 3, 1 * MiB + 1, 2**31 - 1]
    with running(make_config(max_request_bytes=1 * MiB)) as (sup, main, pool):
        good = connect(sup.port)
        try:
            for length in lengths:
                bad = connect(sup.port)
                try:
                    bad.sendall(struct.pack(">i", length) + b"EEEEEEEE")
                    assert recv_until_closed(bad) == b"", length
                finally:
                    bad.close()
                echo(good, b"unaffected")
        finally:
            good.close()
        assert len(main.requests) == len(lengths)  # only the good connection's echoes
        assert_pool_clean(pool)


@pytest.mark.multiprocess
def test_connections_beyond_max_connections_are_closed() -> None:
    with running(make_config(max_connections=2)) as (sup, _main, _pool):
        a, b = connect(sup.port), connect(sup.port)
        echo(a, b"a-one")
        echo(b, b"b-one")
        c = connect(sup.port)
        try:
            assert recv_until_closed(c) == b""
            echo(a, b"a-again")
        finally:
            for s in (a, b, c):
                s.close()


@pytest.mark.multiprocess
def test_the_internal_listener_has_its_own_ids_and_cap_and_closes_silent_connections(
) -> None:
    """Connections on the internal listener (``internal_port``) reach the main process
    with ids from INTERNAL_CONN_ID_BASE, are served while the client port is at its
    per-IP cap, have their own cap, and one that says nothing is closed after
    ``request_read_timeout_ms``."""
    config = make_config(internal_port=0, max_connections_per_ip=2,
                         max_internal_connections=2, request_read_timeout_ms=400)
    with running(config) as (sup, main, _pool):
        assert sup.internal_port > 0 and sup.internal_port != sup.port
        held: list[socket.socket] = []
        try:
            clients = [connect(sup.port) for _ in range(3)]
            held += clients
            echo(clients[0], b"client-0")
            echo(clients[1], b"client-1")
            assert recv_until_closed(clients[2]) == b""  # the per-IP cap of the client port
            brokers = [connect(sup.internal_port) for _ in range(3)]
            held += brokers
            echo(brokers[0], b"broker-0")  # served beside a full client port
            echo(brokers[1], b"broker-1")
            assert recv_until_closed(brokers[2]) == b""  # max_internal_connections
            ids = {frame_bytes[1:]: conn_id for _i, conn_id, frame_bytes in main.requests}
            assert ids[b"client-0"] < INTERNAL_CONN_ID_BASE > ids[b"client-1"]
            assert ids[b"broker-0"] >= INTERNAL_CONN_ID_BASE <= ids[b"broker-1"]
            assert is_internal_connection(ids[b"broker-0"])
            assert not is_internal_connection(ids[b"client-0"])
            brokers[0].close()  # a place frees up; a silent stranger takes it ...
            silent, connected_at = wait_for(lambda: _accepted_and_open(sup.internal_port),
                                            "a place on the internal listener")
            held.append(silent)
            assert recv_until_closed(silent) == b""  # ... and loses it
            assert 0.35 < time.monotonic() - connected_at < 10
            echo(brokers[1], b"broker-1-again")  # a broker that spoke stays
            echo(clients[0], b"client-0-again")
        finally:
            for sock in held:
                sock.close()


def _accepted_and_open(port: int) -> tuple[socket.socket, float] | None:
    """A connection the listener kept (not closed at once for a cap) and when it was
    made, or None."""
    connected_at = time.monotonic()
    sock = connect(port)
    ready, _, _ = select.select([sock], [], [], 0.2)
    if ready:  # closed at once: the cap still counts the old connection
        sock.close()
        return None
    return sock, connected_at


@pytest.mark.multiprocess
def test_pool_exhaustion_slows_reading_and_recovers() -> None:
    poolable = 4 * KiB
    config = make_config(
        max_request_bytes=8 * KiB, buffer_pool_bytes=32 * KiB, buffer_poolable_bytes=poolable
    )
    # 8 slots; 2 kept for responses -> at most 6 requests in memory at once
    with running(config, request_headroom_bytes=2 * poolable, memory_retry_ms=1) as (
        sup,
        main,
        pool,
    ):
        clients = [connect(sup.port) for _ in range(9)]
        try:
            payloads = [b"H" + bytes([65 + i]) * 3000 for i in range(9)]
            for c, p in zip(clients, payloads, strict=True):
                c.sendall(frame(p))
            wait_for(lambda: len(main.held) == 6, "six requests held by the main process")
            assert pool.available_memory() == 2 * poolable
            assert all(p.poll() is None for p in sup.processes)  # waiting, not failing
            assert len(main.held) == 6
            assert main.release_held() == 6  # frees memory: the parked connections go on
            wait_for(lambda: len(main.held) == 3, "parked requests read once memory is free")
            assert main.release_held() == 3
            for c, p in zip(clients, payloads, strict=True):
                assert recv_frame(c) == p
        finally:
            for c in clients:
                c.close()
        assert_pool_clean(pool)


@pytest.mark.multiprocess
def test_large_frames_take_memory_as_their_bytes_arrive() -> None:
    poolable = 64 * KiB
    with running(make_config()) as (sup, _main, pool):  # 16 MiB pool, 4 MiB frames
        stalled = [connect(sup.port) for _ in range(12)]  # 36 MiB declared in all
        try:
            for s in stalled:
                s.sendall(struct.pack(">i", 3 * MiB) + b"E" * 100)
            wait_for(lambda: pool.metrics().allocated_bytes == 12 * poolable,
                     "one slot per stalled frame")
            time.sleep(0.05)
            assert pool.metrics().allocated_bytes == 12 * poolable  # not 12 x 3 MiB
            trickle, whole, small = connect(sup.port), connect(sup.port), connect(sup.port)
            try:
                payload = b"E" + os.urandom(3 * MiB - 1)
                data = frame(payload)
                for i in range(0, len(data), 100_000):  # arrives in pieces: read in slots
                    trickle.sendall(data[i : i + 100_000])
                    time.sleep(0.002)
                assert recv_frame(trickle) == payload
                other = b"E" + payload[:0:-1]
                whole.sendall(frame(other))  # all there at once: read in place
                assert recv_frame(whole) == other
                echo(small, b"still served")
            finally:
                for s in (trickle, whole, small):
                    s.close()
        finally:
            for s in stalled:
                s.close()
        assert_pool_clean(pool)


def _send_in_threads(parts: list[tuple[socket.socket, bytes]]) -> list[threading.Thread]:
    """``sendall`` each part from a thread of its own (a parked connection's sender
    blocks until the network process reads it again)."""
    threads = [threading.Thread(target=sock.sendall, args=(data,), daemon=True)
               for sock, data in parts]
    for t in threads:
        t.start()
    return threads


@pytest.mark.multiprocess
def test_large_frames_that_fill_the_partial_budget_all_complete() -> None:
    # 16 MiB pool, 4 MiB frames: partial frames may hold 8 MiB (max_partial_request_bytes
    # auto), the last 4 MiB kept for one designated frame at a time
    with running(make_config()) as (sup, _main, pool):
        socks = [connect(sup.port) for _ in range(4)]
        try:
            payloads = [b"E" + bytes([65 + i]) * (4 * MiB - 1) for i in range(4)]
            data = [frame(p) for p in payloads]
            half = 2 * MiB
            for t in _send_in_threads([(s, d[:half]) for s, d in zip(socks, data, strict=True)]):
                t.join(DEADLINE_S)
            # two first halves fill the shared 4 MiB, a third is read as the designated
            # frame, the fourth waits: each holding part of the budget, none could
            # finish without the designation until its read deadline
            wait_for(lambda: pool.metrics().allocated_bytes >= 6 * MiB, "three halves read")
            assert pool.metrics().allocated_bytes <= 8 * MiB
            threads = _send_in_threads([(s, d[half:]) for s, d in zip(socks, data, strict=True)])
            answers: dict[int, bytes] = {}

            def read(i: int) -> None:  # all at once: a 4 MiB answer left unread would hold
                answers[i] = recv_frame(socks[i])  # pool memory the other frames need

            readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(4)]
            for t in readers:
                t.start()
            for t in readers + threads:
                t.join(DEADLINE_S)
            # all complete, well before the 30 s read deadline
            assert [answers.get(i) == p for i, p in enumerate(payloads)] == [True] * 4
        finally:
            for s in socks:
                s.close()
        assert_pool_clean(pool)


class _RecordingEndpoint:
    """Stands in for a MainChannelEndpoint: records what the fake main sends."""

    index = 0

    def __init__(self) -> None:
        self.responses: list[tuple[int, tuple[int, int, int], int, int]] = []
        self.closes: list[int] = []

    def send_response(self, conn_id: int, handle: tuple[int, int, int], prefix_len: int,
                      regions_len: int) -> None:
        self.responses.append((conn_id, tuple(handle), prefix_len, regions_len))

    def send_close(self, conn_id: int) -> None:
        self.closes.append(conn_id)


def test_the_fake_main_never_waits_on_the_pool_so_partial_frames_finish() -> None:
    """The flake of test_large_frames_that_fill_the_partial_budget_all_complete, step by
    step in one thread: the real RequestReader and partial-frame budget, a scripted
    connection (a socket pair), the real pool, the fake main's answer path.  Two whole
    requests and a partial frame fill the pool; the first echo answer (one slot larger
    than its request) finds no contiguous room.  A main that waited in pool.allocate
    here became the pool's head waiter, reserved the window over the partial frame's
    slots and shut every other allocation out: the frame could not finish (nor give its
    slots back), the second request stayed queued behind the blocked loop holding its
    memory, until the wait timed out and the answer was lost (seen under CPU load, with
    4 MiB frames, as an answer missing after 30 s).  Parked instead, the answers go out
    in order as memory frees."""
    poolable = 4 * KiB
    pool = BufferPool.create(8 * poolable, poolable)  # 8 slots
    shares = ConnectionShares.create(1)
    main = FakeMain(None, pool)  # type: ignore[arg-type]  # no supervisor: no loop thread
    ep = _RecordingEndpoint()
    server, client = socket.socketpair()
    try:
        server.setblocking(False)
        reader = RequestReader(pool, max_request_bytes=3 * poolable, request_headroom_bytes=0,
                               free=pool.deallocate, budget=PartialFrameBudget(
                                   shares, 0, limit_slots=6, reserve_slots=3))
        conn = Connection(3, server)
        payloads = [b"E" + bytes([48 + i]) * (3 * poolable - 1) for i in range(3)]

        def whole_request(payload: bytes) -> tuple[int, int, int]:
            buf = pool.allocate(len(payload), 0)  # as read in place by a network process
            buf.memory[:] = payload
            handle = buf.handle
            buf.release()
            return tuple(handle)

        def written(response: tuple[int, tuple[int, int, int], int, int],
                    payload: bytes) -> None:  # what the network process sends, then frees
            _conn_id, handle, prefix_len, regions_len = response
            assert (prefix_len, regions_len) == (len(payload) + 4, 0)
            buf = pool.attach_buffer(handle)
            assert bytes(buf.memory[:prefix_len]) == frame(payload)
            buf.release()
            pool.deallocate(BufferHandle(*handle))

        first = whole_request(payloads[0])  # slots 0-2
        client.sendall(frame(payloads[2])[: 4 + 2 * poolable])  # 2 of the frame's 3 slots
        assert reader.read_length(conn)
        assert reader.read_frame(conn) is NEED_DATA and len(conn.chunks) == 2  # slots 3-4
        second = whole_request(payloads[1])  # slots 5-7: the pool is full
        assert pool.available_memory() == 0
        client.sendall(frame(payloads[2])[4 + 2 * poolable :])  # the frame's last bytes

        main._on_request(ep, 1, first, len(payloads[0]))  # type: ignore[arg-type]
        # the 4-slot answer has no room (slots 0-2 free): parked, nothing reserved, so
        # the partial frame may still take memory
        assert ep.responses == [] and len(main.answers) == 1
        assert pool.metrics().waiter_count == 0 and pool.metrics().reserved_bytes == 0
        # its last slot (0); no free run of 3 for the frame, so it is gathered over that
        # slot and the two free ones, its chunks 3-4 moved in and freed (issue 32;
        # before, NEED_MEMORY here until the second request was answered)
        done = reader.read_frame(conn)
        assert isinstance(done, tuple) and done[1] == len(payloads[2])
        assert done[0][0] == 0 and pool.available_memory() == 2 * poolable  # slots 3-4
        main._on_request(ep, 2, second, len(payloads[1]))  # type: ignore[arg-type]
        assert len(main.answers) == 2  # after the first: in order
        main.retry_answers()
        assert [r[0] for r in ep.responses] == [1]  # slots 3-6; the second waits
        main._on_request(ep, 3, done[0], done[1])  # type: ignore[arg-type]
        main.retry_answers()
        assert [r[0] for r in ep.responses] == [1]  # slots 0-2 and 7 free: no run of 4
        written(ep.responses[0], payloads[0])  # the first answer goes out: slots 3-6 free
        main.retry_answers()
        assert [r[0] for r in ep.responses] == [1, 2, 3] and not main.answers
        for response, payload in zip(ep.responses[1:], payloads[1:], strict=True):
            written(response, payload)
        assert main.errors == [] and ep.closes == []
        assert pool.metrics().allocated_bytes == 0
        pool.check_accounting()
    finally:
        server.close()
        client.close()
        main.stop()
        shares.close()
        pool.close()


@pytest.mark.multiprocess
def test_network_processes_share_one_partial_frame_budget() -> None:
    with running(make_config(num_network_processes=2)) as (sup, main, pool):
        socks = [connect(sup.port) for _ in range(8)]
        try:
            for i, s in enumerate(socks):  # learn which process holds which connection
                echo(s, b"id%d" % i)
            index = {frame_[3:]: ep_index for ep_index, _, frame_ in main.requests}
            per_process = Counter(index[b"%d" % i] for i in range(8))
            assert min(per_process[0], per_process[1]) >= 3, per_process  # both take part
            head = struct.pack(">i", 4 * MiB) + b"E"
            threads = _send_in_threads([(s, head + bytes(2 * MiB)) for s in socks])
            # 16 MiB offered; each process alone would take 8 MiB: together they hold the
            # shared 4 MiB and one designated frame's 2 MiB, no more
            wait_for(lambda: pool.metrics().allocated_bytes >= 6 * MiB, "the budget filled")
            assert not raw_wait_for(lambda: pool.metrics().allocated_bytes > 6 * MiB + 64 * KiB,
                                    0.5)
        finally:
            for s in socks:
                s.close()
        for t in threads:
            t.join(DEADLINE_S)
        assert_pool_clean(pool)


@pytest.mark.multiprocess
def test_partial_frames_over_tls_are_bounded_and_given_back(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    config = make_config(ssl_certfile=str(certs.server_cert), ssl_keyfile=str(certs.server_key))
    client_tls = ssl.create_default_context(cafile=str(certs.ca))

    def tls_connect(port: int) -> ssl.SSLSocket:
        return client_tls.wrap_socket(connect(port), server_hostname="localhost")

    with running(config) as (sup, main, pool):
        stalled = [tls_connect(sup.port) for _ in range(6)]
        small = tls_connect(sup.port)
        try:
            head = struct.pack(">i", 4 * MiB) + b"E"
            threads = _send_in_threads([(s, head + bytes(2 * MiB)) for s in stalled])
            # 12 MiB offered: the shared 4 MiB and one designated frame's 2 MiB are held
            wait_for(lambda: pool.metrics().allocated_bytes >= 6 * MiB, "the budget filled")
            assert not raw_wait_for(lambda: pool.metrics().allocated_bytes > 6 * MiB + 64 * KiB,
                                    0.5)
            echo(small, b"small frames are not held up")
            for s in stalled:
                s.close()
            for t in threads:
                t.join(DEADLINE_S)
            wait_for(lambda: pool.metrics().allocated_bytes == 0, "the stalled frames freed")
            for size in (3 * MiB, 200 * KiB):  # the budget was given back: large frames go on
                echo(small, bytes(size))
            # pipelined behind a held request, a large frame is all in the socket when its
            # turn comes: read in place, counted whole (on TLS it could still stop short).
            # TLS reads up to 64 KiB ahead into user space: the frame after it keeps at
            # least big's length in the socket (FIONREAD)
            big, after = b"E" + os.urandom(MiB), b"E" + os.urandom(200 * KiB)
            small.sendall(frame(b"Hold") + frame(big) + frame(after))
            wait_for(lambda: len(main.held) == 1, "the first request held")
            assert main.release_held() == 1
            assert [recv_frame(small) for _ in range(3)] == [b"Hold", big, after]
        finally:
            small.close()
        assert_pool_clean(pool)


@pytest.mark.multiprocess
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_large_frame_split_anywhere_is_byte_exact(seed: int) -> None:
    import random

    rng = random.Random(seed)
    with running(make_config()) as (sup, _main, pool):
        sock = connect(sup.port)
        try:
            for _ in range(3):
                payload = b"E" + rng.randbytes(rng.randrange(64 * KiB - 8, 400 * KiB))
                data = frame(payload)
                cuts = sorted(rng.sample(range(1, len(data)), 12))
                for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
                    sock.sendall(data[a:b])
                    time.sleep(0.001)
                assert recv_frame(sock) == payload
        finally:
            sock.close()
        assert_pool_clean(pool)


@pytest.mark.multiprocess
def test_killed_network_process_is_restarted_and_its_buffers_reclaimed(tmp_path: Path) -> None:
    region_file = tmp_path / "big.log"
    region_file.write_bytes(os.urandom(12 * MiB))
    with running(make_config()) as (sup, main, pool):
        held, partial, stuck = connect(sup.port), connect(sup.port), connect(sup.port, rcvbuf=4096)
        try:
            held.sendall(frame(b"H-held"))
            wait_for(lambda: main.held, "held request")
            held_conn = main.held[0][1]
            partial.sendall(struct.pack(">i", 200 * KiB) + b"E" * 1000)  # body never completes
            stuck.sendall(frame(b"F" + msgpack.packb([[str(region_file), 0, 12 * MiB]])))
            stuck_conn = wait_for(
                lambda: next((c for _, c, f in main.requests if f[:1] == b"F"), None), "fetch"
            )
            # held request (claimed by main) + the fetch's response + partial request (owned
            # by the network process: one 64 KiB slot for the 1000 bytes that came, not the
            # 200 KiB declared)
            wait_for(lambda: pool.metrics().allocated_bytes >= 3 * 64 * KiB, "partial read")
            old_pid = sup.pids[0]
            os.kill(old_pid, signal.SIGKILL)
            wait_for(lambda: main.restarts, "restart")
            report = main.restarts[0]
            assert report.index == 0 and report.old_pid == old_pid != report.new_pid
            assert report.returncode == -signal.SIGKILL
            assert {held_conn, stuck_conn} <= report.lost_conn_ids
            assert report.reclaimed.buffers == 1  # the partial request
            assert report.freed_responses == 1  # the fetch response being sent
            assert main.release_held(respond=False) == 1
            assert_pool_clean(pool)
            wait_for(lambda: sup.endpoint(0).ready, "restarted process listening")
            fresh = connect(sup.port)
            try:
                echo(fresh, b"after-restart")
            finally:
                fresh.close()
            assert sup.restarts == 1
        finally:
            for s in (held, partial, stuck):
                s.close()


@pytest.mark.multiprocess
def test_exits_on_sigterm_and_when_the_main_process_goes_away() -> None:
    config = make_config(num_network_processes=2)
    pool = BufferPool.create(config.buffer_pool_bytes, config.buffer_poolable_bytes)
    sup = NetworkProcessSupervisor(config, pool)
    try:
        sup.start()
        procs = sup.processes
        client = connect(sup.port)
        sup.endpoint(1).close()  # as if the main process died: EOF on the channel
        assert procs[1].wait(DEADLINE_S) == 0
        codes = sup.stop()
        assert codes[procs[0].pid] == 0  # SIGTERM: clean exit
        client.close()
    finally:
        sup.stop()
        pool.close()


@pytest.mark.multiprocess
def test_start_fails_clearly_when_the_port_is_taken() -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    config = make_config(port=blocker.getsockname()[1])
    pool = BufferPool.create(config.buffer_pool_bytes, config.buffer_poolable_bytes)
    sup = NetworkProcessSupervisor(config, pool)
    try:
        with pytest.raises(OSError) as refused:
            sup.start()
        assert refused.value.errno == errno.EADDRINUSE
        assert sup.pids == []
    finally:
        sup.stop()
        pool.close()
        blocker.close()


@pytest.mark.multiprocess
def test_a_second_broker_cannot_bind_the_port_of_a_running_one() -> None:
    # Both used to bind it with SO_REUSEPORT: the kernel then split new clients between
    # the two, and a second cluster started on the same ports joined the first.
    with running(make_config(num_network_processes=2)) as (sup, _main, _pool):
        intruder_config = make_config(port=sup.port)
        pool = BufferPool.create(intruder_config.buffer_pool_bytes,
                                 intruder_config.buffer_poolable_bytes)
        intruder = NetworkProcessSupervisor(intruder_config, pool)
        try:
            with pytest.raises(OSError) as refused:
                intruder.start()
            assert refused.value.errno == errno.EADDRINUSE and intruder.pids == []
        finally:
            intruder.stop()
            pool.close()
        with connect(sup.port) as c:  # the running one still serves
            echo(c, b"still mine")



def test_network_processes_get_this_source_tree_on_their_path() -> None:
    # PYTHONPATH of a started network process: the tree holding broker/ (not broker/ itself)
    root = Path(supervisor_module._SOURCE_ROOT)
    assert (root / "broker" / "network" / "supervisor.py").samefile(supervisor_module.__file__)


def test_a_port_held_for_a_moment_is_retried_a_port_in_use_is_refused() -> None:
    """A restarted broker's port can be an outgoing connection's local port for a moment
    (a peer's fetcher retrying against the dead broker); a port another process keeps
    is still refused, after ``busy_retry_s``."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))  # bound, not listening: like a connecting socket
    port = holder.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(OSError) as refused:
        open_listener("127.0.0.1", port, 16, busy_retry_s=0.3)
    assert refused.value.errno == errno.EADDRINUSE
    assert time.monotonic() - started >= 0.3  # it kept trying
    result: list[socket.socket | BaseException] = []

    def bind() -> None:
        try:
            result.append(open_listener("127.0.0.1", port, 16, busy_retry_s=30))
        except BaseException as exc:  # reported below
            result.append(exc)

    binder = threading.Thread(target=bind)
    binder.start()
    holder.close()  # released while it retries (or before its first try)
    binder.join(30)
    assert len(result) == 1 and isinstance(result[0], socket.socket)
    assert result[0].getsockname()[1] == port
    result[0].close()
