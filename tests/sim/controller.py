"""SimController: a deliberately minimal stand-in for the real controller (tests only).

It keeps, per partition, leader / leader_epoch / ISR / partition_epoch, fences brokers
that miss heartbeats for ``session_timeout_ms`` (and every broker that re-registers with a
new incarnation), elects leaders only from the live ISR (clean elections only; the last ISR
member is never removed), and validates AlterPartition by leader epoch and partition epoch.
Every change of leader bumps the leader epoch; every change bumps the partition epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clients.protocol.errors import ErrorCode
from replication.isr import AlterPartitionProposal

NO_LEADER = -1


@dataclass
class PartitionRecord:
    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0

    def as_body(self, pid: int) -> dict[str, object]:
        return {"pid": pid, "replicas": list(self.replicas), "leader": self.leader,
                "leader_epoch": self.leader_epoch, "isr": list(self.isr),
                "partition_epoch": self.partition_epoch}


@dataclass
class BrokerRegistration:
    incarnation: int
    last_heartbeat_ms: int
    fenced: bool = False


@dataclass
class SimController:
    session_timeout_ms: int
    partitions: dict[int, PartitionRecord] = field(default_factory=dict)
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    history: list[str] = field(default_factory=list)

    def live(self, broker: int) -> bool:
        reg = self.brokers.get(broker)
        return reg is not None and not reg.fenced

    def _elect(self, pid: int, rec: PartitionRecord, exclude: int = NO_LEADER) -> None:
        candidates = [r for r in rec.replicas if r in rec.isr and r != exclude and self.live(r)]
        rec.leader = candidates[0] if candidates else NO_LEADER
        rec.leader_epoch += 1
        rec.partition_epoch += 1
        self.history.append(f"elect p{pid} leader={rec.leader} epoch={rec.leader_epoch} "
                            f"isr={rec.isr}")

    def fence(self, broker: int) -> list[int]:
        """Fence ``broker``: out of every ISR (unless last), leadership moved. Changed pids."""
        reg = self.brokers.get(broker)
        if reg is not None:
            reg.fenced = True
        changed = []
        for pid, rec in self.partitions.items():
            touched = False
            if broker in rec.isr and len(rec.isr) > 1:
                rec.isr.remove(broker)
                rec.partition_epoch += 1
                touched = True
            if rec.leader == broker:
                self._elect(pid, rec, exclude=broker)
                touched = True
            if touched:
                changed.append(pid)
        self.history.append(f"fence b{broker}")
        return changed

    def unfence(self, broker: int) -> list[int]:
        self.brokers[broker].fenced = False
        changed = []
        for pid, rec in self.partitions.items():
            if rec.leader == NO_LEADER and broker in rec.isr:
                self._elect(pid, rec)
                changed.append(pid)
        self.history.append(f"unfence b{broker}")
        return changed

    def register(self, broker: int, incarnation: int, now_ms: int) -> list[int]:
        reg = self.brokers.get(broker)
        if reg is not None and reg.incarnation == incarnation:
            reg.last_heartbeat_ms = now_ms
            return []
        changed = self.fence(broker) if reg is not None else []
        self.brokers[broker] = BrokerRegistration(incarnation, now_ms)
        return sorted(set(changed) | set(self.unfence(broker)))

    def heartbeat(self, broker: int, incarnation: int, now_ms: int) -> list[int] | None:
        """None: unknown incarnation (must register)."""
        reg = self.brokers.get(broker)
        if reg is None or reg.incarnation != incarnation:
            return None
        reg.last_heartbeat_ms = now_ms
        return self.unfence(broker) if reg.fenced else []

    def tick(self, now_ms: int) -> list[int]:
        changed: set[int] = set()
        for broker, reg in self.brokers.items():
            if not reg.fenced and now_ms - reg.last_heartbeat_ms > self.session_timeout_ms:
                changed.update(self.fence(broker))
        return sorted(changed)

    def alter_partition(self, broker: int, proposal: AlterPartitionProposal
                        ) -> tuple[ErrorCode, PartitionRecord]:
        rec = self.partitions[proposal.partition]
        if rec.leader != broker or proposal.leader_epoch != rec.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, rec
        if proposal.partition_epoch != rec.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION, rec
        if broker not in proposal.new_isr or any(
                not self.live(r) for r in proposal.new_isr if r not in rec.isr):
            return ErrorCode.INELIGIBLE_REPLICA, rec
        rec.isr = list(proposal.new_isr)
        rec.partition_epoch += 1
        self.history.append(f"alter p{proposal.partition} isr={rec.isr} "
                            f"pe={rec.partition_epoch}")
        return ErrorCode.NONE, rec
