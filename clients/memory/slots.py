"""Slot allocator of the shared buffer pool: free list, first-fit runs, waiter queue.

Every method here assumes the caller holds the segment lock (see
:mod:`clients.memory.segment` for the byte layout); none of them blocks or sleeps.

Memory is ``num_slots`` fixed slots of ``poolable_size`` bytes. A slot is in exactly one
state (one byte per slot in the state map):

- ``ST_POOLED``: on the free list, an array of slot indices used as a stack, each pooled
  slot remembering its position, so push, pop and removal of any slot are O(1) (remove =
  move the last entry into the hole). Allocation of exactly ``poolable_size`` pops it; a
  free of a one-slot ``poolable_size`` buffer pushes it. Kafka's deque is FIFO; our
  order is LIFO, which hands out the most recently used (cache-warm) slot and is not
  observable otherwise. Pooled slots keep run = 1 and size = poolable_size.
- ``ST_FREE``: non-pooled free memory. Any other size is carved from here: ``n =
  ceil(size / poolable_size)`` contiguous slots, first fit, found with a compiled regex
  over the state map (C speed, O(num_slots)). When no run of free slots exists, runs may
  take free-list slots too (Kafka's ``freeUp``: pooled buffers go back to general memory).
- ``ST_HEAD_POOLED`` / ``ST_HEAD`` / ``ST_BODY``: allocated; the head slot records run
  length, size, owner and generation. ``ST_HEAD_POOLED`` marks a one-slot buffer of
  exactly ``poolable_size`` (it returns to the free list), so a free needs one state read.
- a run may also be taken over one-slot buffers the caller names as movable
  (:meth:`SlotTable.find_run_over`, for a reader that rearranges its own buffers
  when free memory is fragmented): they are absorbed into the run, bytes in place.
- ``ST_RESERVED``: accumulated by the head waiter (Kafka's partial ``accumulated``), so
  a large waiting request is not starved; given back on timeout or owner death.

Accounting is in slots (bytes = slots x poolable_size) and exact at every lock release::

    free_list + free + allocated + reserved == num_slots

A buffer smaller than ``poolable_size`` still occupies (and is accounted as) one whole
slot: the internal fragmentation is at most ``poolable_size - 1`` bytes per buffer, and
"available" never promises memory that cannot be handed out. Multi-slot buffers need
contiguous slots, so free memory can be fragmented; the head waiter then reserves the
window of ``n`` slots that is closest to free (numpy sliding sum, O(num_slots)) and
waits for the rest of it.

Allocated slots are derived (``num_slots - free_list - free - reserved``); ``check``
recounts the state map against the counters.

The waiter queue is an array kept in FIFO (ticket) order: append O(1), the head is
entry 0, removal O(waiters) as one memmove.
"""

from __future__ import annotations

import re

import numpy as np

from clients.memory.errors import BufferPoolCorruptedError, BufferPoolWaitersFullError
from clients.memory.segment import (
    H_FL_LEN,
    H_FREE_SLOTS,
    H_NEXT_TICKET,
    H_RESERVED_SLOTS,
    H_SIGNAL_SEQ,
    H_SIGNAL_TICKET,
    H_WAITERS,
    S_FLPOS,
    S_GEN,
    S_OWNER,
    S_RUN,
    S_SIZE,
    SLOT_WORDS,
    ST_BODY,
    ST_FREE,
    ST_HEAD,
    ST_HEAD_POOLED,
    ST_POOLED,
    ST_RESERVED,
    W_PID,
    W_SIZE,
    W_SLOTS,
    W_START,
    W_TICKET,
    WAITER_WORDS,
    Layout,
    split_token,
)

_FREE_RUN: dict[int, re.Pattern[bytes]] = {}
_ANY_RUN: dict[int, re.Pattern[bytes]] = {}


def _free_run(n: int) -> re.Pattern[bytes]:
    pat = _FREE_RUN.get(n)
    if pat is None:
        pat = _FREE_RUN[n] = re.compile(b"\x00{%d}" % n)
    return pat


def _any_run(n: int) -> re.Pattern[bytes]:
    pat = _ANY_RUN.get(n)
    if pat is None:
        pat = _ANY_RUN[n] = re.compile(b"[\x00\x01\x04]{%d}" % n)
    return pat


