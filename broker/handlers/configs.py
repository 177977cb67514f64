"""Handlers of the config APIs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs;
and the catalog of topic configs (Kafka's names, ours, types, defaults) they share with
CreateTopics' answer.

Resources (Kafka's ConfigResource.Type): ``2`` topic, ``4`` broker.  Anything else (broker
loggers, client metrics, groups) is answered INVALID_REQUEST.

**Topic configs** are the topic's overrides (the metadata image in controller mode, the
topic registry standalone) over the broker's defaults.  They are described under Kafka's
names (``retention.ms``, ``unclean.leader.election.enable``); requests may use Kafka's
names or ours (``retention_ms``); errors always name Kafka's key, in Kafka's words
(:mod:`broker.metadata.topic_config_checks`).  Only the settings we implement exist (the
table in :data:`TOPIC_CONFIGS`); any other name is INVALID_CONFIG ("Unknown topic config
name: x") when set, and simply absent when described.  Each entry says where its value
comes from (``config_source``): ``1`` DYNAMIC_TOPIC_CONFIG (an override of the topic),
``4`` STATIC_BROKER_CONFIG (the broker's config file or flags set the default), ``5``
DEFAULT_CONFIG (the built-in default); with ``include_synonyms`` the chain of values in
precedence order (the broker-level synonyms are named by our broker settings, ``segment.bytes``,
``min.insync.replicas``, since those are what a broker's config file accepts).  Topic
configs are never read-only nor sensitive.  ``flush.messages`` / ``flush.ms`` unset are
reported as Kafka's "never" (``9223372036854775807``).

**Broker configs** (resource name: this broker's id; ``""``, the cluster-wide dynamic
defaults, has none): every broker setting under its dotted name, STATIC_BROKER_CONFIG
when it differs from the built-in default, DEFAULT_CONFIG otherwise; read-only except
the dynamic ones (:mod:`broker.dynamic_config.broker_configs`:
``follower.replication.throttled.rate``), whose value is this broker's override when it
has one (``2`` DYNAMIC_BROKER_CONFIG; with ``include_synonyms`` the static value follows
it).  Altering a broker resource changes only those, on this broker, at once and in
every mode (never forwarded: each broker keeps its own overrides); the cluster-wide
defaults (name ``""``) are INVALID_REQUEST (not done yet), another broker's id too.

**Alterations**: in controller mode AlterConfigs and IncrementalAlterConfigs are forwarded
to the controller as they came, but for broker resources, answered here (the controller
validates and writes the topic config records)
and answered with its answer once this broker's image shows the new values (at most
:data:`VISIBLE_WAIT_S`); standalone they are validated and applied here
(``HandlerCore.set_topic_configs``).  AlterConfigs replaces the whole set of a topic's
overrides (unnamed ones return to their defaults); a null value is INVALID_REQUEST.
IncrementalAlterConfigs applies operations ``0`` SET, ``1`` DELETE (back to the default),
``2`` APPEND and ``3`` SUBTRACT (list configs only: ``cleanup.policy``; else
INVALID_CONFIG); an unknown operation, a null value to SET or APPEND, a config named twice
and a resource named twice are INVALID_REQUEST.  ``validate_only`` validates everything
and changes nothing.

Costs: describe O(configs x resources); alter O(configs) plus one registry write per topic
(standalone).  Thread-safety: run on the broker's event loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, cast

from broker.acls import CLUSTER_RESOURCE
from broker.config import BrokerConfig
from broker.dynamic_config.broker_configs import (
    DYNAMIC_BROKER_CONFIGS,
    DynamicBrokerConfigs,
    new_overrides,
)
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Body, Handler, RequestContext, require, serves
from broker.metadata.topic_config_checks import (
    check_topic_configs,
    kafka_config_name,
    list_items,
    topic_config_key,
    unknown_config,
)
from broker.replica.topic_configs import TopicError
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.protocol.message_types import (
    AlterConfigsRequest,
    AlterConfigsRequestConfig,
    AlterConfigsRequestResource,
    AlterConfigsResponse,
    AlterConfigsResponseResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResponseConfig,
    DescribeConfigsResponseResult,
    DescribeConfigsResponseSynonym,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestConfig,
    IncrementalAlterConfigsRequestResource,
    IncrementalAlterConfigsResponse,
)
from clients.protocol.topics import topic_name_error
from storage.config import LogConfig

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

# Kafka's DescribeConfigsResponse.ConfigSource
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Kafka's ConfigDef.Type as DescribeConfigs v3+ numbers it
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LONG_MAX = str((1 << 63) - 1)
VISIBLE_WAIT_S = 5.0

# AlterConfigs and IncrementalAlterConfigs share one path: the incremental request adds
# ``config_operation`` to each config; the two responses have the same fields
AlterRequest = AlterConfigsRequest | IncrementalAlterConfigsRequest
AlterConfigs = list[AlterConfigsRequestConfig] | list[IncrementalAlterConfigsRequestConfig]


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One topic config: Kafka's name, ours, its type, the broker setting that gives its
    default (None: the built-in :class:`LogConfig` default) and its documentation."""

    kafka_name: str
    key: str
    type: int
    broker_key: str | None
    doc: str


