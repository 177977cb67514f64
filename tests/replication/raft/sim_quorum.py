"""Seeded event simulation of a KRaft quorum: the REAL replicas under a hostile world.

:class:`QuorumSim` runs N :class:`replication.raft.replica.KRaftReplica` (the module the
controller is meant to run, unchanged) over :class:`tests.replication.raft.sim_io.SimNetwork`
(delay, reorder, drop, duplicate, directed cuts that heal), one simulated clock
(``timer.clock.ManualClock``) and a :class:`SimDisk` per voter: a crash keeps only the
quorum state written through the store and the log's flushed entries; restarts build a
new replica from them.  A client appends to whoever leads; leaders sometimes resign.
With ``wipe_probability`` a restart may be on a wiped disk (empty log, no quorum state;
at most a minority of voters observers at once): the voter comes back an observer
(``KRaftReplica(observer=True)``), recorded a voter again once its replica says so, as
:mod:`broker.controller.quorum.metadata_quorum` does.  The vote check then also covers
the votes a wiped disk forgot (docs/quorum.md, "not covered").

Invariants, checked after every step (a violation raises :class:`Violation` whose message
starts with ``seed=<n>``; replay with ``python3 -m tests.replication.raft.sim_quorum
--seed <n> --voters N``):

* election safety: at most one leader per epoch;
* one vote per voter and epoch, also across restarts (from the granted answers sent);
* committed entries never change: every voter's prefix below its high watermark, and
  the durable log a voter restarts from (below its last HW), agree with one committed log;
* leader completeness: a leader holds every entry committed in an earlier epoch (a
  deposed leader that has not heard of the new epoch yet may lack newer ones);
* within one incarnation the HW never goes back and the log is never truncated below it
  (the HW is not persisted: a restarted voter relearns it);
* every voter's applied prefix (entries applied up to its HW) is a prefix of the committed
  log;
* with ``snapshot_probability`` (KIP-630): voters snapshot their committed state and cut
  their logs; a snapshot installed by FetchSnapshot holds exactly the committed payloads
  below its end, and what a voter applies from it (its HW jumps to the snapshot's end)
  is checked like entries;
* liveness (at the end): with every voter up and the network healed and reliable, a
  leader is elected and a new append commits within ``settle_ms``, and every observer
  has become a voter again.

Not modelled: clock jumps or skew between voters (one clock), torn writes inside one
event (a crash falls between events).
"""

from __future__ import annotations

import argparse
import bisect
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from replication.raft.config import RaftConfig
from replication.raft.messages import (
    Entry,
    OffsetAndEpoch,
    QuorumVoteResponse,
    RaftMessage,
    Send,
)
from replication.raft.quorum_state import QuorumRole
from replication.raft.raft_log import MemoryRaftLog
from replication.raft.replica import KRaftReplica
from replication.raft.snapshot_store import MemorySnapshotStore
from tests.replication.raft.sim_io import (
    LazyStore,
    SimDisk,
    SimNetwork,
    SimStore,
    snapshot_payloads,
)
from timer.clock import ManualClock


class Violation(AssertionError):
    """An invariant of the quorum does not hold."""


@dataclass(frozen=True)
class SimSettings:
    voters: int = 3
    steps: int = 2000
    drop_probability: float = 0.05
    duplicate_probability: float = 0.03
    max_delay_ms: int = 40
    max_tick_ms: int = 60
    crash_probability: float = 0.004
    leader_crash_probability: float = 0.001  # the active leader, whoever it is
    restart_probability: float = 0.03
    partition_probability: float = 0.004
    heal_probability: float = 0.01
    append_probability: float = 0.3
    resign_probability: float = 0.002
    lazy_store: bool = False  # BROKEN on purpose: the vote is durable after the answer
    settle_ms: int = 30_000
    # a restart on a wiped disk (at most a minority of voters observers at once): the
    # voter comes back an observer until caught up, as the controller starts it
    wipe_probability: float = 0.0
    trust_wiped: bool = False  # BROKEN on purpose: a wiped voter restarts as a voter
    max_fetch_entries: int = 3  # small, so old and new epochs commit in separate steps
    snapshot_probability: float = 0.0  # a live voter snapshots its HW and cuts its log


