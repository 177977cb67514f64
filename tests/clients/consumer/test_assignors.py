from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.consumer.assignors import (
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    assignor_for,
)
from clients.consumer.group_protocol import Subscription
from clients.protocol.errors import InvalidConfigError
from clients.protocol.topics import TopicPartition

TOPICS = ["a", "b", "c"]
counts = st.fixed_dictionaries({t: st.integers(0, 12) for t in TOPICS})
member_ids = st.lists(st.text("mnxyz", min_size=1, max_size=4), min_size=1, max_size=7,
                      unique=True)
ALL = [RangeAssignor(), RoundRobinAssignor(), CooperativeStickyAssignor()]


def members_with(ids: list[str], subs: list[list[str]]) -> list[MemberSubscription]:
    return [MemberSubscription(m, Subscription(tuple(s))) for m, s in zip(ids, subs, strict=True)]


def expected(partitions: dict[str, int], members: list[MemberSubscription]) -> set[TopicPartition]:
    wanted = {t for m in members for t in m.subscription.topics}
    return {TopicPartition(t, p) for t in wanted for p in range(partitions.get(t, 0))}


def check_exactly_once(result: dict[str, list[TopicPartition]], members: list[MemberSubscription],
                       partitions: dict[str, int]) -> None:
    assert set(result) == {m.member_id for m in members}
    flat = [tp for tps in result.values() for tp in tps]
    assert len(flat) == len(set(flat)), "a partition was assigned twice"
    assert set(flat) == expected(partitions, members)
    subs = {m.member_id: m.subscription.topics for m in members}
    for member_id, tps in result.items():
        assert all(tp.topic in subs[member_id] for tp in tps)


@settings(max_examples=150, deadline=None)
@given(counts, member_ids, st.data())
def test_every_partition_assigned_exactly_once(partitions: dict[str, int], ids: list[str],
                                               data: st.DataObject) -> None:
    subs = [data.draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True)) for _ in ids]
    members = members_with(ids, subs)
    for assignor in ALL:
        result = assignor.assign(partitions, members)
        check_exactly_once(result, members, partitions)
        # deterministic, whatever order the members arrive in
        assert assignor.assign(partitions, list(reversed(members))) == result


@settings(max_examples=150, deadline=None)
@given(counts, member_ids)
def test_identical_subscriptions_balance_within_one(partitions: dict[str, int],
                                                    ids: list[str]) -> None:
    members = members_with(ids, [TOPICS] * len(ids))
    for assignor in (RoundRobinAssignor(), CooperativeStickyAssignor()):
        sizes = [len(v) for v in assignor.assign(partitions, members).values()]
        assert max(sizes) - min(sizes) <= 1, (assignor.name, sizes)


def test_range_gives_consecutive_ranges_per_topic_like_kafka() -> None:
    members = members_with(["c1", "c0"], [["a", "b"], ["a", "b"]])
    result = RangeAssignor().assign({"a": 3, "b": 3}, members)
    tp = TopicPartition
    assert result == {"c0": [tp("a", 0), tp("a", 1), tp("b", 0), tp("b", 1)],
                      "c1": [tp("a", 2), tp("b", 2)]}


def test_roundrobin_deals_in_turn_like_kafka() -> None:
    members = members_with(["c0", "c1"], [["a", "b"], ["a", "b"]])
    result = RoundRobinAssignor().assign({"a": 3, "b": 3}, members)
    tp = TopicPartition
    assert result == {"c0": [tp("a", 0), tp("a", 2), tp("b", 1)],
                      "c1": [tp("a", 1), tp("b", 0), tp("b", 2)]}


def test_static_members_are_ordered_by_instance_id() -> None:
    members = [MemberSubscription("zzz", Subscription(("a",)), "i0"),
               MemberSubscription("aaa", Subscription(("a",)), "i1")]
    result = RangeAssignor().assign({"a": 2}, members)
    assert result == {"zzz": [TopicPartition("a", 0)], "aaa": [TopicPartition("a", 1)]}


def test_unknown_topics_and_no_members() -> None:
    members = members_with(["m"], [["missing"]])
    for assignor in ALL:
        assert assignor.assign({}, members) == {"m": []}
        assert assignor.assign({"a": 2}, []) == {}


def test_assignor_for_rejects_unknown_names() -> None:
    assert assignor_for("range").name == "range"
    with pytest.raises(InvalidConfigError, match="known: "):
        assignor_for("sticky-ish")
    with pytest.raises(ValueError, match="unique"):
        RangeAssignor().assign({"a": 1}, members_with(["m", "m"], [["a"], ["a"]]))


def run_cooperative(partitions: dict[str, int], owned: dict[str, list[TopicPartition]],
                    generation: int) -> dict[str, list[TopicPartition]]:
    """Rebalances until nothing is withheld (each member revokes what it lost)."""
    assignor = CooperativeStickyAssignor()
    for _ in range(3):
        members = [MemberSubscription(m, Subscription(tuple(TOPICS), tuple(tps), None, generation))
                   for m, tps in owned.items()]
        result = assignor.assign(partitions, members)
        flat = [tp for tps in result.values() for tp in tps]
        assert len(flat) == len(set(flat))
        for m, tps in result.items():  # never handed a partition someone else still owns
            others = {tp for o, otps in owned.items() if o != m for tp in otps}
            assert not set(tps) & others
        if set(flat) == expected(partitions, members):
            return result
        owned = {m: [tp for tp in owned[m] if tp in set(result[m])] + [
            tp for tp in result[m] if tp not in owned[m]] for m in owned}
        generation += 1
    raise AssertionError("cooperative rebalance did not converge in two rounds")


@settings(max_examples=100, deadline=None)
@given(counts, member_ids, st.integers(1, 3))
def test_cooperative_sticky_moves_only_what_balance_needs(partitions: dict[str, int],
                                                          ids: list[str], joiners: int) -> None:
    first = run_cooperative(partitions, {m: [] for m in ids}, 1)
    new_ids = [f"new{i}" for i in range(joiners)]
    owned = {**first, **{m: [] for m in new_ids}}
    second = run_cooperative(partitions, owned, 5)
    total = sum(partitions.values())
    quota = -(-total // len(owned))  # ceil: nobody keeps more than this
    for m in ids:  # an old member keeps min(what it had, its quota)
        kept = set(first[m]) & set(second[m])
        assert len(kept) >= min(len(first[m]), quota) - 1
    sizes = [len(v) for v in second.values()]
    assert max(sizes) - min(sizes) <= 1


def test_cooperative_highest_generation_wins_a_conflict() -> None:
    tp = TopicPartition("a", 0)
    members = [MemberSubscription("old", Subscription(("a",), (tp,), None, 1)),
               MemberSubscription("new", Subscription(("a",), (tp,), None, 2))]
    owners = CooperativeStickyAssignor._owners(
        sorted(members, key=lambda m: m.sort_key), {tp}, {"old": {"a"}, "new": {"a"}})
    assert owners == {tp: "new"}


def test_roundrobin_counts_across_topics() -> None:
    members = members_with(["x", "y", "z"], [TOPICS] * 3)
    result = RoundRobinAssignor().assign({"a": 4, "b": 1, "c": 0}, members)
    assert Counter(len(v) for v in result.values()) == Counter({2: 2, 1: 1})  # 5 partitions over 3
