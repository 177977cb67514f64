"""Handlers of the topic APIs: Metadata, CreateTopics, DeleteTopics.

Metadata answers from the :class:`~broker.metadata.image.MetadataImage` in controller mode
(every topic, partition, leader, ISR and live broker of the cluster) and from the local
topic registry when standalone (this broker leads everything).  CreateTopics and
DeleteTopics run locally when standalone (errors per topic: invalid name, existing or
unknown topic, bad partition count, replication factor or config); in controller mode
they are forwarded to the controller, and answered once this broker's image shows the
result (or the request's ``timeout_ms`` passed).

Costs: Metadata O(topics x partitions asked); create/delete O(partitions) local work.
Thread-safety: run on the broker's event loop thread only (they touch BrokerCore state).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from broker.core import BrokerCore, TopicError
from broker.handlers.common import Body, Handler, Respond, error_fields
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition, topic_name_error


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
            p = core.partitions[TopicPartition(name, index)]
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
            results.append({"name": name, **error_fields(exc)})
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
            results.append({"name": name, **error_fields(exc)})
    respond({"responses": results})


TOPIC_HANDLERS: dict[int, Handler] = {
    ApiKey.METADATA: handle_metadata,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
}
