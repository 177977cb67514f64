"""BufferPool: Kafka's producer BufferPool in one shared-memory segment.

Semantics (Kafka's ``buffer.memory`` = ``total_bytes``, ``batch.size`` = ``poolable_size``):

- ``allocate(poolable_size, ...)`` pops the free list (fast path); any other size is
  carved from non-pooled memory, pulling free-list buffers back into it when needed
  (``freeUp``). A size above ``total_bytes`` fails at once with BufferTooLargeError.
- When memory is short the caller waits up to ``max_block_ms``. Waiters are served first
  come first served: while anyone waits, a new request queues behind (no barging), the
  oldest waiter alone allocates and accumulates (reserves) memory as it is returned, and
  every free rings its doorbell. On timeout it leaves the queue, gives back what it had
  accumulated and raises BufferPoolTimeoutError.
- ``try_allocate`` / ``try_allocate_over`` never wait: the latter may also take the
  slots of the caller's own one-slot buffers into the run (absorbed in place, bytes
  untouched), so a caller can gather its scattered buffers into one even when free
  memory alone has no run that long.
- ``deallocate`` returns a one-slot buffer of exactly ``poolable_size`` to the free list
  and anything else to non-pooled memory.

Modules: this one maps the segment (create/attach/close), allocates and frees, hands
buffers between processes, reclaims those of dead processes and reports metrics;
:mod:`clients.memory.slots` (slot allocator, free list, waiter
queue), :mod:`clients.memory.segment` (byte layout table, lock, liveness),
:mod:`clients.memory.handles` (Buffer, BufferHandle byte table, metrics) and
:mod:`clients.memory.errors` (exceptions and their error codes).

Memory model: the segment (layout table in :mod:`clients.memory.segment`) is divided into
slots of ``poolable_size``; ``total_bytes`` must be a multiple of it. A buffer is
``ceil(size / poolable_size)`` contiguous slots (allocator in :mod:`clients.memory.slots`),
accounted in whole slots, so for every quiescent pool::

    free_list_bytes + non_pooled_available_bytes + allocated_bytes (+ reserved) == total

Buffers and handles: :class:`Buffer` is a writable memoryview into the segment plus a
:class:`BufferHandle` ``(slot, size, generation)``, a plain tuple that pickles/msgpacks
in a few bytes. Another process attached to the same pool turns the handle back into a
zero-copy view with :meth:`BufferPool.attach_buffer`. Any process may deallocate a
buffer by its handle (the generation makes a double free or a stale handle fail with
StaleBufferHandleError). Ownership, used only to reclaim the buffers of dead processes,
stays with the allocating process until :meth:`BufferPool.transfer` (or :meth:`claim`
by the receiver) moves it: a sender that may die before the receiver frees the buffer
must transfer it first.

Lifecycle: ``BufferPool.create(...)`` makes the owner, which unlinks the segment on
``close()``, on garbage collection and at interpreter exit (weakref finalizer); if the
owner is SIGKILLed, Python's resource tracker unlinks it. ``BufferPool.attach(name)``
never unlinks. The owner should call :meth:`reclaim_dead` periodically: it frees buffers
and drops waiters of processes that no longer exist (pid + start time, so pid reuse is
not confused with the owner still living).

Costs: allocate/free of a pooled buffer is O(1): one flock pair each (~1.3 us, the floor
of a pair is ~2.6 us of syscalls), about eight int64 word accesses on a memoryview, a
view slice and a Buffer object (~7.5 us per allocate+free pair on the 2-core reference
machine, see bench/results/buffer_pool.json). Other sizes add an O(num_slots) regex scan
of the state map (C speed); a waiting head reserves with an O(num_slots) numpy window
sum per wake. Why not faster: Python has no atomic compare-and-swap, so a user-space
lock is not available without a C extension (a ctypes-called robust pthread mutex was
measured at ~1.1 us per pair, barely below flock, and without flock's release-on-death).
Waiters poll their doorbell with a bounded backoff (50 us doubling to 1 ms) and take the
lock at least every 10 ms, so wake-up latency is at most ~1 ms; no cross-process
condition variable is needed.

Thread/process safety: all shared state changes happen under one lock (flock on the
segment + a thread lock); a pool object may be used by many threads, and any number of
processes may attach by name. Buffer views must be released (``buffer.release()`` or
deallocate) before ``close()`` can unmap the segment; otherwise the mapping lives on
until the last view dies (the owner still unlinks the name).
"""

