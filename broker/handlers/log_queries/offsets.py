"""ListOffsets and OffsetsForLeaderEpoch: where a partition's offsets are.

Errors are per partition (one bad partition never fails the others).  A request as a
follower (``replica_id`` >= 0) from a connection not logged in as that broker is
refused CLUSTER_AUTHORIZATION_FAILED for every partition (it would see the log end,
above the HW).  Kafka's semantics, with these differences:

- ListOffsets: -1 latest (consumers: the HW, read_committed: the LSO, which also bounds
  timestamp lookups; a replica id >= 0: the log end, as Kafka), -2 earliest (and -4,
  v8+: the log is all local), -3 the largest timestamp (below the HW; every version),
  -5 (v9+) offset -1 (no tiered storage), other negative timestamps INVALID_REQUEST; a
  leader whose epoch's first offset is not committed yet answers OFFSET_NOT_AVAILABLE;
  ``leader_epoch`` is the epoch of the batch found (the current epoch for -1).
- OffsetsForLeaderEpoch: the leader epoch cache's answer
  (:meth:`replication.partition.Partition.last_offset_for_leader_epoch`).

Costs: ListOffsets by timestamp is one time-index lookup per partition, -3 a walk of
the batch headers of the segments whose max timestamp can win; OffsetsForLeaderEpoch one
epoch-cache lookup per partition.  Thread-safety: the broker's event loop thread only.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Handler, RequestContext, as_minikafka_error, require, serves
from broker.handlers.fetch import READ_COMMITTED
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsResponsePartition,
    ListOffsetsResponseTopic,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    OffsetsForLeaderEpochResponsePartition,
    OffsetsForLeaderEpochResponseTopic,
)
from clients.protocol.offset_specs import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from clients.records.record import decode_batch
from replication.partition import Partition

log = logging.getLogger(__name__)


# -- ListOffsets ---------------------------------------------------------------------


def _batch_max(seg: Any, batch: Any, low: int, upper: int) -> tuple[int, int] | None:
    """``(timestamp, offset)`` of the first record with the largest timestamp among the
    batch's records in ``[low, upper)``."""
    best: tuple[int, int] | None = None
    for record in decode_batch(seg.read_bytes(batch.position, batch.size), validate=False):
        if low <= record.offset < upper and (best is None or record.timestamp > best[0]):
            best = (record.timestamp, record.offset)
    return best


