"""BufferPool across real processes (spawn: children attach by name, like unrelated
processes would): handoff of handles, FIFO waking, SIGKILL reclaim, concurrent
allocate/free with exact accounting. Every child is stopped by pid in a finally block.
"""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from functools import partial
from multiprocessing.process import BaseProcess
from typing import Any

import pytest

from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import BufferPoolTimeoutError
from clients.memory.handles import BufferHandle

pytestmark = pytest.mark.multiprocess

P = 1024
DEADLINE_S = 30.0
CTX = mp.get_context("spawn")


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def assert_exact(pool: BufferPool) -> None:
    pool.check_accounting()
    m = pool.metrics()
    free_list = m.free_list_length * m.poolable_size
    assert (
        free_list + m.non_pooled_available_bytes + m.allocated_bytes + m.reserved_bytes
        == m.total_bytes
    )


@pytest.fixture
def procs() -> Iterator[Callable[..., BaseProcess]]:
    started: list[BaseProcess] = []

    def start(target: Callable[..., None], *args: Any) -> BaseProcess:
        proc = CTX.Process(target=target, args=args, daemon=True)
        proc.start()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.is_alive() and proc.pid is not None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(DEADLINE_S)
        proc.close()


@pytest.fixture
def pool() -> Iterator[BufferPool]:
    p = BufferPool.create(16 * P, P)
    try:
        yield p
    finally:
        name = p.name
        p.close()
        assert not os.path.exists("/dev/shm/" + name)


# children (module level: spawn imports them) ----------------------------------------


def child_fill(name: str, sizes: list[int], out: Any) -> None:
    """Allocate, write a pattern, send the handles; then stay alive until killed."""
    pool = BufferPool.attach(name)
    handles = []
    for i, size in enumerate(sizes):
        buf = pool.allocate(size, 5_000)
        buf.memory[:] = bytes([i + 1]) * size
        handles.append(tuple(buf.handle))
    out.put(handles)
    signal.pause()  # until the test SIGKILLs this process


def child_receive_and_free(name: str, inbox: Any, out: Any) -> None:
    """Attach the buffer a sibling filled, read it in place, claim and free it."""
    pool = BufferPool.attach(name)
    handle = BufferHandle(*inbox.get(timeout=DEADLINE_S))
    buf = pool.attach_buffer(handle)
    pool.claim(handle)
    out.put(bytes(buf.memory[:4]))
    pool.deallocate(buf)
    pool.close()


def child_wait(name: str, size: int, tag: str, out: Any) -> None:
    pool = BufferPool.attach(name)
    buf = pool.allocate(size, DEADLINE_S * 1000)
    out.put((tag, tuple(buf.handle)))
    pool.transfer(buf, os.getppid())  # the parent frees it
    buf.release()
    pool.close()


def child_churn(name: str, seed: int, rounds: int, out: Any) -> None:
    pool = BufferPool.attach(name)
    out.put(churn(pool, seed, rounds))
    pool.close()


def child_forked(pool: BufferPool, seed: int, rounds: int, checked: Any, out: Any) -> None:
    """Uses the pool object inherited through fork (no attach)."""
    buf = pool.allocate(P, 5_000)
    out.put((os.getpid(), tuple(buf.handle)))
    out.put(churn(pool, seed, rounds))
    checked.wait(DEADLINE_S)
    pool.deallocate(buf)