from __future__ import annotations

import contextlib
import os
import time
import weakref
from collections.abc import Sequence
from fcntl import LOCK_EX, LOCK_UN, flock
from multiprocessing.shared_memory import SharedMemory
from typing import Self

from clients.memory import segment as seg
from clients.memory.errors import (
    BufferPoolClosedError,
    BufferPoolCorruptedError,
    BufferPoolTimeoutError,
    BufferTooLargeError,
    StaleBufferHandleError,
)
from clients.memory.handles import (
    Buffer,
    BufferHandle,
    BufferPoolMetrics,
    ReclaimReport,
    validate_config,
)
from clients.memory.segment import (
    H_FL_LEN,
    H_SIGNAL_SEQ,
    H_SIGNAL_TICKET,
    H_WAIT_NS,
    H_WAITERS,
    IDENTITY,
    S_FLPOS,
    S_GEN,
    S_OWNER,
    S_RUN,
    S_SIZE,
    SLOT_WORDS,
    ST_HEAD,
    ST_HEAD_POOLED,
    ST_POOLED,
    Layout,
    SegmentLock,
)
from clients.memory.slots import SlotTable

__all__ = ["BufferPool"]

_BACKOFF_MIN_S = 50e-6
_BACKOFF_MAX_S = 1e-3
_FORCED_CHECK_NS = 10_000_000



