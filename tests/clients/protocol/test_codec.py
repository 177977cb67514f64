"""Kafka request/response frames: headers, zero-copy records, buffers, errors with paths."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import (
    UnknownApiKeyError,
    decode_request,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_request_bytes,
    encode_response,
    encode_response_bytes,
)
from clients.protocol.compiler import (
    INLINE_RECORDS_BYTES,
    compile_decoder,
    compile_encoder,
    uvarint,
)
from clients.protocol.errors import MessageTooLargeError, ProtocolError, UnsupportedVersionError
from clients.protocol.registry import APIS
from clients.protocol.schema import INT32, INT64, STRING, Array, Field, Struct


def produce_body(records: Any) -> dict[str, Any]:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 1000,
            "topics": [{"name": "t", "partitions": [{"index": 3, "records": records}]}]}


class Region:
    """A records value known only by length (as a broker's file regions are)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length


def test_produce_request_bytes_are_kafkas_layout() -> None:
    frame = encode_request_bytes(ApiKey.PRODUCE, 3, 7, "c", produce_body(b"RB"))
    expected_body = (
        b"\xff\xff"  # transactional_id null
        + struct.pack(">hi", -1, 1000)
        + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
        + struct.pack(">i", 1) + struct.pack(">i", 3) + struct.pack(">i", 2) + b"RB"
    )
    header = struct.pack(">hhih", 0, 3, 7, 1) + b"c"
    assert frame == struct.pack(">i", len(header) + len(expected_body)) + header + expected_body


def test_flexible_request_has_header_v2_and_compact_fields() -> None:
    frame = encode_request_bytes(ApiKey.PRODUCE, 9, 7, None, produce_body(b"RB"))
    header = struct.pack(">hhih", 0, 9, 7, -1) + b"\x00"  # null client id, no tagged fields
    body = (b"\x00"  # compact null string
            + struct.pack(">hi", -1, 1000)
            + b"\x02" + b"\x02t"  # one topic, compact "t"
            + b"\x02" + struct.pack(">i", 3) + b"\x03RB" + b"\x00"  # partition + tags
            + b"\x00"  # topic tags
            + b"\x00")  # body tags
    assert frame[4:] == header + body


def test_records_decode_as_zero_copy_slices_of_the_frame() -> None:
    frame = bytearray(encode_request_bytes(ApiKey.PRODUCE, 8, 1, "c", produce_body(b"x" * 100)))
    view = memoryview(frame)[4:]
    request = decode_request(view)
    records = request.body["topics"][0]["partitions"][0]["records"]
    assert isinstance(records, memoryview) and bytes(records) == b"x" * 100
    assert records.obj is frame  # no copy: the frame's own buffer


def test_large_records_are_their_own_buffer_small_ones_are_copied() -> None:
    big = b"b" * (INLINE_RECORDS_BYTES + 1)
    body = produce_body(big)
    parts = encode_request(ApiKey.PRODUCE, 8, 1, "c", body)
    assert any(p is big for p in parts)
    assert body["topics"][0]["partitions"][0]["records"] is big  # body not mutated
    small = encode_request(ApiKey.PRODUCE, 8, 1, "c", produce_body(b"s" * 10))
    assert len(small) == 1


def test_regions_pass_through_a_fetch_response_with_their_length() -> None:
    region = Region(5000)
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"name": "t", "partitions": [{"partition_index": 0, "error_code": 0,
                                      "high_watermark": 9, "records": region}]}]}
    parts = encode_response(ApiKey.FETCH, 12, 5, body)
    assert region in parts
    before = parts[: parts.index(region)]
    assert bytes(before[-1]).endswith(uvarint(5000 + 1))  # compact length, then the bytes
    total = sum(len(p) for p in parts)
    assert struct.unpack_from(">i", parts[0])[0] == total - 4


def test_two_step_request_decoding_and_null_client_id() -> None:
    frame = encode_request_bytes(ApiKey.METADATA, 12, 42, None, {"topics": None})[4:]
    header = decode_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == \
        (ApiKey.METADATA, 12, 42, None)
    assert decode_request_body(header).body["topics"] is None


def test_unknown_api_key_keeps_the_correlation_id() -> None:
    frame = struct.pack(">hhih", 999, 0, 77, -1) + b"body"
    header = decode_request_header(frame)
    assert header.correlation_id == 77 and header.body_offset == -1
    with pytest.raises(UnknownApiKeyError, match="unknown api key 999"):
        decode_request_body(header)


def test_unsupported_version_names_the_api_and_range() -> None:
    api = APIS[ApiKey.PRODUCE]
    frame = struct.pack(">hhih", 0, 99, 5, -1)
    header = decode_request_header(frame)
    assert header.body_offset == -1
    with pytest.raises(UnsupportedVersionError,
                       match=f"Produce v99 is not supported .versions {api.min_version}-"):
        decode_request_body(header)
    with pytest.raises(UnsupportedVersionError):
        encode_request(ApiKey.PRODUCE, 0, 1, "c", produce_body(None))


def test_api_versions_response_uses_header_v0_even_when_flexible() -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}]}
    v3 = encode_response_bytes(ApiKey.API_VERSIONS, 3, 9, body)
    assert v3[4:8] == struct.pack(">i", 9)
    assert v3[8:10] == struct.pack(">h", 0)  # error_code right after the correlation id
    meta = encode_response_bytes(ApiKey.METADATA, 12, 9, {"brokers": []})
    assert meta[8] == 0  # other flexible responses: header v1 (empty tagged fields)