def child_try_lock(pool: BufferPool, out: Any) -> None:
    """While the parent holds the pool lock, a forked child must not get it."""
    try:
        fcntl.flock(pool._lock.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        out.put("acquired")
    except BlockingIOError:
        out.put("blocked")


def churn(pool: BufferPool, seed: int, rounds: int) -> tuple[bool, int, int]:
    """Random allocate/write/verify/free; returns (ok, allocations, timeouts)."""
    rng = random.Random(seed)
    live: list[tuple[Any, int]] = []
    allocs = timeouts = 0
    ok = True
    for _ in range(rounds):
        if live and (len(live) >= 4 or rng.random() < 0.45):
            buf, fill = live.pop(rng.randrange(len(live)))
            ok &= bytes(buf.memory) == bytes([fill]) * buf.size
            pool.deallocate(buf)
            continue
        size = rng.choice([P, P, P, P // 2, 2 * P + 3, 4 * P])
        try:
            buf = pool.allocate(size, 100)
        except BufferPoolTimeoutError:
            timeouts += 1
            continue
        fill = rng.randrange(1, 256)
        buf.memory[:] = bytes([fill]) * size
        live.append((buf, fill))
        allocs += 1
    for buf, fill in live:
        ok &= bytes(buf.memory) == bytes([fill]) * buf.size
        pool.deallocate(buf)
    return ok, allocs, timeouts


# tests --------------------------------------------------------------------------------


def test_handoff_between_processes_without_copy(
    pool: BufferPool, procs: Callable[..., BaseProcess]
) -> None:
    out, inbox, done = CTX.Queue(), CTX.Queue(), CTX.Queue()
    filler = procs(child_fill, pool.name, [P, 3 * P - 1], out)
    handles = out.get(timeout=DEADLINE_S)
    view = pool.attach_buffer(handles[1])  # the parent reads the child's bytes in place
    assert bytes(view.memory) == b"\x02" * (3 * P - 1)
    view.release()
    procs(child_receive_and_free, pool.name, inbox, done)
    inbox.put(handles[0])
    assert done.get(timeout=DEADLINE_S) == b"\x01" * 4
    wait_until(lambda: pool.metrics().allocated_bytes == 3 * P, "receiver freed the pooled buffer")
    assert pool.metrics().free_list_length == 1
    assert_exact(pool)
    os.kill(filler.pid or 0, signal.SIGKILL)
    filler.join(DEADLINE_S)
    report = pool.reclaim_dead()
    assert (report.buffers, report.bytes) == (1, 3 * P)
    assert pool.metrics().available_memory == 16 * P
    assert_exact(pool)


def test_reclaim_after_sigkill(pool: BufferPool, procs: Callable[..., BaseProcess]) -> None:
    out = CTX.Queue()
    victim = procs(child_fill, pool.name, [P, P, 100, 5 * P], out)
    out.get(timeout=DEADLINE_S)
    assert pool.metrics().allocated_bytes == 8 * P
    assert pool.reclaim_dead().buffers == 0  # alive: nothing taken
    os.kill(victim.pid or 0, signal.SIGKILL)
    wait_until(lambda: not victim.is_alive(), "victim dead")
    report = pool.reclaim_dead()  # dead (reaped or zombie) owner
    assert (report.buffers, report.bytes, report.waiters) == (4, 8 * P, 0)
    m = pool.metrics()
    assert m.allocated_bytes == 0 and m.available_memory == 16 * P and m.free_list_length == 2
    assert_exact(pool)


def test_dead_waiter_is_removed_and_next_waiter_served(
    pool: BufferPool, procs: Callable[..., BaseProcess]
) -> None:
    held = pool.allocate(16 * P, 0)
    out = CTX.Queue()
    doomed = procs(child_wait, pool.name, 2 * P, "doomed", out)
    wait_until(lambda: pool.metrics().waiter_count == 1, "doomed queued")
    procs(child_wait, pool.name, P, "next", out)
    wait_until(lambda: pool.metrics().waiter_count == 2, "next queued")
    os.kill(doomed.pid or 0, signal.SIGKILL)
    doomed.join(DEADLINE_S)
    assert pool.reclaim_dead().waiters == 1
    pool.deallocate(held)
    tag, handle = out.get(timeout=DEADLINE_S)
    assert tag == "next"
    wait_until(lambda: pool.metrics().waiter_count == 0, "next left the queue")
    pool.deallocate(BufferHandle(*handle))
    assert pool.metrics().available_memory == 16 * P
    assert_exact(pool)


def test_fifo_wakeup_across_processes(pool: BufferPool, procs: Callable[..., BaseProcess]) -> None:
    held = [pool.allocate(4 * P, 0) for _ in range(4)]
    out = CTX.Queue()
    tags = ["a", "b", "c"]
    for i, tag in enumerate(tags):
        procs(child_wait, pool.name, 4 * P, tag, out)
        queued = partial(lambda n: pool.metrics().waiter_count == n, i + 1)
        wait_until(queued, f"{tag} queued")
    served = []
    for buf in held[:3]:
        pool.deallocate(buf)  # one run freed: exactly the oldest waiter fits
        tag, handle = out.get(timeout=DEADLINE_S)
        served.append(tag)
        held.append(pool.attach_buffer(handle))
    assert served == tags
    for buf in held[3:]:
        pool.deallocate(buf)
    wait_until(lambda: pool.metrics().waiter_count == 0, "queue empty")
    assert pool.metrics().available_memory == 16 * P
    assert_exact(pool)


@pytest.mark.parametrize("workers", [2, 3])
def test_concurrent_processes_keep_exact_accounting(
    pool: BufferPool, procs: Callable[..., BaseProcess], workers: int
) -> None:
    out = CTX.Queue()
    for seed in range(workers):
        procs(child_churn, pool.name, seed, 400, out)
    results: list[tuple[bool, int, int]] = []
    checks = 0
    deadline = time.monotonic() + DEADLINE_S * 2
    while len(results) < workers:  # the accounting is exact at every lock release
        assert time.monotonic() < deadline, "workers did not finish"
        assert_exact(pool)
        checks += 1
        if not out.empty():
            results.append(out.get())
    assert checks > 1
    assert all(ok for ok, _, _ in results), "a buffer was overwritten by another process"
    assert sum(allocs for _, allocs, _ in results) > 0
    wait_until(lambda: pool.metrics().waiter_count == 0, "all waiters gone")
    m = pool.metrics()
    assert m.allocated_bytes == 0 and m.reserved_bytes == 0 and m.available_memory == 16 * P
    assert_exact(pool)
    again = BufferPool.attach(pool.name)  # children's exit did not unlink the segment
    again.close()


def test_forked_child_gets_its_own_lock_and_identity(pool: BufferPool) -> None:
    """After fork the child must not share the parent's flock (same open file
    description) nor its pid in owner records."""
    ctx = mp.get_context("fork")
    out, checked = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=child_forked, args=(pool, 7, 400, checked, out), daemon=True)
    child.start()
    try:
        pid, handle = out.get(timeout=DEADLINE_S)
        assert pid == child.pid != os.getpid()
        result = churn(pool, 8, 400)  # the parent churns concurrently
        ok, _, _ = out.get(timeout=DEADLINE_S)
        assert ok and result[0], "a buffer was overwritten: parent and child shared a lock?"
        assert pool.owner_of(BufferHandle(*handle)) == child.pid
        checked.set()
        child.join(DEADLINE_S)
        assert child.exitcode == 0
    finally:
        if child.is_alive() and child.pid is not None:
            os.kill(child.pid, signal.SIGKILL)
        child.join(DEADLINE_S)
    assert os.path.exists("/dev/shm/" + pool.name), "a forked child must not unlink"
    assert pool.metrics().available_memory == 16 * P
    assert_exact(pool)


def test_forked_child_does_not_share_the_parents_flock(pool: BufferPool) -> None:
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    pool._lock.acquire()
    try:
        child = ctx.Process(target=child_try_lock, args=(pool, out), daemon=True)
        child.start()
        try:
            assert out.get(timeout=DEADLINE_S) == "blocked"
        finally:
            if child.is_alive() and child.pid is not None:
                os.kill(child.pid, signal.SIGKILL)
            child.join(DEADLINE_S)
    finally:
        pool._lock.release()
    assert_exact(pool)
