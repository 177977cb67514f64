"""A real controller process for tests, and a blocking client that speaks to it.

:class:`ControllerProcess` runs ``python -m broker.controller --port 0`` and reads the
port from the "listening on" line; ``stop()`` (SIGTERM) and ``kill()`` (SIGKILL) end it
by PID and wait.  :class:`ControllerClient` sends one request at a time on one socket,
at our highest version of each API (as brokers do) unless told otherwise, and returns
the decoded response body (or None when the controller closed the connection).
"""

from __future__ import annotations

import itertools
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

from broker.metadata.records import METADATA_VERSION, METADATA_VERSION_FEATURE
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response, encode_request
from clients.protocol.fetch_session.handler import highest_fetch_version
from clients.protocol.framing import read_frame, send_buffers
from clients.protocol.registry import APIS
from tests.broker.processes import ServerProcess


def incarnation(name: str) -> bytes:
    """A stable UUID (16 bytes) for a test's incarnation name."""
    return uuid.uuid5(uuid.NAMESPACE_URL, name).bytes


FEATURES = [{"name": METADATA_VERSION_FEATURE, "min_supported_version": METADATA_VERSION,
             "max_supported_version": METADATA_VERSION}]


class ControllerProcess(ServerProcess):
    name = "controller"

    def __init__(self, data_dir: Path, overrides: dict[str, object] | None = None) -> None:
        super().__init__(data_dir, overrides=overrides)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "broker.controller", "--port", "0", "--data-dir",
                str(self.data_dir), "--log-level", "WARNING"]

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        """Wait for a process that ends by itself (e.g. refused to start)."""
        assert self.proc is not None
        code = self.proc.wait(timeout_s)
        self.kill()
        return code


class ControllerClient:
    def __init__(self, port: int, timeout_s: float = 60.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self._ids = itertools.count(1)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, api_key: ApiKey, body: dict[str, Any],
                version: int | None = None) -> dict[str, Any] | None:
        correlation_id = next(self._ids)
        if version is None:  # our highest (a Fetch by name: v12, the controller's highest)
            version = APIS[api_key].max_version
            if api_key == ApiKey.FETCH:
                version = highest_fetch_version(body, version)
        send_buffers(self.sock, encode_request(api_key, version, correlation_id, "test", body))
        frame = read_frame(self.sock)
        if frame is None:
            return None
        response = decode_response(frame, api_key, version)
        assert response.correlation_id == correlation_id
        return response.body

    def call(self, api_key: ApiKey, body: dict[str, Any],
             version: int | None = None) -> dict[str, Any]:
        response = self.request(api_key, body, version)
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

    def register(self, broker_id: int, incarnation_name: str, port: int,
                 features: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return self.call(ApiKey.BROKER_REGISTRATION, {
            "broker_id": broker_id, "cluster_id": "minikafka",
            "incarnation_id": incarnation(incarnation_name),
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": port,
                           "security_protocol": 0}],
            "features": FEATURES if features is None else features})

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

    def metadata(self, version: int | None = None) -> dict[str, Any]:
        return self.call(ApiKey.METADATA, {"topics": None}, version)
