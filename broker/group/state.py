"""The classic consumer-group state machine, as a transition table (data, not code).

States (Kafka's names, which DescribeGroups and ListGroups report):

| state                 | meaning                                                        |
|-----------------------|----------------------------------------------------------------|
| Empty                 | no members; committed offsets may exist (simple consumers)     |
| PreparingRebalance    | the join phase: members (re)join; a delayed join is parked     |
| CompletingRebalance   | joined; waiting for the leader's SyncGroup with assignments    |
| Stable                | assignments handed out; heartbeats keep members alive          |
| Dead                  | unloaded (coordinator moved) or removed: serve nothing          |

Events and the state each leads to (:data:`TRANSITIONS`; a pair not in the table is an
:class:`IllegalGroupTransitionError`):

| from                  | event               | to                    |
|-----------------------|---------------------|-----------------------|
| Empty                 | REBALANCE           | PreparingRebalance    |
| Stable                | REBALANCE           | PreparingRebalance    |
| CompletingRebalance   | REBALANCE           | PreparingRebalance    |
| PreparingRebalance    | JOIN_COMPLETE       | CompletingRebalance   |
| PreparingRebalance    | ALL_MEMBERS_GONE    | Empty                 |
| CompletingRebalance   | ASSIGNMENT_SYNCED   | Stable                |
| Empty, Preparing..., Completing..., Stable | UNLOAD | Dead              |
| Empty, Preparing..., Completing..., Stable | CONVERTED | Empty          |

REBALANCE covers every reason to start a join phase (a member joined, left, died or
changed its protocols; the leader rejoined).  A REBALANCE while already preparing is
not a transition: the caller just waits for the parked join.  CONVERTED: the members
moved into a KIP-848 consumer group of the same id (:mod:`broker.group.consumer.
conversion`); the classic group stays, Empty, holding the committed offsets.  A loaded
group starts in Stable (members known) or Empty; that is construction, not a
transition.

Costs: :func:`next_state` is one dict lookup, O(1).  Pure and immutable: safe to use
from any thread or process.
"""

from __future__ import annotations

from enum import Enum

from clients.protocol.errors import ErrorCode, MiniKafkaError


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupEvent(Enum):
    REBALANCE = "rebalance"  # a member joined, left, died or changed its protocols
    JOIN_COMPLETE = "join_complete"  # the join phase ended with at least one member
    ALL_MEMBERS_GONE = "all_members_gone"  # the join phase ended with no member
    ASSIGNMENT_SYNCED = "assignment_synced"  # the leader's assignment is stored
    UNLOAD = "unload"  # the coordinator stops serving the group
    CONVERTED = "converted"  # the members moved into a KIP-848 consumer group


_S = GroupState
_E = GroupEvent

TRANSITIONS: dict[tuple[GroupState, GroupEvent], GroupState] = {
    (_S.EMPTY, _E.REBALANCE): _S.PREPARING_REBALANCE,
    (_S.STABLE, _E.REBALANCE): _S.PREPARING_REBALANCE,
    (_S.COMPLETING_REBALANCE, _E.REBALANCE): _S.PREPARING_REBALANCE,
    (_S.PREPARING_REBALANCE, _E.JOIN_COMPLETE): _S.COMPLETING_REBALANCE,
    (_S.PREPARING_REBALANCE, _E.ALL_MEMBERS_GONE): _S.EMPTY,
    (_S.COMPLETING_REBALANCE, _E.ASSIGNMENT_SYNCED): _S.STABLE,
    (_S.EMPTY, _E.UNLOAD): _S.DEAD,
    (_S.PREPARING_REBALANCE, _E.UNLOAD): _S.DEAD,
    (_S.COMPLETING_REBALANCE, _E.UNLOAD): _S.DEAD,
    (_S.STABLE, _E.UNLOAD): _S.DEAD,
    (_S.EMPTY, _E.CONVERTED): _S.EMPTY,
    (_S.PREPARING_REBALANCE, _E.CONVERTED): _S.EMPTY,
    (_S.COMPLETING_REBALANCE, _E.CONVERTED): _S.EMPTY,
    (_S.STABLE, _E.CONVERTED): _S.EMPTY,
}
"""(state, event) -> next state; every other pair is illegal."""

STATE_BY_NAME: dict[str, GroupState] = {s.value: s for s in GroupState}


class IllegalGroupTransitionError(MiniKafkaError):
    """An event that the table does not allow in the group's current state."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, group_id: str, state: GroupState, event: GroupEvent) -> None:
        super().__init__(f"group {group_id!r}: event {event.value} is illegal in state "
                         f"{state.value}")
        self.group_id = group_id
        self.state = state
        self.event = event


def can_apply(state: GroupState, event: GroupEvent) -> bool:
    return (state, event) in TRANSITIONS


def next_state(group_id: str, state: GroupState, event: GroupEvent) -> GroupState:
    """The state ``event`` leads to from ``state``; raises if the table forbids it."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalGroupTransitionError(group_id, state, event) from None
