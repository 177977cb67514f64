"""The group state machine table: every legal transition, every illegal one rejected."""

from __future__ import annotations

import itertools

import pytest

from broker.group.state import (
    TRANSITIONS,
    GroupEvent,
    GroupState,
    IllegalGroupTransitionError,
    can_apply,
    next_state,
)

S, E = GroupState, GroupEvent

LEGAL = [
    (S.EMPTY, E.REBALANCE, S.PREPARING_REBALANCE),
    (S.STABLE, E.REBALANCE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, E.REBALANCE, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, E.JOIN_COMPLETE, S.COMPLETING_REBALANCE),
    (S.PREPARING_REBALANCE, E.ALL_MEMBERS_GONE, S.EMPTY),
    (S.COMPLETING_REBALANCE, E.ASSIGNMENT_SYNCED, S.STABLE),
    (S.EMPTY, E.UNLOAD, S.DEAD),
    (S.PREPARING_REBALANCE, E.UNLOAD, S.DEAD),
    (S.COMPLETING_REBALANCE, E.UNLOAD, S.DEAD),
    (S.STABLE, E.UNLOAD, S.DEAD),
    (S.EMPTY, E.CONVERTED, S.EMPTY),
    (S.PREPARING_REBALANCE, E.CONVERTED, S.EMPTY),
    (S.COMPLETING_REBALANCE, E.CONVERTED, S.EMPTY),
    (S.STABLE, E.CONVERTED, S.EMPTY),
]
LEGAL_PAIRS = {(s, e) for s, e, _ in LEGAL}
ILLEGAL = [(s, e) for s, e in itertools.product(GroupState, GroupEvent)
           if (s, e) not in LEGAL_PAIRS]


def test_the_table_is_exactly_the_documented_transitions() -> None:
    assert {(s, e): to for s, e, to in LEGAL} == TRANSITIONS
    assert len(ILLEGAL) == len(GroupState) * len(GroupEvent) - len(LEGAL)


@pytest.mark.parametrize(("state", "event", "target"), LEGAL,
                         ids=[f"{s.value}-{e.value}" for s, e, _ in LEGAL])
def test_legal_transition(state: GroupState, event: GroupEvent, target: GroupState) -> None:
    assert can_apply(state, event)
    assert next_state("g", state, event) is target


@pytest.mark.parametrize(("state", "event"), ILLEGAL,
                         ids=[f"{s.value}-{e.value}" for s, e in ILLEGAL])
def test_illegal_transition_is_rejected(state: GroupState, event: GroupEvent) -> None:
    assert not can_apply(state, event)
    with pytest.raises(IllegalGroupTransitionError) as info:
        next_state("orders", state, event)
    assert info.value.state is state and info.value.event is event
    assert "orders" in str(info.value) and state.value in str(info.value)


def test_dead_is_final_and_every_live_state_can_reach_dead() -> None:
    assert not any(can_apply(S.DEAD, e) for e in GroupEvent)
    for state in GroupState:
        if state is not S.DEAD:
            assert next_state("g", state, E.UNLOAD) is S.DEAD


def test_a_rebalance_while_preparing_is_not_a_transition() -> None:
    # a member joining during the join phase just waits for the parked join
    with pytest.raises(IllegalGroupTransitionError):
        next_state("g", S.PREPARING_REBALANCE, E.REBALANCE)
