"""The controller APIs (AlterPartition, BrokerRegistration, BrokerHeartbeat,
AllocateProducerIds): kafka-python ships no schema for them, so the oracle test does not
cover them.  Here: every served version round-trips through our codec (our tagged extras
included), and hand-computed bytes pin Kafka's field order and types.
"""

from __future__ import annotations

import random
import struct
import uuid
from typing import Any

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import (
    decode_request,
    decode_response,
    encode_request_bytes,
    encode_response_bytes,
)
from clients.protocol.messages.extras import TAG_ERROR_MESSAGE
from clients.protocol.registry import APIS
from clients.protocol.schema import Array, Struct
from tests.clients.protocol.wire_values import random_body

CONTROLLER_APIS = (
    ApiKey.ALTER_PARTITION,
    ApiKey.BROKER_REGISTRATION,
    ApiKey.BROKER_HEARTBEAT,
    ApiKey.ALLOCATE_PRODUCER_IDS,
)
CASES = [
    pytest.param(key, version, id=f"{APIS[key].name}-v{version}")
    for key in CONTROLLER_APIS
    for version in range(APIS[key].min_version, APIS[key].max_version + 1)
]


def _request_header(api_key: int, correlation_id: int, client_id: str) -> bytes:
    """Request header v2 (every controller API is flexible from v0): no tagged fields."""
    raw = client_id.encode()
    return struct.pack(">hhih", api_key, 0, correlation_id, len(raw)) + raw + b"\x00"


def _filled(st: Struct, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the decoder returns it: absent (tagged) fields at their defaults."""
    out: dict[str, Any] = {}
    for f in st.fields_at(version):
        value = body.get(f.name, f.default)
        if isinstance(f.type, Struct) and value is not None:
            value = _filled(f.type, version, value)
        elif (isinstance(f.type, Array) and isinstance(f.type.element, Struct)
              and value is not None):
            value = [_filled(f.type.element, version, v) for v in value]
        out[f.name] = value
    return out


@pytest.mark.parametrize(("api_key", "version"), CASES)
def test_round_trip(api_key: int, version: int) -> None:
    api = APIS[api_key]
    assert api.is_flexible(version)
    rng = random.Random(f"{api.name}-{version}")
    for _ in range(50):
        body = random_body(api.request, version, rng)
        frame = encode_request_bytes(api_key, version, 11, "broker-1", body)
        request = decode_request(frame[4:])
        assert (request.api_key, request.api_version, request.correlation_id,
                request.client_id) == (api_key, version, 11, "broker-1")
        assert request.body == _filled(api.request, version, body)
        assert encode_request_bytes(api_key, version, 11, "broker-1", request.body) == frame

        body = random_body(api.response, version, rng)
        frame = encode_response_bytes(api_key, version, 11, body)
        response = decode_response(frame[4:], api_key, version)
        assert response.correlation_id == 11
        assert response.body == _filled(api.response, version, body)
        assert encode_response_bytes(api_key, version, 11, response.body) == frame


def test_allocate_producer_ids_request_bytes() -> None:
    frame = encode_request_bytes(ApiKey.ALLOCATE_PRODUCER_IDS, 0, 7, "broker-1",
                                 {"broker_id": 3, "broker_epoch": 0x0102030405060708})
    expected = (_request_header(67, 7, "broker-1")
                + struct.pack(">i", 3)  # broker_id int32
                + struct.pack(">q", 0x0102030405060708)  # broker_epoch int64
                + b"\x00")  # no tagged fields
    assert frame == struct.pack(">i", len(expected)) + expected


def test_allocate_producer_ids_response_bytes_with_our_error_message() -> None:
    assert TAG_ERROR_MESSAGE == 1100  # uvarint 0xcc 0x08
    frame = encode_response_bytes(ApiKey.ALLOCATE_PRODUCER_IDS, 0, 7, {
        "error_code": 0, "producer_id_start": 5000, "producer_id_len": 1000,
        "error_message": "ok"})
    expected = (struct.pack(">i", 7) + b"\x00"  # response header v1
                + struct.pack(">ihqi", 0, 0, 5000, 1000)  # throttle, error, start, len
                + b"\x01" + b"\xcc\x08" + b"\x03" + b"\x03ok")  # 1 tagged field: compact str
    assert frame == struct.pack(">i", len(expected)) + expected


def test_broker_registration_request_bytes() -> None:
    incarnation = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff").bytes
    frame = encode_request_bytes(ApiKey.BROKER_REGISTRATION, 0, 1, "b", {
        "broker_id": 2, "cluster_id": "mk", "incarnation_id": incarnation,
        "listeners": [{"name": "PLAINTEXT", "host": "h", "port": 65000,
                       "security_protocol": 0}],
        "rack": None})
    expected = (_request_header(62, 1, "b")
                + struct.pack(">i", 2) + b"\x03mk"  # broker_id, cluster_id compact string
                + incarnation  # uuid: 16 raw bytes
                + b"\x02"  # listeners: compact array of 1
                + b"\x0aPLAINTEXT" + b"\x02h" + struct.pack(">Hh", 65000, 0) + b"\x00"
                + b"\x01"  # features: compact array of 0
                + b"\x00"  # rack: null compact string
                + b"\x00")  # no tagged fields
    assert frame == struct.pack(">i", len(expected)) + expected


def test_broker_heartbeat_response_defaults_are_kafkas() -> None:
    frame = encode_response_bytes(ApiKey.BROKER_HEARTBEAT, 0, 1, {"error_code": 0})
    body = decode_response(frame[4:], ApiKey.BROKER_HEARTBEAT, 0).body
    assert body["is_fenced"] is True and body["is_caught_up"] is False
    assert body["error_message"] is None
