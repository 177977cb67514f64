"""BrokerConnection's version negotiation against the fake broker: ApiVersions on connect
(with Kafka's v0 fallback), the highest common version per API, body builders."""

from __future__ import annotations

from typing import Any

import pytest

from clients.network import connection as connection_module
from clients.network.connection import BrokerConnection, NetworkError
from clients.network.node_connections import metadata_request
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import UnsupportedVersionError
from clients.protocol.registry import APIS
from tests.clients.fake_broker import FakeCluster


def connection(cluster: FakeCluster) -> BrokerConnection:
    conn = BrokerConnection("127.0.0.1", cluster.port(0), client_id="t",
                            request_timeout_ms=5000)  # fmt: skip
    conn.connect()
    return conn


def test_versions_learned_on_connect_and_highest_common_chosen(cluster: FakeCluster) -> None:
    cluster.version_caps = {int(ApiKey.METADATA): (0, 7), int(ApiKey.FETCH): (0, 20)}
    conn = connection(cluster)
    try:
        assert conn.api_versions[int(ApiKey.METADATA)] == (0, 7)
        assert conn.version_for(ApiKey.METADATA) == 7  # theirs is lower
        assert conn.version_for(ApiKey.FETCH) == APIS[ApiKey.FETCH].max_version  # ours is
        seen: list[int] = []

        def build(version: int) -> dict[str, Any]:
            seen.append(version)
            return metadata_request(None, version)

        version, body = conn.request_with_version(ApiKey.METADATA, build)
        assert (seen, version) == ([7], 7)
        assert body["cluster_id"] == "fake-cluster"
    finally:
        conn.close()
    assert cluster.version_log[0] == (int(ApiKey.API_VERSIONS), 3)
    assert (int(ApiKey.METADATA), 7) in cluster.version_log


def test_api_versions_fallback_to_the_version_the_broker_names(cluster: FakeCluster) -> None:
    cluster.version_caps = {int(ApiKey.API_VERSIONS): (0, 2)}
    conn = connection(cluster)
    try:
        assert conn.version_for(ApiKey.METADATA) == APIS[ApiKey.METADATA].max_version
    finally:
        conn.close()
    # v3 refused with Kafka's v0-shaped UNSUPPORTED_VERSION answer, then v2
    assert [v for k, v in cluster.version_log if k == ApiKey.API_VERSIONS] == [3, 2]


def test_unserved_api_or_no_common_version_raises_without_sending(cluster: FakeCluster) -> None:
    cluster.unserved.add(int(ApiKey.DESCRIBE_CLUSTER))
    cluster.version_caps = {int(ApiKey.PRODUCE): (0, 2)}  # we speak 3+
    conn = connection(cluster)
    try:
        with pytest.raises(UnsupportedVersionError, match="does not serve DescribeCluster"):
            conn.request(ApiKey.DESCRIBE_CLUSTER, {})
        with pytest.raises(UnsupportedVersionError, match="v0-2"):
            conn.request(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 1, "topics": []})
        assert conn.connected  # nothing was sent: the connection stays usable
        assert conn.request(ApiKey.METADATA, metadata_request([], 12))["topics"] == []
    finally:
        conn.close()
    assert cluster.errors == []


def test_metadata_request_shapes() -> None:
    assert metadata_request(None, 0)["topics"] == []  # v0: empty means every topic
    assert metadata_request(None, 1)["topics"] is None
    body = metadata_request(["a"], 12, allow_auto_topic_creation=False)
    assert body == {"topics": [{"name": "a"}], "allow_auto_topic_creation": False}


def test_a_failed_send_reports_the_failed_request_once(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request whose write fails is reported by the raised error alone; only the
    requests that were already in flight come back from take_failed."""
    conn = connection(cluster)
    try:
        waiting = conn.send(ApiKey.METADATA, lambda v: metadata_request(None, v))
        assert waiting is not None

        def broken_pipe(sock: object, buffers: object) -> int:
            raise BrokenPipeError("peer gone")

        monkeypatch.setattr(connection_module, "send_buffers", broken_pipe)
        with pytest.raises(NetworkError, match="send failed"):
            conn.send(ApiKey.METADATA, lambda v: metadata_request(None, v))
        failed = conn.take_failed()
        assert [r.request for r in failed] == [waiting]
        assert all(isinstance(r.error, NetworkError) for r in failed)
        assert conn.take_failed() == [] and not conn.connected
    finally:
        conn.close()
