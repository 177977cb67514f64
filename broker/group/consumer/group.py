"""A KIP-848 consumer group in the coordinator's memory and its heartbeat as a pure
transition (Kafka's ``ConsumerGroup`` and the heartbeat path of ``GroupMetadataManager``).

:class:`ConsumerGroup` holds the members (:class:`~broker.group.consumer.member.
ConsumerGroupMember`), the **group epoch** (bumped when a member joins, leaves or is
fenced, changes its subscription or resolves it to other topics (new topics, changed
ACLs), or when the subscribed topics' partitions change), the **target assignment** and
its epoch (recomputed by the assignor when the group epoch is ahead of it), the owner
of every partition a member holds (assigned or being revoked: no partition has two
owners, see :mod:`~broker.group.consumer.member`), and the subscribed topics' partition
counts and each member's topics the target was computed on.

State (Kafka's names): ``Empty`` (no members), ``Assigning`` (the target is older than
the group epoch), ``Reconciling`` (a member is not at the target epoch or not stable),
``Stable``.

:meth:`ConsumerGroup.heartbeat` applies one ConsumerGroupHeartbeat of a member already
checked by the caller (joining: epoch 0; else the member exists and its epoch was
accepted by :meth:`ConsumerGroup.epoch_error`): updates the subscription, bumps the
group epoch if needed, recomputes the target, reconciles the member and returns whether
its assignment must be sent.  Subscriptions are topic names and/or one regular
expression (v1), resolved here against the cluster's topics (internal topics never
match; a full match, as Kafka's RE2/J ``matches()``); see :func:`regex_error` for what
Python's ``re`` accepts that RE2 does not.

Authorization (Kafka 4's ``TopicRegexResolver``): a regular expression resolves only
to topics the member's principal may Describe (:func:`regex_topics`), so a member never
learns the name of a topic it may not see through its assignment.  Every heartbeat
brings the member's :data:`~broker.group.consumer.member.TopicVisibility` (the ACL
check of its principal; the handler checks named topics itself and refuses the
heartbeat with TOPIC_AUTHORIZATION_FAILED), kept on the member in memory and used
whenever the group's subscriptions are resolved, so ACL changes apply at the group's
next heartbeat.  It is not written to the log: after a coordinator load, until its next
heartbeat, a member's regular expression resolves only to the topics it already holds
or is targeted (names it was shown before), never to a new one.  We chose that over
"nothing" (which would revoke and reassign every regex member's partitions after each
coordinator move) and over "everything" (the hole this closes).

Costs: a heartbeat O(the topic names the group's members subscribe to + the member's
partitions), plus O(cluster topics) per member subscribed by regular expression (and
one ACL check, O(the principal's rules), per matching topic), plus the assignor when the
target is recomputed (once per group epoch).  Not thread-safe: owned by the coordinator.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from broker.group.consumer.assignors import (
    ASSIGNORS,
    UNIFORM,
    Assignment,
    GroupAssignment,
    TopicId,
)
from broker.group.consumer.member import (
    ConsumerGroupMember,
    MemberAssignment,
    ReconciliationState,
    TopicVisibility,
    every_topic,
    reconcile,
)
from clients.protocol.message_types import ConsumerGroupHeartbeatRequest
from clients.protocol.topics import INTERNAL_TOPICS

TopicsView = Mapping[str, tuple[TopicId, int]]  # the cluster's topics: name -> (id, partitions)

MAX_REGEX_LENGTH = 1_000
# constructs of Python's re that RE2 (Kafka's RE2/J) rejects: back-references and
# look-around (both can take exponential time), atomic groups, conditionals
_NOT_RE2 = re.compile(r"\\[1-9]|\(\?P=|\(\?<?[=!]|\(\?>|\(\?\(|[*+?}]\+")

STATIC_LEFT_EPOCH = -2  # a static member's epoch while it is away (it keeps its partitions)
EMPTY = "Empty"
ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
STABLE = "Stable"


def regex_error(pattern: str) -> str | None:
    """Why ``pattern`` is refused (None: accepted).  Python's ``re`` is a backtracking
    engine; RE2/J is linear-time and has no back-references, look-around, atomic groups,
    possessive quantifiers or conditionals: those are refused here as Kafka refuses them
    (INVALID_REGULAR_EXPRESSION), and the length is bounded.  A nested quantifier such
    as ``(a+)+`` is still accepted and can backtrack: its cost is bounded only by topic
    names being at most 249 characters."""
    if len(pattern) > MAX_REGEX_LENGTH:
        return f"the regular expression is longer than {MAX_REGEX_LENGTH} characters"
    if _NOT_RE2.search(pattern):
        return "back-references, look-around, atomic groups, possessive quantifiers and " \
               "conditionals are not supported (RE2 syntax)"
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"invalid regular expression: {exc}"
    return None


def regex_topics(pattern: str, topics: TopicsView,
                 may_describe: TopicVisibility) -> dict[TopicId, int]:
    """The topics ``pattern`` (accepted by :func:`regex_error`) fully matches that the
    principal may Describe, internal topics never: id -> partition count.  Pure."""
    compiled = re.compile(pattern)
    return dict(info for name, info in topics.items()
                if name not in INTERNAL_TOPICS and compiled.fullmatch(name)
                and may_describe(name))


class ConsumerGroup:
    """One consumer group; see the module docstring."""

    def __init__(self, group_id: str, partition: int, max_size: int) -> None:
        self.group_id = group_id
        self.partition = partition  # its offsets-topic partition
        self.max_size = max_size
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.assignor_name = UNIFORM
        self.members: dict[str, ConsumerGroupMember] = {}
        self.target: GroupAssignment = {}
        self.owners: dict[tuple[TopicId, int], str] = {}  # partition -> its member
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.subscribed: dict[TopicId, int] = {}  # what the target was computed on
        self.subscriptions: dict[str, set[TopicId]] = {}  # and each member's part of it

    def __repr__(self) -> str:
        return (f"ConsumerGroup({self.group_id!r} {self.state} epoch={self.group_epoch} "
                f"target={self.assignment_epoch} members={list(self.members)})")

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.assignment_epoch < self.group_epoch:
            return ASSIGNING
        if any(m.member_epoch != self.assignment_epoch
               or m.assignment.state != ReconciliationState.STABLE for m in self.members.values()):
            return RECONCILING
        return STABLE

    # -- checks ------------------------------------------------------------------------

    def epoch_error(self, member: ConsumerGroupMember, epoch: int,
                    owned: Mapping[TopicId, frozenset[int]] | None) -> str | None:
        """Why a heartbeat of ``member`` at ``epoch`` is fenced (None: accepted).  An
        epoch behind the member's is accepted only if it is the previous one and the
        partitions it owns are all still assigned (the answer before was lost)."""
        current = member.assignment
        if epoch > current.member_epoch:
            return f"epoch {epoch} is ahead of the member's {current.member_epoch}"
        if epoch < current.member_epoch and (
                epoch != current.previous_member_epoch or owned is None or any(
                    not ps <= current.assigned.get(t, frozenset()) for t, ps in owned.items())):
            return f"epoch {epoch} is behind the member's {current.member_epoch}"
        return None

    # -- subscriptions -----------------------------------------------------------------

    def member_topics(self, member: ConsumerGroupMember,
                      topics: TopicsView) -> dict[TopicId, int]:
        """The existing topics ``member`` subscribes to: id -> partition count (its
        regular expression resolved with its ``may_describe``; not known since a load:
        only the topics it holds or is targeted, see the module docstring)."""
        found = dict(topics[n] for n in member.subscribed_topic_names if n in topics)
        if member.subscribed_topic_regex is not None:
            found.update(regex_topics(member.subscribed_topic_regex, topics,
                                      member.may_describe or self._shown(member, topics)))
        return found

    def _shown(self, member: ConsumerGroupMember, topics: TopicsView) -> TopicVisibility:
        """The topics ``member`` holds or is targeted: what it may see by regular
        expression until a heartbeat brings its principal's ACL check again."""
        held = {t for parts in (member.assignment.assigned, member.assignment.revoking,
                                self.target.get(member.member_id, {}))
                for t, ps in parts.items() if ps}
        return lambda name: topics[name][0] in held

    # -- the heartbeat -----------------------------------------------------------------

    def heartbeat(self, member: ConsumerGroupMember, body: ConsumerGroupHeartbeatRequest,
                  topics: TopicsView, may_describe: TopicVisibility = every_topic) -> bool:
        """Apply an accepted heartbeat of ``member`` (new: not in the group yet) whose
        principal may Describe the topics ``may_describe`` says; returns whether its
        assignment goes into the answer."""
        changed = member.member_id not in self.members
        self.members[member.member_id] = member
        member.may_describe = may_describe
        if body["rebalance_timeout_ms"] > 0:
            member.rebalance_timeout_ms = body["rebalance_timeout_ms"]
        for key, value in (("instance_id", body["instance_id"]),
                           ("rack_id", body["rack_id"]),
                           ("server_assignor", body["server_assignor"])):
            if value is not None and getattr(member, key) != value:
                setattr(member, key, value)
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        names = body["subscribed_topic_names"]
        if names is not None and tuple(sorted(set(names))) != member.subscribed_topic_names:
            member.subscribed_topic_names = tuple(sorted(set(names)))
            changed = True
        regex = body.get("subscribed_topic_regex")
        if regex is not None and (regex or None) != member.subscribed_topic_regex:
            member.subscribed_topic_regex = regex or None  # "": no regular expression
            changed = True
        subscribed: dict[TopicId, int] = {}
        subscriptions: dict[str, set[TopicId]] = {}
        for m in self.members.values():
            found = self.member_topics(m, topics)
            subscriptions[m.member_id] = set(found)
            subscribed.update(found)
        # a member may resolve differently with the union unchanged (its ACLs changed)
        moved = any(self.subscriptions.get(m, s) != s for m, s in subscriptions.items())
        if changed or moved or subscribed != self.subscribed:
            self.group_epoch += 1
        if self.assignment_epoch < self.group_epoch:
            self._compute_target(subscriptions, subscribed, member.server_assignor)
        owned = owned_partitions(body)
        before = member.assignment
        after = reconcile(before, self.assignment_epoch,
                          self.target.get(member.member_id, {}),
                          lambda t, p: self.owners.get((t, p), member.member_id)
                          != member.member_id, owned)
        self._set_assignment(member, after)
        if after != before or body["member_epoch"] == 0:
            return True
        return owned is not None and owned != {t: ps for t, ps in after.assigned.items() if ps}

    def _compute_target(self, subscriptions: dict[str, set[TopicId]],
                        subscribed: dict[TopicId, int], preferred: str | None) -> None:
        if preferred in ASSIGNORS:
            self.assignor_name = preferred
        self.target = ASSIGNORS[self.assignor_name](subscriptions, subscribed, self.target)
        self.subscribed = subscribed
        self.subscriptions = subscriptions
        self.assignment_epoch = self.group_epoch

    def _set_assignment(self, member: ConsumerGroupMember, after: MemberAssignment) -> None:
        for tp in member.assignment.partitions():
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]
        member.assignment = after
        for tp in after.partitions():
            self.owners[tp] = member.member_id

    def static_leave(self, member: ConsumerGroupMember) -> None:
        """A static member leaves for now (epoch -2): it keeps its partitions (nobody
        else gets them) until it is back or its session times out."""
        current = member.assignment
        member.assignment = MemberAssignment(STATIC_LEFT_EPOCH, current.member_epoch,
                                             current.state, current.assigned,
                                             current.revoking)

    def replace_static(self, old: ConsumerGroupMember, new: ConsumerGroupMember) -> None:
        """``new`` (a new member id) takes the place of the static member ``old`` that
        left with epoch -2: its assignment, epoch and target; the group epoch stays."""
        del self.members[old.member_id]
        new.assignment = MemberAssignment(old.assignment.previous_member_epoch,
                                          old.assignment.previous_member_epoch,
                                          old.assignment.state, old.assignment.assigned,
                                          old.assignment.revoking)
        new.instance_id = old.instance_id
        new.subscribed_topic_names = old.subscribed_topic_names
        new.subscribed_topic_regex = old.subscribed_topic_regex
        new.server_assignor = old.server_assignor
        new.rack_id = old.rack_id
        self.members[new.member_id] = new
        if old.member_id in self.target:
            self.target[new.member_id] = self.target.pop(old.member_id)
        for tp in new.assignment.partitions():
            self.owners[tp] = new.member_id
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id

    def rename(self, old: ConsumerGroupMember, member_id: str) -> ConsumerGroupMember:
        """A static member speaking the classic protocol rejoined under a new member id:
        the same member (epoch, assignment, target, partitions) under ``member_id``; the
        group epoch stays (no rebalance)."""
        del self.members[old.member_id]
        member = self.members[member_id] = dataclasses.replace(old, member_id=member_id)
        if old.member_id in self.target:
            self.target[member_id] = self.target.pop(old.member_id)
        for tp in member.assignment.partitions():
            self.owners[tp] = member_id
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member_id
        return member

    def remove(self, member_id: str) -> ConsumerGroupMember | None:
        """A member left or was fenced: its partitions are released and the group epoch
        moves on (the target is recomputed at the next heartbeat)."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.instance_id is not None \
                and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        for tp in member.assignment.partitions():
            if self.owners.get(tp) == member_id:
                del self.owners[tp]
        self.target.pop(member_id, None)
        self.subscriptions.pop(member_id, None)
        self.group_epoch += 1
        return member


def owned_partitions(body: ConsumerGroupHeartbeatRequest) -> dict[TopicId, frozenset[int]] | None:
    """The partitions the heartbeat says the member owns (None: not said)."""
    topics = body["topic_partitions"]
    if topics is None:
        return None
    owned: dict[TopicId, frozenset[int]] = {}
    for t in topics:
        owned[t["topic_id"]] = owned.get(t["topic_id"], frozenset()) | frozenset(t["partitions"])
    return {t: ps for t, ps in owned.items() if ps}


def assignment_topics(assignment: Assignment) -> list[tuple[TopicId, list[int]]]:
    """An assignment as the wire lists it: (topic id, sorted partitions), by topic id."""
    return [(t, sorted(ps)) for t, ps in sorted(assignment.items()) if ps]
