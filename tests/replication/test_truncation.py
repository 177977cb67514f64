"""The pure follower truncation decision (Kafka's getOffsetTruncationState)."""

from __future__ import annotations

import pytest

from replication.leader_epoch_cache import LeaderEpochCache
from replication.truncation import (
    UNDEFINED_ANSWER,
    EpochEndOffset,
    TruncationPolicy,
    decide_truncation,
)


def decide(answer: EpochEndOffset, entries: list[tuple[int, int]], leo: int, *, start: int = 0,
           hw: int = 0, policy: TruncationPolicy = TruncationPolicy.LEADER_EPOCH
           ) -> tuple[int, bool]:
    d = decide_truncation(answer, LeaderEpochCache(entries=entries), leo, start, hw, policy)
    return d.truncate_to, d.completed


def test_same_epoch_leader_has_more_keeps_everything() -> None:
    # follower [0,10) in epoch 1; leader says epoch 1 ends at 15 (it has more)
    assert decide(EpochEndOffset(1, 15), [(0, 0), (1, 5)], 10, hw=3) == (10, True)


def test_same_epoch_leader_has_less_truncates_to_the_leader_end() -> None:
    assert decide(EpochEndOffset(1, 7), [(0, 0), (1, 5)], 10) == (7, True)


def test_leader_answers_an_older_epoch_we_know_min_of_both_ends() -> None:
    # follower: epoch 1 [5,8), epoch 2 [8,12); leader never saw epoch 2: epoch 1 ends at 9
    assert decide(EpochEndOffset(1, 9), [(0, 0), (1, 5), (2, 8)], 12) == (8, True)
    # leader's epoch 1 ends before ours
    assert decide(EpochEndOffset(1, 6), [(0, 0), (1, 5), (2, 8)], 12) == (6, True)


def test_leader_epoch_unknown_here_truncates_to_our_previous_epoch_and_asks_again() -> None:
    # follower has epochs 0 and 3; the leader answers epoch 2 (which we never saw)
    assert decide(EpochEndOffset(2, 20), [(0, 0), (3, 10)], 15) == (10, False)


def test_undefined_answer_truncates_to_the_high_watermark_never_below() -> None:
    assert decide(UNDEFINED_ANSWER, [(4, 30)], 40, start=30, hw=35) == (35, True)
    assert decide(UNDEFINED_ANSWER, [(4, 30)], 32, start=30, hw=35) == (32, True)  # LEO < HW
    assert decide(UNDEFINED_ANSWER, [(4, 30)], 40, start=30, hw=0) == (30, True)


def test_all_local_epochs_newer_than_the_answer() -> None:
    assert decide(EpochEndOffset(1, 50), [(4, 30)], 40, start=30) == (30, True)


def test_a_leader_that_no_longer_holds_our_epoch_does_not_make_us_drop_below_the_hw() -> None:
    # follower: epoch 0 [0,40), HW 40.  The leader went on in epoch 1 from 40 and
    # retention moved its log start to 45: its cache no longer has epoch 0.  Kafka's
    # leader answers "epoch 0 ends where your first known epoch starts"; an undefined
    # answer would make the follower drop [0,40), all below the HW.
    leader = LeaderEpochCache(entries=[(1, 45)])
    answer = EpochEndOffset(*leader.end_offset_for(0, 60))
    assert answer == EpochEndOffset(0, 45)
    assert decide(answer, [(0, 0)], 40, hw=40) == (40, True)  # nothing to cut


def test_no_local_epochs_means_nothing_to_truncate() -> None:
    assert decide(EpochEndOffset(3, 0), [], 0) == (0, True)


def test_error_answers_are_refused() -> None:
    with pytest.raises(ValueError, match="error answer"):
        decide(EpochEndOffset(-1, -1, error_code=74), [(0, 0)], 5)


def test_never_truncates_to_the_high_watermark_but_the_test_policy_does() -> None:
    answer = EpochEndOffset(0, 2)
    assert decide(answer, [(0, 0)], 2, hw=1) == (2, True)
    assert decide(answer, [(0, 0)], 2, hw=1, policy=TruncationPolicy.HIGH_WATERMARK) == (1, True)
