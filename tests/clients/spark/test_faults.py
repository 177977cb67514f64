"""Fault schedules: parsing, random schedules, and the injector with a fake launcher."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.workload.faults import (
    CONTROLLER,
    COORDINATOR,
    LAST,
    FaultEvent,
    FaultInjector,
    FaultScheduleError,
    bootstrap_from_data_dir,
    format_schedule,
    parse_schedule,
    random_schedule,
)


def test_the_documented_example() -> None:
    events = parse_schedule("kill-leader@2s,restart@4s,restart-controller@6s,pause:2@8s,"
                            "resume:2@9s")
    assert events == [FaultEvent(2000, "kill", "leader:0"), FaultEvent(4000, "restart", LAST),
                      FaultEvent(6000, "restart", CONTROLLER), FaultEvent(8000, "pause", "2"),
                      FaultEvent(9000, "resume", "2")]


def test_units_targets_and_time_order() -> None:
    events = parse_schedule(" resume @ 2.5s , pause-leader:1@800ms,kill:controller@0s,"
                            "kill-controller@1s,restart:01@3s")
    assert events == [FaultEvent(0, "kill", CONTROLLER), FaultEvent(800, "pause", "leader:1"),
                      FaultEvent(1000, "kill", CONTROLLER), FaultEvent(2500, "resume", LAST),
                      FaultEvent(3000, "restart", "1")]


@pytest.mark.parametrize(("text", "message"), [
    ("kill-leader", "has no time"),
    ("kill-leader@2", "must be a number with a unit"),
    ("kill-leader@-1s", "must be a number with a unit"),
    ("kill-leader@2s,", "fault 2 .* is empty"),
    ("kill@2s", "kill needs a target"),
    ("pause@2s", "pause needs a target"),
    ("kill:b1@2s", "target must be a broker id or 'controller'"),
    ("kill-leader:x@2s", "the partition must be a number"),
    ("explode@2s", "unknown fault 'explode'"),
    ("restart-controller:1@2s", "unknown fault"),
])
def test_bad_schedules_get_precise_errors(text: str, message: str) -> None:
    with pytest.raises(FaultScheduleError, match=message):
        parse_schedule(text)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 100_000),
                          st.sampled_from(["kill", "restart", "pause", "resume"]),
                          st.sampled_from(["0", "2", CONTROLLER, "leader:0", "leader:3", LAST])),
                min_size=1, max_size=8))
def test_format_then_parse_is_the_identity(raw: list[tuple[int, str, str]]) -> None:
    events = [FaultEvent(*e) for e in raw
              if not (e[2] == LAST and e[1] in ("kill", "pause"))
              and not (e[2].startswith("leader:") and e[1] not in ("kill", "pause"))]
    events.sort(key=lambda e: e.at_ms)
    if events:
        assert parse_schedule(format_schedule(events)) == events


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 60_000), st.integers(1, 5))
def test_random_schedules_repair_each_fault_before_the_next(seed: int, duration_ms: int,
                                                            brokers: int) -> None:
    events = random_schedule(seed, duration_ms, brokers)
    assert events == random_schedule(seed, duration_ms, brokers)  # pure
    assert all(0 < e.at_ms <= duration_ms for e in events)
    assert [e.at_ms for e in events] == sorted(e.at_ms for e in events)
    down: str | None = None
    for e in events:
        if e.action in ("kill", "pause"):
            assert down is None, events  # one process down at a time
            down = e.action
            assert e.target == "leader:0" or 0 <= int(e.target) < brokers
        elif e.target == LAST:
            assert down == {"restart": "kill", "resume": "pause"}[e.action]
            down = None
        else:
            assert (e.action, e.target, down) == ("restart", CONTROLLER, None)
    assert down is None  # the schedule ends healed
    if events:
        assert parse_schedule(format_schedule(events)) == events


class FakeLauncher:
    def __init__(self, fail: set[tuple[str, str]] | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail or set()

    def __call__(self, data_dir: str, action: str, target: str, timeout_s: float) -> str:
        self.calls.append((action, target))
        if (action, target) in self.fail:
            raise RuntimeError(f"error: {target} is not running")
        return f"{action}ed {target}"


def test_injector_resolves_leaders_and_last_targets_and_heals() -> None:
    launcher = FakeLauncher(fail={("resume", "1")})
    events = parse_schedule("kill-leader@0s,restart@0s,pause-leader:1@0s,kill:controller@0s,"
                            "resume@0s")
    leaders = {0: 2, 1: 1}
    injector = FaultInjector("/nowhere", "t", events, log=lambda _: None, launcher=launcher,
                             leader_of=leaders.__getitem__)
    outcomes = [injector.apply(e) for e in events]
    assert launcher.calls == [("kill", "2"), ("restart", "2"), ("pause", "1"),
                              ("kill", "controller"), ("resume", "1")]
    assert outcomes[0] == "killed 2" and outcomes[4].startswith("failed: error: 1 is not")
    assert injector.down == {"1": "pause", "controller": "kill"}
    launcher.fail.clear()
    assert injector.heal() == ["resume 1", "restart controller"]
    assert injector.down == {}


def test_injector_skips_what_it_cannot_do() -> None:
    launcher = FakeLauncher()
    injector = FaultInjector("/nowhere", "t", [], log=lambda _: None, launcher=launcher,
                             leader_of=lambda p: -1)
    assert injector.apply(FaultEvent(0, "restart", LAST)) == "skipped: nothing to restart"
    assert injector.apply(FaultEvent(0, "kill", "leader:0")) == "skipped: t-0 has no leader"
    assert launcher.calls == []


def test_injector_thread_runs_due_events_and_skips_the_rest_on_stop() -> None:
    launcher = FakeLauncher()
    logged: list[str] = []
    events = parse_schedule("kill:1@0s,restart@0ms,kill:2@1000s")
    injector = FaultInjector("/nowhere", "t", events, log=logged.append, launcher=launcher)
    injector.start()
    deadline = time.monotonic() + 30
    while len(injector.applied) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    injector.stop()
    assert launcher.calls == [("kill", "1"), ("restart", "1")]
    assert [a.outcome for a in injector.applied] == ["killed 1", "restarted 1",
                                                     "skipped: the workload ended"]
    assert len(logged) == 2 and logged[0].startswith("fault kill:1@0s at ")


def test_bootstrap_comes_from_the_cluster_state_file(tmp_path: Path) -> None:
    with pytest.raises(FaultScheduleError, match="no cluster in"):
        bootstrap_from_data_dir(str(tmp_path))
    (tmp_path / "cluster.json").write_text(json.dumps(
        {"brokers": {"0": {"port": 9100}, "1": {"port": 9101}}}))
    assert bootstrap_from_data_dir(str(tmp_path)) == "127.0.0.1:9100,127.0.0.1:9101"
    (tmp_path / "cluster.json").write_text("{")
    with pytest.raises(FaultScheduleError, match="is damaged"):
        bootstrap_from_data_dir(str(tmp_path))


def test_kill_coordinator_targets_the_busiest_transaction_coordinator() -> None:
    events = parse_schedule("kill-coordinator@1s,restart@2s")
    assert events == [FaultEvent(1000, "kill", COORDINATOR), FaultEvent(2000, "restart", LAST)]
    assert format_schedule(events) == "kill-coordinator@1s,restart@2s"
    with pytest.raises(FaultScheduleError, match="unknown fault 'kill-coordinator:1'"):
        parse_schedule("kill-coordinator:1@1s")
