"""Handlers of the topic and cluster APIs: Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeCluster.

Metadata and DescribeCluster answer from the :class:`~broker.metadata.image.MetadataImage`
in controller mode (every topic, partition, leader, ISR and unfenced broker of the
cluster) and from the local topic registry when standalone (this broker leads
everything).  Kafka's shapes at every served version, with these choices:

- Metadata v0: an empty topic list means every topic (v1+: null means every topic, an
  empty list none).  Topics are asked by name or (v10+) by topic id (Kafka's UUIDs,
  :mod:`clients.protocol.topics`); an unknown id gets UNKNOWN_TOPIC_ID, a known one
  the topic with its name.  Answers carry each topic's id (the zero UUID for a topic of a
  log not yet upgraded to topic ids, and on a standalone broker, which has none).
  ``allow_auto_topic_creation`` is ignored (no auto-creation: UNKNOWN_TOPIC_OR_PARTITION).
  ``controller_id`` is this broker (a live broker: our controller is not a broker clients
  could talk to, Kafka's KRaft brokers answer the same way).  The broker list is the
  image's unfenced brokers, and never empty: a broker serves clients as soon as it
  listens, before its image has anything and while every broker is still fenced (a
  whole-cluster restart), which Kafka's brokers never do (they open their listeners once
  unfenced); it then lists itself alone, and named topics are LEADER_NOT_AVAILABLE
  until its image has any record.  An empty list is a trap: librdkafka drops every
  broker it knows (its bootstrap brokers too) on such an answer and stays without one
  until ``metadata.recovery.rebootstrap.trigger.ms`` (5 minutes) passes, its
  transactional calls and group blocked meanwhile.  ``cluster_id`` is
  the broker's ``cluster_id`` (the one its data dir's ``meta.properties`` holds).  Our
  extra ``configs`` (v9+, tagged) lists the topic's effective
  settings in our names plus ``replication_factor``.  Authorized operations are not
  computed (Kafka's "omitted", -2147483648).
- DescribeCluster: endpoint type 1 (brokers) only; 2 (controllers) is
  MISMATCHED_ENDPOINT_TYPE, anything else UNSUPPORTED_ENDPOINT_TYPE.

CreateTopics, DeleteTopics and CreatePartitions run locally when standalone (errors per
topic: invalid name, existing or unknown topic, bad partition count, replication factor,
assignment or config; a topic named twice in one request: INVALID_REQUEST); in controller
mode they are forwarded to the controller at our highest version, as they came, and
answered (in the client's version) once this broker's image shows the result or the
request's ``timeout_ms`` passed.  CreateTopics v7 answers with the new topic's id.
DeleteTopics v6 names each topic by name or by id (both: INVALID_REQUEST, as Kafka; an
unknown id: UNKNOWN_TOPIC_ID, answered with a null name); ACLs and internal topics are
checked on the name the broker's image gives the id (the controller resolves the id
again, so a topic re-created meanwhile is not deleted by its predecessor's id); a
standalone broker has no topic ids, so every id is unknown there.  CreateTopics'
``configs`` is Kafka's list of name/value pairs (a null value: INVALID_CONFIG);
``num_partitions`` / ``replication_factor`` -1 take the broker's defaults; manual
``assignments`` (with both -1, as Kafka requires) must name this broker only when
standalone.  From v5 the answer
carries the topic's partitions, replication factor and configs (Kafka's names, see
:mod:`broker.handlers.configs`).

Costs: Metadata O(topics x partitions asked); create/delete O(partitions) local work.
Thread-safety: run on the broker's event loop thread only (they touch the broker's state).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from broker.acls import CLUSTER_RESOURCE
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import (
    Body,
    Handler,
    RequestContext,
    RequestT,
    duplicates,
    error_fields,
    serves,
)
from broker.handlers.configs import topic_config_entries
from broker.metadata.topic_shape_checks import partition_increase_error
from broker.replica.topic_configs import TopicError
from broker.requests.respond import Respond, ResponseT
from broker.topic_registry import MAX_PARTITIONS_PER_TOPIC
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import (
    CreatePartitionsRequest,
    CreatePartitionsRequestTopic,
    CreatePartitionsResponse,
    CreatePartitionsResponseResult,
    CreateTopicsRequest,
    CreateTopicsRequestTopic,
    CreateTopicsResponse,
    CreateTopicsResponseTopic,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicsResponseResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseConfig,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from clients.protocol.topics import (
    INTERNAL_TOPICS,
    ZERO_UUID,
    TopicPartition,
    internal_topic_refusal,
    topic_name_error,
)

BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2
FIRST_NULLABLE_TOPIC_NAME = 12
_pending: set[asyncio.Task[None]] = set()


def _spawn(coro: Any) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _pending.add(task)
    task.add_done_callback(_pending.discard)


# -- Metadata --------------------------------------------------------------------------


def _requested(core: HandlerCore, body: MetadataRequest, version: int,
               known: Callable[[], list[str]]) -> list[tuple[str | None, bytes]]:
    """(name, topic id) of every topic asked; every topic when the request says so."""
    requested = body["topics"]
    if requested is None or (version == 0 and not requested):
        return [(name, ZERO_UUID) for name in known()]
    return [(t["name"], t["topic_id"]) for t in requested]


def _topic_configs_extra(core: HandlerCore, overrides: dict[str, str],
                         replication_factor: int) -> list[MetadataResponseConfig]:
    merged = {**core.config.topic_defaults(), **overrides,
              "replication_factor": str(replication_factor)}
    return [{"name": k, "value": v} for k, v in sorted(merged.items())]


def _unknown_topic(name: str | None, topic_id: bytes, version: int) -> MetadataResponseTopic:
    if name is None:  # asked by id (v10+); the answer's name is nullable from v12 only
        return {"error_code": int(ErrorCode.UNKNOWN_TOPIC_ID),
                "name": None if version >= FIRST_NULLABLE_TOPIC_NAME else "",
                "topic_id": topic_id, "partitions": []}
    reason = topic_name_error(name)
    code = ErrorCode.INVALID_TOPIC_EXCEPTION if reason else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return {"error_code": int(code), "name": name, "partitions": []}


def _live_brokers(core: HandlerCore) -> list[tuple[int, str, int, str | None]]:
    """(id, host, port, rack) of the image's unfenced brokers; this broker alone when
    there are none (see the module docstring: never an empty list)."""
    image = core.image
    live = [(b.broker_id, b.host, b.port, b.rack) for _, b in sorted(image.brokers.items())
            if not b.fenced] if image is not None else []
    if not live:
        host, port = core.config.advertised
        live = [(core.config.node_id, host, port, None)]
    return live


def _metadata_from_image(core: HandlerCore, body: MetadataRequest,
                         version: int) -> MetadataResponse:
    image = core.image
    assert image is not None
    empty = image.last_applied_offset < 0  # nothing fetched from the controller yet
    topics: list[MetadataResponseTopic] = []
    for name, topic_id in _requested(core, body, version, lambda: sorted(image.topics)):
        asked_by_name = name is not None
        if name is None:
            info = image.topic_by_id(topic_id)
            name = None if info is None else info.name
        else:
            info = image.topics.get(name)
        if info is None or name is None:
            unknown = _unknown_topic(name, topic_id, version)
            if empty and asked_by_name:  # we know nothing yet
                unknown["error_code"] = int(ErrorCode.LEADER_NOT_AVAILABLE)
            topics.append(unknown)
            continue
        partitions: list[MetadataResponsePartition] = []
        for index, s in sorted(info.partitions.items()):
            partitions.append({
                "error_code": 0 if s.leader >= 0 else int(ErrorCode.LEADER_NOT_AVAILABLE),
                "partition_index": index, "leader_id": s.leader,
                "leader_epoch": s.leader_epoch, "replica_nodes": list(s.replicas),
                "isr_nodes": list(s.isr), "unclean_elected": s.unclean_elected,
                "offline_replicas": [r for r in s.replicas if not image.is_alive(r)]})
        topics.append({"error_code": 0, "name": name, "topic_id": info.topic_uuid,
                       "is_internal": name in INTERNAL_TOPICS, "partitions": partitions,
                       "configs": _topic_configs_extra(core, info.configs,
                                                       info.replication_factor)})
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": node, "host": host, "port": port, "rack": rack,
                     "fenced": False} for node, host, port, rack in _live_brokers(core)],
        "cluster_id": core.config.cluster_id, "controller_id": core.config.node_id,
        "topics": topics,
    }


def _described_only(respond: Respond[MetadataResponse], body: MetadataRequest,
                    ctx: RequestContext) -> Respond[MetadataResponse]:
    """Metadata under ACLs (Kafka's rule): a topic the user may not Describe is left out
    of an all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named (whether
    it exists or not: the answer does not tell); one asked by id is answered with a null
    name (the id does not reveal it)."""
    named = body.get("topics") is not None
    by_id = {t["topic_id"] for t in body.get("topics") or () if t["name"] is None}

    def answer(response: MetadataResponse | None) -> None:
        if response is not None:
            topics: list[MetadataResponseTopic] = []
            for t in response["topics"]:
                name = t["name"]
                if name is None or ctx.allowed("Describe", "Topic", name):
                    topics.append(t)
                elif named:
                    asked_by_id = t.get("topic_id", ZERO_UUID) in by_id
                    topics.append({"error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                   "name": name if not asked_by_id else None
                                   if ctx.version >= FIRST_NULLABLE_TOPIC_NAME else "",
                                   "topic_id": t["topic_id"] if asked_by_id else ZERO_UUID,
                                   "is_internal": False, "partitions": []})
            response["topics"] = topics
        respond(response)

    return answer


def handle_metadata(core: HandlerCore, body: MetadataRequest,
                    respond: Respond[MetadataResponse], ctx: RequestContext) -> None:
    if ctx.authorizer is not None and ctx.authorizer.enabled:
        respond = _described_only(respond, body, ctx)
    if core.image is not None:
        respond(_metadata_from_image(core, body, ctx.version))
        return
    host, port = core.config.advertised
    node = core.config.node_id
    topics: list[MetadataResponseTopic] = []
    for name, topic_id in _requested(core, body, ctx.version,
                                     lambda: sorted(core.registry.topics)):
        info = core.registry.get(name) if name is not None else None
        if info is None or name is None:
            unknown = _unknown_topic(name, topic_id, ctx.version)
            if core.controller_mode and name is not None:  # no image yet: we know nothing
                unknown["error_code"] = int(ErrorCode.LEADER_NOT_AVAILABLE)
            topics.append(unknown)
            continue
        partitions: list[MetadataResponsePartition] = []
        for index in range(info.num_partitions):
            p = core.partitions[TopicPartition(name, index)]
            partitions.append({
                "error_code": 0, "partition_index": index, "leader_id": p.leader_id,
                "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr), "offline_replicas": [],
            })
        topics.append({"error_code": 0, "name": name, "topic_id": ZERO_UUID,
                       "is_internal": name in INTERNAL_TOPICS, "partitions": partitions,
                       "configs": _topic_configs_extra(core, info.configs,
                                                       info.replication_factor)})
    respond({
        "throttle_time_ms": 0,
        "brokers": [{"node_id": node, "host": host, "port": port, "rack": None}],
        "cluster_id": core.config.cluster_id,
        "controller_id": node,
        "topics": topics,
    })


# -- DescribeCluster -------------------------------------------------------------------


def handle_describe_cluster(core: HandlerCore, body: DescribeClusterRequest,
                            respond: Respond[DescribeClusterResponse],
                            ctx: RequestContext) -> None:
    endpoint = body["endpoint_type"]
    answer: DescribeClusterResponse = {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None,
        "endpoint_type": endpoint, "cluster_id": core.config.cluster_id,
        "controller_id": core.config.node_id, "brokers": []}
    if not ctx.allowed("Describe", "Cluster", CLUSTER_RESOURCE):  # ACLs (Kafka's rule)
        answer.update({"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                       "controller_id": -1,
                       "error_message": "not authorized to Describe the cluster"})
    elif endpoint != BROKERS_ENDPOINT:
        code = (ErrorCode.MISMATCHED_ENDPOINT_TYPE if endpoint == CONTROLLERS_ENDPOINT
                else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE)
        answer.update({"error_code": int(code), "controller_id": -1,
                       "error_message": f"endpoint type {endpoint}: brokers answer for "
                                        f"brokers (1) only"})
    else:
        answer["brokers"] = [{"broker_id": node, "host": host, "port": port, "rack": rack}
                             for node, host, port, rack in _live_brokers(core)]
    respond(answer)


# -- controller mode: forwarding -------------------------------------------------------


def _forward(core: HandlerCore, api: ApiKey, body: RequestT, timeout_ms: int,
             respond: Respond[ResponseT], visible: Callable[[ResponseT], bool],
             errors: Callable[[MiniKafkaError], ResponseT],
             finish: Callable[[ResponseT], ResponseT] | None = None) -> None:
    """Controller mode: the controller decides; answer once our image shows the result
    (``visible(answer)``) or the request's ``timeout_ms`` passed; ``finish`` completes
    the answer from this broker's image.  The controller's answer is the response of
    ``api`` (the controller link takes and gives plain bodies)."""

    async def run() -> None:
        assert core.controller is not None
        try:
            answer = cast(ResponseT, await core.controller.request(
                api, cast(Body, body), timeout_ms=max(timeout_ms, 1000)))
        except MiniKafkaError as exc:
            respond(errors(MiniKafkaError(f"controller: {exc.message}", exc.code)))
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        while not visible(answer) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        respond(answer if finish is None else finish(answer))

    _spawn(run())


_CHANGES = {"Create": "create", "Delete": "delete", "Alter": "add partitions to"}


def _answered_here(ctx: RequestContext, operation: str,
                   names: list[str]) -> dict[str, MiniKafkaError]:
    """The entries of a topic request answered by this broker with an error, not done: a
    topic named twice (INVALID_REQUEST), one the user may not ``operation``
    (TOPIC_AUTHORIZATION_FAILED, :mod:`broker.acls`), or an internal topic
    (INVALID_TOPIC_EXCEPTION: the brokers create it, and deleting it or changing its
    partition count would lose or misplace every group's offsets)."""
    out = {n: MiniKafkaError(f"topic {n!r} is named more than once in the request",
                             ErrorCode.INVALID_REQUEST) for n in sorted(duplicates(names))}
    for n in names:
        if n in out:
            continue
        if not ctx.allowed(operation, "Topic", n):
            out[n] = MiniKafkaError(f"not authorized to {operation} topic {n!r}",
                                    ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        elif (refused := internal_topic_refusal(n, _CHANGES[operation])) is not None:
            out[n] = refused
    return out


def _ok_names(entries: Iterable[Mapping[str, object]]) -> list[str]:
    return [str(t["name"]) for t in entries if t["error_code"] == 0]


# -- CreateTopics ----------------------------------------------------------------------


def _configs_dict(topic: CreateTopicsRequestTopic) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in topic["configs"]:
        if c["name"] in out:
            raise TopicError(f"config {c['name']!r} given twice", ErrorCode.INVALID_REQUEST)
        value = c["value"]
        if value is None:
            raise TopicError(f"config {c['name']!r}: a null value is not supported",
                             ErrorCode.INVALID_CONFIG)
        out[c["name"]] = value
    return out


def _standalone_assignment(core: HandlerCore, topic: CreateTopicsRequestTopic
                           ) -> tuple[int, int]:
    """(num_partitions, replication_factor) of a create with manual assignments."""
    if topic["num_partitions"] != -1 or topic["replication_factor"] != -1:
        raise TopicError("with assignments, num_partitions and replication_factor must "
                         "both be -1", ErrorCode.INVALID_REQUEST)
    indexes = sorted(a["partition_index"] for a in topic["assignments"])
    if indexes != list(range(len(indexes))):
        raise TopicError(f"assigned partitions {indexes} are not 0..{len(indexes) - 1}",
                         ErrorCode.INVALID_REPLICA_ASSIGNMENT)
    me = core.config.node_id
    for a in topic["assignments"]:
        if a["broker_ids"] != [me]:
            raise TopicError(f"partition {a['partition_index']}: replicas {a['broker_ids']} "
                             f"(a standalone broker has only broker {me})",
                             ErrorCode.INVALID_REPLICA_ASSIGNMENT)
    return len(indexes), 1


def _created(core: HandlerCore, name: str, num_partitions: int, replication_factor: int,
             overrides: dict[str, str]) -> CreateTopicsResponseTopic:
    return {"name": name, "error_code": 0, "error_message": None,
            "num_partitions": num_partitions, "replication_factor": replication_factor,
            "configs": [{"name": e["name"], "value": e["value"], "read_only": e["read_only"],
                         "config_source": e["config_source"],
                         "is_sensitive": e["is_sensitive"]}
                        for e in topic_config_entries(core, overrides)]}


def handle_create_topics(core: HandlerCore, body: CreateTopicsRequest,
                         respond: Respond[CreateTopicsResponse], ctx: RequestContext) -> None:
    here = _answered_here(ctx, "Create", [t["name"] for t in body["topics"]])
    if core.controller_mode:
        forwarded: CreateTopicsRequest = {
            **body, "topics": [t for t in body["topics"] if t["name"] not in here]}
        names = [t["name"] for t in forwarded["topics"]]

        def visible(answer: CreateTopicsResponse) -> bool:
            return body["validate_only"] or all(
                core.image is not None and n in core.image.topics
                for n in _ok_names(answer.get("topics", [])))

        denied: list[CreateTopicsResponseTopic] = [
            {"name": n, **error_fields(e)} for n, e in here.items()]

        def failed(exc: MiniKafkaError) -> CreateTopicsResponse:
            return {"topics": [{"name": n, **error_fields(exc)} for n in names]}

        def finish(answer: CreateTopicsResponse) -> CreateTopicsResponse:
            for t in answer.get("topics", []):
                info = core.image.topics.get(t["name"]) if core.image is not None else None
                if t["error_code"] == 0 and info is not None and not t.get("configs"):
                    t.update(_created(core, t["name"], info.num_partitions,
                                      info.replication_factor, info.configs))
            answer["topics"] = [*answer.get("topics", []), *denied]
            return answer

        _forward(core, ApiKey.CREATE_TOPICS, forwarded, body["timeout_ms"], respond, visible,
                 failed, finish)
        return
    results: list[CreateTopicsResponseTopic] = []
    for topic in body["topics"]:
        name = topic["name"]
        if name in here:
            results.append({"name": name, **error_fields(here[name])})
            continue
        try:
            count, rf = topic["num_partitions"], topic["replication_factor"]
            if topic["assignments"]:
                count, rf = _standalone_assignment(core, topic)
            info = core.validate_new_topic(name, count, rf, _configs_dict(topic))
            if not body["validate_only"]:
                core.create_topic(info)
            results.append(_created(core, name, info.num_partitions, info.replication_factor,
                                    info.configs))
        except MiniKafkaError as exc:
            results.append({"name": name, **error_fields(exc)})
    respond({"throttle_time_ms": 0, "topics": results})


# -- DeleteTopics ----------------------------------------------------------------------


def _deletions(core: HandlerCore, body: DeleteTopicsRequest, version: int
               ) -> tuple[list[tuple[str, bytes]], list[DeleteTopicsResponseResponse]]:
    """The topics a DeleteTopics names, as ``(name, id asked)`` (the zero UUID when asked
    by name; the name this broker's image gives an id), and the answers of the entries
    that name both or an id this broker does not know."""
    entries: list[tuple[str | None, bytes]] = (
        [(t["name"], t["topic_id"]) for t in body["topics"]] if version >= 6 else
        [(n, ZERO_UUID) for n in body["topic_names"]])
    out: list[tuple[str, bytes]] = []
    failed: list[DeleteTopicsResponseResponse] = []
    for name, topic_id in entries:
        if name is not None and topic_id != ZERO_UUID:
            failed.append({"name": name, "topic_id": topic_id,
                           "error_code": int(ErrorCode.INVALID_REQUEST),
                           "error_message": "a topic is named by its name or by its id, "
                                            "not both"})
        elif name is not None:
            out.append((name, ZERO_UUID))
        elif (info := core.image.topic_by_id(topic_id) if core.image else None) is not None:
            out.append((info.name, topic_id))
        else:
            failed.append({"name": None, "topic_id": topic_id,
                           "error_code": int(ErrorCode.UNKNOWN_TOPIC_ID),
                           "error_message": "unknown topic id"})
    return out, failed


def handle_delete_topics(core: HandlerCore, body: DeleteTopicsRequest,
                         respond: Respond[DeleteTopicsResponse], ctx: RequestContext) -> None:
    topics, failed_here = _deletions(core, body, ctx.version)
    here = _answered_here(ctx, "Delete", [n for n, _ in topics])
    asked = dict(topics)  # name -> id asked (zero: by name)
    denied: dict[str, DeleteTopicsResponseResponse] = {
        n: {"name": None if asked[n] != ZERO_UUID else n, "topic_id": asked[n],
            **error_fields(e)} for n, e in here.items()}
    if core.controller_mode:
        forwarded: DeleteTopicsRequest = {
            "timeout_ms": body["timeout_ms"], "topic_names": [],
            "topics": [{"name": None if i != ZERO_UUID else n, "topic_id": i}
                       for n, i in topics if n not in here]}

        def visible(answer: DeleteTopicsResponse) -> bool:
            return all(core.image is not None and n not in core.image.topics
                       for n in _ok_names(answer.get("responses", [])))

        def failed(exc: MiniKafkaError) -> DeleteTopicsResponse:
            return {"responses": [{**t, **error_fields(exc)} for t in forwarded["topics"]]}

        def finish(answer: DeleteTopicsResponse) -> DeleteTopicsResponse:
            answer["responses"] = [*answer.get("responses", []), *failed_here,
                                   *denied.values()]
            return answer

        _forward(core, ApiKey.DELETE_TOPICS, forwarded, body["timeout_ms"], respond, visible,
                 failed, finish)
        return
    results = failed_here
    for name, _ in topics:
        if name in denied:
            results.append(denied[name])
            continue
        try:
            reason = topic_name_error(name)
            if reason is not None:
                raise TopicError(reason, ErrorCode.INVALID_TOPIC_EXCEPTION)
            core.delete_topic(name)
            results.append({"name": name, "error_code": 0, "error_message": None})
        except MiniKafkaError as exc:
            results.append({"name": name, **error_fields(exc)})
    respond({"throttle_time_ms": 0, "responses": results})


# -- CreatePartitions ------------------------------------------------------------------


def _validate_new_partitions(core: HandlerCore, topic: CreatePartitionsRequestTopic) -> None:
    name, count = topic["name"], topic["count"]
    reason = topic_name_error(name)
    if reason is not None:
        raise TopicError(reason, ErrorCode.INVALID_TOPIC_EXCEPTION)
    info = core.registry.get(name)
    if info is None:
        raise TopicError(f"unknown topic {name!r}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    error = partition_increase_error(info.num_partitions, count, MAX_PARTITIONS_PER_TOPIC)
    if error is not None:
        raise TopicError(error.message, error.code)
    assignments = topic["assignments"]
    if assignments is not None:
        if len(assignments) != count - info.num_partitions:
            raise TopicError(f"{len(assignments)} assignments for "
                             f"{count - info.num_partitions} new partitions",
                             ErrorCode.INVALID_REPLICA_ASSIGNMENT)
        me = core.config.node_id
        for a in assignments:
            if a["broker_ids"] != [me]:
                raise TopicError(f"replicas {a['broker_ids']}: a standalone broker has "
                                 f"only broker {me}", ErrorCode.INVALID_REPLICA_ASSIGNMENT)


def handle_create_partitions(core: HandlerCore, body: CreatePartitionsRequest,
                             respond: Respond[CreatePartitionsResponse],
                             ctx: RequestContext) -> None:
    here = _answered_here(ctx, "Alter", [t["name"] for t in body["topics"]])
    if core.controller_mode:
        forwarded: CreatePartitionsRequest = {
            **body, "topics": [t for t in body["topics"] if t["name"] not in here]}
        counts = {t["name"]: t["count"] for t in forwarded["topics"]}

        def visible(answer: CreatePartitionsResponse) -> bool:
            image = core.image
            return body["validate_only"] or all(
                image is not None and n in image.topics
                and image.topics[n].num_partitions >= counts.get(n, 0)
                for n in _ok_names(answer.get("results", [])))

        denied: list[CreatePartitionsResponseResult] = [
            {"name": n, **error_fields(e)} for n, e in here.items()]

        def failed(exc: MiniKafkaError) -> CreatePartitionsResponse:
            return {"throttle_time_ms": 0,
                    "results": [{"name": n, **error_fields(exc)} for n in counts]}

        def finish(answer: CreatePartitionsResponse) -> CreatePartitionsResponse:
            answer["results"] = [*answer.get("results", []), *denied]
            return answer

        _forward(core, ApiKey.CREATE_PARTITIONS, forwarded, body["timeout_ms"], respond,
                 visible, failed, finish)
        return
    results: list[CreatePartitionsResponseResult] = []
    for topic in body["topics"]:
        name = topic["name"]
        if name in here:
            results.append({"name": name, **error_fields(here[name])})
            continue
        try:
            _validate_new_partitions(core, topic)
            if not body["validate_only"]:
                core.add_partitions(name, topic["count"])
            results.append({"name": name, "error_code": 0, "error_message": None})
        except MiniKafkaError as exc:
            results.append({"name": name, **error_fields(exc)})
    respond({"throttle_time_ms": 0, "results": results})


TOPIC_HANDLERS: dict[int, Handler] = {
    ApiKey.METADATA: serves(handle_metadata),
    ApiKey.CREATE_TOPICS: serves(handle_create_topics),
    ApiKey.DELETE_TOPICS: serves(handle_delete_topics),
    ApiKey.CREATE_PARTITIONS: serves(handle_create_partitions),
    ApiKey.DESCRIBE_CLUSTER: serves(handle_describe_cluster),
}
