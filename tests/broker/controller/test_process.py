"""The real controller process over the wire: registration, heartbeats, topics, metadata
long poll, fencing, bad input, and a SIGKILL restart that keeps its state."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    decode_record_batches,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response, encode_request_bytes
from clients.protocol.errors import ErrorCode
from clients.protocol.framing import read_frame
from tests.broker.controller.processes import (
    FEATURES,
    ControllerClient,
    ControllerProcess,
    incarnation,
)

pytestmark = pytest.mark.multiprocess

SESSION_MS = 1_500


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(tmp_path / "controller", {
        "broker_session_timeout_ms": SESSION_MS, "metadata_snapshot_interval_records": 4})
    try:
        yield proc.start()
    finally:
        proc.kill()


def wait_for(condition: Any, what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def replay(client: ControllerClient, image: MetadataImage) -> MetadataImage:
    """What a broker does: fetch from its last applied offset and apply, until caught up."""
    while True:
        part = client.fetch_metadata(image.last_applied_offset + 1)
        assert part["error_code"] == 0, part
        for offset, record in decode_record_batches(bytes(part["records"]),
                                                    image.last_applied_offset + 1):
            image.apply(record, offset)
        if image.last_applied_offset + 1 >= part["high_watermark"]:
            return image


def start_brokers(client: ControllerClient, ids: list[int]) -> dict[int, int]:
    epochs = {}
    for b in ids:
        reply = client.register(b, f"incarnation-{b}", 9100 + b)
        assert reply["error_code"] == 0, reply
        epochs[b] = reply["broker_epoch"]
    hwm = client.fetch_metadata(0)["high_watermark"]
    for b in ids:
        reply = client.heartbeat(b, epochs[b], hwm - 1)
        assert reply["is_caught_up"] and not reply["is_fenced"], reply
    return epochs


def test_brokers_topics_long_poll_and_restart(controller: ControllerProcess) -> None:
    client = ControllerClient(controller.port)
    epochs = start_brokers(client, [1, 2])
    created = client.call(ApiKey.CREATE_TOPICS, {"topics": [
        {"name": "orders", "num_partitions": 2, "replication_factor": 2,
         "configs": [{"name": "min.insync.replicas", "value": "2"}]}], "timeout_ms": 1000})
    assert created["topics"][0]["error_code"] == 0, created
    image = replay(client, MetadataImage())
    assert image.unfenced_brokers() == [1, 2]
    assert sorted(s.leader for _, _, s in image.partitions()) == [1, 2]
    assert image.topics["orders"].configs["min_insync_replicas"] == "2"

    # a long poll at the log end is answered as soon as another connection appends (well
    # before its 60 s max wait; if it arrives after the append it is answered at once)
    poller = ControllerClient(controller.port)
    result: dict[str, Any] = {}
    offset = image.last_applied_offset + 1
    thread = threading.Thread(target=lambda: result.update(
        poller.fetch_metadata(offset, max_wait_ms=60_000)))
    thread.start()
    try:
        made = client.call(ApiKey.CREATE_TOPICS, {"topics": [
            {"name": "audit", "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 1})
        assert made["topics"][0]["error_code"] == 0
    finally:
        thread.join(30)
    assert not thread.is_alive(), "the parked metadata fetch was not woken by the append"
    fetched = decode_record_batches(bytes(result["records"]), offset)
    assert [type(r) for _, r in fetched] == [TopicRecord, PartitionRecord]
    assert fetched[0][0] == offset
    poller.close()

    meta = client.metadata()
    assert [(b["node_id"], b["fenced"]) for b in meta["brokers"]] == [(1, False), (2, False)]
    assert [t["name"] for t in meta["topics"]] == ["audit", "orders"]
    before = replay(client, image)

    # SIGKILL, start on the same directory: the same state, and snapshots were taken
    client.close()
    controller.kill()
    snapshots = sorted(controller.data_dir.glob("snapshot-*.msgpack"))
    assert 1 <= len(snapshots) <= 2
    controller.start()
    client = ControllerClient(controller.port)
    after = replay(client, MetadataImage())
    assert after == before
    assert client.metadata()["topics"] == meta["topics"]
    # registrations survived: the old epochs still heartbeat
    for b, epoch in epochs.items():
        reply = client.heartbeat(b, epoch, after.last_applied_offset)
        assert reply["error_code"] == 0 and not reply["is_fenced"], reply
    client.close()


def test_create_partitions_and_config_changes_over_the_wire(
        controller: ControllerProcess) -> None:
    client = ControllerClient(controller.port)
    epochs = start_brokers(client, [1, 2])
    created = client.call(ApiKey.CREATE_TOPICS, {"topics": [
        {"name": "t", "num_partitions": 1, "replication_factor": 2,
         "configs": [{"name": "retention.ms", "value": "60000"}]}], "timeout_ms": 1})
    assert created["topics"][0]["error_code"] == 0 and created["topics"][0]["configs"] is None

    grown = client.call(ApiKey.CREATE_PARTITIONS, {"topics": [
        {"name": "t", "count": 3, "assignments": None},
        {"name": "missing", "count": 2, "assignments": None}],
        "timeout_ms": 1, "validate_only": False})
    assert [(r["name"], r["error_code"]) for r in grown["results"]] == [
        ("t", 0), ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert "missing" in grown["results"][1]["error_message"]
    manual = client.call(ApiKey.CREATE_PARTITIONS, {"topics": [
        {"name": "t", "count": 4, "assignments": [{"broker_ids": [2, 1]}]}],
        "timeout_ms": 1, "validate_only": False})
    assert manual["results"][0]["error_code"] == 0, manual
    same = client.call(ApiKey.CREATE_PARTITIONS, {"topics": [
        {"name": "t", "count": 4, "assignments": None}], "timeout_ms": 1,
        "validate_only": False})
    assert same["results"][0]["error_code"] == ErrorCode.INVALID_PARTITIONS

    changed = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
        {"resource_type": 2, "resource_name": "t", "configs": [
            {"name": "retention.ms", "config_operation": 1, "value": None},
            {"name": "segment.bytes", "config_operation": 0, "value": "65536"}]},
        {"resource_type": 4, "resource_name": "1", "configs": [
            {"name": "log.retention.ms", "config_operation": 0, "value": "1"}]},
        {"resource_type": 2, "resource_name": "t2", "configs": []}],
        "validate_only": False})
    assert [(r["resource_type"], r["resource_name"], r["error_code"])
            for r in changed["responses"]] == [
        (2, "t", 0), (4, "1", ErrorCode.INVALID_REQUEST),
        (2, "t2", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    image = replay(client, MetadataImage())
    topic = image.topics["t"]
    assert topic.num_partitions == 4 and image.partition("t", 3).replicas == (2, 1)  # type: ignore[union-attr]
    assert topic.configs["segment_bytes"] == "65536" and "retention_ms" not in topic.configs

    legacy = client.call(ApiKey.ALTER_CONFIGS, {"resources": [
        {"resource_type": 2, "resource_name": "t", "configs": [
            {"name": "retention.bytes", "value": "1048576"}]}], "validate_only": False})
    assert legacy["responses"][0]["error_code"] == 0, legacy
    bad = client.call(ApiKey.ALTER_CONFIGS, {"resources": [
        {"resource_type": 2, "resource_name": "t", "configs": [
            {"name": "retention.bytes", "value": "lots"}]}], "validate_only": False})
    assert bad["responses"][0]["error_code"] == ErrorCode.INVALID_CONFIG
    image = replay(client, image)
    assert image.topics["t"].configs == {"retention_bytes": "1048576",
                                         "min_insync_replicas": "1",
                                         "unclean_leader_election": "false"}

    # Metadata: our extras at v12 (tagged), absent (defaults) in a non-flexible version;
    # v0's empty topic list means every topic
    meta = client.metadata()
    assert {c["name"]: c["value"] for c in meta["topics"][0]["configs"]}[
        "retention_bytes"] == "1048576"
    assert len(meta["topics"][0]["partitions"]) == 4
    assert client.heartbeat(2, epochs[2], 0, want_fence=True)["is_fenced"]
    assert [b["fenced"] for b in client.metadata()["brokers"]] == [False, True]
    old = client.metadata(version=1)
    assert [t["name"] for t in old["topics"]] == ["t"]
    assert all(not b["fenced"] for b in old["brokers"])
    assert old["topics"][0]["configs"] == []
    assert [t["name"] for t in client.call(ApiKey.METADATA, {"topics": []}, 0)["topics"]] == ["t"]
    assert client.call(ApiKey.METADATA, {"topics": []}, 1)["topics"] == []
    client.close()


def test_silent_broker_is_fenced_and_loses_leadership(controller: ControllerProcess) -> None:
    client = ControllerClient(controller.port)
    epochs = start_brokers(client, [1, 2])
    created = client.call(ApiKey.CREATE_TOPICS, {"topics": [
        {"name": "t", "num_partitions": 2, "replication_factor": 2}], "timeout_ms": 1})
    assert created["topics"][0]["error_code"] == 0

    def broker_2_fenced() -> bool:
        client.heartbeat(1, epochs[1], 10_000)  # only broker 1 stays alive
        brokers = {b["node_id"]: b["fenced"] for b in client.metadata()["brokers"]}
        return brokers[2]

    wait_for(broker_2_fenced, "broker 2 to be fenced")
    parts = client.metadata()["topics"][0]["partitions"]
    assert [p["leader_id"] for p in parts] == [1, 1]
    assert all(p["isr_nodes"] == [1] and p["offline_replicas"] == [2] for p in parts)
    epochs_now = sorted(p["leader_epoch"] for p in parts)  # one of them moved (the first
    assert epochs_now == [epochs_now[0], epochs_now[0] + 1]  # epoch is the topic's id)

    # broker 2 returns: unfenced after a caught-up heartbeat
    reply = client.heartbeat(2, epochs[2], 10_000)
    assert not reply["is_fenced"]
    # controlled shutdown of broker 1: leadership moves to 2 before it may stop
    reply = client.heartbeat(1, epochs[1], 0, want_shut_down=True)
    assert not reply["should_shut_down"]
    hwm = client.fetch_metadata(0)["high_watermark"]
    reply = client.heartbeat(1, epochs[1], hwm - 1, want_shut_down=True)
    assert reply["should_shut_down"] and reply["is_fenced"]
    parts = client.metadata()["topics"][0]["partitions"]
    assert all(p["leader_id"] in (2, -1) for p in parts)  # 2 is not in the ISR yet: offline
    client.close()


def test_bad_input_gets_errors_or_a_closed_connection(controller: ControllerProcess) -> None:
    client = ControllerClient(controller.port)
    versions = client.call(ApiKey.API_VERSIONS, {})
    served = {k["api_key"] for k in versions["api_keys"]}
    assert {int(ApiKey.FETCH), int(ApiKey.BROKER_HEARTBEAT), int(ApiKey.METADATA)} <= served
    assert int(ApiKey.PRODUCE) not in served
    other = client.call(ApiKey.FETCH, {
        "replica_id": 1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 100, "topics": [
            {"name": "orders", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                "partition_max_bytes": 100}]}]})
    assert (other["responses"][0]["partitions"][0]["error_code"]
            == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert client.fetch_metadata(5)["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
    hb = client.heartbeat(4, 0, 0)
    assert hb["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    reg = client.call(ApiKey.BROKER_REGISTRATION, {
        "broker_id": 1, "cluster_id": "minikafka", "incarnation_id": incarnation("x"),
        "listeners": [], "features": FEATURES})
    assert reg["error_code"] == ErrorCode.INVALID_REQUEST
    assert "listener" in reg["error_message"]
    internal_only = [{"name": "INTERNAL", "host": "127.0.0.1", "port": 9201,
                      "security_protocol": 0}]
    reg = client.call(ApiKey.BROKER_REGISTRATION, {
        "broker_id": 1, "cluster_id": "minikafka", "incarnation_id": incarnation("x"),
        "listeners": internal_only * 2, "features": FEATURES})  # no client listener
    assert reg["error_code"] == ErrorCode.INVALID_REQUEST
    assert "one client listener" in reg["error_message"]
    for features in ([], [{"name": METADATA_VERSION_FEATURE, "min_supported_version": 0,
                           "max_supported_version": METADATA_VERSION - 1}]):
        old = client.register(1, "old-broker", 9101, features=features)
        assert old["error_code"] == ErrorCode.UNSUPPORTED_VERSION, old
        assert METADATA_VERSION_FEATURE in old["error_message"]
    bad_config = client.call(ApiKey.CREATE_TOPICS, {"topics": [
        {"name": "c", "num_partitions": 1, "replication_factor": 1,
         "configs": [{"name": "retention.ms", "value": None}]}], "timeout_ms": 1})
    assert bad_config["topics"][0]["error_code"] == ErrorCode.INVALID_CONFIG
    bad_topic = client.call(ApiKey.CREATE_TOPICS, {"topics": [
        {"name": "no spaces", "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 1})
    assert bad_topic["topics"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    unsupported = bytearray(encode_request_bytes(ApiKey.API_VERSIONS, 0, 7, "t", {}))
    # length, api_key (int16), api_version (int16): patch version 0 -> 9
    assert unsupported[4:8] == struct.pack(">hh", ApiKey.API_VERSIONS, 0)
    unsupported[6:8] = struct.pack(">h", 9)
    client.send_raw(bytes(unsupported))
    frame = read_frame(client.sock)
    assert frame is not None
    answer = decode_response(frame, ApiKey.API_VERSIONS, 0)
    assert answer.correlation_id == 7
    assert answer.body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    client.close()

    for payload in (struct.pack(">i", 64 * 1024 * 1024),  # oversize frame length
                    struct.pack(">i", 3) + b"\x00\x03\x00",  # shorter than a header
                    # Metadata v12 whose topic array claims more entries than the frame holds
                    struct.pack(">ihhih", 15, ApiKey.METADATA, 12, 1, 1) + b"t\x00\x7f\x00\x00",
                    encode_request_bytes(ApiKey.PRODUCE, 3, 1, "t", {
                        "acks": 1, "timeout_ms": 1, "topics": []})):  # not served here
        bad = ControllerClient(controller.port)
        bad.send_raw(payload)
        assert wait_for(bad.closed_by_peer, "the connection to be closed")
        bad.close()
    still = ControllerClient(controller.port)
    assert still.call(ApiKey.API_VERSIONS, {})["error_code"] == 0  # still serving
    still.close()


def test_sigterm_exits_cleanly_and_the_directory_is_locked(tmp_path: Path) -> None:
    first = ControllerProcess(tmp_path / "c")
    second = ControllerProcess(tmp_path / "c")
    try:
        first.start()
        with pytest.raises(AssertionError, match="did not start"):
            second.start(timeout_s=30)
        assert any("locked" in line or "lock" in line for line in second.output), second.output
        client = ControllerClient(first.port)
        client.register(3, "i", 1)
        client.close()
        assert first.stop() == 0
        first.start()
        client = ControllerClient(first.port)
        records = decode_record_batches(bytes(client.fetch_metadata(0)["records"]))
        client.close()
        assert [type(r) for _, r in records] == [RegisterBrokerRecord]
    finally:
        first.kill()
        second.kill()
