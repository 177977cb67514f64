"""Offset operations of :class:`~clients.admin.Admin`: look partitions' offsets up by time
(Kafka's ``listOffsets``), set a group's committed offsets (``alterConsumerGroupOffsets``)
and delete some (``deleteConsumerGroupOffsets``).

Contract: ``list_offsets`` takes ``{partition: spec}`` with spec ``LATEST`` (-1, the high
watermark), ``EARLIEST`` (-2, the log start offset) or a timestamp in ms (>= 0: the first
record stamped at or after it; offset -1 and timestamp -1 when there is none) and sends
ListOffsets to each partition's leader (from a metadata refresh, no auto-creation) with
``isolation_level`` 0 (read_uncommitted) or 1 (read_committed: the last stable offset
for LATEST); a partition whose leader is unknown maps to the metadata's error
(UNKNOWN_TOPIC_OR_PARTITION / LEADER_NOT_AVAILABLE), a leader that answers an error to
that error.  ``alter_group_offsets`` commits the given offsets for the group as a
*simple* commit (OffsetCommit with generation -1 and no member, to the group's
coordinator): the broker accepts it only while the group is Empty or does not exist
(Kafka's rule; a group with members answers UNKNOWN_MEMBER_ID); offsets must be >= 0.
``delete_group_offsets`` sends OffsetDelete to the coordinator: a group-level error
(GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP while a group of a protocol type other than
``consumer`` has members, an authorization failure) is raised, coordinator errors
retried as every group request is
(:meth:`~clients.admin.groups.GroupAdmin.group_request`); of a consumer group with
members, partitions of a topic the members subscribe to answer GROUP_SUBSCRIBED_TO_TOPIC
(its message says so) and the others are deleted (Kafka's rule).
Per-partition failures follow :func:`~clients.admin.requests.raise_first`.

Costs: a metadata refresh plus one round trip per leader (``list_offsets``); two round
trips (FindCoordinator, OffsetCommit) for ``alter_group_offsets``.  Thread-safety: none
(one caller thread, as the Admin).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from clients.admin.groups import GroupAdmin
from clients.admin.requests import AdminRequests, raise_first
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, error_for
from clients.protocol.message_types import (
    ListOffsetsRequest,
    ListOffsetsRequestPartition,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
)
from clients.protocol.topics import TopicPartition
from clients.types import OffsetAndTimestamp

LATEST = -1
EARLIEST = -2


class OffsetAdmin:
    """ListOffsets by spec; simple OffsetCommits and OffsetDelete on behalf of a group."""

    def __init__(self, requests: AdminRequests, groups: GroupAdmin) -> None:
        self._requests = requests
        self._groups = groups
        self._metadata = requests.metadata

    def list_offsets(
        self,
        specs: Mapping[TopicPartition, int],
        *,
        isolation_level: int = 0,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[TopicPartition, OffsetAndTimestamp | MiniKafkaError]:
        wanted: dict[TopicPartition, int] = {}
        for tp, spec in specs.items():
            tp = TopicPartition(*tp)
            if not isinstance(spec, int) or spec < EARLIEST:
                raise ValueError(f"{tp}: offset spec must be -1 (latest), -2 (earliest) or "
                                 f"a timestamp in ms >= 0, got {spec!r}")
            wanted[tp] = spec
        if isolation_level not in (0, 1):
            raise ValueError(f"isolation_level must be 0 or 1, got {isolation_level!r}")
        timeout = self._requests.timeout(timeout_ms)
        out: dict[TopicPartition, OffsetAndTimestamp | MiniKafkaError] = {}
        if not wanted:
            return out
        self._requests.refresh_metadata(sorted({tp.topic for tp in wanted}), timeout,
                                        allow_auto_topic_creation=False)
        by_leader: dict[int, dict[str, list[ListOffsetsRequestPartition]]] = {}
        for tp, spec in wanted.items():
            leader = self._metadata.leader_for(tp)
            if leader is None:
                code: int = self._metadata.topic_error(tp.topic) or (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    if self._metadata.partition(tp) is None else ErrorCode.LEADER_NOT_AVAILABLE)
                out[tp] = error_for(code, f"list offsets of {tp}")
                continue
            by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "timestamp": spec,
                 "current_leader_epoch": -1})  # fmt: skip
        for node, topics in by_leader.items():
            request: ListOffsetsRequest = {
                "replica_id": -1, "isolation_level": isolation_level,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            body = self._requests.request(node, ApiKey.LIST_OFFSETS, request, timeout,
                                          ListOffsetsResponse)
            for t in body["topics"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    if tp not in wanted:
                        continue
                    code = p["error_code"]
                    out[tp] = (OffsetAndTimestamp(p["offset"], p["timestamp"],
                                                  p.get("leader_epoch", -1))
                               if code == ErrorCode.NONE
                               else error_for(code, f"list offsets of {tp}"))
        for tp in wanted:
            out.setdefault(tp, error_for(ErrorCode.UNKNOWN_SERVER_ERROR,
                                         f"list offsets of {tp}: not in the leader's answer"))
        return raise_first(out, raise_on_error)

    def alter_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int],
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[TopicPartition, MiniKafkaError | None]:
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            if not isinstance(offset, int) or offset < 0:
                raise ValueError(f"{tp}: offset must be an int >= 0, got {offset!r}")
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "committed_offset": offset,
                 "committed_leader_epoch": -1, "committed_metadata": ""})  # fmt: skip
        out: dict[TopicPartition, MiniKafkaError | None] = {}
        if not by_topic:
            return out
        request: OffsetCommitRequest = {
            "group_id": group_id, "generation_id": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
        _, _, body = self._groups.group_request(
            group_id, ApiKey.OFFSET_COMMIT, request, OffsetCommitResponse,
            lambda b, v: _coordinator_code(b), timeout_ms)
        for t in body["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                code = p["error_code"]
                out[tp] = None if code == ErrorCode.NONE else error_for(
                    code, f"commit offset of {tp} for group {group_id!r}: "
                          f"{p.get('error_message') or ''}".rstrip(": "))
        return raise_first(out, raise_on_error)

    def delete_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[TopicPartition, MiniKafkaError | None]:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            tp = TopicPartition(*tp)
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics: list[OffsetDeleteRequestTopic] = [
            {"name": t, "partitions": [{"partition_index": p} for p in sorted(set(ps))]}
            for t, ps in by_topic.items()]
        request: OffsetDeleteRequest = {"group_id": group_id, "topics": topics}
        _, _, body = self._groups.group_request(
            group_id, ApiKey.OFFSET_DELETE, request, OffsetDeleteResponse,
            lambda b, v: b["error_code"], timeout_ms)
        out: dict[TopicPartition, MiniKafkaError | None] = {}
        for t in body["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                code = p["error_code"]
                why = (f": the group's members subscribe to topic {tp.topic!r}"
                       if code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC else "")
                out[tp] = None if code == ErrorCode.NONE else error_for(
                    code, f"delete offset of {tp} for group {group_id!r}{why}")
        return raise_first(out, raise_on_error)


def _coordinator_code(body: OffsetCommitResponse) -> int:
    """The first retriable coordinator error of an answer (0: none; per-partition
    verdicts are results)."""
    for t in body["topics"]:
        for p in t["partitions"]:
            if p["error_code"] in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                   ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                return int(p["error_code"])
    return 0
