"""Value types of the shared buffer pool: buffers, handles, metrics, config checks.

A :class:`BufferHandle` is what crosses a process boundary; as a plain tuple it pickles
or msgpacks to three integers:

| field      | type  | meaning                                                       |
|------------|-------|---------------------------------------------------------------|
| slot       | int   | index of the buffer's first slot in the segment               |
| size       | int   | requested size in bytes (the view's length)                   |
| generation | int   | allocation count of that slot; a stale handle does not match  |

The buffer's bytes are at ``data_offset + slot * poolable_size`` in the segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from clients.memory.segment import MAX_SLOTS, MAX_WAITERS
from clients.protocol.errors import InvalidConfigError


class BufferHandle(NamedTuple):
    """Small, picklable reference to a live buffer of a pool."""

    slot: int
    size: int
    generation: int


class Buffer:
    """An allocated buffer: ``memory`` is a writable view of exactly ``size`` bytes of
    the shared segment (zero copy). Send ``handle`` to another process, not the buffer.
    Not thread-safe on its own; hand it to one thread at a time."""

    __slots__ = ("generation", "memory", "size", "slot")

    def __init__(self, slot: int, size: int, generation: int, memory: memoryview) -> None:
        self.slot = slot
        self.size = size
        self.generation = generation
        self.memory = memory

    @property
    def handle(self) -> BufferHandle:
        return BufferHandle(self.slot, self.size, self.generation)

    def release(self) -> None:
        """Drop this object's view of the segment (does not free the buffer)."""
        self.memory.release()

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("a Buffer cannot be pickled: send buffer.handle and attach_buffer() it")

    def __repr__(self) -> str:
        return f"Buffer(slot={self.slot}, size={self.size}, generation={self.generation})"


@dataclass(frozen=True)
class BufferPoolMetrics:
    """Snapshot of a pool's accounting (all byte figures are whole slots)."""

    total_bytes: int
    poolable_size: int
    available_memory: int  # free list + non-pooled free (Kafka availableMemory)
    non_pooled_available_bytes: int  # Kafka unallocatedMemory
    free_list_length: int
    allocated_bytes: int  # slots held by live buffers
    reserved_bytes: int  # accumulated by the oldest waiter, not yet a buffer
    waiter_count: int  # Kafka queued()
    wait_time_total_ns: int  # bufferpool-wait-time-total, summed over all waiters
    wait_ratio: float  # wait time / pool lifetime (can exceed 1 with several waiters)


@dataclass(frozen=True)
class ReclaimReport:
    """What :meth:`BufferPool.reclaim_dead` gave back."""

    buffers: int
    bytes: int
    waiters: int


def validate_config(total_bytes: int, poolable_size: int, max_waiters: int) -> None:
    """Raise InvalidConfigError naming the first bad setting."""
    for label, value in (
        ("total_bytes", total_bytes),
        ("poolable_size", poolable_size),
        ("max_waiters", max_waiters),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InvalidConfigError(f"{label} must be a positive int, got {value!r}")
    if poolable_size > total_bytes:
        raise InvalidConfigError(f"poolable_size={poolable_size} exceeds total_bytes={total_bytes}")
    if total_bytes % poolable_size:
        raise InvalidConfigError(
            f"total_bytes={total_bytes} must be a multiple of poolable_size={poolable_size}"
        )
    if total_bytes // poolable_size > MAX_SLOTS:
        raise InvalidConfigError(
            f"total_bytes / poolable_size = {total_bytes // poolable_size} slots, max {MAX_SLOTS}"
        )
    if max_waiters > MAX_WAITERS:
        raise InvalidConfigError(f"max_waiters={max_waiters} above the bound {MAX_WAITERS}")
