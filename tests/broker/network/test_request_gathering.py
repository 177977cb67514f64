"""A complete chunked request frame is gathered into one pool buffer however the pool is
fragmented by this process's chunks (broker/network/request_reader.py, "Gathering").

Step by step in one thread: the real RequestReader, partial-frame budget and pool, and
connections over socket pairs.  Small buffers that come and go decide the order of the
free list, so the chunks land where the test says (the pool hands out pooled slots
LIFO).  Before the fix, a complete frame was copied into a run of free memory only: the
chunks of two frames could leave no free run of a frame's length although half the pool
was free, and both frames waited for memory nothing would free until
``request_read_timeout_ms`` closed their connections (found by helper "flake",
/work/wt/_briefs/flake_fragmentation_repro.py).
"""

from __future__ import annotations

import random
import re
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from broker.network.connection import Connection
from broker.network.connection_shares import ConnectionShares, PartialFrameBudget
from broker.network.request_reader import NEED_DATA, RequestReader
from clients.memory.buffer_pool import BufferPool
from clients.memory.handles import Buffer, BufferHandle

P = 4096  # poolable_size


@contextmanager
def setup(slots: int, frame_slots: int, limit_slots: int,
          clients: int) -> Iterator[tuple[BufferPool, RequestReader, list[Connection],
                                          list[socket.socket]]]:
    pool = BufferPool.create(slots * P, P)
    shares = ConnectionShares.create(1)
    reader = RequestReader(pool, max_request_bytes=frame_slots * P, request_headroom_bytes=0,
                           free=pool.deallocate,
                           budget=PartialFrameBudget(shares, 0, limit_slots=limit_slots,
                                                     reserve_slots=frame_slots))
    pairs = [socket.socketpair() for _ in range(clients)]
    conns = []
    for i, (server, _client) in enumerate(pairs):
        server.setblocking(False)
        conns.append(Connection(i, server))
    try:
        yield pool, reader, conns, [client for _server, client in pairs]
    finally:
        for conn in conns:
            reader.drop(conn)
        for server, client in pairs:
            server.close()
            client.close()
        shares.close()
        pool.close()


