"""How ``minikafka cluster`` commands reach a cluster's processes as their operator:
the OS's word on a process (running, paused, stopped) and one request to a process's
port with its TLS settings and, where needed, a login as one of the cluster's brokers
(derived from the cluster secret, which the operator holds anyway), bounded by
:data:`STATUS_TIMEOUT_MS` so a paused process never hangs a command.

Used by :mod:`broker.cluster.status` (the report) and :mod:`broker.cluster.controllers`
(the quorum's view).  Costs: one connection per request.  Thread-safety: a command-line
process, one thread.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import Any

import psutil

from broker.auth import read_cluster_secret
from broker.cluster.state import ProcessInfo, override_settings
from broker.network.tls import client_context
from clients.network.connection import BrokerConnection
from clients.network.sasl import SaslLogin
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import MiniKafkaError
from clients.protocol.scram import broker_password, broker_username

__all__ = ["STATUS_TIMEOUT_MS", "operator_access", "process_status", "status_request"]

STATUS_TIMEOUT_MS = 2_000


def process_status(pid: int) -> str:
    """What the OS says of ``pid``: ``running``, ``paused`` (SIGSTOP) or ``stopped`` (no
    such process, or a zombie)."""
    if pid <= 0:  # never started (psutil's "stopped" would read as paused below)
        return "stopped"
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return "stopped"
    return {psutil.STATUS_STOPPED: "paused", psutil.STATUS_ZOMBIE: "stopped"}.get(status,
                                                                                  "running")


def status_request(port: int, api: ApiKey, body: dict[str, Any],
                   timeout_ms: int = STATUS_TIMEOUT_MS, sasl: SaslLogin | None = None,
                   tls: ssl.SSLContext | None = None) -> dict[str, Any]:
    conn = BrokerConnection("127.0.0.1", port, node_id=-1, client_id="cluster-status",
                            request_timeout_ms=timeout_ms, connect_timeout_ms=timeout_ms,
                            sasl=sasl, ssl_context=tls)
    try:
        return conn.request(api, body, timeout_ms=timeout_ms)
    finally:
        conn.close()


def operator_access(node: int, info: ProcessInfo, login: bool) -> dict[str, Any]:
    """How to reach a process as its operator: its TLS settings and, when ``login`` and
    the process has a cluster secret, a login as ``broker-<node>`` derived from it (the
    secret is the operator's key; both read from the process's command line)."""
    overrides = override_settings(info.argv)
    access: dict[str, Any] = {}
    if overrides.get("ssl_certfile"):
        with contextlib.suppress(MiniKafkaError):  # unreadable files: no offsets shown
            access["tls"] = client_context(overrides.get("ssl_cafile", ""),
                                           overrides["ssl_certfile"],
                                           overrides.get("ssl_keyfile", ""))
    secret_file = overrides.get("cluster_secret_file", "")
    if login and secret_file:
        try:
            secret = read_cluster_secret(secret_file)
        except MiniKafkaError:
            return access
        access["sasl"] = SaslLogin("SCRAM-SHA-256", broker_username(node),
                                   broker_password(secret, node))
    return access
