"""What log recovery did at startup, and the recovery-cut marks reported until healed.

Log recovery (:mod:`storage.log.recovery`) may cut a log (torn tail, bad batch, dropped
segments), keep a damaged range in place, or leave a log below the high watermark it had
checkpointed (it lost acknowledged records).  :class:`RecoveryMarks` says each once in
the broker's log, keeps the replicas recovery cut in :attr:`recovery_cuts` (reported at
registration, broker/metadata/replica_logs.py: the controller does not let such a replica
lead while another may hold more) and, in controller mode, on disk
(``recovery-cut-checkpoint``) so a restart before the replica heals still reports it.

Contract: :meth:`report` runs once, after the LogManager started and before the broker
registers; :meth:`forget` drops marks that ended (back in an ISR with a leader, or the
replica gone).  Costs: one pass over the recovered logs; a checkpoint rewrite (two
fsyncs) only when the set of marks changes.  Not thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from clients.protocol.topics import TopicPartition
from storage.checkpoint import CorruptCheckpointError
from storage.log_manager import LogManager
from storage.scrubber import DamagedRange
from timer.clock import Clock

log = logging.getLogger(__name__)


class RecoveryMarks:
    def __init__(self, log_manager: LogManager, clock: Clock, controller_mode: bool) -> None:
        self.log_manager = log_manager
        self.clock = clock
        self.controller_mode = controller_mode
        # replicas that recovery left below their checkpointed HW: (log end, HW)
        self.recovery_losses: dict[TopicPartition, tuple[int, int]] = {}
        # logs recovery cut (torn tail, bad batch, dropped segments) or left below their
        # checkpointed HW: reported at registration (broker/metadata/replica_logs.py)
        # until the replica is back in an ISR with a leader; kept on disk
        # (recovery-cut-checkpoint) so a restart before that still reports them
        self.recovery_cuts: set[TopicPartition] = set()
        # damaged ranges log recovery kept in place, waiting for their partition to be
        # hosted so that their repair can start (broker/replica/damage_repair.py)
        self.recovery_damage: list[DamagedRange] = []

    def report(self, checkpointed_hws: dict[TopicPartition, int]) -> None:
        """Say what log recovery did (nothing else reads its reports): every truncation,
        and every replica that now ends below the high watermark it had checkpointed -
        it lost records that were acknowledged (``recovery_losses``).  Both kinds are in
        ``recovery_cuts``, which the broker reports when it registers: the controller
        does not let such a replica lead while another may hold more.  A cut an earlier
        start made and did not get to save (killed in between) is still reported: its
        log's recovery-cut marker (:mod:`storage.log.recovery`) goes only once the mark
        is in ``recovery-cut-checkpoint``."""
        report = self.log_manager.startup_report
        if report is None:
            return
        # standalone, nothing elects: the cut is a status until the next restart
        stored: Collection[TopicPartition] = ()
        unreadable = False
        if self.controller_mode:
            try:
                stored = self.log_manager.read_recovery_cuts()
            except (CorruptCheckpointError, OSError) as exc:
                stored, unreadable = list(self.log_manager.all_logs()), True
                log.error("cannot read the recovery-cut checkpoint (%s): reporting every log "
                          "as cut, so none leads while another replica may hold more", exc)
        for key in sorted(stored):
            if self.log_manager.get_log(*key) is not None:
                self.recovery_cuts.add(key)  # cut before an earlier restart, not yet healed
                log.warning("%s-%d: log recovery cut this replica before an earlier restart "
                            "and it has not been back in an ISR since", *key)
        acknowledged = []  # logs whose recovery-cut marker goes once the mark is saved
        for key, found in sorted(report.recovered.items()):
            if found is not None and (found.truncated_bytes or found.segments_deleted):
                self.recovery_cuts.add(TopicPartition(*key))
                log.warning("%s-%d: recovery cut %d bytes (%d whole segments) at offset %s: %s",
                            *key, found.truncated_bytes, found.segments_deleted,
                            found.truncated_at_offset, "; ".join(found.problems))
            elif found is not None and found.cut_unacknowledged:
                # an earlier start cut it and stopped before it saved the mark
                self.recovery_cuts.add(TopicPartition(*key))
                log.warning("%s-%d: log recovery cut this replica at an earlier start, "
                            "which stopped before it recorded the cut", *key)
            if found is not None and found.cut_unacknowledged:
                acknowledged.append(TopicPartition(*key))
            if found is not None and found.damaged:
                # reported as cut (an uncut in-sync replica is preferred), with its
                # whole log end (broker/metadata/replica_logs.py says why)
                self.recovery_cuts.add(TopicPartition(*key))
                now_ms = self.clock.now_ms()
                for base, position, first_bad, end in found.damaged:
                    self.recovery_damage.append(DamagedRange(
                        key[0], key[1], base, position, first_bad,
                        "found by log recovery", now_ms))
                    log.warning("%s-%d: recovery found offsets [%d, %d) damaged in segment "
                                "%d; kept with every later segment, to be repaired from "
                                "another replica", *key, first_bad, end, base)
        for key, high_watermark in sorted(checkpointed_hws.items()):
            log_ = self.log_manager.get_log(*key)
            if log_ is not None and log_.log_end_offset < high_watermark:
                self.recovery_losses[key] = (log_.log_end_offset, high_watermark)
                self.recovery_cuts.add(key)
                log.error("%s-%d: after recovery the log ends at %d, below its checkpointed "
                          "high watermark %d: this replica lost acknowledged records "
                          "[%d, %d); other replicas may still hold them", *key,
                          log_.log_end_offset, high_watermark, log_.log_end_offset,
                          high_watermark)
        if self.controller_mode and (unreadable or self.recovery_cuts != set(stored)):
            self._save()  # before registering: a crash now keeps the marks
        for key in acknowledged:  # recorded above (standalone: reported in the log)
            log_ = self.log_manager.get_log(*key)
            if log_ is not None:
                log_.acknowledge_recovery_cut()

    def _save(self) -> None:
        """Replace the recovery-cut checkpoint with :attr:`recovery_cuts` (two fsyncs; only
        when the set changes: at startup after a cut, when a cut replica heals or goes).
        A failed write leaves the older file, whose extra marks only make the controller
        wait for more reports."""
        cuts = {}
        for key in self.recovery_cuts:
            log_ = self.log_manager.get_log(*key)
            cuts[key] = log_.log_end_offset if log_ is not None else 0
        self.log_manager.write_recovery_cuts(cuts)

    def forget(self, keys: Collection[TopicPartition]) -> None:
        """These replicas' marks ended (healed, or the replica or its log is gone)."""
        self.recovery_cuts.difference_update(keys)
        if not self.controller_mode:
            return
        try:
            self._save()
        except OSError:
            log.exception("cannot rewrite the recovery-cut checkpoint (dropping %s)",
                          sorted(keys))
