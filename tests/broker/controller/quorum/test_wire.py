"""The replica's messages survive Kafka's wire (encode, frame, decode) unchanged, and
malformed answers decode to nothing."""

from __future__ import annotations

import pytest

from broker.controller.quorum.entry_batches import entries_to_batches
from broker.controller.quorum.wire import (
    QUORUM_VERSIONS,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import (
    decode_request as decode_frame,
)
from clients.protocol.codec import (
    decode_response as decode_answer_frame,
)
from clients.protocol.codec import (
    encode_request_bytes,
    encode_response_bytes,
)
from clients.protocol.errors import ErrorCode
from replication.raft.messages import (
    Entry,
    OffsetAndEpoch,
    QuorumBeginEpochRequest,
    QuorumBeginEpochResponse,
    QuorumEndEpochRequest,
    QuorumFetchRequest,
    QuorumFetchResponse,
    QuorumFetchSnapshotRequest,
    QuorumFetchSnapshotResponse,
    QuorumVoteRequest,
    QuorumVoteResponse,
    RaftMessage,
)
from replication.raft.replica import LEADER_CHANGE

REQUESTS: list[RaftMessage] = [
    QuorumVoteRequest(7, 2, 6, 42, True),
    QuorumVoteRequest(7, 2, -1, 0, False),
    QuorumBeginEpochRequest(9, 3),
    QuorumEndEpochRequest(9, 3, (1, 2)),
    QuorumFetchRequest(9, 1, 17, 8),
    QuorumFetchRequest(9, 1, 17, 8, observer=True),
    QuorumFetchSnapshotRequest(9, 1, OffsetAndEpoch(40, 8), 1024),
]


@pytest.mark.parametrize("message", REQUESTS, ids=lambda m: type(m).__name__)
def test_requests_round_trip(message: RaftMessage) -> None:
    encoded = encode_request(message, 1, "mk")
    assert encoded is not None
    api_key, body = encoded
    version = QUORUM_VERSIONS[api_key]
    frame = encode_request_bytes(api_key, version, 1, "controller-2", body)
    request = decode_frame(frame[4:])
    sender = getattr(message, "candidate_id", None) or getattr(message, "leader_id", None) \
        or getattr(message, "replica_id", None)
    assert decode_request(api_key, version, request.body) == (sender, message)


ANSWERS: list[tuple[RaftMessage, RaftMessage]] = [
    (QuorumVoteRequest(7, 2, 6, 42, True), QuorumVoteResponse(7, True, None, True)),
    (QuorumVoteRequest(7, 2, 6, 42, False),
     QuorumVoteResponse(8, False, 3, False, ErrorCode.FENCED_LEADER_EPOCH)),
    (QuorumBeginEpochRequest(9, 3), QuorumBeginEpochResponse(9)),
    (QuorumFetchRequest(9, 1, 17, 8), QuorumFetchResponse(
        9, 3, 17, (Entry(8, b"a"), Entry(9, LEADER_CHANGE), Entry(9, b"b")), 18)),
    (QuorumFetchRequest(9, 1, 17, 8), QuorumFetchResponse(9, 3, 17, (), 12, (7, 15))),
    (QuorumFetchRequest(9, 1, 17, 8),
     QuorumFetchResponse(10, None, 17, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)),
    (QuorumFetchRequest(9, 1, 3, 2),
     QuorumFetchResponse(9, 3, 3, (), 44, snapshot_id=OffsetAndEpoch(40, 8))),
    (QuorumFetchSnapshotRequest(9, 1, OffsetAndEpoch(40, 8), 4),
     QuorumFetchSnapshotResponse(9, 3, OffsetAndEpoch(40, 8), 4, 10, b"snapsh")),
    (QuorumFetchSnapshotRequest(9, 1, OffsetAndEpoch(40, 8), 4),
     QuorumFetchSnapshotResponse(9, 3, OffsetAndEpoch(40, 8), 4,
                                 error=ErrorCode.SNAPSHOT_NOT_FOUND)),
]


@pytest.mark.parametrize(("request_message", "answer"), ANSWERS,
                         ids=lambda m: type(m).__name__)
def test_answers_round_trip(request_message: RaftMessage, answer: RaftMessage) -> None:
    encoded = encode_request(request_message, 1, None)
    assert encoded is not None
    api_key = encoded[0]
    version = QUORUM_VERSIONS[api_key]
    body = encode_response(answer, 1_000)
    assert body is not None
    frame = encode_response_bytes(api_key, version, 1, body)
    decoded = decode_answer_frame(frame[4:], api_key, version).body
    assert decode_response(api_key, decoded, request_message) == answer


def test_a_fetch_answer_with_a_gap_or_another_partition_decodes_to_nothing() -> None:
    request = QuorumFetchRequest(9, 1, 17, 8)
    body = encode_response(QuorumFetchResponse(9, 3, 17, (Entry(9, b"a"),), 18), 0)
    assert body is not None
    body["responses"][0]["partitions"][0]["records"] = entries_to_batches(
        19, [Entry(9, b"a")], 0)  # starts at 19, asked from 17
    assert decode_response(ApiKey.FETCH, body, request) is None
    body["responses"][0]["name"] = "other"
    assert decode_response(ApiKey.FETCH, body, request) is None
    assert decode_request(ApiKey.VOTE, 2, {"topics": []}) is None


def test_a_fetch_snapshot_that_is_malformed_or_not_the_chunk_asked_decodes_to_nothing() -> None:
    request = QuorumFetchSnapshotRequest(9, 1, OffsetAndEpoch(40, 8), 4)
    encoded = encode_request(request, 3, None)
    assert encoded is not None
    api_key, body = encoded
    for key, value in (("position", -1), ("snapshot_id", {"end_offset": -1, "epoch": 8})):
        bad = {**body["topics"][0]["partitions"][0], key: value}
        broken = {**body, "topics": [{**body["topics"][0], "partitions": [bad]}]}
        assert decode_request(api_key, 0, broken) is None  # the driver: INVALID_REQUEST
    answer = encode_response(QuorumFetchSnapshotResponse(
        9, 3, OffsetAndEpoch(40, 8), 4, 10, b"snapsh"), 0)
    assert answer is not None
    answer["topics"][0]["partitions"][0]["position"] = 0  # another chunk than asked
    assert decode_response(api_key, answer, request) is None
