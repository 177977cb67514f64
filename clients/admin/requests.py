"""The admin client's shared request plumbing: the connections and metadata every part
of :class:`~clients.admin.Admin` sends through, the call timeout, the controller route,
and the per-item error convention.

Contract: requests are built as the generated request types of
:mod:`clients.protocol.message_types` and answers come back typed as the caller's
response type (:meth:`AdminRequests.request`, :meth:`~AdminRequests.request_with_version`,
:meth:`~AdminRequests.refresh_metadata`: a cast, checked by nothing at run time; the
decoder fills every key), so mypy checks every field name the admin code reads or
writes.  :meth:`AdminRequests.timeout` turns a call's ``timeout_ms`` (None: the
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
from collections.abc import Mapping
from typing import TypeVar, cast

from clients.network.cluster_metadata import ClusterMetadata
from clients.network.connection import Body
from clients.network.node_connections import NodeConnections
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import MetadataResponse

K = TypeVar("K")
V = TypeVar("V")
# An answer's body type: a generated TypedDict of clients.protocol.message_types.
R = TypeVar("R", bound=Mapping[str, object])


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

    def request(
        self, node: int | None, api: ApiKey, body: Body, timeout_ms: float, answer: type[R]
    ) -> R:
        """The answer of ``node`` (None: the least loaded broker) typed as ``answer``
        (the generated type of ``api``'s response; the decoder fills every key)."""
        return self.request_with_version(node, api, body, timeout_ms, answer)[1]

    def request_with_version(
        self, node: int | None, api: ApiKey, body: Body, timeout_ms: float, answer: type[R]
    ) -> tuple[int, R]:
        """(the version it went out at, the answer typed as ``answer``)."""
        wire = body if callable(body) else dict(body)
        version, answer_body = self.net.request_with_version(node, api, wire, timeout_ms)
        return version, cast(R, answer_body)

    def refresh_metadata(
        self, topics: list[str] | None, timeout_ms: float, *,
        allow_auto_topic_creation: bool = True,
    ) -> MetadataResponse:  # fmt: skip
        """A Metadata round trip that updates :attr:`metadata`; its answer."""
        return cast(MetadataResponse, self.net.refresh_metadata(
            topics, timeout_ms, allow_auto_topic_creation=allow_auto_topic_creation))

    def to_controller(
        self, api: ApiKey, body: Mapping[str, object], timeout_ms: int, results_field: str,
        answer: type[R],
    ) -> R:  # fmt: skip
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
            response = self.net.request(node, api, dict(body), remaining)
            codes = [t["error_code"] for t in response[results_field]]
            if ErrorCode.NOT_CONTROLLER not in codes:
                break
        return cast(R, response)

    def close(self) -> None:
        self.net.close()


def raise_first(out: dict[K, V], raise_on_error: bool) -> dict[K, V]:
    """``out`` itself, after raising its first error value if ``raise_on_error``."""
    if raise_on_error:
        for value in out.values():
            if isinstance(value, MiniKafkaError):
                raise value
    return out