class SimLog(MemoryRaftLog):
    """The real in-memory log, recording how low it was truncated (for the checks)."""

    def __init__(self, entries: tuple[Entry, ...], snapshot: OffsetAndEpoch | None) -> None:
        super().__init__(entries, snapshot)
        self.lowest_truncation: int | None = None

    def truncate_to(self, offset: int) -> None:
        if offset < self.end_offset and (self.lowest_truncation is None
                                         or offset < self.lowest_truncation):
            self.lowest_truncation = offset
        super().truncate_to(offset)


ReplicaFactory = Callable[..., KRaftReplica]


class QuorumSim:
    def __init__(self, seed: int, settings: SimSettings,
                 replica_factory: ReplicaFactory = KRaftReplica) -> None:
        self.seed = seed
        self.settings = settings
        self.rng = random.Random(seed)
        self.clock = ManualClock(0)
        self.ids = list(range(1, settings.voters + 1))
        self.config = RaftConfig(max_fetch_entries=settings.max_fetch_entries)
        self.network = SimNetwork(self.rng, settings.drop_probability,
                                  settings.duplicate_probability, 1, settings.max_delay_ms)
        self.factory = replica_factory
        self.disks = {i: SimDisk() for i in self.ids}
        self.nodes: dict[int, KRaftReplica | None] = dict.fromkeys(self.ids)
        self.incarnation = dict.fromkeys(self.ids, 0)
        self.hw_seen = dict.fromkeys(self.ids, 0)
        self.last_hw = dict.fromkeys(self.ids, 0)  # of the last incarnation
        self.applied: dict[int, list[bytes]] = {i: [] for i in self.ids}
        self.leader_checked: dict[int, tuple[int, int]] = {}  # node -> (epoch, offset)
        self.committed: list[Entry] = []
        self.commit_epochs: list[int] = []  # the epoch of the leader that committed each
        self.leaders: dict[int, int] = {}  # epoch -> leader
        self.snapshot_stores: dict[int, MemorySnapshotStore] = {}
        self.votes: dict[tuple[int, int], int] = {}  # (voter, epoch) -> candidate
        self.appended = 0
        self.step_no = 0
        self.stats = {"crashes": 0, "truncations": 0, "partitions": 0, "snapshots": 0,
                      "installs": 0, "wipes": 0, "rejoins": 0}
        self.observer_dir = dict.fromkeys(self.ids, False)  # quorum-directory "observer"
        for i in self.ids:
            self._start(i)

    # -- the world -------------------------------------------------------------------

    def _start(self, node: int) -> None:
        disk = self.disks[node]
        start = disk.log_snapshot.end_offset if disk.log_snapshot is not None else 0
        self._check_restart_log(node, disk.log, start)
        store = LazyStore(disk) if self.settings.lazy_store else SimStore(disk)
        self.incarnation[node] += 1
        self.hw_seen[node] = 0
        self.applied[node] = []
        self.leader_checked.pop(node, None)
        self.snapshot_stores[node] = MemorySnapshotStore(self._check_installed, disk.snapshots)
        extra = {"observer": True} if self.observer_dir[node] else {}
        self.nodes[node] = self.factory(node, self.ids, SimLog(disk.log, disk.log_snapshot),
                                        store, self.clock, random.Random(self.rng.random()),
                                        self.config, snapshots=self.snapshot_stores[node],
                                        **extra)

    def _wipe(self, node: int) -> None:
        """The disk of a down voter is lost: it restarts empty, an observer."""
        self.disks[node] = SimDisk()
        self.last_hw[node] = 0
        self.observer_dir[node] = not self.settings.trust_wiped
        self.stats["wipes"] += 1

    def _crash(self, node: int) -> None:
        replica = self.nodes[node]
        assert replica is not None and isinstance(replica.log, SimLog)
        self.disks[node].log = replica.log.durable_entries()
        self.disks[node].log_snapshot = replica.log.durable_snapshot()
        if self.settings.lazy_store:
            LazyStore.crash(self.disks[node])
        self.last_hw[node] = replica.high_watermark
        self.nodes[node] = None
        self.stats["crashes"] += 1

    def _send(self, src: int, sends: list[Send]) -> None:
        now = self.clock.now_ms()
        for send in sends:
            self._check_vote(src, send.destination, send.message)
            self.network.send(now, src, self.incarnation[src], send.destination, send.message)

    def _faults(self) -> None:
        s, rng = self.settings, self.rng
        live = [i for i, n in self.nodes.items() if n is not None]
        down = [i for i, n in self.nodes.items() if n is None]
        if live and rng.random() < s.crash_probability:
            self._crash(rng.choice(live))
        leader = self.leader()
        if leader is not None and rng.random() < s.leader_crash_probability:
            self._crash(leader.node_id)
        if down and rng.random() < s.restart_probability:
            node = rng.choice(down)
            observers = sum(self.observer_dir.values())
            if (s.wipe_probability and rng.random() < s.wipe_probability
                    and observers < (len(self.ids) - 1) // 2):
                self._wipe(node)
            self._start(node)
        if rng.random() < s.partition_probability:
            side = set(rng.sample(self.ids, rng.randint(1, len(self.ids) // 2 + 1)))
            both = rng.random() < 0.7  # else asymmetric: only messages out of `side` cut
            self.stats["partitions"] += 1
            for a in side:
                for b in self.ids:
                    if b not in side:
                        self.network.cut.add((a, b))
                        if both:
                            self.network.cut.add((b, a))
        if self.network.cut and rng.random() < s.heal_probability:
            self.network.cut.clear()
        if s.snapshot_probability and live and rng.random() < s.snapshot_probability:
            self._snapshot(rng.choice(live))
        for i, n in self.nodes.items():
            if n is not None and n.role is QuorumRole.LEADER:
                if rng.random() < s.append_probability:
                    self.appended += 1
                    n.append([f"v{self.appended}".encode() for _ in range(rng.randint(1, 3))])
                if rng.random() < s.resign_probability:
                    self._send(i, n.resign())

    def _snapshot(self, node: int) -> None:
        """The voter's application snapshots its committed state and cuts its log."""
        replica = self.nodes[node]
        if replica is None or replica.high_watermark <= replica.log.start_offset:
            return
        log, hw = replica.log, replica.high_watermark
        assert isinstance(log, SimLog)
        payloads = self._payloads_below(node, log.start_offset)
        payloads += [log.entry_at(o).payload for o in range(log.start_offset, hw)]
        snapshot_id = OffsetAndEpoch(hw, log.epoch_cache.epoch_for_offset(hw - 1))
        self.snapshot_stores[node].write(snapshot_id, b"\n".join(payloads))
        log.advance_start_offset(hw)
        self.stats["snapshots"] += 1

    def _payloads_below(self, node: int, end: int) -> list[bytes]:
        """The payloads below ``end`` from the voter's snapshot ending there."""
        if end == 0:
            return []
        found = [d for i, d in self.disks[node].snapshots.items() if i.end_offset == end]
        if not found:
            self.fail(f"voter {node}: no snapshot ends at its log start {end}")
        return snapshot_payloads(found[0])

    def _check_installed(self, snapshot_id: OffsetAndEpoch, data: bytes) -> bool:
        """A snapshot a follower installs holds exactly the committed payloads."""
        payloads = snapshot_payloads(data)
        committed = [e.payload for e in self.committed[:snapshot_id.end_offset]]
        if len(payloads) != snapshot_id.end_offset or payloads != committed:
            self.fail(f"installed snapshot {snapshot_id} is not the committed state")
        self.stats["installs"] += 1
        return True

    def step(self, faults: bool = True) -> None:
        self.step_no += 1
        if faults:
            self._faults()
        now = self.clock.now_ms()
        due = [n.next_deadline_ms() for n in self.nodes.values() if n is not None]
        nxt = self.network.next_delivery_ms()
        if nxt is not None:
            due.append(nxt)
        target = min([now + self.rng.randint(1, self.settings.max_tick_ms), *due])
        self.clock.set(max(now + 1, target))
        now = self.clock.now_ms()
        for src, _, dst, message in self.network.due(now):
            replica = self.nodes[dst]
            if replica is not None:
                self._send(dst, replica.handle(src, message))
        for i in self.ids:
            replica = self.nodes[i]
            if replica is not None and replica.next_deadline_ms() <= now:
                self._send(i, replica.poll())
        for i, replica in self.nodes.items():  # the controller records it before more events
            if replica is not None and self.observer_dir[i] and not replica.observer:
                self.observer_dir[i] = False
                self.stats["rejoins"] += 1
        self.check()

    # -- invariants ------------------------------------------------------------------

    def fail(self, what: str) -> None:
        raise Violation(f"seed={self.seed} voters={self.settings.voters} step={self.step_no} "
                        f"t={self.clock.now_ms()}ms: {what}\nreplay: python3 -m "
                        f"tests.replication.raft.sim_quorum --seed {self.seed} "
                        f"--voters {self.settings.voters} --steps {self.settings.steps}"
                        f" --snapshots {self.settings.snapshot_probability}"
                        f" --wipes {self.settings.wipe_probability}")

    def _check_vote(self, voter: int, candidate: int, message: RaftMessage) -> None:
        if isinstance(message, QuorumVoteResponse) and message.granted and not message.pre_vote:
            before = self.votes.setdefault((voter, message.epoch), candidate)
            if before != candidate:
                self.fail(f"double vote: voter {voter} voted for {before} and {candidate} "
                          f"in epoch {message.epoch}")

    def _check_restart_log(self, node: int, log: tuple[Entry, ...], start: int) -> None:
        for o in range(start, min(start + len(log), self.last_hw[node], len(self.committed))):
            if log[o - start] != self.committed[o]:
                self.fail(f"committed entry changed: voter {node} restarts with "
                          f"{log[o - start]} at offset {o}, committed {self.committed[o]}")

    def check(self) -> None:
        for i, n in self.nodes.items():
            if n is None:
                continue
            log = n.log
            assert isinstance(log, SimLog)
            hw = n.high_watermark
            if n.role is QuorumRole.LEADER:
                other = self.leaders.setdefault(n.epoch, i)
                if other != i:
                    self.fail(f"two leaders in epoch {n.epoch}: {other} and {i}")
            if hw < self.hw_seen[i]:
                self.fail(f"HW of voter {i} went back from {self.hw_seen[i]} to {hw}")
            if log.lowest_truncation is not None and log.lowest_truncation < self.hw_seen[i]:
                self.fail(f"voter {i} truncated to {log.lowest_truncation} below its HW "
                          f"{self.hw_seen[i]}")
            if log.lowest_truncation is not None:
                self.stats["truncations"] += 1
            log.lowest_truncation = None
            if hw > log.end_offset:
                self.fail(f"voter {i} HW {hw} past its log end {log.end_offset}")
            below = self._payloads_below(i, log.start_offset) \
                if self.hw_seen[i] < log.start_offset else []
            for o in range(self.hw_seen[i], min(hw, log.start_offset)):  # from a snapshot
                if o >= len(self.committed) or below[o] != self.committed[o].payload:
                    self.fail(f"voter {i}'s snapshot has {below[o]!r} at {o}, not committed")
            for o in range(max(self.hw_seen[i], log.start_offset), hw):
                entry = log.entry_at(o)
                if o < len(self.committed):
                    if entry != self.committed[o]:
                        self.fail(f"committed entry changed: voter {i} has {entry} at {o}, "
                                  f"committed {self.committed[o]}")
                else:
                    self.committed.append(entry)
                    self.commit_epochs.append(log.entry_at(hw - 1).epoch)
            self.hw_seen[i] = hw
            applied = self.applied[i]
            for o in range(len(applied), hw):
                applied.append(below[o] if o < log.start_offset else log.entry_at(o).payload)
                if applied[o] != self.committed[o].payload:
                    self.fail(f"voter {i} applied {applied[o]!r} at {o}, committed "
                              f"{self.committed[o].payload!r}")
            if n.role is QuorumRole.LEADER:
                # Raft's leader completeness: what was committed in an earlier epoch
                must_have = bisect.bisect_left(self.commit_epochs, n.epoch)
                if log.end_offset < must_have:
                    self.fail(f"leader {i} of epoch {n.epoch} misses committed entries: its "
                              f"log ends at {log.end_offset}, committed {must_have} before")
                epoch, checked = self.leader_checked.get(i, (-1, 0))
                for o in range(max(hw, checked if epoch == n.epoch else 0), must_have):
                    if log.entry_at(o) != self.committed[o]:
                        self.fail(f"leader {i} of epoch {n.epoch} has {log.entry_at(o)} at "
                                  f"{o}, committed {self.committed[o]}")
                self.leader_checked[i] = (n.epoch, max(must_have, checked))  # it never truncates

    # -- runs ------------------------------------------------------------------------

    def leader(self) -> KRaftReplica | None:
        leaders = [n for n in self.nodes.values() if n is not None
                   and n.role is QuorumRole.LEADER]
        return max(leaders, key=lambda n: n.epoch) if leaders else None

    def settle(self) -> None:
        """Liveness: all up, healed, reliable; a leader must commit a new append."""
        self.network.cut.clear()
        self.network.drop_probability = self.network.duplicate_probability = 0.0
        for i in self.ids:
            if self.nodes[i] is None:
                self._start(i)
        deadline = self.clock.now_ms() + self.settings.settle_ms
        marker: int | None = None
        while self.clock.now_ms() < deadline:
            self.step(faults=False)
            leader = self.leader()
            if leader is None:
                continue
            if marker is None or leader.epoch != marker:
                marker = leader.epoch
                target = leader.append([b"settle"])
                assert target is not None
            if all(n is not None and n.high_watermark > target and not n.observer
                   for n in self.nodes.values()):
                return  # committed everywhere, and a wiped voter a voter again
        self.fail(f"no progress within {self.settings.settle_ms} ms of a healed, reliable "
                  f"network: leader={self.leader() and self.leader().node_id}")  # type: ignore[union-attr]

    def run(self) -> QuorumSim:
        for _ in range(self.settings.steps):
            self.step()
        self.settle()
        return self


def disruption_check(seed: int, voters: int = 5,
                     replica_factory: ReplicaFactory = KRaftReplica) -> QuorumSim:
    """PreVote's promise: one voter cut off for 10 s and healed does not depose a leader
    that kept its majority (no crashes, light loss).  Raises :class:`Violation`."""
    quiet = SimSettings(voters=voters, steps=0, drop_probability=0.01,
                        duplicate_probability=0.01, crash_probability=0.0,
                        partition_probability=0.0, heal_probability=0.0,
                        resign_probability=0.0)
    sim = QuorumSim(seed, quiet, replica_factory)
    while sim.leader() is None or sim.clock.now_ms() < 5000:
        sim.step()
    leader = sim.leader()
    assert leader is not None
    epoch = leader.epoch
    lonely = sim.rng.choice([i for i in sim.ids if i != leader.node_id])
    sim.network.cut |= {(lonely, j) for j in sim.ids} | {(j, lonely) for j in sim.ids}
    until = sim.clock.now_ms() + 10_000
    while sim.clock.now_ms() < until:
        sim.step()
    sim.network.cut.clear()
    until = sim.clock.now_ms() + 5_000
    while sim.clock.now_ms() < until:
        sim.step()
        if leader.role is not QuorumRole.LEADER:
            sim.fail(f"disruption: leader {leader.node_id} of epoch {epoch} deposed (now "
                     f"epoch {leader.epoch}) "
                     f"after voter {lonely} came back from a partition")
    return sim


def run_seed(seed: int, settings: SimSettings,
             replica_factory: ReplicaFactory = KRaftReplica) -> QuorumSim:
    return QuorumSim(seed, settings, replica_factory).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="KRaft quorum simulation sweep")
    parser.add_argument("--seed", type=int, help="replay one seed")
    parser.add_argument("--seeds", type=int, default=1000, help="seeds 0..N-1")
    parser.add_argument("--voters", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--snapshots", type=float, default=0.0,
                        help="probability per step that a voter snapshots and cuts its log")
    parser.add_argument("--wipes", type=float, default=0.0,
                        help="probability that a restart is on a wiped disk (an observer)")
    args = parser.parse_args(argv)
    settings = replace(SimSettings(), voters=args.voters, steps=args.steps,
                       snapshot_probability=args.snapshots, wipe_probability=args.wipes)
    seeds = [args.seed] if args.seed is not None else range(args.seeds)
    started, failures = time.monotonic(), 0
    for seed in seeds:
        try:
            run_seed(seed, settings)
        except Violation as exc:
            failures += 1
            print(exc, file=sys.stderr)
    print(f"{len(seeds)} seeds x {args.steps} steps, {args.voters} voters: {failures} "
          f"violations in {time.monotonic() - started:.1f}s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
