"""A real local cluster for integration tests, driven through ``broker.cluster``.

The same launcher users run (``minikafka cluster ...``) starts a controller and N
brokers as daemonised processes; :meth:`LocalCluster.close` stops them cleanly and then
SIGKILLs, by PID from the state file, anything still alive, so a failing test leaves
nothing running.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import psutil

from broker.cluster.launcher import free_base_port, main
from broker.cluster.state import ClusterState
from broker.cluster.status import status_report
from clients.records.batch import iter_batches
from tests.broker.processes import wait_until

PORT_ATTEMPTS = 3


class LocalCluster:
    def __init__(self, root: Path, brokers: int = 3, overrides: dict[str, object] | None = None,
                 controller_overrides: dict[str, object] | None = None,
                 metrics: bool = False, controllers: int = 1):
        """``metrics``: ``cluster start --metrics`` (every process serves its metrics);
        ``controllers``: ``cluster start --controllers`` (the quorum's voters)."""
        self.data_dir = str(root / "cluster")
        self.brokers = brokers
        self.overrides = dict(overrides or {})
        self.controller_overrides = dict(controller_overrides or {})
        self.metrics = metrics
        self.controllers = controllers
        self.base_port = free_base_port(brokers, metrics=metrics, controllers=controllers)

    def _run(self, *args: str) -> None:
        code = main([*args, "--data-dir", self.data_dir])
        assert code == 0, f"cluster {' '.join(args)} failed"

    def start(self) -> LocalCluster:
        """Start the cluster.  If a process could not bind its port because something
        else took it after ``free_base_port`` probed it, start again on other ports
        (at most ``PORT_ATTEMPTS`` times); any other failure fails the test."""
        extra = [a for k, v in self.overrides.items() for a in ("--override", f"{k}={v}")]
        extra += [a for k, v in self.controller_overrides.items()
                  for a in ("--controller-override", f"{k}={v}")]
        extra += ["--metrics"] if self.metrics else []
        extra += ["--controllers", str(self.controllers)] if self.controllers != 1 else []
        for attempt in range(1, PORT_ATTEMPTS + 1):
            logs = sorted(Path(self.data_dir).glob("*.log"))
            sizes = {log: log.stat().st_size for log in logs}
            try:
                self._run("start", "--brokers", str(self.brokers), "--base-port",
                          str(self.base_port), *extra)
                return self
            except AssertionError:
                if attempt == PORT_ATTEMPTS or not self._port_was_taken(sizes):
                    raise
                self.base_port = free_base_port(self.brokers, metrics=self.metrics,
                                                controllers=self.controllers)
        raise AssertionError("unreachable")

    def _port_was_taken(self, sizes: dict[Path, int]) -> bool:
        """Whether a log written since ``sizes`` was taken reports a port in use."""
        for log in Path(self.data_dir).glob("*.log"):
            with open(log, "rb") as f:
                f.seek(sizes.get(log, 0))
                if b"Address already in use" in f.read():
                    return True
        return False

    @property
    def state(self) -> ClusterState:
        return ClusterState.load(self.data_dir)

    @property
    def bootstrap(self) -> str:
        return self.state.bootstrap

    def kill(self, target: str) -> None:
        self._run("kill", target)

    def restart(self, target: str) -> None:
        self._run("restart", target)

    def pause(self, target: str) -> None:
        self._run("pause", target)

    def resume(self, target: str) -> None:
        self._run("resume", target)

    def report(self) -> dict[str, Any]:
        return status_report(self.state)

    def partition(self, topic: str, index: int) -> dict[str, Any]:
        for p in self.report()["partitions"]:
            if (p["topic"], p["partition"]) == (topic, index):
                return p
        raise AssertionError(f"{topic}-{index} not in the controller's metadata")

    def wait_partition(self, topic: str, index: int, condition: Any, what: str,
                       timeout_s: float = 30.0) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def check() -> bool:
            try:
                found.update(self.partition(topic, index))
            except AssertionError:
                return False
            return bool(condition(found))

        try:
            wait_until(check, timeout_s, f"{topic}-{index}: {what}", 0.1)
        except AssertionError as exc:  # the state last seen, not the (empty) one at the start
            raise AssertionError(f"{exc} (last seen: {found})") from None
        return found

    def replica_bytes(self, broker: str, topic: str, index: int, up_to_offset: int) -> bytes:
        """The batches of a replica's log below ``up_to_offset``, as stored on disk."""
        directory = Path(self.state.brokers[broker].data_dir) / f"{topic}-{index}"
        out = bytearray()
        for segment in sorted(directory.glob("*.log")):
            data = segment.read_bytes()
            for pos, header in iter_batches(data, validate=True):
                if header.last_offset < up_to_offset:
                    out += data[pos:pos + header.size_in_bytes]
        return bytes(out)

    def close(self) -> None:
        try:
            state = self.state
        except Exception:
            return
        try:
            for info in state.processes:
                if info.pid and psutil.pid_exists(info.pid):
                    os.kill(info.pid, signal.SIGCONT)
            main(["stop", "--data-dir", self.data_dir, "--timeout-s", "20"])
        finally:
            for info in state.processes:
                try:
                    proc = psutil.Process(info.pid)
                    for p in [*proc.children(recursive=True), proc]:
                        p.kill()
                except (psutil.NoSuchProcess, ValueError):
                    pass

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()