class SlotTable:
    """Operations on the metadata words and state map of one mapped segment."""

    def __init__(self, words: memoryview, states: memoryview, layout: Layout) -> None:
        self.w = words  # int64 view of header, slot table, waiter table, free list
        self.states = states  # uint8 view of the state map
        self.layout = layout
        self.poolable = layout.poolable_size
        self.sb = layout.slot_base
        self.wb = layout.waiter_base
        self.fb = layout.free_list_base
        self.np_states = np.frombuffer(states, dtype=np.uint8)

    def release_views(self) -> None:
        del self.np_states

    def format(self) -> None:
        """Initialise a fresh segment: every slot non-pooled free, empty free list."""
        self.w[H_FREE_SLOTS] = self.layout.num_slots

    def allocated_slots(self) -> int:
        w = self.w
        return self.layout.num_slots - w[H_FL_LEN] - w[H_FREE_SLOTS] - w[H_RESERVED_SLOTS]

    # free list -------------------------------------------------------------------
    def fl_push(self, slot: int) -> None:
        w = self.w
        n = w[H_FL_LEN]
        base = self.sb + slot * SLOT_WORDS
        w[self.fb + n] = slot
        w[base + S_FLPOS] = n
        w[base + S_RUN] = 1
        w[base + S_SIZE] = self.poolable
        w[H_FL_LEN] = n + 1
        self.states[slot] = ST_POOLED

    def fl_pop(self) -> int:
        w = self.w
        n = w[H_FL_LEN] - 1
        w[H_FL_LEN] = n
        return w[self.fb + n]

    def fl_remove(self, slot: int) -> None:
        """Take ``slot`` out of the free list (its new state is set by the caller)."""
        w = self.w
        n = w[H_FL_LEN] - 1
        hole = w[self.sb + slot * SLOT_WORDS + S_FLPOS]
        last = w[self.fb + n]
        w[self.fb + hole] = last
        w[self.sb + last * SLOT_WORDS + S_FLPOS] = hole
        w[H_FL_LEN] = n

    # allocation ------------------------------------------------------------------
    def try_allocate(self, size: int, nslots: int, owner: int) -> int:
        """Allocate now if possible; return the head slot or -1 (state unchanged)."""
        w = self.w
        if nslots == 1:
            if size == self.poolable and w[H_FL_LEN] > 0:
                slot = self.fl_pop()  # Kafka fast path: free.pollFirst()
                self.states[slot] = ST_FREE
                w[H_FREE_SLOTS] += 1
            elif w[H_FREE_SLOTS] > 0:
                slot = self._first_free()
            elif w[H_FL_LEN] > 0:
                slot = self.fl_pop()  # freeUp: a pooled buffer back to general memory
                self.states[slot] = ST_FREE
                w[H_FREE_SLOTS] += 1
            else:
                return -1
        else:
            match = _free_run(nslots).search(self.states)
            if match is None:
                match = _any_run(nslots).search(self.states)  # freeUp + reservations
            if match is None:
                return -1
            slot = match.start()
        self.take_run(slot, nslots, size, owner)
        if w[H_RESERVED_SLOTS] > 0:
            self.release_reserved()  # leftovers of a window the waiter did not use
        return slot

    def find_run_over(self, nslots: int, movable: set[int]) -> int:
        """First slot of the first run of ``nslots`` slots that are free, pooled or in
        ``movable`` (heads of one-slot buffers the caller may give up), or -1.  Nothing
        changes.  O(num_slots): a copy of the state map and one regex scan."""
        states = bytearray(self.states)
        for s in movable:
            states[s] = ST_FREE
        match = _any_run(nslots).search(states)
        return -1 if match is None else match.start()

    def take_run_over(self, slot: int, nslots: int, size: int, owner: int,
                      absorbed: list[int]) -> None:
        """Take the run found by :meth:`find_run_over`; the one-slot buffers at
        ``absorbed`` (inside it, checked live by the caller) become part of it: their
        handles go stale, the bytes of every slot stay as they were."""
        for s in absorbed:
            self.states[s] = ST_FREE  # allocated before, allocated after
            self.w[H_FREE_SLOTS] += 1
        self.take_run(slot, nslots, size, owner)
        if self.w[H_RESERVED_SLOTS] > 0:
            self.release_reserved()

    def _first_free(self) -> int:
        match = _free_run(1).search(self.states)
        if match is None:
            raise BufferPoolCorruptedError("free slot count > 0 but no free slot in state map")
        return match.start()

    def take_run(self, slot: int, nslots: int, size: int, owner: int) -> None:
        w, states = self.w, self.states
        for s in range(slot, slot + nslots):
            state = states[s]
            if state == ST_POOLED:
                self.fl_remove(s)
            elif state == ST_FREE:
                w[H_FREE_SLOTS] -= 1
            elif state == ST_RESERVED:
                w[H_RESERVED_SLOTS] -= 1
            else:
                raise BufferPoolCorruptedError(f"slot {s} in state {state} taken for a run")
            states[s] = ST_BODY
        pooled = nslots == 1 and size == self.poolable
        states[slot] = ST_HEAD_POOLED if pooled else ST_HEAD
        base = self.sb + slot * SLOT_WORDS
        w[base + S_RUN] = nslots
        w[base + S_SIZE] = size
        w[base + S_OWNER] = owner
        w[base + S_GEN] += 1

    def release_run(self, slot: int) -> int:
        """Free the buffer whose head is ``slot``; return its slot count."""
        if self.states[slot] == ST_HEAD_POOLED:
            self.fl_push(slot)  # pooled size: back on the free list
            return 1
        nslots = self.w[self.sb + slot * SLOT_WORDS + S_RUN]
        self.states[slot : slot + nslots] = bytes(nslots)  # ST_FREE == 0
        self.w[H_FREE_SLOTS] += nslots
        return nslots

    # partial accumulation by the head waiter ---------------------------------------
    def reserve_window(self, nslots: int) -> None:
        """Reserve the free slots of the ``nslots`` window closest to free; give back
        reservations outside it."""
        st = self.np_states
        avail = (st == ST_FREE) | (st == ST_POOLED) | (st == ST_RESERVED)
        sums = np.convolve(avail, np.ones(nslots, dtype=np.int64), mode="valid")
        start = int(np.argmax(sums))
        if self.w[H_RESERVED_SLOTS] > 0:
            self.release_reserved(keep=range(start, start + nslots))
        for s in range(start, start + nslots):
            state = self.states[s]
            if state == ST_POOLED:
                self.fl_remove(s)
            elif state == ST_FREE:
                self.w[H_FREE_SLOTS] -= 1
            else:
                continue
            self.states[s] = ST_RESERVED
            self.w[H_RESERVED_SLOTS] += 1

    def release_reserved(self, keep: range = range(0)) -> None:
        for s in np.flatnonzero(self.np_states == ST_RESERVED).tolist():
            if s not in keep:
                self.states[s] = ST_FREE
                self.w[H_RESERVED_SLOTS] -= 1
                self.w[H_FREE_SLOTS] += 1

    # waiter queue ------------------------------------------------------------------
    def enqueue_waiter(self, pid: int, start_cs: int, size: int, nslots: int) -> int:
        w = self.w
        count = w[H_WAITERS]
        if count >= self.layout.max_waiters:
            raise BufferPoolWaitersFullError(
                f"{count} processes/threads already wait for memory "
                f"(max_waiters={self.layout.max_waiters}); request of {size} bytes refused"
            )
        ticket = w[H_NEXT_TICKET]
        w[H_NEXT_TICKET] = ticket + 1
        base = self.wb + count * WAITER_WORDS
        w[base + W_TICKET] = ticket
        w[base + W_PID] = pid
        w[base + W_START] = start_cs
        w[base + W_SIZE] = size
        w[base + W_SLOTS] = nslots
        w[H_WAITERS] = count + 1
        return ticket

    def head_ticket(self) -> int:
        return self.w[self.wb + W_TICKET] if self.w[H_WAITERS] > 0 else -1

    def remove_waiter(self, ticket: int) -> bool:
        """Remove a waiter; if it was the head, give back its reservations. Returns
        whether it was found."""
        w, wb = self.w, self.wb
        count = w[H_WAITERS]
        for i in range(count):
            if w[wb + i * WAITER_WORDS + W_TICKET] == ticket:
                break
        else:
            return False
        if i == 0 and w[H_RESERVED_SLOTS] > 0:
            self.release_reserved()
        lo, hi = wb + i * WAITER_WORDS, wb + count * WAITER_WORDS
        w[lo : hi - WAITER_WORDS] = w[lo + WAITER_WORDS : hi]
        w[H_WAITERS] = count - 1
        return True

    def waiters(self) -> list[tuple[int, int, int]]:
        """(ticket, pid, start_cs) of every waiter, oldest first."""
        w, wb = self.w, self.wb
        return [
            (w[b + W_TICKET], w[b + W_PID], w[b + W_START])
            for b in (wb + i * WAITER_WORDS for i in range(w[H_WAITERS]))
        ]

    def signal_head(self) -> None:
        """Ring the oldest waiter's doorbell (it polls ticket + sequence unlocked)."""
        w = self.w
        if w[H_WAITERS] > 0:
            w[H_SIGNAL_TICKET] = w[self.wb + W_TICKET]
            w[H_SIGNAL_SEQ] += 1

    # owners ------------------------------------------------------------------------
    def allocated_heads(self) -> list[int]:
        st = self.np_states
        return np.flatnonzero((st == ST_HEAD) | (st == ST_HEAD_POOLED)).tolist()  # type: ignore[no-any-return]

    def owner(self, slot: int) -> tuple[int, int]:
        """(pid, start_cs) recorded for the buffer whose head is ``slot``."""
        return split_token(self.w[self.sb + slot * SLOT_WORDS + S_OWNER])

    def reclaim(self, dead: set[tuple[int, int]]) -> tuple[int, int, int]:
        """Free buffers and drop waiters owned by ``dead`` (pid, start_cs) processes;
        returns (buffers, slots, waiters) given back."""
        buffers = slots = waiters = 0
        for slot in self.allocated_heads():
            if self.owner(slot) in dead:
                slots += self.release_run(slot)
                buffers += 1
        for ticket, pid, start in self.waiters():
            if (pid, start) in dead and self.remove_waiter(ticket):
                waiters += 1
        self.signal_head()
        return buffers, slots, waiters

    # invariants --------------------------------------------------------------------
    def check(self) -> None:
        """Recount the state map against the counters; walk the free list and runs."""
        w, st, n = self.w, self.np_states, self.layout.num_slots
        counts = np.bincount(st, minlength=6)
        if counts.size > 6:
            raise BufferPoolCorruptedError(f"unknown slot state in map: {counts.size - 1}")
        for what, real, counter in (
            ("free_list", counts[ST_POOLED], w[H_FL_LEN]),
            ("free", counts[ST_FREE], w[H_FREE_SLOTS]),
            ("reserved", counts[ST_RESERVED], w[H_RESERVED_SLOTS]),
            ("allocated", counts[ST_HEAD] + counts[ST_HEAD_POOLED] + counts[ST_BODY],
             self.allocated_slots()),
        ):  # fmt: skip
            if int(real) != counter:
                raise BufferPoolCorruptedError(
                    f"{what}: {int(real)} slots in map, counter {counter}"
                )
        pooled = {w[self.fb + i] for i in range(w[H_FL_LEN])}
        if len(pooled) != w[H_FL_LEN] or any(not 0 <= s < n or st[s] != ST_POOLED for s in pooled):
            raise BufferPoolCorruptedError("free list holds a duplicate or a slot not pooled")
        for i in range(w[H_FL_LEN]):
            base = self.sb + w[self.fb + i] * SLOT_WORDS
            if w[base + S_FLPOS] != i or w[base + S_RUN] != 1 or w[base + S_SIZE] != self.poolable:
                raise BufferPoolCorruptedError(f"pooled slot {w[self.fb + i]} has a bad record")
        body = 0
        for head in self.allocated_heads():
            base = self.sb + head * SLOT_WORDS
            run, size = w[base + S_RUN], w[base + S_SIZE]
            if not (run - 1) * self.poolable < size <= run * self.poolable or head + run > n:
                raise BufferPoolCorruptedError(f"buffer at slot {head}: run {run}, size {size}")
            if any(st[s] != ST_BODY for s in range(head + 1, head + run)):
                raise BufferPoolCorruptedError(f"buffer at slot {head} has a broken run")
            body += run - 1
        if body != counts[ST_BODY]:
            raise BufferPoolCorruptedError(f"{int(counts[ST_BODY]) - body} slots belong to no run")
