"""SimBroker: one broker process in the simulation, around the real replication code.

As a leader it answers followers with the broker's real Fetch, OffsetsForLeaderEpoch and
ListOffsets handlers and the producer with the real Produce handler
(:mod:`tests.sim.handlers`, through Kafka's codec; acks=all waits in a real
:class:`DelayedProduce` in the produce purgatory); as a follower it
runs one real :class:`FollowerFetchSession` per leader (what
:class:`broker.replica_fetcher.ReplicaFetcher` drives over a socket: here one request at
a time over :class:`tests.sim.network.SimNetwork`, resent after ``request_timeout_ms``,
paused ``fetch_backoff_ms`` when the session asks for a backoff).  It registers with the
controller (with its logs' report), heartbeats, proposes ISR changes, and reads the
controller's metadata log with long-poll Fetches into the real
:class:`~broker.metadata.log_reader.MetadataLogReader` (one Fetch out at a time, resent
after ``request_timeout_ms``); its replicas follow the image once it is complete, as
:meth:`broker.core.BrokerCore.reconcile` does.  A crash loses the process (sessions,
purgatories, in-flight requests, the image) and whatever the disk had not flushed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.controller.results import ReplicaLog
from broker.delayed import DelayedProduce
from broker.metadata.image import PartitionRegistration
from broker.metadata.log_reader import MetadataLogReader
from broker.metadata.replica_logs import last_leader_epoch
from broker.metadata.replica_plan import (
    TopicLabel,
    log_of_other_topic,
    partition_metadata_label,
    plan_replicas,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import ZERO_UUID, TopicPartition
from replication.damage import DamageAction, on_damage_found
from replication.follower_fetch import FollowerFetchSession, PendingRequest
from replication.partition import Partition
from storage.cleaner.cleaner import CLEANER_CHECKPOINT, LogCleaner
from storage.cleaner.config import CleanerConfig
from storage.cleaner.offset_map import MIN_CAPACITY_BYTES
from storage.scrubber import DamagedRange
from tests.sim.controller import TOPIC
from tests.sim.handlers import SimHandlerCore, produce, serve
from tests.sim.sim_log import SimLog
from tests.sim.txn_coordinator import STATE_KEY, TXN_KINDS, SimTxnCoordinator
from timer.purgatory import Purgatory
from timer.system_timer import SystemTimer

if TYPE_CHECKING:
    from tests.sim.cluster import SimCluster

CONTROLLER = 0


@dataclass
class InFlight:
    """The one request a follower session has out to its leader."""

    request_id: int
    pending: PendingRequest
    sent_at_ms: int


class SimBroker:
    def __init__(self, cluster: SimCluster, broker_id: int) -> None:
        self.c = cluster
        self.id = broker_id
        self.alive = False
        self.paused_until_ms = 0  # a paused process (SIGSTOP, a long GC) does nothing
        self.incarnation = 0
        self.registered = False
        self.broker_epoch = -1
        self.metadata = MetadataLogReader()  # the image read from the controller's log
        self.metadata_fetch: tuple[int, int] | None = None  # (request id, sent at ms)
        self.fetching_metadata = False  # from the first registration of this process on
        self.logs: dict[int, SimLog] = {}                   # the disk: survives crashes
        self.hw_checkpoint: dict[int, int] = {}
        self.recovery_cuts: set[int] = set()  # reported until back in an ISR with a leader
        self.partitions: dict[int, Partition] = {}
        self.sessions: dict[int, FollowerFetchSession] = {}  # leader id -> session
        self.in_flight: dict[int, InFlight] = {}              # leader id -> its request
        self.backoff_until_ms: dict[int, int] = {}            # leader id -> resume time
        self.produce_purgatory = self._new_purgatory()
        self.handler_core = SimHandlerCore(self, cluster.clock, TOPIC,
                                           cluster.config.replica_lag_time_max_ms,
                                           cluster.config.fetch_max_bytes)
        self.next_request = 0
        self.last_heartbeat_ms = -10**9
        self.last_shrink_ms = 0
        self.alter_sent_ms: dict[int, int] = {}
        self.repair_turn: dict[int, bool] = {}  # leader id -> the next request repairs
        self.pending_cuts: dict[int, int] = {}  # pid -> where a damaged leader cuts as follower
        self.cleaner: LogCleaner | None = None  # compaction: the process's log cleaner
        self.hosted_topic_id: TopicLabel | None = None  # the topic its replicas belong to
        self.durable_epochs: dict[int, tuple[tuple[int, int], ...]] = {}  # at the last crash
        self.compacted_seen = 0
        self.txn: SimTxnCoordinator | None = None  # transactions: this process's coordinator

    # -- lifecycle -------------------------------------------------------------------

    def paused(self, now_ms: int) -> bool:
        return self.paused_until_ms > now_ms

    def start(self) -> None:
        self.alive = True
        self.paused_until_ms = 0
        self.incarnation += 1
        self.registered = False
        self.hosted_topic_id = None  # learnt from the metadata image
        for pid in self.c.partition_ids:
            log = self.c.disk.open_log(self, pid)
            self.logs[pid] = log
            p = self._new_partition(pid, log)
            report = log.recovery_report  # what the open's recovery did
            if log.log_end_offset < self.hw_checkpoint.get(pid, 0) or (
                    report is not None and (report.truncated_bytes or report.segments_deleted
                                           or report.damaged)):
                self.recovery_cuts.add(pid)  # as RecoveryMarks.report
            p.high_watermark = min(self.hw_checkpoint.get(pid, 0), log.log_end_offset)
            self.partitions[pid] = p
        self.c.record(f"start b{self.id} inc={self.incarnation} "
                      + " ".join(f"p{pid}:leo={p.log_end_offset},hw={p.high_watermark}"
                                 for pid, p in self.partitions.items()))
        self.broker_epoch = -1
        self.metadata = MetadataLogReader()  # a new process reads the log from offset 0
        self.metadata_fetch, self.fetching_metadata = None, False
        for pid, log in self.logs.items():  # damage recovery kept: repaired as BrokerCore does
            for base, position, first_bad, end in log.recovery_report.damaged:
                self.c.recovery_kept_damage(self, pid, base, end)
                self.on_damage(pid, DamagedRange(TOPIC, pid, base, position, first_bad,
                                                 "found by log recovery", self.c.now_ms))
        self.c.rescrub(self)  # its scrubber finds rot it still holds
        self.cleaner = self._new_cleaner()
        if self.c.config.transactions:  # the new process's coordinator (loads when it leads)
            self.txn = SimTxnCoordinator(self.c, self)
            self.handler_core.txn_verifier = self.txn  # KIP-890 part 1 in its Produce
        self.register()

    def _new_partition(self, pid: int, log: SimLog) -> Partition:
        return Partition(TOPIC, pid, log, self.id)

    def replace_replica(self, pid: int, why: str) -> None:
        """Delete this replica's log (its topic is gone) and keep an empty one, neither
        leader nor follower, in its place (BrokerCore._drop_partition and
        ``_log_for_topic_id``); its parked produces and fetches are answered."""
        old = self.partitions.get(pid)
        if old is not None:
            old.abort_repair()
        self.unfollow(pid)
        self.hw_checkpoint.pop(pid, None)
        self.recovery_cuts.discard(pid)
        self.pending_cuts.pop(pid, None)
        self.c.rotted.pop((self.id, pid), None)
        log = self.logs[pid] = self.c.disk.delete_log(self, pid)
        self.partitions[pid] = self._new_partition(pid, log)
        self.wake_partition(pid)
        self.c.stats["replicas_deleted"] += 1
        self.c.record(f"b{self.id} p{pid} log deleted: {why}")

    def _new_cleaner(self) -> LogCleaner | None:
        """With compaction: the process's real LogCleaner (small steps, so a pass spans
        ticks, crashes and truncations), reading its ``cleaner-offset-checkpoint``."""
        cfg, root = self.c.config, self.c.disk.root
        if not cfg.compaction_probability:
            return None
        cleaner = LogCleaner(CleanerConfig(dedupe_buffer_bytes=MIN_CAPACITY_BYTES,
                                           step_bytes=cfg.compaction_step_bytes),
                             clock_ms=lambda: self.c.now_ms,
                             checkpoint_path=root / f"b{self.id}" / CLEANER_CHECKPOINT)
        cleaner.load_checkpoint()
        return cleaner

    def clean_step(self) -> None:
        """One bounded compaction step below each replica's compaction bound (as
        :meth:`broker.core.BrokerCore.run_log_cleaner`)."""
        assert self.cleaner is not None
        swapped = self.cleaner.stats.segments_swapped
        before = {pid: self.c.checks.records_of(log) for pid, log in self.logs.items()}
        result = self.cleaner.clean_step(
            {_key(pid): log for pid, log in self.logs.items()}, None,
            {_key(pid): bound for pid, p in self.partitions.items()
             if (bound := p.compaction_bound) is not None})
        tp = result.topic_partition
        if tp is not None and self.cleaner.stats.segments_swapped > swapped:
            self.c.checks.check_compacted(self, tp.partition, before[tp.partition])
        if result.pass_done and tp is not None:
            dropped = self.cleaner.stats.records_dropped
            self.c.stats["compaction_passes"] += 1
            self.c.stats["compacted_records"] += dropped - self.compacted_seen
            self.compacted_seen = dropped
            self.c.record(f"b{self.id} p{tp.partition} compacted below "
                          f"{self.cleaner.first_dirty_offset(tp)}")

    def register(self) -> None:
        """BrokerRegistration with a report of every log (the safe election's input): a
        log that ended below its checkpointed HW at start counts as cut by recovery until
        its replica is back in an ISR with a leader, as BrokerCore's ``recovery_cuts``."""
        logs = []
        for pid, log in sorted(self.logs.items()):
            found = self.c.disk.topic_id(self, pid)
            logs.append(ReplicaLog(TOPIC, pid, found if isinstance(found, int) else -1,
                                   last_leader_epoch(log), log.log_end_offset,
                                   pid in self.recovery_cuts,
                                   found if isinstance(found, bytes) else ZERO_UUID))
        self.send(CONTROLLER, "register", {"incarnation": self.incarnation, "logs": logs})

    def crash(self) -> None:
        self.alive = False
        if self.txn is not None:
            self.txn.stop()
        self.txn = self.handler_core.txn_verifier = None  # its queues and state die with it
        # a power cut: each leader-epoch checkpoint holds its last durable write
        self.durable_epochs = {pid: p.leader_epoch_cache.durable_entries
                               for pid, p in self.partitions.items()}
        for p in self.partitions.values():
            p.abort_repair()  # its .cleaned file: the next open removes it anyway
        self.partitions.clear()
        self.pending_cuts.clear()
        self.sessions.clear()
        self.in_flight.clear()
        self.backoff_until_ms.clear()
        self.produce_purgatory.shutdown()  # the process is gone: nothing answers
        if self.cleaner is not None:
            self.cleaner.abort()  # the process's descriptors (Log.open's removal of a
        self.cleaner, self.compacted_seen = None, 0  # left .cleaned file: storage tests)
        self.produce_purgatory = self._new_purgatory()
        self.handler_core.fetch_purgatory.shutdown()
        self.handler_core.fetch_purgatory = Purgatory("fetch", self.timer)
        lost = self.c.disk.crash(self)
        self.c.stats["crashes"] += 1
        self.c.stats["crashes_losing_data"] += lost > 0
        self.c.record(f"crash b{self.id} lost_bytes={lost}")

    # -- messaging -------------------------------------------------------------------

    def send(self, dst: int, kind: str, body: dict[str, Any], dst_incarnation: int = 0) -> None:
        self.c.net.send(self.c.now_ms, self.id, dst, kind, body, self.incarnation,
                        dst_incarnation)

    def _request_id(self) -> int:
        self.next_request += 1
        return self.next_request

    def on_message(self, kind: str, src: int, body: dict[str, Any]) -> None:
        if kind in TXN_KINDS:
            if self.txn is not None:
                self.txn.on_message(kind, body)
            return
        getattr(self, "on_" + kind)(src, body)

    # -- controller side -------------------------------------------------------------

    def on_register_response(self, src: int, body: dict[str, Any]) -> None:
        if body["error"] != ErrorCode.NONE:
            self.c.record(f"b{self.id} register: {ErrorCode(body['error']).name}")
            return  # the next tick registers again
        self.registered, self.broker_epoch = True, body["broker_epoch"]
        self.fetching_metadata = True  # as the metadata follower: fetch once registered

    def on_report_logs(self, src: int, body: dict[str, Any]) -> None:
        """The heartbeat answer asks for this broker's log report (the metadata
        follower's rule): the same incarnation registers again."""
        self.register()

    def on_reregister(self, src: int, body: dict[str, Any]) -> None:
        self.registered = False
        self.register()

    def on_metadata(self, src: int, body: dict[str, Any]) -> None:
        """The answer to this broker's metadata Fetch (a late answer to a request given up
        on is dropped): the real reader applies it; the replicas follow the image once it
        is complete (:meth:`reconcile`)."""
        if self.metadata_fetch is None or body["request_id"] != self.metadata_fetch[0]:
            return
        self.metadata_fetch = None
        if body["error"] == ErrorCode.OFFSET_OUT_OF_RANGE:
            self.metadata.on_out_of_range()
        elif self.metadata.on_answer(body["records"], body["high_watermark"]):
            self.reconcile()

    def reconcile(self) -> None:
        """As :meth:`broker.core.BrokerCore.reconcile` for this broker's replicas, with
        the same decision (:func:`broker.metadata.replica_plan.plan_replicas`): replicas
        of a topic the image no longer has (deleted, or re-created under another id) are
        deleted (an empty replica, neither leader nor follower, takes the place of each);
        a log whose partition.metadata names another topic id than the one to host is
        deleted before the topic is hosted (:func:`log_of_other_topic`), and the others
        are labelled with it; each partition's registration becomes its leader or
        follower state."""
        hosted = self.hosted_topic_id
        plan = plan_replicas(
            self.metadata.image, self.id,
            [_key(pid) for pid in self.c.partition_ids] if hosted is not None else [],
            {TOPIC: hosted} if hosted is not None else {})
        for key in plan.drop:
            self.replace_replica(key.partition, f"topic id {hosted} deleted")
        self.hosted_topic_id = None
        for key, (topic, state) in plan.host.items():
            pid = key.partition
            topic_id = partition_metadata_label(topic)
            if hosted != topic_id:  # not hosted by this process yet
                found = self.c.disk.topic_id(self, pid)
                if log_of_other_topic(found, topic):
                    self.replace_replica(pid, f"the log belongs to deleted topic id {found}")
                    found = None
                if found != topic_id:  # (labelled already: the file stays as it is)
                    self.c.disk.set_topic_id(self, pid, topic_id)
            self.hosted_topic_id = topic_id
            self.apply_partition_state(pid, state)
        if self.txn is not None:  # as BrokerCore: the state partitions led here load
            self.txn.topic.on_partitions_changed()

    def apply_partition_state(self, pid: int, state: PartitionRegistration) -> None:
        p = self.partitions[pid]
        replicas, isr = list(state.replicas), list(state.isr)
        if self.id in isr and state.leader >= 0:
            self.recovery_cuts.discard(pid)  # in sync with a leader again: healed
        if state.leader == self.id:
            if p.make_leader(state.leader_epoch, replicas, isr, state.partition_epoch,
                             now_ms=self.c.now_ms):
                self.unfollow(pid)
                self.c.on_new_leader(self, p)
        else:
            if p.make_follower(state.leader, state.leader_epoch, replicas,
                               state.partition_epoch, isr):
                self.c.record(f"b{self.id} p{pid} follows b{state.leader} "
                              f"epoch={state.leader_epoch} leo={p.log_end_offset}")
                if pid in self.pending_cuts and state.leader >= 0:  # as BrokerCore
                    p.truncate_to(self.pending_cuts.pop(pid))
                self.unfollow(pid)
                if state.leader >= 0:
                    self.follow(p)
            elif state.leader >= 0 and not self.following(pid):
                # parked by a fenced answer: new metadata, try again (as BrokerCore)
                self.follow(p)
        self.wake_partition(pid)

    def follow(self, p: Partition) -> None:
        """As the broker's fetcher manager: the partition joins its leader's session
        (truncating first)."""
        session = self.sessions.get(p.leader_id)
        if session is None:
            cfg = self.c.config
            session = self.sessions[p.leader_id] = FollowerFetchSession(
                self.id, p.leader_id, cfg.fetch_max_bytes, cfg.replica_fetch_wait_max_ms,
                truncation_policy=cfg.truncation_policy, on_repaired=self._on_repaired,
                clock_ms=lambda: self.c.now_ms)
        hosted = self.hosted_topic_id  # fetched by id (v17) once the topic has a UUID
        session.add(p, hosted if isinstance(hosted, bytes) else ZERO_UUID)

    def unfollow(self, pid: int) -> None:
        for session in self.sessions.values():
            session.remove(_key(pid))

    def following(self, pid: int) -> bool:
        """In its leader's session (truncating or fetching; not parked)."""
        p = self.partitions.get(pid)
        session = self.sessions.get(p.leader_id) if p is not None else None
        return session is not None and _key(pid) in session.states

    def fetching(self, pid: int) -> bool:
        """Following its leader past truncation (a replica the agreement check covers)."""
        p = self.partitions.get(pid)
        session = self.sessions.get(p.leader_id) if p is not None else None
        state = session.states.get(_key(pid)) if session is not None else None
        return state is not None and not state.truncating

    # -- damaged segments (the broker's scrubber and repair) ---------------------------

    def on_damage(self, pid: int, damage: DamagedRange) -> None:
        """The scrubber found ``damage`` in this broker's replica of ``pid``: the broker's
        rule (:func:`replication.damage.on_damage_found`) and what BrokerCore does next."""
        p = self.partitions[pid]
        action, why = on_damage_found(p, damage.segment_base_offset, damage.position,
                                      damage.first_bad_offset)
        self.c.stats["damage_" + action.name.lower()] += 1
        self.c.record(f"b{self.id} p{pid} damaged from {damage.first_bad_offset} "
                      f"(segment {damage.segment_base_offset}): {action.value} {why}")
        if action is DamageAction.CUT:
            if p.is_leader:
                self.pending_cuts[pid] = damage.first_bad_offset
                self._resign(p)
            else:
                p.truncate_to(damage.first_bad_offset)
        elif action is DamageAction.RESIGN:
            self._resign(p)

    def _resign(self, p: Partition) -> None:
        """A damaged leader proposes the ISR without itself (IsrProposals.try_resign)."""
        others = tuple(b for b in p.isr if b != self.id)
        if others and p.pending_alter_partition is None:
            self.propose(p.propose_isr(others))

    def _on_repaired(self, key: TopicPartition, segment_base_offset: int) -> None:
        self.c.stats["segments_repaired"] += 1
        self.c.record(f"b{self.id} p{key.partition} segment {segment_base_offset} repaired")

    def on_alter_partition_response(self, src: int, body: dict[str, Any]) -> None:
        p = self.partitions[body["proposal"].partition]
        committed = p.on_alter_partition_response(body["proposal"], body["error"], body["isr"],
                                                  body["partition_epoch"])
        self.c.record(f"b{self.id} p{p.index} alter {body['proposal'].new_isr} -> "
                      f"{ErrorCode(body['error']).name} committed={committed}")
        self.wake_partition(p.index)

    def propose(self, proposal: Any) -> None:
        if proposal is None:
            return
        self.alter_sent_ms[proposal.partition] = self.c.now_ms
        self.send(CONTROLLER, "alter_partition", {"incarnation": self.incarnation,
                                                  "broker_epoch": self.broker_epoch,
                                                  "proposal": proposal})

    # -- leader side -----------------------------------------------------------------

    def on_request(self, src: int, body: dict[str, Any]) -> None:
        """A follower's request, answered by the broker's real handler (a Fetch with
        nothing new to read parks in the fetch purgatory until data arrives or its
        ``max_wait_ms`` ends; a crash meanwhile drops it unanswered)."""
        incarnation = self.incarnation

        def respond(answer: dict[str, Any]) -> None:
            if self.alive and self.incarnation == incarnation:
                # "marker_response": a coordinator's WriteTxnMarkers (tests.sim.txn_coordinator)
                self.send(src, body.get("reply_kind", "response"), {
                    "leader": self.id, "request": body["request"], "body": answer,
                    "topic_id": self.hosted_topic_id}, body["incarnation"])

        serve(self.handler_core, ApiKey(body["api"]), body["body"], respond)

    def _new_purgatory(self) -> Purgatory[DelayedProduce]:
        """A fresh process's produce purgatory on its own timer (the shared sim clock)."""
        self.timer = SystemTimer(self.c.clock)
        return Purgatory("produce", self.timer)

    def wake_partition(self, pid: int) -> None:
        """What the broker does when a partition's log end, HW, ISR or leadership may have
        moved: its parked produces and fetches re-check (``BrokerCore.wake_partition``)."""
        self.produce_purgatory.check_and_complete(_key(pid))
        self.handler_core.fetch_purgatory.check_and_complete(_key(pid))
        if pid == self.c.state_pid and self.txn is not None:  # the coordinator's writes
            self.produce_purgatory.check_and_complete(STATE_KEY)

    def on_produce(self, src: int, body: dict[str, Any]) -> None:
        """acks=all through the broker's real Produce handler
        (:func:`tests.sim.handlers.produce`): the append, then a :class:`DelayedProduce`
        in the produce purgatory, completed by HW moves or its timeout.  The answer to the
        producer carries, besides the handler's error and base offset, what the
        simulation's oracle keeps of the stored batch."""
        pid = body["pid"]
        p = self.partitions.get(pid)
        appended_at = p.log_end_offset if p is not None and p.is_leader else None
        leader_epoch = p.leader_epoch if p is not None else -1
        incarnation, crc, request, tag = (self.incarnation, body["crc"], body["request"],
                                          body["tag"])

        def respond(answer: dict[str, Any]) -> None:
            if not self.alive or self.incarnation != incarnation:
                return  # crashed since: the answer died with the process
            offset = answer["base_offset"]
            reply = {"request": request, "pid": pid, "error": answer["error_code"],
                     "tag": tag, "topic_id": self.hosted_topic_id}
            if offset >= 0:
                stored = self.logs[pid].batch_at(offset)  # the oracle's record id
                reply.update(offset=offset, crc=crc, record=body["record"],
                             leader_epoch=leader_epoch,
                             stored_epoch=-1 if stored is None
                             else stored.partition_leader_epoch)
            self.send(self.c.producer_id, "produce_response", reply)

        produce(self.handler_core, pid, body["batch"], self.c.config.produce_timeout_ms,
                respond, body.get("transactional_id"))
        if appended_at is not None and p is not None and p.log_end_offset > appended_at:
            self.c.record(f"b{self.id} p{pid} append @{appended_at} epoch={leader_epoch}")

    # -- follower side ---------------------------------------------------------------

    def on_response(self, src: int, body: dict[str, Any]) -> None:
        leader = body["leader"]
        out, session = self.in_flight.get(leader), self.sessions.get(leader)
        if out is None or session is None or out.request_id != body["request"]:
            return  # an answer to a request given up on (timed out, or a past session)
        del self.in_flight[leader]
        pending, answer = out.pending, body["body"]
        try:
            if pending.repair:
                session.on_repair_response(pending, answer)
            elif pending.api_key == ApiKey.OFFSETS_FOR_LEADER_EPOCH:
                session.on_truncate_response(pending, answer)
            elif pending.api_key == ApiKey.FETCH:
                follow_up = session.on_fetch_response(pending, answer)
                if follow_up is not None:
                    self._send_request(leader, follow_up)
            else:
                session.on_list_offsets_response(pending, answer)
        except MiniKafkaError as exc:
            self.c.record(f"b{self.id} fetch from b{leader}: {exc}")
            session.backoff = True
        for key in pending.states:
            self.wake_partition(key.partition)

    def _send_request(self, leader: int, pending: PendingRequest) -> None:
        request_id = self._request_id()
        self.in_flight[leader] = InFlight(request_id, pending, self.c.now_ms)
        self.send(leader, "request", {"api": int(pending.api_key), "body": pending.body,
                                      "request": request_id, "incarnation": self.incarnation})

    def _drive_sessions(self) -> None:
        """The fetcher task's loop, one request per session at a time."""
        now, cfg = self.c.now_ms, self.c.config
        for leader, session in self.sessions.items():
            out = self.in_flight.get(leader)
            if out is not None and now - out.sent_at_ms < cfg.request_timeout_ms:
                continue
            self.in_flight.pop(leader, None)
            if session.backoff:
                session.backoff = False
                self.backoff_until_ms[leader] = now + cfg.fetch_backoff_ms
            if now < self.backoff_until_ms.get(leader, 0):
                continue
            pending = session.truncate_request()
            if pending is None and self.repair_turn.get(leader):  # repairs take turns
                pending = session.repair_request()
            self.repair_turn[leader] = not self.repair_turn.get(leader, False)
            pending = pending or session.fetch_request()
            if pending is not None:
                self._send_request(leader, pending)

    # -- periodic work ---------------------------------------------------------------

    def tick(self) -> None:
        now, cfg = self.c.now_ms, self.c.config
        if now - self.last_heartbeat_ms >= cfg.heartbeat_interval_ms:
            self.last_heartbeat_ms = now
            if self.registered:
                self.send(CONTROLLER, "heartbeat", {
                    "incarnation": self.incarnation, "broker_epoch": self.broker_epoch,
                    "metadata_offset": self.metadata.image.last_applied_offset})
            else:
                self.register()
        if self.fetching_metadata and (self.metadata_fetch is None or now
                                       - self.metadata_fetch[1] > cfg.request_timeout_ms):
            request_id = self._request_id()
            self.metadata_fetch = (request_id, now)
            self.send(CONTROLLER, "metadata_fetch", {"incarnation": self.incarnation,
                                                     "request_id": request_id,
                                                     "offset": self.metadata.fetch_offset})
        shrink = now - self.last_shrink_ms >= cfg.isr_check_interval_ms
        if shrink:
            self.last_shrink_ms = now
        # no_loss: every append is flushed; lossy: a replica's occasional fsync
        flush_probability = None if cfg.no_loss else cfg.flush_probability
        retention_probability, rng = cfg.retention_probability, self.c.rng
        hw_checkpoint = self.hw_checkpoint
        for pid, p in self.partitions.items():
            hw_checkpoint[pid] = p.high_watermark
            if flush_probability is not None and rng.random() < flush_probability:
                self.logs[pid].flush()
            if retention_probability and rng.random() < retention_probability:
                self.c.on_retention(self, pid)
            if p.is_leader:
                if p.repair is not None or pid in self.pending_cuts:
                    self._resign(p)  # damaged: hands leadership on when someone is in sync
                elif shrink:
                    self.propose(p.maybe_shrink_isr(now, cfg.replica_lag_time_max_ms))
                pending = p.pending_alter_partition
                if pending is not None and now - self.alter_sent_ms.get(pid, 0) > \
                        cfg.request_timeout_ms:
                    self.propose(pending)
        if cfg.compaction_probability and self.c.rng.random() < cfg.compaction_probability:
            self.clean_step()
        self._drive_sessions()
        produce_check = self.produce_purgatory.check_and_complete
        fetch_check = self.handler_core.fetch_purgatory.check_and_complete
        for pid in self.partitions:  # wake_partition, inlined (it runs for every partition)
            key = _KEYS.get(pid) or _key(pid)
            produce_check(key)
            fetch_check(key)
        if self.txn is not None:
            produce_check(STATE_KEY)  # the coordinator's writes (wake_partition)
            self.txn.tick()
        self.timer.advance_clock()  # expired DelayedProduce (REQUEST_TIMED_OUT), DelayedFetch


_KEYS: dict[int, TopicPartition] = {}


def _key(pid: int) -> TopicPartition:
    """The partition's key (one shared, immutable instance per partition: built once)."""
    key = _KEYS.get(pid)
    if key is None:
        key = _KEYS[pid] = TopicPartition(TOPIC, pid)
    return key
