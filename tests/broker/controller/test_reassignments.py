"""Partition reassignments in the controller's pure core: the target replicas join
first, the old ones leave only once every target replica is in the ISR, leadership moves
to an in-sync target replica; cancel, replace and refusals."""

from __future__ import annotations

from broker.controller.results import PartitionResult, TopicSpec
from clients.protocol.errors import ErrorCode
from tests.broker.controller.test_state import Cluster


def cluster_with(assignment: list[int]) -> Cluster:
    c = Cluster(auto_leader_rebalance_enable=False)
    c.start(1, 2, 3, 4)
    _, records = c.state.create_topics([TopicSpec("t", assignments={0: assignment})])
    c.keep(records)
    return c


def reassign(c: Cluster, target: list[int] | None, topic: str = "t") -> PartitionResult:
    (result,), records = c.state.alter_reassignments([(topic, 0, target)])
    c.keep(records)
    return result


def test_targets_join_then_the_old_replicas_leave_and_leadership_moves() -> None:
    c = cluster_with([1, 2])
    before = c.part("t")
    assert (before.leader, before.isr) == (1, (1, 2))
    assert reassign(c, [2, 3]).error == ErrorCode.NONE
    moving = c.part("t")
    assert (moving.replicas, moving.leader, moving.isr) == ((2, 3, 1), 1, (1, 2))
    assert moving.leader_epoch == before.leader_epoch
    flying = c.state.reassignments.in_flight[("t", 0)]
    # the original replicas in the in-flight order (Kafka's record keeps no other)
    assert (flying.target, flying.original) == ((2, 3), (2, 1))
    c.tick()
    assert c.part("t").replicas == (2, 3, 1)  # 3 is not in sync yet: nothing leaves
    c.alter(1, "t", [1, 2, 3])  # 3 caught up: the leader adds it to the ISR
    done = c.part("t")
    assert (done.replicas, done.leader, done.isr) == ((2, 3), 2, (2, 3))
    assert done.leader_epoch == before.leader_epoch + 1
    assert ("t", 0) not in c.state.reassignments.in_flight
    assert c.replayed().partition("t", 0) == done


def test_the_leader_stays_when_it_is_a_target_and_a_fenced_target_holds_it_up() -> None:
    c = cluster_with([1, 2])
    reassign(c, [3, 1])
    c.alter(1, "t", [1, 2, 3])
    kept = c.part("t")
    assert (kept.replicas, kept.leader, kept.isr) == ((3, 1), 1, (1, 3))

    c = cluster_with([1, 2])
    reassign(c, [3, 4])
    c.alter(1, "t", [1, 2, 3])
    c.heartbeat(4, want_fence=True)  # a target replica is down: the old ones stay
    c.tick()
    assert c.part("t").replicas == (3, 4, 1, 2)
    c.heartbeat(4)
    c.alter(1, "t", [1, 2, 3, 4])
    moved = c.part("t")
    assert (moved.replicas, moved.leader, moved.isr) == ((3, 4), 3, (3, 4))


def test_cancel_replace_and_refusals() -> None:
    c = cluster_with([1, 2])
    assert reassign(c, None).error == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert reassign(c, [1, 2]).error == ErrorCode.NONE  # already there: nothing to do
    assert ("t", 0) not in c.state.reassignments.in_flight
    for bad in ([], [3], [3, 3], [3, 9], [2, 3, 4]):
        assert reassign(c, bad).error == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert reassign(c, [2, 3], topic="nosuch").error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    reassign(c, [3, 4])
    assert c.part("t").replicas == (3, 4, 1, 2)
    reassign(c, [2, 3])  # replaced: 4 leaves at completion
    assert set(c.state.reassignments.in_flight[("t", 0)].original) == {1, 2}
    assert reassign(c, None).error == ErrorCode.NONE  # back to [1, 2]
    # both in sync already: done at once (in the in-flight order, as Kafka's revert)
    assert c.part("t").replicas == (2, 1)
    assert c.part("t").leader == 1
    assert ("t", 0) not in c.state.reassignments.in_flight