TOPIC_CONFIGS: tuple[TopicConfigDef, ...] = (
    TopicConfigDef("cleanup.policy", "cleanup_policy", LIST, None,
                   "delete (time and size retention), compact (latest record per key) or "
                   "compact,delete (both)"),
    TopicConfigDef("delete.retention.ms", "delete_retention_ms", LONG, None,
                   "how long a tombstone of a compacted topic is kept"),
    TopicConfigDef("flush.messages", "flush_messages", LONG, "flush_messages",
                   "fsync after this many messages (default: never, rely on replication)"),
    TopicConfigDef("flush.ms", "flush_ms", LONG, "flush_ms",
                   "fsync when the oldest unflushed message is this old (default: never)"),
    TopicConfigDef("index.interval.bytes", "index_interval_bytes", INT, None,
                   "bytes of log between two offset-index entries"),
    TopicConfigDef("max.message.bytes", "max_message_bytes", INT, "max_message_bytes",
                   "the largest record batch accepted"),
    TopicConfigDef("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", DOUBLE, None,
                   "compact a log when its dirty share reaches this ratio"),
    TopicConfigDef("min.compaction.lag.ms", "min_compaction_lag_ms", LONG, None,
                   "a record stays uncompacted at least this long"),
    TopicConfigDef("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", LONG,
                   None, "records stamped further in the future (CreateTime) are refused"),
    TopicConfigDef("message.timestamp.before.max.ms", "message_timestamp_before_max_ms", LONG,
                   None, "records stamped further in the past (CreateTime) are refused"),
    TopicConfigDef("message.timestamp.type", "message_timestamp_type", STRING, None,
                   "CreateTime (the producer's time) or LogAppendTime (the leader's clock)"),
    TopicConfigDef("min.insync.replicas", "min_insync_replicas", INT, "min_insync_replicas",
                   "replicas that must have a write acknowledged with acks=all"),
    TopicConfigDef("retention.bytes", "retention_bytes", LONG, "retention_bytes",
                   "keep at most this many bytes per partition (-1: no limit)"),
    TopicConfigDef("retention.ms", "retention_ms", LONG, "retention_ms",
                   "delete segments older than this (-1: never)"),
    TopicConfigDef("segment.bytes", "segment_bytes", INT, "segment_bytes",
                   "roll a new segment at this size"),
    TopicConfigDef("segment.index.bytes", "segment_index_bytes", INT, None,
                   "preallocated size of a segment's indexes"),
    TopicConfigDef("segment.ms", "segment_ms", LONG, "segment_ms",
                   "roll a new segment when the active one is this old"),
    TopicConfigDef("unclean.leader.election.enable", "unclean_leader_election", BOOLEAN, None,
                   "elect an out-of-sync replica when no in-sync one is alive"),
)
BY_KEY = {d.key: d for d in TOPIC_CONFIGS}
BY_KAFKA_NAME = {d.kafka_name: d for d in TOPIC_CONFIGS}
_BUILT_IN = LogConfig()
_BROKER_BUILT_IN = BrokerConfig()


def _text(value: object) -> str:
    if value is None:
        return LONG_MAX  # flush.messages / flush.ms: never
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _kafka_value(d: TopicConfigDef, value: str) -> str:
    if d.key in ("flush_messages", "flush_ms") and value.strip().lower() in ("", "none",
                                                                             "null"):
        return LONG_MAX
    return value


