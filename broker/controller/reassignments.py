"""Partition reassignments (Kafka's AlterPartitionReassignments, KIP-455): move a
partition's replicas to a target set in two steps, never losing an acknowledged record.

Steps (Kafka's):

1. :meth:`Reassignments.alter` with a target: one partition record makes the replicas
   ``target + (current - target)`` and records the reassignment in the partition's own
   state, under Kafka's names: ``adding_replicas`` (replicas the partition did not have
   before the first step) and ``removing_replicas`` (those not in the target); leader,
   ISR and leader epoch unchanged.  Brokers host the new replicas as followers (each
   broker applies its assignment from the image, :mod:`broker.metadata.replica_plan`),
   fetch from the leader and join the ISR through the leader's AlterPartition, as any
   follower does.
2. :meth:`Reassignments.advance` (after every ISR change and on every tick): once every
   target replica (``replicas - removing_replicas``) is in the ISR, the replicas become
   the target and both lists empty, the ISR keeps its target members, and when the
   leader is not a target replica leadership moves to the first target replica that is
   in the ISR, live and not marked cut by log recovery (leader epoch + 1).  The removed
   replicas' brokers delete them.  Since the new leader was in the ISR, it holds every
   acknowledged record.  With no such replica (or the partition offline) the step waits.

The reassignment in flight is the partition's record in the metadata log, written (and
fsync'd by the adapter) before anything acts on it, and in snapshots (Kafka's
PartitionRecord carries the same two lists): a restarted controller reads it back with
the image, lists it, completes it when the target is in sync and cancels it, exactly
as the controller that started it would.  Nothing about it lives only in memory; the
image keeps the set of partitions in flight (:meth:`MetadataImage.reassigning`).  A
metadata log written before these fields existed reads as nothing in flight.

A target equal to the current replicas (with nothing in flight) changes nothing.  A new
target for a partition in flight replaces the old one, keeping the original replicas
(``replicas - adding_replicas``); a replica the old target added and the new one drops
stays until completion, listed as both adding and removing (Kafka's definitions:
neither original nor target).  Cancelling (``replicas`` null) sets the target back to
the original replicas (in the order they have in the in-flight replica list, as Kafka's
revert keeps it) and completes the same way, so whatever joined meanwhile leaves once
the original replicas are all in the ISR: at once when they are (the usual case: the
leaving replicas keep replicating), else when they are back in sync (Kafka reverts at
once and drops the adding replicas from the ISR; this never leaves the partition with
an ISR that lacks acknowledged records).  With nothing in flight:
NO_REASSIGNMENT_IN_PROGRESS.  A target must be as many distinct registered brokers as
the topic's replication factor (else INVALID_REPLICA_ASSIGNMENT: no replication factor
changes, Kafka's ``allow_replication_factor_change`` false); an unknown partition:
UNKNOWN_TOPIC_OR_PARTITION.  The image accepts more replicas than the replication
factor only for this (:mod:`broker.metadata.image`).  Every other path that rewrites a
partition record (elections, ISR changes) carries the two lists over unchanged.

Costs: O(partitions in flight) per :meth:`advance` (the image's set, not a scan);
:attr:`Reassignments.in_flight` the same.  Thread-safety: none; the controller's event
loop, with its state.
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
    """A partition in flight: where it goes and where it came from (read from its
    registration: ``replicas`` minus ``removing_replicas`` / ``adding_replicas``)."""

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

    @property
    def in_flight(self) -> dict[tuple[str, int], Reassignment]:
        """Every partition in flight, from the image."""
        return {(t, i): Reassignment(s.target_replicas, s.original_replicas)
                for t, i, s in self._image.reassigning()}

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
        where = f"{topic}-{index}"
        s = self._image.partition(topic, index)
        if s is None:
            raise Rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{where} does not exist")
        original = s.original_replicas
        if target is None:
            if not s.is_reassigning:
                raise Rejected(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                               f"{where} has no reassignment in progress")
            wanted = original
        else:
            wanted = tuple(target)
            unknown = [b for b in wanted if b not in self._image.brokers]
            rf = self._image.topics[topic].replication_factor
            if len(wanted) != rf or len(set(wanted)) != len(wanted) or unknown:
                raise Rejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"{where}: target replicas {list(wanted)} must be {rf} "
                               f"distinct registered brokers (unknown: {unknown})")
        if not s.is_reassigning and wanted == s.replicas:
            return
        full = wanted + tuple(b for b in s.replicas if b not in wanted)
        adding = tuple(b for b in full if b not in original)
        removing = tuple(b for b in full if b not in wanted)
        if (full, adding, removing) != (s.replicas, s.adding_replicas, s.removing_replicas):
            log.info("%s: reassignment to %s %s: replicas %s -> %s (adding %s, removing %s)",
                     where, list(wanted), "cancelled" if target is None else "started",
                     list(s.replicas), list(full), list(adding), list(removing))
            self._emit(PartitionRecord(topic, index, full, s.leader, s.leader_epoch, s.isr,
                                       s.partition_epoch + 1, s.unclean_elected, adding,
                                       removing))
        self.advance()

    def advance(self) -> None:
        """Complete every reassignment whose target replicas are all in the ISR."""
        for topic, index, s in list(self._image.reassigning()):
            target = s.target_replicas
            if s.leader == NO_LEADER or not set(target) <= set(s.isr):
                continue
            leader = self._leader_after((topic, index), s, target)
            if leader is None:
                continue
            isr = tuple(b for b in s.isr if b in target)
            log.info("%s-%d: reassignment complete: replicas %s, leader %d -> %d, isr %s",
                     topic, index, list(target), s.leader, leader, list(isr))
            self._emit(PartitionRecord(
                topic, index, target, leader, s.leader_epoch + (leader != s.leader), isr,
                s.partition_epoch + 1, s.unclean_elected))

    def _leader_after(self, key: tuple[str, int], s: PartitionRegistration,
                      target: tuple[int, ...]) -> int | None:
        if s.leader in target:
            return s.leader
        cut = self._cut_of(key)
        return next((b for b in target if b in s.isr and self._alive(b) and b not in cut),
                    None)
