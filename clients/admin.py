"""Admin client: topics, partitions, configs, records, the cluster, and consumer groups.

Requests go at the highest version the broker and we both serve
(:meth:`~clients.network.connection.BrokerConnection.version_for`), in Kafka's shapes
(:mod:`clients.protocol.messages`):

- **Topics** (CreateTopics, configs as ``[{name, value}]``; DeleteTopics;
  CreatePartitions) go to the controller named by the last metadata (any broker if it is
  not a known broker; the broker forwards or answers NOT_CONTROLLER, which is retried
  once after a metadata refresh).  ``list_topics`` / ``describe_topics`` use Metadata
  (without auto-creation).
- **Configs** (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs): a broker
  resource goes to that broker, others to any broker.  ``alter_configs`` replaces the
  resource's whole set of overrides (Kafka's legacy AlterConfigs: a config not listed
  returns to its default); ``incremental_alter_configs`` changes only what it lists.
- **Records**: ``delete_records`` (DeleteRecords) goes to each partition's leader and
  returns the new low watermarks (log start offsets).
- **Cluster**: ``describe_cluster`` uses DescribeCluster, or Metadata on a broker that
  does not serve it.
- **Groups**: ``list_groups`` asks every broker (each knows the groups it coordinates)
  and merges; ``describe_groups``, ``list_group_offsets`` and ``delete_groups`` ask each
  group's coordinator (FindCoordinator first, shapes in
  :mod:`clients.consumer.group_requests`; COORDINATOR_NOT_AVAILABLE /
  COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR retried until the timeout).  Member
  assignments of ``consumer`` groups are decoded (:mod:`clients.consumer.group_protocol`);
  offsets come with the partition's high watermark (ListOffsets latest, from each
  leader) so :attr:`GroupOffset.lag` is HW - committed.  A group's state is "" when the
  broker answers ListGroups below v4 (which carries no state).

Per-item failures (a topic, a resource, a partition, a group) are raised as the matching
:class:`~clients.protocol.errors.MiniKafkaError` (code from the broker, message naming
the item) after all items were processed; pass ``raise_on_error=False`` to get them in
the result instead (``{item: error or None}``, or the error in place of the value).

Security: ``security_protocol``, ``sasl_*`` and ``ssl_*`` as in
:class:`~clients.consumer.consumer.Consumer` (its docstring lists them); a refused login or
certificate is raised by the call that needed the connection.

Costs: one round trip per call and broker involved (plus a metadata refresh where a
leader or the controller must be known).  Thread safety: none; one thread per Admin.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from clients.consumer.group_protocol import PROTOCOL_TYPE, GroupProtocolError, decode_assignment
from clients.consumer.group_requests import (
    find_coordinator_request,
    offset_fetch_request,
    read_find_coordinator,
    read_offset_fetch,
)
from clients.network.cluster_metadata import ClusterMetadata, parse_bootstrap
from clients.network.connection import Body
from clients.network.node_connections import NodeConnections
from clients.network.sasl import sasl_login_of
from clients.network.tls import ssl_context_of
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import (
    ErrorCode,
    InvalidConfigError,
    MiniKafkaError,
    RequestTimedOutError,
    UnsupportedVersionError,
    error_for,
)
from clients.protocol.topics import TopicPartition, validate_topic_name
from clients.types import (
    AlterConfigOp,
    AlterConfigOpType,
    BrokerNode,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    GroupDescription,
    GroupListing,
    GroupOffset,
    MemberDescription,
    NewPartitions,
    NewTopic,
    PartitionInfo,
    TopicDescription,
)

__all__ = ["Admin"]

K = TypeVar("K")
V = TypeVar("V")


class Admin:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str | None = None,
        request_timeout_ms: int = 30_000,
        security_protocol: str = "PLAINTEXT",
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | bytes | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_password: str | None = None,
        ssl_check_hostname: bool = True,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if not isinstance(request_timeout_ms, int) or request_timeout_ms <= 0:
            raise InvalidConfigError(f"request_timeout_ms must be > 0, got {request_timeout_ms!r}")
        self.client_id = client_id or f"admin-{os.getpid()}-{id(self):x}"
        self.request_timeout_ms = request_timeout_ms
        sasl = sasl_login_of(security_protocol, sasl_mechanism, sasl_plain_username,
                             sasl_plain_password)
        tls = ssl_context_of(security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile,
                             ssl_password, ssl_check_hostname, ssl_context)
        self._metadata = ClusterMetadata()
        self._net = NodeConnections(
            parse_bootstrap(bootstrap_servers), self._metadata, client_id=self.client_id,
            request_timeout_ms=request_timeout_ms, sasl=sasl, ssl_context=tls,
        )  # fmt: skip

    # ------------------------------------------------------------ topics
    def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:
        topics = list(new_topics)
        for t in topics:
            validate_topic_name(t.name)
            if t.replica_assignments:
                if t.num_partitions != -1 or t.replication_factor != -1:
                    raise ValueError(f"{t.name}: with replica_assignments, num_partitions "
                                     "and replication_factor must be -1")
            else:
                if t.num_partitions == 0 or t.num_partitions < -1:
                    raise ValueError(f"{t.name}: num_partitions must be > 0 or -1")
                if t.replication_factor == 0 or t.replication_factor < -1:
                    raise ValueError(f"{t.name}: replication_factor must be > 0 or -1")
            for name, value in (t.configs or {}).items():
                _check_config_pair(t.name, name, value)
        timeout = self._timeout(timeout_ms)
        body = {
            "topics": [
                {"name": t.name, "num_partitions": t.num_partitions,
                 "replication_factor": t.replication_factor,
                 "assignments": [{"partition_index": p, "broker_ids": list(ids)}
                                 for p, ids in sorted((t.replica_assignments or {}).items())],
                 "configs": [{"name": k, "value": v} for k, v in (t.configs or {}).items()]}
                for t in topics
            ],
            "timeout_ms": timeout,
            "validate_only": validate_only,
        }  # fmt: skip
        response = self._to_controller(ApiKey.CREATE_TOPICS, body, timeout, "topics")
        return self._results(response["topics"], "create topic", raise_on_error)

    def delete_topics(
        self,
        names: Iterable[str],
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:
        topic_names = [validate_topic_name(n) for n in names]
        timeout = self._timeout(timeout_ms)
        body = {"topic_names": topic_names, "timeout_ms": timeout}
        response = self._to_controller(ApiKey.DELETE_TOPICS, body, timeout, "responses")
        return self._results(response["responses"], "delete topic", raise_on_error)

    def create_partitions(
        self,
        new_partitions: Mapping[str, NewPartitions | int],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:
        """Grow topics to ``NewPartitions.total_count`` partitions (an int is the count).

        Partitions are never removed: a count not above the current one is the broker's
        INVALID_PARTITIONS.
        """
        topics = []
        for name, spec in new_partitions.items():
            validate_topic_name(name)
            np_ = NewPartitions(spec) if isinstance(spec, int) else NewPartitions(*spec)
            if not isinstance(np_.total_count, int) or np_.total_count <= 0:
                raise ValueError(f"{name}: total_count must be an int > 0, got "
                                 f"{np_.total_count!r}")
            assignments = None if np_.new_assignments is None else [
                {"broker_ids": [int(b) for b in ids]} for ids in np_.new_assignments]
            topics.append({"name": name, "count": np_.total_count, "assignments": assignments})
        timeout = self._timeout(timeout_ms)
        body = {"topics": topics, "timeout_ms": timeout, "validate_only": validate_only}
        response = self._to_controller(ApiKey.CREATE_PARTITIONS, body, timeout, "results")
        return self._results(response["results"], "create partitions of", raise_on_error)

    def list_topics(self, *, timeout_ms: int | None = None) -> list[str]:
        body = self._net.refresh_metadata(None, self._timeout(timeout_ms),
                                          allow_auto_topic_creation=False)
        return sorted(t["name"] for t in body["topics"] if t["error_code"] == 0)

    def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions with leader, replicas and ISR; unknown topics raise.

        ``configs`` holds the topic's overrides when the broker is minikafka (our
        Metadata extra); use :meth:`describe_configs` for every value and its source.
        """
        wanted = None if names is None else [validate_topic_name(n) for n in names]
        body = self._net.refresh_metadata(wanted, self._timeout(timeout_ms),
                                          allow_auto_topic_creation=False)
        out: dict[str, TopicDescription] = {}
        for t in body["topics"]:
            if t["error_code"] != ErrorCode.NONE:
                raise error_for(t["error_code"], f"describe topic {t['name']!r}")
            parts = [
                PartitionInfo(t["name"], p["partition_index"], p["leader_id"], p["leader_epoch"],
                              tuple(p["replica_nodes"]), tuple(p["isr_nodes"]),
                              tuple(p["offline_replicas"]), p["error_code"])
                for p in sorted(t["partitions"], key=lambda p: p["partition_index"])
            ]  # fmt: skip
            configs = {c["name"]: c["value"] for c in t["configs"]}
            out[t["name"]] = TopicDescription(t["name"], parts, t["is_internal"], configs)
        return out

    # ------------------------------------------------------------ cluster
    def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        """Cluster id, controller and brokers (DescribeCluster, else Metadata)."""
        timeout = self._timeout(timeout_ms)
        try:
            body = self._net.request(None, ApiKey.DESCRIBE_CLUSTER,
                                     {"include_cluster_authorized_operations": False},
                                     timeout)  # fmt: skip
        except UnsupportedVersionError:
            self._net.refresh_metadata([], timeout)
            md = self._metadata
            return ClusterDescription(md.cluster_id, md.controller_id, md.brokers())
        if body["error_code"] != ErrorCode.NONE:
            raise error_for(body["error_code"], body["error_message"] or "describe cluster")
        brokers = sorted(BrokerNode(b["broker_id"], b["host"], b["port"], b["rack"])
                         for b in body["brokers"])  # fmt: skip
        return ClusterDescription(body["cluster_id"], body["controller_id"], brokers)

    # ------------------------------------------------------------ configs
    def describe_configs(
        self,
        resources: Iterable[ConfigResource | tuple[ConfigResourceType | int | str, str]],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[ConfigResource, dict[str, ConfigEntry] | MiniKafkaError]:
        """Every config of each resource with its value and source (Kafka's
        describeConfigs); a failed resource raises, or maps to its error."""
        wanted = [_resource(r) for r in resources]
        timeout = self._timeout(timeout_ms)

        def request(group: list[ConfigResource]) -> Body:
            return {"resources": [{"resource_type": int(r.type), "resource_name": r.name,
                                   "configuration_keys": None} for r in group],
                    "include_synonyms": include_synonyms,
                    "include_documentation": include_documentation}  # fmt: skip

        out: dict[ConfigResource, dict[str, ConfigEntry] | MiniKafkaError] = {}
        for body in self._config_requests(ApiKey.DESCRIBE_CONFIGS, wanted, request, timeout):
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
        return _raise_first(out, raise_on_error)

    def alter_configs(
        self,
        configs: Mapping[ConfigResource | tuple[Any, str], Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[ConfigResource, MiniKafkaError | None]:
        """Replace each resource's config overrides by the given set (AlterConfigs:
        a config not listed returns to its default; prefer
        :meth:`incremental_alter_configs`)."""
        wanted = {_resource(r): dict(c) for r, c in configs.items()}
        for resource, pairs in wanted.items():
            for name, value in pairs.items():
                _check_config_pair(str(resource), name, value)
        timeout = self._timeout(timeout_ms)

        def request(group: list[ConfigResource]) -> Body:
            return {"resources": [{"resource_type": int(r.type), "resource_name": r.name,
                                   "configs": [{"name": k, "value": v}
                                               for k, v in wanted[r].items()]}
                                  for r in group],
                    "validate_only": validate_only}  # fmt: skip

        return self._alter_results(
            self._config_requests(ApiKey.ALTER_CONFIGS, list(wanted), request, timeout),
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
        """Apply SET / DELETE / APPEND / SUBTRACT changes to each resource's configs
        (IncrementalAlterConfigs); configs not named are left as they are."""
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
                _check_config_pair(str(resource), op.name, value)
                checked.append(AlterConfigOp(op.name, value, kind))
            wanted[resource] = checked
        timeout = self._timeout(timeout_ms)

        def request(group: list[ConfigResource]) -> Body:
            return {"resources": [{"resource_type": int(r.type), "resource_name": r.name,
                                   "configs": [{"name": op.name, "value": op.value,
                                                "config_operation": int(op.op)}
                                               for op in wanted[r]]}
                                  for r in group],
                    "validate_only": validate_only}  # fmt: skip

        return self._alter_results(
            self._config_requests(ApiKey.INCREMENTAL_ALTER_CONFIGS, list(wanted), request,
                                  timeout),
            "alter configs of", raise_on_error)  # fmt: skip

    def _config_requests(
        self,
        api: ApiKey,
        resources: list[ConfigResource],
        request: Callable[[list[ConfigResource]], Body],
        timeout_ms: int,
    ) -> list[dict[str, Any]]:
        """One request per broker resource (to that broker), one for all the others."""
        out = []
        others = [r for r in resources if r.type != ConfigResourceType.BROKER or not r.name]
        if others:
            out.append(self._net.request(None, api, request(others), timeout_ms))
        brokers = [r for r in resources if r.type == ConfigResourceType.BROKER and r.name]
        if brokers and self._metadata.version == 0:
            self._net.refresh_metadata([], timeout_ms)
        for r in brokers:
            try:
                node = int(r.name)
            except ValueError:
                raise ValueError(f"broker resource name must be a broker id, got "
                                 f"{r.name!r}") from None
            out.append(self._net.request(node, api, request([r]), timeout_ms))
        return out

    @staticmethod
    def _alter_results(
        bodies: list[dict[str, Any]], what: str, raise_on_error: bool
    ) -> dict[ConfigResource, MiniKafkaError | None]:
        out: dict[ConfigResource, MiniKafkaError | None] = {}
        for body in bodies:
            for r in body["responses"]:
                resource = ConfigResource(_resource_type(r["resource_type"]), r["resource_name"])
                out[resource] = None if r["error_code"] == ErrorCode.NONE else error_for(
                    r["error_code"],
                    f"{what} {resource}: {r['error_message'] or ''}".rstrip(": "))
        return _raise_first(out, raise_on_error)

    # ------------------------------------------------------------ records
    def delete_records(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[TopicPartition, int | MiniKafkaError]:
        """Delete every record before ``offsets[tp]`` (-1: the high watermark) in each
        partition; returns the new low watermark (log start offset) of each."""
        wanted: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            if not isinstance(offset, int) or offset < -1:
                raise ValueError(f"{tp}: offset must be an int >= -1, got {offset!r}")
            wanted[tp] = offset
        timeout = self._timeout(timeout_ms)
        out: dict[TopicPartition, int | MiniKafkaError] = {}
        pending = dict(wanted)
        deadline = time.monotonic() + timeout / 1000
        while pending:
            remaining = max(1, int((deadline - time.monotonic()) * 1000))
            self._net.refresh_metadata(sorted({tp.topic for tp in pending}), remaining,
                                       allow_auto_topic_creation=False)
            by_leader: dict[int, dict[str, list[dict[str, int]]]] = {}
            for tp, offset in pending.items():
                leader = self._metadata.leader_for(tp)
                if leader is None:
                    code = self._metadata.topic_error(tp.topic) or (
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        if self._metadata.partition(tp) is None else ErrorCode.LEADER_NOT_AVAILABLE)
                    out[tp] = error_for(code, f"delete records of {tp}")
                    continue
                by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "offset": offset})
            retry: dict[TopicPartition, int] = {}
            for node, topics in by_leader.items():
                body = self._net.request(node, ApiKey.DELETE_RECORDS, {
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                    "timeout_ms": remaining}, remaining)  # fmt: skip
                for t in body["topics"]:
                    for p in t["partitions"]:
                        tp = TopicPartition(t["name"], p["partition_index"])
                        if tp not in pending:
                            continue
                        code = p["error_code"]
                        if code == ErrorCode.NONE:
                            out[tp] = p["low_watermark"]
                            continue
                        error = error_for(code, f"delete records of {tp}")
                        out[tp] = error
                        if error.retriable and code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                            retry[tp] = pending[tp]
            pending = retry
            if pending:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.1)
        for tp in wanted:
            out.setdefault(tp, RequestTimedOutError(f"delete records of {tp}: no answer"))
        return _raise_first(out, raise_on_error)

    # ------------------------------------------------------------ groups
    def list_groups(
        self, *, states: Iterable[str] | None = None, timeout_ms: int | None = None
    ) -> list[GroupListing]:
        """Groups of every live broker (a broker that fails to answer is skipped);
        ``states`` keeps those in one of the states (Kafka's names: Stable, Empty,
        PreparingRebalance, CompletingRebalance, Dead)."""
        timeout = self._timeout(timeout_ms)
        wanted = None if states is None else sorted(set(states))
        self._net.refresh_metadata([], timeout)
        out: dict[str, GroupListing] = {}
        for broker in self._metadata.brokers():
            try:
                body = self._net.request(broker.node_id, ApiKey.LIST_GROUPS,
                                         {"states_filter": wanted or []}, timeout)
            except MiniKafkaError:
                continue
            for g in body["groups"]:
                if wanted is not None and g["group_state"] not in wanted:
                    continue  # also drops groups of a broker below v4 (no state known)
                out[g["group_id"]] = GroupListing(g["group_id"], g["protocol_type"],
                                                  g["group_state"], broker.node_id)
        return sorted(out.values())

    def describe_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, GroupDescription]:
        out = {}
        for group_id in group_ids:
            node, _, body = self._group_request(
                group_id, ApiKey.DESCRIBE_GROUPS, {"groups": [group_id]},
                lambda b, v: b["groups"][0]["error_code"] if b["groups"] else 0, timeout_ms)
            g = body["groups"][0]
            members = [
                MemberDescription(m["member_id"], m["group_instance_id"], m["client_id"],
                                  m["client_host"], _assigned(g["protocol_type"],
                                                              m["member_assignment"]))
                for m in g["members"]
            ]  # fmt: skip
            out[group_id] = GroupDescription(group_id, g["group_state"], g["protocol_type"],
                                             g["protocol_data"], members, node)
        return out

    def delete_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:  # fmt: skip
        """Delete empty groups and their committed offsets (NON_EMPTY_GROUP while a
        member is in it, GROUP_ID_NOT_FOUND for an unknown group)."""
        out: dict[str, MiniKafkaError | None] = {}
        for group_id in group_ids:
            try:
                _, _, body = self._group_request(
                    group_id, ApiKey.DELETE_GROUPS, {"groups_names": [group_id]},
                    lambda b, v: _retriable_only(b["results"][0]["error_code"]
                                                 if b["results"] else 0), timeout_ms)
            except MiniKafkaError as e:
                out[group_id] = e
                continue
            result = next((r for r in body["results"] if r["group_id"] == group_id), None)
            code = ErrorCode.UNKNOWN_SERVER_ERROR if result is None else result["error_code"]
            out[group_id] = (None if code == ErrorCode.NONE
                             else error_for(code, f"delete group {group_id!r}"))
        return _raise_first(out, raise_on_error)

    def list_group_offsets(
        self, group_id: str, *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, GroupOffset]:
        """Committed offsets of ``group_id`` with each partition's high watermark."""
        _, version, body = self._group_request(
            group_id, ApiKey.OFFSET_FETCH,
            lambda v: offset_fetch_request(group_id, None, v, require_stable=False),
            lambda b, v: read_offset_fetch(b, v, group_id)[1], timeout_ms)
        result, _ = read_offset_fetch(body, version, group_id)
        committed = {tp: (om.offset, om.metadata) for tp, (om, code) in result.items()
                     if om is not None and not code}  # fmt: skip
        marks = self._high_watermarks(committed, self._timeout(timeout_ms))
        return {tp: GroupOffset(off, marks.get(tp, -1), meta)
                for tp, (off, meta) in sorted(committed.items())}  # fmt: skip

    def _group_request(
        self,
        group_id: str,
        api: ApiKey,
        body: Body,
        error_of: Callable[[dict[str, Any], int], int],
        timeout_ms: int | None,
    ) -> tuple[int, int, dict[str, Any]]:
        """(coordinator node, version, answer) with coordinator errors retried until
        the timeout; ``error_of(answer, version)`` is the answer's group error code."""
        deadline = time.monotonic() + self._timeout(timeout_ms) / 1000
        last = "no answer"
        while time.monotonic() < deadline:
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            version, found_body = self._net.request_with_version(
                None, ApiKey.FIND_COORDINATOR, lambda v: find_coordinator_request(group_id, v),
                remaining)  # fmt: skip
            found = read_find_coordinator(found_body, version, group_id)
            code = found.error_code
            message = found.error_message
            if code == ErrorCode.NONE:
                node = found.node_id
                if self._metadata.broker(node) is None:
                    self._net.refresh_metadata([], remaining)
                version, answer = self._net.request_with_version(node, api, body, remaining)
                code = error_of(answer, version)
                if code == ErrorCode.NONE:
                    return node, version, answer
            error = error_for(code, f"group {group_id!r}: {message or ''}".rstrip(": "))
            if not error.retriable:
                raise error
            last = error.message
            time.sleep(0.1)
        raise RequestTimedOutError(f"group {group_id!r}: coordinator not ready ({last})")

    def _high_watermarks(
        self, partitions: Iterable[TopicPartition], timeout_ms: int
    ) -> dict[TopicPartition, int]:
        """Latest offsets (the high watermark) from each leader; missing on errors."""
        wanted = list(partitions)
        if not wanted:
            return {}
        self._net.refresh_metadata(sorted({tp.topic for tp in wanted}), timeout_ms,
                                   allow_auto_topic_creation=False)
        by_leader: dict[int, dict[str, list[dict[str, int]]]] = {}
        for tp in wanted:
            leader = self._metadata.leader_for(tp)
            if leader is not None:
                by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "timestamp": -1})
        out = {}
        for node, topics in by_leader.items():
            try:
                body = self._net.request(node, ApiKey.LIST_OFFSETS, {"topics": [
                    {"name": t, "partitions": ps} for t, ps in topics.items()]}, timeout_ms)
            except MiniKafkaError:
                continue
            for t in body["topics"]:
                for p in t["partitions"]:
                    if p["error_code"] == ErrorCode.NONE:
                        out[TopicPartition(t["name"], p["partition_index"])] = p["offset"]
        return out

    # ------------------------------------------------------------ helpers
    def _timeout(self, timeout_ms: int | None) -> int:
        t = self.request_timeout_ms if timeout_ms is None else timeout_ms
        if not isinstance(t, int) or t <= 0:
            raise ValueError(f"timeout_ms must be a positive int, got {t!r}")
        return t

    def _to_controller(
        self, api: ApiKey, body: dict[str, Any], timeout_ms: int, results_field: str
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_ms / 1000
        for attempt in range(2):
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            if self._metadata.version == 0 or attempt:
                self._net.refresh_metadata([], remaining)
            controller = self._metadata.controller_id
            node = controller if self._metadata.broker(controller) is not None else None
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            response = self._net.request(node, api, body, remaining)
            codes = [t["error_code"] for t in response[results_field]]
            if ErrorCode.NOT_CONTROLLER not in codes:
                return response
        return response

    @staticmethod
    def _results(
        results: list[dict[str, Any]], what: str, raise_on_error: bool
    ) -> dict[str, MiniKafkaError | None]:
        out: dict[str, MiniKafkaError | None] = {}
        for r in results:
            code = r["error_code"]
            out[r["name"]] = (
                None
                if code == ErrorCode.NONE
                else error_for(
                    code, f"{what} {r['name']!r}: {r['error_message'] or ''}".rstrip(": ")
                )
            )
        return _raise_first(out, raise_on_error)

    def close(self) -> None:
        self._net.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _raise_first(out: dict[K, V], raise_on_error: bool) -> dict[K, V]:
    if raise_on_error:
        for value in out.values():
            if isinstance(value, MiniKafkaError):
                raise value
    return out


def _retriable_only(code: int) -> int:
    """A group answer's code for the retry loop: per-group verdicts are results."""
    return code if error_for(code).retriable else 0


def _resource(r: ConfigResource | tuple[Any, str]) -> ConfigResource:
    kind, name = r
    if not isinstance(name, str):
        raise TypeError(f"config resource name must be a str, got {type(name).__name__}")
    return ConfigResource(_resource_type(kind), name)


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


def _check_config_pair(where: str, name: Any, value: Any) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(f"{where}: config names must be non-empty str, got {name!r}")
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{where}: config {name!r} value must be a str or None, got "
                        f"{type(value).__name__} (Kafka configs are strings)")


def _assigned(protocol_type: str, data: bytes) -> tuple[TopicPartition, ...]:
    if protocol_type != PROTOCOL_TYPE or not data:
        return ()
    try:
        return decode_assignment(data).partitions
    except GroupProtocolError:
        return ()