class BufferPool:
    """A bounded pool of buffers shared by every process attached to its segment.

    ``BufferPool.create(total_bytes, poolable_size, name=None, max_waiters=1024)`` or
    ``BufferPool.attach(name)``; see the module docstring for semantics and costs.
    """

    name: str
    is_owner: bool
    _shm: SharedMemory
    _layout: Layout
    _w: memoryview
    _states: memoryview
    _data: memoryview
    _table: SlotTable
    _lock: SegmentLock
    _poolable: int
    _total: int
    _sb: int
    _fb: int
    _num_slots: int
    _closed: bool
    _finalizer: weakref.finalize

    def __init__(self) -> None:
        raise TypeError(f"use {type(self).__name__}.create(...) or .attach(name)")

    # lifecycle -------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        total_bytes: int,
        poolable_size: int,
        *,
        name: str | None = None,
        max_waiters: int = 1024,
    ) -> Self:
        """Create a new segment and own it (unlinked when this pool is closed)."""
        validate_config(total_bytes, poolable_size, max_waiters)
        num_slots = total_bytes // poolable_size
        layout = Layout(num_slots, max_waiters, poolable_size)
        pool = cls._open(seg.create_segment(name, layout.segment_bytes), layout, owner=True)
        w = pool._w
        w[seg.H_VERSION], w[seg.H_TOTAL] = seg.LAYOUT_VERSION, total_bytes
        w[seg.H_POOLABLE], w[seg.H_SLOTS] = poolable_size, num_slots
        w[seg.H_MAX_WAITERS], w[seg.H_DATA_OFFSET] = max_waiters, layout.data_offset
        w[seg.H_OWNER_PID], w[seg.H_OWNER_START] = IDENTITY[0][:2]
        w[seg.H_CREATED_NS], w[H_SIGNAL_TICKET] = time.monotonic_ns(), -1
        pool._table.format()
        w[seg.H_MAGIC] = seg.MAGIC  # last: an attacher never sees a half-made pool
        return pool

    @classmethod
    def attach(cls, name: str) -> Self:
        """Map an existing pool by name; this process never unlinks it."""
        shm = seg.attach_segment(name)
        try:
            header = _buf(shm)[: 8 * 8].cast("q")
            try:
                magic, version, _, poolable, slots, max_waiters = header[:6]
            finally:
                header.release()
            if magic != seg.MAGIC or version != seg.LAYOUT_VERSION:
                raise BufferPoolCorruptedError(f"segment {name!r} is not a minikafka buffer pool")
            layout = Layout(slots, max_waiters, poolable)
            if layout.segment_bytes > shm.size:
                raise BufferPoolCorruptedError(f"segment {name!r} is shorter than its layout")
        except BaseException:
            shm.close()
            raise
        return cls._open(shm, layout, owner=False)

    @classmethod
    def _open(cls, shm: SharedMemory, layout: Layout, owner: bool) -> Self:
        self = object.__new__(cls)
        self._shm = shm
        self.name = shm.name
        self.is_owner = owner
        self._layout = layout
        buf = _buf(shm)
        self._w = buf[: layout.state_offset].cast("q")
        self._states = buf[layout.state_offset : layout.state_offset + layout.num_slots]
        self._data = buf[layout.data_offset : layout.segment_bytes]
        self._table = SlotTable(self._w, self._states, layout)
        self._lock = SegmentLock(shm.name)
        self._poolable = layout.poolable_size
        self._total = layout.num_slots * layout.poolable_size
        self._sb = layout.slot_base
        self._fb = layout.free_list_base
        self._num_slots = layout.num_slots
        self._closed = False
        self._finalizer = weakref.finalize(self, _finalize, shm, self._lock, owner, os.getpid())
        return self

    def close(self) -> None:
        """Unmap (and, for the owner, unlink) the segment. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._table.release_views()
        for view in (self._w, self._states, self._data):
            view.release()
        self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def total_bytes(self) -> int:
        return self._total

    @property
    def poolable_size(self) -> int:
        return self._poolable

    def _live_head(self, handle: BufferHandle | Buffer | tuple[int, int, int]) -> int:
        """Slot of a live buffer named by ``handle``; caller holds the lock."""
        slot, size, gen = (int(v) for v in (handle[:3] if isinstance(handle, tuple) else (
            handle.slot, handle.size, handle.generation)))  # fmt: skip
        base = self._sb + slot * SLOT_WORDS
        if not 0 <= slot < self._layout.num_slots:
            raise StaleBufferHandleError(f"slot {slot} outside 0..{self._layout.num_slots - 1}")
        if self._states[slot] not in (ST_HEAD, ST_HEAD_POOLED) or self._w[base + S_GEN] != gen:
            raise StaleBufferHandleError(
                f"slot {slot} generation {gen} is not a live buffer (double free or stale)"
            )
        if self._w[base + S_SIZE] != size:
            raise StaleBufferHandleError(f"slot {slot} holds a buffer of another size")
        return slot

    def _ensure_open(self) -> None:
        if self._closed:
            raise BufferPoolClosedError(f"buffer pool {self.name!r} is closed in this process")

    # cross-process handoff ---------------------------------------------------------
    def attach_buffer(self, handle: BufferHandle | tuple[int, int, int]) -> Buffer:
        """Zero-copy view of a live buffer allocated by any process of this pool."""
        self._ensure_open()
        with self._lock:
            slot = self._live_head(handle)
        gen, size = handle[2], handle[1]
        off = slot * self._poolable
        return Buffer(slot, size, gen, self._data[off : off + size])

    def transfer(self, handle: BufferHandle | Buffer, to_pid: int) -> None:
        """Make ``to_pid`` the owner (the process whose death reclaims the buffer)."""
        start_cs = seg.start_time_cs(to_pid)
        if start_cs < 0:
            raise ValueError(f"no process with pid {to_pid}")
        self._set_owner(handle, seg.owner_token(to_pid, start_cs))

    def claim(self, handle: BufferHandle | Buffer) -> None:
        """Make the calling process the owner of a buffer it received."""
        self._set_owner(handle, IDENTITY[0][2])

    def _set_owner(self, handle: BufferHandle | Buffer, owner: int) -> None:
        self._ensure_open()
        with self._lock:
            self._w[self._sb + self._live_head(handle) * SLOT_WORDS + S_OWNER] = owner

    def owner_of(self, handle: BufferHandle | Buffer) -> int:
        """Pid recorded as the owner of a live buffer."""
        self._ensure_open()
        with self._lock:
            return self._table.owner(self._live_head(handle))[0]

    # dead processes ----------------------------------------------------------------
    def reclaim_dead(self) -> ReclaimReport:
        """Free buffers and drop waiters whose process no longer exists (pid and start
        time compared, zombies count as dead). Any attached process may call it; the
        owner is expected to, periodically. Costs O(num_slots + waiters) plus one
        process lookup per distinct owner, done outside the lock."""
        self._ensure_open()
        table = self._table
        with self._lock:
            owners = {table.owner(s) for s in table.allocated_heads()}
            owners.update((pid, start) for _, pid, start in table.waiters())
        dead = {o for o in owners if not seg.is_alive(*o)}
        if not dead:
            return ReclaimReport(0, 0, 0)
        with self._lock:
            buffers, slots, waiters = table.reclaim(dead)
        return ReclaimReport(buffers, slots * self._poolable, waiters)

    # metrics & invariants ------------------------------------------------------------
    def available_memory(self) -> int:
        """Free-list plus non-pooled free bytes (an unlocked, possibly stale read)."""
        w = self._w
        return (w[H_FL_LEN] + w[seg.H_FREE_SLOTS]) * self._poolable

    def metrics(self) -> BufferPoolMetrics:
        self._ensure_open()
        with self._lock:
            snap = [self._w[i] for i in range(seg.HEADER_WORDS)]
        p = self._poolable
        fl, free = snap[H_FL_LEN], snap[seg.H_FREE_SLOTS]
        wait_ns = snap[seg.H_WAIT_NS]
        return BufferPoolMetrics(
            total_bytes=self._total,
            poolable_size=p,
            available_memory=(fl + free) * p,
            non_pooled_available_bytes=free * p,
            free_list_length=fl,
            allocated_bytes=(self._num_slots - fl - free - snap[seg.H_RESERVED_SLOTS]) * p,
            reserved_bytes=snap[seg.H_RESERVED_SLOTS] * p,
            waiter_count=snap[H_WAITERS],
            wait_time_total_ns=wait_ns,
            wait_ratio=wait_ns / max(1, time.monotonic_ns() - snap[seg.H_CREATED_NS]),
        )

    def check_accounting(self) -> None:
        """Raise BufferPoolCorruptedError unless free list + free + allocated + reserved
        slots make up the pool and every counter matches a recount."""
        self._ensure_open()
        with self._lock:
            self._table.check()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"available={self.available_memory()}"
        return f"BufferPool(name={self.name!r}, total_bytes={self._total}, {state})"

    # allocate / deallocate ---------------------------------------------------------
    def allocate(self, size: int, max_block_ms: float) -> Buffer:
        """A buffer of ``size`` bytes, waiting up to ``max_block_ms`` for memory.

        Raises BufferTooLargeError (size > total_bytes), BufferPoolTimeoutError,
        BufferPoolWaitersFullError, ValueError/TypeError for a bad size or timeout."""
        if size == self._poolable and max_block_ms >= 0 and not self._closed:
            # fast path, inlined (a call costs ~0.1 us): pop the free-list stack
            w, lock = self._w, self._lock
            tlock = lock.thread_lock
            tlock.acquire()
            try:
                flock(lock.fd, LOCK_EX)
                try:
                    n = w[H_FL_LEN] - 1
                    if n >= 0 and w[H_WAITERS] == 0:
                        w[H_FL_LEN] = n
                        slot = w[self._fb + n]
                        self._states[slot] = ST_HEAD_POOLED
                        base = self._sb + slot * SLOT_WORDS  # run 1, size poolable: kept
                        w[base + S_OWNER] = IDENTITY[0][2]
                        gen = w[base + S_GEN] + 1
                        w[base + S_GEN] = gen
                        off = slot * size
                        return Buffer(slot, size, gen, self._data[off : off + size])
                finally:
                    flock(lock.fd, LOCK_UN)
            finally:
                tlock.release()
        return self._allocate_slow(size, max_block_ms)

    def try_allocate(self, size: int) -> Buffer | None:
        """A buffer of ``size`` bytes if the pool has it now and nobody is waiting, else
        None; never waits, never queues.  For optional, larger buffers (a producer batch
        that grows under a backlog): the caller falls back to :meth:`allocate`."""
        self._check_request(size, 0)
        nslots = -(-size // self._poolable)
        with self._lock:
            if self._w[H_WAITERS] != 0:
                return None
            slot = self._table.try_allocate(size, nslots, IDENTITY[0][2])
            return self._buffer(slot, size) if slot >= 0 else None

    def try_allocate_over(self, size: int, movable: Sequence[Buffer]) -> Buffer | None:
        """Like :meth:`try_allocate`, but if no free run is long enough, ``movable`` (live
        one-slot buffers of this process) count as free: the first long enough run of
        free and movable slots is taken, the movable buffers in it absorbed (handles
        stale: release their views, never free them); no byte is written, so what they
        held is still at their slots, for the caller to rearrange (a reader gathering
        its chunks: :mod:`broker.network.request_reader`).  Costs: :meth:`try_allocate`,
        then an O(num_slots + movable) scan under the lock.  Raises
        StaleBufferHandleError or ValueError for an absorbed buffer that is stale, not
        one slot or of another process."""
        self._check_request(size, 0)
        nslots, owner, table, w = -(-size // self._poolable), IDENTITY[0][2], self._table, self._w
        slots = {b.slot: b for b in movable if 0 <= b.slot < self._num_slots}
        with self._lock:
            if w[H_WAITERS] != 0:
                return None
            slot = table.try_allocate(size, nslots, owner)
            if slot < 0 and slots:
                if (slot := table.find_run_over(nslots, set(slots))) < 0:
                    return None
                absorbed = [s for s in range(slot, slot + nslots) if s in slots]
                for s in absorbed:  # only the buffers given up are checked
                    base = self._sb + self._live_head(slots[s]) * SLOT_WORDS
                    if w[base + S_RUN] != 1 or w[base + S_OWNER] != owner:
                        raise ValueError(f"{slots[s]!r} is not a one-slot buffer of this process")
                table.take_run_over(slot, nslots, size, owner, absorbed)
            return self._buffer(slot, size) if slot >= 0 else None

    def _allocate_slow(self, size: int, max_block_ms: float) -> Buffer:
        self._check_request(size, max_block_ms)
        pid, start_cs, owner = IDENTITY[0]
        nslots = -(-size // self._poolable)
        with self._lock:
            if self._w[H_WAITERS] == 0:
                slot = self._table.try_allocate(size, nslots, owner)
                if slot >= 0:
                    return self._buffer(slot, size)
            ticket = self._table.enqueue_waiter(pid, start_cs, size, nslots)
        return self._wait(ticket, size, nslots, max_block_ms)

    def deallocate(self, buffer: Buffer | BufferHandle) -> None:
        """Return a buffer (from any attached process) to the pool and wake the oldest
        waiter. Raises StaleBufferHandleError for a double free or an unknown handle."""
        if isinstance(buffer, Buffer):
            slot, gen = buffer.slot, buffer.generation
            buffer.memory.release()
        else:
            slot, gen = buffer[0], buffer[2]
        if self._closed or not 0 <= slot < self._num_slots:
            self._ensure_open()
            raise StaleBufferHandleError(f"slot {slot} outside 0..{self._num_slots - 1}")
        w, lock = self._w, self._lock
        tlock = lock.thread_lock
        tlock.acquire()
        try:
            flock(lock.fd, LOCK_EX)
            try:
                base = self._sb + slot * SLOT_WORDS
                state = self._states[slot]
                if w[base + S_GEN] != gen or (state != ST_HEAD_POOLED and state != ST_HEAD):
                    raise StaleBufferHandleError(
                        f"slot {slot} generation {gen} is not a live buffer (double free or stale)"
                    )
                if state == ST_HEAD_POOLED:  # inlined SlotTable.fl_push (run/size kept)
                    n = w[H_FL_LEN]
                    w[self._fb + n] = slot
                    w[base + S_FLPOS] = n
                    w[H_FL_LEN] = n + 1
                    self._states[slot] = ST_POOLED
                else:
                    self._table.release_run(slot)
                if w[H_WAITERS]:
                    self._table.signal_head()
            finally:
                flock(lock.fd, LOCK_UN)
        finally:
            tlock.release()

    def _wait(self, ticket: int, size: int, nslots: int, max_block_ms: float) -> Buffer:
        """Poll the doorbell until this waiter is the oldest and memory suffices."""
        w, lock, table = self._w, self._lock, self._table
        owner = IDENTITY[0][2]
        start_ns = time.monotonic_ns()
        deadline_ns = start_ns + int(max_block_ms * 1_000_000)
        seen_seq, next_forced_ns, backoff_s = -1, start_ns, _BACKOFF_MIN_S
        while True:
            now_ns = time.monotonic_ns()
            timed_out = now_ns >= deadline_ns
            rung = w[H_SIGNAL_TICKET] == ticket and w[H_SIGNAL_SEQ] != seen_seq
            if rung or timed_out or now_ns >= next_forced_ns:
                seen_seq, next_forced_ns = w[H_SIGNAL_SEQ], now_ns + _FORCED_CHECK_NS
                with lock:
                    slot = -1
                    if table.head_ticket() == ticket:
                        slot = table.try_allocate(size, nslots, owner)
                        if slot < 0 and nslots > 1 and not timed_out:
                            table.reserve_window(nslots)  # Kafka's partial accumulation
                    if slot >= 0 or timed_out:
                        table.remove_waiter(ticket)  # gives back reservations
                        w[H_WAIT_NS] += time.monotonic_ns() - start_ns
                        table.signal_head()  # the next waiter may be servable now
                        if slot >= 0:
                            return self._buffer(slot, size)
                if timed_out:
                    raise BufferPoolTimeoutError(
                        f"failed to allocate {size} bytes within max_block_ms="
                        f"{max_block_ms:g} (waited {(time.monotonic_ns() - start_ns) / 1e6:.1f}"
                        f" ms; total_bytes={self._total}, available={self.available_memory()})"
                    )
                backoff_s = _BACKOFF_MIN_S
            remaining_s = (deadline_ns - time.monotonic_ns()) / 1e9
            time.sleep(max(0.0, min(backoff_s, remaining_s)))
            backoff_s = min(backoff_s * 2, _BACKOFF_MAX_S)

    def _buffer(self, slot: int, size: int) -> Buffer:
        gen = self._w[self._sb + slot * SLOT_WORDS + S_GEN]
        off = slot * self._poolable
        return Buffer(slot, size, gen, self._data[off : off + size])

    def _check_request(self, size: int, max_block_ms: float) -> None:
        self._ensure_open()
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(f"size must be an int, got {type(size).__name__}")
        if size <= 0:
            raise ValueError(f"size must be > 0, got {size}")
        if size > self._total:
            raise BufferTooLargeError(
                f"requested {size} bytes, larger than the whole pool (total_bytes={self._total})"
            )
        if not max_block_ms >= 0:
            raise ValueError(f"max_block_ms must be >= 0, got {max_block_ms}")


def _buf(shm: SharedMemory) -> memoryview:
    buf = shm.buf
    if buf is None:
        raise BufferPoolClosedError(f"segment {shm.name!r} is closed")
    return buf


def _finalize(shm: SharedMemory, lock: SegmentLock, owner: bool, creator_pid: int) -> None:
    """Close (and for the owner's own process, unlink) the segment; runs once."""
    lock.close()
    try:
        shm.close()
    except BufferError:
        # A Buffer view is still alive: drop our mapping reference (private attributes
        # of SharedMemory, so its __del__ does not retry); it unmaps with the last view.
        shm._mmap = None  # type: ignore[attr-defined]
        os.close(shm._fd)  # type: ignore[attr-defined]
        shm._fd = -1  # type: ignore[attr-defined]
    if owner and os.getpid() == creator_pid:  # never from a forked child
        with contextlib.suppress(FileNotFoundError):
            shm.unlink()
