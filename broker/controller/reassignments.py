"""Partition reassignments (Kafka's AlterPartitionReassignments, KIP-455): move a
partition's replicas to a target set in two steps, never losing an acknowledged record.

Steps (Kafka's):

1. :meth:`Reassignments.alter` with a target: the partition's replicas become
   ``target + (current - target)`` (the adding replicas join; leader, ISR and leader
   epoch unchanged).  Brokers host the new replicas as followers (each broker applies
   its assignment from the image, :mod:`broker.metadata.replica_plan`), fetch from the
   leader and join the ISR through the leader's AlterPartition, as any follower does.
2. :meth:`Reassignments.advance` (after every ISR change and on every tick): once every
   target replica is in the ISR, the replicas become the target, the ISR keeps its
   target members, and when the leader is not a target replica leadership moves to the
   first target replica that is in the ISR, live and not marked cut by log recovery
   (leader epoch + 1).  The removed replicas' brokers delete them.  Since the new
   leader was in the ISR, it holds every acknowledged record.  With no such replica
   (or the partition offline) the step waits.

A target equal to the current replicas (with nothing in flight) changes nothing; a new
target for a partition in flight replaces the old one (replicas not in the new target
are removed at its completion).  Cancelling (``replicas`` null) sets the target back to
the replicas the partition had before the first step (completed the same way, so
whatever joined meanwhile leaves once the original replicas are all in the ISR); with
nothing in flight: NO_REASSIGNMENT_IN_PROGRESS.  A target must be as many distinct
registered brokers as the topic's replication factor (else INVALID_REPLICA_ASSIGNMENT:
no replication factor changes, Kafka's ``allow_replication_factor_change`` false); an
unknown partition: UNKNOWN_TOPIC_OR_PARTITION.  The image accepts more replicas than the
replication factor only for this (:mod:`broker.metadata.image`).

Difference from Kafka: the in-flight targets live in this controller's memory (Kafka
records adding/removing replicas in its PartitionRecord): a controller restart forgets
them and leaves each such partition with its expanded replica set (every replica
replicating, nothing lost); reassign it again to finish.

Costs: O(partitions in flight) per :meth:`advance`.  Thread-safety: none; the
controller's event loop, with its state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from broker.controller.results import PartitionResult, Rejected
from broker.metadata.image import MetadataImage, PartitionRegistration
from broker.metadata.records import NO_LEADER, MetadataRecord, PartitionRecord
from clients.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

__all__ = ["Reassignment", "Reassignments"]


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A partition in flight: where it goes and where it came from."""

    target: tuple[int, ...]
    original: tuple[int, ...]


class Reassignments:
    """The partitions being reassigned, over the controller state's image."""

    def __init__(self, image: MetadataImage, alive: Callable[[int], bool],
                 cut_of: Callable[[tuple[str, int]], Collection[int]],
                 emit: Callable[[MetadataRecord], None]) -> None:
        self._image = image
        self._alive = alive
        self._cut_of = cut_of
        self._emit = emit
        self.in_flight: dict[tuple[str, int], Reassignment] = {}

    def alter_all(self, changes: Sequence[tuple[str, int, Sequence[int] | None]]
                  ) -> list[PartitionResult]:
        """:meth:`alter` for each ``(topic, index, target)``; each partition's result."""
        results = []
        for topic, index, target in changes:
            try:
                self.alter(topic, index, target)
                results.append(PartitionResult(topic, index, ErrorCode.NONE))
            except Rejected as e:
                results.append(PartitionResult(topic, index, e.code, e.message))
        return results

    def alter(self, topic: str, index: int, target: Sequence[int] | None) -> None:
        """Start, replace or (``target`` None) cancel one partition's reassignment;
        Rejected with Kafka's code when it cannot."""
        key, where = (topic, index), f"{topic}-{index}"
        s = self._image.partition(topic, index)
        if s is None:
            raise Rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{where} does not exist")
        flying = self.in_flight.get(key)
        if target is None:
            if flying is None:
                raise Rejected(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                               f"{where} has no reassignment in progress")
            wanted = flying.original
        else:
            wanted = tuple(target)
            unknown = [b for b in wanted if b not in self._image.brokers]
            rf = self._image.topics[topic].replication_factor
            if len(wanted) != rf or len(set(wanted)) != len(wanted) or unknown:
                raise Rejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"{where}: target replicas {list(wanted)} must be {rf} "
                               f"distinct registered brokers (unknown: {unknown})")
        if flying is None and wanted == s.replicas:
            return
        self.in_flight[key] = Reassignment(wanted, s.replicas if flying is None
                                           else flying.original)
        full = wanted + tuple(b for b in s.replicas if b not in wanted)
        if full != s.replicas:
            log.info("%s-%d: reassignment to %s started: replicas %s -> %s", topic, index,
                     list(wanted), list(s.replicas), list(full))
            self._emit(PartitionRecord(topic, index, full, s.leader, s.leader_epoch, s.isr,
                                       s.partition_epoch + 1, s.unclean_elected))
        self.advance()

    def advance(self) -> None:
        """Complete every reassignment whose target replicas are all in the ISR."""
        for key, flying in list(self.in_flight.items()):
            s = self._image.partition(*key)
            if s is None:  # the topic was deleted
                del self.in_flight[key]
                continue
            if s.leader == NO_LEADER or not set(flying.target) <= set(s.isr):
                continue
            leader = self._leader_after(key, s, flying.target)
            if leader is None:
                continue
            isr = tuple(b for b in s.isr if b in flying.target)
            log.info("%s-%d: reassignment complete: replicas %s, leader %d -> %d, isr %s",
                     key[0], key[1], list(flying.target), s.leader, leader, list(isr))
            self._emit(PartitionRecord(
                key[0], key[1], flying.target, leader,
                s.leader_epoch + (leader != s.leader), isr, s.partition_epoch + 1,
                s.unclean_elected))
            del self.in_flight[key]

    def _leader_after(self, key: tuple[str, int], s: PartitionRegistration,
                      target: tuple[int, ...]) -> int | None:
        if s.leader in target:
            return s.leader
        cut = self._cut_of(key)
        return next((b for b in target if b in s.isr and self._alive(b) and b not in cut),
                    None)
