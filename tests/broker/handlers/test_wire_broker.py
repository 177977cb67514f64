"""The admin and group APIs of a real standalone broker, as raw Kafka frames at the
lowest and the highest version we serve: the server hands each handler its request's
version, and the answer comes back in that version's shape.  (Every version, in depth,
through the codec without processes: test_versions.py.)
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response, encode_request_bytes
from clients.protocol.errors import ErrorCode
from clients.protocol.framing import read_frame
from clients.protocol.registry import APIS
from tests.broker.processes import BrokerProcess, wait_until

pytestmark = pytest.mark.multiprocess

Body = dict[str, Any]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"group_initial_rebalance_delay_ms": 0, "segment_bytes": 4096}
    with BrokerProcess(tmp_path_factory.mktemp("wire"), overrides=overrides) as b:
        yield b


class Raw:
    """One raw connection: request at a version, read the answer at that version."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation_id = 0

    def __call__(self, api: ApiKey, body: Body, version: int) -> Body:
        self.correlation_id += 1
        self.sock.sendall(encode_request_bytes(api, version, self.correlation_id, "raw", body))
        frame = read_frame(self.sock)
        assert frame is not None, f"{api.name} v{version}: the broker closed the connection"
        response = decode_response(frame, api, version)
        assert response.correlation_id == self.correlation_id
        return response.body

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[Raw]:
    conn = Raw(broker.port)
    try:
        yield conn
    finally:
        conn.close()


def ends(api: ApiKey) -> list[int]:
    return [APIS[api].min_version, APIS[api].max_version]


def create(raw: Raw, name: str, partitions: int, **configs: str) -> None:
    answer = raw(ApiKey.CREATE_TOPICS, {"timeout_ms": 5000, "topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": -1,
         "configs": [{"name": k, "value": v} for k, v in configs.items()]}]},
        APIS[ApiKey.CREATE_TOPICS].max_version)
    assert answer["topics"][0]["error_code"] == 0, answer


@pytest.mark.parametrize("low", [True, False])
def test_configs_partitions_and_cluster(raw: Raw, low: bool) -> None:
    def v(api: ApiKey) -> int:
        return ends(api)[0 if low else 1]

    name = f"cfg-{int(low)}"
    create(raw, name, 1, **{"retention.ms": "60000"})
    described = raw(ApiKey.DESCRIBE_CONFIGS, {"resources": [
        {"resource_type": 2, "resource_name": name, "configuration_keys": ["retention.ms"]},
        {"resource_type": 4, "resource_name": "0", "configuration_keys": ["segment.bytes"]}],
        "include_synonyms": True}, v(ApiKey.DESCRIBE_CONFIGS))["results"]
    assert [(c["name"], c["value"], c["config_source"]) for c in described[0]["configs"]] == [
        ("retention.ms", "60000", 1)]
    assert [(c["name"], c["value"], c["read_only"]) for c in described[1]["configs"]] == [
        ("segment.bytes", "4096", True)]
    altered = raw(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
        {"resource_type": 2, "resource_name": name, "configs": [
            {"name": "retention.ms", "config_operation": 1, "value": None},
            {"name": "cleanup.policy", "config_operation": 0, "value": "compact"}]}]},
        v(ApiKey.INCREMENTAL_ALTER_CONFIGS))
    assert altered["responses"][0]["error_code"] == 0
    replaced = raw(ApiKey.ALTER_CONFIGS, {"resources": [
        {"resource_type": 2, "resource_name": name, "configs": [
            {"name": "segment.bytes", "value": "8192"}]}]}, v(ApiKey.ALTER_CONFIGS))
    assert replaced["responses"][0]["error_code"] == 0
    now = raw(ApiKey.DESCRIBE_CONFIGS, {"resources": [
        {"resource_type": 2, "resource_name": name, "configuration_keys": None}]},
        v(ApiKey.DESCRIBE_CONFIGS))["results"][0]["configs"]
    overrides = {c["name"]: c["value"] for c in now if c["config_source"] == 1}
    assert overrides == {"segment.bytes": "8192"}  # AlterConfigs replaced everything
    grown = raw(ApiKey.CREATE_PARTITIONS, {"timeout_ms": 5000, "topics": [
        {"name": name, "count": 3, "assignments": None}]}, v(ApiKey.CREATE_PARTITIONS))
    assert grown["results"][0]["error_code"] == 0
    metadata = raw(ApiKey.METADATA, {"topics": [{"name": name}]}, v(ApiKey.METADATA))
    assert len(metadata["topics"][0]["partitions"]) == 3
    cluster = raw(ApiKey.DESCRIBE_CLUSTER, {}, v(ApiKey.DESCRIBE_CLUSTER))
    assert cluster["error_code"] == 0 and [b["broker_id"] for b in cluster["brokers"]] == [0]


