"""Connections a network process stopped reading until their frame can go on.

A frame cannot go on when the main process already holds ``max_queued_requests``
requests of this process (no queue room), or when the request reader finds no pool
memory for its next bytes.  :class:`Waiters` keeps such connections in two FIFOs:
``small`` (queue room, or one slot for a frame of at most ``buffer_poolable_bytes``) and
``large`` (larger frames waiting for the partial-frame budget or the pool), so small
requests never wait behind large ones.  The frame holding the partial-frame budget's
designation is parked at the front (it must go on for the others to).

Contract: :meth:`Waiters.retry` goes through the small FIFO then the large one, head
first, calling ``go_on`` for each; a connection ``go_on`` parks again stops its FIFO's
turn where it belongs (at the back it keeps its turn: moved to the front), one parked in
the other FIFO lets this one go on.  A connection is ``parked`` exactly while it is in a
FIFO.  The loop decides epoll interest and read deadlines; this is bookkeeping only.

Costs: O(1) per park and per retried head; :meth:`Waiters.discard` is O(parked).
Thread-safety: none; the one thread of its network process.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from broker.network.connection import Connection


class Waiters:
    """The parked connections of one network process (see the module docstring)."""

    def __init__(self) -> None:
        self.small: deque[Connection] = deque()  # queue room / a slot, FIFO
        self.large: deque[Connection] = deque()  # larger frames parked for memory

    def __bool__(self) -> bool:
        return bool(self.small or self.large)

    def park(self, conn: Connection, *, large: bool, first: bool) -> None:
        """At the back of its FIFO, or at the front when ``first`` (designated)."""
        queue = self.large if large else self.small
        conn.parked = True
        if first:
            queue.appendleft(conn)
        else:
            queue.append(conn)

    def retry(self, go_on: Callable[[Connection], bool]) -> None:
        """Go on with parked connections, the small FIFO first, each until its head
        cannot go on (``go_on`` returns False when it parked the connection again)."""
        self._retry(self.small, go_on)
        self._retry(self.large, go_on)

    @staticmethod
    def _retry(queue: deque[Connection], go_on: Callable[[Connection], bool]) -> None:
        while queue:
            conn = queue.popleft()
            conn.parked = False
            if not go_on(conn):  # parked again
                if queue and queue[0] is conn:  # at the front already (designated)
                    return
                if queue and queue[-1] is conn:  # at the back: it keeps its turn
                    queue.pop()
                    queue.appendleft(conn)
                    return
                continue  # moved to the other FIFO

    def discard(self, conn: Connection) -> None:
        """``conn`` is closing: out of its FIFO."""
        if conn.parked:
            conn.parked = False
            for queue in (self.small, self.large):
                if conn in queue:
                    queue.remove(conn)
