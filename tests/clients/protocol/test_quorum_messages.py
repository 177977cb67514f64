"""The KRaft quorum APIs (Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum,
FetchSnapshot):
kafka-python ships no schema for them, so the oracle test does not cover them.  Here:
every served version round-trips through our codec, and hand-computed bytes pin Kafka's
field order and types (Vote v2 with PreVote; BeginQuorumEpoch v0, not flexible).
"""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import (
    decode_request,
    decode_response,
    encode_request_bytes,
    encode_response_bytes,
)
from clients.protocol.registry import APIS
from clients.protocol.schema import Array, Struct
from tests.clients.protocol.wire_values import random_body

QUORUM_APIS = (ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
               ApiKey.DESCRIBE_QUORUM, ApiKey.FETCH_SNAPSHOT)
CASES = [
    pytest.param(key, version, id=f"{APIS[key].name}-v{version}")
    for key in QUORUM_APIS
    for version in range(APIS[key].min_version, APIS[key].max_version + 1)
]


def _filled(st: Struct, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the decoder returns it: every field of every version, those the
    version does not carry (and absent tagged ones) at their defaults."""
    out: dict[str, Any] = {}
    for f in st.fields:
        value = body.get(f.name, f.default) if version in f.versions else f.default
        if (isinstance(f.type, Array) and isinstance(f.type.element, Struct)
                and value is not None):
            value = [_filled(f.type.element, version, v) for v in value]
        out[f.name] = value
    return out


@pytest.mark.parametrize(("api_key", "version"), CASES)
def test_round_trip(api_key: int, version: int) -> None:
    api = APIS[api_key]
    rng = random.Random(f"{api.name}-{version}")
    for _ in range(30):
        body = random_body(api.request, version, rng)
        frame = encode_request_bytes(api_key, version, 5, "controller-1", body)
        request = decode_request(frame[4:])
        assert (request.api_key, request.api_version) == (api_key, version)
        assert request.body == _filled(api.request, version, body)
        assert encode_request_bytes(api_key, version, 5, "controller-1", request.body) == frame
        body = random_body(api.response, version, rng)
        frame = encode_response_bytes(api_key, version, 5, body)
        response = decode_response(frame[4:], api_key, version)
        assert response.body == _filled(api.response, version, body)
        assert encode_response_bytes(api_key, version, 5, response.body) == frame


def test_vote_v2_request_bytes() -> None:
    frame = encode_request_bytes(ApiKey.VOTE, 2, 9, "c", {
        "cluster_id": "mk", "voter_id": 2,
        "topics": [{"topic_name": "__cluster_metadata", "partitions": [{
            "partition_index": 0, "replica_epoch": 7, "replica_id": 1,
            "last_offset_epoch": 6, "last_offset": 42, "pre_vote": True}]}]})
    expected = (struct.pack(">hhih", 52, 2, 9, 1) + b"c" + b"\x00"  # header v2
                + b"\x03mk" + struct.pack(">i", 2)  # cluster_id, voter_id
                + b"\x02" + b"\x13__cluster_metadata"  # 1 topic
                + b"\x02" + struct.pack(">iii", 0, 7, 1)  # 1 partition: index, epoch, id
                + bytes(32)  # replica_directory_id, voter_directory_id: zero uuids
                + struct.pack(">iq", 6, 42) + b"\x01"  # last epoch, last offset, pre_vote
                + b"\x00" + b"\x00" + b"\x00")  # tagged fields: partition, topic, body
    assert frame == struct.pack(">i", len(expected)) + expected


def test_begin_quorum_epoch_v0_is_not_flexible() -> None:
    frame = encode_request_bytes(ApiKey.BEGIN_QUORUM_EPOCH, 0, 3, "c", {
        "cluster_id": None, "topics": [{"topic_name": "t", "partitions": [
            {"partition_index": 0, "leader_id": 3, "leader_epoch": 5}]}]})
    expected = (struct.pack(">hhih", 53, 0, 3, 1) + b"c"  # header v1
                + struct.pack(">h", -1)  # cluster_id: null string
                + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
                + struct.pack(">i", 1) + struct.pack(">iii", 0, 3, 5))
    assert frame == struct.pack(">i", len(expected)) + expected


def test_fetch_snapshot_v0_bytes() -> None:
    """Kafka's FetchSnapshotRequest v0 (flexible): replica id, max bytes, topics >
    partitions > (partition, current leader epoch, SnapshotId {end offset, epoch},
    position); ClusterId is tagged (absent when null); the response's chunk is records."""
    frame = encode_request_bytes(ApiKey.FETCH_SNAPSHOT, 0, 9, "c", {
        "cluster_id": None, "replica_id": 3002, "max_bytes": 1000, "topics": [{
            "name": "__cluster_metadata", "partitions": [{
                "partition": 0, "current_leader_epoch": 5,
                "snapshot_id": {"end_offset": 40, "epoch": 8}, "position": 1024}]}]})
    expected = (struct.pack(">hhih", 59, 0, 9, 1) + b"c" + b"\x00"  # header v2
                + struct.pack(">ii", 3002, 1000)
                + b"\x02" + b"\x13__cluster_metadata"  # 1 topic
                + b"\x02" + struct.pack(">ii", 0, 5)  # 1 partition: index, leader epoch
                + struct.pack(">qi", 40, 8) + b"\x00"  # snapshot id + its tagged fields
                + struct.pack(">q", 1024)  # position
                + b"\x00" + b"\x00" + b"\x00")  # tagged fields: partition, topic, body
    assert frame == struct.pack(">i", len(expected)) + expected
    answer = encode_response_bytes(ApiKey.FETCH_SNAPSHOT, 0, 9, {
        "throttle_time_ms": 0, "error_code": 0, "topics": [{"name": "m", "partitions": [{
            "index": 0, "error_code": 0, "snapshot_id": {"end_offset": 40, "epoch": 8},
            "current_leader": None, "size": 3, "position": 0,
            "unaligned_records": b"abc"}]}]})
    expected = (struct.pack(">i", 9) + b"\x00"  # response header v1
                + struct.pack(">ih", 0, 0) + b"\x02" + b"\x02m"
                + b"\x02" + struct.pack(">ih", 0, 0) + struct.pack(">qi", 40, 8) + b"\x00"
                + struct.pack(">qq", 3, 0) + b"\x04abc"  # size, position, records
                + b"\x00" + b"\x00" + b"\x00")
    assert answer == struct.pack(">i", len(expected)) + expected
