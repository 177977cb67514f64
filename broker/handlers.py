"""API handlers: decoded request in, response body out (through a ``respond`` callback).

Each handler gets the :class:`BrokerCore`, the decoded request body and ``respond``.
``respond(body)`` is called exactly once, now or later (a delayed produce or fetch
answers from the purgatory); ``respond(None)`` means "no response" (acks=0).  Errors
are per partition where the API has per-partition results, so one bad partition never
fails the others.  Fetch responses carry :class:`RegionRecords`: file regions the
network process sends with ``sendfile``; no record byte passes through this process.

Costs: produce is one validated append per partition (a compacted topic's records are
walked once more: a record without a key fails that partition with INVALID_RECORD, as in
Kafka); fetch is one index lookup per partition (and again when a parked fetch
completes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.core import BrokerCore, TopicError
from broker.delayed import DelayedFetch, DelayedProduce, ProducePartitionStatus
from clients.api import ApiKey
from clients.errors import ErrorCode, MiniKafkaError
from clients.topics import topic_name_error
from storage.log import FetchDataInfo, FileRegion

Body = dict[str, Any]
Respond = Callable[[Body | None], None]

CONSUMER_REPLICA_ID = -1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True)
class RegionRecords:
    """A Records value made of file regions; ``length`` is what the encoder needs."""

    regions: tuple[FileRegion, ...]
    length: int


EMPTY_RECORDS = RegionRecords((), 0)


def _error_fields(exc: MiniKafkaError) -> dict[str, Any]:
    return {"error_code": int(exc.code), "error_message": exc.message or None}


def _as_minikafka_error(exc: Exception) -> MiniKafkaError:
    if isinstance(exc, MiniKafkaError):
        return exc
    return MiniKafkaError(f"{type(exc).__name__}: {exc}", ErrorCode.UNKNOWN_SERVER_ERROR)


# -- Metadata, CreateTopics, DeleteTopics ---------------------------------------------


def _metadata_from_image(core: BrokerCore, body: Body) -> Body:
    image = core.image
    assert image is not None
    requested = body["topics"]
    names = sorted(image.topics) if requested is None else [t["name"] for t in requested]
    topics: list[Body] = []
    for name in names:
        info = image.topics.get(name)
        if info is None:
            reason = topic_name_error(name)
            code = (ErrorCode.INVALID_TOPIC_EXCEPTION if reason
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            topics.append({"error_code": int(code), "name": name, "partitions": []})
            continue
        partitions = []
        for index, s in sorted(info.partitions.items()):
            partitions.append({
                "error_code": 0 if s.leader >= 0 else int(ErrorCode.LEADER_NOT_AVAILABLE),
                "partition_index": index, "leader_id": s.leader,
                "leader_epoch": s.leader_epoch, "replica_nodes": list(s.replicas),
                "isr_nodes": list(s.isr), "unclean_elected": s.unclean_elected,
                "offline_replicas": [r for r in s.replicas if not image.is_alive(r)]})
        topics.append({"error_code": 0, "name": name, "is_internal": name.startswith("__"),
                       "configs": {**core.config.topic_defaults(), **info.configs,
                                   "replication_factor": str(info.replication_factor)},
                       "partitions": partitions})
    return {
        "brokers": [{"node_id": b.broker_id, "host": b.host, "port": b.port,
                     "fenced": b.fenced} for b in image.brokers.values() if not b.fenced],
        "cluster_id": "minikafka", "controller_id": core.config.node_id, "topics": topics,
    }


def handle_metadata(core: BrokerCore, body: Body, respond: Respond) -> None:
    if core.image is not None:
        respond(_metadata_from_image(core, body))
        return
    host, port = core.config.advertised
    node = core.config.node_id
    requested = body["topics"]
    names = sorted(core.registry.topics) if requested is None else [t["name"] for t in requested]
    topics: list[Body] = []
    for name in names:
        info = core.registry.get(name)
        if info is None:
            try:
                core.partition_or_error(name, 0)
            except TopicError as exc:
                topics.append({"error_code": int(exc.code), "name": name, "partitions": []})
            continue
        partitions = []
        for index in range(info.num_partitions):
            p = core.partitions[(name, index)]
            partitions.append({
                "error_code": 0, "partition_index": index, "leader_id": p.leader_id,
                "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr), "offline_replicas": [],
            })
        topics.append({"error_code": 0, "name": name, "is_internal": name.startswith("__"),
                       "configs": {**core.config.topic_defaults(), **info.configs,
                                   "replication_factor": str(info.replication_factor)},
                       "partitions": partitions})
    respond({
        "brokers": [{"node_id": node, "host": host, "port": port}],
        "cluster_id": None,
        "controller_id": node,
        "topics": topics,
    })


def _forward(core: BrokerCore, api: ApiKey, body: Body, respond: Respond,
             visible: Callable[[], bool]) -> None:
    """Controller mode: the controller decides; answer once our image shows the result."""

    async def run() -> None:
        assert core.controller is not None
        try:
            answer = await core.controller.request(api, body,
                                                   timeout_ms=max(body["timeout_ms"], 1000))
        except MiniKafkaError as exc:
            answer = _forward_error(api, body, exc)
        deadline = asyncio.get_running_loop().time() + max(body["timeout_ms"], 0) / 1000
        while not visible() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        respond(answer)

    asyncio.get_running_loop().create_task(run())


def _forward_error(api: ApiKey, body: Body, exc: MiniKafkaError) -> Body:
    error = {"error_code": int(exc.code), "error_message": f"controller: {exc.message}"}
    if api == ApiKey.CREATE_TOPICS:
        return {"topics": [{"name": t["name"], **error} for t in body["topics"]]}
    return {"responses": [{"name": n, **error} for n in body["topic_names"]]}


def handle_create_topics(core: BrokerCore, body: Body, respond: Respond) -> None:
    if core.controller_mode:
        names = [t["name"] for t in body["topics"]]
        _forward(core, ApiKey.CREATE_TOPICS, body, respond, lambda: body["validate_only"] or all(
            core.image is not None and n in core.image.topics for n in names))
        return
    results = []
    for topic in body["topics"]:
        name = topic["name"]
        try:
            if topic["assignments"]:
                raise TopicError("manual replica assignments are not supported",
                                 ErrorCode.INVALID_REPLICA_ASSIGNMENT)
            info = core.validate_new_topic(name, topic["num_partitions"],
                                           topic["replication_factor"], topic["configs"])
            if not body["validate_only"]:
                core.create_topic(info)
            results.append({"name": name, "error_code": 0, "error_message": None,
                            "num_partitions": info.num_partitions,
                            "replication_factor": info.replication_factor})
        except MiniKafkaError as exc:
            results.append({"name": name, **_error_fields(exc)})
    respond({"topics": results})


def handle_delete_topics(core: BrokerCore, body: Body, respond: Respond) -> None:
    if core.controller_mode:
        names = body["topic_names"]
        _forward(core, ApiKey.DELETE_TOPICS, body, respond, lambda: all(
            core.image is not None and n not in core.image.topics for n in names))
        return
    results = []
    for name in body["topic_names"]:
        try:
            core.delete_topic(name)
            results.append({"name": name, "error_code": 0, "error_message": None})
        except MiniKafkaError as exc:
            results.append({"name": name, **_error_fields(exc)})
    respond({"responses": results})


# -- Produce -------------------------------------------------------------------------


def handle_produce(core: BrokerCore, body: Body, respond: Respond) -> None:
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
            try:
                partition = core.partition_or_error(name, entry["index"])
                if partition.is_leader:  # (a follower answers NOT_LEADER from the append)
                    partition.log.require_keys(entry["records"])  # compacted: INVALID_RECORD
                info = partition.append_records_as_leader(
                    entry["records"], acks, core.min_insync_replicas(name)
                )
            except Exception as exc:
                result.update(_error_fields(_as_minikafka_error(exc)))
                continue
            result["base_offset"] = info.first_offset
            result["log_start_offset"] = partition.log_start_offset
            key = (name, entry["index"])
            keys.append(key)
            core.fetch_purgatory.check_and_complete(key)  # HW may have moved
            if acks == -1:
                statuses.append(ProducePartitionStatus(partition, info.last_offset + 1, result,
                                                       partition.leader_epoch))
        responses.append({"name": name, "partition_responses": results})
    response_body = {"responses": responses}
    if acks == 0:
        respond(None)
        return
    if not statuses:
        respond(response_body)
        return
    op = DelayedProduce(max(body["timeout_ms"], 0), statuses, core.min_insync_replicas,
                        lambda: respond(response_body))
    core.produce_purgatory.try_complete_else_watch(op, keys)


# -- Fetch ---------------------------------------------------------------------------


def _read_partition(core: BrokerCore, name: str, request: Body, replica_id: int,
                    max_bytes: int) -> tuple[Body, FetchDataInfo | None]:
    index = request["partition"]
    result: Body = {"partition_index": index, "error_code": 0, "error_message": None,
                    "high_watermark": -1, "log_start_offset": -1}
    try:
        partition = core.partition_or_error(name, index)
        partition.check_leader_epoch(request["current_leader_epoch"])
        data = partition.read_records(request["fetch_offset"], max_bytes,
                                      for_follower=replica_id >= 0)
        if replica_id >= 0:
            if partition.update_follower_fetch(replica_id, request["fetch_offset"],
                                               core.clock.now_ms()):
                core.wake_partition((name, index))
            core.maybe_expand_isr((name, index), replica_id)
    except Exception as exc:
        result.update(_error_fields(_as_minikafka_error(exc)))
        return result, None
    result["high_watermark"] = partition.high_watermark
    result["last_stable_offset"] = partition.high_watermark
    result["log_start_offset"] = partition.log_start_offset
    return result, data


def _fetch_response(core: BrokerCore, body: Body) -> tuple[Body, int, bool]:
    """Read every partition now; returns (response body, bytes, any error)."""
    remaining = min(body["max_bytes"], core.config.fetch_max_bytes)
    total = 0
    errored = False
    responses = []
    for topic in body["topics"]:
        parts = []
        for request in topic["partitions"]:
            limit = max(0, min(request["partition_max_bytes"], remaining))
            result, data = _read_partition(core, topic["name"], request, body["replica_id"],
                                           limit)
            if data is None:
                errored = errored or result["error_code"] != 0
                result["records"] = EMPTY_RECORDS
            else:
                result["records"] = RegionRecords(data.regions, data.size_in_bytes)
                total += data.size_in_bytes
                remaining -= data.size_in_bytes
            parts.append(result)
        responses.append({"name": topic["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "responses": responses}, total, errored


def handle_fetch(core: BrokerCore, body: Body, respond: Respond) -> None:
    if body["max_bytes"] < 0 or any(p["partition_max_bytes"] < 0
                                    for t in body["topics"] for p in t["partitions"]):
        respond({"error_code": int(ErrorCode.INVALID_FETCH_SIZE), "responses": []})
        return
    response, total, errored = _fetch_response(core, body)
    max_wait_ms = min(max(body["max_wait_ms"], 0), core.config.max_fetch_wait_ms)
    if errored or total >= body["min_bytes"] or max_wait_ms == 0 or not body["topics"]:
        respond(response)
        return

    def available() -> int | None:
        _, now_total, now_errored = _fetch_response_sizes(core, body)
        return None if now_errored else now_total

    def complete() -> None:
        respond(_fetch_response(core, body)[0])

    keys = [(t["name"], p["partition"]) for t in body["topics"] for p in t["partitions"]]
    op = DelayedFetch(max_wait_ms, body["min_bytes"], available, complete)
    core.fetch_purgatory.try_complete_else_watch(op, keys)


def _fetch_response_sizes(core: BrokerCore, body: Body) -> tuple[None, int, bool]:
    """How many bytes a fetch would return now (no follower-state side effects).

    "Errored" (complete the parked fetch now; the fresh read at completion reports the
    precise per-partition code) when a partition is gone (deleted, or moved off this
    broker: UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER), is no longer led
    here (NOT_LEADER_OR_FOLLOWER), has a leader epoch other than the request's
    (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), or cannot be read.  Never raises:
    this runs inside ``check_and_complete`` of whatever woke the partition (a
    producer's or follower's request), which must not fail because of this fetch.
    """
    total = 0
    for topic in body["topics"]:
        for request in topic["partitions"]:
            partition = core.partitions.get((topic["name"], request["partition"]))
            if partition is None or not partition.is_leader:
                return None, 0, True
            epoch = request["current_leader_epoch"]
            if epoch >= 0 and epoch != partition.leader_epoch:
                return None, 0, True
            upper = (partition.log_end_offset if body["replica_id"] >= 0
                     else partition.high_watermark)
            if request["fetch_offset"] >= upper:
                continue
            try:
                data = partition.read_records(request["fetch_offset"],
                                              request["partition_max_bytes"],
                                              for_follower=body["replica_id"] >= 0)
            except Exception:
                return None, 0, True
            total += data.size_in_bytes
    return None, total, False


# -- ListOffsets ---------------------------------------------------------------------


def handle_list_offsets(core: BrokerCore, body: Body, respond: Respond) -> None:
    topics = []
    for topic in body["topics"]:
        parts = []
        for request in topic["partitions"]:
            result: Body = {"partition_index": request["partition_index"], "error_code": 0,
                            "error_message": None, "timestamp": -1, "offset": -1}
            try:
                partition = core.partition_or_error(topic["name"], request["partition_index"])
                partition.check_leader_epoch(request["current_leader_epoch"])
                timestamp = request["timestamp"]
                if timestamp == LATEST_TIMESTAMP:
                    result["offset"] = partition.high_watermark
                elif timestamp == EARLIEST_TIMESTAMP:
                    result["offset"] = partition.log_start_offset
                elif timestamp < 0:
                    raise MiniKafkaError(f"timestamp {timestamp} is not -1, -2 or >= 0",
                                         ErrorCode.INVALID_REQUEST)
                else:
                    found = partition.log.offset_for_timestamp(timestamp)
                    if found is not None and found[0] < partition.high_watermark:
                        result["offset"], result["timestamp"] = found
                result["leader_epoch"] = partition.leader_epoch
            except Exception as exc:
                result.update(_error_fields(_as_minikafka_error(exc)))
            parts.append(result)
        topics.append({"name": topic["name"], "partitions": parts})
    respond({"topics": topics})


# -- OffsetsForLeaderEpoch --------------------------------------------------------------


def handle_offsets_for_leader_epoch(core: BrokerCore, body: Body, respond: Respond) -> None:
    topics = []
    for topic in body["topics"]:
        parts = []
        for request in topic["partitions"]:
            result: Body = {"partition": request["partition"], "error_code": 0,
                            "error_message": None, "leader_epoch": -1, "end_offset": -1}
            try:
                partition = core.partition_or_error(topic["name"], request["partition"])
                answer = partition.last_offset_for_leader_epoch(
                    request["current_leader_epoch"], request["leader_epoch"])
                result["leader_epoch"], result["end_offset"] = (answer.leader_epoch,
                                                                answer.end_offset)
            except Exception as exc:
                result.update(_error_fields(_as_minikafka_error(exc)))
            parts.append(result)
        topics.append({"name": topic["name"], "partitions": parts})
    respond({"topics": topics})


# -- DescribeLogDirs -------------------------------------------------------------------


def handle_describe_log_dirs(core: BrokerCore, body: Body, respond: Respond) -> None:
    wanted = None if body["topics"] is None else {
        (t["name"], p) for t in body["topics"] for p in t["partitions"]}
    by_topic: dict[str, list[Body]] = {}
    for (name, index), p in sorted(core.partitions.items()):
        if wanted is not None and (name, index) not in wanted:
            continue
        by_topic.setdefault(name, []).append({
            "partition_index": index, "error_code": 0,
            "log_start_offset": p.log_start_offset, "log_end_offset": p.log_end_offset,
            "high_watermark": p.high_watermark, "size_bytes": p.log.size_in_bytes,
            "leader_id": p.leader_id, "leader_epoch": p.leader_epoch, "isr": list(p.isr)})
    respond({"error_code": 0, "log_dir": str(core.data_dir.resolve()),
             "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})


Handler = Callable[[BrokerCore, Body, Respond], None]

# the handlers of this module; broker.dispatch merges them with the other handler modules
CORE_HANDLERS: dict[int, Handler] = {
    ApiKey.OFFSETS_FOR_LEADER_EPOCH: handle_offsets_for_leader_epoch,
    ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    ApiKey.METADATA: handle_metadata,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
}
