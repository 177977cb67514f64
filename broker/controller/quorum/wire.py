"""The replica's messages (:mod:`replication.raft.messages`) as Kafka's quorum requests
and responses, and back: Vote v2, BeginQuorumEpoch v1, EndQuorumEpoch v1, FetchSnapshot
v0 (:mod:`clients.protocol.messages.quorum`) and Fetch v12 of ``__cluster_metadata``-0.

==========================  ============================================================
replica message             on the wire
==========================  ============================================================
QuorumVoteRequest           Vote: ``replica_epoch``, ``replica_id``, ``last_offset_epoch``,
                            ``last_offset``, ``pre_vote``
QuorumVoteResponse          Vote response: ``leader_epoch`` = the voter's epoch,
                            ``leader_id`` (-1 none), ``vote_granted``, ``error_code``
                            (``pre_vote`` is the request's: the wire does not repeat it)
QuorumBeginEpochRequest     BeginQuorumEpoch: ``leader_id``, ``leader_epoch``
QuorumBeginEpochResponse    its response: ``leader_epoch``, ``error_code``
QuorumEndEpochRequest       EndQuorumEpoch: ``leader_id``, ``leader_epoch``,
                            ``preferred_candidates`` (directory ids zero); the answer is
                            built by the driver (the replica answers nothing)
QuorumFetchRequest          Fetch v12: ``replica_id``, ``current_leader_epoch`` = epoch,
                            ``fetch_offset``, ``last_fetched_epoch``; ``max_wait_ms`` 0;
                            ``observer``: ``rack_id`` = :data:`OBSERVER_RACK_ID` (a
                            minikafka convention on v12; Kafka's v17 carries a
                            ``replica_directory_id`` the leader checks instead)
QuorumFetchResponse         Fetch response: ``records`` (:mod:`.entry_batches`, based at
                            the request's ``fetch_offset``), ``high_watermark``,
                            ``diverging_epoch``, ``current_leader`` {id, epoch},
                            ``snapshot_id`` {end_offset, epoch}, ``error_code``
QuorumFetchSnapshotRequest  FetchSnapshot v0: ``replica_id``, ``current_leader_epoch``,
                            ``snapshot_id``, ``position``; ``max_bytes`` 16 MiB (the
                            leader's chunk bound is its own)
QuorumFetchSnapshotResponse its response: ``snapshot_id``, ``current_leader``, ``size``,
                            ``position``, ``unaligned_records`` (the chunk), ``error_code``
==========================  ============================================================

Decoding is strict: a request or response that does not name exactly
``__cluster_metadata`` partition 0, carries an unknown error code or bad records decodes
to None (the driver answers INVALID_REQUEST / drops the response; the replica's timers
re-send).  Nothing here trusts the sender's id: the driver checks it against the login.

Costs: O(fields), O(entries + bytes) for Fetch records.  Pure functions: thread-safe.
"""

from __future__ import annotations

from typing import Any