def test_bad_body_on_encode_names_api_version_and_path() -> None:
    body = produce_body(b"r")
    body["topics"][0]["partitions"][0]["index"] = "zero"
    with pytest.raises(ProtocolError,
                       match=r"Produce v8 request: topics\[0\].partitions\[0\].index: "
                             r"expected int32, got str"):
        encode_request(ApiKey.PRODUCE, 8, 1, "c", body)
    body["topics"][0]["partitions"][0]["index"] = 1 << 40
    with pytest.raises(ProtocolError, match="expected int32, got int"):
        encode_request(ApiKey.PRODUCE, 8, 1, "c", body)


def test_bad_frame_on_decode_names_the_path() -> None:
    frame = bytearray(encode_request_bytes(ApiKey.PRODUCE, 8, 1, "c", produce_body(b"rr"))[4:])
    del frame[-1]  # the records come up one byte short
    with pytest.raises(ProtocolError, match=r"Produce v8 request: topics\[0\].partitions\[0\]"
                                            r".records: records of 2 bytes runs past the end"):
        decode_request(bytes(frame))


def test_trailing_bytes_after_a_response_body_are_an_error() -> None:
    frame = encode_response_bytes(ApiKey.METADATA, 1, 1, {"brokers": [], "controller_id": 0,
                                                           "topics": []})[4:] + b"\x00"
    with pytest.raises(ProtocolError, match="1 bytes after the body"):
        decode_response(frame, ApiKey.METADATA, 1)


def test_trailing_bytes_after_a_request_body_are_ignored_as_kafka_does() -> None:
    # librdkafka 2.16's Metadata v12 for all topics, as captured on the wire: 3 bytes of
    # padding after the tagged fields.
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    request = decode_request(frame)
    assert (request.api_key, request.api_version) == (ApiKey.METADATA, 12)
    assert request.body["topics"] is None
    assert request.body["allow_auto_topic_creation"] is False


def test_short_or_malformed_headers() -> None:
    with pytest.raises(ProtocolError, match="shorter than a request header"):
        decode_request_header(b"\x00\x03\x00\x01")
    with pytest.raises(ProtocolError, match="client_id of 50 bytes runs past the end"):
        decode_request_header(struct.pack(">hhih", 3, 1, 1, 50) + b"abc")
    with pytest.raises(ProtocolError, match="client_id length -7"):
        decode_request_header(struct.pack(">hhih", 3, 1, 1, -7))
    with pytest.raises(ProtocolError, match="no correlation id"):
        decode_response(b"\x00\x01", ApiKey.METADATA, 1)


def test_encoder_enforces_max_frame_bytes() -> None:
    with pytest.raises(MessageTooLargeError, match="exceeds max_frame_bytes 100"):
        encode_request(ApiKey.PRODUCE, 8, 1, "c", produce_body(b"x" * 200), max_frame_bytes=100)


def test_unknown_tagged_fields_are_skipped_and_defaults_not_written() -> None:
    body = {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}
    plain = encode_response_bytes(ApiKey.API_VERSIONS, 3, 1, body)
    assert plain.endswith(b"\x00")  # no tagged field: finalized_features_epoch is -1
    # append an unknown tag 77 of 3 bytes to the body's tagged fields
    tagged = plain[:-1] + b"\x01" + uvarint(77) + uvarint(3) + b"abc"
    tagged = struct.pack(">i", len(tagged) - 4) + tagged[4:]
    decoded = decode_response(tagged[4:], ApiKey.API_VERSIONS, 3).body
    assert decoded["finalized_features_epoch"] == -1 and decoded["api_keys"] == []
    with_epoch = encode_response_bytes(ApiKey.API_VERSIONS, 3, 1,
                                       {**body, "finalized_features_epoch": 5})
    assert decode_response(with_epoch[4:], ApiKey.API_VERSIONS, 3).body[
        "finalized_features_epoch"] == 5


def test_every_api_key_has_one_declaration_with_kafkas_number() -> None:
    assert set(APIS) == set(ApiKey)
    assert {int(k): a.name for k, a in APIS.items()}[0] == "Produce"
    assert APIS[ApiKey.API_VERSIONS].key == 18 and APIS[ApiKey.FETCH].key == 1


@pytest.mark.parametrize("flexible", [False, True])
def test_a_message_with_many_fields_still_encodes_array_lengths(flexible: bool) -> None:
    """The compiler names its constants after the namespace size; at 32 entries one was
    called "P32", the name of the array-length packer, and every later array length
    was packed with the wrong struct (seen on DescribeLogDirs v4 with two more tagged
    fields: "pack expected 2 items")."""
    # fixed fields between strings: one packer constant each, so the namespace grows
    fields = [Field(f"f{i}", INT64 if i % 2 else STRING) for i in range(80)]
    st = Struct(*fields, Field("items", Array(INT32)), Field("names", Array(STRING)))
    body: dict[str, Any] = {f"f{i}": (i if i % 2 else f"s{i}") for i in range(80)}
    body.update(items=[1, 2, 3], names=["a", "bc"])
    encode = compile_encoder(st, 0, flexible, "many")
    decode = compile_decoder(st, 0, flexible, "many")
    data = bytes(encode(body, bytearray(), []))
    assert decode(data, 0, len(data)) == (body, len(data))
