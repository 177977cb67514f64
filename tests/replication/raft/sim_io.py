"""The simulated world of the KRaft simulation: a network and each voter's disk.

:class:`SimNetwork` delivers :class:`replication.raft.messages.Send` messages after a
random delay (so reordered), drops some, duplicates some, and cuts directed links
(asymmetric partitions).  A message to a crashed incarnation is dropped.

:class:`SimDisk` is what a voter keeps across a crash: the quorum-state written through a
store, the log's durable entries (``MemoryRaftLog.durable_entries``: what was flushed)
and the snapshot they start after (``durable_snapshot``), and the voter's snapshots
(``snapshots``, the contents of a ``MemorySnapshotStore``: durable on return; a
snapshot's state is the committed payloads joined by newlines).
:class:`SimStore` is a correct store (durable on return); :class:`LazyStore` is the
broken one of the breakage tests: the new state becomes durable only at the *next* write,
i.e. the vote is persisted after the answer left.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from replication.raft.messages import Entry, OffsetAndEpoch, RaftMessage
from replication.raft.quorum_state import ElectionState


@dataclass
class SimDisk:
    state: ElectionState | None = None
    log: tuple[Entry, ...] = ()
    log_snapshot: OffsetAndEpoch | None = None  # the durable log starts at its end
    pending_state: ElectionState | None = None  # LazyStore: not yet durable
    snapshots: dict[OffsetAndEpoch, bytes] = field(default_factory=dict)


def snapshot_payloads(data: bytes) -> list[bytes]:
    """The committed payloads a simulated snapshot holds, in offset order."""
    return data.split(b"\n")


class SimStore:
    def __init__(self, disk: SimDisk) -> None:
        self.disk = disk

    def read(self) -> ElectionState | None:
        return self.disk.state

    def write(self, state: ElectionState) -> None:
        self.disk.state = state


class LazyStore(SimStore):
    """BROKEN on purpose: the write becomes durable one write later."""

    def read(self) -> ElectionState | None:
        return self.disk.pending_state or self.disk.state

    def write(self, state: ElectionState) -> None:
        if self.disk.pending_state is not None:
            self.disk.state = self.disk.pending_state
        self.disk.pending_state = state

    @staticmethod
    def crash(disk: SimDisk) -> None:
        disk.pending_state = None


@dataclass
class SimNetwork:
    rng: random.Random
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0
    min_delay_ms: int = 1
    max_delay_ms: int = 20
    cut: set[tuple[int, int]] = field(default_factory=set)  # directed (src, dst)
    _queue: list[tuple[int, int, int, int, int, RaftMessage]] = field(default_factory=list)
    _seq: int = 0

    def send(self, now_ms: int, src: int, src_incarnation: int, dst: int,
             message: RaftMessage) -> None:
        if (src, dst) in self.cut or self.rng.random() < self.drop_probability:
            return
        copies = 2 if self.rng.random() < self.duplicate_probability else 1
        for _ in range(copies):
            self._seq += 1
            at = now_ms + self.rng.randint(self.min_delay_ms, self.max_delay_ms)
            heapq.heappush(self._queue, (at, self._seq, src, src_incarnation, dst, message))

    def next_delivery_ms(self) -> int | None:
        return self._queue[0][0] if self._queue else None

    def due(self, now_ms: int) -> list[tuple[int, int, int, RaftMessage]]:
        """(src, src_incarnation, dst, message) due by ``now_ms``; cut links drop them."""
        out = []
        while self._queue and self._queue[0][0] <= now_ms:
            _, _, src, inc, dst, message = heapq.heappop(self._queue)
            if (src, dst) not in self.cut:
                out.append((src, inc, dst, message))
        return out
