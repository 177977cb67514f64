"""The faults of a :class:`tests.sim.cluster.SimCluster`, drawn from its seeded ``rng`` once
per step (:meth:`FaultInjector.inject_faults`): broker crashes and restarts, network
partitions and heals, bit rot in one replica, process pauses, preferred-leader
elections, controller crashes, topic deletion, and whole-cluster crashes
(:class:`ClusterOutage`: every broker killed, the partition's last ISR member torn, the
restarts planned in a random order).  Each knob is a ``SimConfig`` probability; a knob at
0 draws no random number, so seeds without it replay as before.

Holds only the outage under way; everything else it acts on is the cluster's (brokers,
network, controller, disk).  Single-threaded, like the whole simulation; O(brokers) per
step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tests.sim.broker import CONTROLLER

if TYPE_CHECKING:
    from tests.sim.broker import SimBroker
    from tests.sim.cluster import SimCluster


@dataclass
class ClusterOutage:
    """A whole-cluster crash under way (``SimConfig.cluster_crash_probability``): when
    it began, the partition whose last ISR member gets torn, and once that is done the
    planned (time, "start" or "crash", broker) steps, in time order."""

    started_ms: int
    pid: int
    plan: list[tuple[int, str, int]] | None = None


class FaultInjector:
    """Injects the seeded faults into one cluster (see the module docstring)."""

    def __init__(self, cluster: SimCluster) -> None:
        self.c = cluster
        self.outage: ClusterOutage | None = None  # a whole-cluster crash under way

    def inject_faults(self) -> None:
        cfg, rng = self.c.config, self.c.rng
        if self.outage is not None:
            self.drive_outage()  # it decides who is down and when each comes back
        else:
            for b in self.c.brokers.values():
                if b.alive and rng.random() < cfg.crash_probability:
                    b.crash()
                elif not b.alive and rng.random() < cfg.restart_probability:
                    b.start()
        if rng.random() < cfg.partition_probability:
            everyone = {CONTROLLER, self.c.producer_id, self.c.consumer_id, *self.c.brokers}
            group = {rng.choice(sorted(everyone))}
            self.c.net.partition(group, everyone)
            self.c.record(f"network: isolate {group}")
        if cfg.rot_probability and rng.random() < cfg.rot_probability:
            self.rot()
        if cfg.pause_probability and rng.random() < cfg.pause_probability:
            self.pause()
        if self.c.net.cut and rng.random() < cfg.heal_probability:
            self.c.net.heal()
            self.c.record("network: heal")
        if rng.random() < cfg.leader_move_probability:
            self.c.move_leader()
        if self.c.controller_down_until_ms is None:
            if rng.random() < cfg.controller_crash_probability:
                self.c.controller_down_until_ms = self.c.now_ms + rng.randint(20, 200)
                self.c.metadata_waiting.clear()  # the process and its parked requests
                self.c.record("controller: crash")
        elif self.c.now_ms >= self.c.controller_down_until_ms:
            self.c.restart_controller()
        if cfg.topic_recreate_probability and rng.random() < cfg.topic_recreate_probability:
            self.c.recreate_topic()
        if (cfg.cluster_crash_probability and self.outage is None
                and rng.random() < cfg.cluster_crash_probability):
            self.crash_cluster()

    def crash_cluster(self) -> None:
        """Every broker killed at once (see ``SimConfig.cluster_crash_probability``)."""
        for b in self.c.brokers.values():
            if b.alive:
                b.crash()
        self.outage = ClusterOutage(self.c.now_ms, self.c.rng.choice(self.c.partition_ids))
        self.c.stats["cluster_crashes"] += 1
        self.c.record("whole-cluster crash: every broker killed; the controller fences them")

    def copies(self, torn: SimBroker, pid: int) -> set[tuple[int, int, int]]:
        """(base offset, CRC, leader epoch) of every batch another replica of ``pid``
        than ``torn`` holds on its disk: the whole-cluster crash tears only batches
        in it, as rot flips only bytes of which an intact copy exists (a record whose
        only copy is damaged is lost by the damage itself, which no election can undo;
        after a tear its second copy can be its only one until it is fetched again)."""
        return {(h.base_offset, h.crc, h.partition_leader_epoch)
                for b in self.c.brokers.values() if b is not torn
                for h in self.c.disk.headers(b, pid)}

    def drive_outage(self) -> None:
        """Once the controller has fenced every broker (or after 20 sessions: it may be
        down), tear the tail of the outage's partition on its last ISR member and plan
        the restarts; then carry them out as they fall due."""
        o = self.outage
        assert o is not None
        cfg, rng = self.c.config, self.c.rng
        if o.plan is None:
            fenced = self.c.controller_down_until_ms is None and not any(
                self.c.controller.live(b) for b in self.c.brokers)
            if not fenced and self.c.now_ms - o.started_ms < 20 * cfg.session_timeout_ms:
                return
            s = self.c.controller.partition(o.pid)
            cut = None
            if s is not None and s.leader < 0 and len(s.isr) == 1:
                cut = s.isr[0]
                torn = self.c.disk.tear_tail(self.c.brokers[cut], o.pid,
                                           self.copies(self.c.brokers[cut], o.pid))
                self.c.record(f"b{cut} p{o.pid}, its only ISR member: {torn or 'nothing to tear'}")
                self.c.stats["last_isr_members_torn"] += torn is not None
            else:
                self.c.record(f"p{o.pid}: {s}: not down to one ISR member; nothing torn")
            at, o.plan = self.c.now_ms, []
            for bid in rng.sample(sorted(self.c.brokers), len(self.c.brokers)):
                at += rng.randint(0, 2 * cfg.session_timeout_ms)
                o.plan.append((at, "start", bid))
                if bid == cut and rng.random() < 0.5:  # killed again before all are back
                    again = at + rng.randint(1, 2 * cfg.session_timeout_ms)
                    o.plan += [(again, "crash", bid),
                               (again + rng.randint(0, 2 * cfg.session_timeout_ms),
                                "start", bid)]
            o.plan.sort()
            self.c.record("restarts planned: " + ", ".join(f"{a} b{b} t={t}"
                                                          for t, a, b in o.plan))
        while o.plan and o.plan[0][0] <= self.c.now_ms:
            _, action, bid = o.plan.pop(0)
            b = self.c.brokers[bid]
            if action == "start" and not b.alive:
                b.start()
            elif action == "crash" and b.alive:
                b.crash()
        if not o.plan:
            self.outage = None

    def pause(self) -> None:
        """A live broker stops for a while (see ``SimConfig.pause_probability``)."""
        running = [b for b in self.c.brokers.values() if b.alive and not b.paused(self.c.now_ms)]
        if not running:
            return
        b = self.c.rng.choice(running)
        cfg = self.c.config
        b.paused_until_ms = self.c.now_ms + self.c.rng.randint(cfg.pause_min_ms, cfg.pause_max_ms)
        self.c.stats["pauses"] += 1
        self.c.record(f"pause b{b.id} until t={b.paused_until_ms}")

    def rot(self) -> None:
        """Bit rot in one replica (see ``SimConfig.rot_probability``), found at once."""
        pid = self.c.rng.choice(self.c.partition_ids)
        live = [b for b in self.c.brokers.values() if b.alive]
        if not live or any(p == pid for _, p in self.c.rotted):
            return  # another replica of pid is damaged: keep one good copy of everything
        b = self.c.rng.choice(live)
        rotted = self.c.disk.rot(b, pid)
        if rotted is None:
            return
        self.c.rotted[(b.id, pid)] = rotted
        self.c.stats["rotted_segments"] += 1
        self.c.record(f"b{b.id} p{pid}: rot in segment {rotted[0]}")
        self.c.rescrub(b)
