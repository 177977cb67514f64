"""One member of a KIP-848 consumer group and its reconciliation (Kafka's
``ConsumerGroupMember`` and ``CurrentAssignmentBuilder``).

A member holds what its heartbeats said (ids, rack, client, rebalance timeout,
subscription: topic names and/or a regular expression, preferred server assignor; for a
member that speaks the classic protocol, :class:`ClassicMemberMetadata`), which topics
its principal may Describe (:data:`TopicVisibility`, from its last heartbeat: in memory
only, see :meth:`~broker.group.consumer.group.ConsumerGroup.member_topics`) and
its assignment state (:class:`MemberAssignment`, immutable): its epoch and the one
before, its reconciliation state, the partitions assigned to it and those it must
revoke first.

Reconciliation (:func:`reconcile`, pure): given the group's target assignment for the
member and its epoch, and who owns what, the next state is

- **unrevoked_partitions** while the member still owns partitions not in its target: it
  keeps the epoch it has, its assignment shrinks to what stays (assigned ∩ target) and
  the rest is pending revocation; it leaves this state once a heartbeat's owned
  partitions no longer hold any of them (a heartbeat without owned partitions changes
  nothing);
- otherwise it moves to the target epoch and takes every target partition no other
  member owns (assigned or pending revocation); if some are still owned elsewhere it is
  **unreleased_partitions** (it gets them at a later heartbeat, once they are released),
  else **stable**.

So a partition is never assigned to two members at once: a member gets a partition
only after the previous owner acknowledged its revocation (or left / was fenced).

Costs: :func:`reconcile` O(partitions of the member's current and target assignment).
Pure data: thread-safe; the :class:`ConsumerGroupMember` itself is owned by its group.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from broker.group.consumer.assignors import Assignment, TopicId

# whether a member's principal may Describe a topic (by name): the ACL check its regular
# expression is resolved with; kept past the request, so it holds no request state
TopicVisibility = Callable[[str], bool]


def every_topic(name: str) -> bool:
    """The :data:`TopicVisibility` of a broker without an authorizer."""
    return True


class ReconciliationState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True)
class MemberAssignment:
    """A member's epoch and partitions (see the module docstring)."""

    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: ReconciliationState = ReconciliationState.STABLE
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)

    def partitions(self) -> set[tuple[TopicId, int]]:
        """Every partition the member owns: assigned or pending revocation."""
        return {(t, p) for parts in (self.assigned, self.revoking)
                for t, ps in parts.items() for p in ps}


def _owns_any(owned: Mapping[TopicId, frozenset[int]] | None, revoking: Assignment) -> bool:
    if owned is None:  # the heartbeat did not say: assume nothing was revoked yet
        return True
    return any(owned.get(t, frozenset()) & ps for t, ps in revoking.items())


def _next(current: MemberAssignment, target_epoch: int, target: Assignment,
          owned_elsewhere: Callable[[TopicId, int], bool]) -> MemberAssignment:
    kept: dict[TopicId, frozenset[int]] = {}
    revoke: dict[TopicId, frozenset[int]] = {}
    assignable: dict[TopicId, set[int]] = {}
    unreleased = False
    for topic in set(current.assigned) | set(target):
        have = current.assigned.get(topic, frozenset())
        want = target.get(topic, frozenset())
        if have & want:
            kept[topic] = have & want
        if have - want:
            revoke[topic] = have - want
        for p in want - have:
            if owned_elsewhere(topic, p):
                unreleased = True
            else:
                assignable.setdefault(topic, set()).add(p)
    if revoke:
        return MemberAssignment(current.member_epoch, current.previous_member_epoch,
                                ReconciliationState.UNREVOKED_PARTITIONS, kept, revoke)
    assigned = dict(kept)
    for topic, ps in assignable.items():
        assigned[topic] = assigned.get(topic, frozenset()) | ps
    state = ReconciliationState.UNRELEASED_PARTITIONS if unreleased else ReconciliationState.STABLE
    return MemberAssignment(target_epoch, current.member_epoch, state, assigned, {})


def reconcile(current: MemberAssignment, target_epoch: int, target: Assignment,
              owned_elsewhere: Callable[[TopicId, int], bool],
              owned: Mapping[TopicId, frozenset[int]] | None) -> MemberAssignment:
    """The member's next assignment state (see the module docstring).  ``target``: its
    part of the target assignment of epoch ``target_epoch``; ``owned_elsewhere(topic,
    partition)``: whether another member still owns it; ``owned``: the partitions the
    heartbeat says the member owns (None: not said)."""
    if current.state == ReconciliationState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, current.revoking):
            return current
        return _next(current, target_epoch, target, owned_elsewhere)
    if current.state == ReconciliationState.STABLE and current.member_epoch == target_epoch:
        return current
    return _next(current, target_epoch, target, owned_elsewhere)


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """What a member that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat)
    inside a consumer group said in its last JoinGroup (Kafka's ``ClassicMemberMetadata``):
    its session timeout and its protocols (name, ConsumerProtocolSubscription bytes), in
    its order of preference."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass
class ConsumerGroupMember:
    """One member: what its heartbeats said and its :class:`MemberAssignment`;
    ``classic``: set for a member that speaks the classic protocol (None: KIP-848's);
    ``may_describe``: the topics its principal may Describe, set by every heartbeat and
    never written to the log (None: not heard from since the group was loaded)."""

    member_id: str
    client_id: str = ""
    client_host: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assignment: MemberAssignment = field(default_factory=MemberAssignment)
    classic: ClassicMemberMetadata | None = None
    may_describe: TopicVisibility | None = field(default=None, compare=False, repr=False)

    @property
    def member_epoch(self) -> int:
        return self.assignment.member_epoch
