"""Record-level views of a replica's log for the invariant checks of
:class:`tests.sim.cluster.SimCluster`: every record by offset (decoded once per batch and
cached), record equality across replicas, the latest offset of each key (compaction), and
a count-and-hash digest of a range of batches (byte-level replica agreement).

Pure functions over a log's ``batches()``; no I/O beyond what the log's reads do.  Cost:
:func:`records` decodes each batch once per (base offset, epoch, CRC, size) for the
cache's life; :func:`digest` walks the batches below ``below``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.metadata.records import MetadataRecordError
from clients.records.record import decode_batch
from tests.sim.controller import TOPIC
from tests.sim.sim_log import SimLog
from tests.sim.workload import IDEMPOTENT_ID

if TYPE_CHECKING:
    from tests.sim.broker import SimBroker
    from tests.sim.cluster import SimCluster

SHADOW_CHECK_STEPS = 250  # every so many steps the shadow indexes are checked against the files
RecordId = tuple[bytes | None, bytes | None, int]  # key, value, partition leader epoch


def records(log: Any, cache: dict[tuple[int, int, int, int], list[tuple[int, RecordId]]]
             ) -> dict[int, RecordId]:
    """Offset -> (key, value, partition leader epoch) of every record in ``log``
    (``cache``: decoded batches by base offset, leader epoch - not covered by the CRC -,
    CRC and size)."""
    out: dict[int, RecordId] = {}
    for header, data in log.batches():
        if header.record_count:
            key = (header.base_offset, header.partition_leader_epoch, header.crc, len(data))
            records = cache.get(key)
            if records is None:
                records = cache[key] = [
                    (r.offset, (r.key, r.value, header.partition_leader_epoch))
                    for r in decode_batch(data, validate=False)]
            out.update(records)
    return out


def same_record(a: RecordId, b: RecordId) -> bool:
    """Key, value and epoch equal (an epoch of -1 is unknown: any)."""
    return a[:2] == b[:2] and (a[2] == b[2] or a[2] < 0 or b[2] < 0)


def latest_offsets(records: dict[int, RecordId]) -> dict[bytes | None, int]:
    """Key -> the highest offset holding it."""
    latest: dict[bytes | None, int] = {}
    for offset, (key, _, _) in records.items():
        if offset > latest.get(key, -1):
            latest[key] = offset
    return latest


def digest(log: SimLog, low: int, below: int) -> tuple[int, int]:
    """The count and a hash of the batches starting in ``[low, below)``."""
    return log.range_digest(low, below)



class InvariantChecker:
    """The checks of one :class:`tests.sim.cluster.SimCluster` (the invariants its module
    docstring lists): :meth:`check` after every step, :meth:`check_acked_on` when a leader
    is elected, :meth:`check_compacted` after a cleaner step, :meth:`converged` and
    :meth:`check_final` after healing.  Reads the cluster's brokers, controller and
    oracle (acknowledged and consumed records); changes nothing but its decode cache; a
    violation is :meth:`SimCluster.fail` (a :class:`tests.sim.config.SimFailure`)."""

    def __init__(self, cluster: SimCluster) -> None:
        self.c = cluster
        self.decoded: dict[tuple[int, int, int, int], list[tuple[int, RecordId]]] = {}
        # pid -> the replicas (broker id, log, shadow version, HW, low bound) of the last
        # agreement check that passed (:meth:`check` skips an unchanged one)
        self._agreed: dict[int, list[tuple[int, SimLog, int, int, int]]] = {}
        self._controller_checked: tuple[Any, ...] = ()
        self._compacting = cluster.compacting  # (the configuration's: fixed for the run)
        self._recreating = cluster.recreating

    def check_acked_on(self, broker: SimBroker, pid: int, why: str) -> None:
        log = broker.logs[pid]
        if self.c.compacting:
            self._check_kept_compacted(broker, pid, why)
            return
        low, end = self.c.rotted.get((broker.id, pid), (0, 0))
        for what, records in self.c.kept():
            for (apid, offset), stored in records.items():
                if apid != pid or offset < self.c.retained_below[pid] or low <= offset < end:
                    continue
                h = log.batch_at(offset)
                if h is not None and low <= h.base_offset < end:
                    continue  # a rotted header may claim offsets past its segment
                if h is None or (h.crc, h.partition_leader_epoch) != stored or \
                        h.base_offset != offset:
                    self.c.fail(f"{why} b{broker.id} p{pid} lacks {what} record @{offset}")

    def records_of(self, log: Any) -> dict[int, RecordId]:
        """Offset -> record of every record in a replica's log."""
        return records(log, self.decoded)

    def check_compacted(self, broker: SimBroker, pid: int, before: dict[int, RecordId]
                        ) -> None:
        """After a cleaner step swapped segments in: every record it removed has a later
        record of its key below the replica's HW (committed: never truncated, and no
        acks=all produce or follower still waits for it - Kafka's bound)."""
        after = self.records_of(broker.logs[pid])
        hw = broker.partitions[pid].high_watermark
        latest = latest_offsets({o: r for o, r in before.items() if o < hw})
        for offset, record in before.items():
            if offset not in after and latest.get(record[0], -1) <= offset:
                self.c.fail(f"b{broker.id} p{pid}: the cleaner removed @{offset} {record}, "
                          f"not superseded below the HW {hw} (latest of its key "
                          f"@{latest_offsets(before).get(record[0])})")
        self.c.stats["compaction_checks"] += 1

    def _check_kept_compacted(self, broker: SimBroker, pid: int, why: str) -> None:
        """Compaction: each kept record is on the replica unchanged, or compacted away:
        the replica holds a later record of its key (the cleaner only drops a record
        for a later one below its compaction bound, and that one is never lost either)."""
        held = self.records_of(broker.logs[pid])
        latest = latest_offsets(held)
        for what, records in self.c.kept():
            for apid, offset in records:
                if apid != pid or offset < self.c.retained_below[pid]:
                    continue
                known, got = self.c.record_of[(pid, offset)], held.get(offset)
                if not (got is not None and same_record(known, got)) and (
                        got is not None or latest.get(known[0], -1) <= offset):
                    self.c.fail(f"{why} b{broker.id} p{pid} lacks {what} record @{offset} "
                              f"{known} (holds {got}; latest of its key "
                              f"@{latest.get(known[0])})")

    def _check_compacted_agree(self, pid: int, views: dict[int, dict[int, RecordId]],
                               low: int, below: dict[int, int]) -> None:
        """Compaction: replicas ``views`` (broker -> offset -> record) agree on every
        offset in ``[low, below[broker pair])`` both hold; an offset one of them lacks is
        compacted away there (it holds a later record of the key)."""
        latest = {b: latest_offsets(v) for b, v in views.items()}
        for a, ra in views.items():
            for b, rb in views.items():
                if a == b:
                    continue
                end = min(below[a], below[b])
                for offset, record in ra.items():
                    if not low <= offset < end:
                        continue
                    other = rb.get(offset)
                    if other != record and (other is not None
                                            or latest[b].get(record[0], -1) <= offset):
                        self.c.fail(f"p{pid}: b{a} and b{b} differ at offset {offset}: "
                                  f"{record} / {other} (latest of its key on b{b} "
                                  f"@{latest[b].get(record[0])})")

    def _synced(self, brokers: list[SimBroker], pid: int) -> list[SimBroker]:
        """The replicas of ``pid`` among ``brokers`` whose logs the agreement check
        compares: all (no_loss), else those of the controller's current leader epoch that
        lead or follow past truncation."""
        if self.c.config.no_loss:
            return brokers
        current = self.c.controller.partition(pid)
        if current is None:
            return []
        epoch = current.leader_epoch  # a zombie or lagging replica (another epoch) may
        out = []                      # still hold data all others lost
        for b in brokers:
            p = b.partitions[pid]
            if p.leader_epoch == epoch and (p.is_leader or b.fetching(pid)):
                out.append(b)
        return out

    def check(self) -> None:
        state = self.c.controller.state
        # the controller's checks read its image, which changes only by applying a
        # record (its offset moves) or with a new core (a restart): unchanged since the
        # last check that passed, it passes again
        checked = (state, state.image, state.image.last_applied_offset)
        if checked != self._controller_checked:
            try:
                state.check_invariants()
            except (AssertionError, MetadataRecordError) as exc:  # (what it raises)
                self.c.fail(f"controller: {exc}")
            self._controller_checked = checked
        c = self.c
        live = [b for b in c.brokers.values() if b.alive]
        try:  # (one handler for the loop: the first failure fails the run)
            for b in live:
                for p in b.partitions.values():
                    p.check_invariants()
        except AssertionError as exc:
            c.fail(str(exc))
        if c.steps % SHADOW_CHECK_STEPS == 0:
            self.check_shadows(live)
        compacting, rotted = self._compacting, c.rotted
        if c.steps % 25 and (compacting or rotted):
            return  # records decoded, segments CRC-checked: every 25 steps
        if rotted:
            c.forget_repaired_rot()
        if self._recreating:
            live = [b for b in live if c.hosts_current_topic(b)]
        for pid in c.partition_ids:
            synced = self._synced([b for b in live if (b.id, pid) not in rotted]
                                  if rotted else live, pid)
            if compacting:
                self._check_compacted_agree(
                    pid, {b.id: self.records_of(b.logs[pid]) for b in synced},
                    max([b.partitions[pid].log_start_offset for b in synced]
                        + [self.c.retained_below[pid]]),
                    {b.id: b.partitions[pid].high_watermark for b in synced})
                continue
            if len(synced) < 2:
                continue
            retained = self.c.retained_below[pid]
            # the verdict is a function of the replicas' shadows and bounds (each replica's
            # log and its shadow's version, HW, log start): the same ones as at the last
            # check of this partition agreed then and agree now
            key: list[tuple[int, SimLog, int, int, int]] = []
            for b in synced:
                p, log = b.partitions[pid], b.logs[pid]
                key.append((b.id, log, log.version, p.high_watermark,
                            max(p.log_start_offset, retained)))
            if self._agreed.get(pid) == key:
                continue
            views = [(b, b.partitions[pid], b.logs[pid]) for b in synced]
            bounds = [(hw, low) for _, _, _, hw, low in key]
            for i, (a, pa, la) in enumerate(views):
                hwa, lowa = bounds[i]
                for j in range(i + 1, len(views)):
                    b, pb, lb = views[j]
                    hwb, lowb = bounds[j]
                    below = hwa if hwa < hwb else hwb
                    # below the highest log start of any replica the data is deleted
                    # (a follower learns its leader's log start at its next fetch, so its
                    # diverged suffix can lie there for a while: a leader answers an
                    # epoch older than its oldest with its oldest epoch's start, which
                    # retention moved up - Kafka's rule too)
                    low = lowa if lowa > lowb else lowb
                    if la.range_digest(low, below) != lb.range_digest(low, below):
                        self.c.fail(f"p{pid}: b{a.id} and b{b.id} differ in [{low}, {below}): "
                                  f"{pa} / {pb}")
            self._agreed[pid] = key

    def check_shadows(self, brokers: list[SimBroker]) -> None:
        """Each log's shadow index (what the checks read) matches its files: a change
        the shadow missed is a bug of the simulation, never a pass."""
        for b in brokers:
            for pid, log in b.logs.items():
                if not log.closed and (wrong := log.check_shadow()) is not None:
                    self.c.fail(f"b{b.id} p{pid}: {wrong}")

    def converged(self) -> bool:
        if self.c.rotted:
            self.c.forget_repaired_rot()
            if self.c.rotted:
                return False  # a repair is still under way
        applied = {b.metadata.image.last_applied_offset for b in self.c.brokers.values()}
        if applied != {len(self.c.controller.log) - 1}:
            return False  # a broker has not read the whole metadata log yet
        if any(b.hosted_topic_id != self.c.controller.topic_id() for b in self.c.brokers.values()):
            return False
        for pid in self.c.partition_ids:
            parts = [b.partitions[pid] for b in self.c.brokers.values()]
            leaders = [p for p in parts if p.is_leader]
            if len(leaders) != 1 or len(leaders[0].isr) != len(parts):
                return False
            leo = leaders[0].log_end_offset
            if any(p.log_end_offset != leo or p.high_watermark != leo for p in parts):
                return False
        return True

    def check_final(self) -> None:
        self.check_shadows(list(self.c.brokers.values()))
        self.c.forget_repaired_rot()
        if self.c.rotted:
            self.c.fail(f"rot still unrepaired after healing: {sorted(self.c.rotted)}")
        if not self.converged():
            self.c.fail("did not converge after healing: "
                      + "; ".join(repr(p) for b in self.c.brokers.values()
                                  for p in b.partitions.values()))
        for pid in self.c.partition_ids:
            for b in self.c.brokers.values():  # each read the log into the controller's image
                if b.metadata.image.partition(TOPIC, pid) != self.c.controller.partition(pid):
                    self.c.fail(f"p{pid}: b{b.id}'s metadata image differs from the "
                              f"controller's: {b.metadata.image.partition(TOPIC, pid)} / "
                              f"{self.c.controller.partition(pid)}")
            low = max(b.partitions[pid].log_start_offset for b in self.c.brokers.values())
            if self.c.compacting:
                self._check_compacted_agree(
                    pid, {b.id: self.records_of(b.logs[pid]) for b in self.c.brokers.values()}, low,
                    dict.fromkeys(self.c.brokers, 2**62))
            elif len({digest(b.logs[pid], low, 2**62)
                      for b in self.c.brokers.values()}) != 1:
                self.c.fail(f"p{pid}: replicas differ after healing")
            if self.c.config.no_loss:
                for b in self.c.brokers.values():
                    self.check_acked_on(b, pid, "after healing")
            if self.c.config.idempotent and self.c.config.no_loss:
                self._check_no_duplicates(pid)

    def _check_no_duplicates(self, pid: int) -> None:
        """Each idempotent batch (producer epoch, sequence) is in the log once."""
        seen: dict[tuple[int, int], int] = {}
        for header, _ in self.c.brokers[1].logs[pid].batches():
            if header.producer_id != IDEMPOTENT_ID:
                continue
            key = (header.producer_epoch, header.base_sequence)
            if key in seen:
                self.c.fail(f"p{pid}: producer epoch {key[0]} sequence {key[1]} is in the log "
                          f"twice, at offsets {seen[key]} and {header.base_offset}")
            seen[key] = header.base_offset
