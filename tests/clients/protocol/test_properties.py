"""Property tests of the Kafka codec, over every API and version we declare:

- encode -> decode gives the body back (records as zero-copy slices);
- the compiled codec and the reference walker agree byte for byte and value for value;
- random bytes, truncated frames and mutated frames only ever raise protocol errors
  (never IndexError, struct.error, UnicodeDecodeError, ...), and whatever decodes
  re-encodes to something that decodes the same;
- wrongly typed bodies only ever raise ProtocolError on encode, with a field path.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clients.protocol import reference
from clients.protocol.api_keys import Api
from clients.protocol.codec import (
    decode_request,
    decode_response,
    encode_request_bytes,
    encode_response_bytes,
)
from clients.protocol.errors import ProtocolError, UnsupportedVersionError
from clients.protocol.framing import MIN_FRAME_BYTES, FrameDecoder
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


def encode(api: Api, version: int, body: dict[str, Any], is_response: bool,
           correlation_id: int = 17) -> bytes:
    if is_response:
        return encode_response_bytes(api.key, version, correlation_id, body)
    return encode_request_bytes(api.key, version, correlation_id, "cid", body)


def decode(api: Api, version: int, frame: Any, is_response: bool) -> dict[str, Any]:
    if is_response:
        return decode_response(frame, api.key, version).body
    return decode_request(frame).body


def expected(struct: Any, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """What decoding gives for ``body``: absent fields filled with their defaults."""
    return plain(reference.decode(struct, version, version in _flexible(struct, version),
                                  reference.encode(struct, version,
                                                   version in _flexible(struct, version),
                                                   body))[0])


def _flexible(struct: Any, version: int) -> Any:
    for api in APIS.values():
        if struct is api.request or struct is api.response:
            return api.flexible
    raise AssertionError("unknown struct")


def decode_or_protocol_error(api: Api, version: int, frame: Any, is_response: bool) -> None:
    """Decode; only protocol errors may escape, and whatever decodes must re-encode (a
    request at the API and version its header names: a mutated header may name another,
    and bytes after a request's body are ignored, as Kafka's broker does)."""
    try:
        if is_response:
            body = plain(decode(api, version, frame, is_response))
        else:
            request = decode_request(frame)
            api, version, body = APIS[request.api_key], request.api_version, plain(request.body)
    except PROTOCOL_ERRORS:
        return
    again = encode(api, version, body, is_response)[4:]
    assert plain(decode(api, version, again, is_response)) == body


@SETTINGS
@given(st.data(), api_versions, st.booleans(), st.integers(-(2**31), 2**31 - 1))
def test_round_trip_every_api(data: st.DataObject, av: tuple[Api, int], is_response: bool,
                              correlation_id: int) -> None:
    api, version = av
    struct = api.response if is_response else api.request
    body = data.draw(body_strategy(struct, version))
    frame = encode(api, version, body, is_response, correlation_id)
    flexible = api.is_flexible(version)
    assert frame[4:].endswith(reference.encode(struct, version, flexible, body))
    decoded = decode(api, version, frame[4:], is_response)
    assert plain(decoded) == expected(struct, version, body)
    if is_response:
        assert decode_response(frame[4:], api.key, version).correlation_id == correlation_id
    else:
        request = decode_request(frame[4:])
        assert (request.api_key, request.api_version, request.correlation_id,
                request.client_id) == (api.key, version, correlation_id, "cid")


@SETTINGS
@given(st.binary(max_size=200), api_versions)
def test_random_bytes_only_raise_protocol_errors(data: bytes, av: tuple[Api, int]) -> None:
    api, version = av
    decode_or_protocol_error(api, version, data, True)
    header = api.key.to_bytes(2, "big") + version.to_bytes(2, "big") + b"\0\0\0\1\xff\xff"
    if api.request_header_version(version) == 2:
        header += b"\0"
    decode_or_protocol_error(api, version, header + data, False)


@SETTINGS
@given(st.data(), api_versions, st.booleans())
def test_truncated_and_mutated_frames(data: st.DataObject, av: tuple[Api, int],
                                      is_response: bool) -> None:
    api, version = av
    struct = api.response if is_response else api.request
    frame = bytearray(encode(api, version, data.draw(body_strategy(struct, version)),
                             is_response)[4:])
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(PROTOCOL_ERRORS):
        decode(api, version, bytes(frame[:cut]), is_response)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(frame) - 1))
        frame[pos] = data.draw(st.integers(0, 255))
    decode_or_protocol_error(api, version, bytes(frame), is_response)


wild_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(),
        st.text(max_size=8), st.binary(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=20,
)  # fmt: skip


def mutate_body(data: st.DataObject, value: Any) -> Any:
    """Replace one randomly chosen node of a valid body with an arbitrary value."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(value)))
        return {**value, key: mutate_body(data, value[key])}
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], mutate_body(data, value[i]), *value[i + 1 :]]
    return data.draw(wild_values)


@SETTINGS
@given(st.data(), api_versions, st.booleans())
def test_wrongly_typed_bodies_only_raise_protocol_errors(
    data: st.DataObject, av: tuple[Api, int], is_response: bool
) -> None:
    api, version = av
    struct = api.response if is_response else api.request
    body = mutate_body(data, data.draw(body_strategy(struct, version)))
    try:
        frame = encode(api, version, body, is_response)
    except ProtocolError as e:
        assert f"{api.name} v{version}" in str(e)
        return
    decode_or_protocol_error(api, version, frame[4:], is_response)


@SETTINGS
@given(st.lists(st.binary(max_size=30), max_size=10))
def test_frame_decoder_on_random_streams(chunks: list[bytes]) -> None:
    dec = FrameDecoder(max_frame_bytes=1000)
    try:
        for chunk in chunks:
            for frame in dec.feed(chunk):
                assert MIN_FRAME_BYTES <= len(frame) <= 1000
    except PROTOCOL_ERRORS:
        pass
