"""ISR pieces: the caught-up rule, shrink/expand predicates, proposal life cycle."""

from __future__ import annotations

import pytest

from clients.protocol.errors import ErrorCode
from replication.isr import (
    NOT_APPLIED_ERRORS,
    UNKNOWN_OFFSET,
    AlterPartitionProposal,
    IsrState,
    ReplicaState,
    can_join_isr,
    out_of_sync_replicas,
)


def test_fetch_at_leader_leo_is_caught_up_now() -> None:
    s = ReplicaState()
    s.update_fetch(10, 10, now_ms=500)
    assert s.last_caught_up_time_ms == 500 and s.log_end_offset == 10


def test_fetch_reaching_the_previous_leo_is_caught_up_at_the_previous_fetch() -> None:
    s = ReplicaState()
    s.update_fetch(5, 10, now_ms=100)      # behind: not caught up
    assert s.last_caught_up_time_ms == 0
    s.update_fetch(10, 14, now_ms=200)     # has what the leader had at t=100
    assert s.last_caught_up_time_ms == 100
    s.update_fetch(12, 20, now_ms=300)     # behind the LEO at t=200 (14): no change
    assert s.last_caught_up_time_ms == 100


def test_out_of_sync_after_the_lag_bound_never_the_leader() -> None:
    states = {2: ReplicaState(), 3: ReplicaState()}
    states[2].update_fetch(10, 10, now_ms=0)
    states[3].update_fetch(10, 10, now_ms=900)
    assert out_of_sync_replicas([1, 2, 3], 1, states, 12, now_ms=1000,
                                replica_lag_time_max_ms=500) == [2]
    # a follower at the leader's LEO is never out of sync
    assert out_of_sync_replicas([1, 2], 1, states, 10, now_ms=5000,
                                replica_lag_time_max_ms=500) == []
    # a member the leader has no state for is out
    assert out_of_sync_replicas([1, 4], 1, states, 10, 0, 500) == [4]


def test_an_isr_member_fetching_below_the_hw_is_out_at_once() -> None:
    """It lost committed records (a scrubber cut, a lost tail): no lag grace period."""
    states = {2: ReplicaState(), 3: ReplicaState()}
    states[2].update_fetch(10, 10, now_ms=1000)
    states[3].update_fetch(10, 10, now_ms=1000)
    assert out_of_sync_replicas([1, 2, 3], 1, states, 10, now_ms=1001,
                                replica_lag_time_max_ms=30_000, high_watermark=10) == []
    states[3].update_fetch(4, 10, now_ms=1001)  # it cut its log back to offset 4
    assert out_of_sync_replicas([1, 2, 3], 1, states, 10, now_ms=1002,
                                replica_lag_time_max_ms=30_000, high_watermark=10) == [3]
    # a new leader epoch knows no LEO yet: never out for that
    states[3].reset(now_ms=1002, in_sync=True)
    assert out_of_sync_replicas([1, 3], 1, states, 10, now_ms=1003,
                                replica_lag_time_max_ms=30_000, high_watermark=10) == []


def test_can_join_needs_a_fetch_in_this_epoch_past_hw_and_epoch_start() -> None:
    s = ReplicaState()
    assert s.log_end_offset == UNKNOWN_OFFSET
    assert not can_join_isr(s, 0, 0)
    s.update_fetch(8, 10, now_ms=0)
    assert can_join_isr(s, 8, 5)
    assert not can_join_isr(s, 9, 5)
    assert not can_join_isr(s, 5, 9)


def proposal(isr: tuple[int, ...], pe: int = 3) -> AlterPartitionProposal:
    return AlterPartitionProposal("t", 0, 1, 7, pe, isr)


def test_one_pending_proposal_and_maximal_isr() -> None:
    st = IsrState([1, 2])
    p = st.propose(proposal((1, 2, 3)))
    assert p is not None and st.maximal_isr == (1, 2, 3) and st.isr == (1, 2)
    assert st.propose(proposal((1,))) is None          # blocked by the pending one
    assert st.on_response(p, ErrorCode.NONE, [1, 2, 3])
    assert st.isr == (1, 2, 3) and st.pending is None


def test_pending_shrink_keeps_the_larger_isr_for_the_hw() -> None:
    st = IsrState([1, 2, 3])
    st.propose(proposal((1, 2)))
    assert st.maximal_isr == (1, 2, 3)


def test_no_op_proposal_is_not_made() -> None:
    assert IsrState([1, 2]).propose(proposal((2, 1))) is None


@pytest.mark.parametrize("error", [
    ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.STALE_BROKER_EPOCH, ErrorCode.UNKNOWN_SERVER_ERROR])
def test_a_rejection_blocks_until_metadata_keeping_the_maximal_isr(error: ErrorCode) -> None:
    """An earlier copy of the proposal may have been committed with its answer lost (no_loss
    seed 1099 of the simulation: a retried expansion answered NOT_LEADER_OR_FOLLOWER):
    the added member stays in the maximal ISR, so the HW waits for it, until metadata."""
    st = IsrState([1, 2])
    p = st.propose(proposal((1, 2, 3)))
    assert p is not None
    assert not st.on_response(p, error, None)
    assert st.blocked and st.pending == p and st.maximal_isr == (1, 2, 3)
    st.reset([1])
    assert not st.blocked and st.pending is None and st.isr == (1,)


@pytest.mark.parametrize("error", sorted(NOT_APPLIED_ERRORS))
def test_errors_that_prove_nothing_was_applied_drop_the_proposal(error: ErrorCode) -> None:
    st = IsrState([1, 2])
    p = st.propose(proposal((1, 2, 3)))
    assert p is not None
    assert not st.on_response(p, error, None)
    assert st.pending is None and not st.blocked and st.maximal_isr == (1, 2)


def test_answer_to_another_proposal_is_ignored() -> None:
    st = IsrState([1, 2])
    st.propose(proposal((1,)))
    assert not st.on_response(proposal((1,), pe=2), ErrorCode.NONE, [1])
    assert st.isr == (1, 2)
