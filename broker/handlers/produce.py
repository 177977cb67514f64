"""Handler of Produce: validated appends as leader, answered by acks.

Per partition, in request order: the client may not write an internal topic
(INVALID_TOPIC_EXCEPTION, as Kafka; the coordinators append to theirs directly), the
partition must be hosted here and led here (NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION otherwise), a compacted topic's
records must all have keys (INVALID_RECORD, as in Kafka), and the batch is validated and
appended (:meth:`replication.partition.Partition.append_records_as_leader`, which also
checks ``min_insync_replicas`` for acks=all).  Errors are per partition, so one bad
partition never fails the others.  acks=0: no response; acks=1: answered at once;
acks=-1 (all): a :class:`~broker.delayed.DelayedProduce` waits in the produce purgatory
until the high watermark passes every appended batch (or ``timeout_ms``).  Other acks
values: INVALID_REQUIRED_ACKS for every partition.  Each append wakes the fetch
purgatory of its partition (followers and consumers may be waiting).

Kafka's answer at every served version: ``log_append_time_ms`` -1 (CreateTime: the
producer's timestamps are kept), ``log_start_offset`` (v5+), ``error_message`` (v8+; no
``record_errors``), and from v10 the ``current_leader`` hint of a partition answered
NOT_LEADER_OR_FOLLOWER with the leader's endpoint in ``node_endpoints`` (KIP-951, from the
metadata image).  ``transactional_id`` is ignored (no transactions).

Costs: one validated append per partition (a compacted topic's records are walked once
more for keys).  Thread-safety: run on the broker's event loop thread only.
"""

from __future__ import annotations

from typing import Any

from broker.core import BrokerCore
from broker.delayed import DelayedProduce, ProducePartitionStatus
from broker.handlers.common import (
    Body,
    Handler,
    RequestContext,
    Respond,
    as_minikafka_error,
    error_fields,
    require,
)
from broker.handlers.fetch import LEADER_HINT_ERRORS, current_leader
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition, internal_topic_refusal
from clients.records.batch import COMPRESSION_MASK, HEADER, HEADER_SIZE, LOG_OVERHEAD
from clients.records.compression import ZSTD


def _node_endpoints(core: BrokerCore, responses: list[Body]) -> list[Body]:
    """The endpoints of the leaders named in ``current_leader`` hints."""
    if core.image is None:
        return []
    leaders = {p["current_leader"]["leader_id"] for t in responses
               for p in t["partition_responses"] if p.get("current_leader")}
    return [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
            for n in sorted(leaders) if (b := core.image.brokers.get(n)) is not None]


ZSTD_MIN_PRODUCE_VERSION = 7  # Kafka's rule (KIP-110): older clients cannot read zstd


def uses_zstd(records: Any) -> bool:
    """Whether a batch of a produce request's records is zstd-compressed (header walk only;
    a malformed tail is left to the append, which reports it precisely)."""
    if not records:
        return False
    view = memoryview(records)
    pos = 0
    while pos + HEADER_SIZE <= len(view):
        header = HEADER.unpack_from(view, pos)
        if header[5] & COMPRESSION_MASK == ZSTD:
            return True
        if header[1] <= 0:
            return False
        pos += header[1] + LOG_OVERHEAD
    return False


def handle_produce(core: BrokerCore, body: Body, respond: Respond,
                   ctx: RequestContext) -> None:
    acks = body["acks"]
    if acks not in (0, 1, -1):
        error = {"error_code": int(ErrorCode.INVALID_REQUIRED_ACKS),
                 "error_message": f"acks must be 0, 1 or -1 (all), got {acks}",
                 "base_offset": -1}
        respond({"responses": [
            {"name": t["name"], "partition_responses": [
                {"index": p["index"], **error} for p in t["partitions"]]}
            for t in body["topics"]
        ]})
        return
    responses = []
    statuses: list[ProducePartitionStatus] = []
    keys = []
    for topic in body["topics"]:
        name = topic["name"]
        results = []
        for entry in topic["partitions"]:
            result: dict[str, Any] = {"index": entry["index"], "error_code": 0,
                                      "error_message": None, "base_offset": -1}
            results.append(result)
            if ctx.version < ZSTD_MIN_PRODUCE_VERSION and uses_zstd(entry["records"]):
                result.update(error_code=int(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
                              error_message="zstd batches need Produce v7 or later")
                continue
            try:
                require(ctx, "Write", "Topic", name)
                refused = internal_topic_refusal(name, "append to")
                if refused is not None:
                    raise refused
                partition = core.partition_or_error(name, entry["index"])
                if partition.is_leader:  # (a follower answers NOT_LEADER from the append)
                    partition.log.require_keys(entry["records"])  # compacted: INVALID_RECORD
                info = partition.append_records_as_leader(
                    entry["records"], acks, core.min_insync_replicas(name)
                )
            except Exception as exc:
                result.update(error_fields(as_minikafka_error(exc)))
                if result["error_code"] in LEADER_HINT_ERRORS:
                    result["current_leader"] = current_leader(core, name, entry["index"])
                continue
            result["base_offset"] = info.first_offset
            result["log_start_offset"] = partition.log_start_offset
            key = TopicPartition(name, entry["index"])
            keys.append(key)
            core.fetch_purgatory.check_and_complete(key)  # HW may have moved
            if acks == -1:
                statuses.append(ProducePartitionStatus(partition, info.last_offset + 1, result,
                                                       partition.leader_epoch))
        responses.append({"name": name, "partition_responses": results})
    response_body = {"throttle_time_ms": 0, "responses": responses,
                     "node_endpoints": _node_endpoints(core, responses)}
    if acks == 0:
        respond(None)
        return
    if not statuses:
        respond(response_body)
        return
    op = DelayedProduce(max(body["timeout_ms"], 0), statuses, core.min_insync_replicas,
                        lambda: respond(response_body))
    core.produce_purgatory.try_complete_else_watch(op, keys)


PRODUCE_HANDLERS: dict[int, Handler] = {
    ApiKey.PRODUCE: handle_produce,
}
