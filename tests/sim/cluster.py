"""Deterministic simulation of a 3-replica cluster running the real replication code.

One seeded ``random.Random`` drives everything: message delays/drops (simulated
network), broker crashes and restarts (the real log on a simulated disk that tears
unflushed bytes), controller restarts (a fresh core replays the metadata log), network
partitions, preferred-leader elections, a producer appending with acks=all and a
consumer fetching (replica_id -1); optionally retention, compaction, bit rot, process
pauses, topic delete/re-create and whole-cluster crashes that tear the tail of a
partition's last ISR member, then bring the brokers back in a random order
(``cluster_crash_probability``). Invariants are checked after every step; a failure
raises :class:`SimFailure` with the seed, a replay command and the last events.

Invariants (``no_loss`` mode: every append is flushed, so a crash loses nothing):

* one leader per (partition, epoch);
* each live replica's :meth:`Partition.check_invariants` (HW <= LEO, leader HW never
  backwards, epoch cache consistent);
* replicas identical (byte for byte, by a prefix hash chain) below min of their HWs;
* nothing is served to the consumer at or above the HW of the answer (both modes);
* an acknowledged or consumed record is never truncated from a replica that holds it
  (except a stale one outside the controller's ISR that follows a deposed leader of its
  older epoch: it fetches them again) nor
  changed, and every newly elected leader holds all of them;
* after the final healing phase: all replicas identical, leader HW = every LEO, every
  acknowledged and consumed record present on all of them, and every broker's metadata
  image (read from the controller's log by the real reader) holds the controller's
  partition state.

With compaction (``compaction_probability``) records are keyed and replicas compact
independently, so the byte-level checks become record-level ones: every record a
cleaner step removes has a later record of its key below that replica's HW; a kept
record is on a replica unchanged or has a later record of its key there; replicas agree
on every offset both hold.  With topic re-creation (``topic_recreate_probability``) the
checks cover the topic the controller has now: replicas still hosting a deleted topic
are left out, answers from them are not kept, and the oracle starts over.

In ``lossy`` mode (random, rare flushes) acknowledged records may be lost when every ISR
member loses them, so only replica agreement is asserted: below HW among replicas in the
controller's current leader epoch that finished truncation (a deposed leader cut off from
everyone may still hold records the whole ISR lost: seed 150 found that), and complete
convergence after healing.

With ``transactions`` the producer and consumer are transactional ones (a
transactional producer, a read_committed consumer) against the real transaction
coordinator, with their own invariants: :mod:`tests.sim.txn_workload`,
:mod:`tests.sim.txn_coordinator`.

The parts: :class:`SimCluster` here is the wiring and the loop (the controller process,
the producer and consumer driving, the rot bookkeeping, one ``step``); its knobs are
:mod:`tests.sim.config`, the disk (the real log, with crash tearing and rot)
:mod:`tests.sim.disk`, the clients' state (the oracle) :mod:`tests.sim.workload`, the
faults :class:`tests.sim.faults.FaultInjector`, and the checks above
:class:`tests.sim.invariants.InvariantChecker`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
import os
import random
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

from clients.protocol.errors import CorruptRecordError, ErrorCode
from clients.records.batch import iter_batches
from replication.partition import Partition
from tests.sim import invariants
from tests.sim.broker import CONTROLLER, SimBroker
from tests.sim.config import SimConfig, SimFailure
from tests.sim.controller import SimController
from tests.sim.disk import SimDisk
from tests.sim.faults import FaultInjector
from tests.sim.invariants import InvariantChecker, RecordId
from tests.sim.network import SimNetwork
from tests.sim.sim_log import SimLog
from tests.sim.txn_workload import TxnWorkload
from tests.sim.workload import SimConsumer, SimProducer, Workload
from timer.clock import ManualClock


class SimCluster:
    producer_id = 100
    consumer_id = 101

    def __init__(self, seed: int, config: SimConfig) -> None:
        self.seed = seed
        self.config = config
        self.rng = random.Random(seed)
        self.now_ms = 0
        self.steps = 0
        self.planned_steps = 0
        self.history: collections.deque[str] = collections.deque(maxlen=400)
        self.net = SimNetwork(self.rng, drop_probability=config.drop_probability,
                              min_delay_ms=1, max_delay_ms=config.max_delay_ms)
        self.partition_ids = list(range(config.partitions))
        # transactions: the producer writes to these; one more partition, the last, is
        # the coordinator's __transaction_state (tests.sim.txn_coordinator)
        self.data_partition_ids = list(self.partition_ids)
        self.state_pid = config.partitions
        if config.transactions:
            self.partition_ids.append(self.state_pid)
        # the logs' directory: the config's, or a fresh one on tmpfs, removed by close()
        self._own_dir = None if config.real_log_dir else Path(tempfile.mkdtemp(
            prefix="sim-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
        if self._own_dir is not None:  # a cluster never run (or closed) is removed anyway
            weakref.finalize(self, shutil.rmtree, self._own_dir, True)
        self.disk = SimDisk(self, config.real_log_dir or self._own_dir)
        ids = list(range(1, config.brokers + 1))
        self.clock = ManualClock(0)
        self.controller = SimController(self.clock, ids, len(self.partition_ids),
                                        config.session_timeout_ms,
                                        config.leader_imbalance_check_interval_ms,
                                        config.min_insync_replicas)
        self.brokers = {b: SimBroker(self, b) for b in ids}
        self.producer = SimProducer()
        self.consumer = SimConsumer()
        self.workload = Workload(self)
        self.txn = TxnWorkload(self) if config.transactions else None
        self.controller_down_until_ms: int | None = None
        # broker -> its metadata Fetch parked at the log end (the controller's long poll):
        # (incarnation, request id, offset, answer-by time)
        self.metadata_waiting: dict[int, tuple[int, int, int, int]] = {}
        self.epoch_leaders: dict[tuple[int | None, int, int], int] = {}
        self.faults = True
        self.stats: collections.Counter[str] = collections.Counter()
        # pid -> the highest log start retention gave any replica: records below it may
        # be gone (deleted by retention), and only those
        self.retained_below = dict.fromkeys(self.partition_ids, 0)
        # (broker, pid) -> the offset range of a segment rot damaged, until it is intact
        self.rotted: dict[tuple[int, int], tuple[int, int]] = {}
        # compaction: (pid, offset) -> (key, value, partition leader epoch) of each kept
        # record (acknowledged or consumed; single-record batches, so a batch's CRC
        # changes when the cleaner stamps a tombstone's delete horizon or empties it)
        self.record_of: dict[tuple[int, int], RecordId] = {}
        self.checks = InvariantChecker(self)
        self.injector = FaultInjector(self)
        for b in self.brokers.values():
            b.start()

    # -- recording and failing -------------------------------------------------------

    def record(self, event: str) -> None:
        self.history.append(f"[{self.steps} t={self.now_ms}] {event}")

    def replay_command(self) -> str:
        """One line that re-runs this seed with this configuration (bench/sim.py)."""
        defaults = SimConfig()
        sets = []
        for f in dataclasses.fields(SimConfig):
            value = getattr(self.config, f.name)
            if value != getattr(defaults, f.name):
                text = value.name if isinstance(value, enum.Enum) else str(value)
                if isinstance(value, Path):
                    text = "tmp"  # bench/sim.py: a fresh temporary directory
                sets.append(f" --set {f.name}={text}")
        return (f"python3 -m bench.sim --replay {self.seed} --steps {self.planned_steps}"
                + "".join(sets))

    def fail(self, what: str) -> None:
        events = "\n".join(self.history)
        raise SimFailure(f"seed={self.seed} step={self.steps}: {what}\n"
                         f"replay: {self.replay_command()}\nrecent events:\n{events}")

    # -- hooks from replicas ---------------------------------------------------------

    def on_new_leader(self, broker: SimBroker, p: Partition) -> None:
        key = (broker.hosted_topic_id, p.index, p.leader_epoch)  # epochs restart with a topic
        other = self.epoch_leaders.setdefault(key, broker.id)
        self.record(f"b{broker.id} p{p.index} leads epoch={p.leader_epoch} "
                    f"leo={p.log_end_offset} hw={p.high_watermark} isr={p.isr}")
        self.stats["elections"] += 1
        if other != broker.id:
            self.fail(f"two leaders for p{p.index} epoch {p.leader_epoch}: b{other}, b{broker.id}")
        if self.recreating and not self.hosts_current_topic(broker):
            self.record(f"b{broker.id} p{p.index} leads in deleted topic id "
                        f"{broker.hosted_topic_id}: not checked as a new leader")
            return
        current = self.controller.partition(p.index)
        if current is not None and current.leader_epoch > p.leader_epoch:
            # a broker applying an old election late (it was paused or cut off while the
            # controller moved on): a zombie nobody produces to or reads from; its
            # followers in that epoch are stale too (the truncation check covers them)
            self.record(f"b{broker.id} p{p.index} leads a past epoch (current "
                        f"{current.leader_epoch}): not checked as a new leader")
            return
        if self.config.no_loss:
            self.checks.check_acked_on(broker, p.index, "new leader")

    def kept(self) -> list[tuple[str, dict[tuple[int, int], tuple[int, int]]]]:
        """Records that must never be lost or change: acknowledged to the producer, and
        (no_loss mode) served to the consumer; (pid, offset) -> (CRC, partition leader
        epoch) of the stored batch (an idempotent retry stores identical bytes, so the
        CRC alone cannot tell the acknowledged copy from an unacknowledged one)."""
        return [("acknowledged", self.producer.acked), ("consumed", self.consumer.consumed)]

    def on_retention(self, broker: SimBroker, pid: int) -> None:
        """Retention on one replica (bounded by its HW, as the broker's is)."""
        p = broker.partitions[pid]
        before = p.log_start_offset
        start = self.disk.apply_retention(broker, pid, p.high_watermark)
        if start > before:
            self.stats["retention_deletes"] += 1
            self.record(f"b{broker.id} p{pid} retention: log start {before} -> {start} "
                        f"(hw {p.high_watermark})")
            if start > p.high_watermark:
                self.fail(f"b{broker.id} p{pid}: retention moved the log start to {start}, "
                          f"above the HW {p.high_watermark}")
            self.retained_below[pid] = max(self.retained_below[pid], start)

    def on_truncate(self, log: SimLog, removed: list[Any]) -> None:
        """No acknowledged (or consumed) record is truncated (no_loss; not with rot or
        compaction, where a damage cut or the cleaner legitimately removes them)."""
        cfg = self.config
        if not (cfg.no_loss and cfg.check_truncation) or cfg.rot_probability or self.compacting:
            return
        pid = int(log.dir.name.rsplit("-", 1)[1])
        broker = self.brokers[int(log.dir.parent.name[1:])]
        current = self.controller.partition(pid)
        p = broker.partitions.get(pid)
        if (current is not None and p is not None and p.leader_epoch < current.leader_epoch
                and broker.id not in current.isr):
            # a stale replica outside the controller's ISR, following a deposed leader
            # of its epoch (it has not seen the newer ones yet), truncates as that
            # leader says, as Kafka's does; it copies the records again from the
            # current leader, which must hold them (checked at every election and after
            # healing).  No_loss seed 9985: a record committed by a sole-ISR leader in
            # epoch 18 was cut from a replica still following epoch 16's.
            return
        for what, records in self.kept():
            for h in removed:
                if h.base_offset < self.retained_below[pid]:
                    continue  # deleted by retention somewhere: may go
                if records.get((pid, h.base_offset)) == (h.crc, h.partition_leader_epoch):
                    self.fail(f"{what} record p{pid}@{h.base_offset} truncated from {log}")

    @property
    def compacting(self) -> bool:
        return self.config.compaction_probability > 0

    def note_record(self, pid: int, offset: int, record: tuple[Any, ...], epoch: int,
                    what: str) -> None:
        """Compaction: the record kept at ``pid@offset``; it never changes.  Epoch -1:
        unknown (the leader compacted it away before its acks=all answer)."""
        record_id = (record[0], record[1], epoch)
        known = self.record_of.setdefault((pid, offset), record_id)
        if not invariants.same_record(known, record_id):
            self.fail(f"p{pid}@{offset} changed: {what} {record_id}, kept as {known}")
        if known[2] < 0:
            self.record_of[(pid, offset)] = record_id

    # -- controller process (never crashes; can be cut off) --------------------------

    def controller_message(self, kind: str, src: int, body: dict[str, Any]) -> None:
        ctl = self.controller
        incarnation = body["incarnation"]
        if kind == "register":
            error, epoch = ctl.register(src, incarnation, body["logs"])
            self.net.send(self.now_ms, CONTROLLER, src, "register_response",
                          {"error": int(error), "broker_epoch": epoch}, 0, incarnation)
        elif kind == "metadata_fetch":
            self.metadata_waiting[src] = (incarnation, body["request_id"], body["offset"],
                                          self.now_ms + self.config.metadata_max_wait_ms)
        elif kind == "heartbeat":
            error, report = ctl.heartbeat(src, body["broker_epoch"], body["metadata_offset"])
            if error != ErrorCode.NONE:
                self.net.send(self.now_ms, CONTROLLER, src, "reregister", {}, 0, incarnation)
            else:
                if report:  # a partition waits for a safe leader: a fresh log report
                    self.net.send(self.now_ms, CONTROLLER, src, "report_logs", {}, 0,
                                  incarnation)
        elif kind == "alter_partition":
            proposal = body["proposal"]
            error, state = ctl.alter_partition(
                src, body["broker_epoch"], proposal.partition, proposal.leader_epoch,
                proposal.partition_epoch, list(proposal.new_isr))
            self.net.send(self.now_ms, CONTROLLER, src, "alter_partition_response",
                          {"proposal": proposal, "error": int(error),
                           "isr": list(state.isr) if state else [],
                           "partition_epoch": state.partition_epoch if state else -1},
                          0, incarnation)
        else:
            raise AssertionError(f"unknown controller message {kind}")
        self._flush_controller_history()
        self._answer_metadata_fetches()

    def _flush_controller_history(self) -> None:
        for line in self.controller.history:
            self.record("controller: " + line)
        self.controller.history.clear()

    def _answer_metadata_fetches(self) -> None:
        """Answer each parked metadata Fetch that has records to read, or whose wait is
        over (an empty answer with the high watermark)."""
        waiting, log_end, now = self.metadata_waiting, len(self.controller.log), self.now_ms
        due = [b for b, (_, _, offset, deadline) in waiting.items()
               if offset < log_end or now >= deadline]  # (most calls: none)
        for b in due:
            incarnation, request_id, offset, _ = waiting.pop(b)
            cfg = self.config
            partial = self.rng.random() < cfg.metadata_partial_probability
            answer = self.controller.metadata_answer(
                offset, self.rng.randint(1, cfg.metadata_max_records) if partial else log_end)
            self.net.send(self.now_ms, CONTROLLER, b, "metadata",
                          {"request_id": request_id, **answer}, 0, incarnation)

    def move_leader(self) -> None:
        """A preferred-leader election now (the real controller's way to move leaders)."""
        if self.controller.elect_preferred_leaders():
            self._flush_controller_history()

    # -- the loop --------------------------------------------------------------------

    def deliver(self) -> None:
        for m in self.net.due(self.now_ms):
            if m.dst == CONTROLLER:
                if self.controller_down_until_ms is None:
                    self.controller_message(m.kind, m.src, m.body)
            elif m.dst == self.producer_id and self.txn is not None:
                self.txn.producer_message(m.kind, m.body)
            elif m.dst == self.producer_id:
                self.workload.producer_message(m.body)
            elif m.dst == self.consumer_id and self.txn is not None:
                self.txn.consumer_message(m.body)
            elif m.dst == self.consumer_id:
                self.workload.consumer_message(m.body)
            else:
                b = self.brokers[m.dst]
                if not b.alive or (m.dst_incarnation and m.dst_incarnation != b.incarnation):
                    continue
                if b.paused(self.now_ms):
                    self.net.hold(m, b.paused_until_ms)
                    continue
                b.on_message(m.kind, m.src, m.body)

    @property
    def recreating(self) -> bool:
        return self.config.topic_recreate_probability > 0

    def _from_deleted_topic(self, answer: dict[str, Any]) -> bool:
        """A broker's answer came from a replica of another topic id than the current
        one (the broker stamps the id it hosted when it answered)."""
        return self.recreating and answer["topic_id"] != self.controller.topic_id()

    def hosts_current_topic(self, broker: SimBroker) -> bool:
        """The broker's replicas belong to the topic the controller has now (not to a
        deleted one, and not unknown yet after a restart)."""
        current = self.controller.topic_id()
        return current is not None and broker.hosted_topic_id == current

    def recreate_topic(self) -> None:
        """The operator deletes the topic (see ``SimConfig.topic_recreate_probability``);
        its records are gone with it, so the oracle starts over with the next one."""
        if self.controller_down_until_ms is not None or not self.controller.delete_topic():
            return
        self._flush_controller_history()
        self.stats["topic_deletes"] += 1
        self.producer.acked.clear()
        self.consumer.consumed.clear()
        self.consumer.position.clear()
        self.record_of.clear()
        self.retained_below = dict.fromkeys(self.partition_ids, 0)
        if self.config.idempotent:
            self.workload.bump_producer_epoch("topic deleted")

    def recovery_kept_damage(self, broker: SimBroker, pid: int, segment_base_offset: int,
                             end_offset: int) -> None:
        """Log recovery kept a damaged range of this replica in place: it counts as rot
        (not served, exempt from the replica checks) until it is repaired or cut."""
        self.stats["recovery_kept_damage"] += 1
        self.rotted.setdefault((broker.id, pid), (segment_base_offset, end_offset))
        self.record(f"b{broker.id} p{pid}: recovery kept damage in segment "
                    f"{segment_base_offset}")

    def rescrub(self, broker: SimBroker) -> None:
        """The broker's scrubber finds the rot it holds (at once; after a restart too)."""
        for (bid, pid) in list(self.rotted):
            if bid == broker.id and broker.alive:
                for damage in self.disk.scrub(broker, pid):
                    broker.on_damage(pid, damage)

    def forget_repaired_rot(self) -> None:
        for bid, pid in list(self.rotted):
            if self.brokers[bid].alive and self._rot_repaired(bid, pid):
                del self.rotted[(bid, pid)]
                self.record(f"b{bid} p{pid}: rot gone")

    def _rot_repaired(self, bid: int, pid: int) -> bool:
        """Every batch of the replica passes its CRC check again (repaired, or cut away)."""
        try:
            for seg in self.brokers[bid].logs[pid].segments:
                for _ in iter_batches(seg.read_bytes(0, seg.size)):
                    pass
        except CorruptRecordError:
            return False
        return True

    def restart_controller(self) -> None:
        self.controller_down_until_ms = None
        self.controller.restart()
        self._flush_controller_history()

    def step(self) -> None:
        self.steps += 1
        self.now_ms += 1 + self.rng._randbelow(4)  # rng.randint(1, 4) as it draws, cheaper
        self.clock.set(self.now_ms)
        if self.faults:
            self.injector.inject_faults()
            if self.txn is None and self.rng.random() < self.config.produce_probability:
                self.workload.produce()
        if self.txn is not None:
            self.txn.step()
            if self.rng.random() < self.config.consume_probability:
                self.txn.consume()
        elif self.rng.random() < self.config.consume_probability:
            self.workload.consume()
        self.deliver()
        if self.txn is not None:
            self.txn.coordinators.maybe_move()
        if self.controller_down_until_ms is None:
            if self.controller.tick():
                self._flush_controller_history()
            self._answer_metadata_fetches()
        for b in self.brokers.values():
            if b.alive and not b.paused(self.now_ms):
                b.tick()
        self.checks.check()
        if self.txn is not None:
            self.txn.check()

    def run(self, steps: int) -> None:
        """Run on an event loop: tasks the handlers start (a Produce waiting for its
        KIP-890 verification) and a Fetch's later slices get one loop turn after every
        step that leaves them waiting (:func:`_loop_turn`); deterministic (no real I/O
        or timers on that loop)."""
        try:
            asyncio.run(self._run(steps))
        finally:
            self.close()

    def close(self) -> None:
        """Release the real logs' descriptors (a sweep runs thousands of seeds in one
        process; the files stay for a test to look at)."""
        for b in self.brokers.values():
            if b.cleaner is not None:
                b.cleaner.abort()
            for log in b.logs.values():
                log.abandon()
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)

    async def _run(self, steps: int) -> None:
        self.planned_steps = steps
        for _ in range(steps):
            self.step()
            await _loop_turn()
        self.faults = False
        self.injector.outage = None  # its restarts not yet made are the healing's
        if self.controller_down_until_ms is not None:
            self.restart_controller()
        self.net.heal()
        for b in self.brokers.values():
            b.paused_until_ms = 0
            if not b.alive:
                b.start()
        self.record("heal: network healed, all brokers up, no more faults")
        if self.txn is not None:
            self.txn.stopping = True  # the open transaction ends; no new one
        for _ in range(self.config.heal_steps):
            self.step()
            await _loop_turn()
            if self.checks.converged() and (self.txn is None or self.txn.converged()):
                break
        self.checks.check_final()
        if self.txn is not None:
            self.txn.check_final()
        self.stats["log_restarts"] = sum(log.restarts
                                         for b in self.brokers.values() for log in b.logs.values())


async def _loop_turn() -> None:
    """One turn of the running loop for what the step left it: the callbacks it scheduled
    (a Fetch's next slice, a task's wake-up) and the timers.  When there are none (most
    steps: no task or callback of this run is waiting) the turn would run nothing but a
    zero-timeout poll of the loop's own wake-up pipe, so it is skipped (the loop's
    ``_ready`` and ``_scheduled`` are CPython's ``BaseEventLoop`` queues; the run is the
    same either way, and a step costs less: no task switch, no system call)."""
    loop = asyncio.get_running_loop()
    if getattr(loop, "_ready", True) or getattr(loop, "_scheduled", True):
        await asyncio.sleep(0)
