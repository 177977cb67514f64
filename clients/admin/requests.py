"""The admin client's shared request plumbing: the connections and metadata every part
of :class:`~clients.admin.Admin` sends through, the call timeout, the controller route,
and the per-item error convention.

Contract: :meth:`AdminRequests.timeout` turns a call's ``timeout_ms`` (None: the
client's ``request_timeout_ms``) into a positive int or raises ValueError;
:meth:`AdminRequests.to_controller` sends to the controller named by the last metadata
(any broker if it is not a known broker) and, when an item answers NOT_CONTROLLER,
refreshes the metadata and sends once more, all within ``timeout_ms``;
:func:`raise_first` raises the first :class:`~clients.protocol.errors.MiniKafkaError`
among a result's values when asked to, else returns the result as it is.

Costs: one round trip per request (plus a metadata refresh before the first controller
request and on NOT_CONTROLLER).  Thread-safety: none (one caller thread, as the Admin).
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

from clients.network.cluster_metadata import ClusterMetadata
from clients.network.node_connections import NodeConnections
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError

K = TypeVar("K")
V = TypeVar("V")


class AdminRequests:
    """Connections by node id, the metadata they refresh, and the default timeout."""

    def __init__(
        self, net: NodeConnections, metadata: ClusterMetadata, request_timeout_ms: int
    ) -> None:
        self.net = net
        self.metadata = metadata
        self.request_timeout_ms = request_timeout_ms

    def timeout(self, timeout_ms: int | None) -> int:
        t = self.request_timeout_ms if timeout_ms is None else timeout_ms
        if not isinstance(t, int) or t <= 0:
            raise ValueError(f"timeout_ms must be a positive int, got {t!r}")
        return t

    def to_controller(
        self, api: ApiKey, body: dict[str, Any], timeout_ms: int, results_field: str
    ) -> dict[str, Any]:
        """The controller's answer; ``results_field`` lists the items whose
        ``error_code`` may be NOT_CONTROLLER (then retried once after a refresh)."""
        deadline = time.monotonic() + timeout_ms / 1000
        for attempt in range(2):
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            if self.metadata.version == 0 or attempt:
                self.net.refresh_metadata([], remaining)
            controller = self.metadata.controller_id
            node = controller if self.metadata.broker(controller) is not None else None
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            response = self.net.request(node, api, body, remaining)
            codes = [t["error_code"] for t in response[results_field]]
            if ErrorCode.NOT_CONTROLLER not in codes:
                return response
        return response

    def close(self) -> None:
        self.net.close()


def raise_first(out: dict[K, V], raise_on_error: bool) -> dict[K, V]:
    """``out`` itself, after raising its first error value if ``raise_on_error``."""
    if raise_on_error:
        for value in out.values():
            if isinstance(value, MiniKafkaError):
                raise value
    return out
