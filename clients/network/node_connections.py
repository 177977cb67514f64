"""Blocking requests by node id for the consumer and the admin client: a connection per
node (:class:`~clients.network.connection.BrokerConnection`), bootstrap addresses as
pseudo nodes, the least loaded broker, and the Metadata request that refreshes the cache.

Contract: node ids come from the metadata; bootstrap addresses are pseudo nodes
``-1 - i``; every call is bounded by its ``timeout_ms``; responses of other requests
seen while a blocking call waits are kept for the next :meth:`NodeConnections.poll`.

Costs: one connection per node contacted (connect: see :mod:`clients.network.connection`);
a blocking request is one round trip.  Thread-safety: none (one caller thread).
"""

from __future__ import annotations

import ssl
from typing import Any, cast

from clients.network.cluster_metadata import ClusterMetadata
from clients.network.connection import Body, BrokerConnection, NetworkError
from clients.network.poller import Poller
from clients.network.sasl import SaslLogin
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import MiniKafkaError
from clients.protocol.message_types import MetadataRequest, MetadataResponse
from clients.protocol.request_channel import ClientResponse


class NodeConnections:
    """Blocking request helper for the consumer and admin client: connections by node id.

    Node ids come from the metadata; bootstrap addresses are pseudo nodes ``-1 - i``.
    Every call is bounded by its ``timeout_ms``.  Not thread-safe (one caller thread).
    """

    def __init__(
        self,
        bootstrap: list[tuple[str, int]],
        metadata: ClusterMetadata,
        *,
        client_id: str | None,
        request_timeout_ms: int = 30_000,
        max_in_flight: int = 5,
        sasl: SaslLogin | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.sasl = sasl
        self.ssl_context = ssl_context
        self.metadata = metadata
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight
        self._conns: dict[int, BrokerConnection] = {}
        self._rotation = 0
        self.poller = Poller()
        self.other_responses: list[ClientResponse] = []  # seen by request(), not its own

    def connections(self) -> list[BrokerConnection]:
        return list(self._conns.values())

    def get(self, node_id: int) -> BrokerConnection:
        """The connected connection to ``node_id`` (NetworkError if unreachable/unknown)."""
        conn = self._conns.get(node_id)
        if conn is None:
            if node_id >= 0:
                broker = self.metadata.broker(node_id)
                if broker is None:
                    raise NetworkError(f"node {node_id} is not in the cluster metadata")
                host, port = broker.host, broker.port
            else:
                host, port = self.bootstrap[-1 - node_id]
            conn = BrokerConnection(
                host, port, node_id=node_id, client_id=self.client_id,
                request_timeout_ms=self.request_timeout_ms, max_in_flight=self.max_in_flight,
                sasl=self.sasl, ssl_context=self.ssl_context,
            )  # fmt: skip
            self._conns[node_id] = conn
        conn.connect()
        return conn

    def least_loaded(self) -> BrokerConnection:
        live = [c for c in self._conns.values() if c.can_send]
        if live:
            return min(live, key=lambda c: c.in_flight_count)
        nodes = [b.node_id for b in self.metadata.brokers()]
        nodes += [-1 - i for i in range(len(self.bootstrap))]
        errors = []
        for _ in range(len(nodes)):
            node = nodes[self._rotation % len(nodes)]
            self._rotation += 1
            try:
                conn = self.get(node)
            except NetworkError as e:
                errors.append(e.message)
                continue
            if conn.can_send:
                return conn
        raise NetworkError("no broker reachable: " + "; ".join(errors))

    def request(
        self, node_id: int | None, api_key: ApiKey, body: Body, timeout_ms: float
    ) -> dict[str, Any]:
        """Blocking round trip to ``node_id`` (None: least loaded broker)."""
        return self.request_with_version(node_id, api_key, body, timeout_ms)[1]

    def request_with_version(
        self, node_id: int | None, api_key: ApiKey, body: Body, timeout_ms: float
    ) -> tuple[int, dict[str, Any]]:
        """Like :meth:`request`; returns (the version the request went out at, body)."""
        conn = self.least_loaded() if node_id is None else self.get(node_id)
        return conn.request_with_version(
            api_key, body, timeout_ms=max(1, int(timeout_ms)), others=self.other_responses
        )

    def refresh_metadata(
        self, topics: list[str] | None, timeout_ms: float, *,
        allow_auto_topic_creation: bool = True,
    ) -> dict[str, Any]:  # fmt: skip
        """Blocking Metadata request; the cache is updated; returns the response body.

        ``topics`` None asks for every topic (at v0, which has no null, an empty list
        does; asking for no topic at v0 is then not possible and lists them all).
        """
        self.metadata.attempt_started()
        try:
            body = self.request(
                None, ApiKey.METADATA,
                lambda v: metadata_request(topics, v, allow_auto_topic_creation),
                timeout_ms,
            )  # fmt: skip
        except MiniKafkaError:
            self.metadata.failed_update()
            raise
        self.metadata.update(cast(MetadataResponse, body))
        return body

    def poll(self, timeout_ms: float) -> list[ClientResponse]:
        """Responses collected by earlier blocking requests, else wait for new ones."""
        if self.other_responses:
            out, self.other_responses = self.other_responses, []
            return out
        return self.poller.poll(self.connections(), timeout_ms)

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        self.poller.close()


def metadata_request(
    topics: list[str] | None, version: int, allow_auto_topic_creation: bool = True
) -> MetadataRequest:
    """The Metadata request body at ``version``: ``topics`` None asks for every topic."""
    if topics is None:
        return {"topics": [] if version == 0 else None,
                "allow_auto_topic_creation": allow_auto_topic_creation}  # fmt: skip
    return {"topics": [{"name": t} for t in topics],
            "allow_auto_topic_creation": allow_auto_topic_creation}  # fmt: skip
