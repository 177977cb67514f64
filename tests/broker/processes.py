"""Real broker processes for integration tests: start, find the port, stop by PID.

:class:`ServerProcess` is the lifecycle shared by brokers and the controller.  A
:class:`BrokerProcess` runs ``python -m broker start --port 0`` and reads the port
from the "listening on" line, which a broker prints once it serves (with a controller:
once its metadata caught up; ``spawn()`` then ``wait_listening()`` for a test that
starts it before its controller).  ``stop()`` sends SIGTERM to the main process and waits;
``kill()`` sends SIGKILL.  Either way every process of the broker (the network
processes too, found with psutil before the main process goes) is stopped by PID, so a
failing test leaves nothing running.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

import psutil

ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"listening on [\d.]+:(\d+)")


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str,
               interval_s: float = 0.02) -> None:
    """Poll ``condition`` until it holds; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


class ServerProcess:
    """A server started as ``python -m ...`` that prints "listening on HOST:PORT"."""

    name = "server"

    def __init__(self, data_dir: Path, *, overrides: dict[str, object] | None = None) -> None:
        self.data_dir = data_dir
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.output: list[str] = []
        self._children: set[int] = set()
        self._reader = threading.Thread()
        self._listening = threading.Event()  # the "listening on" line was read

    def command(self) -> list[str]:
        raise NotImplementedError

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = 60.0) -> Self:
        """Spawn and wait until it serves (its "listening on" line)."""
        return self.spawn().wait_listening(timeout_s)

    def spawn(self) -> Self:
        """Start the process without waiting for it to serve (:meth:`wait_listening`).
        A broker with a controller prints "listening on" only once its metadata caught
        up; a test that starts it before its controller needs this."""
        cmd = self.command()
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env, cwd=ROOT)
        found = self._listening = threading.Event()

        def reader(proc: subprocess.Popen[str]) -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.output.append(line)
                match = _LISTENING.search(line)
                if match and not found.is_set():
                    self.port = int(match.group(1))
                    found.set()

        self._reader = threading.Thread(target=reader, args=(self.proc,), daemon=True)
        self._reader.start()
        return self

    def wait_listening(self, timeout_s: float = 60.0) -> Self:
        """Wait for the "listening on" line (the process serves); on failure it is
        killed and the test fails with its last output."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while not self._listening.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"{self.name} did not start:\n"
                                     + "".join(self.output[-40:]))
        self._remember_children()
        return self

    def _remember_children(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(psutil.NoSuchProcess):
            self._children |= {c.pid for c in psutil.Process(self.proc.pid).children(True)}

    def stop(self, timeout_s: float = 30.0) -> int | None:
        return self._end(signal.SIGTERM, timeout_s)

    def kill(self) -> int | None:
        return self._end(signal.SIGKILL, 10.0)

    def _end(self, sig: signal.Signals, timeout_s: float) -> int | None:
        if self.proc is None:
            return None
        self._remember_children()
        code = None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                code = self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                code = self.proc.wait(10)
        else:
            code = self.proc.returncode
        for pid in self._children:
            try:
                child = psutil.Process(pid)
                child.wait(5)
            except psutil.NoSuchProcess:
                continue
            except psutil.TimeoutExpired:
                child.kill()
        self._children.clear()
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None
        return code

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class BrokerProcess(ServerProcess):
    """``python -m broker start --port 0`` (a standalone broker unless extra args say)."""

    name = "broker"

    def __init__(self, data_dir: Path, *, node_id: int = 0, port: int = 0,
                 overrides: dict[str, object] | None = None,
                 extra_args: list[str] | None = None) -> None:
        super().__init__(data_dir, overrides=overrides)
        self.node_id = node_id
        self.requested_port = port
        self.extra_args = list(extra_args or [])

    def command(self) -> list[str]:
        return [sys.executable, "-m", "broker", "start", "--node-id", str(self.node_id),
                "--port", str(self.requested_port or self.port), "--data-dir",
                str(self.data_dir), "--log-level", "WARNING", *self.extra_args]

    def network_pids(self) -> list[int]:
        self._remember_children()
        assert self.proc is not None
        try:
            return [c.pid for c in psutil.Process(self.proc.pid).children(True)
                    if "broker.network" in " ".join(c.cmdline())]
        except psutil.NoSuchProcess:
            return []