@pytest.mark.parametrize("low", [True, False])
def test_delete_records_and_offsets(broker: BrokerProcess, raw: Raw, low: bool) -> None:
    def v(api: ApiKey) -> int:
        return ends(api)[0 if low else 1]

    name = f"del-{int(low)}"
    create(raw, name, 1)
    with Producer(broker.bootstrap, acks="all") as producer:
        for i in range(20):
            producer.send(name, b"x" * 100, partition=0, timestamp_ms=1000 + i).result(30)

    def offsets(timestamp: int) -> Body:
        return raw(ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": [{"name": name,
                   "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]},
                   v(ApiKey.LIST_OFFSETS))["topics"][0]["partitions"][0]

    assert offsets(-1)["offset"] == 20 and offsets(-2)["offset"] == 0
    assert offsets(-3)["offset"] == 19 and offsets(1005)["offset"] == 5
    deleted = raw(ApiKey.DELETE_RECORDS, {"timeout_ms": 5000, "topics": [{"name": name,
                  "partitions": [{"partition_index": 0, "offset": 12}]}]},
                  v(ApiKey.DELETE_RECORDS))["topics"][0]["partitions"][0]
    assert (deleted["error_code"], deleted["low_watermark"]) == (0, 12)
    assert offsets(-2)["offset"] == 12 and offsets(1005)["offset"] == 12
    dirs = raw(ApiKey.DESCRIBE_LOG_DIRS, {"topics": [{"name": name, "partitions": [0]}]},
               v(ApiKey.DESCRIBE_LOG_DIRS))
    (part,) = dirs["results"][0]["topics"][0]["partitions"]
    if not low:
        assert part["log_start_offset"] == 12 and part["log_end_offset"] == 20


def test_group_lifecycle_at_both_ends(raw: Raw) -> None:
    def ready() -> bool:
        low = raw(ApiKey.FIND_COORDINATOR, {"key": "g-low"}, 0)
        high = raw(ApiKey.FIND_COORDINATOR, {"coordinator_keys": ["g-high"]}, 4)
        return low["error_code"] == 0 and high["coordinators"][0]["error_code"] == 0

    def join(body: Body, version: int) -> Body:
        # FindCoordinator names the broker once it leads the group's offsets partition,
        # as Kafka's does; until that partition is loaded, group requests answer
        # COORDINATOR_LOAD_IN_PROGRESS (retriable), and clients retry.
        answers: list[Body] = []

        def loaded() -> bool:
            answers.append(raw(ApiKey.JOIN_GROUP, body, version))
            return answers[-1]["error_code"] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

        wait_until(loaded, 30, f"offsets partition of {body['group_id']} to load")
        return answers[-1]

    wait_until(ready, 30, "the group coordinator")
    for group, version in (("g-low", 0), ("g-high", APIS[ApiKey.JOIN_GROUP].max_version)):
        body = {"group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 5000,
                "member_id": "", "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"m"}]}
        joined = join(body, version)
        if version >= 4:
            assert joined["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
            joined = raw(ApiKey.JOIN_GROUP, {**body, "member_id": joined["member_id"]}, version)
        assert joined["error_code"] == 0 and joined["member_id"].startswith("raw-")
        member = joined["member_id"]
        sync_version = min(version, APIS[ApiKey.SYNC_GROUP].max_version)
        synced = raw(ApiKey.SYNC_GROUP, {
            "group_id": group, "generation_id": joined["generation_id"], "member_id": member,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": member, "assignment": b"a"}]}, sync_version)
        assert synced["error_code"] == 0
        if version == 0:
            left = raw(ApiKey.LEAVE_GROUP, {"group_id": group, "member_id": member}, 0)
            assert left["error_code"] == 0
        else:
            left = raw(ApiKey.LEAVE_GROUP, {"group_id": group, "members": [
                {"member_id": member}]}, APIS[ApiKey.LEAVE_GROUP].max_version)
            assert [m["error_code"] for m in left["members"]] == [0]
    listed = raw(ApiKey.LIST_GROUPS, {"states_filter": ["Empty"]}, 4)
    assert {"g-low", "g-high"} <= {g["group_id"] for g in listed["groups"]}
    for version in ends(ApiKey.DELETE_GROUPS):
        group = "g-low" if version == 0 else "g-high"
        deleted = raw(ApiKey.DELETE_GROUPS, {"groups_names": [group, "never"]}, version)
        assert [(r["group_id"], r["error_code"]) for r in deleted["results"]] == [
            (group, 0), ("never", ErrorCode.GROUP_ID_NOT_FOUND)]
    listed = raw(ApiKey.LIST_GROUPS, {}, 0)
    assert not {"g-low", "g-high"} & {g["group_id"] for g in listed["groups"]}
