"""The consumer's subscription state: the assigned partitions, each one's position as a
small state machine (transitions stated as data), its pause flag and its fetched data.

Position states of one partition (the state names of Kafka's FetchState; :data:`TRANSITIONS`; a pair
not in the table is an :class:`IllegalPositionTransitionError`):

| from          | event            | to            | caller                                   |
|---------------|------------------|---------------|------------------------------------------|
| INITIALIZING  | COMMITTED_FOUND  | FETCHING      | the group's committed offset arrived     |
| INITIALIZING  | NO_COMMITTED     | AWAIT_RESET   | nothing committed: ``auto_offset_reset`` |
| AWAIT_RESET   | OFFSET_RESOLVED  | FETCHING      | ListOffsets answered                     |
| any           | SEEK             | FETCHING      | ``seek(tp, offset)``                     |
| any           | RESET_REQUESTED  | AWAIT_RESET   | ``seek_to_*``, OFFSET_OUT_OF_RANGE       |

A partition starts in INITIALIZING when assigned with a group (it starts at the group's
committed offset), else in AWAIT_RESET with no explicit reset (``auto_offset_reset``
applies).  In FETCHING the position is known; the poll path advances it by assigning
``PartitionState.position`` directly (not a transition: the state stays FETCHING, and
the hot path pays no table lookup).  Every transition drops fetched data not yet handed
out.  Pausing is orthogonal to the position state: a paused partition is not fetched
and its fetched data is held back; positions do not move.

Costs: a transition is one dict lookup, O(1); :class:`SubscriptionState` queries are
O(assigned partitions).  Pure (no I/O, no clock); not thread-safe (one consumer thread).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition

__all__ = [
    "TRANSITIONS",
    "IllegalPositionTransitionError",
    "PartitionState",
    "PositionEvent",
    "PositionState",
    "SubscriptionState",
]


class PositionState(Enum):
    INITIALIZING = "initializing"  # waiting for the group's committed offset
    AWAIT_RESET = "await_reset"  # waiting for a ListOffsets (earliest / latest)
    FETCHING = "fetching"  # the position is known


class PositionEvent(Enum):
    COMMITTED_FOUND = "committed_found"
    NO_COMMITTED = "no_committed"
    OFFSET_RESOLVED = "offset_resolved"
    SEEK = "seek"
    RESET_REQUESTED = "reset_requested"


_S = PositionState
_E = PositionEvent

TRANSITIONS: dict[tuple[PositionState, PositionEvent], PositionState] = {
    (_S.INITIALIZING, _E.COMMITTED_FOUND): _S.FETCHING,
    (_S.INITIALIZING, _E.NO_COMMITTED): _S.AWAIT_RESET,
    (_S.AWAIT_RESET, _E.OFFSET_RESOLVED): _S.FETCHING,
    **{(s, _E.SEEK): _S.FETCHING for s in PositionState},
    **{(s, _E.RESET_REQUESTED): _S.AWAIT_RESET for s in PositionState},
}
"""(state, event) -> next state; every other pair is illegal."""


class IllegalPositionTransitionError(MiniKafkaError):
    """An event the table does not allow in the partition's current position state."""

    code = ErrorCode.INVALID_REQUEST


F = TypeVar("F")


@dataclass(eq=False)
class PartitionState(Generic[F]):
    """One assigned partition.  ``position`` is None unless FETCHING; ``reset`` is the
    pending reset timestamp (-2 earliest / -1 latest; None: ``auto_offset_reset``);
    ``fetched`` is data fetched and not yet handed out (owned by the fetcher)."""

    fetch_state: PositionState = PositionState.AWAIT_RESET
    position: int | None = None
    reset: int | None = None
    fetched: F | None = None
    high_watermark: int = -1
    paused: bool = False

    def _transition(self, event: PositionEvent) -> None:
        to = TRANSITIONS.get((self.fetch_state, event))
        if to is None:
            raise IllegalPositionTransitionError(
                f"{event.value} is not allowed in position state {self.fetch_state.value}")
        self.fetch_state = to
        self.fetched = None

    def seek(self, offset: int) -> None:
        self._transition(PositionEvent.SEEK)
        self.position, self.reset = offset, None

    def request_reset(self, timestamp: int) -> None:
        self._transition(PositionEvent.RESET_REQUESTED)
        self.position, self.reset = None, timestamp

    def offset_resolved(self, offset: int) -> None:
        self._transition(PositionEvent.OFFSET_RESOLVED)
        self.position, self.reset = offset, None

    def committed(self, offset: int | None) -> None:
        """The group's committed offset (None: nothing committed)."""
        if offset is None:
            self._transition(PositionEvent.NO_COMMITTED)
            self.position, self.reset = None, None
        else:
            self._transition(PositionEvent.COMMITTED_FOUND)
            self.position, self.reset = offset, None


@dataclass
class SubscriptionState(Generic[F]):
    """The assigned partitions and their :class:`PartitionState` (insertion ordered).
    ``states`` is read directly by the fetcher's loops."""

    states: dict[TopicPartition, PartitionState[F]] = field(default_factory=dict)

    def assign(self, partitions: Iterable[TopicPartition], *, from_committed: bool) -> None:
        """Replace the assignment; partitions kept keep their state.  New ones start in
        INITIALIZING (``from_committed``: a group's committed offset) or AWAIT_RESET."""
        start = PositionState.INITIALIZING if from_committed else PositionState.AWAIT_RESET
        self.states = {tp: self.states.get(tp) or PartitionState(fetch_state=start)
                       for tp in partitions}  # fmt: skip

    def clear(self) -> None:
        self.states = {}

    def state(self, tp: TopicPartition) -> PartitionState[F]:
        state = self.states.get(tp)
        if state is None:
            raise ValueError(f"{tp} is not assigned to this consumer")
        return state

    def assignment(self) -> set[TopicPartition]:
        return set(self.states)

    def positions(self) -> dict[TopicPartition, int]:
        return {tp: s.position for tp, s in self.states.items() if s.position is not None}

    def awaiting(self, fetch_state: PositionState) -> list[TopicPartition]:
        return [tp for tp, s in self.states.items() if s.fetch_state is fetch_state]

    def apply_committed(self, committed: Mapping[TopicPartition, int | None]) -> None:
        """The group's committed offsets (None: nothing committed) for the partitions
        still INITIALIZING; others (sought or reset meanwhile, or gone) ignore theirs."""
        for tp, offset in committed.items():
            state = self.states.get(tp)
            if state is not None and state.fetch_state is PositionState.INITIALIZING:
                state.committed(offset)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.state(tp).paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self.states.items() if s.paused}
