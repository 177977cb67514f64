"""The consumer's per-partition position state machine (clients.consumer.subscription_state):
every legal transition lands where the table says, every other pair is refused, and the
SubscriptionState queries follow the states."""

from __future__ import annotations

import pytest

from clients.consumer.subscription_state import (
    TRANSITIONS,
    IllegalPositionTransitionError,
    PartitionState,
    PositionEvent,
    PositionState,
    SubscriptionState,
)
from clients.protocol.topics import TopicPartition

S, E = PositionState, PositionEvent
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_the_table_is_kafkas_fetch_states() -> None:
    expected = {
        (S.INITIALIZING, E.COMMITTED_FOUND): S.FETCHING,
        (S.INITIALIZING, E.NO_COMMITTED): S.AWAIT_RESET,
        (S.AWAIT_RESET, E.OFFSET_RESOLVED): S.FETCHING,
        **{(s, E.SEEK): S.FETCHING for s in S},
        **{(s, E.RESET_REQUESTED): S.AWAIT_RESET for s in S},
    }
    assert expected == TRANSITIONS


@pytest.mark.parametrize("start", list(S))
def test_seek_from_any_state_fetches_from_the_offset(start: PositionState) -> None:
    state: PartitionState[object] = PartitionState(fetch_state=start, reset=-2, fetched="data")
    state.seek(7)
    assert (state.fetch_state, state.position, state.reset, state.fetched) == (
        S.FETCHING, 7, None, None)


@pytest.mark.parametrize("start", list(S))
def test_reset_from_any_state_awaits_a_list_offsets(start: PositionState) -> None:
    state: PartitionState[object] = PartitionState(fetch_state=start, position=5, fetched="x")
    state.request_reset(-1)
    assert (state.fetch_state, state.position, state.reset, state.fetched) == (
        S.AWAIT_RESET, None, -1, None)


def test_committed_offset_found_or_not() -> None:
    found: PartitionState[object] = PartitionState(fetch_state=S.INITIALIZING)
    found.committed(42)
    assert (found.fetch_state, found.position) == (S.FETCHING, 42)
    none: PartitionState[object] = PartitionState(fetch_state=S.INITIALIZING)
    none.committed(None)
    assert (none.fetch_state, none.position, none.reset) == (S.AWAIT_RESET, None, None)


def test_offset_resolved_after_a_reset() -> None:
    state: PartitionState[object] = PartitionState(fetch_state=S.AWAIT_RESET, reset=-2)
    state.offset_resolved(3)
    assert (state.fetch_state, state.position, state.reset) == (S.FETCHING, 3, None)


@pytest.mark.parametrize(("start", "event"), [
    (s, e) for s in S for e in E if (s, e) not in TRANSITIONS])  # fmt: skip
def test_every_pair_not_in_the_table_is_refused(start: PositionState, event: PositionEvent) -> None:
    state: PartitionState[object] = PartitionState(fetch_state=start, position=1, fetched="x")
    call = {E.COMMITTED_FOUND: lambda: state.committed(9),
            E.NO_COMMITTED: lambda: state.committed(None),
            E.OFFSET_RESOLVED: lambda: state.offset_resolved(9)}[event]  # fmt: skip
    with pytest.raises(IllegalPositionTransitionError):
        call()
    assert (state.fetch_state, state.position, state.fetched) == (start, 1, "x")  # untouched


def test_assignment_keeps_states_and_starts_new_ones_per_mode() -> None:
    subs: SubscriptionState[object] = SubscriptionState()
    subs.assign([T0], from_committed=False)
    assert subs.awaiting(S.AWAIT_RESET) == [T0]
    subs.state(T0).seek(10)
    subs.assign([T0, T1], from_committed=True)
    assert (subs.state(T0).position, subs.awaiting(S.INITIALIZING)) == (10, [T1])
    assert subs.positions() == {T0: 10}
    assert subs.assignment() == {T0, T1}
    with pytest.raises(ValueError, match="not assigned"):
        subs.state(TopicPartition("u", 0))


def test_pause_is_orthogonal_to_the_position() -> None:
    subs: SubscriptionState[object] = SubscriptionState()
    subs.assign([T0, T1], from_committed=False)
    subs.state(T0).seek(4)
    subs.pause([T0])
    assert subs.paused() == {T0}
    subs.state(T0).request_reset(-2)  # a paused partition can still be reset / sought
    assert (subs.state(T0).fetch_state, subs.state(T0).paused) == (S.AWAIT_RESET, True)
    subs.resume([T0, T1])
    assert subs.paused() == set()
    subs.clear()
    assert subs.assignment() == set()


def test_committed_offsets_apply_only_to_partitions_still_initializing() -> None:
    t2 = TopicPartition("t", 2)
    subs: SubscriptionState[object] = SubscriptionState()
    subs.assign([T0, T1, t2], from_committed=True)
    subs.state(T1).seek(3)  # sought while the committed offsets were being fetched
    subs.apply_committed({T0: 8, T1: 9, t2: None, TopicPartition("u", 0): 1})
    assert [(s.fetch_state, s.position) for s in subs.states.values()] == [
        (S.FETCHING, 8), (S.FETCHING, 3), (S.AWAIT_RESET, None)]
