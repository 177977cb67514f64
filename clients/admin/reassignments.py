"""Partition reassignments of :class:`~clients.admin.Admin`: AlterPartitionReassignments
and ListPartitionReassignments (KIP-455).

Contract: each call is one request to any broker (brokers forward it to the controller,
which decides).  ``alter_partition_reassignments({partition: target replicas or None})``
starts (or replaces) a move of each partition's replicas to the target, None cancels
one in flight; returns ``{partition: None or error}`` (per-partition errors follow
:func:`~clients.admin.requests.raise_first`; an error of the whole request is raised).
The move finishes later, once the target replicas are in sync;
``list_partition_reassignments`` (None: every partition) returns the partitions still
in flight as :class:`PartitionReassignment`.

Costs: one round trip per call.  Thread-safety: none (one caller thread, as the Admin).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from clients.admin.requests import AdminRequests, raise_first
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import MiniKafkaError, error_for
from clients.protocol.message_types import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsRequestTopic,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from clients.protocol.topics import TopicPartition

__all__ = ["PartitionReassignment", "ReassignmentAdmin"]


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A partition in flight: its replicas now, and the ones joining and leaving."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


class ReassignmentAdmin:
    """AlterPartitionReassignments and ListPartitionReassignments."""

    def __init__(self, requests: AdminRequests) -> None:
        self._requests = requests

    def alter_partition_reassignments(
            self, reassignments: Mapping[TopicPartition, Sequence[int] | None], *,
            timeout_ms: int | None = None,
            raise_on_error: bool = True) -> dict[TopicPartition, MiniKafkaError | None]:
        timeout = self._requests.timeout(timeout_ms)
        topics: dict[str, AlterPartitionReassignmentsRequestTopic] = {}
        for tp, replicas in reassignments.items():
            tp = TopicPartition(*tp)
            topics.setdefault(tp.topic, {"name": tp.topic, "partitions": []})[
                "partitions"].append({"partition_index": tp.partition,
                                      "replicas": None if replicas is None else list(replicas)})
        request: AlterPartitionReassignmentsRequest = {"timeout_ms": timeout,
                                                       "topics": list(topics.values())}
        body = self._requests.request(None, ApiKey.ALTER_PARTITION_REASSIGNMENTS, request,
                                      timeout, AlterPartitionReassignmentsResponse)
        if body["error_code"]:
            raise error_for(body["error_code"], body["error_message"] or "reassign partitions")
        out: dict[TopicPartition, MiniKafkaError | None] = {}
        for t in body["responses"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                out[tp] = (error_for(p["error_code"], p["error_message"] or f"reassign {tp}")
                           if p["error_code"] else None)
        return raise_first(out, raise_on_error)

    def list_partition_reassignments(
            self, partitions: Iterable[TopicPartition] | None = None, *,
            timeout_ms: int | None = None) -> dict[TopicPartition, PartitionReassignment]:
        timeout = self._requests.timeout(timeout_ms)
        by_topic: dict[str, list[int]] | None = None
        if partitions is not None:
            by_topic = {}
            for tp in partitions:
                by_topic.setdefault(tp[0], []).append(tp[1])
        request: ListPartitionReassignmentsRequest = {
            "timeout_ms": timeout, "topics": None if by_topic is None else [
                {"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}
        body = self._requests.request(None, ApiKey.LIST_PARTITION_REASSIGNMENTS, request,
                                      timeout, ListPartitionReassignmentsResponse)
        if body["error_code"]:
            raise error_for(body["error_code"], body["error_message"] or "list reassignments")
        return {TopicPartition(t["name"], p["partition_index"]): PartitionReassignment(
                    tuple(p["replicas"]), tuple(p["adding_replicas"]),
                    tuple(p["removing_replicas"]))
                for t in body["topics"] for p in t["partitions"]}
