"""Snapshots in the pure KRaft replica (KIP-630): a log cut at its head, a leader that
answers a Fetch below its log start with its snapshot id, FetchSnapshot in chunks, a
follower that installs the snapshot, restarts its log after it and catches up; and the
refusals (a snapshot gone from the leader, a position past its size, one the follower's
store refuses, one too big); a voter whose disk was lost (an observer) catching up
by snapshot and rejoining.  Synchronous pump, injected clock.
"""

from __future__ import annotations

import random

import pytest

from clients.protocol.errors import ErrorCode
from replication.raft.config import RaftConfig
from replication.raft.leader_state import LeaderState
from replication.raft.messages import (
    Entry,
    OffsetAndEpoch,
    QuorumFetchRequest,
    QuorumFetchResponse,
    QuorumFetchSnapshotRequest,
    QuorumFetchSnapshotResponse,
)
from replication.raft.quorum_state import QuorumRole
from replication.raft.raft_log import MemoryRaftLog
from replication.raft.replica import KRaftReplica
from replication.raft.snapshot_fetch import needs_snapshot
from replication.raft.snapshot_store import MemorySnapshotStore
from tests.replication.raft.pump import ListStore, Pump


def state_of(log: MemoryRaftLog, below: int) -> bytes:
    """The 'application state' these tests snapshot: every payload below ``below``."""
    return b"|".join(log.entry_at(o).payload for o in range(log.start_offset, below))


class SnapshotPump(Pump):
    """Pump whose voters have snapshot stores; ``refuse`` counts installs to refuse."""

    def __init__(self, config: RaftConfig) -> None:
        self.snapshot_stores: dict[int, MemorySnapshotStore] = {}
        self.refuse = 0
        super().__init__(3, 0, config)

    def _validate(self, _id: OffsetAndEpoch, _data: bytes) -> bool:
        if self.refuse:
            self.refuse -= 1
            return False
        return True

    def _make(self, i: int) -> KRaftReplica:
        store = self.snapshot_stores.setdefault(i, MemorySnapshotStore(self._validate))
        return KRaftReplica(i, self.ids, self.logs[i], self.stores[i], self.clock,
                            random.Random(self.rng.random()), self.config, snapshots=store)

    def restart(self, i: int) -> None:
        log = self.logs[i]
        self.logs[i] = MemoryRaftLog(log.durable_entries(), log.durable_snapshot())
        self.nodes[i] = self._make(i)
        self.stopped.discard(i)

    def snapshot(self, i: int) -> OffsetAndEpoch:
        """Voter ``i``'s application snapshots everything committed and cuts its log."""
        node, log = self.nodes[i], self.logs[i]
        end = node.high_watermark
        snapshot_id = OffsetAndEpoch(end, log.epoch_cache.epoch_for_offset(end - 1))
        self.snapshot_stores[i].write(snapshot_id, state_of(log, end))
        log.advance_start_offset(end)
        return snapshot_id


def _snapshot_while_one_is_down(config: RaftConfig) -> tuple[SnapshotPump, int, int]:
    pump = SnapshotPump(config)
    pump.advance(3000)
    leader = pump.leader()
    lagging = next(i for i in pump.ids if i != leader.node_id)
    pump.stopped.add(lagging)
    pump.send(leader.node_id, [])
    leader.append([f"r{k}".encode() for k in range(20)])
    pump.advance(200)
    assert leader.high_watermark == leader.log.end_offset == 21
    return pump, leader.node_id, lagging


