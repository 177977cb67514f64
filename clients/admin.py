"""Admin client: create/delete/list/describe topics, describe the cluster, inspect groups.

Requests (all v0, shapes in :mod:`clients.protocol.registry`): CreateTopics and DeleteTopics go to
the controller named by the last metadata (any broker if it is not a known broker; the
broker forwards or answers NOT_CONTROLLER, which is retried once after a metadata
refresh); list/describe use Metadata.  Every call blocks at most its ``timeout_ms``
(default ``request_timeout_ms``).

Groups: ``list_groups`` asks every broker (each knows the groups it coordinates) and
merges; ``describe_groups`` and ``list_group_offsets`` ask each group's coordinator
(FindCoordinator first; COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS / NOT_COORDINATOR
retried until the timeout).  Member assignments of ``consumer`` groups are decoded
(:mod:`clients.consumer.group_protocol`); offsets come with the partition's high watermark
(ListOffsets latest, from each leader) so :attr:`GroupOffset.lag` is HW - committed.

Per-topic failures are raised as the matching :class:`~clients.protocol.errors.MiniKafkaError`
(code from the broker, message naming the topic) after all topics were processed;
pass ``raise_on_error=False`` to get ``{topic: error or None}`` instead.

Costs: one round trip per call (plus a metadata refresh for the controller).  Thread
safety: none; one thread per Admin.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

from clients.consumer.group_protocol import PROTOCOL_TYPE, GroupProtocolError, decode_assignment
from clients.network.cluster_metadata import ClusterMetadata, parse_bootstrap
from clients.network.connection import NodeConnections
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import (
    ErrorCode,
    InvalidConfigError,
    MiniKafkaError,
    RequestTimedOutError,
    error_for,
)
from clients.protocol.topics import TopicPartition, validate_topic_name
from clients.types import (
    ClusterDescription,
    GroupDescription,
    GroupListing,
    GroupOffset,
    MemberDescription,
    NewTopic,
    PartitionInfo,
    TopicDescription,
)

__all__ = ["Admin"]


class Admin:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str | None = None,
        request_timeout_ms: int = 30_000,
    ) -> None:
        if not isinstance(request_timeout_ms, int) or request_timeout_ms <= 0:
            raise InvalidConfigError(f"request_timeout_ms must be > 0, got {request_timeout_ms!r}")
        self.client_id = client_id or f"admin-{os.getpid()}-{id(self):x}"
        self.request_timeout_ms = request_timeout_ms
        self._metadata = ClusterMetadata()
        self._net = NodeConnections(
            parse_bootstrap(bootstrap_servers), self._metadata, client_id=self.client_id,
            request_timeout_ms=request_timeout_ms,
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
            if t.num_partitions == 0 or t.num_partitions < -1:
                raise ValueError(f"{t.name}: num_partitions must be > 0 or -1")
            if t.replication_factor == 0 or t.replication_factor < -1:
                raise ValueError(f"{t.name}: replication_factor must be > 0 or -1")
        timeout = self._timeout(timeout_ms)
        body = {
            "topics": [
                {"name": t.name, "num_partitions": t.num_partitions,
                 "replication_factor": t.replication_factor, "configs": dict(t.configs or {})}
                for t in topics
            ],
            "timeout_ms": timeout,
            "validate_only": validate_only,
        }  # fmt: skip
        response = self._to_controller(ApiKey.CREATE_TOPICS, body, timeout)
        return self._results(response["topics"], "create", raise_on_error)

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
        response = self._to_controller(ApiKey.DELETE_TOPICS, body, timeout)
        return self._results(response["responses"], "delete", raise_on_error)

    def list_topics(self, *, timeout_ms: int | None = None) -> list[str]:
        body = self._net.refresh_metadata(None, self._timeout(timeout_ms))
        return sorted(t["name"] for t in body["topics"] if t["error_code"] == 0)

    def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions with leader, replicas and ISR; unknown topics raise."""
        wanted = None if names is None else [validate_topic_name(n) for n in names]
        body = self._net.refresh_metadata(wanted, self._timeout(timeout_ms))
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
            out[t["name"]] = TopicDescription(t["name"], parts, t["is_internal"],
                                              dict(t["configs"]))
        return out

    def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        self._net.refresh_metadata([], self._timeout(timeout_ms))
        md = self._metadata
        return ClusterDescription(md.cluster_id, md.controller_id, md.brokers())

    # ------------------------------------------------------------ groups
    def list_groups(self, *, timeout_ms: int | None = None) -> list[GroupListing]:
        """Groups of every live broker (a broker that fails to answer is skipped)."""
        timeout = self._timeout(timeout_ms)
        self._net.refresh_metadata([], timeout)
        out: dict[str, GroupListing] = {}
        for broker in self._metadata.brokers():
            try:
                body = self._net.request(broker.node_id, ApiKey.LIST_GROUPS, {}, timeout)
            except MiniKafkaError:
                continue
            for g in body["groups"]:
                out[g["group_id"]] = GroupListing(g["group_id"], g["protocol_type"],
                                                  g["group_state"], broker.node_id)
        return sorted(out.values())

    def describe_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, GroupDescription]:
        out = {}
        for group_id in group_ids:
            node, body = self._group_request(group_id, ApiKey.DESCRIBE_GROUPS,
                                             {"groups": [group_id]}, timeout_ms)
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

    def list_group_offsets(
        self, group_id: str, *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, GroupOffset]:
        """Committed offsets of ``group_id`` with each partition's high watermark."""
        _, body = self._group_request(group_id, ApiKey.OFFSET_FETCH,
                                      {"group_id": group_id, "topics": None}, timeout_ms)
        committed = {
            TopicPartition(t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"])
            for t in body["topics"] for p in t["partitions"]
        }  # fmt: skip
        marks = self._high_watermarks(committed, self._timeout(timeout_ms))
        return {tp: GroupOffset(off, marks.get(tp, -1), meta)
                for tp, (off, meta) in sorted(committed.items())}  # fmt: skip

    def _group_request(
        self, group_id: str, api: ApiKey, body: dict[str, Any], timeout_ms: int | None
    ) -> tuple[int, dict[str, Any]]:
        """(coordinator node, answer) with coordinator errors retried until the timeout."""
        deadline = time.monotonic() + self._timeout(timeout_ms) / 1000
        last = "no answer"
        while time.monotonic() < deadline:
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            found = self._net.request(None, ApiKey.FIND_COORDINATOR,
                                      {"key": group_id, "key_type": 0}, remaining)
            code = found["error_code"]
            if code == ErrorCode.NONE:
                node = found["node_id"]
                if self._metadata.broker(node) is None:
                    self._net.refresh_metadata([], remaining)
                answer = self._net.request(node, api, body, remaining)
                groups = answer.get("groups") or [answer]
                code = groups[0].get("error_code", ErrorCode.NONE)
                if code == ErrorCode.NONE:
                    return node, answer
            error = error_for(code, f"group {group_id!r}")
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
        self._net.refresh_metadata(sorted({tp.topic for tp in wanted}), timeout_ms)
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

    def _to_controller(self, api: ApiKey, body: dict[str, Any], timeout_ms: int) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_ms / 1000
        for attempt in range(2):
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            if self._metadata.version == 0 or attempt:
                self._net.refresh_metadata([], remaining)
            controller = self._metadata.controller_id
            node = controller if self._metadata.broker(controller) is not None else None
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            response = self._net.request(node, api, body, remaining)
            results = response.get("topics") or response.get("responses") or []
            codes = [t.get("error_code") for t in results]
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
                    code, f"{what} topic {r['name']!r}: {r.get('error_message') or ''}".rstrip(": ")
                )
            )
        failed = [e for e in out.values() if e is not None]
        if failed and raise_on_error:
            raise failed[0]
        return out

    def close(self) -> None:
        self._net.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _assigned(protocol_type: str, data: bytes) -> tuple[TopicPartition, ...]:
    if protocol_type != PROTOCOL_TYPE or not data:
        return ()
    try:
        return decode_assignment(data).partitions
    except GroupProtocolError:
        return ()
