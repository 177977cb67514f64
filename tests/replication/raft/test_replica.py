"""KRaftReplica, event by event: election, PreVote, persistence order, replication, HW.

The whole-quorum proof under faults is the simulation (test_sim.py); these pin single
rules with a synchronous pump (tests/replication/raft/pump.py) and an injected clock.
"""

from __future__ import annotations

import random

import pytest

from clients.protocol.errors import ErrorCode
from replication.raft.config import RaftConfig
from replication.raft.messages import (
    Entry,
    QuorumBeginEpochRequest,
    QuorumFetchRequest,
    QuorumFetchResponse,
    QuorumVoteRequest,
    QuorumVoteResponse,
)
from replication.raft.quorum_state import ElectionState, QuorumRole
from replication.raft.raft_log import MemoryRaftLog
from replication.raft.replica import LEADER_CHANGE, KRaftReplica
from tests.replication.raft.pump import ListStore, Pump
from timer.clock import ManualClock

R = QuorumRole


def elected(n: int = 3, seed: int = 0) -> Pump:
    pump = Pump(n, seed)
    pump.advance(3000)
    assert len(pump.leaders()) == 1
    return pump


def test_three_voters_elect_one_leader_who_commits_its_leader_change_first() -> None:
    pump = elected()
    leader = pump.leader()
    assert leader.epoch == 1
    assert leader.log.entries_from(0, 10) == [Entry(1, LEADER_CHANGE)]
    assert leader.high_watermark == 1
    followers = [n for n in pump.nodes.values() if n is not leader]
    assert all(f.role is R.FOLLOWER and f.leader_id == leader.node_id for f in followers)
    assert all(pump.stores[f.node_id].read() == ElectionState(1, f.voted_for, leader.node_id)
               for f in followers)


def test_election_timeout_comes_from_the_injected_rng_within_kafka_bounds() -> None:
    deadlines = {KRaftReplica(1, [1, 2, 3], MemoryRaftLog(), ListStore(), ManualClock(0),
                              random.Random(seed)).next_deadline_ms() for seed in range(20)}
    assert len(deadlines) > 10 and all(1000 <= d < 2000 for d in deadlines)


def test_a_single_voter_leads_at_once_and_commits_alone() -> None:
    pump = Pump(1)
    pump.advance(2000)
    leader = pump.leader()
    leader.append([b"a", b"b"])
    pump.advance(10)
    assert leader.high_watermark == 3


def test_vote_is_persisted_before_the_answer_and_never_given_twice() -> None:
    store = ListStore()
    voter = KRaftReplica(1, [1, 2, 3], MemoryRaftLog(), store, ManualClock(0), random.Random(0))
    out = voter.handle(2, QuorumVoteRequest(1, 2, -1, 0, pre_vote=False))
    assert [s.message for s in out] == [QuorumVoteResponse(1, True, None, False)]
    assert store.writes[-1] == ElectionState(1, voted_for=2)  # written by the time it answers
    again = KRaftReplica(1, [1, 2, 3], MemoryRaftLog(), store, ManualClock(0), random.Random(1))
    refused = again.handle(3, QuorumVoteRequest(1, 3, -1, 0, pre_vote=False))
    assert refused[0].message.granted is False
    assert again.handle(2, QuorumVoteRequest(1, 2, -1, 0, pre_vote=False))[0].message.granted


def test_a_store_that_fails_means_no_answer() -> None:
    class Broken(ListStore):
        def write(self, state: ElectionState) -> None:
            raise OSError("disk gone")

    voter = KRaftReplica(1, [1, 2, 3], MemoryRaftLog(), Broken(), ManualClock(0),
                         random.Random(0))
    with pytest.raises(OSError):
        voter.handle(2, QuorumVoteRequest(1, 2, -1, 0, pre_vote=False))


