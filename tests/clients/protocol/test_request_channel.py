"""The sans-IO request channel: scripted bytes in, responses out, time from a ManualClock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request, encode_response_bytes
from clients.protocol.errors import (
    AuthenticationError,
    ErrorCode,
    RequestTimedOutError,
    UnsupportedVersionError,
)
from clients.protocol.registry import APIS
from clients.protocol.request_channel import (
    Handshake,
    ProtocolViolation,
    RequestChannel,
    api_versions_answer,
    api_versions_request,
    negotiated_version,
)
from timer.clock import ManualClock

METADATA_BODY = {"brokers": [], "cluster_id": None, "controller_id": -1, "topics": []}


def _joined(buffers: list[object]) -> bytes:
    return b"".join(bytes(b) for b in buffers)  # type: ignore[call-overload]


def _channel(clock: ManualClock) -> RequestChannel:
    return RequestChannel(clock.now_ms, client_id="t", node_id=3)


def _send_metadata(channel: RequestChannel, timeout_ms: int = 1000):  # type: ignore[no-untyped-def]
    version = APIS[ApiKey.METADATA].max_version
    request, buffers = channel.send_request(ApiKey.METADATA, version, {"topics": None},
                                            timeout_ms=timeout_ms)
    assert request is not None
    return request, _joined(buffers)


def _answer(correlation_id: int) -> bytes:
    version = APIS[ApiKey.METADATA].max_version
    return bytes(encode_response_bytes(ApiKey.METADATA, version, correlation_id, METADATA_BODY))


def test_requests_get_consecutive_correlation_ids_and_encode_as_kafka_requests() -> None:
    channel = _channel(ManualClock())
    first, wire = _send_metadata(channel)
    second, _ = _send_metadata(channel)
    assert (first.correlation_id, second.correlation_id) == (0, 1)
    decoded = decode_request(wire[4:])
    assert decoded.correlation_id == 0
    assert decoded.client_id == "t"
    assert list(channel.in_flight) == [first, second]


def test_a_response_split_across_reads_completes_once_whole() -> None:
    channel = _channel(ManualClock())
    request, _ = _send_metadata(channel)
    frame = _answer(request.correlation_id)
    assert channel.receive_data(frame[:3]) == []  # inside the length field
    assert channel.receive_data(frame[3:10]) == []
    [response] = channel.receive_data(frame[10:])
    assert response.request is request
    assert response.body is not None and response.body["topics"] == []
    assert not channel.in_flight


def test_two_responses_in_one_read_complete_in_order() -> None:
    channel = _channel(ManualClock())
    first, _ = _send_metadata(channel)
    second, _ = _send_metadata(channel)
    responses = channel.receive_data(_answer(0) + _answer(1))
    assert [r.request for r in responses] == [first, second]


def test_a_correlation_id_mismatch_breaks_the_channel_keeping_earlier_responses() -> None:
    channel = _channel(ManualClock())
    first, _ = _send_metadata(channel)
    second, _ = _send_metadata(channel)
    with pytest.raises(ProtocolViolation, match="correlation id 7 does not match") as caught:
        channel.receive_data(_answer(0) + _answer(7))
    assert [r.request for r in caught.value.completed] == [first]
    assert list(channel.in_flight) == [second]


def test_a_response_with_nothing_in_flight_is_a_violation() -> None:
    channel = _channel(ManualClock())
    with pytest.raises(ProtocolViolation, match="no request in flight"):
        channel.receive_data(_answer(0))


def test_a_request_expires_when_the_clock_reaches_its_deadline() -> None:
    clock = ManualClock(5_000)
    channel = _channel(clock)
    slow, _ = _send_metadata(channel, timeout_ms=1000)
    clock.advance(500)
    fast, _ = _send_metadata(channel, timeout_ms=100)
    assert channel.next_deadline_ms() == 5_600
    clock.advance(99)
    assert channel.expired() == []
    clock.advance(1)
    assert channel.expired() == [fast]
    clock.advance(400)
    assert channel.expired() == [slow, fast]


def test_reset_fails_every_request_in_flight_and_drops_a_partial_frame() -> None:
    channel = _channel(ManualClock())
    request, _ = _send_metadata(channel)
    channel.receive_data(_answer(0)[:6])
    error = UnsupportedVersionError("gone")
    [failed] = channel.reset(error)
    assert (failed.request, failed.error) == (request, error)
    again, _ = _send_metadata(channel)
    [response] = channel.receive_data(_answer(again.correlation_id))  # no stale prefix
    assert response.request is again


def test_negotiation_picks_the_highest_common_version() -> None:
    ours = APIS[ApiKey.METADATA]
    assert negotiated_version(ApiKey.METADATA, (0, ours.max_version + 5)) == ours.max_version
    assert negotiated_version(ApiKey.METADATA, (0, ours.min_version + 1)) == ours.min_version + 1
    with pytest.raises(UnsupportedVersionError, match="we serve"):
        negotiated_version(ApiKey.METADATA, (ours.max_version + 1, ours.max_version + 2))
    with pytest.raises(UnsupportedVersionError, match="does not serve"):
        negotiated_version(ApiKey.METADATA, None)


def _versions_frame(version: int, error_code: int, keys: dict[int, tuple[int, int]]) -> bytes:
    body = {"error_code": error_code, "throttle_time_ms": 0, "api_keys": [
        {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in keys.items()]}
    return bytes(encode_response_bytes(ApiKey.API_VERSIONS, version, 0, body))[4:]


def test_api_versions_answer_gives_the_brokers_ranges() -> None:
    version, body = api_versions_request()
    assert version == APIS[ApiKey.API_VERSIONS].max_version
    assert body["client_software_name"] == "minikafka"
    keys = {ApiKey.METADATA: (0, 9), ApiKey.API_VERSIONS: (0, 3)}
    assert api_versions_answer(_versions_frame(version, 0, keys), version) == keys


def test_api_versions_unsupported_answer_asks_for_a_retry_at_the_brokers_version() -> None:
    version, _ = api_versions_request()
    frame = _versions_frame(0, ErrorCode.UNSUPPORTED_VERSION, {ApiKey.API_VERSIONS: (0, 1)})
    retry = api_versions_answer(frame, version)
    assert isinstance(retry, tuple) and retry[0] == 1
    none_common = _versions_frame(0, ErrorCode.UNSUPPORTED_VERSION,
                                  {ApiKey.API_VERSIONS: (version + 1, version + 2)})
    with pytest.raises(UnsupportedVersionError, match="no ApiVersions version in common"):
        api_versions_answer(none_common, version)


# ---------------------------------------------------------------- the connect-time exchange
def _wire_answer(request_wire: bytes, api_key: ApiKey, body: dict[str, object],
                 version: int | None = None) -> bytes:
    """A broker's answer to the request ``request_wire`` (at its version unless given)."""
    request = decode_request(request_wire[4:])
    return bytes(encode_response_bytes(api_key, request.api_version if version is None
                                       else version, request.correlation_id, body))


