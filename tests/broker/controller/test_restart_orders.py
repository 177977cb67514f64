"""A whole-cluster crash with the last in-sync replica cut, replayed in every order of
the brokers coming back (issue 30, item 11).

Three brokers hold ``t-0`` (RF 3) and the same acknowledged records: their logs end at
:data:`LOG_END` in leader epoch ``E``.  All three are SIGKILLed at once; the controller
fences them one by one as their sessions expire, so the last one fenced, X, is the
partition's only ISR member and the partition is offline.  X's log recovery cuts its
tail: it comes back ending at :data:`CUT_END` and reports the cut.  Then the brokers come
back in an order this test enumerates: every interleaving of each broker's "register"
(a new incarnation with its report; retried while its old session lives) and "caught
up" (its heartbeats now carry a metadata offset at or past its registration: the
controller unfences it), optionally with a second restart of X (killed again after it
caught up; its report still says cut, from its persisted marks), for every order of
fencing.  Between two steps the clock moves :data:`STEP_MS`, every broker process that
runs heartbeats (one not caught up with an older metadata offset), a broker asked for a
fresh report (``report_replica_logs``) sends it at once (the same incarnation registers
again), and the controller ticks (session expiry and preferred-leader elections, due
every :data:`IMBALANCE_MS`).

Invariant, after every controller call: a leader chosen for ``t-0`` holds a
``(last leader epoch, log end)`` at least that of every replica, reported or not (the
test knows every broker's log).  Liveness: once every broker is back and caught up, a
leader is chosen within a few steps.

Scenarios (9,396 orders in all, about 4 s): every broker restarts once; X restarts
twice; the brokers come back before X's own session expired (X still leads when the
first registers); the controller restarts once among the brokers' steps (a fresh core
replays the metadata log, without the reports).

On the code before the fix 1,762 of them fail: with X first in ``t-0``'s replica list, the
periodic preferred-leader election handed the offline partition to X (live, the only
ISR member) while the safe election was still waiting for the others' reports, without
looking at its cut; the replicas holding more then truncated to X's log (the fault run's
"broker 2 led epoch 16": epoch 15 was the offline record of the last fencing).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from broker.controller.config import ControllerConfig
from broker.controller.results import ReplicaLog, TopicSpec
from broker.controller.state import ControllerState
from broker.metadata.image import MetadataImage
from broker.metadata.records import NO_LEADER, MetadataRecord
from clients.protocol.errors import ErrorCode
from timer.clock import ManualClock

SESSION_MS = 2_000
STEP_MS = 400
IMBALANCE_MS = 1_000  # a preferred-leader check every few steps
LOG_END = 33_548
CUT_END = 33_545
BROKERS = (1, 2, 3)
SETTLE_STEPS = 3 * SESSION_MS // STEP_MS


@dataclass
class Broker:
    """One broker id: its log (the truth) and the process that runs for it, if any."""

    broker_id: int
    place: tuple[int, int]  # (last leader epoch, log end) of its log of t-0
    cut: bool = False
    running: bool = False
    incarnation: str = ""
    epoch: int = -1  # broker epoch of the running process once registered
    caught_up: bool = False
    starts: int = 0


@dataclass
class Run:
    """One replay: the controller core, the brokers, and what happened (for messages).

    ``early``: the brokers start coming back once the ISR is down to X, before X's own
    session has expired (it still leads, or the partition is offline already)."""

    fence_order: tuple[int, ...]
    steps: tuple[tuple[int, str], ...]
    early: bool = False
    clock: ManualClock = field(default_factory=lambda: ManualClock(1_000))
    history: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.config = ControllerConfig(
            broker_session_timeout_ms=SESSION_MS,
            leader_imbalance_check_interval_ms=IMBALANCE_MS).validate()
        self.state = ControllerState(self.config, self.clock)
        self.log: list[MetadataRecord] = []  # the metadata log (record i at offset i)
        self.brokers = {b: Broker(b, (0, LOG_END)) for b in BROKERS}
        self.crash_epoch: int | None = None  # t-0's leader epoch when the brokers return
        self.led_by: int | None = None  # the first leader chosen after that

    # -- the controller, checked after every call -------------------------------------

    @property
    def offset(self) -> int:
        return len(self.log) - 1

    def keep(self, records: list[MetadataRecord], what: str) -> None:
        self.log.extend(records)
        assert self.offset == self.state.image.last_applied_offset
        self.state.check_invariants()
        s = self.state.image.partition("t", 0)
        if (s is None or self.crash_epoch is None or self.led_by is not None
                or s.leader == NO_LEADER or s.leader_epoch <= self.crash_epoch):
            return
        self.led_by = s.leader
        self.history.append(f"{what}: {s.leader} leads epoch {s.leader_epoch}")
        truth = {b: self.brokers[b].place for b in s.replicas}
        assert truth[s.leader] == max(truth.values()), (
            f"broker {s.leader} leads with {truth[s.leader]} (last epoch, log end) "
            f"while replicas hold {truth}: acknowledged records are lost; "
            + self.describe())

    def describe(self) -> str:
        return (f"fenced in order {self.fence_order}{' (early)' if self.early else ''}, "
                f"then {list(self.steps)}; history: {self.history}")

    def report(self, b: Broker) -> tuple[ReplicaLog, ...]:
        topic = self.state.image.topics.get("t")
        if topic is None:
            return ()
        return (ReplicaLog("t", 0, topic.created_offset, b.place[0], b.place[1], b.cut),)

    def register(self, b: Broker) -> bool:
        result, records = self.state.register_broker(
            b.broker_id, b.incarnation, "127.0.0.1", 9000 + b.broker_id,
            replica_logs=self.report(b))
        self.keep(records, f"{b.broker_id} registers")
        if result.error == ErrorCode.DUPLICATE_BROKER_REGISTRATION:
            return False  # its old incarnation's session still runs: retried next step
        assert result.error == ErrorCode.NONE, result.message
        if b.epoch != result.broker_epoch:
            self.history.append(f"{b.broker_id} registered (epoch {result.broker_epoch})")
        b.epoch = result.broker_epoch
        return True

    def heartbeat(self, b: Broker) -> None:
        applied = self.offset if b.caught_up else b.epoch - 1
        result, records = self.state.heartbeat(b.broker_id, b.epoch, applied)
        self.keep(records, f"{b.broker_id} heartbeats")
        assert result.error == ErrorCode.NONE, result.message
        if result.report_replica_logs:  # the same incarnation reports again at once
            self.history.append(f"{b.broker_id} asked for a report")
            assert self.register(b)

    def tick(self) -> None:
        self.keep(self.state.tick(), "tick")

    def restart_controller(self) -> None:
        """A new controller process: a fresh core replays the metadata log."""
        image = MetadataImage()
        for offset, record in enumerate(self.log):
            image.apply(record, offset)
        self.state = ControllerState(self.config, self.clock, image)
        self.history.append("controller restarted")

    # -- the scenario ----------------------------------------------------------------

    def start_cluster(self) -> None:
        for b in self.brokers.values():
            self.start(b)
            assert self.register(b)
            b.caught_up = True
            self.heartbeat(b)
        _, records = self.state.create_topics(
            [TopicSpec("t", 1, 3, configs={"min_insync_replicas": "2"})])
        self.keep(records, "create")
        s = self.state.image.partition("t", 0)
        assert s is not None and len(s.isr) == 3
        for b in self.brokers.values():  # the records acknowledged in the leader's epoch
            b.place = (s.leader_epoch, LOG_END)

    def start(self, b: Broker) -> None:
        b.starts += 1
        b.running, b.caught_up, b.epoch = True, False, -1
        b.incarnation = f"{b.broker_id}-{b.starts}"

    def crash(self) -> None:
        """SIGKILL all; sessions expire one by one in ``fence_order`` (their last
        heartbeats were a little apart); the last one, X, loses its tail."""
        for b in self.brokers.values():
            b.running = False
        gap_ms = SESSION_MS // 4
        for broker_id in self.fence_order:
            self.clock.advance(gap_ms)
            self.keep(self.state.heartbeat(broker_id, self.brokers[broker_id].epoch,
                                           self.offset)[1], "beat")
        self.clock.advance(SESSION_MS - 2 * gap_ms + 1)
        fenced = self.fence_order[:-1] if self.early else self.fence_order
        for i in range(len(fenced)):
            self.clock.advance(gap_ms if i else 0)
            self.tick()
            assert [b for b in BROKERS if self.state.image.brokers[b].fenced] == sorted(
                self.fence_order[:i + 1])
        x = self.fence_order[-1]
        s = self.state.image.partition("t", 0)
        assert s is not None and s.isr == (x,)
        assert s.leader == (x if self.early and s.leader == x else NO_LEADER)
        self.brokers[x].place, self.brokers[x].cut = (self.brokers[x].place[0], CUT_END), True
        self.crash_epoch = s.leader_epoch
        self.history.append(f"isr {list(s.isr)}, leader {s.leader}, replicas "
                            f"{list(s.replicas)}")

    def step(self, broker_id: int, action: str) -> None:
        b = self.brokers.get(broker_id)
        if action == "restart":
            self.restart_controller()
        elif action == "start":
            assert b is not None
            self.start(b)
        elif action == "caught_up":
            assert b is not None
            b.caught_up = True
        else:  # "kill": SIGKILL again; its recovery finds nothing new, the mark stays
            assert b is not None
            b.running = False
            self.history.append(f"{broker_id} killed")
        self.round()

    def round(self) -> None:
        for b in self.brokers.values():
            if b.running and b.epoch < 0:
                self.register(b)
            elif b.running and b.epoch >= 0:
                self.heartbeat(b)
        self.clock.advance(STEP_MS)
        self.tick()

    def play(self) -> None:
        self.start_cluster()
        self.crash()
        for broker_id, action in self.steps:
            self.step(broker_id, action)
        for _ in range(SETTLE_STEPS):
            if self.led_by is not None:
                break
            self.round()
        s = self.state.image.partition("t", 0)
        assert self.led_by is not None, (
            f"still offline ({self.state.offline_reasons.get(('t', 0))}) with every broker "
            f"back: {self.describe()}; partition {s}")


def interleavings(lanes: dict[int, list[str]]) -> Iterator[tuple[tuple[int, str], ...]]:
    """Every merge of the brokers' action lists that keeps each list's own order."""
    if not any(lanes.values()):
        yield ()
        return
    for broker_id, actions in lanes.items():
        if actions:
            rest = dict(lanes)
            rest[broker_id] = actions[1:]
            for tail in interleavings(rest):
                yield ((broker_id, actions[0]), *tail)


CONTROLLER = 0  # the lane of the controller's restart


def cases(scenario: str) -> Iterator[tuple[tuple[int, ...], tuple[tuple[int, str], ...]]]:
    for fence_order in itertools.permutations(BROKERS):
        lanes = {b: ["start", "caught_up"] for b in BROKERS}
        if scenario == "twice":
            lanes[fence_order[-1]] += ["kill", "start", "caught_up"]
        elif scenario == "controller":
            lanes[CONTROLLER] = ["restart"]
        for steps in interleavings(lanes):
            yield fence_order, steps


SCENARIOS = {"once": 90, "twice": 756, "early": 90, "controller": 630}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_restart_order_after_a_crash_elects_a_replica_holding_the_most(
        scenario: str) -> None:
    """``once``: every broker restarts once; ``twice``: X, the cut one, is killed again
    after it caught up and restarts; ``early``: the brokers come back before X's session
    expired; ``controller``: the controller restarts once among the brokers' steps."""
    played = 0
    for fence_order, steps in cases(scenario):
        Run(fence_order, steps, early=scenario == "early").play()
        played += 1
    assert played == 6 * SCENARIOS[scenario]