def test_vote_refused_to_a_less_up_to_date_log() -> None:
    log = MemoryRaftLog([Entry(1, b"x"), Entry(2, b"y")])
    voter = KRaftReplica(1, [1, 2, 3], log, ListStore(), ManualClock(0), random.Random(0))
    longer_but_older = QuorumVoteRequest(3, 2, last_epoch=1, end_offset=5, pre_vote=False)
    assert voter.handle(2, longer_but_older)[0].message.granted is False
    assert voter.epoch == 3  # the higher epoch is adopted all the same
    assert voter.handle(3, QuorumVoteRequest(3, 3, 2, 2, pre_vote=False))[0].message.granted


def test_pre_vote_changes_nothing_and_is_refused_while_a_leader_is_heard() -> None:
    pump = elected()
    follower = next(n for n in pump.nodes.values() if n.role is R.FOLLOWER)
    writes = len(pump.stores[follower.node_id].writes)
    req = QuorumVoteRequest(follower.epoch + 1, 3, 1, 10, pre_vote=True)
    assert follower.handle(3 if follower.node_id != 3 else 2, req)[0].message.granted is False
    assert len(pump.stores[follower.node_id].writes) == writes and follower.epoch == 1


def test_a_returning_partitioned_voter_does_not_disrupt_the_leader() -> None:
    pump = elected(n=5)
    leader = pump.leader()
    lonely = next(i for i in pump.ids if i != leader.node_id)
    pump.isolate(lonely)
    pump.advance(10_000)
    assert pump.nodes[lonely].epoch == 1  # pre-votes failed: its epoch did not move
    pump.cut.clear()
    pump.advance(3000)
    assert pump.leader() is leader and leader.epoch == 1
    assert pump.nodes[lonely].role is R.FOLLOWER


def test_check_quorum_leader_cut_from_the_majority_resigns() -> None:
    pump = elected(n=3)
    leader = pump.leader()
    pump.isolate(leader.node_id)
    pump.advance(1900)
    assert leader.role is R.LEADER
    pump.advance(200)
    assert leader.role is R.RESIGNED
    pump.advance(4000)
    (new,) = pump.leaders()
    assert new.epoch >= 2 and new is not leader


def test_graceful_resignation_hands_over_to_the_preferred_successor_at_once() -> None:
    pump = elected(n=3)
    leader = pump.leader()
    pump.send(leader.node_id, leader.resign())
    pump.run()
    pump.stopped.add(leader.node_id)
    pump.advance(300)  # far below the 2 s fetch timeout
    (new,) = pump.leaders()
    assert new.epoch == 2


def test_hw_needs_a_majority_and_an_entry_of_the_current_epoch() -> None:
    pump = elected(n=3)
    leader = pump.leader()
    a, b = (i for i in pump.ids if i != leader.node_id)
    pump.stopped |= {a, b}
    leader.append([b"x"])
    pump.advance(10)
    assert leader.high_watermark == 1  # only the leader has x
    pump.restart(a)
    pump.advance(200)
    assert leader.high_watermark == 2 and pump.nodes[a].high_watermark == 2


def test_new_leader_does_not_commit_an_old_epoch_entry_before_its_own() -> None:
    # leader of epoch 3 holds an uncommitted entry of epoch 1 at offset 1; its LeaderChange
    # is offset 2.  A follower at offset 2 (has the epoch-1 entry) is a majority for
    # offset 2, but the HW may only pass the epoch start with the LeaderChange (offset 3).
    log = MemoryRaftLog([Entry(1, b"lc1"), Entry(1, b"old")])
    store = ListStore()
    store.write(ElectionState(2, voted_for=1))
    clock = ManualClock(0)
    cfg = RaftConfig()
    leader = KRaftReplica(1, [1, 2, 3], log, store, clock, random.Random(0), cfg)
    clock.advance(3000)
    leader.poll()  # prospective
    leader.handle(2, QuorumVoteResponse(2, True, None, True))  # candidate, epoch 3
    leader.handle(2, QuorumVoteResponse(3, True, None, False))
    assert leader.role is R.LEADER and leader.log.end_offset == 3
    out = leader.handle(2, QuorumFetchRequest(3, 2, fetch_offset=2, last_fetched_epoch=1))
    assert leader.high_watermark == 0
    assert out[0].message.entries == (Entry(3, LEADER_CHANGE),)
    leader.handle(2, QuorumFetchRequest(3, 2, fetch_offset=3, last_fetched_epoch=3))
    assert leader.high_watermark == 3