from broker.controller.quorum.entry_batches import batches_to_entries, entries_to_batches
from broker.metadata.records import METADATA_PARTITION, METADATA_TOPIC
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from replication.raft.messages import (
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

__all__ = ["FETCH_VERSION", "OBSERVER_RACK_ID", "QUORUM_VERSIONS", "decode_request",
           "decode_response", "encode_request", "encode_response", "partition_answer"]

FETCH_VERSION = 12
QUORUM_VERSIONS = {ApiKey.VOTE: 2, ApiKey.BEGIN_QUORUM_EPOCH: 1, ApiKey.END_QUORUM_EPOCH: 1,
                   ApiKey.FETCH: FETCH_VERSION, ApiKey.FETCH_SNAPSHOT: 0}
_MAX_FETCH_BYTES = 16 * 1024 * 1024
OBSERVER_RACK_ID = "kraft-observer"  # a voter from a new directory, catching up

Body = dict[str, Any]


def _one(partition: Body) -> list[Body]:
    return [{"topic_name": METADATA_TOPIC, "partitions": [partition]}]


def _the_partition(body: Body, topics: str = "topics", name: str = "topic_name",
                   index: str = "partition_index") -> Body | None:
    """The one partition of ``__cluster_metadata``-0 a body names, else None."""
    items = body.get(topics) or []
    if len(items) != 1 or items[0][name] != METADATA_TOPIC:
        return None
    partitions = items[0]["partitions"]
    if len(partitions) != 1 or partitions[0][index] != METADATA_PARTITION:
        return None
    return partitions[0]  # type: ignore[no-any-return]


def _error(code: int) -> ErrorCode | None:
    try:
        return ErrorCode(code)
    except ValueError:
        return None


def _leader(leader_id: int) -> int | None:
    return None if leader_id < 0 else leader_id


def _snapshot_id(value: Body | None) -> OffsetAndEpoch | None:
    if value is None or value["end_offset"] < 0 or value["epoch"] < 0:
        return None
    return OffsetAndEpoch(value["end_offset"], value["epoch"])


def _snapshot_body(snapshot_id: OffsetAndEpoch) -> Body:
    return {"end_offset": snapshot_id.end_offset, "epoch": snapshot_id.epoch}


# -- requests ----------------------------------------------------------------------------

def encode_request(message: RaftMessage, destination: int,
                   cluster_id: str | None) -> tuple[ApiKey, Body] | None:
    """The Kafka request carrying ``message`` to voter ``destination`` (None: the message
    is a response, sent as the answer of the request it answers)."""
    match message:
        case QuorumVoteRequest():
            return ApiKey.VOTE, {
                "cluster_id": cluster_id, "voter_id": destination, "topics": _one({
                    "partition_index": METADATA_PARTITION, "replica_epoch": message.epoch,
                    "replica_id": message.candidate_id, "last_offset_epoch": message.last_epoch,
                    "last_offset": message.end_offset, "pre_vote": message.pre_vote})}
        case QuorumBeginEpochRequest():
            return ApiKey.BEGIN_QUORUM_EPOCH, {
                "cluster_id": cluster_id, "voter_id": destination, "topics": _one({
                    "partition_index": METADATA_PARTITION, "leader_id": message.leader_id,
                    "leader_epoch": message.epoch})}
        case QuorumEndEpochRequest():
            return ApiKey.END_QUORUM_EPOCH, {
                "cluster_id": cluster_id, "topics": _one({
                    "partition_index": METADATA_PARTITION, "leader_id": message.leader_id,
                    "leader_epoch": message.epoch,
                    "preferred_candidates": [{"candidate_id": c, "candidate_directory_id":
                                              bytes(16)} for c in message.preferred_successors]})}
        case QuorumFetchRequest():
            return ApiKey.FETCH, {
                "cluster_id": cluster_id, "replica_id": message.replica_id, "max_wait_ms": 0,
                "min_bytes": 0, "max_bytes": _MAX_FETCH_BYTES, "session_id": 0,
                "rack_id": OBSERVER_RACK_ID if message.observer else "",
                "session_epoch": -1, "topics": [{"name": METADATA_TOPIC, "partitions": [{
                    "partition": METADATA_PARTITION, "current_leader_epoch": message.epoch,
                    "fetch_offset": message.fetch_offset,
                    "last_fetched_epoch": message.last_fetched_epoch,
                    "partition_max_bytes": _MAX_FETCH_BYTES}]}]}
        case QuorumFetchSnapshotRequest():
            return ApiKey.FETCH_SNAPSHOT, {
                "cluster_id": cluster_id, "replica_id": message.replica_id,
                "max_bytes": _MAX_FETCH_BYTES, "topics": [{
                    "name": METADATA_TOPIC, "partitions": [{
                        "partition": METADATA_PARTITION,
                        "current_leader_epoch": message.epoch,
                        "snapshot_id": _snapshot_body(message.snapshot_id),
                        "position": message.position}]}]}
    return None


def decode_request(api_key: int, version: int, body: Body) -> tuple[int, RaftMessage] | None:
    """``(sender id, message)`` of a quorum request (Fetch: a voter's), or None when it is
    malformed (not ``__cluster_metadata``-0, a negative id)."""
    if api_key == ApiKey.FETCH:
        p = _the_partition(body, name="name", index="partition")
        if p is None or body["replica_id"] < 0:
            return None
        return body["replica_id"], QuorumFetchRequest(
            p["current_leader_epoch"], body["replica_id"], p["fetch_offset"],
            p["last_fetched_epoch"], body.get("rack_id") == OBSERVER_RACK_ID)
    if api_key == ApiKey.FETCH_SNAPSHOT:
        p = _the_partition(body, name="name", index="partition")
        snapshot_id = None if p is None else _snapshot_id(p["snapshot_id"])
        if p is None or snapshot_id is None or body["replica_id"] < 0 or p["position"] < 0:
            return None
        return body["replica_id"], QuorumFetchSnapshotRequest(
            p["current_leader_epoch"], body["replica_id"], snapshot_id, p["position"])
    p = _the_partition(body)
    if p is None:
        return None
    if api_key == ApiKey.VOTE:
        return p["replica_id"], QuorumVoteRequest(
            p["replica_epoch"], p["replica_id"], p["last_offset_epoch"], p["last_offset"],
            version >= 2 and p["pre_vote"])
    if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
        return p["leader_id"], QuorumBeginEpochRequest(p["leader_epoch"], p["leader_id"])
    if api_key == ApiKey.END_QUORUM_EPOCH:
        successors = (p["preferred_successors"] if version == 0
                      else [c["candidate_id"] for c in p["preferred_candidates"]])
        return p["leader_id"], QuorumEndEpochRequest(p["leader_epoch"], p["leader_id"],
                                                     tuple(successors))
    return None


# -- responses ---------------------------------------------------------------------------

def partition_answer(api_key: int, error: ErrorCode, epoch: int,
                     leader_id: int | None) -> Body:
    """An answer that carries only an error and what the voter knows of the leader (an
    EndQuorumEpoch answer, a request from someone who is not a voter, a malformed one)."""
    leader = -1 if leader_id is None else leader_id
    if api_key == ApiKey.FETCH:
        return {"error_code": 0, "session_id": 0, "responses": [{
            "name": METADATA_TOPIC, "partitions": [{
                "partition_index": METADATA_PARTITION, "error_code": int(error),
                "high_watermark": -1, "current_leader": {"leader_id": leader,
                                                         "leader_epoch": epoch},
                "records": None}]}]}
    if api_key == ApiKey.FETCH_SNAPSHOT:
        return {"throttle_time_ms": 0, "error_code": 0, "topics": [{
            "name": METADATA_TOPIC, "partitions": [{
                "index": METADATA_PARTITION, "error_code": int(error),
                "snapshot_id": {"end_offset": -1, "epoch": -1},
                "current_leader": {"leader_id": leader, "leader_epoch": epoch},
                "size": 0, "position": 0, "unaligned_records": b""}]}]}
    return {"error_code": 0, "topics": _one({
        "partition_index": METADATA_PARTITION, "error_code": int(error), "leader_id": leader,
        "leader_epoch": epoch})}


def encode_response(message: RaftMessage, now_ms: int) -> Body | None:
    """The answer body carrying the replica's response ``message`` (None: not a response)."""
    match message:
        case QuorumVoteResponse():
            body = partition_answer(ApiKey.VOTE, message.error, message.epoch, message.leader_id)
            body["topics"][0]["partitions"][0]["vote_granted"] = message.granted
            return body
        case QuorumBeginEpochResponse():
            return partition_answer(ApiKey.BEGIN_QUORUM_EPOCH, message.error, message.epoch,
                                    None)
        case QuorumFetchResponse():
            body = partition_answer(ApiKey.FETCH, message.error, message.epoch, message.leader_id)
            p = body["responses"][0]["partitions"][0]
            if message.error is ErrorCode.NONE:
                p["high_watermark"] = p["last_stable_offset"] = message.high_watermark
                p["log_start_offset"] = 0
                p["records"] = entries_to_batches(message.base_offset, message.entries, now_ms)
            if message.diverging is not None:
                p["diverging_epoch"] = {"epoch": message.diverging[0],
                                        "end_offset": message.diverging[1]}
            if message.snapshot_id is not None:
                p["snapshot_id"] = _snapshot_body(message.snapshot_id)
            return body
        case QuorumFetchSnapshotResponse():
            body = partition_answer(ApiKey.FETCH_SNAPSHOT, message.error, message.epoch,
                                    message.leader_id)
            body["topics"][0]["partitions"][0].update({
                "snapshot_id": _snapshot_body(message.snapshot_id), "size": message.size,
                "position": message.position, "unaligned_records": message.data})
            return body
    return None


def decode_response(api_key: int, body: Body, request: RaftMessage) -> RaftMessage | None:
    """The replica's message in the answer to ``request``, or None (malformed, or an
    answer the replica has no message for: EndQuorumEpoch)."""
    if api_key == ApiKey.FETCH:
        p = _the_partition(body, topics="responses", name="name")
        if p is None or not isinstance(request, QuorumFetchRequest):
            return None
        error, leader = _error(p["error_code"]), p.get("current_leader")
        if error is None or leader is None:
            return None
        diverging = p.get("diverging_epoch")
        try:
            found = batches_to_entries(p.get("records") or b"", request.fetch_offset) \
                if error is ErrorCode.NONE else []
        except MiniKafkaError:
            return None
        if [o for o, _e in found] != list(range(request.fetch_offset,
                                                request.fetch_offset + len(found))):
            return None  # a gap: entries must follow the fetch offset one by one
        entries = tuple(e for _o, e in found)
        return QuorumFetchResponse(
            leader["leader_epoch"], _leader(leader["leader_id"]), request.fetch_offset,
            entries, max(p["high_watermark"], 0),
            (diverging["epoch"], diverging["end_offset"])
            if diverging is not None and diverging["epoch"] >= 0 else None,
            error, _snapshot_id(p.get("snapshot_id")))
    if api_key == ApiKey.FETCH_SNAPSHOT:
        p = _the_partition(body, name="name", index="index")
        if p is None or not isinstance(request, QuorumFetchSnapshotRequest):
            return None
        error, leader = _error(p["error_code"]), p.get("current_leader")
        if error is None or leader is None:
            return None
        snapshot_id = _snapshot_id(p["snapshot_id"])
        if error is ErrorCode.NONE and (snapshot_id != request.snapshot_id
                                        or p["position"] != request.position):
            return None  # not the chunk asked for
        return QuorumFetchSnapshotResponse(
            leader["leader_epoch"], _leader(leader["leader_id"]), request.snapshot_id,
            p["position"] if error is ErrorCode.NONE else request.position,
            max(p["size"], 0), bytes(p["unaligned_records"] or b""), error)
    p = _the_partition(body)
    error = _error(body["error_code"]) if p is None else _error(p["error_code"])
    if p is None or error is None:
        return None
    if api_key == ApiKey.VOTE and isinstance(request, QuorumVoteRequest):
        return QuorumVoteResponse(p["leader_epoch"], p["vote_granted"],
                                  _leader(p["leader_id"]), request.pre_vote, error)
    if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
        return QuorumBeginEpochResponse(p["leader_epoch"], error)
    return None
