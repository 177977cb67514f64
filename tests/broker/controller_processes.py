"""A real controller process for tests, and a blocking client that speaks to it.

:class:`ControllerProcess` runs ``python -m broker.controller --port 0`` and reads the
port from the "listening on" line; ``stop()`` (SIGTERM) and ``kill()`` (SIGKILL) end it
by PID and wait.  :class:`ControllerClient` sends one request at a time on one socket
and returns the decoded response body (or None when the controller closed the
connection).
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from clients.api import ApiKey
from clients.protocol import decode_response, encode_request, read_frame, send_buffers

ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"controller listening on [\d.]+:(\d+)")


class ControllerProcess:
    def __init__(self, data_dir: Path, overrides: dict[str, object] | None = None) -> None:
        self.data_dir = data_dir
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.output: list[str] = []
        self._reader = threading.Thread()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = 30.0) -> ControllerProcess:
        cmd = [sys.executable, "-m", "broker.controller", "--port", "0", "--data-dir",
               str(self.data_dir), "--log-level", "WARNING"]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                                     cwd=ROOT)
        found = threading.Event()

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
        deadline = time.monotonic() + timeout_s
        while not found.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError("controller did not start:\n" + "".join(self.output[-40:]))
        return self

    def stop(self, timeout_s: float = 30.0) -> int | None:
        return self._end(signal.SIGTERM, timeout_s)

    def kill(self) -> int | None:
        return self._end(signal.SIGKILL, 10.0)

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        """Wait for a process that ends by itself (e.g. refused to start)."""
        assert self.proc is not None
        code = self.proc.wait(timeout_s)
        self._end(signal.SIGKILL, 1.0)
        return code

    def _end(self, sig: signal.Signals, timeout_s: float) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                code = self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                code = self.proc.wait(10)
        else:
            code = self.proc.returncode
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None
        return code


class ControllerClient:
    def __init__(self, port: int, timeout_s: float = 60.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self._ids = itertools.count(1)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, api_key: ApiKey, body: dict[str, Any]) -> dict[str, Any] | None:
        correlation_id = next(self._ids)
        send_buffers(self.sock, encode_request(api_key, 0, correlation_id, "test", body))
        frame = read_frame(self.sock)
        if frame is None:
            return None
        response = decode_response(frame, api_key, 0)
        assert response.correlation_id == correlation_id
        return response.body

    def call(self, api_key: ApiKey, body: dict[str, Any]) -> dict[str, Any]:
        response = self.request(api_key, body)
        assert response is not None, f"the controller closed the connection on {api_key.name}"
        return response

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()

    # -- the requests a broker sends ----------------------------------------------------

    def register(self, broker_id: int, incarnation_id: str, port: int) -> dict[str, Any]:
        return self.call(ApiKey.BROKER_REGISTRATION, {
            "broker_id": broker_id, "cluster_id": "minikafka", "incarnation_id": incarnation_id,
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": port}]})

    def heartbeat(self, broker_id: int, broker_epoch: int, offset: int,
                  **flags: bool) -> dict[str, Any]:
        return self.call(ApiKey.BROKER_HEARTBEAT, {
            "broker_id": broker_id, "broker_epoch": broker_epoch,
            "current_metadata_offset": offset, **flags})

    def fetch_metadata(self, offset: int, max_wait_ms: int = 0,
                       max_bytes: int = 1 << 20) -> dict[str, Any]:
        body = self.call(ApiKey.FETCH, {
            "replica_id": 1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": max_bytes,
            "topics": [{"name": "__cluster_metadata", "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": max_bytes}]}]})
        return dict(body["responses"][0]["partitions"][0])

    def metadata(self) -> dict[str, Any]:
        return self.call(ApiKey.METADATA, {"topics": None})
