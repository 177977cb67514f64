"""Auto commit (Kafka's ``enable.auto.commit``) for both group protocols.

The classic :class:`~clients.consumer.coordinator.ConsumerCoordinator` and the KIP-848
:class:`~clients.consumer.membership.group_member.ConsumerProtocolMembership` commit the
consumer's positions the same way through an :class:`AutoCommit` they build at
construction:

- :meth:`AutoCommit.maybe_commit_async`, from ``poll``: every ``auto_commit_interval_ms``
  the positions of every assigned partition, asynchronously (a failure is logged, a later
  commit supersedes it; STALE_MEMBER_EPOCH is retried by the
  :class:`~clients.consumer.offset_committer.OffsetCommitter`);
- :meth:`AutoCommit.commit_sync`, before partitions are revoked and on close: the
  positions of the partitions named (default: all), waiting up to
  ``request_timeout_ms``; a failure is logged, not raised (the rebalance or close goes
  on, as Kafka's);
- :meth:`AutoCommit.time_to_next_ms`: how long ``poll`` may wait before the next one.

Nothing happens when auto commit is off.  Costs: O(assigned partitions) per commit.
Thread safety: the consumer's poll thread only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable

from clients.consumer.offset_committer import OffsetCommitter
from clients.protocol.errors import MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.types import OffsetAndMetadata

log = logging.getLogger(__name__)


class AutoCommit:
    def __init__(self, offsets: OffsetCommitter, positions: Callable[[], dict[TopicPartition, int]],
                 *, enabled: bool, interval_ms: int, request_timeout_ms: int,
                 clock: Callable[[], float]) -> None:
        self.offsets = offsets
        self.enabled = enabled
        self.interval_ms = interval_ms
        self.request_timeout_ms = request_timeout_ms
        self._positions = positions
        self._clock = clock
        self._next_s = clock() + interval_ms / 1000

    def _offsets(self, partitions: Iterable[TopicPartition] | None
                 ) -> dict[TopicPartition, OffsetAndMetadata]:
        wanted = None if partitions is None else set(partitions)
        return {tp: OffsetAndMetadata(pos) for tp, pos in self._positions().items()
                if wanted is None or tp in wanted}

    def time_to_next_ms(self) -> float:
        """Milliseconds until :meth:`maybe_commit_async` commits (inf when off)."""
        return (self._next_s - self._clock()) * 1000 if self.enabled else math.inf

    def maybe_commit_async(self) -> None:
        if not self.enabled or self._clock() < self._next_s:
            return
        self._next_s = self._clock() + self.interval_ms / 1000
        offsets = self._offsets(None)
        if offsets:
            self.offsets.commit_async(offsets, _log_failed)

    def commit_sync(self, why: str, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Commit the positions of ``partitions`` (None: all) and wait; failures logged."""
        offsets = self._offsets(partitions) if self.enabled else {}
        if not offsets:
            return
        try:
            self.offsets.commit_sync(offsets, self._clock() + self.request_timeout_ms / 1000)
        except MiniKafkaError as e:
            log.warning("group %s: auto commit %s failed: %s", self.offsets.group_id, why, e)


def _log_failed(offsets: dict[TopicPartition, OffsetAndMetadata],
                error: MiniKafkaError | None) -> None:
    if error is not None:
        log.warning("auto commit of %d offsets failed: %s", len(offsets), error)
