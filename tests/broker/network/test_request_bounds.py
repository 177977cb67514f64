"""broker.network.request_bounds: counts read from frames the codec encoded, at every
version; bounds judged before decoding; never an exception for a malformed frame."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.network.request_bounds import (
    check_request_bounds,
    fetch_partition_count,
    metadata_topic_count,
    produce_partition_count,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request_header, encode_request_bytes
from clients.protocol.registry import APIS

FETCH_VERSIONS = range(APIS[ApiKey.FETCH].min_version, APIS[ApiKey.FETCH].max_version + 1)
PRODUCE_VERSIONS = range(APIS[ApiKey.PRODUCE].min_version,
                         APIS[ApiKey.PRODUCE].max_version + 1)
METADATA_VERSIONS = range(APIS[ApiKey.METADATA].min_version,
                          APIS[ApiKey.METADATA].max_version + 1)


def header_of(api: ApiKey, version: int, body: dict[str, object]):  # type: ignore[no-untyped-def]
    return decode_request_header(encode_request_bytes(api, version, 1, "c", body)[4:])


def fetch_body(layout: list[int]) -> dict[str, object]:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "topics": [
                {"name": f"topic-{t}", "partitions": [
                    {"partition": p, "fetch_offset": 7, "partition_max_bytes": 100}
                    for p in range(n)]}
                for t, n in enumerate(layout)]}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(list(FETCH_VERSIONS)), st.lists(st.integers(0, 40), max_size=12))
def test_fetch_partitions_are_counted_at_every_version(version: int, layout: list[int]) -> None:
    header = header_of(ApiKey.FETCH, version, fetch_body(layout))
    expected = sum(max(n, 1) for n in layout)
    assert fetch_partition_count(header.frame, header.body_offset, version,
                                 stop_after=10**9) == expected
    bound = max(expected - 1, 0)
    over = check_request_bounds(header, max_metadata_topics=1, max_fetch_partitions=bound)
    assert (over is not None) == (expected > bound)
    assert check_request_bounds(header, max_metadata_topics=1,
                                max_fetch_partitions=expected) is None


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(list(PRODUCE_VERSIONS)), st.lists(st.integers(0, 30), max_size=10),
       st.one_of(st.none(), st.binary(max_size=300)), st.one_of(st.none(), st.text(max_size=5)))
def test_produce_partitions_are_counted_at_every_version(
        version: int, layout: list[int], records: bytes | None, txn: str | None) -> None:
    body = {"transactional_id": txn, "acks": -1, "timeout_ms": 100, "topics": [
        {"name": f"topic-{t}", "partitions": [{"index": p, "records": records}
                                               for p in range(n)]}
        for t, n in enumerate(layout)]}
    header = header_of(ApiKey.PRODUCE, version, body)
    expected = sum(max(n, 1) for n in layout)
    assert produce_partition_count(header.frame, header.body_offset, version,
                                   stop_after=10**9) == expected
    bound = max(expected - 1, 0)
    over = check_request_bounds(header, max_metadata_topics=1, max_fetch_partitions=1,
                                max_produce_partitions=bound)
    assert (over is not None) == (expected > bound)
    assert check_request_bounds(header, max_metadata_topics=1, max_fetch_partitions=1,
                                max_produce_partitions=expected) is None


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(list(METADATA_VERSIONS)), st.one_of(st.none(), st.integers(0, 50)))
def test_metadata_topics_are_counted_at_every_version(version: int, n: int | None) -> None:
    if n is None and version == 0:
        n = 0  # v0 has no null
    topics = None if n is None else [{"name": f"t{i}"} for i in range(n)]
    header = header_of(ApiKey.METADATA, version, {"topics": topics})
    assert metadata_topic_count(header.frame, header.body_offset, version) == (n or 0)
    over = check_request_bounds(header, max_metadata_topics=max((n or 0) - 1, 0),
                                max_fetch_partitions=1)
    assert (over is not None) == ((n or 0) > 0)


def test_the_walk_stops_at_the_bound() -> None:
    header = header_of(ApiKey.FETCH, 12, fetch_body([1000] * 100))  # 100,000 partitions
    started = time.perf_counter()
    reason = check_request_bounds(header, max_metadata_topics=1, max_fetch_partitions=1000)
    elapsed = time.perf_counter() - started
    assert reason is not None and "1000" in reason
    assert elapsed < 0.05  # O(bound), not O(frame)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([(ApiKey.FETCH, v) for v in FETCH_VERSIONS]
                       + [(ApiKey.METADATA, v) for v in METADATA_VERSIONS]),
       st.lists(st.integers(0, 5), max_size=6), st.data())
def test_truncated_or_mutated_frames_never_raise(api_version: tuple[ApiKey, int],
                                                 layout: list[int], data: st.DataObject) -> None:
    api, version = api_version
    body = fetch_body(layout) if api == ApiKey.FETCH else {
        "topics": [{"name": f"t{i}"} for i in range(len(layout))]}
    raw = bytearray(encode_request_bytes(api, version, 1, "c", body)[4:])
    header = decode_request_header(bytes(raw))
    cut = data.draw(st.integers(header.body_offset, len(raw)))
    flips = data.draw(st.lists(st.tuples(st.integers(header.body_offset, len(raw) - 1),
                                         st.integers(0, 255)), max_size=4))
    for pos, value in flips:
        raw[pos] = value
    mutated = decode_request_header(bytes(raw[:cut]))
    result = check_request_bounds(mutated, max_metadata_topics=3, max_fetch_partitions=3)
    assert result is None or isinstance(result, str)
