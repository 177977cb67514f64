"""BufferPool in one process: pooled and non-pooled paths, freeUp, waiters, errors.

Cross-process behaviour (attach by name, SIGKILL reclaim, concurrent accounting) is in
test_buffer_pool_mp.py.
"""

from __future__ import annotations

import gc
import os
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import (
    BufferPoolClosedError,
    BufferPoolCorruptedError,
    BufferPoolTimeoutError,
    BufferPoolWaitersFullError,
    BufferTooLargeError,
    StaleBufferHandleError,
)
from clients.memory.handles import Buffer, BufferHandle
from clients.protocol.errors import ErrorCode, InvalidConfigError

P = 1024  # poolable_size used by most tests
DEADLINE_S = 20.0


def shm_exists(name: str) -> bool:
    return os.path.exists("/dev/shm/" + name)


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def assert_exact(pool: BufferPool) -> None:
    pool.check_accounting()
    m = pool.metrics()
    assert (
        m.free_list_length * m.poolable_size
        + m.non_pooled_available_bytes
        + m.allocated_bytes
        + m.reserved_bytes
        == m.total_bytes
    )


@pytest.fixture
def make_pool() -> Iterator[Callable[..., BufferPool]]:
    pools: list[BufferPool] = []

    def make(total_bytes: int = 8 * P, poolable_size: int = P, **kw: Any) -> BufferPool:
        pool = BufferPool.create(total_bytes, poolable_size, **kw)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()
        assert not shm_exists(pool.name), "owner close must unlink the segment"


class Waiter(threading.Thread):
    """Runs allocate() in a thread; result or exception kept; finished_order shared."""

    def __init__(
        self, pool: BufferPool, size: int, max_block_ms: float, order: list[str], tag: str
    ):
        super().__init__(daemon=True)
        self.pool, self.size, self.max_block_ms = pool, size, max_block_ms
        self.order, self.tag = order, tag
        self.buffer: Buffer | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.buffer = self.pool.allocate(self.size, self.max_block_ms)
        except BaseException as exc:
            self.error = exc
        self.order.append(self.tag)


def start_waiter(
    pool: BufferPool, size: int, order: list[str], tag: str, max_block_ms: float = 20_000
) -> Waiter:
    """Start a waiter and return once it is queued (so start order = queue order)."""
    before = pool.metrics().waiter_count
    waiter = Waiter(pool, size, max_block_ms, order, tag)
    waiter.start()
    wait_until(lambda: pool.metrics().waiter_count == before + 1, f"waiter {tag} queued")
    return waiter


# config and bad input --------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "poolable", "kw", "needle"),
    [
        (0, P, {}, "total_bytes must be a positive int"),
        (8 * P, 0, {}, "poolable_size must be a positive int"),
        (8 * P, -1, {}, "poolable_size must be a positive int"),
        (P, 2 * P, {}, "exceeds total_bytes"),
        (8 * P + 1, P, {}, "multiple of poolable_size"),
        (8 * P, P, {"max_waiters": 0}, "max_waiters must be a positive int"),
        (8 * P, P, {"max_waiters": 1 << 20}, "above the bound"),
        (2**21 * 8, 8, {}, "slots, max"),
        (8.0 * P, P, {}, "total_bytes must be a positive int"),
    ],
)
def test_invalid_config_is_precise(
    total: int, poolable: int, kw: dict[str, Any], needle: str
) -> None:
    with pytest.raises(InvalidConfigError, match=needle) as info:
        BufferPool.create(total, poolable, **kw)
    assert info.value.code == ErrorCode.INVALID_CONFIG


