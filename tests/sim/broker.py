"""SimBroker: the replication adapter in miniature, around the pure Partition core.

It plays the roles the real broker's handlers, replica fetcher and controller client will
play: answers Fetch / OffsetsForLeaderEpoch / Produce as a leader, runs the truncation
handshake and fetch loop as a follower, proposes ISR changes, heartbeats the controller and
applies metadata.  Everything goes through :class:`tests.sim.network.SimNetwork`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from broker.controller.results import ReplicaLog
from broker.delayed import DelayedProduce, ProducePartitionStatus
from broker.metadata.replica_logs import last_leader_epoch
from clients.protocol.errors import ErrorCode, MiniKafkaError
from replication.leader_epoch_cache import LeaderEpochCache
from replication.partition import Partition
from replication.truncation import EpochEndOffset
from storage.log.log import Log
from tests.sim.controller import TOPIC
from tests.sim.sim_log import MemoryCheckpoint, MemoryLog
from timer.purgatory import Purgatory
from timer.system_timer import SystemTimer

if TYPE_CHECKING:
    from tests.sim.cluster import SimCluster

CONTROLLER = 0


@dataclass
class FetcherState:
    phase: str                  # "truncating" | "fetching"
    outstanding: int | None = None
    sent_at_ms: int = 0


class SimBroker:
    def __init__(self, cluster: SimCluster, broker_id: int) -> None:
        self.c = cluster
        self.id = broker_id
        self.alive = False
        self.incarnation = 0
        self.registered = False
        self.broker_epoch = -1
        self.metadata_offset = -1                            # of the last metadata applied
        self.logs: dict[int, Any] = {}                      # the disk: survives crashes
        self.epoch_checkpoints: dict[int, MemoryCheckpoint] = {}
        self.hw_checkpoint: dict[int, int] = {}
        self.partitions: dict[int, Partition] = {}
        self.fetchers: dict[int, FetcherState] = {}
        self.produce_purgatory = self._new_purgatory()
        self.next_request = 0
        self.last_heartbeat_ms = -10**9
        self.last_shrink_ms = 0
        self.alter_sent_ms: dict[int, int] = {}

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self.alive = True
        self.incarnation += 1
        self.registered = False
        for pid in self.c.partition_ids:
            log = self.c.disk.open_log(self, pid)
            self.logs[pid] = log
            if isinstance(log, MemoryLog):
                ckpt = self.epoch_checkpoints.setdefault(pid, MemoryCheckpoint())
                cache = LeaderEpochCache.load(ckpt, log.log_start_offset, log.log_end_offset)
                p = Partition("t", pid, cast(Log, log), self.id, leader_epoch_cache=cache)
            else:
                p = Partition("t", pid, log, self.id)
            p.high_watermark = min(self.hw_checkpoint.get(pid, 0), log.log_end_offset)
            self.partitions[pid] = p
        self.c.record(f"start b{self.id} inc={self.incarnation} "
                      + " ".join(f"p{pid}:leo={p.log_end_offset},hw={p.high_watermark}"
                                 for pid, p in self.partitions.items()))
        self.broker_epoch, self.metadata_offset = -1, -1
        self.register()

    def register(self) -> None:
        """BrokerRegistration with a report of every log (the safe election's input): a
        log that now ends below its checkpointed HW counts as cut by recovery, as in
        :mod:`broker.metadata.replica_logs`."""
        logs = [ReplicaLog(TOPIC, pid, -1, last_leader_epoch(cast(Log, log)),
                           log.log_end_offset,
                           log.log_end_offset < self.hw_checkpoint.get(pid, 0))
                for pid, log in sorted(self.logs.items())]
        self.send(CONTROLLER, "register", {"incarnation": self.incarnation, "logs": logs})

    def crash(self) -> None:
        self.alive = False
        self.partitions.clear()
        self.fetchers.clear()
        self.produce_purgatory.shutdown()  # the process is gone: nothing answers
        self.produce_purgatory = self._new_purgatory()
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
        getattr(self, "on_" + kind)(src, body)

    # -- controller side -------------------------------------------------------------

    def on_register_response(self, src: int, body: dict[str, Any]) -> None:
        if body["error"] != ErrorCode.NONE:
            self.c.record(f"b{self.id} register: {ErrorCode(body['error']).name}")
            return  # the next tick registers again
        self.registered, self.broker_epoch = True, body["broker_epoch"]
        self.on_metadata(src, body)

    def on_reregister(self, src: int, body: dict[str, Any]) -> None:
        self.registered = False
        self.register()

    def on_metadata(self, src: int, body: dict[str, Any]) -> None:
        """Metadata up to ``offset`` (older deliveries than the last applied are dropped:
        a real broker reads the metadata log in order)."""
        if not self.registered or body["offset"] <= self.metadata_offset:
            return
        self.metadata_offset = body["offset"]
        for rec in body["partitions"]:
            self.apply_partition_record(rec)

    def apply_partition_record(self, rec: dict[str, Any]) -> None:
        pid = rec["pid"]
        p = self.partitions[pid]
        if rec["leader"] == self.id:
            if p.make_leader(rec["leader_epoch"], rec["replicas"], rec["isr"],
                             rec["partition_epoch"], now_ms=self.c.now_ms):
                self.fetchers.pop(pid, None)
                self.c.on_new_leader(self, p)
        else:
            if p.make_follower(rec["leader"], rec["leader_epoch"], rec["replicas"],
                               rec["partition_epoch"], rec["isr"]):
                self.c.record(f"b{self.id} p{pid} follows b{rec['leader']} "
                              f"epoch={rec['leader_epoch']} leo={p.log_end_offset}")
                if rec["leader"] >= 0:
                    self.fetchers[pid] = FetcherState("truncating")
                else:
                    self.fetchers.pop(pid, None)
        self.check_produces(pid)

    def on_alter_partition_response(self, src: int, body: dict[str, Any]) -> None:
        p = self.partitions[body["proposal"].partition]
        committed = p.on_alter_partition_response(body["proposal"], body["error"], body["isr"],
                                                  body["partition_epoch"])
        self.c.record(f"b{self.id} p{p.index} alter {body['proposal'].new_isr} -> "
                      f"{ErrorCode(body['error']).name} committed={committed}")
        self.check_produces(p.index)

    def propose(self, proposal: Any) -> None:
        if proposal is None:
            return
        self.alter_sent_ms[proposal.partition] = self.c.now_ms
        self.send(CONTROLLER, "alter_partition", {"incarnation": self.incarnation,
                                                  "broker_epoch": self.broker_epoch,
                                                  "proposal": proposal})

    # -- leader side -----------------------------------------------------------------

    def _leader(self, pid: int) -> Partition:
        p = self.partitions[pid]
        if not p.is_leader:
            raise MiniKafkaError("not leader", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return p

    def on_fetch(self, src: int, body: dict[str, Any]) -> None:
        pid = body["pid"]
        reply: dict[str, Any] = {"pid": pid, "request": body["request"],
                                 "fetch_offset": body["fetch_offset"], "error": 0,
                                 "leader_epoch": body["leader_epoch"]}
        try:
            p = self._leader(pid)
            reply["leader_leo"], reply["log_start"] = p.log_end_offset, p.log_start_offset
            p.check_leader_epoch(body["leader_epoch"])
            data = p.read_records(body["fetch_offset"], self.c.config.fetch_max_bytes,
                                  for_follower=True).read_bytes()
            p.update_follower_fetch(src, body["fetch_offset"], self.c.now_ms)
            self.propose(p.maybe_expand_isr(src))
            reply.update(data=data, hw=p.high_watermark)
        except MiniKafkaError as exc:
            reply["error"] = int(exc.code)
        self.send(src, "fetch_response", reply, body["incarnation"])
        self.check_produces(pid)

    def on_epoch_request(self, src: int, body: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"pid": body["pid"], "request": body["request"], "error": 0,
                                 "leader_epoch": body["leader_epoch"]}
        try:
            p = self._leader(body["pid"])
            answer = p.last_offset_for_leader_epoch(body["leader_epoch"], body["requested"])
            reply.update(epoch=answer.leader_epoch, end_offset=answer.end_offset)
        except MiniKafkaError as exc:
            reply["error"] = int(exc.code)
        self.send(src, "epoch_response", reply, body["incarnation"])

    def _new_purgatory(self) -> Purgatory[DelayedProduce]:
        """A fresh process's produce purgatory on its own timer (the shared sim clock)."""
        self.timer = SystemTimer(self.c.clock)
        return Purgatory("produce", self.timer)

    def check_produces(self, pid: int) -> None:
        """What the broker does when a partition's HW, ISR or leadership may have moved."""
        self.produce_purgatory.check_and_complete(pid)

    def on_produce(self, src: int, body: dict[str, Any]) -> None:
        """acks=all as the broker does it: append, then a :class:`DelayedProduce` in the
        produce purgatory, completed by HW moves or its timeout."""
        pid = body["pid"]
        try:
            p = self._leader(pid)
            info = p.append_records_as_leader(body["batch"], -1, self.c.config.min_insync_replicas)
        except MiniKafkaError as exc:
            self.send(src, "produce_response", {"request": body["request"], "pid": pid,
                                                "error": int(exc.code)})
            return
        self.c.record(f"b{self.id} p{pid} append @{info.first_offset} epoch={p.leader_epoch}")
        result: dict[str, Any] = {"error_code": 0, "base_offset": info.first_offset}
        status = ProducePartitionStatus(p, info.last_offset + 1, result, p.leader_epoch)
        incarnation, crc, request = self.incarnation, body["crc"], body["request"]

        def respond() -> None:
            if not self.alive or self.incarnation != incarnation:
                return  # crashed since: the answer died with the process
            self.send(self.c.producer_id, "produce_response",
                      {"request": request, "pid": pid, "error": result["error_code"],
                       "offset": info.first_offset, "crc": crc,
                       "leader_epoch": status.leader_epoch})

        op = DelayedProduce(self.c.config.produce_timeout_ms, [status],
                            lambda _topic: self.c.config.min_insync_replicas, respond)
        self.produce_purgatory.try_complete_else_watch(op, [pid])

    # -- follower side ---------------------------------------------------------------

    def on_epoch_response(self, src: int, body: dict[str, Any]) -> None:
        pid = body["pid"]
        f, p = self.fetchers.get(pid), self.partitions[pid]
        if (f is None or f.phase != "truncating" or f.outstanding != body["request"]
                or body["leader_epoch"] != p.leader_epoch or p.is_leader):
            return
        if body["error"]:
            f.outstanding = -1  # back off until the request timeout
            return
        leo = p.log_end_offset
        decision = p.truncate_on_leader_answer(
            EpochEndOffset(body["epoch"], body["end_offset"]), self.c.config.truncation_policy)
        self.c.stats["truncations"] += 1
        if p.log_end_offset < leo:
            self.c.stats["truncations_removing_data"] += 1
        if not decision.completed:
            self.c.stats["truncation_extra_rounds"] += 1
        self.c.record(f"b{self.id} p{pid} truncate to {decision.truncate_to} "
                      f"({decision.reason}) leo={p.log_end_offset}")
        f.outstanding = None
        if decision.completed:
            f.phase = "fetching"

    def on_fetch_response(self, src: int, body: dict[str, Any]) -> None:
        pid = body["pid"]
        f, p = self.fetchers.get(pid), self.partitions[pid]
        if (f is None or f.phase != "fetching" or f.outstanding != body["request"]
                or body["leader_epoch"] != p.leader_epoch or p.is_leader
                or body["fetch_offset"] != p.log_end_offset):
            return
        f.outstanding = None
        error = body["error"]
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            if body["fetch_offset"] > body["leader_leo"]:
                self.c.record(f"b{self.id} p{pid} fetch {body['fetch_offset']} past leader "
                              f"LEO {body['leader_leo']}: truncate")
                p.truncate_to(body["leader_leo"])
            elif body["fetch_offset"] < body["log_start"]:
                p.truncate_fully_and_start_at(body["log_start"])
            return
        if error:
            f.outstanding = -1
            return
        p.append_records_as_follower(body["data"], body["hw"], body["log_start"])

    # -- periodic work ---------------------------------------------------------------

    def tick(self) -> None:
        now, cfg = self.c.now_ms, self.c.config
        if now - self.last_heartbeat_ms >= cfg.heartbeat_interval_ms:
            self.last_heartbeat_ms = now
            if self.registered:
                self.send(CONTROLLER, "heartbeat", {"incarnation": self.incarnation,
                                                    "broker_epoch": self.broker_epoch,
                                                    "metadata_offset": self.metadata_offset})
            else:
                self.register()
        shrink = now - self.last_shrink_ms >= cfg.isr_check_interval_ms
        if shrink:
            self.last_shrink_ms = now
        for pid, p in self.partitions.items():
            self.hw_checkpoint[pid] = p.high_watermark
            self.c.disk.maybe_flush(self, pid)
            if p.is_leader:
                if shrink:
                    self.propose(p.maybe_shrink_isr(now, cfg.replica_lag_time_max_ms))
                pending = p.pending_alter_partition
                if pending is not None and now - self.alter_sent_ms.get(pid, 0) > \
                        cfg.request_timeout_ms:
                    self.propose(pending)
                continue
            f = self.fetchers.get(pid)
            if f is None or (f.outstanding is not None
                             and now - f.sent_at_ms < cfg.request_timeout_ms):
                continue
            f.outstanding, f.sent_at_ms = self._request_id(), now
            common = {"pid": pid, "request": f.outstanding, "leader_epoch": p.leader_epoch,
                      "incarnation": self.incarnation}
            if f.phase == "truncating":
                self.send(p.leader_id, "epoch_request",
                          {**common, "requested": p.truncation_request_epoch})
            else:
                self.send(p.leader_id, "fetch", {**common, "fetch_offset": p.log_end_offset})
        for pid in self.partitions:
            self.check_produces(pid)
        self.timer.advance_clock()  # expired DelayedProduce: REQUEST_TIMED_OUT
