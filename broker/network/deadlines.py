"""The time limits of a network process's connections (Kafka's idle-expiry manager,
plus the request read timeout).

:class:`ConnectionDeadlines` decides which connections have run out of time; the loop
closes them.  Three limits:

- a frame started more than ``request_read_timeout_ms`` ago and not complete
  (``Connection.frame_deadline``, started by :meth:`ConnectionDeadlines.start_frame`
  when the first bytes of a frame arrive, kept while the frame goes on - also while the
  connection is parked for memory; the loop clears it while a frame waits for queue
  room: the main process is behind then, not the client);
- no request with the main process, no frame started and no event (read, write,
  answer: ``Connection.active_at``) for ``connections_max_idle_ms``: idle - also a
  connection whose response is stuck because the client does not read it;
- a connection on the internal listener that sent nothing within
  ``request_read_timeout_ms`` of its accept (brokers speak first).

They are checked by a sweep every ``sweep_interval_s``: a tenth of the smaller of the
two timeouts, within 10 ms..1 s (so a limit is enforced up to that late).

Costs: O(connections) per sweep, O(1) per frame.  Thread-safety: none; the one thread
of its network process.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.network.channel.codec import INTERNAL_CONN_ID_BASE
from broker.network.connection import Connection


class ConnectionDeadlines:
    """The limits above, on the loop's monotonic clock (seconds)."""

    def __init__(self, *, connections_max_idle_ms: int, request_read_timeout_ms: int,
                 now: float) -> None:
        self.idle_s = connections_max_idle_ms / 1000.0
        self.read_timeout_s = request_read_timeout_ms / 1000.0
        self.sweep_interval_s = min(1.0, max(0.01, min(self.idle_s, self.read_timeout_s) / 10))
        self.next_sweep = now + self.sweep_interval_s

    def start_frame(self, conn: Connection, now: float) -> None:
        """``conn`` has a frame started: its read deadline runs from now (unless it runs
        already)."""
        if conn.frame_deadline == 0.0:
            conn.frame_deadline = now + self.read_timeout_s

    def due(self, now: float) -> bool:
        return now >= self.next_sweep

    def expired(self, conns: Iterable[Connection], now: float) -> list[tuple[Connection, str]]:
        """The connections out of time at ``now``, each with the reason to close it;
        the next sweep is one interval away."""
        self.next_sweep = now + self.sweep_interval_s
        idle_before = now - self.idle_s
        silent_before = now - self.read_timeout_s
        out: list[tuple[Connection, str]] = []
        for conn in conns:
            if conn.frame_deadline:
                if now > conn.frame_deadline:
                    out.append((conn, "request read timeout"))
            elif conn.active_at < idle_before and not conn.pending and not conn.parked:
                out.append((conn, "idle"))  # incl. a response the client does not read
            elif (conn.conn_id >= INTERNAL_CONN_ID_BASE and not conn.known
                  and conn.active_at < silent_before):
                # a place on the internal listener held without a word: brokers speak first
                out.append((conn, "silent on the internal listener"))
        return out
