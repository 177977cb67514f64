"""The quorum role table, the persisted election state and the fsync'd quorum-state file."""

from __future__ import annotations

from pathlib import Path

import pytest

from replication.raft.quorum_state import (
    TRANSITIONS,
    ElectionState,
    IllegalQuorumTransitionError,
    QuorumEvent,
    QuorumRole,
    next_role,
)
from replication.raft.state_file import QuorumStateFile

R, E = QuorumRole, QuorumEvent


def test_table_paths_of_an_election() -> None:
    role = R.FOLLOWER
    for event, expected in [(E.ELECTION_TIMEOUT, R.PROSPECTIVE), (E.PRE_VOTE_MAJORITY, R.CANDIDATE),
                            (E.VOTE_MAJORITY, R.LEADER), (E.RESIGN, R.RESIGNED),
                            (E.ELECTION_TIMEOUT, R.PROSPECTIVE), (E.VOTE_CAST, R.UNATTACHED),
                            (E.LEADER_KNOWN, R.FOLLOWER)]:
        role = next_role(role, event)
        assert role is expected


@pytest.mark.parametrize(("role", "event"), [
    (R.LEADER, E.ELECTION_TIMEOUT),  # a leader resigns by check quorum, it does not time out
    (R.FOLLOWER, E.PRE_VOTE_MAJORITY), (R.UNATTACHED, E.VOTE_MAJORITY),
    (R.CANDIDATE, E.VOTE_CAST),  # a candidate voted for itself
    (R.FOLLOWER, E.VOTE_CAST), (R.LEADER, E.VOTE_CAST), (R.FOLLOWER, E.RESIGN),
    (R.PROSPECTIVE, E.VOTE_MAJORITY),  # a pre-vote never makes a leader
])
def test_illegal_transitions(role: QuorumRole, event: QuorumEvent) -> None:
    assert (role, event) not in TRANSITIONS
    with pytest.raises(IllegalQuorumTransitionError):
        next_role(role, event)


def test_every_role_adopts_a_higher_epoch() -> None:
    assert all(next_role(r, E.NEW_EPOCH) is R.UNATTACHED for r in R)


def test_election_state_rejects_negative_epoch() -> None:
    with pytest.raises(ValueError):
        ElectionState(-1)


def test_state_file_round_trip(tmp_path: Path) -> None:
    store = QuorumStateFile(tmp_path)
    assert store.read() is None
    store.write(ElectionState(3, voted_for=2, leader_id=None))
    assert QuorumStateFile(tmp_path).read() == ElectionState(3, 2, None)
    store.write(ElectionState(4, voted_for=None, leader_id=1))
    assert QuorumStateFile(tmp_path).read() == ElectionState(4, None, 1)
    assert not list(tmp_path.glob("*.tmp"))  # the temp file was renamed


@pytest.mark.parametrize("text", ["", "{", '{"version": 1, "epoch": 1, "voted_for": null, '
                                  '"leader_id": null}', '{"version": 0, "epoch": "1", '
                                  '"voted_for": null, "leader_id": null}', '[1]',
                                  '{"version": 0}'])
def test_unreadable_state_file_is_an_error_not_a_fresh_voter(tmp_path: Path, text: str) -> None:
    (tmp_path / "quorum-state").write_text(text)
    with pytest.raises(ValueError, match="unreadable quorum state"):
        QuorumStateFile(tmp_path).read()
