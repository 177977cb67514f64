"""The simulation finds the protocol broken on purpose (and the real code passes the same seed).

Each case names the seed and the settings that found it in a search, and the invariant
that fires; the same seed and settings with the correct code keep every invariant.

* vote durable only after the answer (``LazyStore``): seed 7 of a search over 0-59
  (5 voters, crash 0.06, restart 0.3; also 29, 44; with 3 voters 4, 9, 10): "double vote"
  (one vote per voter and epoch);
* HW advanced on a previous-epoch entry: seed 107 of a search over 0-299 (3 voters, one
  entry per Fetch, the leader killed with probability 0.03 per step; also 274): "leader
  ... has ... committed ..." (leader completeness: the entry committed early is missing
  from a later leader); with the default settings 0 of 100 seeds found it;
* PreVote off (a timed-out voter stands at once): seed 0 of :func:`disruption_check`
  (every seed tried, 0-2, with 3 and 5 voters): "disruption" (a leader that kept its
  majority is deposed by a voter returning from a partition);
* a wiped voter trusted as a voter (``trust_wiped``: it votes and counts at once): seed 1
  of a search over 0-5 (5 voters, wipe probability 0.5 per restart; also 5; with 3
  voters 41 of 50 seeds): "leader ... misses committed entries".
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from replication.raft import leader_state
from replication.raft.leader_state import LeaderState
from replication.raft.messages import Send
from replication.raft.quorum_state import QuorumRole
from replication.raft.replica import KRaftReplica
from tests.replication.raft.sim_quorum import SimSettings, Violation, disruption_check, run_seed

pytestmark = pytest.mark.sim

LAZY = replace(SimSettings(), voters=5, crash_probability=0.06, restart_probability=0.3)
LEADER_KILLS = replace(SimSettings(), voters=3, max_fetch_entries=1,
                       leader_crash_probability=0.03, restart_probability=0.3,
                       append_probability=0.1, settle_ms=120_000)


def test_vote_persisted_after_the_answer_is_a_double_vote() -> None:
    run_seed(7, LAZY)  # the real store: fine
    with pytest.raises(Violation, match=r"seed=7 .*double vote: voter \d voted for \d and \d"):
        run_seed(7, replace(LAZY, lazy_store=True))


def _advance_on_any_epoch(self: LeaderState) -> bool:
    """BROKEN: the HW follows the majority even below the leader's epoch start."""
    reached = sorted(self._end_offsets.values(), reverse=True)[self._majority - 1]
    if reached > self.high_watermark:
        self.high_watermark = reached
        return True
    return False


def test_hw_on_a_previous_epoch_entry_loses_a_committed_entry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run_seed(107, LEADER_KILLS)
    monkeypatch.setattr(leader_state.LeaderState, "_maybe_advance", _advance_on_any_epoch)
    with pytest.raises(Violation, match=r"seed=107 .*leader \d of epoch \d+ has .* committed"):
        run_seed(107, LEADER_KILLS)


class NoPreVote(KRaftReplica):
    """BROKEN: PreVote off - a timed-out voter bumps the epoch at once."""

    def _become_prospective(self) -> list[Send]:
        out = super()._become_prospective()
        if self.role is QuorumRole.PROSPECTIVE:
            return self._become_candidate()
        return out


def test_without_pre_vote_a_returning_voter_deposes_the_leader() -> None:
    disruption_check(0)
    with pytest.raises(Violation, match=r"seed=0 .*disruption: leader \d of epoch \d+ deposed"):
        disruption_check(0, replica_factory=NoPreVote)


WIPES = replace(SimSettings(), voters=5, wipe_probability=0.5)


def test_a_wiped_voter_trusted_as_a_voter_loses_committed_entries() -> None:
    run_seed(1, WIPES)  # it comes back an observer: fine
    with pytest.raises(Violation, match=r"seed=1 .*leader \d of epoch \d+ misses committed"):
        run_seed(1, replace(WIPES, trust_wiped=True))
