"""Damaged ranges (the scrubber's and log recovery's) and their repair from a replica.

What each damaged range leads to is :func:`replication.damage.on_damage_found`'s rule:
marked at once, then the segment is rewritten in place from the leader's copy (the
replica fetcher's repair Fetches), keeping every later segment: they may hold the only
intact copy of a range another replica finds damaged next.  A leader with other ISR
members first resigns (AlterPartition with the ISR without itself, through
:class:`~broker.replica.isr_proposals.IsrProposals`) and repairs once it follows; alone in
its ISR (or a partition not hosted) the damage is logged and kept in
``log_manager.scrubber.findings``: nobody holds a good copy to repair from.  A segment
that cannot be repaired in place falls back to cutting the log before the damage and
fetching the rest again (``IsrProposals.resign_to_repair`` holds that for a leader until
it follows).

Contract: :meth:`DamageRepair.run_scrubber` is one bounded step (the server's scrub
timer, ``log_scrub_bytes_per_second``); no I/O beyond the scrubber's reads and a
truncation.  Not thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from broker.replica.isr_proposals import IsrProposals
from broker.replica.recovery_marks import RecoveryMarks
from clients.protocol.topics import TopicPartition
from replication.damage import DamageAction, on_damage_found
from replication.partition import Partition
from storage.log_manager import LogManager
from storage.scrubber import DamagedRange

log = logging.getLogger(__name__)


class DamageRepair:
    def __init__(self, node_id: int, scrub_enabled: bool, log_manager: LogManager,
                 partitions: Mapping[TopicPartition, Partition], recovery: RecoveryMarks,
                 isr: IsrProposals) -> None:
        self.node_id = node_id
        self.scrub_enabled = scrub_enabled
        self.log_manager = log_manager
        self.partitions = partitions
        self.recovery = recovery
        self.isr = isr
        self.damage_found = self.segments_repaired = 0  # events, for broker.metrics

    def run_scrubber(self) -> list[DamagedRange]:
        """One bounded step of the background CRC check (storage/scrubber.py), and the
        repair of what it finds; damaged ranges that log recovery kept in place
        (``RecoveryMarks.recovery_damage``) take the same way once their partition is
        hosted, with the scrubber off too."""
        recovered = self._recovery_damage_due()
        found = list(recovered)
        if self.scrub_enabled:
            found += self.log_manager.run_scrub_step()
        self.damage_found += len(found)
        for damage in found:
            key = TopicPartition(damage.topic, damage.partition)
            partition = self.partitions.get(key)
            if partition is None:
                log.error("%s-%d: offsets from %d on are damaged in this unhosted log; not "
                          "repaired", *key, damage.first_bad_offset)
                continue
            self.log_manager.cleaner.abort_pass_of(key)  # it would write the same files
            action, why = on_damage_found(partition, damage.segment_base_offset,
                                          damage.position, damage.first_bad_offset)
            if action is DamageAction.CUT:
                log.warning("%s-%d: %s", *key, why)
                self._cut_to_repair(key, partition, damage)
            elif action is DamageAction.RESIGN:
                self._resign_to_repair(key, partition, damage)
            elif action is DamageAction.QUEUED and damage in recovered:
                self.recovery.recovery_damage.append(damage)  # found again later; retry
            elif action is DamageAction.REPAIR and partition.repair is not None:
                log.warning("%s-%d: offsets [%d, %d) are damaged (%s): rewriting that "
                            "segment from leader %d's copy, keeping the rest of the log",
                            *key, partition.repair.first_bad_offset,
                            partition.repair.end_offset, damage.reason, partition.leader_id)
        return found

    def _recovery_damage_due(self) -> list[DamagedRange]:
        """Recovery's damaged ranges whose partition is hosted now (the rest wait; those
        whose segment was repaired, cut or deleted since are dropped)."""
        due: list[DamagedRange] = []
        waiting: list[DamagedRange] = []
        for damage in self.recovery.recovery_damage:
            key = TopicPartition(damage.topic, damage.partition)
            log_ = self.log_manager.get_log(*key)
            if log_ is None or not any(s.base_offset == damage.segment_base_offset
                                       and s.damage is not None for s in log_.segments):
                continue
            (due if key in self.partitions else waiting).append(damage)
        self.recovery.recovery_damage = waiting
        return due

    def on_segment_repaired(self, key: TopicPartition, segment_base_offset: int) -> None:
        """A follower's damaged segment was written again from the leader's copy."""
        self.segments_repaired += 1
        self.log_manager.scrubber.forget_findings(key, segment_base_offset)
        log.warning("%s-%d: damaged segment %d repaired from leader %d's copy", *key,
                    segment_base_offset,
                    self.partitions[key].leader_id if key in self.partitions else -1)

    def _cut_to_repair(self, key: TopicPartition, partition: Partition,
                       damage: DamagedRange) -> None:
        """The fallback: cut the log before the damage (as a follower; a leader resigns
        first and cuts once it follows)."""
        if partition.is_leader:
            self.isr.resign_to_repair[key] = (damage.first_bad_offset, damage.reason)
            self._resign_to_repair(key, partition, damage)
        else:
            self.repair_follower(key, partition, damage.first_bad_offset, damage.reason)

    def repair_follower(self, key: TopicPartition, partition: Partition, offset: int,
                        reason: str) -> None:
        """Cut a follower's log at its first damaged offset; it fetches the rest again."""
        partition.truncate_to(offset)
        log.warning("%s-%d: damaged from offset %d (%s): truncated to %d, fetching the "
                    "rest again from leader %d", *key, offset, reason,
                    partition.log_end_offset, partition.leader_id)

    def _resign_to_repair(self, key: TopicPartition, partition: Partition,
                          damage: DamagedRange) -> None:
        others = [b for b in partition.isr if b != self.node_id]
        log.error("%s-%d: offsets from %d on are damaged on this leader (%s): %s", *key,
                  damage.first_bad_offset, damage.reason,
                  f"resigning to in-sync replicas {others}, then fetching the range again"
                  if others else "no other in-sync replica holds a copy to repair from "
                  "(it resigns if one joins)")
        self.isr.try_resign(key, partition)
