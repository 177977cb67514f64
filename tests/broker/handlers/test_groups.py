"""Group coordinator APIs on a real 3-broker cluster, driven with raw requests.

FindCoordinator creates ``__consumer_offsets`` (compacted, replicated) on demand; a
group joins, syncs and commits on its coordinator; after the coordinator's broker is
SIGKILLed, another broker becomes the coordinator and serves the same group
(generation, members) and the committed offsets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from clients.admin import Admin
from clients.network.connection import BrokerConnection
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import OFFSETS_TOPIC
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

GROUP = "orders-app"
RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.NOT_COORDINATOR}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    overrides: dict[str, object] = {"group_initial_rebalance_delay_ms": 0,
                                    "offsets_topic_num_partitions": 3}
    with LocalCluster(tmp_path, 3, overrides) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic("orders", 2, 3, {})])
        yield c


@contextmanager
def connect(cluster: LocalCluster, node: str) -> Iterator[BrokerConnection]:
    conn = BrokerConnection("127.0.0.1", cluster.state.brokers[node].port,
                            request_timeout_ms=20_000)
    try:
        conn.connect()
        yield conn
    finally:
        conn.close()


def retry(request: Any, code_of: Any, what: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """Repeat ``request()`` while its answer has a retriable coordinator error."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = request()
        code = ErrorCode(code_of(answer))
        if code not in RETRIABLE:
            return answer  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still {code.name} after {timeout_s} s: {answer}")
        time.sleep(0.1)


def ask_coordinator(conn: BrokerConnection) -> dict[str, Any]:
    """FindCoordinator at our highest version (v4: a batch of keys); the group's entry."""
    answer = conn.request(ApiKey.FIND_COORDINATOR, {"coordinator_keys": [GROUP],
                                                    "key_type": 0})
    (entry,) = answer["coordinators"]
    assert entry["key"] == GROUP
    return entry  # type: ignore[no-any-return]


def find_coordinator(conn: BrokerConnection) -> dict[str, Any]:
    return retry(lambda: ask_coordinator(conn), lambda a: a["error_code"], "FindCoordinator")


def join_and_sync(conn: BrokerConnection) -> tuple[str, int]:
    body: dict[str, Any] = {
        "group_id": GROUP, "session_timeout_ms": 30_000, "rebalance_timeout_ms": 10_000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"orders"}]}
    first = retry(lambda: conn.request(ApiKey.JOIN_GROUP, body), lambda a: a["error_code"],
                  "JoinGroup")
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    body["member_id"] = first["member_id"]
    joined = conn.request(ApiKey.JOIN_GROUP, body)
    assert joined["error_code"] == 0 and joined["leader"] == body["member_id"]
    member_id, generation = joined["member_id"], joined["generation_id"]
    synced = conn.request(ApiKey.SYNC_GROUP, {
        "group_id": GROUP, "generation_id": generation, "member_id": member_id,
        "assignments": [{"member_id": member_id, "assignment": b"orders:0,1"}]})
    assert synced["error_code"] == 0 and synced["assignment"] == b"orders:0,1"
    return member_id, generation


def test_commit_survives_a_coordinator_kill(cluster: LocalCluster) -> None:
    with connect(cluster, "0") as any_broker:
        first = ask_coordinator(any_broker)
        assert first["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE  # being created
        coordinator = find_coordinator(any_broker)
        metadata = any_broker.request(ApiKey.METADATA, {"topics": [{"name": OFFSETS_TOPIC}]})
    topic = metadata["topics"][0]
    assert topic["error_code"] == 0 and len(topic["partitions"]) == 3
    assert {len(p["replica_nodes"]) for p in topic["partitions"]} == {3}
    configs = {c["name"]: c["value"] for c in topic["configs"]}  # our tagged extra
    assert configs["cleanup_policy"] == "compact"
    assert configs["min_insync_replicas"] == "2"

    old = str(coordinator["node_id"])
    with connect(cluster, old) as conn:
        member_id, generation = join_and_sync(conn)
        committed = conn.request(ApiKey.OFFSET_COMMIT, {
            "group_id": GROUP, "generation_id": generation, "member_id": member_id,
            "topics": [{"name": "orders", "partitions": [
                {"partition_index": 0, "committed_offset": 42, "committed_metadata": "m"},
                {"partition_index": 1, "committed_offset": 7}]}]})
        assert [p["error_code"] for p in committed["topics"][0]["partitions"]] == [0, 0]

    cluster.kill(old)
    survivor = next(n for n in cluster.state.brokers if n != old)
    with connect(cluster, survivor) as conn:
        def moved() -> dict[str, Any]:
            answer = ask_coordinator(conn)
            if answer["error_code"] == 0 and str(answer["node_id"]) == old:
                answer["error_code"] = ErrorCode.NOT_COORDINATOR  # not moved yet
            return answer

        new = retry(moved, lambda a: a["error_code"], "a new coordinator")
    with connect(cluster, str(new["node_id"])) as conn:
        fetched = retry(lambda: conn.request(ApiKey.OFFSET_FETCH, {"groups": [{
            "group_id": GROUP, "topics": [{"name": "orders", "partition_indexes": [0, 1]}]}]}
            )["groups"][0], lambda a: a["error_code"], "OffsetFetch on the new coordinator")
        offsets = {p["partition_index"]: (p["committed_offset"], p["metadata"])
                   for p in fetched["topics"][0]["partitions"]}
        assert offsets == {0: (42, "m"), 1: (7, "")}
        beat = conn.request(ApiKey.HEARTBEAT, {"group_id": GROUP, "generation_id": generation,
                                               "member_id": member_id})
        assert beat["error_code"] == 0, "the group (member, generation) moved too"
        described = conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": [GROUP]})["groups"][0]
        assert described["group_state"] == "Stable"
        assert [m["member_assignment"] for m in described["members"]] == [b"orders:0,1"]
        listed = conn.request(ApiKey.LIST_GROUPS, {})
        assert {"group_id": GROUP, "protocol_type": "consumer", "group_state": "Stable",
                "group_type": "classic"} in listed["groups"]