def _default(core: HandlerCore, d: TopicConfigDef) -> tuple[str, str, int]:
    """(synonym name, value, source) of a topic config's default on this broker."""
    if d.broker_key is None:
        if d.key == "unclean_leader_election":
            return d.kafka_name, "false", DEFAULT_CONFIG
        return d.kafka_name, _text(getattr(_BUILT_IN, d.key)), DEFAULT_CONFIG
    value = getattr(core.config, d.broker_key)
    built_in = getattr(_BROKER_BUILT_IN, d.broker_key)
    source = DEFAULT_CONFIG if value == built_in else STATIC_BROKER_CONFIG
    return d.broker_key.replace("_", "."), _text(value or None if d.key.startswith("flush")
                                                 else value), source


def topic_config_entries(core: HandlerCore, overrides: Mapping[str, str],
                         keys: list[str] | None = None, *, synonyms: bool = False,
                         documentation: bool = False) -> list[DescribeConfigsResponseConfig]:
    """DescribeConfigs entries of a topic with ``overrides`` (our keys), in Kafka's names;
    ``keys`` (Kafka's names or ours) limits them, unknown keys are skipped."""
    wanted = None if keys is None else {topic_config_key(k) for k in keys}
    clean = {topic_config_key(k): v for k, v in overrides.items()}
    out: list[DescribeConfigsResponseConfig] = []
    for d in TOPIC_CONFIGS:
        if wanted is not None and d.key not in wanted:
            continue
        default_name, default_value, default_source = _default(core, d)
        chain: list[DescribeConfigsResponseSynonym] = [
            {"name": default_name, "value": default_value, "source": default_source}]
        if d.key in clean:
            value, source = _kafka_value(d, clean[d.key]), DYNAMIC_TOPIC_CONFIG
            chain.insert(0, {"name": d.kafka_name, "value": value, "source": source})
        else:
            value, source = default_value, default_source
        out.append({"name": d.kafka_name, "value": value, "read_only": False,
                    "config_source": source, "is_sensitive": False,
                    "synonyms": chain if synonyms else [], "config_type": d.type,
                    "documentation": d.doc if documentation else None})
    return out


def broker_config_entries(config: BrokerConfig, dynamic: DynamicBrokerConfigs,
                          keys: list[str] | None = None, *,
                          synonyms: bool = False) -> list[DescribeConfigsResponseConfig]:
    """DescribeConfigs entries of a broker: every setting, read-only but the dynamic
    ones (with this broker's override, if any, first)."""
    wanted = None if keys is None else {k.strip().replace(".", "_") for k in keys}
    out: list[DescribeConfigsResponseConfig] = []
    for f in fields(BrokerConfig):
        if f.name == "extra" or (wanted is not None and f.name not in wanted):
            continue
        value = getattr(config, f.name)
        source = DEFAULT_CONFIG if value == getattr(_BROKER_BUILT_IN, f.name) \
            else STATIC_BROKER_CONFIG
        name = f.name.replace("_", ".")
        kind = BOOLEAN if isinstance(value, bool) else INT if isinstance(value, int) \
            else STRING
        text = _text(value)
        chain: list[DescribeConfigsResponseSynonym] = [
            {"name": name, "value": text, "source": source}]
        override = dynamic.overrides.get(name) if name in DYNAMIC_BROKER_CONFIGS else None
        if override is not None:
            text, source = override, DYNAMIC_BROKER_CONFIG
            chain.insert(0, {"name": name, "value": text, "source": source})
        out.append({"name": name, "value": text, "read_only": name not in DYNAMIC_BROKER_CONFIGS,
                    "config_source": source, "is_sensitive": False,
                    "config_type": LONG if name in DYNAMIC_BROKER_CONFIGS else kind,
                    "documentation": None, "synonyms": chain if synonyms else []})
    return out


