"""A real 3-broker cluster (controller + brokers as processes) through the cluster script.

Replication factor 3, acks=all, min ISR 2.  Faults are injected with the same commands
users run (``cluster kill|restart|pause|resume``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.network.connection import BrokerConnection
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.test_broker_integration import consume_all

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

FAST: dict[str, object] = {"replica_lag_time_max_ms": 1500}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, 3, FAST) as c:
        yield c


def create(cluster: LocalCluster, name: str, partitions: int = 1) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name, partitions, 3, {"min_insync_replicas": "2"})])


def all_in_sync(p: dict) -> bool:
    offsets = [o for o in p["replica_offsets"].values()]
    return (len(p["isr"]) == 3 and all(o is not None for o in offsets)
            and len({(o["hw"], o["leo"]) for o in offsets}) == 1)


def test_rf3_acks_all_replicas_byte_identical_up_to_hw(cluster: LocalCluster) -> None:
    create(cluster, "replicated", 2)
    acked = 0
    with Producer(cluster.bootstrap, acks="all", batch_size=256 * 1024) as producer:
        futures = [producer.send_bulk("replicated", [f"r{i}-{j}".encode() * 5
                                                     for j in range(1000)], partition=i % 2)
                   for i in range(200)]
        producer.flush()
        acked = sum(f.result(60).record_count for f in futures)
    assert acked == 200_000
    for index in range(2):
        p = cluster.wait_partition("replicated", index, all_in_sync, "replicas in sync")
        hw = p["replica_offsets"][str(p["leader"])]["hw"]
        assert hw == 100_000
        copies = {cluster.replica_bytes(r, "replicated", index, hw)
                  for r in p["replica_offsets"]}
        assert len(copies) == 1, "replicas differ below the HW"
    received = consume_all(cluster.bootstrap, "replicated", 2, 200_000)
    assert sum(map(len, received.values())) == 200_000


def _produce_one(bootstrap: str, value: bytes, retries: int = 2_147_483_647) -> int:
    with Producer(bootstrap, acks="all", retries=retries, delivery_timeout_ms=30_000,
                  request_timeout_ms=10_000) as producer:
        return producer.send("isr", value, partition=0).result(60).offset


def test_isr_shrinks_and_expands_with_follower_faults(cluster: LocalCluster) -> None:
    create(cluster, "isr")
    p = cluster.partition("isr", 0)
    leader = str(p["leader"])
    followers = [str(r) for r in p["replicas"] if str(r) != leader]
    acked = [b"before"]
    _produce_one(cluster.bootstrap, b"before")

    cluster.kill(followers[0])
    cluster.wait_partition("isr", 0, lambda p: len(p["isr"]) == 2, "ISR shrinks to 2")
    _produce_one(cluster.bootstrap, b"one follower down")  # min ISR 2 still met
    acked.append(b"one follower down")

    cluster.pause(followers[1])
    cluster.wait_partition("isr", 0, lambda p: p["isr"] == [int(leader)], "ISR shrinks to 1")
    with pytest.raises(MiniKafkaError) as info:
        _produce_one(cluster.bootstrap, b"refused", retries=0)
    assert info.value.code in (ErrorCode.NOT_ENOUGH_REPLICAS,
                               ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)

    cluster.resume(followers[1])
    cluster.restart(followers[0])
    cluster.wait_partition("isr", 0, all_in_sync, "both followers back in the ISR")
    _produce_one(cluster.bootstrap, b"all back")
    acked.append(b"all back")
    values = [r.value for r in consume_all(cluster.bootstrap, "isr", 1, len(acked))[0]]
    assert [v for v in values if v != b"refused"] == acked


def test_controller_restart_loses_nothing(cluster: LocalCluster) -> None:
    create(cluster, "survivor")
    with Producer(cluster.bootstrap, acks="all") as producer:
        first = [producer.send("survivor", f"a{i}".encode(), partition=0) for i in range(500)]
        producer.flush()
        assert all(f.result(30) for f in first)
        cluster.kill("controller")
        cluster.restart("controller")
        second = [producer.send("survivor", f"b{i}".encode(), partition=0) for i in range(500)]
        producer.flush()
        assert all(f.result(60) for f in second)
    create(cluster, "after-restart")  # the controller kept its state and serves again
    values = [r.value for r in consume_all(cluster.bootstrap, "survivor", 1, 1000)[0]]
    assert values == [f"a{i}".encode() for i in range(500)] + [f"b{i}".encode()
                                                              for i in range(500)]


def _ask(port: int, api: ApiKey, body: dict) -> dict:
    conn = BrokerConnection("127.0.0.1", port, client_id="test", request_timeout_ms=30_000)
    try:
        return conn.request(api, body)
    finally:
        conn.close()


def test_create_partitions_and_config_changes_reach_every_broker(cluster: LocalCluster) -> None:
    create(cluster, "grow")
    ports = [info.port for _, info in sorted(cluster.state.brokers.items())]
    grown = _ask(ports[0], ApiKey.CREATE_PARTITIONS, {"topics": [
        {"name": "grow", "count": 3, "assignments": None},
        {"name": "nope", "count": 2, "assignments": None}],
        "timeout_ms": 30_000, "validate_only": False})
    assert [(r["name"], r["error_code"]) for r in grown["results"]] == [
        ("grow", 0), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    for index in range(3):  # every new partition has a leader and a full ISR
        cluster.wait_partition("grow", index, all_in_sync, "replicas in sync")

    # small segments, set through another broker: every replica's open log rolls
    changed = _ask(ports[1], ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
        {"resource_type": 2, "resource_name": "grow", "configs": [
            {"name": "segment.bytes", "config_operation": 0, "value": "4096"}]},
        {"resource_type": 4, "resource_name": "0", "configs": [
            {"name": "log.retention.ms", "config_operation": 0, "value": "1"}]}],
        "validate_only": False})
    assert [r["error_code"] for r in changed["responses"]] == [0, ErrorCode.INVALID_REQUEST]
    described = _ask(ports[2], ApiKey.DESCRIBE_CONFIGS, {"resources": [
        {"resource_type": 2, "resource_name": "grow", "configuration_keys": ["segment.bytes"]}],
        "include_synonyms": False, "include_documentation": False})
    (entry,) = described["results"][0]["configs"]
    assert (entry["name"], entry["value"]) == ("segment.bytes", "4096")

    # small batches that do not grow: many of them, so the 4 KiB segments roll
    with Producer(cluster.bootstrap, acks="all", batch_size=1024, batch_max_size=0) as producer:
        futures = [producer.send("grow", f"v{i}".encode() * 40, partition=i % 3)
                   for i in range(600)]
        producer.flush()
        assert all(f.result(60) for f in futures)
    for index in range(3):
        p = cluster.wait_partition("grow", index, all_in_sync, "replicas in sync")
        assert p["replica_offsets"][str(p["leader"])]["hw"] == 200
        for replica in p["replica_offsets"]:
            directory = Path(cluster.state.brokers[replica].data_dir) / f"grow-{index}"
            assert len(list(directory.glob("*.log"))) > 2, (replica, index)
    received = consume_all(cluster.bootstrap, "grow", 3, 600)
    assert sum(map(len, received.values())) == 600
