"""The KIP-848 server-side assignors (broker.group.consumer.assignors): balance,
stickiness, range layout."""

from __future__ import annotations

from broker.group.consumer.assignors import range_assign, uniform_assign

T1, T2 = b"\x01" * 16, b"\x02" * 16


def _counts(result: dict[str, dict[bytes, frozenset[int]]]) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def _all(result: dict[str, dict[bytes, frozenset[int]]]) -> list[tuple[bytes, int]]:
    return sorted((t, p) for a in result.values() for t, ps in a.items() for p in ps)


def test_uniform_balances_every_partition_once() -> None:
    subs = {m: {T1} for m in ("a", "b", "c")}
    result = uniform_assign(subs, {T1: 12}, {})
    assert _counts(result) == {"a": 4, "b": 4, "c": 4}
    assert _all(result) == [(T1, p) for p in range(12)]


def test_uniform_is_sticky_when_a_member_joins() -> None:
    before = uniform_assign({m: {T1} for m in ("a", "b", "c")}, {T1: 12}, {})
    after = uniform_assign({m: {T1} for m in ("a", "b", "c", "d")}, {T1: 12}, before)
    assert _counts(after) == {"a": 3, "b": 3, "c": 3, "d": 3}
    assert _all(after) == [(T1, p) for p in range(12)]
    for m in ("a", "b", "c"):  # nobody lost a partition to anyone but the newcomer
        assert after[m][T1] <= before[m][T1]


def test_uniform_respects_subscriptions() -> None:
    result = uniform_assign({"a": {T1}, "b": {T1, T2}}, {T1: 4, T2: 2}, {})
    assert T2 not in result["a"]
    assert result["b"][T2] == {0, 1}
    assert _all(result) == sorted([(T1, p) for p in range(4)] + [(T2, 0), (T2, 1)])


def test_uniform_drops_partitions_of_shrunk_or_unknown_topics() -> None:
    result = uniform_assign({"a": {T1, T2}}, {T1: 2}, {"a": {T1: frozenset({0, 5})}})
    assert result == {"a": {T1: frozenset({0, 1})}}


def test_range_gives_consecutive_ranges_by_member_id() -> None:
    result = range_assign({"b": {T1}, "a": {T1}, "c": {T1}}, {T1: 8}, {})
    assert result == {"a": {T1: frozenset({0, 1, 2})}, "b": {T1: frozenset({3, 4, 5})},
                      "c": {T1: frozenset({6, 7})}}
