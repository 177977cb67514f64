"""ElectLeaders in the controller's pure core (ControllerState.elect_leaders): preferred
elections follow the periodic election's conditions, never elect a replica that log
recovery cut, and unclean ones are refused unless the topic allows them."""

from __future__ import annotations

from broker.controller.results import ElectionType, PartitionResult
from broker.metadata.records import NO_LEADER
from clients.protocol.errors import ErrorCode
from tests.broker.controller.test_state import Cluster, _all_fenced, _back

PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN


def elect(c: Cluster, kind: ElectionType,
          wanted: list[tuple[str, int]] | None) -> list[PartitionResult]:
    results, records = c.state.elect_leaders(kind, wanted)
    c.keep(records)
    return results


def codes(results: list[PartitionResult]) -> dict[tuple[str, int], ErrorCode]:
    return {(r.topic, r.partition): r.error for r in results}


def test_preferred_election_on_request_moves_leadership_back_once_in_sync() -> None:
    c = Cluster(auto_leader_rebalance_enable=False)
    c.start(1, 2)
    c.create("t", 2, 2)
    preferred = c.part("t").replicas[0]
    c.heartbeat(preferred, want_fence=True)
    c.heartbeat(preferred)  # back, but not in the ISR yet
    moved = c.part("t")
    assert moved.leader != preferred
    (refused,) = elect(c, PREFERRED, [("t", 0)])
    assert refused.error == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert "is not in the ISR" in (refused.message or "")
    assert c.part("t").leader == moved.leader
    c.alter(moved.leader, "t", [moved.leader, preferred])
    assert codes(elect(c, PREFERRED, [("t", 0), ("t", 9), ("nosuch", 0)])) == {
        ("t", 0): ErrorCode.NONE, ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nosuch", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    final = c.part("t")
    assert final.leader == preferred and final.leader_epoch == moved.leader_epoch + 1
    assert codes(elect(c, PREFERRED, [("t", 0)])) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED}
    # every partition: the ones that need nothing are left out (Kafka's answer)
    assert [r for r in elect(c, PREFERRED, None) if r.error != ErrorCode.NONE] == []
    assert c.replayed().partition("t", 0) == c.part("t")


def test_preferred_election_never_elects_a_replica_that_recovery_cut() -> None:
    c = Cluster(auto_leader_rebalance_enable=False)
    offline = _all_fenced(c)
    last = offline.isr[0]
    _back(c, last, 100, cut=True)  # live, in the ISR, but it may lack acknowledged records
    assert c.part("t").leader == NO_LEADER
    for kind in (PREFERRED, UNCLEAN):
        (result,) = elect(c, kind, [("t", 0)])
        assert result.error in (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        assert "waiting for brokers" in (result.message or "")
        assert c.part("t").leader == NO_LEADER


def test_unclean_election_is_refused_unless_the_topic_allows_it() -> None:
    c = Cluster()
    c.start(1, 2)
    c.create("t", 1, 2)
    s = c.part("t")
    assert codes(elect(c, UNCLEAN, [("t", 0)])) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED}
    c.alter(s.leader, "t", [s.leader])
    c.heartbeat(s.leader, want_fence=True)  # the only ISR member is gone
    assert c.part("t").leader == NO_LEADER
    (refused,) = elect(c, UNCLEAN, [("t", 0)])
    assert refused.error == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    assert "unclean.leader.election.enable" in (refused.message or "")
    assert c.part("t").leader == NO_LEADER