def test_a_follower_below_the_log_start_catches_up_by_fetch_snapshot_in_chunks() -> None:
    pump, leader_id, lagging = _snapshot_while_one_is_down(RaftConfig(
        max_fetch_snapshot_bytes=16))
    leader = pump.nodes[leader_id]
    before = state_of(pump.logs[leader_id], 21)
    snapshot_id = pump.snapshot(leader_id)
    assert (leader.log.start_offset, snapshot_id) == (21, OffsetAndEpoch(21, 1))
    leader.append([b"after"])
    pump.restart(lagging)
    pump.advance(500)

    follower = pump.nodes[lagging]
    asked = [m for _s, d, m in pump.delivered if d == leader_id
             and isinstance(m, QuorumFetchSnapshotRequest)]
    assert len(asked) == -(-len(before) // 16) > 1  # in chunks of at most 16 bytes
    assert [m.position for m in asked] == list(range(0, len(before), 16))
    store = pump.snapshot_stores[lagging]
    assert store.latest_id() == snapshot_id
    assert store.read(snapshot_id, 0, 1 << 20) == before
    assert follower.log.start_offset == 21
    assert follower.log.entries_from(21, 10) == leader.log.entries_from(21, 10)
    assert follower.log.entry_at(21) == Entry(1, b"after")
    assert follower.high_watermark == leader.high_watermark == 22
    assert follower.role is QuorumRole.FOLLOWER
    # restarted, it starts from its snapshot and the log after it; the HW from the start
    pump.restart(lagging)
    again = pump.nodes[lagging]
    assert (again.log.start_offset, again.log.end_offset, again.high_watermark) == (21, 22, 21)
    assert again.log.last_epoch == 1


def test_a_snapshot_the_follower_refuses_is_fetched_again() -> None:
    pump, leader_id, lagging = _snapshot_while_one_is_down(RaftConfig())
    snapshot_id = pump.snapshot(leader_id)
    pump.refuse = 1
    pump.restart(lagging)
    pump.advance(500)
    asked = [m for _s, d, m in pump.delivered if d == leader_id
             and isinstance(m, QuorumFetchSnapshotRequest)]
    assert len(asked) == 2 and pump.refuse == 0  # refused once, fetched again, installed
    assert pump.snapshot_stores[lagging].latest_id() == snapshot_id
    assert pump.nodes[lagging].log.start_offset == 21


def test_a_snapshot_past_the_follower_bound_is_not_held() -> None:
    pump, leader_id, lagging = _snapshot_while_one_is_down(RaftConfig(max_snapshot_bytes=8))
    pump.snapshot(leader_id)
    pump.restart(lagging)
    pump.advance(300)
    assert pump.snapshot_stores[lagging].latest_id() is None
    assert pump.nodes[lagging].log.end_offset == pump.logs[lagging].end_offset < 21


@pytest.mark.parametrize("position, error", [
    (0, ErrorCode.NONE), (10_000, ErrorCode.POSITION_OUT_OF_RANGE), (-1,
    ErrorCode.POSITION_OUT_OF_RANGE)])
def test_the_leader_serves_only_a_snapshot_it_holds_within_its_size(
        position: int, error: ErrorCode) -> None:
    pump, leader_id, lagging = _snapshot_while_one_is_down(RaftConfig())
    snapshot_id = pump.snapshot(leader_id)
    leader = pump.nodes[leader_id]
    [answer] = leader.handle(lagging, QuorumFetchSnapshotRequest(
        leader.epoch, lagging, snapshot_id, position))
    assert isinstance(answer.message, QuorumFetchSnapshotResponse)
    assert answer.message.error is error
    [gone] = leader.handle(lagging, QuorumFetchSnapshotRequest(
        leader.epoch, lagging, OffsetAndEpoch(5, 1), 0))
    assert isinstance(gone.message, QuorumFetchSnapshotResponse)
    assert gone.message.error is ErrorCode.SNAPSHOT_NOT_FOUND
    [stale] = leader.handle(lagging, QuorumFetchSnapshotRequest(
        leader.epoch - 1, lagging, snapshot_id, 0))
    assert stale.message.error is ErrorCode.FENCED_LEADER_EPOCH  # type: ignore[union-attr]
    # a Fetch below the log start gets the snapshot id, not entries
    [fetched] = leader.handle(lagging, QuorumFetchRequest(leader.epoch, lagging, 3, 1))
    assert isinstance(fetched.message, QuorumFetchResponse)
    assert (fetched.message.snapshot_id, fetched.message.entries) == (snapshot_id, ())


def test_memory_log_start_offset_and_reset() -> None:
    log = MemoryRaftLog([Entry(1, b"a"), Entry(1, b"b"), Entry(2, b"c")])
    log.advance_start_offset(2)
    assert (log.start_offset, log.end_offset, log.last_epoch) == (2, 3, 2)
    with pytest.raises(ValueError):
        log.truncate_to(1)
    log.truncate_to(2)
    assert (log.end_offset, log.last_epoch) == (2, 1)  # the snapshot's epoch
    log.reset_to_snapshot(OffsetAndEpoch(9, 4))
    assert (log.start_offset, log.end_offset, log.last_epoch) == (9, 9, 4)
    assert log.durable_snapshot() == OffsetAndEpoch(9, 4) and log.durable_entries() == ()
    log.append([Entry(5, b"d")])
    assert log.epoch_cache.end_offset_for(4, log.end_offset) == (4, 9)


@pytest.mark.parametrize("fetch_offset, last_epoch, snapshot", [
    (8, 3, True),  # below the log start
    (9, 3, False),  # exactly at the snapshot: valid
    (9, 2, True),  # at the start with another epoch
    (12, 1, True),  # an epoch older than the snapshot's: where it diverges is gone
    (12, 3, False),  # the leader's cache answers (a diverging epoch or entries)
])
def test_which_fetches_the_leader_answers_with_its_snapshot(
        fetch_offset: int, last_epoch: int, snapshot: bool) -> None:
    start = OffsetAndEpoch(9, 3)
    assert needs_snapshot(start, fetch_offset, last_epoch) is snapshot
    assert not needs_snapshot(None, fetch_offset, last_epoch)  # a log starting at 0


def test_a_wiped_voter_below_the_log_start_catches_up_by_snapshot_then_rejoins() -> None:
    """An observer (disk lost) behind a cut log: FetchSnapshot, then Fetch; its rejoin
    marker is committed without it and it turns voter (docs/quorum.md)."""
    pump, leader_id, wiped = _snapshot_while_one_is_down(RaftConfig())
    leader = pump.nodes[leader_id]
    snapshot_id = pump.snapshot(leader_id)
    pump.logs[wiped], pump.stores[wiped] = MemoryRaftLog(), ListStore()
    store = pump.snapshot_stores[wiped] = MemorySnapshotStore(pump._validate)
    node = pump.nodes[wiped] = KRaftReplica(wiped, pump.ids, pump.logs[wiped],
                                            pump.stores[wiped], pump.clock, random.Random(7),
                                            pump.config, snapshots=store, observer=True)
    pump.stopped.discard(wiped)
    pump.advance(3000)
    assert store.latest_id() == snapshot_id and node.log.start_offset == 21
    assert not node.observer  # the leader's marker after its catch-up committed
    assert node.log.entries_from(21, 10) == leader.log.entries_from(21, 10)
    assert leader.high_watermark == leader.log.end_offset == 22  # one LeaderChange marker
    assert [s for s in pump.stores[wiped].writes if s.voted_for is not None] == []


def test_an_observers_fetch_snapshot_does_not_count_for_check_quorum() -> None:
    leader = LeaderState(1, [1, 2, 3], epoch=4, epoch_start_offset=0, high_watermark=0,
                         now_ms=0)
    leader.on_fetch(2, 0, 10, observer=True)
    leader.on_fetch(3, 0, 10)
    leader.on_fetch_snapshot(2, 500)  # FetchSnapshot carries no observer flag
    leader.on_fetch_snapshot(3, 500)
    assert (leader.last_fetch_ms_of(2), leader.last_fetch_ms_of(3)) == (0, 500)
    leader.on_fetch(2, 0, 600)  # a voter again
    leader.on_fetch_snapshot(2, 700)
    assert leader.last_fetch_ms_of(2) == 700
