"""Where ``free_base_port`` puts a cluster: never in the kernel's ephemeral range.

A port there that is free when probed can become, a moment later, the local port of any
outgoing connection, and the broker then cannot bind it (CI once lost a module's
cluster that way).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.cluster import launcher
from broker.cluster.launcher import free_base_port
from broker.cluster.state import ClusterError, layout_ports


def use_range(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, low: int, high: int) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text(f"{low}\t{high}\n")
    monkeypatch.setattr(launcher, "EPHEMERAL_PORT_RANGE_FILE", str(path))


def layout(base: int, brokers: int) -> list[int]:
    ports = layout_ports(base, brokers)  # client, controller and internal ports
    assert len(ports) == 2 * brokers + 1 == len(set(ports))
    return ports


def test_the_layout_stays_below_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    use_range(monkeypatch, tmp_path, 20000, 65535)
    for _ in range(50):
        ports = layout(free_base_port(3), 3)
        assert all(launcher.LOWEST_BASE_PORT <= p < 20000 for p in ports), ports


def test_the_layout_may_sit_above_a_low_ephemeral_range(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    use_range(monkeypatch, tmp_path, 5000, 40000)
    for _ in range(50):
        ports = layout(free_base_port(3), 3)
        assert all(40000 < p <= 65535 for p in ports), ports


def test_no_room_outside_the_ephemeral_range_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_range(monkeypatch, tmp_path, 1024, 65535)
    with pytest.raises(ClusterError, match="ephemeral ports 1024-65535"):
        free_base_port(3)


def test_an_unreadable_range_file_falls_back_to_linux_defaults(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(launcher, "EPHEMERAL_PORT_RANGE_FILE", str(tmp_path / "missing"))
    ports = layout(free_base_port(2), 2)
    assert all(p < 32768 or p > 60999 for p in ports), ports


def test_the_metrics_ports_stay_in_the_layout_and_out_of_the_ephemeral_range(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_range(monkeypatch, tmp_path, 5000, 40000)
    for _ in range(20):
        base = free_base_port(3, metrics=True)
        ports = layout_ports(base, 3, metrics=True)  # + the brokers' and controller's
        assert len(ports) == 3 * 3 + 2 == len(set(ports))
        assert ports[-1] == base + 400 and all(40000 < p <= 65535 for p in ports), ports
    with pytest.raises(ClusterError, match="lower --base-port"):
        launcher.new_state(str(tmp_path / "c"), 3, 65300, [], metrics=True)
    assert not (tmp_path / "c").exists()
