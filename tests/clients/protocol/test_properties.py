"""Property tests: schema-derived round trips, and fuzzing that only ever yields
ProtocolError-family exceptions (never IndexError, KeyError, TypeError, ...)."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clients.protocol.api_keys import Api
from clients.protocol.codec import decode_request, decode_response, encode_request, encode_response
from clients.protocol.errors import ProtocolError, UnsupportedVersionError
from clients.protocol.framing import FrameDecoder
from clients.protocol.registry import APIS
from tests.clients.protocol.strategies import body_strategy

PROTOCOL_ERRORS = (ProtocolError, UnsupportedVersionError)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
API_VERSIONS = [
    (api, v) for api in APIS.values() for v in range(api.min_version, api.max_version + 1)
]
api_versions = st.sampled_from(API_VERSIONS)


def plain(value: Any) -> Any:
    """Records slices as bytes, so decoded bodies compare with the drawn ones."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {k: plain(x) for k, x in value.items()}
    if isinstance(value, list):
        return [plain(x) for x in value]
    return value


def records_in_order(value: Any, out: list[Any]) -> list[Any]:
    if isinstance(value, memoryview):
        out.append(value)
    elif isinstance(value, dict):
        for x in value.values():
            records_in_order(x, out)
    elif isinstance(value, list):
        for x in value:
            records_in_order(x, out)
    return out


def encode(api: Api, version: int, body: dict[str, Any], is_response: bool,
           correlation_id: int = 17) -> bytearray:  # fmt: skip
    if is_response:
        buffers = encode_response(api.key, version, correlation_id, body)
    else:
        buffers = encode_request(api.key, version, correlation_id, "cid", body)
    return bytearray(b"".join(buffers))


def decode(api: Api, version: int, frame: Any, is_response: bool) -> dict[str, Any]:
    if is_response:
        return decode_response(frame, api.key, version).body
    return decode_request(frame).body


def decode_or_protocol_error(api: Api, version: int, frame: Any, is_response: bool) -> None:
    """Decode; only protocol errors may escape, and whatever decodes must re-encode."""
    try:
        body = plain(decode(api, version, frame, is_response))
    except PROTOCOL_ERRORS:
        return
    again = encode(api, version, body, is_response)[4:]
    assert plain(decode(api, version, again, is_response)) == body


@SETTINGS
@given(st.data(), api_versions, st.booleans(), st.integers(-(2**31), 2**31 - 1))
def test_round_trip_every_api(data: st.DataObject, av: tuple[Api, int], is_response: bool,
                              correlation_id: int) -> None:  # fmt: skip
    api, version = av
    schema = api.response if is_response else api.request
    body = data.draw(body_strategy(schema, version))
    wire = encode(api, version, body, is_response, correlation_id)
    [frame] = FrameDecoder().feed(wire)
    decoded = decode(api, version, frame, is_response)
    assert plain(decoded) == body
    for r in records_in_order(decoded, []):
        assert r.obj is frame.obj  # zero copy: slices of the frame buffer
    if is_response:
        assert decode_response(frame, api.key, version).correlation_id == correlation_id
    else:
        req = decode_request(frame)
        assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (
            api.key, version, correlation_id, "cid",
        )  # fmt: skip


@SETTINGS
@given(st.binary(max_size=200), api_versions)
def test_random_bytes_only_raise_protocol_errors(data: bytes, av: tuple[Api, int]) -> None:
    api, version = av
    for is_response in (False, True):
        decode_or_protocol_error(api, version, data, is_response)


@SETTINGS
@given(st.data(), api_versions, st.booleans())
def test_truncated_and_mutated_frames(data: st.DataObject, av: tuple[Api, int],
                                      is_response: bool) -> None:  # fmt: skip
    api, version = av
    schema = api.response if is_response else api.request
    frame = encode(api, version, data.draw(body_strategy(schema, version)), is_response)[4:]
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(PROTOCOL_ERRORS):  # the tail or the meta comes up short
        decode(api, version, bytes(frame[:cut]), is_response)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(frame) - 1))
        frame[pos] = data.draw(st.integers(0, 255))
    decode_or_protocol_error(api, version, frame, is_response)


msgpack_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(),
        st.text(max_size=8), st.binary(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=20,
)  # fmt: skip


def mutate_body(data: st.DataObject, value: Any) -> Any:
    """Replace one randomly chosen node of a valid body with arbitrary msgpack data."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(value)))
        return {**value, key: mutate_body(data, value[key])}
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], mutate_body(data, value[i]), *value[i + 1 :]]
    return data.draw(msgpack_values)


@SETTINGS
@given(st.data(), api_versions, st.booleans())
def test_wrongly_typed_bodies_only_raise_protocol_errors(
    data: st.DataObject, av: tuple[Api, int], is_response: bool
) -> None:
    api, version = av
    schema = api.response if is_response else api.request
    frame = encode(api, version, data.draw(body_strategy(schema, version)), is_response)[4:]
    (meta_length,) = struct.unpack_from(">I", frame)
    meta = msgpack.unpackb(frame[4 : 4 + meta_length], raw=False)
    meta[-1] = mutate_body(data, meta[-1])  # the body, with Records as lengths
    packed = msgpack.packb(meta, use_bin_type=True)
    mutated = struct.pack(">I", len(packed)) + packed + frame[4 + meta_length :]
    decode_or_protocol_error(api, version, mutated, is_response)


@SETTINGS
@given(st.lists(st.binary(max_size=30), max_size=10))
def test_frame_decoder_on_random_streams(chunks: list[bytes]) -> None:
    dec = FrameDecoder(max_frame_bytes=1000)
    try:
        for chunk in chunks:
            for frame in dec.feed(chunk):
                assert 5 <= len(frame) <= 1000
    except PROTOCOL_ERRORS:
        pass
