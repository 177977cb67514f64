"""Config operations of :class:`~clients.admin.Admin`: describe, replace and
incrementally change the configs of topics and brokers, and the checks of config
arguments shared with topic creation.

Contract: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs; a broker resource
(named by its id) goes to that broker, all others in one request to any broker.
``alter_configs`` replaces the resource's whole set of overrides (Kafka's legacy
AlterConfigs: a config not listed returns to its default);
``incremental_alter_configs`` changes only what it lists.  Resources are given as
:class:`~clients.types.ConfigResource` or ``(type, name)`` with the type as the enum,
its int or its name; config names and values must be str (a value may be None where it
means "remove").  Per-resource failures follow
:func:`~clients.admin.requests.raise_first`.

A broker resource whose id is not in the cluster (after one metadata refresh) fails
alone with BROKER_NOT_AVAILABLE ``broker 9 is not in the cluster (brokers: 0, 1, 2)``,
and a broker that cannot be reached fails alone with its network error: Kafka's
AdminClient also fails only that resource's future, but only when the call times out
(its ``ConstantNodeIdProvider`` waits for the node to appear in the metadata); we
answer at once.  A broker resource name that is not an integer is a ValueError.

Costs: one round trip per broker resource plus one for the others (and a metadata
refresh before the first broker resource, and again when one names an unknown id).
Thread-safety: none (one caller thread, as the Admin).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from clients.admin.requests import AdminRequests, R, raise_first
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, error_for
from clients.protocol.message_types import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from clients.types import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
)


class ConfigAdmin:
    """DescribeConfigs, AlterConfigs and IncrementalAlterConfigs."""

    def __init__(self, requests: AdminRequests) -> None:
        self._requests = requests
        self._metadata = requests.metadata

    def describe_configs(
        self,
        resources: Iterable[ConfigResource | tuple[ConfigResourceType | int | str, str]],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[ConfigResource, dict[str, ConfigEntry] | MiniKafkaError]:
        wanted = [_resource(r) for r in resources]
        timeout = self._requests.timeout(timeout_ms)

        def request(group: list[ConfigResource]) -> DescribeConfigsRequest:
            return {"resources": [{"resource_type": int(r.type), "resource_name": r.name,
                                   "configuration_keys": None} for r in group],
                    "include_synonyms": include_synonyms,
                    "include_documentation": include_documentation}  # fmt: skip

        out: dict[ConfigResource, dict[str, ConfigEntry] | MiniKafkaError] = {}
        bodies, failed = self._config_requests(ApiKey.DESCRIBE_CONFIGS, wanted, request,
                                               timeout, DescribeConfigsResponse)
        out.update(failed)
        for body in bodies:
            for r in body["results"]:
                resource = ConfigResource(_resource_type(r["resource_type"]), r["resource_name"])
                if r["error_code"] != ErrorCode.NONE:
                    out[resource] = error_for(r["error_code"], f"describe configs of {resource}: "
                                              f"{r['error_message'] or ''}".rstrip(": "))
                    continue
                out[resource] = {c["name"]: ConfigEntry(
                    c["name"], c["value"], _source(c["config_source"]), c["read_only"],
                    c["is_sensitive"],
                    tuple((s["name"], s["value"], _source(s["source"])) for s in c["synonyms"]),
                    c["documentation"]) for c in r["configs"]}  # fmt: skip
        return raise_first(out, raise_on_error)

    def alter_configs(
        self,
        configs: Mapping[ConfigResource | tuple[Any, str], Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[ConfigResource, MiniKafkaError | None]:
        wanted = {_resource(r): dict(c) for r, c in configs.items()}
        for resource, pairs in wanted.items():
            for name, value in pairs.items():
                check_config_pair(str(resource), name, value)
        timeout = self._requests.timeout(timeout_ms)

        def request(group: list[ConfigResource]) -> AlterConfigsRequest:
            return {"resources": [{"resource_type": int(r.type), "resource_name": r.name,
                                   "configs": [{"name": k, "value": v}
                                               for k, v in wanted[r].items()]}
                                  for r in group],
                    "validate_only": validate_only}  # fmt: skip

        return self._alter_results(
            self._config_requests(ApiKey.ALTER_CONFIGS, list(wanted), request, timeout,
                                  AlterConfigsResponse),
            "alter configs of", raise_on_error)

    def incremental_alter_configs(
        self,
        configs: Mapping[ConfigResource | tuple[Any, str],
                         Iterable[AlterConfigOp | tuple[Any, ...]]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[ConfigResource, MiniKafkaError | None]:
        wanted: dict[ConfigResource, list[AlterConfigOp]] = {}
        for r, ops in configs.items():
            resource = _resource(r)
            checked = []
            for op in ops:
                op = AlterConfigOp(*op)
                kind = _op_type(op.op)
                value = None if kind == AlterConfigOpType.DELETE else op.value
                if kind != AlterConfigOpType.DELETE and value is None:
                    raise ValueError(f"{resource}: {kind.name} of {op.name!r} needs a value")
                check_config_pair(str(resource), op.name, value)
                checked.append(AlterConfigOp(op.name, value, kind))
            wanted[resource] = checked
        timeout = self._requests.timeout(timeout_ms)

        def request(group: list[ConfigResource]) -> IncrementalAlterConfigsRequest:
            return {"resources": [{"resource_type": int(r.type), "resource_name": r.name,
                                   "configs": [{"name": op.name, "value": op.value,
                                                "config_operation": int(op.op)}
                                               for op in wanted[r]]}
                                  for r in group],
                    "validate_only": validate_only}  # fmt: skip

        return self._alter_results(
            self._config_requests(ApiKey.INCREMENTAL_ALTER_CONFIGS, list(wanted), request,
                                  timeout, IncrementalAlterConfigsResponse),
            "alter configs of", raise_on_error)  # fmt: skip

    def _config_requests(
        self,
        api: ApiKey,
        resources: list[ConfigResource],
        request: Callable[[list[ConfigResource]], Mapping[str, object]],
        timeout_ms: int,
        answer: type[R],
    ) -> tuple[list[R], dict[ConfigResource, MiniKafkaError]]:
        """One request per broker resource (to that broker), one for all the others:
        (the answers, the broker resources that failed without one)."""
        out = []
        failed: dict[ConfigResource, MiniKafkaError] = {}
        others = [r for r in resources if r.type != ConfigResourceType.BROKER or not r.name]
        if others:
            out.append(self._requests.request(None, api, request(others), timeout_ms, answer))
        brokers = [r for r in resources if r.type == ConfigResourceType.BROKER and r.name]
        nodes = {r: _broker_id(r) for r in brokers}
        if nodes and (self._metadata.version == 0 or any(
                self._metadata.broker(n) is None for n in nodes.values())):
            self._requests.refresh_metadata([], timeout_ms)
        for r, node in nodes.items():
            if self._metadata.broker(node) is None:
                known = ", ".join(str(b.node_id) for b in sorted(
                    self._metadata.brokers(), key=lambda b: b.node_id))
                failed[r] = error_for(ErrorCode.BROKER_NOT_AVAILABLE,
                                      f"broker {node} is not in the cluster (brokers: {known})")
                continue
            try:
                out.append(self._requests.request(node, api, request([r]), timeout_ms, answer))
            except MiniKafkaError as exc:  # that broker alone: its resource fails
                failed[r] = exc
        return out, failed

    @staticmethod
    def _alter_results(
        answered: tuple[Sequence[AlterConfigsResponse | IncrementalAlterConfigsResponse],
                        Mapping[ConfigResource, MiniKafkaError]],
        what: str,
        raise_on_error: bool,
    ) -> dict[ConfigResource, MiniKafkaError | None]:
        bodies, failed = answered
        out: dict[ConfigResource, MiniKafkaError | None] = dict(failed)
        for body in bodies:
            for r in body["responses"]:
                resource = ConfigResource(_resource_type(r["resource_type"]), r["resource_name"])
                out[resource] = None if r["error_code"] == ErrorCode.NONE else error_for(
                    r["error_code"],
                    f"{what} {resource}: {r['error_message'] or ''}".rstrip(": "))
        return raise_first(out, raise_on_error)


def _resource(r: ConfigResource | tuple[Any, str]) -> ConfigResource:
    kind, name = r
    if not isinstance(name, str):
        raise TypeError(f"config resource name must be a str, got {type(name).__name__}")
    return ConfigResource(_resource_type(kind), name)


def _broker_id(r: ConfigResource) -> int:
    try:
        return int(r.name)
    except ValueError:
        raise ValueError(f"broker resource name must be a broker id, got {r.name!r}") from None


def _resource_type(kind: ConfigResourceType | int | str) -> ConfigResourceType:
    try:
        if isinstance(kind, str):
            return ConfigResourceType[kind.upper()]
        return ConfigResourceType(kind)
    except (KeyError, ValueError):
        raise ValueError(f"unknown config resource type {kind!r} (use "
                         f"{', '.join(t.name.lower() for t in ConfigResourceType)})") from None


def _op_type(op: AlterConfigOpType | int | str) -> AlterConfigOpType:
    try:
        if isinstance(op, str):
            return AlterConfigOpType[op.upper()]
        return AlterConfigOpType(op)
    except (KeyError, ValueError):
        raise ValueError(f"unknown config operation {op!r} (use set, delete, append or "
                         "subtract)") from None


def _source(value: int) -> ConfigSource:
    try:
        return ConfigSource(value)
    except ValueError:
        return ConfigSource.UNKNOWN


def check_config_pair(where: str, name: object, value: object) -> None:
    """TypeError unless ``name`` is a non-empty str and ``value`` a str or None."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"{where}: config names must be non-empty str, got {name!r}")
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{where}: config {name!r} value must be a str or None, got "
                        f"{type(value).__name__} (Kafka configs are strings)")
