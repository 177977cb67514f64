"""Request/response encoding and decoding: zero copy, defaults, versions, precise errors."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import (
    RecordsRef,
    UnknownApiKeyError,
    decode_request,
    decode_request_body,
    decode_request_header,
    decode_response,
    decode_response_body,
    decode_response_header,
    encode_request,
    encode_request_bytes,
    encode_response,
    encode_response_bytes,
    encode_response_prefix,
)
from clients.protocol.errors import (
    ErrorCode,
    MessageTooLargeError,
    ProtocolError,
    UnsupportedVersionError,
)
from clients.protocol.registry import APIS
from clients.protocol.schema import Field, Struct
from clients.protocol.wire_types import (
    Array,
    FieldError,
    Int32,
    Map,
    NullableStr,
    Records,
    Str,
    Tail,
)


def produce_body(*records: object) -> dict[str, Any]:
    parts = [{"index": i, "records": r} for i, r in enumerate(records)]
    return {"acks": -1, "timeout_ms": 1000, "topics": [{"name": "t", "partitions": parts}]}


def raw_frame(meta: Any, tail: bytes = b"") -> bytes:
    """A frame payload (no length field) with arbitrary meta, bypassing the encoder."""
    packed = msgpack.packb(meta, use_bin_type=True)
    return struct.pack(">I", len(packed)) + packed + tail


def payload(buffers: list[Any]) -> bytearray:
    """Join encoder output and drop the 4-byte length, as a reader would."""
    data = bytearray(b"".join(buffers))
    assert struct.unpack(">i", data[:4])[0] == len(data) - 4
    return data[4:]


def test_produce_round_trip_records_are_zero_copy_slices() -> None:
    frame = payload(
        encode_request(ApiKey.PRODUCE, 0, 7, "client-1", produce_body(b"a" * 10, b"bc"))
    )
    req = decode_request(frame)
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (
        ApiKey.PRODUCE, 0, 7, "client-1",
    )  # fmt: skip
    parts = req.body["topics"][0]["partitions"]
    assert [bytes(p["records"]) for p in parts] == [b"a" * 10, b"bc"]
    assert all(type(p["records"]) is memoryview and p["records"].obj is frame for p in parts)
    frame[-1:] = b"X"  # a slice of the frame, not a copy
    assert bytes(parts[1]["records"]) == b"bX"
    assert req.body["transactional_id"] is None  # default filled in by the encoder


def test_encoder_passes_record_buffers_through_without_mutating_body() -> None:
    records = memoryview(bytearray(b"xyz"))
    body = produce_body(records)
    snapshot = repr(body)
    buffers = encode_request(ApiKey.PRODUCE, 0, 1, None, body)
    assert buffers[1] is records and len(buffers) == 2
    assert repr(body) == snapshot


def test_fetch_response_prefix_with_length_only_records() -> None:
    parts = [
        {"partition_index": i, "error_code": 0, "high_watermark": 10, "records": RecordsRef(n)}
        for i, n in enumerate([5, 0, 3])
    ]
    body = {"responses": [{"name": "t", "partitions": parts}]}
    prefix, records = encode_response_prefix(ApiKey.FETCH, 0, 99, body)
    assert records == [RecordsRef(5), RecordsRef(0), RecordsRef(3)]
    # the sender writes prefix, then each region's bytes (here: simulated sendfile)
    frame = payload([prefix, b"AAAAA", b"", b"BBB"])
    resp = decode_response(frame, ApiKey.FETCH, 0)
    assert resp.correlation_id == 99
    got = resp.body["responses"][0]["partitions"]
    assert [bytes(p["records"]) for p in got] == [b"AAAAA", b"", b"BBB"]
    assert got[0]["error_message"] is None and got[0]["log_start_offset"] == -1
    with pytest.raises(ProtocolError, match="RecordsRef has no bytes; use encode_response_prefix"):
        encode_response(ApiKey.FETCH, 0, 99, body)


def test_header_then_body_two_step_decoding() -> None:
    frame = encode_request_bytes(ApiKey.METADATA, 0, 5, "c", {"topics": None})[4:]
    header = decode_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 0, 5)
    req = decode_request_body(header)
    assert req.body == {"topics": None, "allow_auto_topic_creation": False}
    resp_frame = encode_response_bytes(
        ApiKey.METADATA, 0, 5, {"brokers": [], "controller_id": 1, "topics": []}
    )[4:]
    rh = decode_response_header(resp_frame)
    assert rh.correlation_id == 5
    assert decode_response_body(rh, ApiKey.METADATA, 0)["cluster_id"] is None


def test_unknown_api_key_is_distinguishable_and_keeps_correlation_id() -> None:
    frame = raw_frame([999, 0, 31, "c", {}])
    header = decode_request_header(frame)
    assert header.correlation_id == 31
    with pytest.raises(UnknownApiKeyError, match="unknown api key 999") as info:
        decode_request_body(header)
    assert info.value.api_key == 999 and info.value.code == ErrorCode.UNSUPPORTED_VERSION


def test_unsupported_version_names_the_api_and_range() -> None:
    header = decode_request_header(raw_frame([0, 3, 8, None, {}]))
    with pytest.raises(
        UnsupportedVersionError, match=r"Produce v3 is not supported \(versions 0-0\)"
    ) as info:
        decode_request_body(header)
    assert not isinstance(info.value, UnknownApiKeyError)
    with pytest.raises(UnsupportedVersionError):
        encode_request(ApiKey.FETCH, 1, 1, None, {})


@pytest.mark.parametrize(
    ("partition", "message"),
    [
        ({"index": "1", "records": 0}, "index: expected int32, got str"),
        ({"index": True, "records": 0}, "index: expected int32, got bool"),
        ({"index": 2**31, "records": 0}, "index: expected int32, got int 2147483648"),
        ({"records": 0}, "index: missing field"),
        ({"index": 1, "records": 0, "x": 1}, r"unexpected field\(s\) 'x' in v0"),
        (
            {"index": 1, "records": -1},
            "records: expected records length \\(int >= 0\\), got int -1",
        ),
        ({"index": 1, "records": 9}, "records: records length 9 overruns the frame tail"),
    ],
)
def test_bad_field_error_names_api_version_and_path(
    partition: dict[str, Any], message: str
) -> None:
    ok = {"index": 0, "records": 0}
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5,
            "topics": [{"name": "t", "partitions": [ok, partition]}]}  # fmt: skip
    with pytest.raises(ProtocolError, match=r"^INVALID_REQUEST: Produce v0 request: "
                       rf"topics\[0\]\.partitions\[1\](\.|: ){message}"):  # fmt: skip
        decode_request(raw_frame([0, 0, 1, "c", body]))


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"a": 1}, "request meta must be a 5-element array .* got dict"),
        ([0, 0, 1, "c"], "5-element array .* got list of 4"),
        (["0", 0, 1, "c", {}], "api_key: expected int16 >= 0, got str"),
        ([-1, 0, 1, "c", {}], "api_key: expected int16 >= 0, got int -1"),
        ([0, 2**15, 1, "c", {}], "api_version: expected int16, got int 32768"),
        ([0, 0, 1.5, "c", {}], "correlation_id: expected int32, got float"),
        ([0, 0, 1, b"c", {}], "client_id: expected nullable str, got bytes"),
        ([0, 0, 1, "c", []], "Produce v0 request: <body>: expected struct, got list"),
    ],
)
def test_bad_request_header(meta: Any, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode_request(raw_frame(meta))


def test_bad_frame_shapes() -> None:
    with pytest.raises(ProtocolError, match="request frame of 3 bytes is below the minimum"):
        decode_request(b"\x00\x00\x00")
    with pytest.raises(ProtocolError, match=r"meta_length 100 outside 1\.\.2"):
        decode_request(struct.pack(">I", 100) + b"\x90\x90")
    with pytest.raises(ProtocolError, match="meta_length 0 outside"):
        decode_request(struct.pack(">I", 0) + b"\x90")
    with pytest.raises(ProtocolError, match="meta is not valid msgpack: ExtraData"):
        decode_request(struct.pack(">I", 2) + b"\x90\x90")
    with pytest.raises(ProtocolError, match="meta is not valid msgpack"):
        decode_request(struct.pack(">I", 3) + b"\xa2\xff\xfe")  # invalid utf-8 string
    with pytest.raises(ProtocolError, match="response meta must be a 2-element array"):
        decode_response(raw_frame([1, {}, 3]), ApiKey.HEARTBEAT, 0)


def test_tail_bytes_not_claimed_by_records_are_an_error() -> None:
    meta = [12, 0, 1, "c", {"group_id": "g", "generation_id": 1, "member_id": "m",
                            "group_instance_id": None}]  # fmt: skip
    assert decode_request(raw_frame(meta)).body["group_id"] == "g"
    with pytest.raises(ProtocolError, match="Records fields take 0 bytes but the tail has 2"):
        decode_request(raw_frame(meta, b"zz"))


def test_response_bodies_are_validated() -> None:
    frame = raw_frame([4, {"error_code": "oops", "error_message": None}])
    with pytest.raises(ProtocolError, match="Heartbeat v0 response: error_code: expected int16"):
        decode_response(frame, ApiKey.HEARTBEAT, 0)


def test_encoder_errors() -> None:
    with pytest.raises(ProtocolError, match="Produce v0 request: acks: missing field"):
        encode_request(ApiKey.PRODUCE, 0, 1, None, {"timeout_ms": 1, "topics": []})
    with pytest.raises(ProtocolError, match="unexpected field 'ack' in v0"):
        encode_request(ApiKey.PRODUCE, 0, 1, None, {**produce_body(), "ack": 1})
    with pytest.raises(
        ProtocolError, match=r"topics\[0\]\.partitions\[0\]\.records: expected records"
    ):
        encode_request(ApiKey.PRODUCE, 0, 1, None, produce_body("text"))
    with pytest.raises(ProtocolError, match="correlation_id: expected int32"):
        encode_request(ApiKey.PRODUCE, 0, 2**31, None, produce_body())
    with pytest.raises(ProtocolError, match="cannot encode"):  # lone surrogate is not utf-8
        encode_request(
            ApiKey.DELETE_TOPICS, 0, 1, None, {"topic_names": ["\udc80"], "timeout_ms": 1}
        )


def test_encoder_enforces_max_frame_bytes() -> None:
    body = produce_body(b"x" * 1000)
    assert len(encode_request_bytes(ApiKey.PRODUCE, 0, 1, None, body, max_frame_bytes=2000)) < 2000
    with pytest.raises(
        MessageTooLargeError, match=r"Produce v0 request frame of \d+ bytes exceeds"
    ):
        encode_request(ApiKey.PRODUCE, 0, 1, None, body, max_frame_bytes=1000)


def test_map_and_nullable_types() -> None:
    body = {"topics": [{"name": "t", "num_partitions": 3, "replication_factor": 2,
                        "configs": {"cleanup.policy": "compact"}}], "timeout_ms": 100}  # fmt: skip
    req = decode_request(encode_request_bytes(ApiKey.CREATE_TOPICS, 0, 1, None, body)[4:])
    topic = req.body["topics"][0]
    assert topic["configs"] == {"cleanup.policy": "compact"} and topic["assignments"] == []
    body["topics"][0]["configs"] = {"retention.ms": 5}  # type: ignore[index]
    with pytest.raises(
        ProtocolError, match=r"topics\[0\]\.configs\['retention.ms'\]: expected str"
    ):
        encode_request(ApiKey.CREATE_TOPICS, 0, 1, None, body)


def test_fields_added_in_later_versions() -> None:
    s = Struct(a=Int32, tag=Field(NullableStr, since=1, default=None),
               extra=Field(Array(Int32), since=2, default=[]))  # fmt: skip
    enc0, dec0 = s.compile(0, True), s.compile(0, False)
    assert enc0({"a": 1, "tag": None}, []) == {"a": 1}  # default value may be dropped
    with pytest.raises(FieldError, match="exists only from v1; v0 cannot carry str"):
        enc0({"a": 1, "tag": "x"}, [])
    assert dec0({"a": 1}, Tail(memoryview(b""))) == {"a": 1, "tag": None, "extra": []}
    with pytest.raises(FieldError, match=r"unexpected field\(s\) 'tag' in v0"):
        dec0({"a": 1, "tag": None}, Tail(memoryview(b"")))
    dec1 = s.compile(1, False)
    with pytest.raises(FieldError, match="missing field") as info:
        dec1({"a": 1}, Tail(memoryview(b"")))
    assert info.value.where() == "tag"
    with pytest.raises(TypeError, match="added in v1 needs a default"):
        Struct(a=Field(Int32, since=1))
    with pytest.raises(TypeError, match="Records cannot be map"):
        Map(Str, Records)


def test_registry_uses_kafka_api_keys() -> None:
    expected = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
                9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
                13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
                18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics", 22: "InitProducerId",
                23: "OffsetsForLeaderEpoch", 56: "AlterPartition", 62: "BrokerRegistration",
                63: "BrokerHeartbeat", 35: "DescribeLogDirs",
                67: "AllocateProducerIds"}  # fmt: skip
    assert {k: api.name for k, api in APIS.items()} == expected
    assert all(api.key == k and api.supports(0) for k, api in APIS.items())
    only_records = {
        k for k, api in APIS.items() if api.request.has_records() or api.response.has_records()
    }
    assert only_records == {ApiKey.PRODUCE, ApiKey.FETCH}
