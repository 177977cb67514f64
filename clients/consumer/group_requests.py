"""Group API bodies whose shape depends on the version: built and read in one place.

The consumer (coordinator channel, heartbeat thread, offset committer) and the admin
client send these; each builder takes the version the connection chose
(:meth:`~clients.network.connection.BrokerConnection.version_for`, passed in by the
connection when the builder is given as the body), and each reader takes the version
the request went out at, so both sides of a version-dependent layout live here:

- FindCoordinator: ``key`` + ``key_type`` before v4; v4 batches ``coordinator_keys``
  and answers with ``coordinators`` (one entry per key, each with its error).
- LeaveGroup: ``member_id`` before v3 (one member); from v3 ``members`` (each with its
  group instance id, v5 a reason) and an error per member.
- OffsetFetch: ``group_id`` + ``topics`` before v8 (``topics`` null from v2: every
  partition the group has offsets for; v1 has no null); v8 batches ``groups``.  The
  top-level ``error_code`` exists from v2 (v8: per group).
- ListGroups: ``states_filter`` from v4; ``group_state`` is answered from v4 only (""
  before, which callers show as unknown).

Bodies are the generated :mod:`clients.protocol.message_types` (``FindCoordinatorRequest``
...): mypy checks every field name built or read here.  The readers the admin client
shares take the decoded body as a mapping and read it through its type.

Error text: Kafka's ``error_message`` fields where Kafka has them, else our tagged extra
(None in non-flexible versions); readers treat None and "" alike.

Costs: O(size of the body).  Thread safety: pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from clients.protocol.errors import ErrorCode, UnsupportedVersionError
from clients.protocol.message_types import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)
from clients.protocol.topics import TopicPartition
from clients.types import OffsetAndMetadata

GROUP_KEY_TYPE = 0  # FindCoordinator key_type: 0 group, 1 transaction


@dataclass(frozen=True, slots=True)
class Coordinator:
    """A FindCoordinator answer for one key: the node, or the error."""

    error_code: int
    error_message: str | None
    node_id: int
    host: str
    port: int


def find_coordinator_request(group_id: str, version: int) -> FindCoordinatorRequest:
    if version >= 4:
        return {"key_type": GROUP_KEY_TYPE, "coordinator_keys": [group_id]}
    return {"key": group_id, "key_type": GROUP_KEY_TYPE}


def read_find_coordinator(answer: Mapping[str, Any], version: int, group_id: str,
                          ) -> Coordinator:
    """The answer for ``group_id`` (v4: its entry; a missing entry is an error)."""
    body = cast(FindCoordinatorResponse, answer)  # as the connection decoded it
    if version >= 4:
        for c in body["coordinators"]:
            if c["key"] == group_id:
                return Coordinator(c["error_code"], c["error_message"] or None, c["node_id"],
                                   c["host"], c["port"])  # fmt: skip
        return Coordinator(int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                           f"FindCoordinator v{version} answer has no entry for {group_id!r}",
                           -1, "", -1)  # fmt: skip
    return Coordinator(body["error_code"], body["error_message"] or None, body["node_id"],
                       body["host"], body["port"])  # fmt: skip


def leave_group_request(group_id: str, member_id: str, group_instance_id: str | None,
                        version: int, reason: str | None = None) -> LeaveGroupRequest:
    if version >= 3:
        return {"group_id": group_id, "members": [
            {"member_id": member_id, "group_instance_id": group_instance_id,
             "reason": reason}]}  # fmt: skip
    return {"group_id": group_id, "member_id": member_id}


def read_leave_group(body: LeaveGroupResponse, version: int) -> int:
    """The first error of the answer (top level, then per member from v3)."""
    code = int(body["error_code"])
    if code == ErrorCode.NONE and version >= 3:
        code = next((int(m["error_code"]) for m in body["members"] if m["error_code"]), 0)
    return code


def offset_fetch_request(group_id: str, partitions: list[TopicPartition] | None,
                         version: int, require_stable: bool = True) -> OffsetFetchRequest:
    """Committed offsets of ``partitions`` (None: every partition with a commit)."""
    topics: list[OffsetFetchRequestTopic] | None = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    if topics is None and version < 2:
        raise UnsupportedVersionError(
            "OffsetFetch v1 cannot ask for every partition (null topics is v2+)")
    if version >= 8:
        return {"groups": [{"group_id": group_id, "topics": topics}],
                "require_stable": require_stable}  # fmt: skip
    return {"group_id": group_id, "topics": topics, "require_stable": require_stable}


def read_offset_fetch(
    answer: Mapping[str, Any], version: int, group_id: str
) -> tuple[dict[TopicPartition, tuple[OffsetAndMetadata | None, int]], int]:
    """({partition: (committed or None, partition error)}, group-level error code)."""
    body = cast(OffsetFetchResponse, answer)  # as the connection decoded it
    if version >= 8:
        group = next((g for g in body["groups"] if g["group_id"] == group_id), None)
        if group is None:
            return {}, int(ErrorCode.INVALID_REQUEST)
        topics, code = group["topics"], int(group["error_code"])
    else:
        topics, code = body["topics"], int(body["error_code"])
    out: dict[TopicPartition, tuple[OffsetAndMetadata | None, int]] = {}
    for t in topics:
        for p in t["partitions"]:
            offset = p["committed_offset"]
            committed = None if offset < 0 else OffsetAndMetadata(
                offset, p["metadata"], p["committed_leader_epoch"])
            out[TopicPartition(t["name"], p["partition_index"])] = (committed,
                                                                    int(p["error_code"]))
    return out, code
