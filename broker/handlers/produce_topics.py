"""API handlers: decoded request in, response body out (through a ``respond`` callback).

This module holds Metadata, CreateTopics, DeleteTopics and Produce, and the
:data:`CORE_HANDLERS` table; the partition-reading handlers (Fetch, ListOffsets,
OffsetsForLeaderEpoch, DescribeLogDirs) are in :mod:`broker.handlers.fetch` and the
shared types (``Body``, ``Respond``, ``Handler``, :class:`RegionRecords`) in
:mod:`broker.handlers.common`; all of them stay importable from here.

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
Thread-safety: handlers run on the broker's event loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from broker.core import BrokerCore, TopicError
from broker.delayed import DelayedProduce, ProducePartitionStatus
from broker.handlers.common import (
    EMPTY_RECORDS,
    Body,
    Handler,
    RegionRecords,
    Respond,
    _as_minikafka_error,
    _error_fields,
)
from broker.handlers.fetch import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    handle_describe_log_dirs,
    handle_fetch,
    handle_list_offsets,
    handle_offsets_for_leader_epoch,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import topic_name_error

__all__ = [
    "CONSUMER_REPLICA_ID",
    "CORE_HANDLERS",
    "EARLIEST_TIMESTAMP",
    "EMPTY_RECORDS",
    "LATEST_TIMESTAMP",
    "Body",
    "Handler",
    "RegionRecords",
    "Respond",
    "handle_create_topics",
    "handle_delete_topics",
    "handle_describe_log_dirs",
    "handle_fetch",
    "handle_list_offsets",
    "handle_metadata",
    "handle_offsets_for_leader_epoch",
    "handle_produce",
]

CONSUMER_REPLICA_ID = -1


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


# the handlers of this module; broker.handlers.dispatch merges them with the other handler modules
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
