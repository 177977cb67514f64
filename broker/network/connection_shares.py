"""What the network processes of one broker share: open-connection counts, so new
connections spread evenly, and the budget of pool memory partial request frames may
hold, so that the frames of all of them stay under ``max_partial_request_bytes``.
One process's side of the connection counts, with its own caps
(``max_connections``, per address, internal listener) is :class:`ConnectionQuotas`.

Connection counts.  Every network process accepts from the one listening socket the
supervisor bound (no SO_REUSEPORT, see :mod:`broker.network.supervisor`).  The kernel
wakes every process waiting on that socket and the first to call ``accept`` wins, so on
an idle broker one process can take every connection (clients that connect at start-up
and stay would then all be served by one process while the others idle).  Kafka avoids
this with one acceptor thread that hands connections round-robin to its processors; we
keep the shared socket and let a process step aside instead: before it accepts, a
process compares its own count with the smallest count of the others and, when it holds
more than ``slack`` more, stops accepting for ``yield_ms`` so a lighter process takes
the waiting connections.  When the pause ends and the lightest count has not moved
meanwhile (the lighter process is stopped, busy or dead), it accepts one connection
whatever the counts say, two after the next such pause, then four, up to a full batch: a
stuck peer delays new connections (by ``yield_ms`` per round) and never shuts them out.

Partial frames (:class:`PartialFrameBudget`, issue 30).  A request frame larger than one
pool slot whose bytes are not all in the socket yet can stall half-way; the slots such
frames hold (which ones: :mod:`broker.network.request_reader`) are counted here,
broker-wide, in whole slots of ``buffer_poolable_bytes``: at most ``limit_slots``
(``max_partial_request_bytes`` rounded up).  The last ``reserve_slots``
(``max_request_bytes`` rounded up) of them are kept for one frame at a time, the
*designated* frame: the first frame refused by the rest (the shared part) while no frame
holds the designation.  So frames that each hold part of the shared part and wait for
more cannot lock each other out until their deadline: the designated one always has
room to complete, then the next refused frame takes the designation.  Room here is
budget, not a contiguous run of the pool: a complete frame is gathered into one buffer
over free slots and its network process's chunks (:mod:`broker.network.request_reader`,
"Gathering"), which holds for every frame of one network process but not against the
chunks of another one.  What it costs: a
stalled frame that holds the designation keeps other large frames waiting until its
``request_read_timeout_ms``, and large frames wait while stalled ones fill the budget
(small frames are not counted: see :mod:`broker.network.request_reader`).

Format: a ``memfd`` of little-endian signed 64-bit words, created by the supervisor and
inherited by every network process (the fd number and the slot count go on the command
line): ``slots`` connection counts, one per network process index; ``slots`` counts of
partial-frame slots held, likewise; the designated frame's holder (process index + 1,
0 for none) and the slots it holds.  A process writes only its own connection count;
the supervisor writes a dead process's (``retire``) so no one yields to it, and drops
its partial slots and designation (its buffers are reclaimed with the pool's
``reclaim_dead``).  The network processes read and write the budget words under a POSIX
record lock on the memfd (``lockf``: per process, released if the process dies); the
supervisor's ``retire`` takes no lock (no one else writes what it clears), so the main
process never waits on a network process.

Costs: ``fewest_elsewhere`` reads ``slots`` integers (one ``struct.unpack_from``);
``publish`` writes one.  Aligned 8-byte stores are not torn on the platforms we run on,
and a stale read only makes the spread less even, never refuses a connection.  A budget
step (take or give back slots, take or drop the designation) is two ``fcntl`` calls and
a read of ``slots + 2`` words; a network process does one per ``buffer_poolable_bytes``
of a large frame that trickles in.  Process-safety: one writer per connection count;
readers tolerate stale values; budget words under the lock (``retire`` aside, above).
Thread-safety: one thread per process.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ConnectionQuotas", "ConnectionShares", "PartialFrameBudget", "partial_request_bytes"]

_SLOT = struct.Struct("<q")
_RETIRED = 2**62  # count of a dead process: never the smallest


class ConnectionShares:
    """The shared table: open-connection counts and the partial-frame budget's words
    (see the module docstring)."""

    def __init__(self, fd: int, slots: int) -> None:
        if slots <= 0:
            raise ValueError(f"slots must be positive, got {slots}")
        self._fd = fd
        self.slots = slots
        self._map = mmap.mmap(fd, _table_bytes(slots))
        self._all = struct.Struct(f"<{slots}q")
        self._partial_at = slots * _SLOT.size  # then the designation's holder and slots
        self._budget = struct.Struct(f"<{slots + 2}q")

    @classmethod
    def create(cls, slots: int) -> ConnectionShares:
        """A new zeroed table (supervisor side); pass its fd down with ``pass_fds``."""
        fd = os.memfd_create("minikafka-connection-shares")  # close-on-exec: pass_fds only
        try:
            os.ftruncate(fd, _table_bytes(max(1, slots)))
            return cls(fd, slots)
        except BaseException:
            os.close(fd)
            raise

    def fileno(self) -> int:
        return self._fd

    def publish(self, index: int, count: int) -> None:
        """Record that process ``index`` holds ``count`` open connections."""
        _SLOT.pack_into(self._map, index * _SLOT.size, count)

    def retire(self, index: int) -> None:
        """Process ``index`` is gone: no one should step aside for it, and the partial
        frames it held (freed by the pool's ``reclaim_dead``) no longer count."""
        self.publish(index, _RETIRED)
        # without the lock (the main process never waits on a network process): only the
        # dead process wrote its count, and the designation's words while it held it
        self._set(self.slots + index, 0)
        if self.budget_words()[self.slots] == index + 1:
            self._set(self.slots * 2 + 1, 0)
            self._set(self.slots * 2, 0)

    # the partial-frame budget: words under the lock (see PartialFrameBudget) ---------
    @contextmanager
    def budget_lock(self) -> Iterator[None]:
        fcntl.lockf(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def budget_words(self) -> tuple[int, ...]:
        """Partial slots held per process, then the designation's holder (index + 1,
        0: none) and its slots; read under :meth:`budget_lock` to act on them."""
        return self._budget.unpack_from(self._map, self._partial_at)

    def _set(self, word: int, value: int) -> None:
        _SLOT.pack_into(self._map, word * _SLOT.size, value)

    def fewest_elsewhere(self, index: int) -> int | None:
        """The smallest count among the other processes; None when there are none."""
        counts = list(self._all.unpack_from(self._map, 0))
        del counts[index]
        return min(counts) if counts else None

    def should_yield(self, index: int, count: int, slack: int = 1) -> bool:
        """True when process ``index``, holding ``count`` connections, holds more than
        ``slack`` more than the lightest other process."""
        fewest = self.fewest_elsewhere(index)
        return fewest is not None and count > fewest + slack

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


def _table_bytes(slots: int) -> int:
    return (2 * slots + 2) * _SLOT.size


class PartialFrameBudget:
    """One network process's share of the broker-wide budget for partial frames (see
    the module docstring): ``try_take`` / ``give`` slots, as the shared part or as the
    designated frame, ``try_designate`` / ``release_designation``.

    ``limit_slots`` and ``reserve_slots`` are the same in every network process of a
    broker (``reserve_slots <= limit_slots``).  ``held`` is this process's count and
    ``designated`` whether it holds the designation (for one of its frames).
    """

    def __init__(self, shares: ConnectionShares, index: int, *, limit_slots: int,
                 reserve_slots: int) -> None:
        if not 0 < reserve_slots <= limit_slots:
            raise ValueError(f"need 0 < reserve_slots ({reserve_slots}) <= limit_slots "
                             f"({limit_slots})")
        if not 0 <= index < shares.slots:
            raise ValueError(f"index {index} outside 0..{shares.slots - 1}")
        self.shares, self.index = shares, index
        self.limit_slots, self.reserve_slots = limit_slots, reserve_slots
        self.held = 0
        self.designated = False
        with shares.budget_lock():  # a restarted process starts from nothing
            shares._set(shares.slots + index, 0)

    def _state(self) -> tuple[int, int, int]:
        """(slots held by all processes, holder of the designation, its slots)."""
        words = self.shares.budget_words()
        n = self.shares.slots
        return sum(words[:n]), words[n], words[n + 1]

    def try_take(self, slots: int, *, designated: bool = False) -> bool:
        """Count ``slots`` more for a frame of this process; False (nothing counted) when
        the budget has no room: the shared part (``limit - reserve``) is full, or, for
        the designated frame, the whole budget."""
        shares, n = self.shares, self.shares.slots
        with shares.budget_lock():
            total, holder, held_designated = self._state()
            if designated:
                if holder != self.index + 1:
                    raise RuntimeError("this process does not hold the designation")
                if total + slots > self.limit_slots:
                    return False
                shares._set(2 * n + 1, held_designated + slots)
            elif total - held_designated + slots > self.limit_slots - self.reserve_slots:
                return False
            self.held += slots
            shares._set(n + self.index, self.held)
            return True

    def give(self, slots: int, *, designated: bool = False) -> None:
        """Count ``slots`` fewer (freed, or handed over as a complete request)."""
        shares, n = self.shares, self.shares.slots
        with shares.budget_lock():
            self.held = max(0, self.held - slots)
            shares._set(n + self.index, self.held)
            if designated and self.designated:
                words = shares.budget_words()
                shares._set(2 * n + 1, max(0, words[n + 1] - slots))

    def try_designate(self, holding: int) -> bool:
        """Take the designation for a frame of this process that holds ``holding`` slots
        (they move from the shared part to it); False when another frame holds it."""
        shares, n = self.shares, self.shares.slots
        with shares.budget_lock():
            if shares.budget_words()[n] != 0:
                return False
            shares._set(2 * n, self.index + 1)
            shares._set(2 * n + 1, holding)
        self.designated = True
        return True

    def release_designation(self) -> None:
        """The designated frame is complete or gone; its remaining slots (if any) count
        as the shared part's again."""
        if not self.designated:
            return
        self.designated = False
        shares, n = self.shares, self.shares.slots
        with shares.budget_lock():
            if shares.budget_words()[n] == self.index + 1:
                shares._set(2 * n, 0)
                shares._set(2 * n + 1, 0)

    def total_slots(self) -> int:
        """Slots held by the partial frames of all processes (a locked read)."""
        with self.shares.budget_lock():
            return self._state()[0]


MAX_ACCEPTS_PER_EVENT = 64  # accepts per listener event, and the top of the stuck quota


class ConnectionQuotas:
    """Which accepted connections one network process keeps (Kafka's
    ``ConnectionQuotas``): at most ``max_connections`` on the client listener,
    ``max_connections_per_ip`` (or the address's override) from one address, and
    ``max_internal_connections`` on the internal listener (no per-address caps there);
    and, with ``shares``, when the process steps aside for ``accept_yield_s`` so a
    lighter process takes the next connections (the rule in the module docstring).

    Bookkeeping only: no sockets, times passed in; the process's own count is published
    to ``shares`` on every change.  Not thread-safe (one network process's loop)."""

    def __init__(self, *, index: int, shares: ConnectionShares | None, max_connections: int,
                 max_connections_per_ip: int, per_ip_overrides: dict[str, int],
                 max_internal_connections: int, accept_yield_s: float) -> None:
        self.index = index
        self.shares = shares
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides = per_ip_overrides
        self.max_internal_connections = max_internal_connections
        self.accept_yield_s = accept_yield_s
        self.clients = 0  # open connections accepted on the client listener
        self.internal = 0  # open connections accepted on the internal listener
        self.per_ip: dict[str, int] = {}  # client connections by peer address
        self.paused_until = 0.0  # stepped aside for a lighter process until then
        self._resumed = False  # a pause ended: see accept_round
        self._fewest_at_pause: int | None = None
        self._stuck_quota = 1  # accepts past the check after a pause no one used; doubles
        if shares is not None:
            shares.publish(index, 0)

    def accept_round(self) -> int:
        """Start of a burst of accepts: how many may pass the balance check (none unless
        a pause just ended with the lightest other count unchanged: the lighter process
        took nothing - stopped, busy, dead - so take a few, twice as many each such round,
        so no one is shut out)."""
        resumed, self._resumed = self._resumed, False
        if not resumed or self.shares is None:
            return 0
        if self.shares.fewest_elsewhere(self.index) == self._fewest_at_pause:
            unchecked = self._stuck_quota
            self._stuck_quota = min(2 * self._stuck_quota, MAX_ACCEPTS_PER_EVENT)
            return unchecked
        self._stuck_quota = 1
        return 0

    def step_aside(self, now: float) -> bool:
        """Whether to stop accepting now (until ``paused_until``) for a lighter process."""
        shares = self.shares
        if shares is None or not shares.should_yield(self.index, self.clients):
            return False
        self.paused_until = now + self.accept_yield_s
        self._fewest_at_pause = shares.fewest_elsewhere(self.index)
        return True

    def paused(self, now: float) -> bool:
        """Whether the process still steps aside at ``now`` (a pause that is over ends)."""
        if self.paused_until and now >= self.paused_until:
            self.paused_until = 0.0
            self._resumed = True
        return bool(self.paused_until)

    def admit_client(self, ip: str) -> str | None:
        """Count a client connection from ``ip``, or say why it is refused."""
        if self.clients >= self.max_connections:
            return f"max_connections {self.max_connections} reached"
        count = self.per_ip.get(ip, 0)
        if count >= self.per_ip_overrides.get(ip, self.max_connections_per_ip):
            return "max_connections_per_ip reached"
        self.per_ip[ip] = count + 1
        self.clients += 1
        if self.shares is not None:
            self.shares.publish(self.index, self.clients)
        return None

    def admit_internal(self) -> str | None:
        """Count an internal-listener connection, or say why it is refused."""
        if self.internal >= self.max_internal_connections:
            return f"max_internal_connections {self.max_internal_connections} reached"
        self.internal += 1
        return None

    def release(self, ip: str, *, internal: bool) -> None:
        """A connection counted by ``admit_client``/``admit_internal`` closed."""
        if internal:
            self.internal -= 1
            return
        self.clients -= 1
        left = self.per_ip.get(ip, 1) - 1
        if left > 0:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)
        if self.shares is not None:
            self.shares.publish(self.index, self.clients)


def partial_request_bytes(configured: int, buffer_pool_bytes: int,
                          max_request_bytes: int) -> int:
    """The bound on pool memory held by large request frames still arriving
    (``max_partial_request_bytes``): ``configured`` when set, else a quarter of the
    pool, but at least ``min(2 * max_request_bytes, buffer_pool_bytes // 2)`` so that
    besides the one frame of up to ``max_request_bytes`` kept room for, others can go
    on (see :mod:`broker.network.connection_shares`)."""
    if configured > 0:
        return configured
    return max(buffer_pool_bytes // 4, min(2 * max_request_bytes, buffer_pool_bytes // 2))
