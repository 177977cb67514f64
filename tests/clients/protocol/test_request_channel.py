"""The sans-IO request channel: scripted bytes in, responses out, time from a ManualClock."""

from __future__ import annotations

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request, encode_response_bytes
from clients.protocol.errors import ErrorCode, UnsupportedVersionError
from clients.protocol.registry import APIS
from clients.protocol.request_channel import (
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