def _versions_body(error_code: int, keys: Mapping[ApiKey, tuple[int, int]]) -> dict[str, object]:
    return {"error_code": error_code, "throttle_time_ms": 0, "api_keys": [
        {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in keys.items()]}


def _feed_within_bytes_wanted(handshake: Handshake, data: bytes) -> list[object]:
    """Feed ``data`` as a socket adapter does: never more than ``bytes_wanted``."""
    out: list[object] = []
    while data:
        n = handshake.bytes_wanted()
        out, data = handshake.receive_data(data[:n]), data[n:]
    return out


def test_the_handshake_learns_versions_and_leaves_correlation_id_0_to_the_channel() -> None:
    channel = _channel(ManualClock())
    handshake = Handshake(channel, timeout_ms=1000)
    wire = _joined(handshake.start())
    assert decode_request(wire[4:]).api_key == ApiKey.API_VERSIONS
    keys = {ApiKey.METADATA: (0, 12), ApiKey.API_VERSIONS: (0, 3)}
    answer = _wire_answer(wire, ApiKey.API_VERSIONS, _versions_body(0, keys))
    assert handshake.bytes_wanted() == 4  # the length field first, then just the frame
    assert _feed_within_bytes_wanted(handshake, answer) == []
    assert handshake.done and handshake.api_versions == keys
    assert not channel.in_flight
    request, _ = _send_metadata(channel)
    assert request.correlation_id == 0


def test_the_handshake_retries_at_the_brokers_api_versions_version() -> None:
    channel = _channel(ManualClock())
    handshake = Handshake(channel, timeout_ms=1000)
    first = _joined(handshake.start())
    fallback = _wire_answer(first, ApiKey.API_VERSIONS, _versions_body(
        ErrorCode.UNSUPPORTED_VERSION, {ApiKey.API_VERSIONS: (0, 1)}), version=0)
    retry = _joined(handshake.receive_data(fallback))
    assert decode_request(retry[4:]).api_version == 1 and not handshake.done
    keys = {ApiKey.API_VERSIONS: (0, 1)}
    assert handshake.receive_data(_wire_answer(retry, ApiKey.API_VERSIONS,
                                               _versions_body(0, keys))) == []
    assert handshake.done and handshake.api_versions == keys


def test_a_handshake_step_times_out_on_the_channels_clock() -> None:
    clock = ManualClock(1_000)
    handshake = Handshake(_channel(clock), timeout_ms=300)
    handshake.start()
    clock.advance(200)
    assert handshake.remaining_ms() == 100
    clock.advance(100)
    assert handshake.remaining_ms() == 0
    with pytest.raises(RequestTimedOutError, match="API_VERSIONS not answered within 300 ms"):
        raise handshake.timed_out()


@dataclass(frozen=True)
class _Login:
    mechanism: str
    username: str
    password: bytes


def test_the_handshake_logs_in_after_api_versions() -> None:
    channel = _channel(ManualClock())
    handshake = Handshake(channel, timeout_ms=1000, login=_Login("PLAIN", "alice", b"pw"))
    wire = _joined(handshake.start())
    keys = {ApiKey.API_VERSIONS: (0, 3), ApiKey.SASL_HANDSHAKE: (0, 1),
            ApiKey.SASL_AUTHENTICATE: (0, 2)}
    wire = _joined(handshake.receive_data(
        _wire_answer(wire, ApiKey.API_VERSIONS, _versions_body(0, keys))))
    assert decode_request(wire[4:]).api_key == ApiKey.SASL_HANDSHAKE
    assert handshake.closed_error() is not None  # a close while logging in: refused
    wire = _joined(handshake.receive_data(
        _wire_answer(wire, ApiKey.SASL_HANDSHAKE, {"error_code": 0, "mechanisms": ["PLAIN"]})))
    assert decode_request(wire[4:]).api_key == ApiKey.SASL_AUTHENTICATE
    with pytest.raises(AuthenticationError, match="refused"):
        handshake.receive_data(_wire_answer(wire, ApiKey.SASL_AUTHENTICATE, {
            "error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": "refused",
            "auth_bytes": b"", "session_lifetime_ms": 0}))
    assert not handshake.done