def test_diverging_follower_truncates_by_epoch_and_catches_up() -> None:
    clock = ManualClock(0)
    follower_log = MemoryRaftLog([Entry(1, b"a"), Entry(2, b"stale1"), Entry(2, b"stale2")])
    store = ListStore()
    store.write(ElectionState(3, None, 2))
    follower = KRaftReplica(1, [1, 2, 3], follower_log, store, clock, random.Random(0))
    (fetch,) = follower.poll()
    assert fetch.message == QuorumFetchRequest(3, 1, 3, 2)
    out = follower.handle(2, QuorumFetchResponse(3, 2, 3, diverging=(1, 1)))
    assert follower_log.entries_from(0, 10) == [Entry(1, b"a")]
    assert out[0].message == QuorumFetchRequest(3, 1, 1, 1)
    follower.handle(2, QuorumFetchResponse(3, 2, 1, (Entry(3, b"lc"),), high_watermark=2))
    assert follower_log.entries_from(0, 10) == [Entry(1, b"a"), Entry(3, b"lc")]
    assert follower.high_watermark == 2


def test_leader_answers_divergence_like_offsets_for_leader_epoch() -> None:
    pump = elected(n=3)
    leader = pump.leader()
    other = next(i for i in pump.ids if i != leader.node_id)
    (resp,) = leader.handle(other, QuorumFetchRequest(1, other, 5, 0))
    assert resp.message.diverging == (0, 0)  # epoch 0 unknown: nothing below the first epoch
    (resp,) = leader.handle(other, QuorumFetchRequest(0, other, 0, -1))
    assert resp.message.error is ErrorCode.FENCED_LEADER_EPOCH
    (resp,) = leader.handle(other, QuorumFetchRequest(1, other, -3, -1))
    assert resp.message.error is ErrorCode.INVALID_REQUEST and not resp.message.entries


def test_restarted_leader_comes_back_resigned() -> None:
    pump = elected(n=3)
    leader = pump.leader()
    pump.restart(leader.node_id)
    assert pump.nodes[leader.node_id].role is R.RESIGNED


def test_messages_from_non_voters_are_ignored() -> None:
    voter = KRaftReplica(1, [1, 2, 3], MemoryRaftLog(), ListStore(), ManualClock(0),
                         random.Random(0))
    assert voter.handle(9, QuorumVoteRequest(5, 9, 9, 9, pre_vote=False)) == []
    assert voter.epoch == 0


def test_pre_vote_refused_only_once_the_follower_has_fetched_from_its_leader() -> None:
    # Kafka's FollowerState: a follower that has not fetched from its leader yet (a dead
    # leader it was told of, or returned to after a failed pre-vote) does not vouch for
    # it; two survivors of a killed leader could otherwise refuse each other forever
    voter = KRaftReplica(1, [1, 2, 3], MemoryRaftLog(), ListStore(), ManualClock(0),
                         random.Random(0))
    voter.handle(2, QuorumBeginEpochRequest(1, 2))
    assert voter.role is R.FOLLOWER and voter.leader_id == 2
    ask = QuorumVoteRequest(2, 3, 1, 5, pre_vote=True)
    assert voter.handle(3, ask)[0].message.granted
    voter.handle(2, QuorumFetchResponse(1, 2, 0, (Entry(1, LEADER_CHANGE),), 1))
    assert not voter.handle(3, ask)[0].message.granted  # it hears from its leader now