def _topic_overrides(core: HandlerCore, name: str) -> dict[str, str]:
    """The topic's overrides, or TopicError (invalid name, unknown topic)."""
    reason = topic_name_error(name)
    if reason is not None:
        raise TopicError(reason, ErrorCode.INVALID_TOPIC_EXCEPTION)
    if core.image is not None:
        info = core.image.topics.get(name)
        if info is not None:
            return dict(info.configs)
    elif core.registry.get(name) is not None:
        return core.configs.topic_configs(name)
    raise TopicError(f"unknown topic {name!r}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def _check_broker_name(core: HandlerCore, name: str) -> None:
    if name not in ("", str(core.config.node_id)):
        raise MiniKafkaError(f"unexpected broker id {name!r}: this is broker "
                             f"{core.config.node_id} (or use '' for the cluster defaults)",
                             ErrorCode.INVALID_REQUEST)


# -- DescribeConfigs ------------------------------------------------------------------


def handle_describe_configs(core: HandlerCore, body: DescribeConfigsRequest,
                            respond: Respond[DescribeConfigsResponse],
                            ctx: RequestContext) -> None:
    results: list[DescribeConfigsResponseResult] = []
    for resource in body["resources"]:
        kind, name = resource["resource_type"], resource["resource_name"]
        keys = resource["configuration_keys"]
        result: DescribeConfigsResponseResult = {
            "error_code": 0, "error_message": None, "resource_type": kind,
            "resource_name": name, "configs": []}
        try:
            require(ctx, "DescribeConfigs", "Topic" if kind == TOPIC_RESOURCE else "Cluster",
                    name if kind == TOPIC_RESOURCE else CLUSTER_RESOURCE)
            if kind == TOPIC_RESOURCE:
                result["configs"] = topic_config_entries(
                    core, _topic_overrides(core, name), keys,
                    synonyms=body["include_synonyms"],
                    documentation=body["include_documentation"])
            elif kind == BROKER_RESOURCE:
                _check_broker_name(core, name)
                if name:
                    result["configs"] = broker_config_entries(
                        core.config, core.dynamic_configs, keys,
                        synonyms=body["include_synonyms"])
            else:
                raise MiniKafkaError(f"resource type {kind} is not supported (2 topic, "
                                     "4 broker)", ErrorCode.INVALID_REQUEST)
        except MiniKafkaError as exc:
            result.update({"error_code": int(exc.code), "error_message": exc.message})
        results.append(result)
    respond({"throttle_time_ms": 0, "results": results})


# -- AlterConfigs / IncrementalAlterConfigs --------------------------------------------


def _incremental(current: dict[str, str], configs: list[IncrementalAlterConfigsRequestConfig]
                 ) -> dict[str, str]:
    """The overrides after IncrementalAlterConfigs' operations (our keys)."""
    out = dict(current)
    for c in configs:
        key, op, value = topic_config_key(c["name"]), c["config_operation"], c["value"]
        if op not in (SET, DELETE, APPEND, SUBTRACT):
            raise MiniKafkaError(f"config {kafka_config_name(key)}: unknown operation {op}",
                                 ErrorCode.INVALID_REQUEST)
        if key not in BY_KEY:
            raise unknown_config(c["name"])
        if op == DELETE:
            out.pop(key, None)
            continue
        if value is None and op != SUBTRACT:
            raise MiniKafkaError(f"config {kafka_config_name(key)}: a null value is not "
                                 "supported", ErrorCode.INVALID_REQUEST)
        if op == SET and value is not None:  # (a null SET was refused above)
            out[key] = value
            continue
        if BY_KEY[key].type != LIST:
            raise MiniKafkaError(f"Config value {'append' if op == APPEND else 'subtract'} "
                                 f"is not allowed for config key: {kafka_config_name(key)}",
                                 ErrorCode.INVALID_CONFIG)
        items = list_items(out[key]) if key in out else ["delete"]
        given = list_items(value or "")
        if op == APPEND:
            items += [v for v in given if v not in items]
        else:
            items = [v for v in items if v not in given]
        out[key] = ",".join(items)
    return out


def _new_overrides(core: HandlerCore, api: ApiKey, name: str, configs: AlterConfigs
                   ) -> dict[str, str]:
    names = [topic_config_key(c["name"]) for c in configs]
    twice = sorted({kafka_config_name(n) for n in names if names.count(n) > 1})
    if twice:
        raise MiniKafkaError(f"config {', '.join(twice)} is named twice",
                             ErrorCode.INVALID_REQUEST)
    current = _topic_overrides(core, name)
    if api == ApiKey.ALTER_CONFIGS:
        nulls = [c["name"] for c in configs if c["value"] is None]
        if nulls:
            raise MiniKafkaError(f"null values are not supported: {nulls}",
                                 ErrorCode.INVALID_REQUEST)
        unknown = [c["name"] for c in configs if topic_config_key(c["name"]) not in BY_KEY]
        if unknown:
            raise unknown_config(unknown[0])
        new = {topic_config_key(c["name"]): c["value"] for c in configs
               if c["value"] is not None}  # (nulls were refused above)
    else:
        # (the configs of an IncrementalAlterConfigs request, by ``api``)
        new = _incremental(current, cast("list[IncrementalAlterConfigsRequestConfig]", configs))
    return core.configs.validate(new)


def _alter_locally(core: HandlerCore, api: ApiKey, body: AlterRequest) -> AlterConfigsResponse:
    responses: list[AlterConfigsResponseResponse] = []
    counts: dict[tuple[int, str], int] = {}
    for r in body["resources"]:
        counts[(r["resource_type"], r["resource_name"])] = counts.get(
            (r["resource_type"], r["resource_name"]), 0) + 1
    for resource in body["resources"]:
        kind, name = resource["resource_type"], resource["resource_name"]
        result: AlterConfigsResponseResponse = {
            "error_code": 0, "error_message": None, "resource_type": kind,
            "resource_name": name}
        try:
            if counts[(kind, name)] > 1:
                raise MiniKafkaError(f"resource {name!r} is named twice",
                                     ErrorCode.INVALID_REQUEST)
            if kind == TOPIC_RESOURCE:
                new = _new_overrides(core, api, name, resource["configs"])
                if not body["validate_only"]:
                    core.set_topic_configs(name, new)
            elif kind == BROKER_RESOURCE:
                _alter_broker(core, api, name, resource["configs"], body["validate_only"])
            else:
                raise MiniKafkaError(f"resource type {kind} is not supported (2 topic, "
                                     "4 broker)", ErrorCode.INVALID_REQUEST)
        except MiniKafkaError as exc:
            result.update({"error_code": int(exc.code), "error_message": exc.message})
        responses.append(result)
    return {"throttle_time_ms": 0, "responses": responses}


def _alter_broker(core: HandlerCore, api: ApiKey, name: str, configs: AlterConfigs,
                  validate_only: bool) -> None:
    """This broker's dynamic configs (see the module docstring)."""
    _check_broker_name(core, name)
    if not name:
        raise MiniKafkaError("cluster-wide dynamic broker defaults (resource name '') are "
                             "not supported yet: alter each broker by its id",
                             ErrorCode.INVALID_REQUEST)
    incremental = api == ApiKey.INCREMENTAL_ALTER_CONFIGS
    new = new_overrides(core.dynamic_configs.overrides, [
        (c["name"], cast(int, c.get("config_operation", SET)), c["value"]) for c in configs],
        incremental)
    if not validate_only:
        core.dynamic_configs.alter(new)


def _same(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    a, b = a.strip().lower(), b.strip().lower()
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


def _normalized(key: str, value: str | None) -> str | None:
    """``value`` as the controller stores it (``" compact, compact"`` -> ``compact``)."""
    try:
        return check_topic_configs({key: value}).get(key, value)
    except InvalidConfigError:
        return value


def _visible(core: HandlerCore, api: ApiKey, body: AlterRequest, answer: AlterConfigsResponse
             ) -> Callable[[], bool]:
    """Whether this broker's image shows what the controller accepted (topics only)."""
    ok = {(r["resource_type"], r["resource_name"]) for r in answer.get("responses", [])
          if r["error_code"] == 0}
    expected: list[tuple[str, str, str | None]] = []  # topic, key, value (None: unset)
    for resource in body["resources"]:
        if resource["resource_type"] != TOPIC_RESOURCE or (
                TOPIC_RESOURCE, resource["resource_name"]) not in ok:
            continue
        for c in resource["configs"]:
            op, key = c.get("config_operation", SET), topic_config_key(c["name"])
            if op == SET:
                expected.append((resource["resource_name"], key, _normalized(key, c["value"])))
            elif op == DELETE and key not in ("min_insync_replicas", "unclean_leader_election"):
                expected.append((resource["resource_name"], key, None))

    def visible() -> bool:
        image = core.image
        if image is None:
            return False
        for topic, key, value in expected:
            info = image.topics.get(topic)
            if info is None:
                return True  # deleted meanwhile: nothing to wait for
            if not _same(info.configs.get(key), value):
                return False
        return True

    return visible


def _forward_alter(core: HandlerCore, api: ApiKey, body: AlterRequest,
                   respond: Respond[AlterConfigsResponse]) -> None:
    async def run() -> None:
        assert core.controller is not None
        try:  # (the controller link takes and gives plain bodies)
            answer = cast(AlterConfigsResponse,
                          await core.controller.request(api, cast(Body, body)))
        except MiniKafkaError as exc:
            respond({"throttle_time_ms": 0, "responses": [
                {"error_code": int(exc.code), "error_message": f"controller: {exc.message}",
                 "resource_type": r["resource_type"], "resource_name": r["resource_name"]}
                for r in body["resources"]]})
            return
        if not body["validate_only"]:
            visible = _visible(core, api, body, answer)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + VISIBLE_WAIT_S
            while not visible() and loop.time() < deadline:
                await asyncio.sleep(0.01)
        respond(answer)

    _spawn(run())


_pending: set[asyncio.Task[None]] = set()


def _spawn(coro: Any) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _pending.add(task)
    task.add_done_callback(_pending.discard)


def _alter(core: HandlerCore, api: ApiKey, body: AlterRequest,
           respond: Respond[AlterConfigsResponse], ctx: RequestContext) -> None:
    """AlterConfigs or IncrementalAlterConfigs: resources the user may not AlterConfigs
    (ACLs) are answered here with *_AUTHORIZATION_FAILED, the rest are done."""
    denied: list[AlterConfigsResponseResponse] = []
    allowed: list[AlterConfigsRequestResource | IncrementalAlterConfigsRequestResource] = []
    for r in body["resources"]:
        topic = r["resource_type"] == TOPIC_RESOURCE
        try:
            require(ctx, "AlterConfigs", "Topic" if topic else "Cluster",
                    r["resource_name"] if topic else CLUSTER_RESOURCE)
            allowed.append(r)
        except MiniKafkaError as exc:
            denied.append({"error_code": int(exc.code), "error_message": exc.message,
                           "resource_type": r["resource_type"],
                           "resource_name": r["resource_name"]})
    if denied:
        body = cast(AlterRequest, {**body, "resources": allowed})  # (the same API's)
        answer_all = respond

        def respond(answer: AlterConfigsResponse | None) -> None:
            if answer is not None:
                answer["responses"] = [*answer.get("responses", []), *denied]
            answer_all(answer)

    brokers = [r for r in allowed if r["resource_type"] == BROKER_RESOURCE]
    if core.controller_mode and len(brokers) < len(allowed):
        if brokers:  # answered here, the rest by the controller
            local = _alter_locally(core, api, cast(AlterRequest, {**body, "resources": brokers}))
            body = cast(AlterRequest, {**body, "resources": [
                r for r in allowed if r["resource_type"] != BROKER_RESOURCE]})
            answer_forwarded = respond

            order = {(r["resource_type"], r["resource_name"]): i
                     for i, r in enumerate(allowed)}

            def respond(answer: AlterConfigsResponse | None) -> None:
                if answer is not None:  # in the request's order
                    answer["responses"] = sorted(
                        [*answer.get("responses", []), *local["responses"]],
                        key=lambda r: order.get((r["resource_type"], r["resource_name"]),
                                                len(order)))
                answer_forwarded(answer)

        _forward_alter(core, api, body, respond)
    else:
        respond(_alter_locally(core, api, body))


def handle_alter_configs(core: HandlerCore, body: AlterConfigsRequest,
                         respond: Respond[AlterConfigsResponse], ctx: RequestContext) -> None:
    _alter(core, ApiKey.ALTER_CONFIGS, body, respond, ctx)


def handle_incremental_alter_configs(core: HandlerCore, body: IncrementalAlterConfigsRequest,
                                     respond: Respond[IncrementalAlterConfigsResponse],
                                     ctx: RequestContext) -> None:
    _alter(core, ApiKey.INCREMENTAL_ALTER_CONFIGS, body, respond, ctx)


CONFIG_HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_CONFIGS: serves(handle_describe_configs),
    ApiKey.ALTER_CONFIGS: serves(handle_alter_configs),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: serves(handle_incremental_alter_configs),
}
