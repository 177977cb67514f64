"""Responses wait for pool memory parked, in order, bounded, without blocking."""

from __future__ import annotations

import pytest

from broker.requests.response_parking import ResponseParking


class Pool:
    def __init__(self, room: int) -> None:
        self.room = room
        self.delivered: list[str] = []
        self.given_up: list[tuple[str, str]] = []

    def try_deliver(self, item: str) -> bool:
        if self.room <= 0:
            return False
        self.room -= 1
        self.delivered.append(item)
        return True

    def give_up(self, item: str, why: str) -> None:
        self.given_up.append((item, why))


class Clock:
    def __init__(self) -> None:
        self.ms = 0.0

    def __call__(self) -> float:
        return self.ms


def test_parked_responses_go_out_in_order_once_memory_frees() -> None:
    pool, clock = Pool(room=1), Clock()
    parking: ResponseParking[str] = ResponseParking(max_parked=10, timeout_ms=1000,
                                                    clock_ms=clock)
    for item in "abcd":
        parking.offer(item, pool.try_deliver, pool.give_up)
    assert pool.delivered == ["a"] and len(parking) == 3  # b, c, d wait: nothing blocked
    pool.room = 1
    parking.offer("e", pool.try_deliver, pool.give_up)  # may not overtake b, c, d
    assert pool.delivered == ["a"] and len(parking) == 4
    parking.retry(pool.try_deliver, pool.give_up)
    assert pool.delivered == ["a", "b"]
    pool.room = 10
    parking.retry(pool.try_deliver, pool.give_up)
    assert pool.delivered == ["a", "b", "c", "d", "e"] and len(parking) == 0
    assert pool.given_up == []


def test_a_response_that_waited_too_long_or_finds_no_place_is_given_up() -> None:
    pool, clock = Pool(room=0), Clock()
    parking: ResponseParking[str] = ResponseParking(max_parked=2, timeout_ms=1000,
                                                    clock_ms=clock)
    parking.offer("a", pool.try_deliver, pool.give_up)
    clock.ms = 500
    parking.offer("b", pool.try_deliver, pool.give_up)
    parking.offer("c", pool.try_deliver, pool.give_up)  # two already wait
    assert [i for i, _ in pool.given_up] == ["c"]
    clock.ms = 1000
    parking.retry(pool.try_deliver, pool.give_up)
    assert [i for i, _ in pool.given_up] == ["c", "a"] and len(parking) == 1
    assert "within 1000 ms" in pool.given_up[1][1]
    pool.room = 1
    parking.retry(pool.try_deliver, pool.give_up)
    assert pool.delivered == ["b"]


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError):
        ResponseParking(max_parked=0, timeout_ms=1, clock_ms=Clock())
