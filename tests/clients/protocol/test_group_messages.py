"""Group API declarations with our extras: round trips and the bytes of the tagged
``error_message`` (the oracle test leaves our extras out)."""

from __future__ import annotations

import io
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
from clients.protocol.messages import groups
from clients.protocol.messages.extras import TAG_ERROR_MESSAGE
from clients.protocol.registry import APIS
from clients.protocol.schema import Array, Struct
from tests.clients.protocol.wire_values import random_body

GROUP_APIS = [api for api in vars(groups).values() if api in APIS.values()]
CASES = [
    pytest.param(api.key, version, id=f"{api.name}-v{version}")
    for api in GROUP_APIS
    for version in range(api.min_version, api.max_version + 1)
]


def _filled(st: Struct, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the decoder returns it: absent fields (tagged ones and those of other
    versions) at their defaults."""
    out: dict[str, Any] = {}
    for f in st.fields:
        value = body.get(f.name, f.default) if version in f.versions else f.default
        if isinstance(f.type, Struct) and value is not None:
            value = _filled(f.type, version, value)
        elif (isinstance(f.type, Array) and isinstance(f.type.element, Struct)
              and value is not None):
            value = [_filled(f.type.element, version, v) for v in value]
        out[f.name] = value
    return out


def test_every_group_api_is_registered() -> None:
    assert {api.name for api in GROUP_APIS} == {
        "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup",
        "OffsetCommit", "OffsetFetch", "ListGroups", "DescribeGroups", "DeleteGroups",
        "OffsetDelete"}


@pytest.mark.parametrize(("api_key", "version"), CASES)
def test_round_trip_with_our_extras(api_key: int, version: int) -> None:
    api = APIS[api_key]
    rng = random.Random(f"{api.name}-{version}")
    for _ in range(30):
        body = random_body(api.request, version, rng)
        frame = encode_request_bytes(api_key, version, 5, "c", body)
        assert decode_request(frame[4:]).body == _filled(api.request, version, body)

        body = random_body(api.response, version, rng)
        frame = encode_response_bytes(api_key, version, 5, body)
        assert decode_response(frame[4:], api_key, version).body == _filled(
            api.response, version, body)


def test_heartbeat_v4_error_message_is_a_tagged_field_kafka_clients_skip() -> None:
    body = {"throttle_time_ms": 0, "error_code": 27, "error_message": "rebalance"}
    frame = encode_response_bytes(ApiKey.HEARTBEAT, 4, 9, body)
    tag = bytes([0x80 | (TAG_ERROR_MESSAGE & 0x7F), TAG_ERROR_MESSAGE >> 7])  # uvarint
    value = bytes([len("rebalance") + 1]) + b"rebalance"  # compact string
    expected = (struct.pack(">i", 9) + b"\x00"  # response header v1
                + struct.pack(">ih", 0, 27)
                + b"\x01" + tag + bytes([len(value)]) + value)
    assert frame == struct.pack(">i", len(expected)) + expected
    assert decode_response(frame[4:], ApiKey.HEARTBEAT, 4).body == body

    kafka_python = pytest.importorskip("kafka.protocol.consumer.group",
                                       reason="kafka-python skips unknown tags")
    decoded = kafka_python.HeartbeatResponse._struct.decode(
        io.BytesIO(frame[9:]), version=4, compact=True, tagged=True)
    assert decoded.error_code == 27


def test_error_message_is_untagged_where_kafka_has_it() -> None:
    # FindCoordinator v1-3 and DescribeGroups v6 carry Kafka's own error_message in order.
    describe = APIS[ApiKey.DESCRIBE_GROUPS].response.fields[1].type.element
    message = next(f for f in describe.fields if f.name == "error_message")
    assert message.is_tagged(5) and not message.is_tagged(6) and 6 in message.versions
    find = APIS[ApiKey.FIND_COORDINATOR].response
    assert all(f.tag is None for f in find.fields)