def test_bad_requests(make_pool: Callable[..., BufferPool]) -> None:
    pool = make_pool()
    with pytest.raises(ValueError, match="size must be > 0"):
        pool.allocate(0, 10)
    with pytest.raises(TypeError, match="size must be an int"):
        pool.allocate(1.5, 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_block_ms must be >= 0"):
        pool.allocate(100, -1)
    with pytest.raises(
        BufferTooLargeError, match=r"requested 8193 bytes.*total_bytes=8192"
    ) as info:
        pool.allocate(8 * P + 1, 10**9)  # fails at once, never waits
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert_exact(pool)
    assert pool.metrics().waiter_count == 0


def test_direct_constructor_refused() -> None:
    with pytest.raises(TypeError, match=r"BufferPool\.create"):
        BufferPool()


# pooled / non-pooled -----------------------------------------------------------------


def test_pooled_buffers_come_from_the_free_list(make_pool: Callable[..., BufferPool]) -> None:
    pool = make_pool()
    first = pool.allocate(P, 0)
    assert len(first.memory) == P and pool.metrics().free_list_length == 0
    slot = first.slot
    pool.deallocate(first)
    m = pool.metrics()
    assert m.free_list_length == 1 and m.non_pooled_available_bytes == 7 * P
    again = pool.allocate(P, 0)
    assert again.slot == slot and again.generation == first.generation + 1
    assert pool.metrics().free_list_length == 0
    pool.deallocate(again)
    assert_exact(pool)


def test_non_pooled_sizes_use_contiguous_slots_and_return_to_free_memory(
    make_pool: Callable[..., BufferPool],
) -> None:
    pool = make_pool()
    big = pool.allocate(3 * P - 5, 0)
    small = pool.allocate(10, 0)
    assert len(big.memory) == 3 * P - 5 and len(small.memory) == 10
    m = pool.metrics()
    assert m.allocated_bytes == 4 * P  # whole slots: 3 + 1
    assert m.available_memory == 4 * P and m.free_list_length == 0
    big.memory[:] = b"\xab" * len(big.memory)
    small.memory[:] = b"\xcd" * 10
    assert bytes(big.memory) == b"\xab" * (3 * P - 5)  # no overlap with the small one
    pool.deallocate(big)
    pool.deallocate(small)
    m = pool.metrics()
    assert m.free_list_length == 0 and m.non_pooled_available_bytes == 8 * P
    assert_exact(pool)


def test_large_request_frees_pooled_buffers(make_pool: Callable[..., BufferPool]) -> None:
    pool = make_pool()
    bufs = [pool.allocate(P, 0) for _ in range(8)]
    for b in bufs:
        pool.deallocate(b)
    assert pool.metrics().free_list_length == 8
    assert pool.metrics().non_pooled_available_bytes == 0
    whole = pool.allocate(8 * P, 0)  # only possible by taking every free-list buffer
    m = pool.metrics()
    assert m.free_list_length == 0 and m.available_memory == 0 and len(whole.memory) == 8 * P
    assert_exact(pool)
    pool.deallocate(whole)
    assert pool.metrics().non_pooled_available_bytes == 8 * P
    assert_exact(pool)


def test_small_request_frees_one_pooled_buffer_when_no_free_memory(
    make_pool: Callable[..., BufferPool],
) -> None:
    pool = make_pool(total_bytes=2 * P)
    a, b = pool.allocate(P, 0), pool.allocate(P, 0)
    pool.deallocate(a)
    odd = pool.allocate(100, 0)
    assert odd.slot == a.slot and pool.metrics().free_list_length == 0
    for buf in (odd, b):
        pool.deallocate(buf)
    assert_exact(pool)


# waiting ---------------------------------------------------------------------------------


def test_timeout_raises_and_leaks_nothing(make_pool: Callable[..., BufferPool]) -> None:
    pool = make_pool(total_bytes=4 * P)
    held = [pool.allocate(P, 0) for _ in range(4)]
    with pytest.raises(BufferPoolTimeoutError, match=r"1024 bytes within max_block_ms=30") as info:
        pool.allocate(P, 30)
    assert info.value.code == ErrorCode.REQUEST_TIMED_OUT and info.value.retriable
    m = pool.metrics()
    assert m.waiter_count == 0 and m.wait_time_total_ns >= 30_000_000 and m.wait_ratio > 0
    assert_exact(pool)
    for b in held:
        pool.deallocate(b)
    assert pool.metrics().available_memory == 4 * P


def test_try_allocate_never_waits_and_never_barges(
    make_pool: Callable[..., BufferPool],
) -> None:
    pool = make_pool(total_bytes=4 * P)
    big = pool.try_allocate(3 * P)  # contiguous slots, when free now
    assert big is not None and big.size == 3 * P and len(big.memory) == 3 * P
    assert pool.try_allocate(2 * P) is None  # one slot left: no wait, no error
    assert pool.metrics().waiter_count == 0
    last = pool.allocate(P, 0)
    order: list[str] = []
    waiter = start_waiter(pool, P, order, "w")
    pool.deallocate(big)  # the waiter is served first; try_allocate does not jump it
    wait_until(lambda: order == ["w"], "waiter served")
    for buf in (last, waiter.buffer):
        assert buf is not None
        pool.deallocate(buf)
    assert pool.metrics().waiter_count == 0
    held = pool.allocate(P, 0)
    order.clear()
    waiter = start_waiter(pool, 4 * P, order, "w4", max_block_ms=20_000)
    assert pool.try_allocate(P) is None  # someone waits: no barging
    pool.deallocate(held)
    waiter.join(DEADLINE_S)
    assert waiter.buffer is not None
    pool.deallocate(waiter.buffer)
    with pytest.raises(BufferTooLargeError):
        pool.try_allocate(5 * P)
    assert_exact(pool)
    assert pool.metrics().available_memory == 4 * P


def test_try_allocate_over_absorbs_movable_buffers_in_place(
    make_pool: Callable[..., BufferPool],
) -> None:
    pool = make_pool(total_bytes=8 * P)
    ones = [pool.allocate(P, 0) for _ in range(8)]  # slots 0..7, then free 1, 3, 5, 7
    for i in (1, 3, 5, 7):
        pool.deallocate(ones[i])
    kept = {i: ones[i] for i in (0, 2, 4, 6)}
    for i, buf in kept.items():
        buf.memory[:] = bytes([i]) * P
    assert pool.try_allocate(2 * P) is None  # 4 free slots, no run of 2
    assert pool.try_allocate_over(4 * P, [kept[6]]) is None  # 5..7 is only three
    run = pool.try_allocate_over(4 * P, [kept[2], kept[4]])
    assert run is not None and run.slot == 1 and run.size == 4 * P
    assert bytes(run.memory[P : 2 * P]) == bytes([2]) * P  # bytes left in place
    assert bytes(run.memory[3 * P :]) == bytes([4]) * P
    for absorbed in (kept[2], kept[4]):
        with pytest.raises(StaleBufferHandleError):
            pool.attach_buffer(absorbed.handle)
        absorbed.release()
    assert pool.attach_buffer(kept[0].handle).slot == 0  # outside the run: still live
    assert_exact(pool)
    assert pool.metrics().allocated_bytes == 6 * P  # 0, 1..4 (the run), 6
    pool.deallocate(run)
    refill = {b.slot: b for b in (pool.allocate(P, 0) for _ in range(6))}  # full again
    assert sorted(refill) == [1, 2, 3, 4, 5, 7]
    with pytest.raises(StaleBufferHandleError):  # absorbed before: slot 2 is another's
        pool.try_allocate_over(2 * P, [kept[2], refill[3]])
    pool.deallocate(refill.pop(1))
    pool.deallocate(refill.pop(2))
    pair = pool.allocate(2 * P, 0)
    assert pair.slot == 1
    with pytest.raises(ValueError, match="one-slot"):  # a two-slot buffer is not movable
        pool.try_allocate_over(2 * P, [kept[0], pair])
    assert_exact(pool)


def test_partial_accumulation_given_back_on_timeout(make_pool: Callable[..., BufferPool]) -> None:
    pool = make_pool(total_bytes=4 * P)
    held = [pool.allocate(P, 0) for _ in range(4)]
    order: list[str] = []
    waiter = start_waiter(pool, 3 * P, order, "big", max_block_ms=400)
    pool.deallocate(held[1])
    pool.deallocate(held[2])
    wait_until(lambda: pool.metrics().reserved_bytes == 2 * P, "two slots accumulated")
    assert pool.metrics().available_memory == 0  # accumulated memory is not available
    assert_exact(pool)
    waiter.join(DEADLINE_S)
    assert isinstance(waiter.error, BufferPoolTimeoutError)
    m = pool.metrics()
    assert m.reserved_bytes == 0 and m.waiter_count == 0 and m.available_memory == 2 * P
    assert_exact(pool)
    pool.deallocate(held[0])
    pool.deallocate(held[3])
    assert pool.metrics().available_memory == 4 * P


def test_waiters_are_served_first_come_first_served(make_pool: Callable[..., BufferPool]) -> None:
    pool = make_pool(total_bytes=3 * P)
    held = [pool.allocate(P, 0) for _ in range(3)]
    order: list[str] = []
    waiters = [start_waiter(pool, P, order, tag) for tag in ("w1", "w2", "w3")]
    for i, buf in enumerate(held):
        pool.deallocate(buf)  # each free wakes exactly the oldest waiter
        wait_until(partial(lambda n: len(order) == n, i + 1), f"{i + 1} waiters served")
        assert order == ["w1", "w2", "w3"][: i + 1]
    for w in waiters:
        w.join(DEADLINE_S)
        assert w.error is None and w.buffer is not None
        pool.deallocate(w.buffer)
    assert_exact(pool)


def test_new_requests_queue_behind_an_older_large_waiter(
    make_pool: Callable[..., BufferPool],
) -> None:
    pool = make_pool(total_bytes=4 * P)
    held = [pool.allocate(P, 0) for _ in range(4)]
    order: list[str] = []
    big = start_waiter(pool, 2 * P, order, "big")
    small = start_waiter(pool, P, order, "small")
    pool.deallocate(held[1])  # would satisfy "small", but "big" came first
    wait_until(lambda: pool.metrics().reserved_bytes == P, "big accumulates the freed slot")
    assert order == [] and pool.metrics().waiter_count == 2
    pool.deallocate(held[2])  # slots 1-2 now form a run for "big"
    wait_until(lambda: order == ["big"], "big served")
    assert big.buffer is not None and big.buffer.slot == 1
    pool.deallocate(held[0])
    wait_until(lambda: order == ["big", "small"], "small served next")
    for buf in (big.buffer, small.buffer, held[3]):
        assert buf is not None
        pool.deallocate(buf)
    assert_exact(pool)
    assert pool.metrics().available_memory == 4 * P


def test_waiter_queue_is_bounded(make_pool: Callable[..., BufferPool]) -> None:
    pool = make_pool(total_bytes=P, max_waiters=1)
    held = pool.allocate(P, 0)
    order: list[str] = []
    waiter = start_waiter(pool, P, order, "w1")
    with pytest.raises(BufferPoolWaitersFullError, match=r"max_waiters=1"):
        pool.allocate(P, 10_000)
    pool.deallocate(held)
    waiter.join(DEADLINE_S)
    assert waiter.buffer is not None
    pool.deallocate(waiter.buffer)
    assert_exact(pool)


# handles -------------------------------------------------------------------------------


def test_handle_round_trip_is_zero_copy(make_pool: Callable[..., BufferPool]) -> None:
    pool = make_pool()
    buf = pool.allocate(2 * P + 7, 0)
    buf.memory[:5] = b"hello"
    for wire in (
        pickle.loads(pickle.dumps(buf.handle)),
        BufferHandle(*msgpack.unpackb(msgpack.packb(buf.handle))),
    ):
        view = pool.attach_buffer(wire)
        assert bytes(view.memory[:5]) == b"hello" and len(view.memory) == 2 * P + 7
        view.memory[5:6] = b"!"
        view.release()
    assert bytes(buf.memory[:6]) == b"hello!"
    with pytest.raises(TypeError, match=r"send buffer\.handle"):
        pickle.dumps(buf)
    pool.deallocate(buf.handle)  # a handle is enough to free
    buf.release()
    assert_exact(pool)


def test_stale_handles_and_double_free_are_refused(make_pool: Callable[..., BufferPool]) -> None:
    pool = make_pool()
    buf = pool.allocate(P, 0)
    handle = buf.handle
    pool.deallocate(buf)
    with pytest.raises(StaleBufferHandleError, match="double free or stale") as info:
        pool.deallocate(handle)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    reused = pool.allocate(P, 0)  # same slot, next generation
    assert reused.slot == handle.slot
    with pytest.raises(StaleBufferHandleError):
        pool.attach_buffer(handle)
    with pytest.raises(StaleBufferHandleError, match="another size"):
        pool.attach_buffer(BufferHandle(reused.slot, 5, reused.generation))
    with pytest.raises(StaleBufferHandleError, match="outside"):
        pool.deallocate(BufferHandle(999, P, 1))
    pool.deallocate(reused)
    assert_exact(pool)


def test_ownership_transfer_and_claim(make_pool: Callable[..., BufferPool]) -> None:
    pool = make_pool()
    buf = pool.allocate(P, 0)
    assert pool.owner_of(buf) == os.getpid()
    pool.transfer(buf, 1)
    assert pool.owner_of(buf.handle) == 1
    pool.claim(buf.handle)
    assert pool.owner_of(buf) == os.getpid()
    with pytest.raises(ValueError, match="no process with pid"):
        pool.transfer(buf, 2**22 - 1)
    pool.deallocate(buf)


# lifecycle ---------------------------------------------------------------------------------


def test_close_unlinks_and_refuses_use(make_pool: Callable[..., BufferPool]) -> None:
    pool = make_pool()
    name = pool.name
    other = BufferPool.attach(name)
    assert not other.is_owner and other.total_bytes == 8 * P and other.poolable_size == P
    live = other.allocate(P, 0)  # a view still alive at close: no error, no warning
    other.close()
    other.close()  # idempotent
    with pytest.raises(BufferPoolClosedError):
        other.allocate(P, 0)
    with pytest.raises(BufferPoolClosedError):
        other.deallocate(live)
    assert shm_exists(name), "an attached process must never unlink"
    pool.close()
    assert not shm_exists(name)
    with pytest.raises(FileNotFoundError):
        BufferPool.attach(name)


def test_attach_refuses_a_foreign_segment() -> None:
    from multiprocessing import shared_memory

    foreign = shared_memory.SharedMemory(create=True, size=4096)
    try:
        with pytest.raises(BufferPoolCorruptedError, match="not a minikafka buffer pool"):
            BufferPool.attach(foreign.name)
    finally:
        foreign.close()
        foreign.unlink()


def test_dropped_owner_unlinks_via_finalizer() -> None:
    pool = BufferPool.create(4 * P, P)
    name = pool.name
    pool.allocate(P, 0).release()
    del pool
    gc.collect()
    assert not shm_exists(name)


def test_context_manager_and_repr() -> None:
    with BufferPool.create(4 * P, P) as pool:
        assert "available=4096" in repr(pool)
    assert "closed" in repr(pool) and not shm_exists(pool.name)


def test_check_accounting_detects_corruption(make_pool: Callable[..., BufferPool]) -> None:
    from clients.memory.segment import H_FREE_SLOTS

    pool = make_pool()
    pool._w[H_FREE_SLOTS] += 1  # simulate a half-done update by a killed process
    with pytest.raises(BufferPoolCorruptedError, match="free: 8 slots in map, counter 9"):
        pool.check_accounting()
    pool._w[H_FREE_SLOTS] -= 1
    pool.check_accounting()


# model-based ------------------------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.sampled_from([P, P, P, 1, P - 1, P + 1, 3 * P, 5 * P])),
        st.tuples(st.just("free"), st.integers(min_value=0, max_value=100)),
        st.tuples(st.just("over"), st.sampled_from([2 * P, 3 * P, 4 * P - 1])),
    ),
    max_size=40,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops)
