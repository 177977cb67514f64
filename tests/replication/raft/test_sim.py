"""The KRaft simulation sweep (tests/replication/raft/sim_quorum.py): 0 violations.

The real KRaftReplica, 3 and 5 voters, seeded faults (crashes losing unflushed writes,
restarts, drops, duplicates, reordering, symmetric and asymmetric partitions, graceful
resignations; with wiped disks: a voter restarted empty, an observer until caught up)
with every invariant checked after every step, then liveness after healing.
More seeds: ``python3 -m tests.replication.raft.sim_quorum --seeds 10000 --voters 5``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.replication.raft.sim_quorum import SimSettings, disruption_check, run_seed

pytestmark = pytest.mark.sim

STEPS = 2000
SEEDS_3 = range(0, 100)
SEEDS_5 = range(10_000, 10_100)


@pytest.mark.parametrize("voters,seeds", [(3, SEEDS_3), (5, SEEDS_5)])
def test_sweep_keeps_every_invariant(voters: int, seeds: range) -> None:
    settings = replace(SimSettings(), voters=voters, steps=STEPS)
    totals = {"crashes": 0, "truncations": 0, "partitions": 0, "epochs": 0, "committed": 0}
    for seed in seeds:
        sim = run_seed(seed, settings)  # raises Violation("seed=... replay: ...")
        for key in ("crashes", "truncations", "partitions"):
            totals[key] += sim.stats[key]
        totals["epochs"] += len(sim.leaders)
        totals["committed"] += len(sim.committed)
    # the faults really happened (a sweep that never crashes or diverges proves nothing)
    n = len(seeds)
    assert totals["crashes"] > n and totals["partitions"] > n and totals["truncations"] > n / 4
    assert totals["epochs"] > 2 * n and totals["committed"] > 50 * n


@pytest.mark.parametrize("voters,seeds", [(3, range(20_000, 20_050)),
                                           (5, range(30_000, 30_050))])
def test_sweep_with_wiped_disks_keeps_every_invariant(voters: int, seeds: range) -> None:
    """Half the restarts on a wiped disk (a minority of observers at once): the voter
    comes back an observer; every invariant holds and each one rejoins by the end."""
    settings = replace(SimSettings(), voters=voters, steps=STEPS, wipe_probability=0.5)
    wipes = rejoins = 0
    for seed in seeds:
        sim = run_seed(seed, settings)
        wipes, rejoins = wipes + sim.stats["wipes"], rejoins + sim.stats["rejoins"]
        assert not any(sim.observer_dir.values())  # settle: every observer rejoined
    assert wipes > len(seeds) / 2 and rejoins > len(seeds) / 2  # (re-wiped: one rejoin)


def test_a_returning_voter_never_disrupts_a_healthy_leader() -> None:
    for seed in range(10):
        disruption_check(seed)


def test_a_seed_replays_exactly() -> None:
    settings = replace(SimSettings(), voters=5, steps=1000)
    first, second = run_seed(42, settings), run_seed(42, settings)
    assert first.committed == second.committed and first.step_no == second.step_no
    assert first.leaders == second.leaders and first.votes == second.votes
