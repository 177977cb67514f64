"""Cluster operations of :class:`~clients.admin.Admin`: the cluster id, the controller
and the brokers.

Contract: ``describe_cluster`` uses DescribeCluster, or Metadata (the client's
:class:`~clients.network.cluster_metadata.ClusterMetadata`, refreshed) on a broker
that does not serve it; an error in the answer is raised.

Costs: one round trip per call.  Thread-safety: none (one caller thread, as the Admin).
"""

from __future__ import annotations

from clients.admin.requests import AdminRequests
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, UnsupportedVersionError, error_for
from clients.protocol.message_types import DescribeClusterRequest, DescribeClusterResponse
from clients.types import BrokerNode, ClusterDescription


class ClusterAdmin:
    """DescribeCluster, with Metadata as the fallback."""

    def __init__(self, requests: AdminRequests) -> None:
        self._requests = requests
        self._metadata = requests.metadata

    def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        timeout = self._requests.timeout(timeout_ms)
        request: DescribeClusterRequest = {"include_cluster_authorized_operations": False}
        try:
            body = self._requests.request(None, ApiKey.DESCRIBE_CLUSTER, request, timeout,
                                          DescribeClusterResponse)
        except UnsupportedVersionError:
            self._requests.refresh_metadata([], timeout)
            md = self._metadata
            return ClusterDescription(md.cluster_id, md.controller_id, md.brokers())
        if body["error_code"] != ErrorCode.NONE:
            raise error_for(body["error_code"], body["error_message"] or "describe cluster")
        brokers = sorted(BrokerNode(b["broker_id"], b["host"], b["port"], b["rack"])
                         for b in body["brokers"])  # fmt: skip
        return ClusterDescription(body["cluster_id"], body["controller_id"], brokers)
