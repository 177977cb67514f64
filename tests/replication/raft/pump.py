"""A tiny synchronous driver for replica unit tests: deliver every message at once.

``Pump.run()`` delivers queued messages (FIFO) until none is left, skipping cut links and
stopped voters; ``Pump.advance(ms)`` moves the shared clock and polls every voter.
"""

from __future__ import annotations

import random
from collections import deque

from replication.raft.config import RaftConfig
from replication.raft.messages import RaftMessage, Send
from replication.raft.quorum_state import ElectionState, QuorumRole
from replication.raft.raft_log import MemoryRaftLog
from replication.raft.replica import KRaftReplica
from timer.clock import ManualClock


class ListStore:
    def __init__(self) -> None:
        self.writes: list[ElectionState] = []

    def read(self) -> ElectionState | None:
        return self.writes[-1] if self.writes else None

    def write(self, state: ElectionState) -> None:
        self.writes.append(state)


class Pump:
    def __init__(self, n: int, seed: int = 0, config: RaftConfig | None = None) -> None:
        self.clock = ManualClock(0)
        self.rng = random.Random(seed)
        self.ids = list(range(1, n + 1))
        self.config = config or RaftConfig()
        self.stores = {i: ListStore() for i in self.ids}
        self.logs = {i: MemoryRaftLog() for i in self.ids}
        self.nodes = {i: self._make(i) for i in self.ids}
        self.queue: deque[tuple[int, int, RaftMessage]] = deque()
        self.cut: set[tuple[int, int]] = set()
        self.stopped: set[int] = set()
        self.delivered: list[tuple[int, int, RaftMessage]] = []

    def _make(self, i: int) -> KRaftReplica:
        return KRaftReplica(i, self.ids, self.logs[i], self.stores[i], self.clock,
                            random.Random(self.rng.random()), self.config)

    def restart(self, i: int) -> None:
        self.logs[i] = MemoryRaftLog(self.logs[i].durable_entries())
        self.nodes[i] = self._make(i)
        self.stopped.discard(i)

    def isolate(self, i: int) -> None:
        for j in self.ids:
            if j != i:
                self.cut |= {(i, j), (j, i)}

    def send(self, src: int, sends: list[Send]) -> None:
        self.queue.extend((src, s.destination, s.message) for s in sends)

    def run(self, limit: int = 10_000) -> None:
        for _ in range(limit):
            if not self.queue:
                return
            src, dst, message = self.queue.popleft()
            if (src, dst) in self.cut or dst in self.stopped or src in self.stopped:
                continue
            self.delivered.append((src, dst, message))
            self.send(dst, self.nodes[dst].handle(src, message))
        raise AssertionError("messages keep flowing")

    def advance(self, ms: int, step_ms: int = 10) -> None:
        end = self.clock.now_ms() + ms
        while self.clock.now_ms() < end:
            self.clock.advance(min(step_ms, end - self.clock.now_ms()))
            for i in self.ids:
                if i not in self.stopped:
                    self.send(i, self.nodes[i].poll())
            self.run()

    def leaders(self) -> list[KRaftReplica]:
        return [n for i, n in self.nodes.items()
                if i not in self.stopped and n.role is QuorumRole.LEADER]

    def leader(self) -> KRaftReplica:
        (leader,) = self.leaders()
        return leader
