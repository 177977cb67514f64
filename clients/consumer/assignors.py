"""Partition assignors run by the group leader: range, round-robin, cooperative-sticky.

An assignor is a pure function of (partition count per topic, members with their
:class:`~clients.consumer.group_protocol.Subscription`) to partitions per member id.  Partitions
of topics missing from ``partitions_per_topic`` (unknown to the leader's metadata) are
not assigned.  Members are ordered as Kafka orders them: members with a
``group_instance_id`` (static) first by instance id, then the others by member id, so a
restarted static member gets the same partitions back.

- ``range`` (Kafka's RangeAssignor): per topic, the subscribed members in order; member
  ``i`` of ``m`` gets ``n // m`` consecutive partitions plus one if ``i < n % m``.
  Balanced per topic, not across topics.
- ``roundrobin`` (Kafka's RoundRobinAssignor): all partitions sorted by (topic,
  partition) dealt in turn to the members, skipping members not subscribed to the
  partition's topic.  With identical subscriptions the counts differ by at most one.
- ``cooperative-sticky``: keeps every member's owned partitions (the claim of the highest
  generation wins a conflict) as long as balance allows, gives unowned partitions to the
  least loaded eligible member, then moves partitions from a member with ``k`` to an
  eligible member with ``< k - 1`` until no such move exists (counts within one for
  identical subscriptions).  Its rebalance protocol is *cooperative*: a partition still
  owned by another member is withheld from its new owner in this generation; the owner
  sees it missing, revokes it and rejoins, and the next generation hands it over.  (A
  simplification of Kafka's algorithm: balance by moving from the most loaded member,
  not Kafka's full sticky optimisation for unequal subscriptions.)

Costs: range and round-robin O(P log P + M log M); sticky O(P log P) plus at most
O(P) balancing moves of O(M) each.  Thread safety: assignors hold no state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from clients.consumer.group_protocol import Subscription
from clients.protocol.errors import InvalidConfigError
from clients.protocol.topics import TopicPartition

__all__ = [
    "ASSIGNORS",
    "Assignor",
    "CooperativeStickyAssignor",
    "MemberSubscription",
    "RangeAssignor",
    "RoundRobinAssignor",
    "assignor_for",
]

Assignments = dict[str, list[TopicPartition]]


class MemberSubscription(NamedTuple):
    """One group member as an assignor sees it: its id, decoded subscription, instance id."""

    member_id: str
    subscription: Subscription
    group_instance_id: str | None = None

    @property
    def sort_key(self) -> tuple[int, str]:
        if self.group_instance_id is not None:
            return (0, self.group_instance_id)
        return (1, self.member_id)


class Assignor:
    """Base: ``name`` goes into JoinGroup's protocol list; ``rebalance_protocol`` is
    ``"eager"`` (revoke everything before rejoining) or ``"cooperative"``."""

    name = ""
    rebalance_protocol = "eager"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignments:
        raise NotImplementedError

    def user_data(self) -> bytes | None:
        """Bytes this member puts into its subscription (none for these assignors)."""
        return None


def _ordered(members: Sequence[MemberSubscription]) -> list[MemberSubscription]:
    ids = [m.member_id for m in members]
    if len(set(ids)) != len(ids):
        raise ValueError("member ids must be unique")
    return sorted(members, key=lambda m: m.sort_key)


def _empty(members: Sequence[MemberSubscription]) -> Assignments:
    return {m.member_id: [] for m in members}


class RangeAssignor(Assignor):
    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignments:
        out = _empty(members)
        ordered = _ordered(members)
        topics = sorted({t for m in members for t in m.subscription.topics})
        for topic in topics:
            count = partitions_per_topic.get(topic)
            if not count:
                continue
            consumers = [m.member_id for m in ordered if topic in m.subscription.topics]
            per, extra = divmod(count, len(consumers))
            for i, member_id in enumerate(consumers):
                start = i * per + min(i, extra)
                length = per + (1 if i < extra else 0)
                out[member_id].extend(TopicPartition(topic, p)
                                      for p in range(start, start + length))
        return out


class RoundRobinAssignor(Assignor):
    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignments:
        out = _empty(members)
        ordered = _ordered(members)
        if not ordered:
            return out
        topics = sorted({t for m in members for t in m.subscription.topics})
        i = 0
        for topic in topics:
            for p in range(partitions_per_topic.get(topic, 0)):
                while topic not in ordered[i % len(ordered)].subscription.topics:
                    i += 1
                out[ordered[i % len(ordered)].member_id].append(TopicPartition(topic, p))
                i += 1
        return out


class CooperativeStickyAssignor(Assignor):
    name = "cooperative-sticky"
    rebalance_protocol = "cooperative"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignments:
        ordered = _ordered(members)
        rank = {m.member_id: i for i, m in enumerate(ordered)}
        eligible = {m.member_id: set(m.subscription.topics) for m in ordered}
        valid = {
            TopicPartition(t, p)
            for t in sorted({t for m in members for t in m.subscription.topics})
            for p in range(partitions_per_topic.get(t, 0))
        }
        owner = self._owners(ordered, valid, eligible)
        current: dict[str, set[TopicPartition]] = {m.member_id: set() for m in ordered}
        for tp, member_id in owner.items():
            current[member_id].add(tp)

        def least_loaded(tp: TopicPartition, below: int | None = None) -> str | None:
            fits = [m for m in current if tp.topic in eligible[m]
                    and (below is None or len(current[m]) < below)]  # fmt: skip
            return min(fits, key=lambda m: (len(current[m]), rank[m]), default=None)

        for tp in sorted(valid - owner.keys()):
            target = least_loaded(tp)
            if target is not None:
                current[target].add(tp)
        moved = True
        while moved:  # each move lowers the sum of squared counts: terminates
            moved = False
            for src in sorted(current, key=lambda m: (-len(current[m]), rank[m])):
                for tp in sorted(current[src], reverse=True):
                    dst = least_loaded(tp, below=len(current[src]) - 1)
                    if dst is not None:
                        current[src].remove(tp)
                        current[dst].add(tp)
                        moved = True
                        break
                if moved:
                    break
        claimed: dict[TopicPartition, set[str]] = {}
        for m in ordered:
            for tp in m.subscription.owned_partitions:
                claimed.setdefault(tp, set()).add(m.member_id)
        return {  # cooperative: withhold what another member still owns
            m: sorted(tp for tp in tps if not (claimed.get(tp, set()) - {m}))
            for m, tps in current.items()
        }

    @staticmethod
    def _owners(
        ordered: list[MemberSubscription], valid: set[TopicPartition], eligible: dict[str, set[str]]
    ) -> dict[TopicPartition, str]:
        """Previous owner per partition still valid: the highest generation wins."""
        owner: dict[TopicPartition, tuple[int, str]] = {}
        for m in ordered:
            generation = m.subscription.generation_id
            for tp in m.subscription.owned_partitions:
                if tp not in valid or tp.topic not in eligible[m.member_id]:
                    continue
                if tp not in owner or generation > owner[tp][0]:
                    owner[tp] = (generation, m.member_id)
        return {tp: member_id for tp, (_, member_id) in owner.items()}


ASSIGNORS: dict[str, type[Assignor]] = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor)
}


def assignor_for(name: str) -> Assignor:
    """The assignor named ``name`` (InvalidConfigError naming the known ones)."""
    cls = ASSIGNORS.get(name)
    if cls is None:
        raise InvalidConfigError(
            f"unknown partition assignment strategy {name!r}; known: {sorted(ASSIGNORS)}"
        )
    return cls()
