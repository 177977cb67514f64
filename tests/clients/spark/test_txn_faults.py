"""The transactional runs' faults: the whole-cluster crash (parsed, run by the injector:
every process killed at once, then the controller and the brokers restarted, what could
not be restarted left for heal) and the random schedule that includes it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.workload.faults import (
    CLUSTER,
    COORDINATOR,
    CRASH,
    LAST,
    FaultEvent,
    FaultInjector,
    FaultScheduleError,
    cluster_pids,
    format_schedule,
    parse_schedule,
    random_schedule,
    sigkill_all,
)
from tests.clients.spark.test_faults import FakeLauncher


def test_crash_cluster_parses_and_formats() -> None:
    events = parse_schedule("crash-cluster@3s,kill-coordinator@9s,restart@10s")
    assert events[0] == FaultEvent(3000, CRASH, CLUSTER)
    assert format_schedule(events) == "crash-cluster@3s,kill-coordinator@9s,restart@10s"
    with pytest.raises(FaultScheduleError, match="unknown fault 'crash-cluster:1'"):
        parse_schedule("crash-cluster:1@1s")


def test_the_injector_kills_everything_then_restarts_controller_first() -> None:
    launcher = FakeLauncher(fail={("restart", "2")})
    crashed: list[str] = []

    def crash(data_dir: str) -> list[str]:
        crashed.append(data_dir)
        return ["controller", "0", "1", "2"]

    injector = FaultInjector("/nowhere", "t", [], log=lambda _: None, launcher=launcher,
                             crash=crash, crash_down_ms=0)
    outcome = injector.apply(FaultEvent(0, CRASH, CLUSTER))
    assert crashed == ["/nowhere"]
    assert launcher.calls == [("restart", "controller"), ("restart", "0"), ("restart", "1"),
                              ("restart", "2")]
    assert outcome.startswith("killed controller, 0, 1, 2; restarted controller, 0, 1; "
                              "restart failed: 2 ("), outcome
    assert injector.down == {"2": "kill"}
    launcher.fail.clear()
    assert injector.heal() == ["restart 2"] and injector.down == {}


def test_sigkill_all_kills_every_process_of_the_state_file(tmp_path: Path) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
             for _ in range(3)]
    try:
        (tmp_path / "cluster.json").write_text(json.dumps({
            "controller": {"pid": procs[0].pid},
            "brokers": {"0": {"pid": procs[1].pid, "port": 1},
                        "1": {"pid": procs[2].pid, "port": 2}}}))
        assert cluster_pids(str(tmp_path)) == {"controller": procs[0].pid, "0": procs[1].pid,
                                               "1": procs[2].pid}
        assert sigkill_all(str(tmp_path)) == ["controller", "0", "1"]
        assert [p.wait(10) for p in procs] == [-9, -9, -9]
        assert sigkill_all(str(tmp_path)) == []  # nothing left running
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 60_000))
def test_transactional_random_schedules_add_coordinator_kills_and_crashes(
        seed: int, duration_ms: int) -> None:
    events = random_schedule(seed, duration_ms, transactional=True)
    assert events == random_schedule(seed, duration_ms, transactional=True)  # pure
    assert all(0 < e.at_ms <= duration_ms for e in events)
    down = False
    for e in events:
        if e.action == CRASH:
            assert not down  # a crash restarts everything itself
        elif e.action in ("kill", "pause"):
            assert not down and (e.target == COORDINATOR or e.target != LAST)
            down = True
        elif e.target == LAST:
            assert down
            down = False
    assert not down
    if events:
        assert parse_schedule(format_schedule(events)) == events


def test_a_long_transactional_schedule_has_every_kind() -> None:
    events = random_schedule(7, 600_000, transactional=True)
    kinds = {(e.action, e.target) for e in events}
    assert (CRASH, CLUSTER) in kinds and ("kill", COORDINATOR) in kinds
    assert (CRASH, CLUSTER) not in {(e.action, e.target) for e in random_schedule(7, 600_000)}
