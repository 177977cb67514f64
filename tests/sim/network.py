"""Simulated network for the simulation: drops, random delays (so reordering), cut links.

Messages are delivered in (deliver_at, sequence) order by the cluster loop.  A message to
or from a crashed process incarnation is dropped (its sockets died with it); one to a
paused process is held until it resumes (:meth:`SimNetwork.hold`).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any


@dataclass(order=True, slots=True)
class Message:
    deliver_at: int
    seq: int
    src: int = field(compare=False)
    dst: int = field(compare=False)
    kind: str = field(compare=False)
    body: dict[str, Any] = field(compare=False)
    src_incarnation: int = field(compare=False, default=0)
    dst_incarnation: int = field(compare=False, default=0)


class SimNetwork:
    def __init__(self, rng: random.Random, *, drop_probability: float, min_delay_ms: int,
                 max_delay_ms: int) -> None:
        self.rng = rng
        self.drop_probability = drop_probability
        self.min_delay_ms = min_delay_ms
        self.max_delay_ms = max_delay_ms
        self.cut: set[frozenset[int]] = set()
        # (deliver_at, seq, message): tuples compare faster than the dataclass' __lt__
        self._queue: list[tuple[int, int, Message]] = []
        self._seq = 0
        self.sent = 0
        self.dropped = 0

    def connected(self, a: int, b: int) -> bool:
        return not self.cut or frozenset((a, b)) not in self.cut

    def send(self, now_ms: int, src: int, dst: int, kind: str, body: dict[str, Any],
             src_incarnation: int = 0, dst_incarnation: int = 0) -> None:
        self.sent += 1
        rng, cut = self.rng, self.cut
        if (cut and frozenset((src, dst)) in cut) or rng.random() < self.drop_probability:
            self.dropped += 1  # (not connected, or lost)
            return
        self._seq = seq = self._seq + 1
        # rng.randint(min, max) as it draws: one _randbelow of the width (the same
        # numbers, so every seed's run stays as it was; two calls fewer per message)
        at = now_ms + self.min_delay_ms + rng._randbelow(self.max_delay_ms - self.min_delay_ms + 1)
        heapq.heappush(self._queue, (at, seq, Message(at, seq, src, dst, kind, body,
                                                      src_incarnation, dst_incarnation)))

    def due(self, now_ms: int) -> list[Message]:
        out = []
        queue = self._queue
        while queue and queue[0][0] <= now_ms:
            m = heapq.heappop(queue)[2]
            if self.connected(m.src, m.dst):
                out.append(m)
            else:
                self.dropped += 1
        return out

    def hold(self, message: Message, until_ms: int) -> None:
        """Deliver ``message`` again at ``until_ms`` (its receiver is paused: the bytes
        wait in its socket buffer, in the order they came)."""
        self._seq += 1
        heapq.heappush(self._queue, (until_ms, self._seq, Message(
            until_ms, self._seq, message.src, message.dst, message.kind, message.body,
            message.src_incarnation, message.dst_incarnation)))

    def deliver_at(self, at_ms: int, src: int, dst: int, kind: str,
                   body: dict[str, Any]) -> None:
        """A message that arrives at ``at_ms`` exactly, never dropped (a scenario's
        injected late copy, e.g. a request resent on another connection)."""
        self._seq += 1
        heapq.heappush(self._queue, (at_ms, self._seq, Message(at_ms, self._seq, src, dst,
                                                              kind, body, 0, 0)))

    def partition(self, group: set[int], everyone: set[int]) -> None:
        for a in group:
            for b in everyone - group:
                self.cut.add(frozenset((a, b)))

    def heal(self) -> None:
        self.cut.clear()
