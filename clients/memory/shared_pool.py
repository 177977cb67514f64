"""Lifecycle, handoff, reclaim and metrics of the shared buffer pool (base class).

:class:`SharedPoolBase` maps one segment (layout in :mod:`clients.memory.segment`) and
does everything except allocation, which :class:`clients.memory.buffer_pool.BufferPool` adds:

- ``create`` (owner: formats the segment, unlinks it on close, on garbage collection,
  at interpreter exit, and - through Python's resource tracker - if the owner is
  SIGKILLed) and ``attach`` (any process, by name; never unlinks; not registered with
  the resource tracker, so its exit neither unlinks nor warns).
- ``attach_buffer(handle)``: zero-copy view of a buffer another process allocated.
- ``transfer`` / ``claim``: move the ownership used by ``reclaim_dead``.
- ``reclaim_dead``: frees buffers and drops waiters of processes that no longer exist.
- ``metrics`` / ``check_accounting``.

Costs: every method here takes the segment lock once (~1.4 us) and is O(1), except
``reclaim_dead`` and ``check_accounting`` (O(num_slots + waiters), plus one process
lookup per distinct owner for reclaim, done outside the lock).

Thread/process safety: as for the pool: all shared state is read and written under the
segment lock; ``available_memory`` alone is an unlocked (possibly stale) read.
"""

from __future__ import annotations

import contextlib
import os
import time
import weakref
from multiprocessing.shared_memory import SharedMemory
from typing import Self

from clients.memory import segment as seg
from clients.memory.errors import (
    BufferPoolClosedError,
    BufferPoolCorruptedError,
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
    H_SIGNAL_TICKET,
    H_WAITERS,
    IDENTITY,
    S_GEN,
    S_OWNER,
    S_SIZE,
    SLOT_WORDS,
    ST_HEAD,
    ST_HEAD_POOLED,
    Layout,
    SegmentLock,
)
from clients.memory.slots import SlotTable


class SharedPoolBase:
    """A mapped pool segment; see :class:`clients.memory.buffer_pool.BufferPool`."""

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
