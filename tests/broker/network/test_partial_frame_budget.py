"""The partial-frame budget's accounting (broker/network/connection_shares.py) and its
config key (``max_partial_request_bytes``, broker/config.py), without processes: two
network processes' views of one shared table."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.config import BrokerConfig
from broker.network.connection_shares import (
    ConnectionShares,
    PartialFrameBudget,
    partial_request_bytes,
)
from clients.protocol.errors import InvalidConfigError

MiB = 1024 * 1024


@pytest.fixture
def table() -> Iterator[ConnectionShares]:
    shares = ConnectionShares.create(2)
    yield shares
    shares.close()


def budgets(table: ConnectionShares, limit: int = 6,
            reserve: int = 2) -> tuple[PartialFrameBudget, PartialFrameBudget]:
    return (PartialFrameBudget(table, 0, limit_slots=limit, reserve_slots=reserve),
            PartialFrameBudget(table, 1, limit_slots=limit, reserve_slots=reserve))


def test_the_shared_part_is_the_limit_less_the_reserve_for_all_processes(
        table: ConnectionShares) -> None:
    a, b = budgets(table)  # 6 slots, the last 2 for the designated frame
    assert a.try_take(3) and b.try_take(1)
    assert not b.try_take(1) and not a.try_take(1)  # 4 held: the shared part is full
    assert (a.held, b.held, a.total_slots()) == (3, 1, 4)
    a.give(2)
    assert b.try_take(2) and not b.try_take(1)
    assert a.total_slots() == b.total_slots() == 4


def test_one_designated_frame_at_a_time_may_use_the_reserve(table: ConnectionShares) -> None:
    a, b = budgets(table)
    assert a.try_take(3) and b.try_take(1)
    assert b.try_designate(holding=1)  # b's frame: its slot moves to the designated part
    assert not a.try_designate(holding=3)  # one at a time, broker-wide
    assert a.try_take(1)  # the shared part has room again (3 + 0 of 4)
    assert b.try_take(1, designated=True)  # the designated frame: up to the whole limit
    assert a.total_slots() == 6
    assert not b.try_take(1, designated=True) and not a.try_take(1)
    b.give(2, designated=True)
    b.release_designation()
    assert a.try_designate(holding=4) and a.designated and not b.designated
    with pytest.raises(RuntimeError):
        b.try_take(1, designated=True)  # not b's to use


def test_a_frame_holding_part_of_the_shared_part_can_always_finish(
        table: ConnectionShares) -> None:
    a, b = budgets(table, limit=8, reserve=4)  # frames of up to 4 slots
    assert a.try_take(2) and b.try_take(2)  # two half-read frames fill the shared part
    assert not a.try_take(1)
    assert a.try_designate(holding=2)
    assert a.try_take(2, designated=True)  # a's frame complete: 4 slots
    a.give(4, designated=True)
    a.release_designation()
    assert b.total_slots() == 2  # a's slots are back: b's frame goes on in the shared part
    assert b.try_take(2)


def test_a_dead_process_slots_and_designation_are_retired(table: ConnectionShares) -> None:
    a, b = budgets(table)
    assert a.try_take(2) and b.try_take(2)
    assert b.try_designate(holding=2)
    table.retire(1)  # the supervisor, after b's process died
    assert a.total_slots() == 2
    assert a.try_designate(holding=2)  # free again
    restarted = PartialFrameBudget(table, 1, limit_slots=6, reserve_slots=2)
    assert restarted.held == 0 and restarted.try_take(2)


def test_a_restarted_process_starts_from_nothing(table: ConnectionShares) -> None:
    a, _ = budgets(table)
    assert a.try_take(3)
    again = PartialFrameBudget(table, 0, limit_slots=6, reserve_slots=2)
    assert again.total_slots() == 0


@pytest.mark.parametrize(("limit", "reserve", "index"), [(4, 5, 0), (4, 0, 0), (6, 2, 2)])
def test_bad_budget_arguments_are_refused(table: ConnectionShares, limit: int, reserve: int,
                                          index: int) -> None:
    with pytest.raises(ValueError):
        PartialFrameBudget(table, index, limit_slots=limit, reserve_slots=reserve)


@pytest.mark.parametrize(("pool", "max_request", "expected"), [
    (128 * MiB, 16 * MiB, 32 * MiB),  # the defaults: a quarter of the pool
    (1024 * MiB, 16 * MiB, 256 * MiB),
    (16 * MiB, 4 * MiB, 8 * MiB),  # at least two largest frames...
    (32 * MiB, 16 * MiB, 16 * MiB),  # ...but at most half the pool
])
def test_the_auto_bound(pool: int, max_request: int, expected: int) -> None:
    assert partial_request_bytes(0, pool, max_request) == expected
    assert partial_request_bytes(20 * MiB, pool, max_request) == 20 * MiB


def test_max_partial_request_bytes_is_validated() -> None:
    assert BrokerConfig(max_partial_request_bytes=16 * MiB).validate()
    assert BrokerConfig(max_partial_request_bytes=64 * MiB).validate()
    for bad in (-1, 16 * MiB - 1, 64 * MiB + 1):  # below max_request_bytes, over half
        with pytest.raises(InvalidConfigError, match="max_partial_request_bytes"):
            BrokerConfig(max_partial_request_bytes=bad).validate()
    config = BrokerConfig().with_overrides({"max.partial.request.bytes": str(20 * MiB)})
    assert config.max_partial_request_bytes == 20 * MiB
