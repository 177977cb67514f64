"""The broker's pure "which controller voter next" state machine and the voters list
(broker.metadata.controller_finder, broker.metadata.quorum_voters)."""

from __future__ import annotations

import pytest

from broker.metadata.controller_finder import ActiveControllerFinder
from broker.metadata.quorum_voters import (
    UNKNOWN_VOTER_ID,
    VoterAddress,
    format_quorum_voters,
    parse_quorum_voters,
)
from clients.protocol.errors import InvalidConfigError
from timer.clock import ManualClock

VOTERS = parse_quorum_voters("1@127.0.0.1:9001,2@127.0.0.1:9002,3@127.0.0.1:9003")
V1, V2, V3 = VOTERS


def test_voters_parse_and_format_round_trip() -> None:
    assert [v.voter_id for v in VOTERS] == [1, 2, 3]
    assert VoterAddress(2, "127.0.0.1", 9002) == V2
    assert format_quorum_voters(VOTERS) == "1@127.0.0.1:9001,2@127.0.0.1:9002,3@127.0.0.1:9003"
    assert parse_quorum_voters("7@[::1]:9093") == (VoterAddress(7, "::1", 9093),)
    assert format_quorum_voters(parse_quorum_voters("7@[::1]:9093")) == "7@[::1]:9093"


def test_the_one_voter_form_is_host_port() -> None:
    assert parse_quorum_voters("localhost:9093") == (
        VoterAddress(UNKNOWN_VOTER_ID, "localhost", 9093),)


@pytest.mark.parametrize("bad", ["", "1@h:0", "1@h:x", "x@h:1", "1@:5", "1@h:1,1@h:2",
                                 "h", "1@h:1,", ",".join(f"{i}@h:1" for i in range(10))])
def test_bad_voter_lists_are_refused(bad: str) -> None:
    with pytest.raises(InvalidConfigError):
        parse_quorum_voters(bad)


def test_round_robin_until_a_voter_answers_then_sticks_to_it() -> None:
    finder = ActiveControllerFinder(VOTERS, ManualClock())
    assert finder.target() == V1 and finder.leader is None
    finder.on_not_controller(V1)
    assert finder.target() == V2
    finder.on_answered(V2)
    assert finder.leader == V2 and finder.leader_id == 2
    assert finder.target() == V2
    finder.on_answered(V2)
    assert finder.target() == V2


def test_a_hint_goes_straight_to_the_named_leader() -> None:
    finder = ActiveControllerFinder(VOTERS, ManualClock())
    finder.on_not_controller(V1, leader_id=3, leader_epoch=4)
    assert finder.target() == V3 and finder.leader_epoch == 4
    # a stale hint (older epoch) is ignored
    assert not finder.on_leader_hint(2, 3)
    assert finder.target() == V3
    # an unknown leader (-1, an election running) or a non-voter changes nothing
    assert not finder.on_leader_hint(-1, 9) and not finder.on_leader_hint(42, 9)
    assert finder.target() == V3


def test_the_leader_lost_moves_on_and_a_newer_epoch_is_followed() -> None:
    clock = ManualClock()
    finder = ActiveControllerFinder(VOTERS, clock)
    finder.on_leader_hint(1, 5)
    finder.on_answered(V1)
    finder.on_unreachable(V1)  # the active controller was killed
    assert finder.leader is None
    assert finder.target() == V2  # the next voter, no waiting
    finder.on_not_controller(V2)  # election not finished: no hint yet
    assert finder.target() == V3
    finder.on_not_controller(V3, leader_id=2, leader_epoch=6)  # V2 won epoch 6 meanwhile
    assert finder.target() == V2, "a newer epoch is followed even to a voter failed before"
    finder.on_answered(V2)
    assert (finder.leader_id, finder.leader_epoch) == (2, 6)


def test_a_same_epoch_hint_to_a_voter_failed_this_round_does_not_loop() -> None:
    finder = ActiveControllerFinder(VOTERS, ManualClock())
    finder.on_not_controller(V2, leader_id=1, leader_epoch=3)
    finder.on_not_controller(V1, leader_id=2, leader_epoch=3)  # stale view: V2 said no
    assert finder.leader is None
    assert finder.target() == V3


def test_a_failed_round_backs_off_doubling_up_to_the_bound() -> None:
    clock = ManualClock()
    finder = ActiveControllerFinder(VOTERS, clock, backoff_initial_ms=50, backoff_max_ms=150)
    waits = []
    for _ in range(4):
        for _voter in VOTERS:
            target = finder.target()
            assert target is not None
            finder.on_unreachable(target)
        assert finder.target() is None
        waits.append(finder.wait_ms())
        clock.advance(finder.wait_ms())
    assert waits == [50, 100, 150, 150]
    assert finder.target() is not None
    finder.on_answered(V3)  # an answer resets the backoff
    finder.on_unreachable(V3)
    finder.on_unreachable(V1)
    finder.on_unreachable(V2)
    assert finder.wait_ms() == 50


def test_one_voter_of_unknown_id_is_always_the_target() -> None:
    clock = ManualClock()
    (only,) = parse_quorum_voters("127.0.0.1:9093")
    finder = ActiveControllerFinder([only], clock)
    assert finder.target() == only
    finder.on_unreachable(only)
    assert finder.target() is None and finder.wait_ms() == 50
    clock.advance(50)
    assert finder.target() == only
    finder.on_answered(only)
    assert finder.target() == only and finder.leader_id is None