def order_free_list(pool: BufferPool, pops: list[int], held: tuple[int, ...] = ()) -> None:
    """Allocate every slot, then free them so that the next one-slot allocations get
    ``pops`` in that order (LIFO); the slots in ``held`` stay allocated."""
    ones = [pool.allocate(P, 0) for _ in range(pool.total_bytes // P)]
    assert [b.slot for b in ones] == list(range(len(ones)))
    rest = [s for s in range(len(ones)) if s not in pops and s not in held]
    for slot in rest + list(reversed(pops)):
        pool.deallocate(ones[slot])


def payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def send(client: socket.socket, data: bytes, start: int, end: int) -> None:
    client.sendall((struct.pack(">i", len(data)) + data)[start:end])


def handed_over(pool: BufferPool, done: object, data: bytes) -> None:
    """``done`` is read_frame's answer for a complete frame holding ``data``; free it."""
    assert isinstance(done, tuple), done
    handle, length = done
    assert length == len(data)
    buf = pool.attach_buffer(handle)
    assert bytes(buf.memory) == data
    buf.release()
    pool.deallocate(BufferHandle(*handle))


def longest_free_run(pool: BufferPool) -> int:
    states = bytes(pool._states)  # ST_FREE 0, ST_POOLED 1
    return max((len(m.group(0)) for m in re.finditer(rb"[\x00\x01]+", states)), default=0)


def test_complete_frames_in_a_fragmented_pool_are_handed_over(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """16 slots, 4-slot frames: when the first frame is complete, its chunks and half of
    the second's leave 10 slots free but no run of 4 (before the fix it waited, and the
    second frame, complete next, found a longest free run of 3 with 8 slots free: both
    waited until their deadline).  The first is gathered over its own chunks and the
    second frame's, whose chunks move out of the way; then the second completes."""
    with setup(slots=16, frame_slots=4, limit_slots=8, clients=2) as (pool, reader, conns,
                                                                       clients):
        order_free_list(pool, [3, 7, 0, 1, 11, 15])
        data = [payload(i, 4 * P) for i in range(2)]
        for conn, client, d in zip(conns, clients, data, strict=True):
            send(client, d, 0, 4 + 2 * P)  # half of each frame
            assert reader.read_length(conn)
            assert reader.read_frame(conn) is NEED_DATA
        assert [[c.slot for c in conn.chunks] for conn in conns] == [[3, 7], [0, 1]]
        for client, d in zip(clients, data, strict=True):
            send(client, d, 4 + 2 * P, 4 + 4 * P)  # the rest
        seen: list[tuple[int, int]] = []  # (free slots, longest free run) when complete
        take = reader._take

        def spy(size: int, *, headroom: bool = True) -> Buffer | None:
            if size == 4 * P:  # a complete frame's buffer
                seen.append((pool.available_memory() // P, longest_free_run(pool)))
            return take(size, headroom=headroom)

        monkeypatch.setattr(reader, "_take", spy)
        handed_over(pool, reader.read_frame(conns[0]), data[0])
        handed_over(pool, reader.read_frame(conns[1]), data[1])
        assert seen[0] == (10, 3)  # the first frame: no free run of 4
        assert pool.metrics().allocated_bytes == 0
        assert reader.budget.total_slots() == 0
        pool.check_accounting()


def test_a_displaced_chunk_of_a_frame_still_arriving_keeps_its_bytes() -> None:
    """The run taken for a complete frame holds a chunk of a frame still arriving: that
    chunk moves into one of the complete frame's slots and the late frame completes
    with every byte where it belongs."""
    with setup(slots=8, frame_slots=3, limit_slots=4, clients=2) as (pool, reader, conns,
                                                                      clients):
        # slots 0 and 4 held by others (say two small requests); a's chunks get 1, 6, 3,
        # b's first chunk 2: free after that only 5 and 7, no run of 3
        order_free_list(pool, [1, 2, 6, 3], held=(0, 4))
        a, b = payload(1, 3 * P), payload(2, 3 * P)
        send(clients[0], a, 0, 4 + P)
        assert reader.read_length(conns[0]) and reader.read_frame(conns[0]) is NEED_DATA
        send(clients[1], b, 0, 4 + P - 100)
        assert reader.read_length(conns[1]) and reader.read_frame(conns[1]) is NEED_DATA
        send(clients[0], a, 4 + P, 4 + 3 * P)
        done = reader.read_frame(conns[0])  # run 1..3 over a's 1 and 3 and b's 2
        assert [c.slot for c in conns[1].chunks] == [6]  # b's chunk moved into a's 6
        handed_over(pool, done, a)
        send(clients[1], b, 4 + P - 100, 4 + 3 * P)
        handed_over(pool, reader.read_frame(conns[1]), b)
        assert reader.budget.total_slots() == 0
        assert pool.metrics().allocated_bytes == 2 * P  # slots 0 and 4
        pool.check_accounting()


def test_chunks_in_the_run_in_the_wrong_order_are_swapped() -> None:
    """A frame's two chunks fill its run in reverse order (a cycle of moves)."""
    with setup(slots=4, frame_slots=2, limit_slots=2, clients=1) as (pool, reader, conns,
                                                                      clients):
        order_free_list(pool, [1, 0], held=(2, 3))  # the pool is full once they are taken
        conn, client, data = conns[0], clients[0], payload(3, 2 * P - 5)
        send(client, data, 0, 4 + P)
        assert reader.read_length(conn) and reader.read_frame(conn) is NEED_DATA
        send(client, data, 4 + P, 4 + len(data))
        assert [c.slot for c in conn.chunks] == [1] and pool.available_memory() == P
        done = reader.read_frame(conn)  # the second chunk takes slot 0, the last free one
        assert isinstance(done, tuple) and done[0][0] == 0  # the run 0-1 over both
        handed_over(pool, done, data)
        assert pool.metrics().allocated_bytes == 2 * P  # slots 2 and 3
        pool.check_accounting()
