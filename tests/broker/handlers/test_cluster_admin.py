"""The admin APIs a broker forwards to the controller, on a real 3-broker cluster.

CreatePartitions, AlterConfigs and IncrementalAlterConfigs sent to any broker are
forwarded to the controller as they came and answered once that broker's metadata image
shows the change; every broker then describes the same configs and applies them to its
replicas.  DeleteRecords on the leader moves the log start offset of the followers too
(they follow it through Fetch).  Requests are raw frames at our highest and lowest
versions, through the client connection (which negotiates ApiVersions first).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from clients.network.connection import BrokerConnection
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.registry import APIS
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

Body = dict[str, Any]
TOPIC = "admin"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("admin")), 3) as c:
        yield c


@contextmanager
def connect(cluster: LocalCluster, node: str) -> Iterator[BrokerConnection]:
    conn = BrokerConnection("127.0.0.1", cluster.state.brokers[node].port,
                            request_timeout_ms=30_000)
    try:
        conn.connect()
        yield conn
    finally:
        conn.close()


def at(conn: BrokerConnection, api: ApiKey, body: Body, low: bool = False) -> Body:
    """One round trip at our lowest or highest version of ``api``."""
    version = APIS[api].min_version if low else APIS[api].max_version
    request = conn.send(api, body, api_version=version)
    assert request is not None
    while True:
        for response in conn.poll(30_000):
            if response.request is request:
                if response.error is not None:
                    raise response.error
                assert response.body is not None
                return response.body


def topic_configs(conn: BrokerConnection, name: str) -> dict[str, tuple[str, int]]:
    results = at(conn, ApiKey.DESCRIBE_CONFIGS, {"resources": [
        {"resource_type": 2, "resource_name": name, "configuration_keys": None}]})["results"]
    assert results[0]["error_code"] == 0, results
    return {c["name"]: (c["value"], c["config_source"]) for c in results[0]["configs"]}


@pytest.mark.parametrize("low", [False, True])
def test_forwarded_admin_requests(cluster: LocalCluster, low: bool) -> None:
    name = f"{TOPIC}-{int(low)}"
    with connect(cluster, "0") as first, connect(cluster, "1") as second:
        created = at(first, ApiKey.CREATE_TOPICS, {"timeout_ms": 15_000, "topics": [
            {"name": name, "num_partitions": 1, "replication_factor": 3,
             "configs": [{"name": "retention.ms", "value": "600000"}]}]}, low)
        assert created["topics"][0]["error_code"] == 0, created
        grown = at(first, ApiKey.CREATE_PARTITIONS, {"timeout_ms": 15_000, "topics": [
            {"name": name, "count": 2, "assignments": None},
            {"name": "no-such-topic", "count": 2, "assignments": None}]}, low)
        assert [r["error_code"] for r in grown["results"]] == [
            0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        metadata = at(first, ApiKey.METADATA, {"topics": [{"name": name}]}, low)
        assert len(metadata["topics"][0]["partitions"]) == 2  # visible when answered

        altered = at(first, ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": name, "configs": [
                {"name": "segment.bytes", "config_operation": 0, "value": "16384"},
                {"name": "retention.ms", "config_operation": 1, "value": None}]}]}, low)
        assert altered["responses"][0]["error_code"] == 0, altered
        assert topic_configs(first, name)["segment.bytes"] == ("16384", 1)
        wait_until(lambda: topic_configs(second, name)["segment.bytes"] == ("16384", 1), 30,
                   "the other broker's image")
        assert topic_configs(second, name)["retention.ms"][1] != 1  # back to the default
        refused = at(first, ApiKey.ALTER_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": name, "configs": [
                {"name": "segment.bytes", "value": "tiny"}]}]}, low)
        assert refused["responses"][0]["error_code"] == ErrorCode.INVALID_CONFIG
        replaced = at(second, ApiKey.ALTER_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": name, "configs": [
                {"name": "retention.ms", "value": "900000"}]}]}, low)
        assert replaced["responses"][0]["error_code"] == 0, replaced
        configs = topic_configs(second, name)
        assert configs["retention.ms"] == ("900000", 1) and configs["segment.bytes"][1] != 1


def test_delete_records_moves_every_replica(cluster: LocalCluster) -> None:
    name = f"{TOPIC}-records"
    with connect(cluster, "0") as conn:
        created = at(conn, ApiKey.CREATE_TOPICS, {"timeout_ms": 15_000, "topics": [
            {"name": name, "num_partitions": 1, "replication_factor": 3}]})
        assert created["topics"][0]["error_code"] == 0, created
    with Producer(cluster.bootstrap, acks="all") as producer:
        for i in range(30):
            producer.send(name, f"r{i}".encode(), partition=0).result(30)
    leader = str(cluster.partition(name, 0)["leader"])
    with connect(cluster, leader) as conn:
        deleted = at(conn, ApiKey.DELETE_RECORDS, {"timeout_ms": 10_000, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "offset": 25}]}]})
        part = deleted["topics"][0]["partitions"][0]
        assert (part["error_code"], part["low_watermark"]) == (0, 25)
    follower = next(n for n in cluster.state.brokers if n != leader)
    with connect(cluster, follower) as conn:
        refused = at(conn, ApiKey.DELETE_RECORDS, {"timeout_ms": 10_000, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "offset": 26}]}]})
        assert refused["topics"][0]["partitions"][0]["error_code"] == \
            ErrorCode.NOT_LEADER_OR_FOLLOWER

    def log_starts() -> set[int]:
        starts = set()
        for node in cluster.state.brokers:
            with connect(cluster, node) as conn:
                dirs = at(conn, ApiKey.DESCRIBE_LOG_DIRS, {"topics": [
                    {"name": name, "partitions": [0]}]})
                for topic in dirs["results"][0]["topics"]:
                    starts |= {p["log_start_offset"] for p in topic["partitions"]}
        return starts

    wait_until(lambda: log_starts() == {25}, 30, "every replica's log start at 25")
