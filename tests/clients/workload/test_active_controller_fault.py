"""The workload's controller-quorum faults (clients/workload/faults.py, issue 34):
``kill-active-controller`` / ``pause-active-controller`` and ``controller-N`` targets;
the injector asks the launcher for ``controller`` (which, for a quorum, acts on the
active voter) and then restarts / resumes the voter the launcher named, not whichever
is active by then.  A fake launcher: no processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clients.workload.faults import (
    ACTIVE_CONTROLLER,
    LAST,
    FaultEvent,
    FaultInjector,
    FaultScheduleError,
    cluster_pids,
    format_schedule,
    parse_schedule,
)


def test_active_controller_faults_and_voter_targets_parse_and_format() -> None:
    text = "kill-active-controller@1s,restart@2s,pause-active-controller@3s,resume@4s," \
           "kill:controller-2@5s"
    events = parse_schedule(text)
    assert events == [FaultEvent(1000, "kill", ACTIVE_CONTROLLER),
                      FaultEvent(2000, "restart", LAST),
                      FaultEvent(3000, "pause", ACTIVE_CONTROLLER),
                      FaultEvent(4000, "resume", LAST),
                      FaultEvent(5000, "kill", "controller-2")]
    assert parse_schedule(format_schedule(events)) == events
    with pytest.raises(FaultScheduleError, match="unknown fault"):
        parse_schedule("kill-active-controller:1@1s")
    with pytest.raises(FaultScheduleError, match="target must be"):
        parse_schedule("kill:controller-x@1s")


class QuorumLauncher:
    """Kills / pauses the 'active' voter when asked for 'controller', as the launcher
    does for a quorum, and says which (its output line); then another voter leads."""

    def __init__(self) -> None:
        self.active = "controller-2"
        self.calls: list[tuple[str, str]] = []

    def __call__(self, data_dir: str, action: str, target: str, timeout_s: float) -> str:
        self.calls.append((action, target))
        if target == "controller":
            target, self.active = self.active, "controller-3"
        past = {"kill": "killed", "pause": "paused"}.get(action, action + "ed")
        return f"{past} {target} (pid 4242)"


def test_the_voter_killed_as_active_is_the_one_restarted() -> None:
    launcher = QuorumLauncher()
    events = parse_schedule("kill-active-controller@0s,restart@0s,"
                            "pause-active-controller@0s")
    injector = FaultInjector("/nowhere", "t", events, log=lambda _: None, launcher=launcher)
    assert injector.apply(events[0]) == "killed controller-2 (pid 4242)"
    assert injector.down == {"controller-2": "kill"}
    injector.apply(events[1])
    assert launcher.calls[1] == ("restart", "controller-2"), "not the new active voter"
    injector.apply(events[2])
    assert injector.down == {"controller-3": "pause"}
    assert injector.heal() == ["resume controller-3"]


def test_a_crash_finds_every_voter_in_the_state_file(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(json.dumps({
        "controllers": {f"controller-{i}": {"pid": 100 + i} for i in (1, 2, 3)},
        "controller": {"pid": 101}, "brokers": {"0": {"pid": 200}}}))
    assert cluster_pids(str(tmp_path)) == {"controller-1": 101, "controller-2": 102,
                                           "controller-3": 103, "0": 200}
    (tmp_path / "cluster.json").write_text(json.dumps({  # a file from before quorums
        "controller": {"pid": 101}, "brokers": {"0": {"pid": 200}}}))
    assert cluster_pids(str(tmp_path)) == {"controller": 101, "0": 200}
