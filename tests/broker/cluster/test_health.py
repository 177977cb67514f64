"""The health verdict of ``cluster status`` / ``cluster health`` from status reports
(:func:`broker.cluster.status.health_of`, pure): which state gives which exit code and
reason.  The same verdicts on a real cluster with brokers killed:
tests/clients/cli/test_cli_kafka_verbs.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.cluster.launcher import main as cluster_main
from broker.cluster.state import STATE_FILE
from broker.cluster.status import DEGRADED, DOWN, HEALTHY, UNKNOWN, health_of


def report(states: dict[str, str] | None = None, fenced: tuple[int, ...] = (),
           partitions: list[tuple[int, list[int], list[int]]] | None = None,
           error: str | None = None) -> dict[str, Any]:
    """Controller and brokers 0-2 (``states`` overrides a process's state); partitions of
    topic ``t`` as (leader, replicas, isr)."""
    names = ["controller", "broker-0", "broker-1", "broker-2"]
    out: dict[str, Any] = {
        "processes": [{"name": n, "state": (states or {}).get(n, "running")} for n in names],
        "brokers": [{"node_id": i, "fenced": i in fenced} for i in range(3)],
        "partitions": [{"topic": "t", "partition": i, "leader": leader, "replicas": replicas,
                        "isr": isr}
                       for i, (leader, replicas, isr) in enumerate(partitions or [])]}
    if error is not None:
        out["error"] = error
    return out


def test_all_running_and_fully_replicated_is_healthy() -> None:
    health = health_of(report(partitions=[(0, [0, 1, 2], [0, 1, 2])]))
    assert health.exit_code == HEALTHY and health.verdict == "healthy"
    assert health.line() == "healthy: 3 broker(s) serving, 1 partition(s) fully replicated"


def test_each_kind_of_trouble_is_degraded_and_named() -> None:
    assert health_of(report({"broker-1": "paused"})).reasons == ["broker-1 paused"]
    assert health_of(report(fenced=(2,))).reasons == ["broker(s) 2 fenced"]
    under = health_of(report(partitions=[(0, [0, 1, 2], [0, 1])] * 7))
    assert under.exit_code == DEGRADED
    assert under.reasons == ["7 under-replicated partition(s): t-0, t-1, t-2, t-3, t-4, ..."]
    offline = health_of(report(partitions=[(-1, [2], [2])]))
    assert offline.exit_code == DEGRADED and offline.reasons == ["1 offline partition(s): t-0"]
    no_controller = health_of(report({"controller": "stopped"}, error="controller unreachable"))
    assert no_controller.exit_code == DEGRADED  # brokers still run
    assert no_controller.reasons == ["controller stopped", "controller unreachable"]


def test_no_serving_broker_is_down() -> None:
    stopped = {f"broker-{i}": "stopped" for i in range(3)}
    assert health_of(report(stopped)).exit_code == DOWN
    assert health_of(report(fenced=(0, 1, 2))).exit_code == DOWN
    nothing = health_of(report({**stopped, "controller": "stopped"}, error="unreachable"))
    assert nothing.exit_code == DOWN and nothing.verdict == "down"


def test_no_cluster_in_the_data_dir_is_unknown_exit_3_not_degraded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nagios' codes: "nothing there to judge" is UNKNOWN (3), apart from degraded (1)
    and down (2); status says the same."""
    for command in ("health", "status"):
        assert cluster_main([command, "--data-dir", str(tmp_path)]) == UNKNOWN == 3
        out = capsys.readouterr().out
        assert out.startswith(f"unknown: no cluster in {tmp_path}"), out
    (tmp_path / STATE_FILE).write_text("{not json")  # damaged, and nothing running
    assert cluster_main(["health", "--data-dir", str(tmp_path)]) == 3
    assert "is damaged" in capsys.readouterr().out
