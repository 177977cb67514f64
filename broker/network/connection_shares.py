"""Open-connection counts the network processes share, so new connections spread evenly.

Every network process accepts from the one listening socket the supervisor bound (no
SO_REUSEPORT, see :mod:`broker.network.supervisor`).  The kernel wakes every process
waiting on that socket and the first to call ``accept`` wins, so on an idle broker one
process can take every connection (clients that connect at start-up and stay would then
all be served by one process while the others idle).  Kafka avoids this with one acceptor
thread that hands connections round-robin to its processors; we keep the shared socket
and let a process step aside instead: before it accepts, a process compares its own count
with the smallest count of the others and, when it holds more than ``slack`` more, stops
accepting for ``yield_ms`` so a lighter process takes the waiting connections.  When the
pause ends and the lightest count has not moved meanwhile (the lighter process is
stopped, busy or dead), it accepts one connection whatever the counts say, two after the
next such pause, then four, up to a full batch: a stuck peer delays new connections
(by ``yield_ms`` per round) and never shuts them out.

Format: a ``memfd`` of ``slots`` little-endian signed 64-bit counts, one per network
process index, created by the supervisor and inherited by every network process (the fd
number and the slot count go on the command line).  A process writes only its own slot;
the supervisor writes a dead process's slot (``retire``) so no one yields to it.

Costs: ``fewest_elsewhere`` reads ``slots`` integers (one ``struct.unpack_from``);
``publish`` writes one.  Aligned 8-byte stores are not torn on the platforms we run on,
and a stale read only makes the spread less even, never refuses a connection.
Process-safety: one writer per slot; readers tolerate stale values.  Thread-safety: one
thread per process.
"""

from __future__ import annotations

import mmap
import os
import struct

__all__ = ["ConnectionShares"]

_SLOT = struct.Struct("<q")
_RETIRED = 2**62  # count of a dead process: never the smallest


class ConnectionShares:
    """The shared table of open-connection counts (see the module docstring)."""

    def __init__(self, fd: int, slots: int) -> None:
        if slots <= 0:
            raise ValueError(f"slots must be positive, got {slots}")
        self._fd = fd
        self.slots = slots
        self._map = mmap.mmap(fd, slots * _SLOT.size)
        self._all = struct.Struct(f"<{slots}q")

    @classmethod
    def create(cls, slots: int) -> ConnectionShares:
        """A new zeroed table (supervisor side); pass its fd down with ``pass_fds``."""
        fd = os.memfd_create("minikafka-connection-shares")  # close-on-exec: pass_fds only
        try:
            os.ftruncate(fd, max(1, slots) * _SLOT.size)
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
        """Process ``index`` is gone: no one should step aside for it."""
        self.publish(index, _RETIRED)

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
