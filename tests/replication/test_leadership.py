"""The role-change and fencing decisions (replication.leadership), row by row."""

from __future__ import annotations

import pytest

from replication.isr import UNKNOWN_OFFSET, ReplicaState, leader_high_watermark
from replication.leadership import RoleChange, fence_leader_epoch, follower_change, leader_change
from replication.partition_errors import FencedLeaderEpochError, UnknownLeaderEpochError

STALE, UPDATE, NEW = RoleChange.STALE, RoleChange.UPDATE, RoleChange.NEW


@pytest.mark.parametrize(("is_leader", "new_epoch", "new_partition_epoch", "expected"), [
    (True, 4, 9, STALE),    # older leader epoch
    (True, 5, 6, STALE),    # same epoch, older partition epoch
    (True, 5, 7, STALE),    # same epoch, same partition epoch
    (True, 5, 8, UPDATE),   # same epoch, newer partition epoch
    (False, 5, 8, STALE),   # same epoch, not leading now (resigned)
    (False, 6, 0, NEW),     # newer leader epoch
])
def test_leader_change(is_leader: bool, new_epoch: int, new_partition_epoch: int,
                       expected: RoleChange) -> None:
    assert leader_change(5, 7, is_leader, new_epoch, new_partition_epoch) is expected


@pytest.mark.parametrize(("new_leader", "new_epoch", "new_partition_epoch", "expected"), [
    (2, 4, 9, STALE),   # older leader epoch
    (2, 5, 6, STALE),   # same epoch, older partition epoch
    (2, 5, 7, UPDATE),  # same leader, epoch and partition epoch
    (2, 5, 8, UPDATE),  # same leader and epoch, newer partition epoch
    (3, 5, 7, NEW),     # another leader in the same epoch
    (2, 6, 0, NEW),     # newer leader epoch
])
def test_follower_change(new_leader: int, new_epoch: int, new_partition_epoch: int,
                         expected: RoleChange) -> None:
    assert follower_change(2, 5, 7, new_leader, new_epoch, new_partition_epoch) is expected


def test_fence_leader_epoch() -> None:
    fence_leader_epoch("t-0", -1, 5)  # the sender does not say
    fence_leader_epoch("t-0", 5, 5)
    with pytest.raises(FencedLeaderEpochError):
        fence_leader_epoch("t-0", 4, 5)
    with pytest.raises(UnknownLeaderEpochError):
        fence_leader_epoch("t-0", 6, 5)


def test_leader_high_watermark_is_the_min_over_the_maximal_isr() -> None:
    states = {2: ReplicaState(log_end_offset=7), 3: ReplicaState(log_end_offset=4)}
    assert leader_high_watermark((1, 2), 1, states, 10) == 7
    assert leader_high_watermark((1, 2, 3), 1, states, 10) == 4
    assert leader_high_watermark((1, 2), 1, states, 5) == 5  # never above the leader's LEO
    states[3].log_end_offset = UNKNOWN_OFFSET  # not fetched in this epoch: no move
    assert leader_high_watermark((1, 2, 3), 1, states, 10) is None
    assert leader_high_watermark((1, 4), 1, states, 10) is None  # not tracked
