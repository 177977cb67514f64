"""A voter whose disk was lost comes back as an observer (issue 34, docs/quorum.md).

It must neither vote nor stand nor count toward the high watermark or check quorum until
an entry appended after it caught up is committed without it.  Each scenario is also run
with the wiped voter wrongly trusted as a voter (``observer=False``) to show what the
rule prevents: the committed entries are lost.
"""

from __future__ import annotations

import random

import pytest

from replication.raft.messages import QuorumFetchRequest, QuorumVoteRequest
from replication.raft.quorum_state import QuorumRole
from replication.raft.raft_log import MemoryRaftLog
from replication.raft.replica import KRaftReplica
from tests.replication.raft.pump import ListStore, Pump

R = QuorumRole


def wipe(pump: Pump, i: int, observer: bool = True) -> KRaftReplica:
    """Voter ``i`` restarted on an empty directory (no quorum state, empty log)."""
    pump.logs[i] = MemoryRaftLog()
    pump.stores[i] = ListStore()
    pump.nodes[i] = KRaftReplica(i, pump.ids, pump.logs[i], pump.stores[i], pump.clock,
                                 random.Random(i), pump.config, observer=observer)
    pump.stopped.discard(i)
    return pump.nodes[i]


def committed_with_one_follower() -> tuple[Pump, int, int, int, list[bytes]]:
    """Leader ``a`` commits x, y with ``c`` only (``b`` is cut off)."""
    pump = Pump(3, seed=1)
    pump.advance(3000)
    a = pump.leader().node_id
    b, c = (i for i in pump.ids if i != a)
    pump.cut |= {(a, b), (b, a)}
    pump.nodes[a].append([b"x", b"y"])
    pump.advance(200)
    assert pump.nodes[a].high_watermark == 3 and pump.nodes[c].log.end_offset == 3
    assert pump.nodes[b].log.end_offset == 1
    return pump, a, b, c, [b"x", b"y"]


def payloads(node: KRaftReplica) -> list[bytes]:
    return [e.payload for e in node.log.entries_from(0, 100)]


@pytest.mark.parametrize("observer", [True, False])
def test_a_wiped_voter_does_not_vote_so_the_committed_entries_survive(observer: bool) -> None:
    pump, a, b, c, committed = committed_with_one_follower()
    node = wipe(pump, c, observer=observer)
    pump.stopped.add(a)  # the only other holder of the committed x, y is gone
    pump.cut.clear()
    stale = pump.nodes[b]
    ask = QuorumVoteRequest(stale.epoch + 1, b, stale.log.last_epoch, stale.log.end_offset,
                            pre_vote=False)
    granted = node.handle(b, ask)[-1].message.granted
    if not observer:  # trusted, c elects b, whose log lacks the committed x, y
        assert granted and not any(p in payloads(stale) for p in committed)
        return
    assert not granted
    pump.advance(8000)
    assert pump.leaders() == []  # b lacks x, y and c will not vote: no leader, nothing lost
    assert node.voted_for is None and node.role is not R.CANDIDATE
    pump.restart(a)
    pump.advance(8000)
    (leader,) = pump.leaders()
    assert leader.node_id == a  # only a can win: the others lack x, y or do not vote
    assert all(p in payloads(leader)[:leader.high_watermark] for p in committed)
    pump.advance(3000)
    assert not node.observer and payloads(node)[:3] == payloads(leader)[:3]


def test_a_wiped_voter_refuses_pre_votes_and_votes() -> None:
    pump = Pump(3)
    node = wipe(pump, 3)
    pre = node.handle(1, QuorumVoteRequest(1, 1, 0, 5, pre_vote=True))
    vote = node.handle(1, QuorumVoteRequest(1, 1, 0, 5, pre_vote=False))
    assert not pre[0].message.granted and not vote[0].message.granted
    assert node.voted_for is None and node.epoch == 1  # the epoch is learned, no vote cast


@pytest.mark.parametrize("observer", [True, False])
def test_a_wiped_voter_does_not_keep_a_cut_off_leader_alive(observer: bool) -> None:
    # a leads; b is cut from a (b, with the old c, may elect a new leader): the wiped c
    # fetching from a must not make a's check quorum pass
    pump, a, b, c, _ = committed_with_one_follower()
    wipe(pump, c, observer=observer)
    pump.cut |= {(b, c), (c, b)}
    pump.advance(3000)  # past the 2 s fetch timeout
    assert pump.nodes[c].leader_id == a
    if observer:
        assert pump.nodes[a].role is R.RESIGNED
    else:
        assert pump.nodes[a].role is R.LEADER


def test_a_wiped_voter_catches_up_then_votes_again() -> None:
    pump = Pump(3, seed=2)
    pump.advance(3000)
    leader = pump.leader()
    leader.append([b"x"])
    pump.advance(200)
    c = next(i for i in pump.ids if i != leader.node_id)
    node = wipe(pump, c)
    hw_before = leader.high_watermark
    pump.advance(3000)
    assert node.role is R.FOLLOWER and node.leader_id == leader.node_id
    assert not node.observer  # caught up: the leader's marker entry committed without it
    assert node.log.entries_from(0, 100) == leader.log.entries_from(0, 100)
    assert leader.high_watermark == hw_before + 1  # one LeaderChange marker, no more
    assert [s for s in pump.stores[c].writes if s.voted_for is not None] == []
    # a voter again: counted toward the HW and able to vote
    other = next(i for i in pump.ids if i not in (c, leader.node_id))
    pump.stopped.add(other)
    leader.append([b"y"])
    pump.advance(200)
    assert leader.high_watermark == leader.log.end_offset  # committed with c's fetch
    pump.stopped.add(leader.node_id)
    pump.stopped.discard(other)
    pump.restart(other)
    pump.advance(8000)
    (new,) = pump.leaders()
    assert b"y" in payloads(new)[:new.high_watermark]


def test_the_leader_forgets_what_a_wiped_voter_acknowledged_before() -> None:
    pump = Pump(3, seed=3)
    pump.advance(3000)
    leader = pump.leader()
    leader.append([b"x"])
    pump.advance(200)
    c = next(i for i in pump.ids if i != leader.node_id)
    assert leader._leader is not None and leader._leader.end_offset_of(c) == 2
    pump.stopped.add(c)
    leader.handle(c, QuorumFetchRequest(leader.epoch, c, 0, -1, observer=True))
    assert leader._leader.end_offset_of(c) == 0
