"""Every client-facing API of a standalone broker core, through Kafka's codec, at the
lowest and highest version we serve (and every version where the shape changes).

Requests are encoded at the version under test and answers decoded at it
(:mod:`tests.broker.handlers.wire`), so these tests see exactly what a Kafka client of
that version sends and reads.  The process-level tests (raw sockets against a real
broker) are in test_wire_broker.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.handlers.configs import LONG_MAX, STATIC_BROKER_CONFIG
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.registry import APIS
from clients.protocol.topics import OFFSETS_TOPIC, TopicPartition
from clients.records.compression import GZIP, ZSTD, compress_batch
from clients.records.record import build_batch
from tests.broker.handlers.wire import CoreHarness, call, call1, core_at, ends, versions

Body = dict[str, Any]
E = ErrorCode


@pytest.fixture
def h(tmp_path: Path) -> Iterator[CoreHarness]:
    with core_at(tmp_path / "b0", group_initial_rebalance_delay_ms=0,
                 segment_bytes=4096) as harness:
        harness.create("t", 2)
        yield harness


def produce(h: CoreHarness, topic: str, partition: int, *records: tuple[Any, ...],
            version: int | None = None) -> Body:
    batch = build_batch([(k, v, ts, ()) for k, v, ts in records])
    answer = call1(h.core, ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 1000, "topics": [
        {"name": topic, "partitions": [{"index": partition, "records": batch}]}]}, version)
    return answer["responses"][0]["partition_responses"][0]


def fetch_body(topic: str, offset: int, **partition: Any) -> Body:
    return {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"name": topic, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                 **partition}]}]}


# -- ApiVersions -----------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.API_VERSIONS))
def test_api_versions_lists_every_served_api_at_every_version(h: CoreHarness,
                                                              version: int) -> None:
    answer = call1(h.core, ApiKey.API_VERSIONS, {}, version)
    served = {e["api_key"]: (e["min_version"], e["max_version"]) for e in answer["api_keys"]}
    for api in (ApiKey.DELETE_GROUPS, ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS,
                ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.DELETE_RECORDS,
                ApiKey.CREATE_PARTITIONS, ApiKey.DESCRIBE_CLUSTER):
        assert served[api] == (APIS[api].min_version, APIS[api].max_version)
    assert ApiKey.BROKER_REGISTRATION not in served  # the controller's, not ours


# -- Metadata --------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.METADATA))
def test_metadata_at_every_version(h: CoreHarness, version: int) -> None:
    everything = call1(h.core, ApiKey.METADATA, {"topics": [] if version == 0 else None},
                       version)
    assert [t["name"] for t in everything["topics"]] == ["t"]
    assert everything["brokers"][0]["node_id"] == 0
    if version >= 1:
        assert everything["controller_id"] == 0  # a live broker
        assert call1(h.core, ApiKey.METADATA, {"topics": []}, version)["topics"] == []
    if version >= 2:
        assert everything["cluster_id"] == "minikafka"
    topic = everything["topics"][0]
    assert [p["partition_index"] for p in topic["partitions"]] == [0, 1]
    assert topic["partitions"][0]["leader_id"] == 0
    if version >= 9:  # our tagged extra: effective configs in our names
        configs = {c["name"]: c["value"] for c in topic["configs"]}
        assert configs["segment_bytes"] == "4096" and configs["replication_factor"] == "1"
    else:  # (the decoder fills what the version lacks with defaults)
        assert topic["configs"] == []
    if version >= 10:
        assert topic["topic_id"] == bytes(16)
    asked = call1(h.core, ApiKey.METADATA, {"topics": [{"name": "nope"}, {"name": "bad name"}]},
                  version)
    assert [t["error_code"] for t in asked["topics"]] == [
        E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_TOPIC_EXCEPTION]


def test_metadata_v12_by_topic_id_is_unknown_topic_id(h: CoreHarness) -> None:
    answer = call1(h.core, ApiKey.METADATA, {"topics": [{"name": None,
                                                          "topic_id": b"\x01" * 16}]}, 12)
    assert answer["topics"][0]["error_code"] == E.UNKNOWN_TOPIC_ID
    assert answer["topics"][0]["topic_id"] == b"\x01" * 16


def test_offsets_topic_is_internal(h: CoreHarness) -> None:
    h.create(OFFSETS_TOPIC, 1)
    h.create("__mine", 1)
    topics = {t["name"]: t for t in call1(h.core, ApiKey.METADATA, {"topics": None})["topics"]}
    assert topics[OFFSETS_TOPIC]["is_internal"] and not topics["__mine"]["is_internal"]


# -- Produce, Fetch, ListOffsets, OffsetsForLeaderEpoch ---------------------------------


@pytest.mark.parametrize("version", ends(ApiKey.PRODUCE))
def test_produce_at_both_ends(h: CoreHarness, version: int) -> None:
    first = produce(h, "t", 0, (b"k", b"v", 5), version=version)
    assert first["error_code"] == 0 and first["base_offset"] == 0
    assert first["log_append_time_ms"] == -1
    assert first["log_start_offset"] == (0 if version >= 5 else -1)
    bad = produce(h, "nope", 0, (b"k", b"v", 5), version=version)
    assert bad["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
    if version >= 8:
        assert "nope" in bad["error_message"]


@pytest.mark.parametrize("version", [v for v in versions(ApiKey.PRODUCE) if v in (6, 7)]
                         + ends(ApiKey.PRODUCE))
def test_zstd_batches_need_produce_v7(h: CoreHarness, version: int) -> None:
    zstd = compress_batch(build_batch([(b"k", b"z" * 100, 5, ())]), ZSTD)
    gzip = compress_batch(build_batch([(b"k", b"g" * 100, 5, ())]), GZIP)
    answer = call1(h.core, ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 1000, "topics": [
        {"name": "t", "partitions": [{"index": 0, "records": gzip + zstd},
                                     {"index": 1, "records": gzip}]}]}, version)
    mixed, plain = answer["responses"][0]["partition_responses"]
    if version >= 7:
        assert mixed["error_code"] == 0
    else:
        assert mixed["error_code"] == E.UNSUPPORTED_COMPRESSION_TYPE
        assert h.core.partitions[TopicPartition("t", 0)].log.log_end_offset == 0
    assert plain["error_code"] == 0  # other partitions of the request are unaffected


# by name: v4 to v12 (v13+ names topics by id, which a standalone broker's topics do not
# have: tests/broker/fetch_sessions/test_fetch_by_topic_id.py)
@pytest.mark.parametrize("version", [ends(ApiKey.FETCH)[0], 12])
def test_fetch_at_both_ends(h: CoreHarness, version: int) -> None:
    produce(h, "t", 0, (b"k", b"hello", 5))
    answer = call1(h.core, ApiKey.FETCH, fetch_body("t", 0), version)
    part = answer["responses"][0]["partitions"][0]
    assert part["error_code"] == 0 and part["high_watermark"] == 1
    assert part["last_stable_offset"] == 1 and part["aborted_transactions"] is None
    assert b"hello" in bytes(part["records"])
    if version >= 7:
        assert answer["session_id"] == 0 and answer["error_code"] == 0
    if version >= 11:
        assert part["preferred_read_replica"] == -1


def test_full_fetches_answer_every_partition_and_unknown_sessions_are_refused(
        h: CoreHarness) -> None:
    body = fetch_body("t", 0)
    body["topics"][0]["partitions"].append({"partition": 1, "fetch_offset": 0,
                                           "partition_max_bytes": 1000})
    body["topics"].append({"name": "gone", "partitions": [
        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]})
    for epoch in (0, -1):  # a full fetch, creating a session (0) or not (-1)
        answer = call1(h.core, ApiKey.FETCH, {**body, "session_epoch": epoch})
        assert (answer["session_id"] != 0) == (epoch == 0) and answer["error_code"] == 0
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
                for t in answer["responses"]] == [("t", [0, 1]), ("gone", [0])]
    incremental = call1(h.core, ApiKey.FETCH, {**body, "session_id": 5, "session_epoch": 3})
    assert incremental["error_code"] == E.FETCH_SESSION_ID_NOT_FOUND
    assert incremental["responses"] == []


def test_fetch_read_committed_and_bad_sizes(h: CoreHarness) -> None:
    produce(h, "t", 0, (None, b"x", 5))
    committed = call1(h.core, ApiKey.FETCH, {**fetch_body("t", 0), "isolation_level": 1})
    part = committed["responses"][0]["partitions"][0]
    assert part["aborted_transactions"] == [] and part["last_stable_offset"] == 1
    negative = call1(h.core, ApiKey.FETCH, fetch_body("t", 0, partition_max_bytes=-5))
    assert negative["responses"][0]["partitions"][0]["error_code"] == E.INVALID_FETCH_SIZE


def test_fetch_v12_answers_a_diverging_epoch(h: CoreHarness) -> None:
    partition = h.core.partitions[("t", 0)]
    produce(h, "t", 0, (None, b"a", 1), (None, b"b", 2))  # epoch 0: offsets 0-1
    partition.make_leader(3, [0], [0])
    produce(h, "t", 0, (None, b"c", 3))  # epoch 3: offset 2
    # a fetcher that has epoch 0 up to offset 3 (it appended what the leader never had)
    diverged = call1(h.core, ApiKey.FETCH, fetch_body("t", 3, last_fetched_epoch=0,
                                                      current_leader_epoch=3))
    part = diverged["responses"][0]["partitions"][0]
    assert part["error_code"] == 0 and part["diverging_epoch"] == {"epoch": 0, "end_offset": 2}
    assert len(part["records"]) == 0
    # a fetcher in step gets records, no diverging epoch
    fine = call1(h.core, ApiKey.FETCH, fetch_body("t", 2, last_fetched_epoch=0))
    part = fine["responses"][0]["partitions"][0]
    assert part["diverging_epoch"] is None and b"c" in bytes(part["records"])
    fenced = call1(h.core, ApiKey.FETCH, fetch_body("t", 2, current_leader_epoch=2))
    assert fenced["responses"][0]["partitions"][0]["error_code"] == E.FENCED_LEADER_EPOCH


@pytest.mark.parametrize("version", ends(ApiKey.LIST_OFFSETS))
def test_list_offsets_at_both_ends(h: CoreHarness, version: int) -> None:
    produce(h, "t", 0, (None, b"a", 100), (None, b"b", 900), (None, b"c", 300))
    produce(h, "t", 0, (None, b"d", 900))

    def ask(timestamp: int) -> Body:
        answer = call1(h.core, ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]},
            version)
        return answer["topics"][0]["partitions"][0]

    assert ask(-1)["offset"] == 4 and ask(-2)["offset"] == 0
    assert (ask(-3)["offset"], ask(-3)["timestamp"]) == (1, 900)  # the first max
    assert (ask(250)["offset"], ask(250)["timestamp"]) == (1, 900)
    assert (ask(901)["offset"], ask(901)["timestamp"]) == (-1, -1)
    assert ask(-7)["error_code"] == E.INVALID_REQUEST
    if version >= 4:
        assert ask(-1)["leader_epoch"] == 0 and ask(250)["leader_epoch"] == 0


def test_list_offsets_max_timestamp_ignores_uncommitted_and_deleted(h: CoreHarness) -> None:
    partition = h.core.partitions[("t", 0)]
    produce(h, "t", 0, (None, b"a", 500), (None, b"b", 100))
    for i in range(40):  # several segments
        produce(h, "t", 0, (None, b"x" * 200, 200 + i))
    assert len(partition.log.segments) > 2
    partition.make_leader(1, [0, 1], [0, 1])  # a follower holds the HW back
    produce(h, "t", 0, (None, b"late", 10_000))

    def ask(timestamp: int) -> tuple[int, int]:
        p = call1(h.core, ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]},
        )["topics"][0]["partitions"][0]
        return p["offset"], p["timestamp"]

    assert ask(-3) == (0, 500)
    partition.log.maybe_increment_log_start_offset(1)
    assert ask(-3) == (41, 239)


@pytest.mark.parametrize("version", ends(ApiKey.OFFSETS_FOR_LEADER_EPOCH))
def test_offsets_for_leader_epoch_at_both_ends(h: CoreHarness, version: int) -> None:
    produce(h, "t", 0, (None, b"a", 1))
    h.core.partitions[("t", 0)].make_leader(2, [0], [0])
    produce(h, "t", 0, (None, b"b", 1))
    answer = call1(h.core, ApiKey.OFFSETS_FOR_LEADER_EPOCH, {"replica_id": -2, "topics": [
        {"name": "t", "partitions": [{"partition": 0, "leader_epoch": 0,
                                      "current_leader_epoch": 2}]}]}, version)
    part = answer["topics"][0]["partitions"][0]
    assert (part["error_code"], part["leader_epoch"], part["end_offset"]) == (0, 0, 1)


@pytest.mark.parametrize("version", versions(ApiKey.INIT_PRODUCER_ID))
def test_init_producer_id_at_every_version(h: CoreHarness, version: int) -> None:
    first = call1(h.core, ApiKey.INIT_PRODUCER_ID, {"transactional_id": None,
                                                    "transaction_timeout_ms": 60_000}, version)
    assert first["error_code"] == 0 and first["producer_epoch"] == 0
    bump = call1(h.core, ApiKey.INIT_PRODUCER_ID, {
        "producer_id": first["producer_id"], "producer_epoch": 0}, version)
    if version >= 3:  # v3+ carries the id and epoch: the same id, epoch + 1
        assert (bump["producer_id"], bump["producer_epoch"]) == (first["producer_id"], 1)
    else:  # no id in the request: a new one
        assert bump["producer_id"] != first["producer_id"] and bump["producer_epoch"] == 0
    # a transactional id goes to the transaction coordinator (issue 32): none before
    # its state topic exists and is loaded, then epoch 0 of a new producer id
    early = call1(h.core, ApiKey.INIT_PRODUCER_ID, {"transactional_id": "tx",
                                                    "transaction_timeout_ms": 60_000}, version)
    assert early["error_code"] == E.NOT_COORDINATOR
    found = call1(h.core, ApiKey.FIND_COORDINATOR, {"key": "tx", "key_type": 1}, 1)
    assert found["error_code"] == 0 and found["node_id"] == 0
    h.tick(times=3)  # the state partitions load
    txn = call1(h.core, ApiKey.INIT_PRODUCER_ID, {"transactional_id": "tx",
                                                  "transaction_timeout_ms": 60_000}, version)
    assert (txn["error_code"], txn["producer_epoch"]) == (0, 0)
    assert txn["producer_id"] not in (first["producer_id"], bump["producer_id"])


# -- CreateTopics, DeleteTopics, CreatePartitions, DescribeCluster ----------------------


@pytest.mark.parametrize("version", versions(ApiKey.CREATE_TOPICS))
def test_create_topics_at_every_version(h: CoreHarness, version: int) -> None:
    name = f"new{version}"
    answer = call1(h.core, ApiKey.CREATE_TOPICS, {"topics": [
        {"name": name, "num_partitions": -1, "replication_factor": -1,
         "configs": [{"name": "retention.ms", "value": "60000"},
                     {"name": "cleanup_policy", "value": "compact"}]},
        {"name": "t", "num_partitions": 1, "replication_factor": 1},
        {"name": "bad", "num_partitions": 1, "replication_factor": 1,
         "configs": [{"name": "compression.type", "value": "gzip"}]},
        {"name": "nullcfg", "num_partitions": 1, "replication_factor": 1,
         "configs": [{"name": "retention.ms", "value": None}]},
        {"name": "three", "num_partitions": 1, "replication_factor": 3},
        {"name": "dup", "num_partitions": 1, "replication_factor": 1},
        {"name": "dup", "num_partitions": 1, "replication_factor": 1},
    ], "timeout_ms": 1000}, version)
    codes = [(t["name"], t["error_code"]) for t in answer["topics"]]
    assert codes == [(name, 0), ("t", E.TOPIC_ALREADY_EXISTS), ("bad", E.INVALID_CONFIG),
                     ("nullcfg", E.INVALID_CONFIG), ("three", E.INVALID_REPLICATION_FACTOR),
                     ("dup", E.INVALID_REQUEST), ("dup", E.INVALID_REQUEST)]
    assert h.core.registry.get(name).num_partitions == 1  # the broker's default
    assert h.core.configs.topic_configs(name) == {"retention_ms": "60000",
                                                  "cleanup_policy": "compact"}
    created = answer["topics"][0]
    if version >= 5:
        assert (created["num_partitions"], created["replication_factor"]) == (1, 1)
        configs = {c["name"]: (c["value"], c["config_source"]) for c in created["configs"]}
        assert configs["retention.ms"] == ("60000", 1)
        assert configs["segment.bytes"] == ("4096", STATIC_BROKER_CONFIG)
        assert answer["topics"][1]["configs"] is None
    else:
        assert created["configs"] is None and created["num_partitions"] == -1
    assert "already exists" in answer["topics"][1]["error_message"]


def test_create_topics_validate_only_and_assignments(h: CoreHarness) -> None:
    answer = call1(h.core, ApiKey.CREATE_TOPICS, {"validate_only": True, "topics": [
        {"name": "dry", "num_partitions": 3, "replication_factor": 1}]})
    assert answer["topics"][0]["error_code"] == 0 and h.core.registry.get("dry") is None
    answer = call1(h.core, ApiKey.CREATE_TOPICS, {"topics": [
        {"name": "manual", "num_partitions": -1, "replication_factor": -1, "assignments": [
            {"partition_index": 1, "broker_ids": [0]}, {"partition_index": 0,
                                                        "broker_ids": [0]}]},
        {"name": "elsewhere", "num_partitions": -1, "replication_factor": -1,
         "assignments": [{"partition_index": 0, "broker_ids": [7]}]},
        {"name": "both", "num_partitions": 2, "replication_factor": -1,
         "assignments": [{"partition_index": 0, "broker_ids": [0]}]}]})
    assert [t["error_code"] for t in answer["topics"]] == [
        0, E.INVALID_REPLICA_ASSIGNMENT, E.INVALID_REQUEST]
    assert h.core.registry.get("manual").num_partitions == 2


@pytest.mark.parametrize("version", versions(ApiKey.DELETE_TOPICS))
def test_delete_topics_at_every_version(h: CoreHarness, version: int) -> None:
    names = ["t", "nope", "bad name"]
    body = ({"topics": [{"name": n} for n in names]} if version >= 6  # v6: names or ids
            else {"topic_names": names})
    answer = call1(h.core, ApiKey.DELETE_TOPICS, {**body, "timeout_ms": 1000}, version)
    assert [(r["name"], r["error_code"]) for r in answer["responses"]] == [
        ("t", 0), ("nope", E.UNKNOWN_TOPIC_OR_PARTITION), ("bad name", E.INVALID_TOPIC_EXCEPTION)]
    assert h.core.registry.get("t") is None
    if version >= 5:
        assert "nope" in answer["responses"][1]["error_message"]
    else:
        assert answer["responses"][1]["error_message"] is None


@pytest.mark.parametrize("version", ends(ApiKey.CREATE_PARTITIONS))
def test_create_partitions_at_both_ends(h: CoreHarness, version: int) -> None:
    answer = call1(h.core, ApiKey.CREATE_PARTITIONS, {"timeout_ms": 1000, "topics": [
        {"name": "t", "count": 4, "assignments": None},
        {"name": "nope", "count": 4, "assignments": None}]}, version)
    assert [r["error_code"] for r in answer["results"]] == [0, E.UNKNOWN_TOPIC_OR_PARTITION]
    assert h.core.registry.get("t").num_partitions == 4
    assert ("t", 3) in h.core.partitions
    produce(h, "t", 3, (None, b"new", 1))
    answer = call1(h.core, ApiKey.CREATE_PARTITIONS, {"timeout_ms": 1000, "topics": [
        {"name": "t", "count": 4, "assignments": None},
        {"name": "t", "count": 6, "assignments": None}]}, version)
    assert [r["error_code"] for r in answer["results"]] == [E.INVALID_REQUEST] * 2
    answer = call1(h.core, ApiKey.CREATE_PARTITIONS, {"timeout_ms": 1000, "topics": [
        {"name": "t", "count": 3, "assignments": None}]}, version)
    assert answer["results"][0]["error_code"] == E.INVALID_PARTITIONS
    answer = call1(h.core, ApiKey.CREATE_PARTITIONS, {"timeout_ms": 1000, "topics": [
        {"name": "t", "count": 6, "assignments": [{"broker_ids": [0]}]}]}, version)
    assert answer["results"][0]["error_code"] == E.INVALID_REPLICA_ASSIGNMENT
    answer = call1(h.core, ApiKey.CREATE_PARTITIONS, {"timeout_ms": 1000, "validate_only": True,
                                                      "topics": [{"name": "t", "count": 5}]},
                   version)
    assert answer["results"][0]["error_code"] == 0
    assert h.core.registry.get("t").num_partitions == 4


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_CLUSTER))
def test_describe_cluster(h: CoreHarness, version: int) -> None:
    answer = call1(h.core, ApiKey.DESCRIBE_CLUSTER, {}, version)
    assert answer["error_code"] == 0 and answer["cluster_id"] == "minikafka"
    assert answer["controller_id"] == 0
    assert [b["broker_id"] for b in answer["brokers"]] == [0]
    if version >= 1:
        controllers = call1(h.core, ApiKey.DESCRIBE_CLUSTER, {"endpoint_type": 2}, version)
        assert controllers["error_code"] == E.MISMATCHED_ENDPOINT_TYPE
        odd = call1(h.core, ApiKey.DESCRIBE_CLUSTER, {"endpoint_type": 9}, version)
        assert odd["error_code"] == E.UNSUPPORTED_ENDPOINT_TYPE


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_LOG_DIRS))
def test_describe_log_dirs_at_every_version(h: CoreHarness, version: int) -> None:
    produce(h, "t", 1, (None, b"abc", 1))
    answer = call1(h.core, ApiKey.DESCRIBE_LOG_DIRS, {"topics": None}, version)
    (result,) = answer["results"]
    assert result["error_code"] == 0 and result["log_dir"].endswith("b0")
    parts = {(t["name"], p["partition_index"]): p for t in result["topics"]
             for p in t["partitions"]}
    assert set(parts) == {("t", 0), ("t", 1)}
    assert parts[("t", 1)]["size_bytes"] > 0 and parts[("t", 1)]["offset_lag"] == 0
    if version >= 2:  # our extras
        assert parts[("t", 1)]["log_end_offset"] == 1 and parts[("t", 1)]["isr"] == [0]
    if version >= 4:
        assert result["total_bytes"] > 0 and 0 < result["usable_bytes"] <= result["total_bytes"]
    only = call1(h.core, ApiKey.DESCRIBE_LOG_DIRS, {"topics": [{"name": "t",
                                                                "partitions": [1]}]}, version)
    assert [p["partition_index"] for p in only["results"][0]["topics"][0]["partitions"]] == [1]


# -- configs -------------------------------------------------------------------------


def describe(h: CoreHarness, version: int, *resources: tuple[int, str, list[str] | None],
             **flags: bool) -> list[Body]:
    return call1(h.core, ApiKey.DESCRIBE_CONFIGS, {"resources": [
        {"resource_type": kind, "resource_name": name, "configuration_keys": keys}
        for kind, name, keys in resources], **flags}, version)["results"]


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_CONFIGS))
def test_describe_configs_at_every_version(h: CoreHarness, version: int) -> None:
    h.create("tuned", 1, retention_ms="1000", unclean_leader_election="true")
    topic, broker, unknown, other_broker, logger = describe(
        h, version, (2, "tuned", None), (4, "0", ["segment.bytes", "node_id"]),
        (2, "nope", None), (4, "3", None), (8, "0", None),
        include_synonyms=True, include_documentation=True)
    configs = {c["name"]: c for c in topic["configs"]}
    assert configs["retention.ms"]["value"] == "1000"
    assert configs["retention.ms"]["config_source"] == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["unclean.leader.election.enable"]["value"] == "true"
    assert configs["segment.bytes"]["value"] == "4096"
    assert configs["segment.bytes"]["config_source"] == STATIC_BROKER_CONFIG
    assert configs["cleanup.policy"]["config_source"] == 5  # DEFAULT_CONFIG
    assert configs["flush.messages"]["value"] == LONG_MAX
    assert not any(c["read_only"] or c["is_sensitive"] for c in configs.values())
    assert [s["source"] for s in configs["retention.ms"]["synonyms"]] == [1, 5]
    assert configs["retention.ms"]["synonyms"][1]["name"] == "retention.ms"
    if version >= 3:
        assert configs["retention.ms"]["config_type"] == 5  # LONG
        assert configs["cleanup.policy"]["config_type"] == 7  # LIST
        assert configs["retention.ms"]["documentation"]
    assert {c["name"] for c in broker["configs"]} == {"segment.bytes", "node.id"}
    assert all(c["read_only"] for c in broker["configs"])
    assert unknown["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert other_broker["error_code"] == E.INVALID_REQUEST
    assert logger["error_code"] == E.INVALID_REQUEST
    (plain,) = describe(h, version, (2, "tuned", ["retention.ms", "no.such"]))
    assert [(c["name"], c["synonyms"]) for c in plain["configs"]] == [("retention.ms", [])]


def alter(h: CoreHarness, api: ApiKey, version: int, *configs: Body, name: str = "t",
          validate_only: bool = False) -> tuple[int, str | None]:
    answer = call1(h.core, api, {"validate_only": validate_only, "resources": [
        {"resource_type": 2, "resource_name": name, "configs": list(configs)}]}, version)
    result = answer["responses"][0]
    return result["error_code"], result["error_message"]


@pytest.mark.parametrize("version", ends(ApiKey.ALTER_CONFIGS))
def test_alter_configs_replaces_the_overrides(h: CoreHarness, version: int) -> None:
    api = ApiKey.ALTER_CONFIGS
    assert alter(h, api, version, {"name": "retention.ms", "value": "5000"},
                 {"name": "segment.bytes", "value": "2048"})[0] == 0
    assert h.core.configs.topic_configs("t") == {"retention_ms": "5000", "segment_bytes": "2048"}
    log = h.core.partitions[("t", 0)].log
    assert log.config.segment_bytes == 2048 and log.config.retention_ms == 5000
    assert alter(h, api, version, {"name": "cleanup.policy", "value": "compact"})[0] == 0
    assert h.core.configs.topic_configs("t") == {"cleanup_policy": "compact"}
    assert log.config.compact and log.config.segment_bytes == 4096
    assert alter(h, api, version, {"name": "retention.ms", "value": "soon"})[0] == \
        E.INVALID_CONFIG
    assert alter(h, api, version, {"name": "retention.ms", "value": None})[0] == \
        E.INVALID_REQUEST
    assert alter(h, api, version, {"name": "retention.ms", "value": "7"}, name="nope")[0] == \
        E.UNKNOWN_TOPIC_OR_PARTITION
    assert alter(h, api, version, {"name": "retention.ms", "value": "7"},
                 validate_only=True)[0] == 0
    assert h.core.configs.topic_configs("t") == {"cleanup_policy": "compact"}
    answer = call1(h.core, api, {"resources": [
        {"resource_type": 4, "resource_name": "0", "configs": []},
        {"resource_type": 2, "resource_name": "t", "configs": []},
        {"resource_type": 2, "resource_name": "t", "configs": []}]}, version)
    # the broker's dynamic overrides replaced by none (tests/broker/dynamic_config); the
    # topic named twice is refused
    assert [r["error_code"] for r in answer["responses"]] == [0] + [E.INVALID_REQUEST] * 2


@pytest.mark.parametrize("version", ends(ApiKey.INCREMENTAL_ALTER_CONFIGS))
def test_incremental_alter_configs_operations(h: CoreHarness, version: int) -> None:
    api = ApiKey.INCREMENTAL_ALTER_CONFIGS

    def op(name: str, operation: int, value: str | None = None) -> Body:
        return {"name": name, "config_operation": operation, "value": value}

    assert alter(h, api, version, op("retention.ms", 0, "5000"),
                 op("min.insync.replicas", 0, "1"))[0] == 0
    assert alter(h, api, version, op("segment.bytes", 0, "2048"))[0] == 0
    assert h.core.configs.topic_configs("t") == {"retention_ms": "5000", "min_insync_replicas": "1",
                                         "segment_bytes": "2048"}
    assert alter(h, api, version, op("retention.ms", 1))[0] == 0
    assert h.core.configs.topic_configs("t") == {"min_insync_replicas": "1",
                                                 "segment_bytes": "2048"}
    assert h.core.partitions[("t", 1)].log.config.segment_bytes == 2048
    # cleanup.policy is a list: delete (the default) + compact = compact,delete (both)
    assert alter(h, api, version, op("cleanup.policy", 3, "delete"),
                 )[0] == E.INVALID_CONFIG  # an empty policy is not valid
    assert alter(h, api, version, op("cleanup.policy", 2, "compact"))[0] == 0
    assert h.core.configs.topic_configs("t")["cleanup_policy"] == "compact,delete"
    both = h.core.partitions[("t", 0)].log.config
    assert both.compact and both.delete
    assert alter(h, api, version, op("cleanup.policy", 3, "delete"))[0] == 0
    assert h.core.configs.topic_configs("t")["cleanup_policy"] == "compact"
    assert alter(h, api, version, op("cleanup.policy", 0, "compact"))[0] == 0
    assert alter(h, api, version, op("retention.ms", 2, "5"))[0] == E.INVALID_CONFIG
    assert alter(h, api, version, op("retention.ms", 9, "5"))[0] == E.INVALID_REQUEST
    assert alter(h, api, version, op("retention.ms", 0, None))[0] == E.INVALID_REQUEST
    assert alter(h, api, version, op("no.such", 0, "1"))[0] == E.INVALID_CONFIG
    assert alter(h, api, version, op("retention.ms", 0, "1"), op("retention_ms", 0, "2"))[0] \
        == E.INVALID_REQUEST
    assert h.core.configs.topic_configs("t")["cleanup_policy"] == "compact"
    assert h.core.partitions[("t", 0)].log.config.compact


def test_topic_configs_survive_a_restart(tmp_path: Path) -> None:
    with core_at(tmp_path / "b") as h:
        h.create("t", 1)
        assert alter(h, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {
            "name": "retention.ms", "config_operation": 0, "value": "777"})[0] == 0
    with core_at(tmp_path / "b") as h:
        assert h.core.configs.topic_configs("t") == {"retention_ms": "777"}
        assert h.core.partitions[("t", 0)].log.config.retention_ms == 777


# -- DeleteRecords ---------------------------------------------------------------------


@pytest.mark.parametrize("version", ends(ApiKey.DELETE_RECORDS))
def test_delete_records_moves_the_log_start(h: CoreHarness, version: int) -> None:
    for i in range(10):
        produce(h, "t", 0, (None, b"v%d" % i, i))
    h.create("compacted", 1, cleanup_policy="compact")
    h.create("both", 1, cleanup_policy="compact,delete")
    produce(h, "both", 0, (b"k", b"v", 0))

    def delete(topic: str, partition: int, offset: int) -> tuple[int, int]:
        answer = call1(h.core, ApiKey.DELETE_RECORDS, {"timeout_ms": 1000, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}]},
            version)
        p = answer["topics"][0]["partitions"][0]
        return p["error_code"], p["low_watermark"]

    assert delete("t", 0, 4) == (0, 4)
    assert delete("t", 0, 2) == (0, 4)  # never backwards
    assert delete("t", 0, 11) == (E.OFFSET_OUT_OF_RANGE, -1)
    assert delete("t", 0, -1) == (0, 10)  # -1: the high watermark
    assert delete("t", 1, 0) == (0, 0)
    assert delete("nope", 0, 0) == (E.UNKNOWN_TOPIC_OR_PARTITION, -1)
    assert delete("compacted", 0, 0) == (E.POLICY_VIOLATION, -1)
    assert delete("both", 0, 1) == (0, 1)  # compact,delete: Kafka deletes (config.delete)
    earliest = call1(h.core, ApiKey.LIST_OFFSETS, {"topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -2}]}]})
    assert earliest["topics"][0]["partitions"][0]["offset"] == 10
    below = call1(h.core, ApiKey.FETCH, fetch_body("t", 3))
    assert below["responses"][0]["partitions"][0]["error_code"] == E.OFFSET_OUT_OF_RANGE


def test_deleted_records_are_checkpointed_before_the_answer(tmp_path: Path) -> None:
    with core_at(tmp_path / "b") as h:
        h.create("t", 1)
        for i in range(5):
            produce(h, "t", 0, (None, b"v", i))
        call1(h.core, ApiKey.DELETE_RECORDS, {"topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "offset": 3}]}]})
        # a crash now would find the new log start in the checkpoint
        assert h.core.log_manager.log_start_offset_checkpoint.read() == {("t", 0): 3}
    with core_at(tmp_path / "b") as h:
        assert h.core.partitions[("t", 0)].log_start_offset == 3


# -- groups ------------------------------------------------------------------------------


def coordinator_ready(h: CoreHarness) -> None:
    """Create and load the offsets topic (FindCoordinator creates it on demand)."""
    call1(h.core, ApiKey.FIND_COORDINATOR, {"key": "g"}, 0)
    h.tick(times=5)


@pytest.mark.parametrize("version", versions(ApiKey.FIND_COORDINATOR))
def test_find_coordinator_at_every_version(h: CoreHarness, version: int) -> None:
    coordinator_ready(h)
    if version < 4:
        answer = call1(h.core, ApiKey.FIND_COORDINATOR, {"key": "g"}, version)
        assert (answer["error_code"], answer["node_id"]) == (0, 0)
        assert answer["port"] == h.core.config.port
        if version >= 1:
            # a transactional id: its state partition's leader (the topic created here)
            txn = call1(h.core, ApiKey.FIND_COORDINATOR, {"key": "tx", "key_type": 1},
                        version)
            assert (txn["error_code"], txn["node_id"]) == (0, 0)
            refused = call1(h.core, ApiKey.FIND_COORDINATOR, {"key": "x", "key_type": 2},
                            version)
            assert refused["error_code"] == E.INVALID_REQUEST and refused["error_message"]
        return
    answer = call1(h.core, ApiKey.FIND_COORDINATOR, {"coordinator_keys": ["g", "h", ""]},
                   version)
    assert [(c["key"], c["error_code"], c["node_id"]) for c in answer["coordinators"]] == [
        ("g", 0, 0), ("h", 0, 0), ("", E.INVALID_GROUP_ID, -1)]


def join(h: CoreHarness, version: int, member_id: str = "", group: str = "g") -> Body:
    return call1(h.core, ApiKey.JOIN_GROUP, {
        "group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 5_000,
        "member_id": member_id, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"sub"}]}, version)


def member_of_stable_group(h: CoreHarness, version: int, group: str = "g") -> tuple[str, int]:
    """One member joins (KIP-394 from v4) and syncs; returns (member id, generation)."""
    answer = join(h, version, group=group)
    if version >= 4:
        assert answer["error_code"] == E.MEMBER_ID_REQUIRED
        answer = join(h, version, answer["member_id"], group=group)
    assert answer["error_code"] == 0 and answer["leader"] == answer["member_id"]
    member, generation = answer["member_id"], answer["generation_id"]
    synced = call(h.core, ApiKey.SYNC_GROUP, {
        "group_id": group, "generation_id": generation, "member_id": member,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": b"parts"}]},
        min(version, APIS[ApiKey.SYNC_GROUP].max_version))
    h.tick()
    assert synced and synced[0] is not None and synced[0]["assignment"] == b"parts"
    return member, generation


@pytest.mark.parametrize("version", [*ends(ApiKey.JOIN_GROUP), 3, 4])
def test_join_sync_heartbeat_leave(h: CoreHarness, version: int) -> None:
    coordinator_ready(h)
    member, generation = member_of_stable_group(h, version)
    assert member.startswith("wire-test-")  # the client id of the request header
    heartbeat = min(version, APIS[ApiKey.HEARTBEAT].max_version)
    assert call1(h.core, ApiKey.HEARTBEAT, {"group_id": "g", "generation_id": generation,
                                            "member_id": member}, heartbeat)["error_code"] == 0
    stale = call1(h.core, ApiKey.HEARTBEAT, {"group_id": "g", "generation_id": generation + 1,
                                             "member_id": member}, heartbeat)
    assert stale["error_code"] == E.ILLEGAL_GENERATION
    described = call1(h.core, ApiKey.DESCRIBE_GROUPS, {"groups": ["g", "nope"]})["groups"]
    assert described[0]["group_state"] == "Stable"
    assert described[0]["members"][0]["client_id"] == "wire-test"
    assert described[1]["group_state"] == "Dead" and described[1]["error_code"] == 0


@pytest.mark.parametrize("version", versions(ApiKey.LEAVE_GROUP))
def test_leave_group_at_every_version(h: CoreHarness, version: int) -> None:
    coordinator_ready(h)
    member, _ = member_of_stable_group(h, APIS[ApiKey.JOIN_GROUP].max_version)
    if version < 3:
        answer = call1(h.core, ApiKey.LEAVE_GROUP, {"group_id": "g", "member_id": member},
                       version)
        assert answer["error_code"] == 0 and answer["members"] == []
        again = call1(h.core, ApiKey.LEAVE_GROUP, {"group_id": "g", "member_id": member},
                      version)
        assert again["error_code"] == E.UNKNOWN_MEMBER_ID
    else:
        answer = call1(h.core, ApiKey.LEAVE_GROUP, {"group_id": "g", "members": [
            {"member_id": member}, {"member_id": "ghost"}]}, version)
        assert answer["error_code"] == 0
        assert [(m["member_id"], m["error_code"]) for m in answer["members"]] == [
            (member, 0), ("ghost", E.UNKNOWN_MEMBER_ID)]
    h.tick()
    assert h.core.groups.coordinator.groups["g"].state.value == "Empty"


def commit(h: CoreHarness, version: int, offset: int, group: str = "g",
           partition: int = 0) -> int:
    answer = call1(h.core, ApiKey.OFFSET_COMMIT, {
        "group_id": group, "generation_id": -1, "member_id": "", "topics": [
            {"name": "t", "partitions": [{"partition_index": partition,
                                          "committed_offset": offset,
                                          "committed_metadata": "meta"}]}]}, version)
    h.tick()
    return int(answer["topics"][0]["partitions"][0]["error_code"])


def committed_answer(h: CoreHarness, version: int, group: str = "g",
                     topics: list[Body] | None = None) -> Body:
    if version >= 8:
        body: Body = {"groups": [{"group_id": group, "topics": topics}]}
    else:
        body = {"group_id": group, "topics": topics}
    return call1(h.core, ApiKey.OFFSET_FETCH, body, version)


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_FETCH))
def test_offset_commit_and_fetch_at_every_version(h: CoreHarness, version: int) -> None:
    coordinator_ready(h)
    commit_version = min(max(version, APIS[ApiKey.OFFSET_COMMIT].min_version),
                         APIS[ApiKey.OFFSET_COMMIT].max_version)
    assert commit(h, commit_version, 42) == 0
    asked = [{"name": "t", "partition_indexes": [0, 1]}]
    answer = committed_answer(h, version, topics=asked)
    if version >= 8:
        (group,) = answer["groups"]
        assert group["group_id"] == "g" and group["error_code"] == 0
        topics = group["topics"]
    else:
        topics = answer["topics"]
        if version >= 2:
            assert answer["error_code"] == 0
    parts = {p["partition_index"]: p for p in topics[0]["partitions"]}
    assert (parts[0]["committed_offset"], parts[0]["metadata"]) == (42, "meta")
    assert (parts[1]["committed_offset"], parts[1]["metadata"]) == (-1, "")
    if version >= 2:  # null topics: everything the group committed
        every = committed_answer(h, version, topics=None)
        topics = every["groups"][0]["topics"] if version >= 8 else every["topics"]
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
                for t in topics] == [("t", [0])]


@pytest.mark.parametrize("version", [1, 2, 8])
def test_offset_fetch_coordinator_errors_by_version(h: CoreHarness, version: int) -> None:
    # no offsets topic yet: this broker coordinates nothing
    answer = committed_answer(h, version, topics=[{"name": "t", "partition_indexes": [0]}])
    if version == 1:  # no top-level error: it goes into every partition
        assert answer["topics"][0]["partitions"][0]["error_code"] == E.NOT_COORDINATOR
    elif version < 8:
        assert answer["error_code"] == E.NOT_COORDINATOR and answer["topics"] == []
    else:
        assert answer["groups"][0]["error_code"] == E.NOT_COORDINATOR


@pytest.mark.parametrize("version", versions(ApiKey.LIST_GROUPS))
def test_list_groups_at_every_version(h: CoreHarness, version: int) -> None:
    coordinator_ready(h)
    member_of_stable_group(h, APIS[ApiKey.JOIN_GROUP].max_version, group="busy")
    assert commit(h, APIS[ApiKey.OFFSET_COMMIT].max_version, 1, group="idle") == 0
    every = call1(h.core, ApiKey.LIST_GROUPS, {}, version)
    assert [g["group_id"] for g in every["groups"]] == ["busy", "idle"]
    if version >= 4:
        assert [g["group_state"] for g in every["groups"]] == ["Stable", "Empty"]
        empty = call1(h.core, ApiKey.LIST_GROUPS, {"states_filter": ["empty"]}, version)
        assert [g["group_id"] for g in empty["groups"]] == ["idle"]
    if version >= 5:
        assert {g["group_type"] for g in every["groups"]} == {"classic"}
        new = call1(h.core, ApiKey.LIST_GROUPS, {"types_filter": ["consumer"]}, version)
        assert new["groups"] == []


@pytest.mark.parametrize("version", versions(ApiKey.DELETE_GROUPS))
def test_delete_groups_at_every_version(h: CoreHarness, version: int) -> None:
    coordinator_ready(h)
    member_of_stable_group(h, APIS[ApiKey.JOIN_GROUP].max_version, group="busy")
    assert commit(h, APIS[ApiKey.OFFSET_COMMIT].max_version, 5, group="idle") == 0
    answers = call(h.core, ApiKey.DELETE_GROUPS, {"groups_names": ["busy", "idle", "nope"]},
                   version)
    h.tick()
    assert answers and answers[0] is not None
    assert [(r["group_id"], r["error_code"]) for r in answers[0]["results"]] == [
        ("busy", E.NON_EMPTY_GROUP), ("idle", 0), ("nope", E.GROUP_ID_NOT_FOUND)]
    fetched = committed_answer(h, APIS[ApiKey.OFFSET_FETCH].max_version, group="idle",
                               topics=[{"name": "t", "partition_indexes": [0]}])
    assert fetched["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == -1
    listed = call1(h.core, ApiKey.LIST_GROUPS, {})
    assert [g["group_id"] for g in listed["groups"]] == ["busy"]
