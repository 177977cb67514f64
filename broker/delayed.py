"""Delayed produce (acks=all) and delayed fetch (min bytes / max wait) operations.

Both are parked in a :class:`timer.Purgatory` watched by ``(topic, partition)`` keys.
The broker calls ``check_and_complete(key)`` when something that can complete them
happens on that partition: the high watermark moved (produce, consumer fetch), the log
end offset moved (follower fetch), or the partition lost leadership.

DelayedProduce completes when every pending partition has ``high_watermark >=
required_offset`` (every ISR member has the batch), or has an error (not leader any
more; ISR fell below ``min_insync_replicas`` -> NOT_ENOUGH_REPLICAS_AFTER_APPEND), or on
expiry (``timeout_ms``) with REQUEST_TIMED_OUT for the partitions still pending.

DelayedFetch completes when the bytes now readable for the request reach ``min_bytes``,
when a partition errors (e.g. leadership moved), or at ``max_wait_ms``; its response is
built by a fresh read at completion.

Costs: ``try_complete`` is O(partitions in the request).  Not thread-safe beyond what
DelayedOperation guarantees: everything runs on the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import ProduceResponsePartitionResponse
from replication.partition import Partition
from timer.delayed_operation import DelayedOperation


@dataclass
class ProducePartitionStatus:
    partition: Partition
    required_offset: int  # next offset after the appended batches
    # the partition_responses entry, filled in on completion (the offsets topic's
    # appends give a plain dict)
    result: ProduceResponsePartitionResponse | dict[str, Any]
    leader_epoch: int = -1  # the epoch the batch was appended in
    pending: bool = True


class DelayedProduce(DelayedOperation):
    __slots__ = ("min_insync_replicas", "respond", "statuses")

    def __init__(
        self,
        timeout_ms: int,
        statuses: list[ProducePartitionStatus],
        min_insync_replicas: Callable[[str], int],
        respond: Callable[[], None],
    ) -> None:
        super().__init__(timeout_ms)
        self.statuses = statuses
        self.min_insync_replicas = min_insync_replicas
        self.respond = respond

    def try_complete(self) -> bool:
        waiting = False
        for status in self.statuses:
            if not status.pending:
                continue
            partition = status.partition
            if not partition.is_leader or partition.leader_epoch != status.leader_epoch:
                # deposed (and maybe re-elected) since the append: the batch may have been
                # truncated, so it cannot be acknowledged from this wait
                _fail(status, ErrorCode.NOT_LEADER_OR_FOLLOWER, "leadership moved")
            elif partition.acked_by_isr(status.required_offset):
                if len(partition.isr) < self.min_insync_replicas(partition.topic):
                    _fail(status, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                          f"ISR {partition.isr} below min_insync_replicas")
                else:
                    status.pending = False
            else:
                waiting = True  # (pending still: what any(s.pending ...) found after)
        if waiting:
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        for status in self.statuses:
            if status.pending:
                _fail(status, ErrorCode.REQUEST_TIMED_OUT,
                      "not replicated to the ISR within timeout_ms")
        self.respond()

    def on_expiration(self) -> None:
        pass


def _fail(status: ProducePartitionStatus, code: ErrorCode, message: str) -> None:
    status.pending = False
    status.result["error_code"] = int(code)
    status.result["error_message"] = message
    status.result["base_offset"] = -1


class DelayedFetch(DelayedOperation):
    """Waits until ``bytes_available()`` reaches ``min_bytes`` or an error shows up."""

    __slots__ = ("bytes_available", "complete_fetch", "min_bytes")

    def __init__(
        self,
        max_wait_ms: int,
        min_bytes: int,
        bytes_available: Callable[[], int | None],
        complete_fetch: Callable[[], None],
    ) -> None:
        super().__init__(max_wait_ms)
        self.min_bytes = min_bytes
        self.bytes_available = bytes_available  # None: some partition has an error now
        self.complete_fetch = complete_fetch

    def try_complete(self) -> bool:
        available = self.bytes_available()
        if available is None or available >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.complete_fetch()

    def on_expiration(self) -> None:
        pass