def test_random_ops_keep_exact_accounting(
    make_pool: Callable[..., BufferPool], program: list[tuple[str, int]]
) -> None:
    pool = make_pool()
    live: list[tuple[Buffer, int]] = []
    used_slots = 0
    for step, (op, arg) in enumerate(program):
        if op == "alloc":
            need = -(-arg // P)
            try:
                buf = pool.allocate(arg, 0)
            except BufferPoolTimeoutError:
                # only legitimate if no run of `need` free slots exists
                assert used_slots + need > 8 or need > 1
                continue
            buf.memory[:] = bytes([step % 251]) * arg
            live.append((buf, step % 251))
            used_slots += need
        elif op == "over":  # gather over the live one-slot buffers
            movable = [(b, f) for b, f in live if b.size == P]
            buf = pool.try_allocate_over(arg, [b for b, _ in movable])
            if buf is None:
                continue
            need = -(-arg // P)
            for b, fill in movable:
                if buf.slot <= b.slot < buf.slot + need:  # absorbed, bytes in place
                    at = (b.slot - buf.slot) * P
                    end = min(at + P, arg)
                    assert bytes(buf.memory[at:end]) == bytes([fill]) * (end - at)
                    live.remove((b, fill))
                    b.release()
                    used_slots -= 1
            buf.memory[:] = bytes([step % 251]) * arg
            live.append((buf, step % 251))
            used_slots += need
        elif live:
            buf, fill = live.pop(arg % len(live))
            assert bytes(buf.memory) == bytes([fill]) * buf.size, "buffer overwritten by another"
            used_slots -= -(-buf.size // P)
            pool.deallocate(buf)
        assert pool.metrics().allocated_bytes == used_slots * P
        assert_exact(pool)
    for buf, _ in live:
        pool.deallocate(buf)
    assert pool.metrics().available_memory == 8 * P