def _max_timestamp(partition: Partition, upper: int) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record with the largest timestamp in
    ``[log start, upper)``; None when there is no record.  Segments are visited by
    decreasing max timestamp (an upper bound of what they hold in range) until none can
    win; whole batches in range are judged by their header, the batches that straddle
    the range by their records."""
    low = partition.log_start_offset
    best: tuple[int, int] | None = None  # timestamp, offset
    for seg in sorted(partition.log.segments, key=lambda s: -s.max_timestamp):
        if best is not None and seg.max_timestamp < best[0]:
            break
        if not seg.size or seg.base_offset >= upper:
            continue
        for batch in seg.iter_batches(0):
            if batch.base_offset >= upper:
                break
            if batch.last_offset < low or (best is not None
                                           and batch.max_timestamp < best[0]):
                continue
            if batch.base_offset >= low and batch.last_offset < upper:
                found: tuple[int, int] | None = (batch.max_timestamp, batch.base_offset)
            else:
                found = _batch_max(seg, batch, low, upper)
            if found is not None and (best is None or found[0] > best[0]
                                      or (found[0] == best[0] and found[1] < best[1])):
                best = found
    if best is None:
        return None
    timestamp = best[0]
    for seg in partition.log.segments:  # the record itself: decode the winning batch
        winner = seg.find_batch(best[1])
        if winner is not None:
            exact = _batch_max(seg, winner, max(low, best[1]), upper)
            if exact is not None and exact[0] == timestamp:
                return exact[1], exact[0]
            break
    return best[1], timestamp


def _list_offset(partition: Partition, timestamp: int, replica_id: int,
                 result: ListOffsetsResponsePartition, committed: bool = False,
                 version: int = 7) -> None:
    consumer = replica_id == -1
    upper = ((partition.last_stable_offset if committed else partition.high_watermark)
             if consumer else partition.log_end_offset)
    epochs = partition.leader_epoch_cache
    if timestamp == LATEST_TIERED_TIMESTAMP and version >= 9:
        return  # no tiered storage: offset -1 (Kafka's answer without remote storage)
    if timestamp == EARLIEST_TIMESTAMP or (timestamp == EARLIEST_LOCAL_TIMESTAMP
                                           and version >= 8):  # all of the log is local
        result["offset"] = partition.log_start_offset
        result["leader_epoch"] = epochs.epoch_for_offset(partition.log_start_offset)
        return
    if timestamp < 0 and timestamp not in (LATEST_TIMESTAMP, MAX_TIMESTAMP):
        raise MiniKafkaError(f"timestamp {timestamp} is not -1, -2, -3 or >= 0",
                             ErrorCode.INVALID_REQUEST)
    epoch_start = partition.leader_epoch_start_offset
    if consumer and epoch_start > partition.high_watermark:
        raise MiniKafkaError(f"{partition.topic}-{partition.index}: the high watermark has "
                             f"not reached the start of leader epoch {partition.leader_epoch}",
                             ErrorCode.OFFSET_NOT_AVAILABLE)
    if timestamp == LATEST_TIMESTAMP:
        result["offset"], result["leader_epoch"] = upper, partition.leader_epoch
        return
    found = (_max_timestamp(partition, upper) if timestamp == MAX_TIMESTAMP
             else partition.log.offset_for_timestamp(timestamp))
    if found is not None and found[0] < upper:
        result["offset"], result["timestamp"] = found[0], found[1]
        result["leader_epoch"] = epochs.epoch_for_offset(found[0])


def _replica_refusal(ctx: RequestContext, replica_id: int, api: str) -> MiniKafkaError | None:
    """The error for a request as follower ``replica_id`` (it sees the log end, above the
    HW) from a connection not logged in as that broker (logged once per request), or
    None when it may ask."""
    if replica_id < 0 or ctx.may_act_as_broker(replica_id):
        return None
    log.warning("refused a %s as replica %d from a connection not logged in as it",
                api, replica_id)
    return MiniKafkaError(f"only broker {replica_id} may ask as replica {replica_id}",
                          ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


def handle_list_offsets(core: HandlerCore, body: ListOffsetsRequest,
                        respond: Respond[ListOffsetsResponse], ctx: RequestContext) -> None:
    refusal = _replica_refusal(ctx, body["replica_id"], "ListOffsets")
    topics: list[ListOffsetsResponseTopic] = []
    for topic in body["topics"]:
        parts: list[ListOffsetsResponsePartition] = []
        for request in topic["partitions"]:
            result: ListOffsetsResponsePartition = {
                "partition_index": request["partition_index"], "error_code": 0,
                "timestamp": -1, "offset": -1, "leader_epoch": -1}
            try:
                if refusal is not None:
                    raise refusal
                require(ctx, "Describe", "Topic", topic["name"])
                partition = core.partition_or_error(topic["name"], request["partition_index"])
                if body["replica_id"] != -2:  # -2 (debugging) may read a follower
                    partition.check_leader_epoch(request["current_leader_epoch"])
                    if not partition.is_leader:
                        raise MiniKafkaError(f"broker {core.config.node_id} is not the leader "
                                             f"of {topic['name']}-{partition.index}",
                                             ErrorCode.NOT_LEADER_OR_FOLLOWER)
                _list_offset(partition, request["timestamp"], body["replica_id"], result,
                             body["isolation_level"] == READ_COMMITTED, ctx.version)
            except Exception as exc:  # (ListOffsets has no error_message field)
                result["error_code"] = int(as_minikafka_error(exc).code)
            parts.append(result)
        topics.append({"name": topic["name"], "partitions": parts})
    respond({"throttle_time_ms": 0, "topics": topics})


# -- OffsetsForLeaderEpoch --------------------------------------------------------------


def handle_offsets_for_leader_epoch(core: HandlerCore, body: OffsetsForLeaderEpochRequest,
                                    respond: Respond[OffsetsForLeaderEpochResponse],
                                    ctx: RequestContext) -> None:
    refusal = _replica_refusal(ctx, body["replica_id"], "OffsetsForLeaderEpoch")
    topics: list[OffsetsForLeaderEpochResponseTopic] = []
    for topic in body["topics"]:
        parts: list[OffsetsForLeaderEpochResponsePartition] = []
        for request in topic["partitions"]:
            result: OffsetsForLeaderEpochResponsePartition = {
                "partition": request["partition"], "error_code": 0, "leader_epoch": -1,
                "end_offset": -1}
            try:
                if refusal is not None:
                    raise refusal
                require(ctx, "Describe", "Topic", topic["name"])
                partition = core.partition_or_error(topic["name"], request["partition"])
                answer = partition.last_offset_for_leader_epoch(
                    request["current_leader_epoch"], request["leader_epoch"])
                result["leader_epoch"], result["end_offset"] = (answer.leader_epoch,
                                                                answer.end_offset)
            except Exception as exc:  # (no error_message field)
                result["error_code"] = int(as_minikafka_error(exc).code)
            parts.append(result)
        topics.append({"name": topic["name"], "partitions": parts})
    respond({"throttle_time_ms": 0, "topics": topics})


OFFSET_QUERY_HANDLERS: dict[int, Handler] = {
    ApiKey.LIST_OFFSETS: serves(handle_list_offsets),
    ApiKey.OFFSETS_FOR_LEADER_EPOCH: serves(handle_offsets_for_leader_epoch),
}
