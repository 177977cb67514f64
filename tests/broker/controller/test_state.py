"""ControllerState, the controller's pure core, driven with a manual clock."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.controller.config import ControllerConfig
from broker.controller.results import (
    ConfigOp,
    ConfigOperation,
    IsrChange,
    PartitionsSpec,
    ReplicaLog,
    ResourceChange,
    ResourceType,
    TopicSpec,
)
from broker.controller.state import ControllerState
from broker.metadata.image import MetadataImage, PartitionRegistration
from broker.metadata.records import (
    NO_LEADER,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionRecord,
    TopicConfigsRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import ZERO_UUID
from timer.clock import ManualClock

SESSION_MS = 2_000
IMBALANCE_MS = 30_000


class Cluster:
    """A ControllerState plus the log of every record it produced (what the disk holds)."""

    def __init__(self, **overrides: Any) -> None:
        self.config = ControllerConfig(broker_session_timeout_ms=SESSION_MS,
                                       leader_imbalance_check_interval_ms=IMBALANCE_MS,
                                       **overrides).validate()
        self.clock = ManualClock(1_000)
        self.state = ControllerState(self.config, self.clock)
        self.log: list[MetadataRecord] = []
        self.epochs: dict[int, int] = {}

    def keep(self, records: list[MetadataRecord]) -> list[MetadataRecord]:
        self.log.extend(records)
        assert len(self.log) == self.state.image.last_applied_offset + 1
        self.state.check_invariants()
        return records

    @property
    def offset(self) -> int:
        return self.state.image.last_applied_offset

    def register(self, broker_id: int, incarnation: str = "",
                 replica_logs: tuple[ReplicaLog, ...] = ()) -> int:
        result, records = self.state.register_broker(
            broker_id, incarnation or f"inc-{broker_id}", "127.0.0.1", 9000 + broker_id,
            replica_logs=replica_logs)
        self.keep(records)
        assert result.error == ErrorCode.NONE, result.message
        self.epochs[broker_id] = result.broker_epoch
        return result.broker_epoch

    def heartbeat(self, broker_id: int, **kwargs: Any) -> Any:
        kwargs.setdefault("current_metadata_offset", self.offset)
        result, records = self.state.heartbeat(broker_id, self.epochs[broker_id], **kwargs)
        self.keep(records)
        return result

    def start(self, *broker_ids: int) -> None:
        for b in broker_ids:
            self.register(b)
            assert not self.heartbeat(b).is_fenced

    def create(self, name: str, partitions: int = 1, rf: int = 1,
               **configs: str) -> list[Any]:
        results, records = self.state.create_topics([TopicSpec(name, partitions, rf,
                                                               configs=configs)])
        self.keep(records)
        return results

    def tick(self) -> list[MetadataRecord]:
        return self.keep(self.state.tick())

    def part(self, topic: str, index: int = 0) -> PartitionRegistration:
        state = self.state.image.partition(topic, index)
        assert state is not None
        return state

    def alter(self, broker_id: int, topic: str, isr: list[int], *, index: int = 0,
              leader_epoch: int | None = None, partition_epoch: int | None = None) -> Any:
        s = self.part(topic, index)
        change = IsrChange(topic, index, s.leader_epoch if leader_epoch is None else leader_epoch,
                           isr, s.partition_epoch if partition_epoch is None else partition_epoch)
        (top, results), records = self.state.alter_partition(
            broker_id, self.epochs[broker_id], [change])
        self.keep(records)
        assert top == ErrorCode.NONE
        return results[0]

    def grow(self, name: str, count: int,
             assignments: list[list[int]] | None = None) -> Any:
        (result,), records = self.state.create_partitions([PartitionsSpec(name, count,
                                                                          assignments)])
        self.keep(records)
        return result

    def set_configs(self, name: str, *ops: tuple[str, int, str | None],
                    incremental: bool = True, validate_only: bool = False) -> Any:
        resource = ResourceChange(ResourceType.TOPIC, name, [ConfigOp(*op) for op in ops])
        (result,), records = self.state.alter_configs([resource], validate_only, incremental)
        self.keep(records)
        return result

    def replayed(self) -> MetadataImage:
        fresh = ControllerState(self.config, ManualClock(0))
        for offset, record in enumerate(self.log):
            fresh.replay(record, offset)
        return fresh.image


# ---------------------------------------------------------------- brokers


def test_registration_starts_fenced_with_epoch_equal_to_its_offset() -> None:
    c = Cluster()
    epoch = c.register(1)
    assert epoch == 0 == c.offset and c.state.image.brokers[1].fenced
    assert c.register(1) == epoch and len(c.log) == 1  # same incarnation: idempotent
    result = c.heartbeat(1, current_metadata_offset=-1)  # has not seen its registration
    assert result.is_fenced and not result.is_caught_up
    result = c.heartbeat(1)
    assert result.is_caught_up and not result.is_fenced
    assert isinstance(c.log[-1], UnfenceBrokerRecord)


def test_bad_registrations_and_stale_heartbeats_are_rejected() -> None:
    c = Cluster()
    result, records = c.state.register_broker(1, "x", "h", 1, cluster_id="other")
    assert result.error == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert "cluster id 'other'" in (result.message or "")
    result, _ = c.state.register_broker(1, "x", "", 1)
    assert result.error == ErrorCode.INVALID_REQUEST and "host" in (result.message or "")
    result, _ = c.state.register_broker(-1, "x", "h", 1)
    assert result.error == ErrorCode.INVALID_REQUEST
    result, _ = c.state.register_broker(1, "x", "h", 0)
    assert result.error == ErrorCode.INVALID_REQUEST
    result, _ = c.state.register_broker(1, "x", "h", 1, internal=("h", 70000))
    assert result.error == ErrorCode.INVALID_REQUEST and "internal_port" in (result.message or "")
    assert c.log == [] and c.offset == -1
    result, records = c.state.register_broker(5, "y", "h", 1, internal=("h", 2))
    c.keep(records)
    assert result.error == ErrorCode.NONE
    assert c.state.image.brokers[5].replication_endpoint == ("h", 2)
    c.register(1)
    hb, records = c.state.heartbeat(1, 99, 10)
    assert hb.error == ErrorCode.STALE_BROKER_EPOCH and records == []
    hb, _ = c.state.heartbeat(7, 0, 10)
    assert hb.error == ErrorCode.STALE_BROKER_EPOCH and "not registered" in (hb.message or "")


def test_a_second_live_process_cannot_take_a_broker_id_over() -> None:
    c = Cluster()
    c.start(1, 2)
    epoch = c.epochs[1]
    c.clock.advance(SESSION_MS)  # broker 1's session is still valid (last heartbeat)
    result, records = c.state.register_broker(1, "intruder", "127.0.0.1", 9999)
    assert result.error == ErrorCode.DUPLICATE_BROKER_REGISTRATION and records == []
    assert c.state.image.brokers[1].broker_epoch == epoch
    assert c.state.image.brokers[1].port == 9001 and not c.heartbeat(1).is_fenced
    # a broker that restarts after a crash waits until its old session has ended
    c.clock.advance(SESSION_MS + 1)
    c.heartbeat(2)
    c.tick()
    assert c.state.image.brokers[1].fenced
    c.register(1, "restarted")
    assert c.epochs[1] != epoch
    # after a controlled shutdown it may come back at once
    assert not c.heartbeat(1).is_fenced
    c.heartbeat(1, want_shut_down=True)
    c.register(1, "after-shutdown")


def test_a_new_controller_gives_live_brokers_a_session_before_a_takeover() -> None:
    c = Cluster()
    c.start(1)
    restarted = ControllerState(c.config, c.clock, c.replayed())
    result, _ = restarted.register_broker(1, "intruder", "127.0.0.1", 9999)
    assert result.error == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    c.clock.advance(SESSION_MS + 1)
    result, _ = restarted.register_broker(1, "intruder", "127.0.0.1", 9999)
    assert result.error == ErrorCode.NONE


def test_session_timeout_fences_and_a_heartbeat_unfences() -> None:
    c = Cluster()
    c.start(1, 2)
    c.clock.advance(SESSION_MS)
    c.heartbeat(2)
    assert c.tick() == []  # exactly at the timeout: not yet
    c.clock.advance(1)
    records = c.tick()
    assert records == [FenceBrokerRecord(1, c.epochs[1])]
    assert c.state.image.unfenced_brokers() == [2]
    assert not c.heartbeat(1).is_fenced  # it comes back with the same epoch
    assert c.state.image.unfenced_brokers() == [1, 2]


def test_sessions_get_a_grace_period_after_a_controller_restart() -> None:
    c = Cluster()
    c.start(1)
    restarted = ControllerState(c.config, c.clock, c.replayed())
    assert restarted.tick() == []
    c.clock.advance(SESSION_MS)
    assert restarted.tick() == []
    c.clock.advance(1)
    assert [type(r) for r in restarted.tick()] == [FenceBrokerRecord]


# ---------------------------------------------------------------- elections


def test_fenced_leader_is_replaced_from_the_isr_with_epoch_plus_one() -> None:
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 1, 3)
    before = c.part("t")
    leader = before.leader
    assert before.isr == before.replicas and before.leader == before.replicas[0]
    c.clock.advance(SESSION_MS + 1)
    for b in (1, 2, 3):
        if b != leader:
            c.heartbeat(b)
    c.tick()
    after = c.part("t")
    assert after.leader == before.replicas[1]
    assert after.leader_epoch == before.leader_epoch + 1
    assert after.isr == tuple(b for b in before.isr if b != leader)
    assert after.partition_epoch == before.partition_epoch + 1
    assert not after.unclean_elected


def test_follower_fenced_leaves_isr_without_leader_change() -> None:
    c = Cluster()
    c.start(1, 2)
    c.create("t", 1, 2)
    s = c.part("t")
    follower = s.replicas[1]
    c.heartbeat(follower, want_fence=True)
    after = c.part("t")
    assert after.leader == s.leader and after.leader_epoch == s.leader_epoch
    assert after.isr == (s.leader,) and after.partition_epoch == s.partition_epoch + 1


def test_last_isr_member_stays_and_partition_goes_offline_then_recovers() -> None:
    c = Cluster()
    c.start(1, 2)
    c.create("t", 1, 2)
    s = c.part("t")
    assert c.alter(s.leader, "t", [s.leader]).error == ErrorCode.NONE
    c.heartbeat(s.leader, want_fence=True)
    offline = c.part("t")
    assert offline.leader == NO_LEADER and offline.isr == (s.leader,)
    assert offline.leader_epoch == s.leader_epoch + 1
    # the out-of-sync replica is alive but unclean election is off (the default)
    assert c.state.image.is_alive(s.replicas[1])
    c.register(s.leader, "second-life")  # restarted: fenced until caught up
    assert c.part("t").leader == NO_LEADER
    c.heartbeat(s.leader)
    back = c.part("t")
    assert back.leader == s.leader and back.leader_epoch == offline.leader_epoch + 1


def _all_fenced(c: Cluster) -> PartitionRegistration:
    """Brokers 1-3, topic t RF 3; every broker fenced in turn (a whole-cluster crash):
    the last one fenced stays the only ISR member of an offline partition."""
    c.start(1, 2, 3)
    c.create("t", 1, 3)
    for b in c.part("t").replicas:
        c.heartbeat(b, want_fence=True)
    offline = c.part("t")
    assert offline.leader == NO_LEADER and len(offline.isr) == 1
    return offline


def _back(c: Cluster, b: int, leo: int, epoch: int = 0, cut: bool = False) -> None:
    """Broker ``b`` restarts with its log of ``t-0`` ending at ``leo``."""
    c.register(b, f"again-{b}", (ReplicaLog("t", 0, c.state.image.topics["t"].created_offset,
                                            epoch, leo, cut),))
    c.heartbeat(b)


def test_a_cut_last_isr_member_waits_for_every_replica_then_the_longest_log_leads() -> None:
    c = Cluster()
    offline = _all_fenced(c)
    last = offline.isr[0]
    y, z = (b for b in offline.replicas if b != last)
    _back(c, last, 100, cut=True)  # its recovery cut a torn tail: it may lack records
    assert c.part("t").leader == NO_LEADER
    assert f"waiting for brokers {sorted([y, z])}" in c.state.offline_reasons[("t", 0)]
    _back(c, y, 250)
    assert c.part("t").leader == NO_LEADER  # z may hold more still
    _back(c, z, 180)
    led = c.part("t")
    assert (led.leader, led.isr) == (y, (y,))
    assert led.leader_epoch == offline.leader_epoch + 1
    assert ("t", 0) not in c.state.offline_reasons
    # the cut replica catches up and rejoins: its mark is gone, it may lead again
    assert c.alter(y, "t", [y, last]).error == ErrorCode.NONE
    c.alter(y, "t", [y, last, z])
    c.heartbeat(y, want_fence=True)
    assert c.part("t").leader in (last, z)


def test_a_cut_last_isr_member_leads_when_no_replica_holds_more() -> None:
    c = Cluster()
    offline = _all_fenced(c)
    last = offline.isr[0]
    others = [b for b in offline.replicas if b != last]
    _back(c, others[0], 90)
    _back(c, others[1], 0)  # an empty log
    assert c.part("t").leader == NO_LEADER
    _back(c, last, 100, cut=True)
    led = c.part("t")
    assert (led.leader, led.isr) == (last, (last,))


def test_a_later_epoch_beats_a_longer_log_and_a_fenced_best_replica_is_waited_for() -> None:
    c = Cluster()
    offline = _all_fenced(c)
    last = offline.isr[0]
    y, z = (b for b in offline.replicas if b != last)
    _back(c, y, 500, epoch=1)
    _back(c, z, 300, epoch=2)
    c.heartbeat(z, want_fence=True)  # the best replica is down again
    _back(c, last, 100, epoch=2, cut=True)
    assert c.part("t").leader == NO_LEADER
    assert f"broker {z} holds the longest log" in c.state.offline_reasons[("t", 0)]
    _back(c, z, 300, epoch=2)  # back once more, with the same log
    led = c.part("t")
    assert (led.leader, led.isr) == (z, (z,))  # epoch 2 ranks above y's longer epoch-1 log


def _restart(c: Cluster) -> None:
    """A new controller process: a fresh core replays the log (reports were in memory)."""
    c.state = ControllerState(c.config, c.clock, c.replayed())


def _report_again(c: Cluster, b: int, leo: int, cut: bool = False) -> None:
    """Broker ``b`` answers ``report_replica_logs``: the same incarnation registers."""
    result, records = c.state.register_broker(
        b, c.state.image.brokers[b].incarnation_id, "127.0.0.1", 9000 + b, replica_logs=(
            ReplicaLog("t", 0, c.state.image.topics["t"].created_offset, 0, leo, cut),))
    c.keep(records)
    assert result.error == ErrorCode.NONE and result.broker_epoch == c.epochs[b]


def _cut_leader_alone_in_its_isr(c: Cluster) -> tuple[int, int, int]:
    """Brokers 1-3, topic t RF 3; the leader x shrank the ISR to itself, was fenced and
    came back cut by recovery: the partition waits for y's and z's fresh reports."""
    c.start(1, 2, 3)
    c.create("t", 1, 3)
    s = c.part("t")
    x = s.leader
    y, z = (b for b in s.replicas if b != x)
    c.alter(x, "t", [x])  # y and z fell behind; they stay alive
    c.heartbeat(x, want_fence=True)
    assert c.part("t").leader == NO_LEADER
    _back(c, x, 100, cut=True)
    return x, y, z


def test_live_replicas_with_reports_older_than_the_outage_are_asked_for_fresh_ones() -> None:
    c = Cluster()
    _, y, z = _cut_leader_alone_in_its_isr(c)
    assert c.part("t").leader == NO_LEADER  # y's and z's reports predate the outage
    assert c.heartbeat(y).report_replica_logs and c.heartbeat(z).report_replica_logs
    _report_again(c, y, 120)
    _report_again(c, z, 80)
    assert not c.heartbeat(y).report_replica_logs
    led = c.part("t")
    assert (led.leader, led.isr) == (y, (y,))


def test_a_partition_left_offline_is_elected_after_a_controller_restart() -> None:
    c = Cluster()
    x, y, z = _cut_leader_alone_in_its_isr(c)
    assert c.part("t").leader == NO_LEADER  # waits for y's and z's fresh reports
    _restart(c)  # before they answer; every broker is unfenced and only heartbeats
    assert not c.heartbeat(x).report_replica_logs  # nothing asked before the first tick
    c.tick()  # the offline election: the live ISR member must say whether it was cut
    assert c.part("t").leader == NO_LEADER  # its cut was reported to the old controller
    assert "before this controller started" in c.state.offline_reasons[("t", 0)]
    assert c.heartbeat(x).report_replica_logs
    _report_again(c, x, 100, cut=True)  # the broker still reports the cut
    assert c.part("t").leader == NO_LEADER
    assert c.heartbeat(y).report_replica_logs and c.heartbeat(z).report_replica_logs
    _report_again(c, y, 250)
    _report_again(c, z, 180)
    led = c.part("t")
    assert (led.leader, led.isr) == (y, (y,))  # the longest log, not the cut ISR member


def test_an_uncut_isr_member_leads_after_a_controller_restart_once_it_reports() -> None:
    c = Cluster()
    offline = _all_fenced(c)
    last = offline.isr[0]
    _back(c, last, 100, cut=True)
    assert c.part("t").leader == NO_LEADER
    _restart(c)
    c.tick()
    assert c.part("t").leader == NO_LEADER  # not before it says whether it was cut
    _report_again(c, last, 100)  # say its cut healed (it was the partition's leader)
    led = c.part("t")
    assert (led.leader, led.isr) == (last, (last,))


def test_a_report_of_a_recreated_topic_log_does_not_count() -> None:
    c = Cluster()
    offline = _all_fenced(c)
    last = offline.isr[0]
    y, z = (b for b in offline.replicas if b != last)
    stale_id = bytes(range(1, 17))  # a log of another topic "t" (a deleted one)
    assert stale_id != c.state.image.topics["t"].topic_uuid
    c.register(y, "again", (ReplicaLog("t", 0, -1, 9, 10_000, topic_uuid=stale_id),))
    c.heartbeat(y)
    _back(c, z, 50)
    _back(c, last, 100, cut=True)
    led = c.part("t")
    assert (led.leader, led.isr) == (last, (last,))  # y reported no log of this topic


def test_a_recreated_topic_starts_its_leader_epochs_at_zero_under_a_new_id() -> None:
    """Kafka's rule: a re-created topic's partitions (and partitions added to it later)
    start at leader epoch 0 again; what tells it from the deleted one is its topic id."""
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 2, 3)
    assert [c.part("t", i).leader_epoch for i in (0, 1)] == [0, 0]
    for _ in range(5):  # leadership moves: the old topic's epochs grow
        leader = c.part("t").leader
        c.alter(leader, "t", [b for b in c.part("t").isr if b != leader])
        c.keep(c.state.elect_preferred_leaders())
        c.alter(c.part("t").leader, "t", [1, 2, 3])
    assert c.part("t").leader_epoch > 0
    old_id = c.state.image.topics["t"].topic_uuid
    (result,), records = c.state.delete_topics(["t"])
    c.keep(records)
    assert result.error == ErrorCode.NONE
    c.create("t", 1, 3)
    assert c.part("t").leader_epoch == 0
    assert c.state.image.topics["t"].topic_uuid not in (old_id, ZERO_UUID)
    assert c.grow("t", 2).error == ErrorCode.NONE
    assert c.part("t", 1).leader_epoch == 0
    assert c.replayed() == c.state.image


@pytest.mark.parametrize("allowed", [True, False])
def test_unclean_election_only_when_the_topic_allows_it(allowed: bool) -> None:
    c = Cluster()
    c.start(1, 2)
    c.create("t", 1, 2, unclean_leader_election="true" if allowed else "false")
    s = c.part("t")
    other = s.replicas[1]
    c.alter(s.leader, "t", [s.leader])
    c.heartbeat(s.leader, want_fence=True)
    after = c.part("t")
    if allowed:
        assert (after.leader, after.isr, after.unclean_elected) == (other, (other,), True)
    else:
        assert (after.leader, after.isr, after.unclean_elected) == (NO_LEADER, (s.leader,), False)
    assert after.leader_epoch == s.leader_epoch + 1


def test_controlled_shutdown_moves_leadership_then_allows_shutdown() -> None:
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 3, 2)
    led = [p for p in range(3) if c.part("t", p).leader == 1]
    assert led
    before = c.offset
    result = c.heartbeat(1, want_shut_down=True, current_metadata_offset=before)
    assert result.is_fenced and not result.should_shut_down  # has not seen the moves yet
    assert c.offset > before
    for p in range(3):
        s = c.part("t", p)
        assert s.leader != 1 and (1 not in s.isr or s.isr == (1,))
        if p in led:
            assert s.leader != NO_LEADER
    assert c.heartbeat(1, want_shut_down=True).should_shut_down
    assert c.heartbeat(1, want_shut_down=True).is_fenced  # and stays fenced


def test_preferred_leader_election_returns_leadership_when_in_sync() -> None:
    c = Cluster()
    c.start(1, 2)
    c.create("t", 1, 2)
    s = c.part("t")
    preferred = s.replicas[0]
    c.heartbeat(preferred, want_fence=True)
    assert c.part("t").leader == s.replicas[1]
    c.heartbeat(preferred)  # unfenced, but not in the ISR yet
    c.clock.advance(IMBALANCE_MS)
    c.heartbeat(1)
    c.heartbeat(2)
    assert c.tick() == []
    moved = c.part("t")
    assert c.alter(moved.leader, "t", [moved.leader, preferred]).error == ErrorCode.NONE
    c.clock.advance(IMBALANCE_MS)
    c.heartbeat(1)
    c.heartbeat(2)
    records = c.tick()
    final = c.part("t")
    assert [type(r) for r in records] == [PartitionRecord]
    assert final.leader == preferred and final.leader_epoch == moved.leader_epoch + 1


def test_preferred_leader_election_can_be_disabled() -> None:
    c = Cluster(auto_leader_rebalance_enable=False)
    c.start(1, 2)
    c.create("t", 1, 2)
    s = c.part("t")
    c.heartbeat(s.leader, want_fence=True)
    c.heartbeat(s.leader)
    moved = c.part("t")
    c.alter(moved.leader, "t", list(s.replicas))
    c.clock.advance(IMBALANCE_MS)
    c.heartbeat(1)
    c.heartbeat(2)
    assert c.tick() == [] and c.part("t").leader == moved.leader
    assert [type(r) for r in c.keep(c.state.elect_preferred_leaders())] == [PartitionRecord]


def test_new_incarnation_loses_leadership_and_isr() -> None:
    c = Cluster()
    c.start(1, 2)
    c.create("t", 1, 2)
    s = c.part("t")
    c.clock.advance(SESSION_MS + 1)  # its old session ended; no tick has fenced it yet
    c.heartbeat(s.replicas[1])
    c.register(s.leader, "restarted")
    after = c.part("t")
    assert after.leader == s.replicas[1] and s.leader not in after.isr
    assert after.leader_epoch == s.leader_epoch + 1


# ---------------------------------------------------------------- AlterPartition


def test_alter_partition_accepts_then_rejects_stale_requests() -> None:
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 1, 3)
    s = c.part("t")
    leader, f1, f2 = s.replicas
    ok = c.alter(leader, "t", [leader, f1])
    assert ok.error == ErrorCode.NONE and ok.state.isr == (leader, f1)
    assert ok.state.partition_epoch == s.partition_epoch + 1
    assert ok.state.leader_epoch == s.leader_epoch
    stale = c.alter(leader, "t", [leader], partition_epoch=s.partition_epoch)
    assert stale.error == ErrorCode.INVALID_UPDATE_VERSION
    assert stale.state == c.part("t")  # the answer carries the current state
    fenced = c.alter(leader, "t", [leader], leader_epoch=s.leader_epoch - 1)
    assert fenced.error == ErrorCode.FENCED_LEADER_EPOCH
    assert c.alter(leader, "t", [leader], leader_epoch=9).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert c.alter(f1, "t", [f1]).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    for bad in ([f1, f1], [leader, leader], [leader, 77], [77], []):
        assert c.alter(leader, "t", bad).error == ErrorCode.INVALID_REQUEST
    c.heartbeat(f2, want_fence=True)
    assert c.alter(leader, "t", [leader, f1, f2]).error == ErrorCode.INELIGIBLE_REPLICA
    unchanged = c.alter(leader, "t", [f1, leader])  # same set: accepted, no record
    assert unchanged.error == ErrorCode.NONE and isinstance(c.log[-1], FenceBrokerRecord)
    (top, results), records = c.state.alter_partition(leader, 12345, [])
    assert top == ErrorCode.STALE_BROKER_EPOCH and records == []
    (top, results), _ = c.state.alter_partition(
        leader, c.epochs[leader], [IsrChange("nope", 0, 0, [leader], 0)])
    assert results[0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_leader_resigns_by_proposing_the_isr_without_itself() -> None:
    """Its scrubber found a damaged range: the rest of the ISR elects a leader."""
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 1, 3)
    s = c.part("t")
    leader, f1, f2 = s.replicas
    resigned = c.alter(leader, "t", [f1, f2])
    assert resigned.error == ErrorCode.NONE
    after = c.part("t")
    assert (after.leader, after.isr) == (f1, (f1, f2))
    assert after.leader_epoch == s.leader_epoch + 1
    assert c.alter(f1, "t", [f1, f2, leader]).error == ErrorCode.NONE  # back once repaired


# ---------------------------------------------------------------- topics


def test_assignment_spreads_leaders_and_replicas() -> None:
    c = Cluster()
    c.start(1, 2, 3)
    c.create("a", 3, 3)
    leaders = [c.part("a", p).leader for p in range(3)]
    assert sorted(leaders) == [1, 2, 3]
    c.create("b", 6, 2)
    leaders = [c.part("b", p).leader for p in range(6)]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
    pairs = {c.part("b", p).replicas for p in range(6)}
    assert len(pairs) == 6  # the follower shift varies the pairs
    singles = []
    for i in range(3):
        c.create(f"s{i}", 1, 1)
        singles.append(c.part(f"s{i}").leader)
    assert sorted(singles) == [1, 2, 3]  # the rotating start spreads one-partition topics


@pytest.mark.parametrize(("spec", "code", "needle"), [
    (TopicSpec("t", 1, 3), ErrorCode.INVALID_REPLICATION_FACTOR,
     "The target replication factor of 3 cannot be reached because only 2 broker(s)"),
    (TopicSpec("t", 1, 0), ErrorCode.INVALID_REPLICATION_FACTOR,
     "Replication factor must be larger than 0, or -1 to use the default value."),
    (TopicSpec("t", 1, -3), ErrorCode.INVALID_REPLICATION_FACTOR, "larger than 0"),
    (TopicSpec("t", 0, 1), ErrorCode.INVALID_PARTITIONS,
     "Number of partitions was set to an invalid non-positive value."),
    (TopicSpec("t", -2, 1), ErrorCode.INVALID_PARTITIONS, "non-positive"),
    (TopicSpec("t", 10_001, 1), ErrorCode.INVALID_PARTITIONS, "max.partitions.per.topic"),
    (TopicSpec("bad name"), ErrorCode.INVALID_TOPIC_EXCEPTION, "characters"),
    (TopicSpec("__cluster_metadata"), ErrorCode.INVALID_TOPIC_EXCEPTION, "reserved"),
    (TopicSpec("t", configs={"segment.bytes": "12"}), ErrorCode.INVALID_CONFIG,
     "Invalid value 12 for configuration segment.bytes: "),
    (TopicSpec("t", configs={"nope": "1"}), ErrorCode.INVALID_CONFIG,
     "Unknown topic config name: nope"),
    (TopicSpec("t", configs={"nosuch.config": "2"}), ErrorCode.INVALID_CONFIG,
     "Unknown topic config name: nosuch.config"),
    (TopicSpec("t", configs={"min_insync_replicas": "0"}), ErrorCode.INVALID_CONFIG,
     "Invalid value 0 for configuration min.insync.replicas"),
    (TopicSpec("t", configs={"cleanup.policy": "compact,nope"}), ErrorCode.INVALID_CONFIG,
     "Invalid value compact,nope for configuration cleanup.policy: String must be one of"),
    (TopicSpec("t", configs={"cleanup.policy": "nope"}), ErrorCode.INVALID_CONFIG,
     "Invalid value nope for configuration cleanup.policy: String must be one of"),
    (TopicSpec("t", configs={"unclean_leader_election": "maybe"}), ErrorCode.INVALID_CONFIG,
     "true or false"),
    (TopicSpec("t", assignments={0: [1], 2: [2]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "0..1"),
    (TopicSpec("t", assignments={0: [1, 1]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "distinct"),
    (TopicSpec("t", assignments={0: [1], 1: [1, 2]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "distinct"),
    (TopicSpec("t", assignments={0: [9]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "registered"),
    (TopicSpec("t", 1, -1, assignments={0: [1]}), ErrorCode.INVALID_REQUEST, "must be -1"),
])
def test_create_topic_rejections(spec: TopicSpec, code: ErrorCode, needle: str) -> None:
    c = Cluster()
    c.start(1, 2)
    (result,), records = c.state.create_topics([spec])
    assert result.error == code and needle in (result.message or ""), result
    assert records == []


def test_create_topic_defaults_configs_assignments_duplicates_and_validate_only() -> None:
    c = Cluster(num_partitions=2, default_replication_factor=2, min_insync_replicas=2)
    c.start(1, 2, 3)
    (ok,), records = c.state.create_topics([TopicSpec("t", configs={"retention.ms": "5"})])
    c.keep(records)
    assert (ok.error, ok.num_partitions, ok.replication_factor) == (ErrorCode.NONE, 2, 2)
    configs = c.state.image.topics["t"].configs
    assert configs == {"retention_ms": "5", "min_insync_replicas": "2",
                       "unclean_leader_election": "false"}
    assert c.state.image.topics["t"].created_offset == records[0].topic_id  # type: ignore[union-attr]
    (again,), _ = c.state.create_topics([TopicSpec("t")])
    assert again.error == ErrorCode.TOPIC_ALREADY_EXISTS
    results, records = c.state.create_topics([TopicSpec("d"), TopicSpec("d")])
    assert [r.error for r in results] == [ErrorCode.INVALID_REQUEST] * 2 and records == []
    (dry,), records = c.state.create_topics([TopicSpec("v", 4, 3)], validate_only=True)
    assert dry.error == ErrorCode.NONE and dry.num_partitions == 4 and records == []
    c.heartbeat(3, want_fence=True)
    (manual,), records = c.state.create_topics([TopicSpec("m", assignments={0: [3, 1],
                                                                            1: [2, 3]})])
    c.keep(records)
    assert manual.error == ErrorCode.NONE
    assert c.part("m", 0).leader == 1 and c.part("m", 0).isr == (1,)  # 3 is fenced
    assert c.part("m", 1).replicas == (2, 3) and c.part("m", 1).isr == (2,)


def test_delete_topics() -> None:
    c = Cluster()
    c.start(1)
    c.create("t", 2)
    old_id = c.state.image.topics["t"].topic_uuid
    results, records = c.state.delete_topics(["t", "missing"])
    c.keep(records)
    assert [r.error for r in results] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert "t" not in c.state.image.topics
    c.create("t", 1)  # a new incarnation of the name gets a new id
    assert c.state.image.topics["t"].topic_uuid not in (old_id, ZERO_UUID)


def test_replay_of_the_records_rebuilds_an_identical_image() -> None:
    c = Cluster()
    c.start(1, 2, 3)
    c.create("a", 4, 3, unclean_leader_election="true")
    c.create("b", 2, 2)
    c.alter(c.part("a", 0).leader, "a", [c.part("a", 0).leader])
    c.heartbeat(2, want_shut_down=True)
    c.clock.advance(SESSION_MS + 1)
    c.heartbeat(3)
    c.tick()
    c.keep(c.state.delete_topics(["b"])[1])
    assert c.replayed() == c.state.image
    assert MetadataImage.decode_snapshot(c.state.image.encode_snapshot()) == c.state.image


# ---------------------------------------------------------------- CreatePartitions


def test_create_partitions_adds_placed_partitions_and_replays() -> None:
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 2, 2)
    before = {i: c.part("t", i) for i in range(2)}
    start = c.offset
    result = c.grow("t", 5)
    assert result.error == ErrorCode.NONE, result.message
    new = c.log[start + 1:]
    assert [(type(r), getattr(r, "partition", None)) for r in new] == [
        (PartitionRecord, 2), (PartitionRecord, 3), (PartitionRecord, 4)]
    topic = c.state.image.topics["t"]
    assert topic.num_partitions == 5 and sorted(topic.partitions) == list(range(5))
    for i in range(2, 5):
        s = c.part("t", i)
        assert len(s.replicas) == 2 and len(set(s.replicas)) == 2
        assert (s.leader, s.isr, s.leader_epoch, s.partition_epoch) == (
            s.replicas[0], s.replicas, 0, 0)  # leader epochs from 0 (Kafka's)
    assert {c.part("t", i).leader for i in range(2, 5)} == {1, 2, 3}  # spread
    assert all(c.part("t", i) == before[i] for i in range(2))  # old ones untouched
    # manual assignment: one replica list per new partition, a fenced replica not in the ISR
    c.heartbeat(3, want_fence=True)
    assert c.grow("t", 6, [[3, 1]]).error == ErrorCode.NONE
    assert (c.part("t", 5).replicas, c.part("t", 5).leader, c.part("t", 5).isr) == (
        (3, 1), 1, (1,))
    assert c.replayed() == c.state.image
    assert MetadataImage.decode_snapshot(c.state.image.encode_snapshot()) == c.state.image


@pytest.mark.parametrize(("name", "count", "assignments", "code", "needle"), [
    ("missing", 3, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "does not exist"),
    ("t", 2, None, ErrorCode.INVALID_PARTITIONS, "Topic already has 2 partitions."),
    ("t", 1, None, ErrorCode.INVALID_PARTITIONS,
     "Topic currently has 2 partitions, which is higher than the requested 1."),
    ("t", -5, None, ErrorCode.INVALID_PARTITIONS, "higher than the requested -5"),
    ("t", 10_001, None, ErrorCode.INVALID_PARTITIONS, "max.partitions.per.topic (10000)"),
    ("t", 4, [[1, 2]], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "1 assignments for 2"),
    ("t", 3, [[1]], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "replication factor"),
    ("t", 3, [[1, 1]], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "distinct"),
    ("t", 3, [[1, 9]], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "not registered"),
    ("t", 3, [[]], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "distinct"),
    ("u", 2, None, ErrorCode.INVALID_REPLICATION_FACTOR,
     "replication factor of 3 cannot be reached because only 2 broker(s)"),
])
def test_create_partitions_rejections(name: str, count: int, assignments: Any,
                                      code: ErrorCode, needle: str) -> None:
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 2, 2)
    c.create("u", 1, 3)
    c.heartbeat(3, want_fence=True)  # "u" has replication factor 3, 2 brokers are alive
    offset = c.offset
    result = c.grow(name, count, assignments)
    assert (result.error, c.offset) == (code, offset), result.message
    assert needle in (result.message or "")


def test_create_partitions_duplicates_and_validate_only() -> None:
    c = Cluster()
    c.start(1, 2)
    c.create("t", 1, 2)
    results, records = c.state.create_partitions([PartitionsSpec("t", 2),
                                                  PartitionsSpec("t", 3)])
    assert [r.error for r in results] == [ErrorCode.INVALID_REQUEST] * 2 and records == []
    (dry,), records = c.state.create_partitions([PartitionsSpec("t", 4)], validate_only=True)
    assert dry.error == ErrorCode.NONE and records == []
    assert c.state.image.topics["t"].num_partitions == 1


# ---------------------------------------------------------------- topic configs

SET, DELETE, APPEND, SUBTRACT = (ConfigOperation.SET, ConfigOperation.DELETE,
                                 ConfigOperation.APPEND, ConfigOperation.SUBTRACT)


def test_incremental_alter_configs_set_delete_append_subtract() -> None:
    c = Cluster(min_insync_replicas=2)
    c.start(1)
    c.create("t", 1, 1, **{"retention.ms": "1000"})
    configs = c.state.image.topics["t"].configs
    assert configs == {"retention_ms": "1000", "min_insync_replicas": "2",
                       "unclean_leader_election": "false"}
    start = c.offset
    result = c.set_configs("t", ("segment.bytes", SET, " 4096 "), ("retention_ms", DELETE, None),
                           ("min.insync.replicas", SET, "1"))
    assert result.error == ErrorCode.NONE, result.message
    assert c.log[start + 1:] == [TopicConfigsRecord("t", {
        "segment_bytes": "4096", "min_insync_replicas": "1",
        "unclean_leader_election": "false"})]  # one record: applied atomically
    assert c.state.image.topics["t"].configs["segment_bytes"] == "4096"
    # DELETE of a filled-in config returns to the controller's default
    assert c.set_configs("t", ("min.insync.replicas", DELETE, None)).error == ErrorCode.NONE
    assert c.state.image.topics["t"].configs["min_insync_replicas"] == "2"
    # APPEND / SUBTRACT on the list config cleanup.policy (unset: the default "delete")
    emptied = c.set_configs("t", ("cleanup.policy", SUBTRACT, "delete"))
    assert emptied.error == ErrorCode.INVALID_CONFIG
    assert c.set_configs("t", ("cleanup.policy", APPEND, "delete")).error == ErrorCode.NONE
    assert c.state.image.topics["t"].configs["cleanup_policy"] == "delete"
    assert c.set_configs("t", ("cleanup.policy", SET, "compact")).error == ErrorCode.NONE
    assert c.set_configs("t", ("cleanup.policy", APPEND, "delete")).error == ErrorCode.NONE
    assert c.state.image.topics["t"].configs["cleanup_policy"] == "compact,delete"  # both
    assert c.set_configs("t", ("cleanup.policy", SUBTRACT, "delete")).error == ErrorCode.NONE
    assert c.state.image.topics["t"].configs["cleanup_policy"] == "compact"
    # the same values again: nothing to write
    offset = c.offset
    assert c.set_configs("t", ("segment.bytes", SET, "4096")).error == ErrorCode.NONE
    assert c.offset == offset
    # validate_only checks and writes nothing
    dry = c.set_configs("t", ("segment.bytes", SET, "8192"), validate_only=True)
    assert dry.error == ErrorCode.NONE and c.offset == offset
    assert c.set_configs("t", ("segment.bytes", SET, "1"), validate_only=True).error == \
        ErrorCode.INVALID_CONFIG
    assert c.replayed() == c.state.image


@pytest.mark.parametrize(("resource", "code", "needle"), [
    (ResourceChange(ResourceType.TOPIC, "missing", [ConfigOp("retention.ms", SET, "1")]),
     ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "does not exist"),
    (ResourceChange(ResourceType.TOPIC, "bad name", [ConfigOp("retention.ms", SET, "1")]),
     ErrorCode.INVALID_TOPIC_EXCEPTION, ""),
    (ResourceChange(ResourceType.BROKER, "1", [ConfigOp("log.retention.ms", SET, "1")]),
     ErrorCode.INVALID_REQUEST, "broker configs is not supported"),
    (ResourceChange(ResourceType.BROKER_LOGGER, "1", []), ErrorCode.INVALID_REQUEST,
     "not supported"),
    (ResourceChange(99, "t", []), ErrorCode.INVALID_REQUEST, "type 99"),
    (ResourceChange(ResourceType.TOPIC, "t", [ConfigOp("no.such.config", SET, "1")]),
     ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such.config"),
    (ResourceChange(ResourceType.TOPIC, "t", [ConfigOp("no.such.config", DELETE, None)]),
     ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such.config"),
    (ResourceChange(ResourceType.TOPIC, "t", [ConfigOp("retention.ms", SET, "-7")]),
     ErrorCode.INVALID_CONFIG, "retention"),
    (ResourceChange(ResourceType.TOPIC, "t", [ConfigOp("min.insync.replicas", SET, "0")]),
     ErrorCode.INVALID_CONFIG, "Invalid value 0 for configuration min.insync.replicas"),
    (ResourceChange(ResourceType.TOPIC, "t", [ConfigOp("retention_ms", SET, "x")]),
     ErrorCode.INVALID_CONFIG, "Invalid value x for configuration retention.ms: "),
    (ResourceChange(ResourceType.TOPIC, "t", [ConfigOp("retention.ms", SET, None)]),
     ErrorCode.INVALID_REQUEST, "null"),
    (ResourceChange(ResourceType.TOPIC, "t", [ConfigOp("retention.ms", 9, "1")]),
     ErrorCode.INVALID_REQUEST, "unknown operation 9"),
    (ResourceChange(ResourceType.TOPIC, "t", [ConfigOp("retention.ms", -1, "1")]),
     ErrorCode.INVALID_REQUEST, "unknown operation -1"),
    (ResourceChange(ResourceType.TOPIC, "t", [ConfigOp("retention.ms", APPEND, "1")]),
     ErrorCode.INVALID_CONFIG, "Config value append is not allowed for config key: "
                               "retention.ms"),
    (ResourceChange(ResourceType.TOPIC, "t", [ConfigOp("retention.ms", SET, "1"),
                                              ConfigOp("retention_ms", SET, "2")]),
     ErrorCode.INVALID_REQUEST, "named twice"),
])
def test_alter_configs_rejections(resource: ResourceChange, code: ErrorCode,
                                  needle: str) -> None:
    c = Cluster()
    c.start(1)
    c.create("t")
    offset = c.offset
    for incremental in (True, False):
        if not incremental and any(op.operation not in (SET, DELETE)
                                   for op in resource.configs):
            continue  # legacy AlterConfigs has no operations
        (result,), records = c.state.alter_configs([resource], incremental=incremental)
        assert (result.error, records) == (code, []), result.message
        assert needle in (result.message or "")
    assert c.offset == offset


def test_alter_configs_replaces_all_overrides_and_duplicate_resources_fail() -> None:
    c = Cluster()
    c.start(1)
    c.create("t", 1, 1, **{"retention.ms": "1000", "segment.bytes": "4096"})
    legacy = c.set_configs("t", ("retention.bytes", SET, "2048"), incremental=False)
    assert legacy.error == ErrorCode.NONE
    assert c.state.image.topics["t"].configs == {  # the others back to their defaults
        "retention_bytes": "2048", "min_insync_replicas": "1",
        "unclean_leader_election": "false"}
    twice = ResourceChange(ResourceType.TOPIC, "t", [])
    results, records = c.state.alter_configs([twice, twice])
    assert [r.error for r in results] == [ErrorCode.INVALID_REQUEST] * 2 and records == []


def test_allowing_unclean_election_elects_a_leader_for_offline_partitions() -> None:
    c = Cluster()
    c.start(1, 2)
    c.create("t", 1, 2)
    s = c.part("t")
    other = s.replicas[1]
    c.alter(s.leader, "t", [s.leader])
    c.heartbeat(s.leader, want_fence=True)
    assert c.part("t").leader == NO_LEADER
    assert c.set_configs("t", ("unclean.leader.election.enable", SET, "true")).error == \
        ErrorCode.NONE
    after = c.part("t")
    assert (after.leader, after.isr, after.unclean_elected) == (other, (other,), True)
    assert c.replayed() == c.state.image


# ---------------------------------------------------------------- random operations


class ControllerMachine(RuleBasedStateMachine):
    """Random operations; after each: invariants, replay == image, one leader per epoch."""

    @initialize()
    def setup(self) -> None:
        self.c = Cluster()
        self.leaders: dict[tuple[int, int, int], int] = {}
        self.topic_count = 0

    @rule(broker=st.integers(1, 4), fresh=st.booleans())
    def register(self, broker: int, fresh: bool) -> None:
        incarnation = f"inc-{broker}-{self.c.offset if fresh else 0}"
        old = self.c.state.image.brokers.get(broker)
        result, records = self.c.state.register_broker(broker, incarnation, "127.0.0.1",
                                                       9000 + broker)
        if result.error == ErrorCode.DUPLICATE_BROKER_REGISTRATION:
            # refused only while another incarnation serves: wait out its session
            assert records == [] and old is not None and not old.fenced
            assert old.incarnation_id != incarnation
            self.c.clock.advance(SESSION_MS + 1)
        else:
            self.c.keep(records)
        self.c.register(broker, incarnation)

    @rule(broker=st.integers(1, 4), flags=st.sampled_from(["", "fence", "shut"]),
          lag=st.integers(0, 2))
    def heartbeat(self, broker: int, flags: str, lag: int) -> None:
        if broker in self.c.epochs and self.c.epochs[broker] in (
                info.broker_epoch for info in self.c.state.image.brokers.values()):
            self.c.heartbeat(broker, want_fence=flags == "fence", want_shut_down=flags == "shut",
                             current_metadata_offset=self.c.offset - lag)

    @rule(ms=st.sampled_from([1, 500, SESSION_MS + 1, IMBALANCE_MS]))
    def advance_and_tick(self, ms: int) -> None:
        self.c.clock.advance(ms)
        self.c.tick()

    @rule(partitions=st.integers(1, 4), rf=st.integers(1, 3), unclean=st.booleans())
    def create(self, partitions: int, rf: int, unclean: bool) -> None:
        self.topic_count += 1
        self.c.create(f"t{self.topic_count}", partitions, rf,
                      unclean_leader_election=str(unclean).lower())

    @rule(data=st.data())
    def alter(self, data: st.DataObject) -> None:
        parts = list(self.c.state.image.partitions())
        if not parts:
            return
        topic, index, s = data.draw(st.sampled_from(parts))
        sender = data.draw(st.sampled_from([s.leader, s.leader, *s.replicas]))
        if sender not in self.c.epochs:
            return
        others = data.draw(st.lists(st.sampled_from(s.replicas), unique=True, max_size=3))
        isr = [sender, *(b for b in others if b != sender)] if data.draw(st.booleans()) else others
        stale = data.draw(st.integers(-1, 0))
        self.c.alter(sender, topic, isr, index=index,
                     partition_epoch=max(0, s.partition_epoch + stale))

    @rule(data=st.data(), more=st.integers(-1, 3))
    def add_partitions(self, data: st.DataObject, more: int) -> None:
        if self.c.state.image.topics:
            name = data.draw(st.sampled_from(sorted(self.c.state.image.topics)))
            count = self.c.state.image.topics[name].num_partitions + more
            self.c.grow(name, count)

    @rule(data=st.data(), unclean=st.booleans(), min_isr=st.sampled_from(["1", "2", "0"]))
    def alter_configs(self, data: st.DataObject, unclean: bool, min_isr: str) -> None:
        if self.c.state.image.topics:
            name = data.draw(st.sampled_from(sorted(self.c.state.image.topics)))
            self.c.set_configs(name, ("unclean.leader.election.enable", SET, str(unclean)),
                               ("min.insync.replicas", SET, min_isr),
                               incremental=data.draw(st.booleans()))

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        if self.c.state.image.topics:
            name = data.draw(st.sampled_from(sorted(self.c.state.image.topics)))
            self.c.keep(self.c.state.delete_topics([name])[1])

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "c"):
            return
        self.c.state.check_invariants()
        image = self.c.state.image
        for name, topic in image.topics.items():
            for index, s in topic.partitions.items():
                if s.leader != NO_LEADER:
                    key = (topic.topic_uuid, index, s.leader_epoch)
                    assert self.leaders.setdefault(key, s.leader) == s.leader, (name, key)
        assert self.c.replayed() == image


TestControllerMachine = ControllerMachine.TestCase
TestControllerMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


# ---------------------------------------------------------------- decision logs


def test_each_fencing_election_and_restart_is_logged_once_at_info(
        caplog: pytest.LogCaptureFixture) -> None:
    def decisions() -> list[tuple[int, str]]:
        got = [(r.levelno, r.getMessage()) for r in caplog.records
               if r.name == "broker.controller.state" and r.levelno >= logging.INFO]
        caplog.clear()
        return got

    def fenced_line(b: int) -> tuple[int, str]:
        return (logging.INFO, f"broker {b} fenced: session expired (no heartbeat for "
                f"{SESSION_MS} ms); moving its leaderships and ISR memberships away")

    def expire(b: int) -> None:  # every other live broker heartbeats
        c.clock.advance(SESSION_MS + 1)
        for other in c.state.image.unfenced_brokers():
            if other != b:
                c.heartbeat(other)
        c.tick()

    caplog.set_level(logging.INFO, "broker.controller.state")
    c = Cluster()
    c.start(1, 2, 3)
    assert decisions() == [
        line for b, epoch in ((1, 0), (2, 2), (3, 4)) for line in (
            (logging.INFO, f"broker {b} registered at broker epoch {epoch} "
             f"(127.0.0.1:{9000 + b}), fenced until caught up"),
            (logging.INFO, f"broker {b} unfenced at metadata offset {epoch}"))]
    c.create("t", 1, 3)
    first = c.part("t")
    old, second = first.leader, [b for b in first.replicas if b != first.leader]
    decisions()
    expire(old)
    new = c.part("t")
    assert decisions() == [fenced_line(old), (
        logging.INFO, f"t-0: leader {old} -> {new.leader} in leader epoch "
        f"{first.leader_epoch + 1}, ISR {list(new.isr)} (broker {old} fenced)")]
    c.tick()
    assert decisions() == []  # nothing decided: nothing logged
    follower = next(b for b in second if b != new.leader)
    expire(follower)  # a follower fenced: the controller shrinks the ISR
    assert decisions() == [fenced_line(follower), (
        logging.INFO, f"t-0: ISR {list(new.isr)} -> [{new.leader}] (broker {follower} "
        "fenced)")]
    last = new.leader
    expire(last)  # the last ISR member: offline
    assert decisions() == [fenced_line(last), (
        logging.WARNING, f"t-0: offline: leader {last} gone and none elected (broker "
        f"{last} fenced; no live in-sync replica (ISR [{last}]))")]
    epoch = c.register(last, "restarted")
    c.heartbeat(last)
    assert decisions() == [
        (logging.INFO, f"broker {last} registered again (a new process) at broker epoch "
         f"{epoch} (127.0.0.1:{9000 + last}), fenced until caught up"),
        (logging.INFO, f"broker {last} unfenced at metadata offset {epoch}"),
        (logging.INFO, f"t-0: leader none -> {last} in leader epoch "
         f"{c.part('t').leader_epoch}, ISR [{last}] (broker {last} unfenced)")]
    # a leader's own ISR change (AlterPartition) is logged by that broker, not here
    c.register(follower, "back")
    c.heartbeat(follower)
    decisions()
    assert c.alter(last, "t", [last, follower]).error == ErrorCode.NONE
    assert decisions() == []


def test_a_recovery_cut_is_logged_when_first_reported_not_on_each_report_again(
        caplog: pytest.LogCaptureFixture) -> None:
    c = Cluster()
    offline = _all_fenced(c)
    last = offline.isr[0]
    caplog.set_level(logging.DEBUG, "broker.controller.state")

    def cut_lines() -> list[int]:
        got = [r.levelno for r in caplog.records if "log recovery cut its replica" in
               r.getMessage()]
        caplog.clear()
        return got

    _back(c, last, 100, cut=True)
    assert cut_lines() == [logging.WARNING]
    _report_again(c, last, 100, cut=True)  # the fresh report the controller asks for
    assert cut_lines() == [logging.DEBUG]
