"""AnswerOrder: one connection's answers reach its network process in request order."""

from __future__ import annotations

import pytest

from broker.network.channel.answer_order import AnswerOrder
from broker.network.channel.codec import NO_RESPONSE, RESPONSE


def _order() -> tuple[AnswerOrder, list[tuple], list[tuple]]:
    posted: list[tuple] = []
    freed: list[tuple] = []
    return AnswerOrder(lambda m: posted.append(m) is None, freed.append), posted, freed


def test_answers_finishing_out_of_order_are_posted_in_ticket_order() -> None:
    order, posted, _ = _order()
    tickets = [order.ticket(7) for _ in range(4)]
    assert tickets == [0, 1, 2, 3]
    order.answer(7, 2, (RESPONSE, 7, ("h", 2)))
    order.answer(7, 1, (NO_RESPONSE, 7))
    assert posted == []  # ticket 0 not answered yet: nothing may go
    assert order.unanswered(7) == 2  # 0 and 3 (held ones are answered)
    order.answer(7, 0, (RESPONSE, 7, ("h", 0)))
    assert posted == [(RESPONSE, 7, ("h", 0)), (NO_RESPONSE, 7), (RESPONSE, 7, ("h", 2))]
    order.answer(7, 3, (RESPONSE, 7, ("h", 3)))
    assert posted[-1] == (RESPONSE, 7, ("h", 3))
    assert order.unanswered(7) == 0
    assert order.ticket(7) == 0  # nothing outstanding: no state was kept


def test_connections_are_independent() -> None:
    order, posted, _ = _order()
    order.ticket(1)
    order.ticket(2)
    order.answer(2, 0, (NO_RESPONSE, 2))  # not held behind connection 1
    assert posted == [(NO_RESPONSE, 2)]


def test_forget_frees_held_responses_and_late_answers_go_straight_out() -> None:
    order, posted, freed = _order()
    for _ in range(3):
        order.ticket(5)
    order.answer(5, 1, (RESPONSE, 5, ("h", 1)))
    order.answer(5, 2, (NO_RESPONSE, 5))
    assert order.forget(5) == 1
    assert freed == [("h", 1)]
    order.answer(5, 0, (RESPONSE, 5, ("h", 0)))  # late: the network process frees it
    assert posted == [(RESPONSE, 5, ("h", 0))]


def test_an_answer_to_no_ticket_is_a_bug() -> None:
    order, _, _ = _order()
    order.ticket(3)
    with pytest.raises(ValueError):
        order.answer(3, 1, (NO_RESPONSE, 3))
    order.answer(3, 0, (NO_RESPONSE, 3))
