"""Committed offsets of the group coordinator: OffsetCommit and OffsetFetch (Kafka's
offset path of GroupCoordinator and GroupMetadataManager; TxnOffsetCommit belongs here).

:class:`GroupOffsets` is the coordinator's offsets room:

- uses the group cache (:class:`~broker.group.metadata_manager.GroupMetadataManager`:
  the coordinator and member checks, new groups, :meth:`store_offsets` which writes the
  offsets and then caches them) and the member sessions (a member's commit is its
  heartbeat), both given at construction with the config, the clock and
  ``partition_exists(topic, index)`` (what a commit's partitions are checked against);
- is called by the coordinator: :meth:`commit_offsets`, :meth:`fetch_offsets`.

OffsetCommit checks, in Kafka's order:
- the coordinator owns the group (NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS);
- generation -1 with an empty member id (a standalone consumer's simple commit) is
  allowed only when the group does not exist (it is created, Empty) or is Empty;
  for a group with members it is UNKNOWN_MEMBER_ID;
- otherwise the member must exist (UNKNOWN_MEMBER_ID; FENCED_INSTANCE_ID for a replaced
  static instance), the generation must be the group's (ILLEGAL_GENERATION; a group
  that does not exist gives ILLEGAL_GENERATION too), and the group must not be
  CompletingRebalance (REBALANCE_IN_PROGRESS).  Commits during PreparingRebalance with
  the current generation are allowed (so members can commit while revoking).
- per partition: metadata longer than ``offset_metadata_max_bytes`` ->
  OFFSET_METADATA_TOO_LARGE; a negative offset -> INVALID_COMMIT_OFFSET_SIZE*; a topic
  or partition the cluster does not know -> UNKNOWN_TOPIC_OR_PARTITION.
The accepted offsets are appended as one batch to the group's offsets partition and
answered once the ISR has them (acks=all); a failed write maps to NOT_COORDINATOR /
COORDINATOR_NOT_AVAILABLE (see :func:`store_error`).  Only then is the in-memory cache
updated (and only by a commit written later in the log than the cached one).  A commit
by a member also counts as its heartbeat.

OffsetFetch answers from the cache, one group at a time: offset -1, metadata "" (and no
error) for a partition without a committed offset; ``topics`` null means every partition
the group committed.

(* Kafka accepts any offset; a negative one is always a client bug here.)

Costs: commit O(partitions) plus one append; fetch O(partitions asked or committed).
Not thread-safe: the broker's event loop (or a test's thread).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from broker.group.members import Group
from broker.group.metadata import OffsetCommitValue
from broker.group.metadata_manager import GroupMetadataManager
from broker.group.protocol import Error, GroupCoordinatorConfig, store_error
from broker.group.sessions import MemberSessions
from broker.group.state import GroupState
from broker.requests.respond import Respond
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetFetchRequestTopic,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopicPartition,
)
from clients.protocol.topics import TopicPartition, topic_name_error
from timer.clock import Clock

_S = GroupState


class GroupOffsets:
    """OffsetCommit and OffsetFetch over the group cache; see the module docstring."""

    def __init__(self, config: GroupCoordinatorConfig, clock: Clock,
                 manager: GroupMetadataManager, sessions: MemberSessions,
                 partition_exists: Callable[[str, int], bool]) -> None:
        self.config = config
        self.clock = clock
        self.manager = manager
        self.sessions = sessions
        self.partition_exists = partition_exists

    def _commit_group_error(self, body: OffsetCommitRequest) -> tuple[Group | None, Error | None]:
        group_id, generation = body["group_id"], body["generation_id"]
        simple = (generation < 0 and not body["member_id"]
                  and body.get("group_instance_id") is None)
        error = self.manager.coordinator_error(group_id)
        if error is not None:
            return None, error
        group = self.manager.groups.get(group_id)
        if group is None:
            if not simple:
                return None, (ErrorCode.ILLEGAL_GENERATION, f"group {group_id!r} has no "
                              f"generation {generation}")
            return self.manager.add_group(group_id), None
        if simple:
            if group.is_(_S.EMPTY):
                return group, None
            return group, (ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has members: "
                           "commits need a member id and generation")
        group, error = self.manager.member_request(body)
        if error is None and group is not None and group.is_(_S.COMPLETING_REBALANCE):
            error = ErrorCode.REBALANCE_IN_PROGRESS, "the group is completing a rebalance"
        if error is None and group is not None:
            self.sessions.keep_alive(group, group.members[body["member_id"]])
        return group, error

    def commit_offsets(self, body: OffsetCommitRequest,
                       respond: Respond[OffsetCommitResponse]) -> None:
        """OffsetCommit: ``respond`` gets the answer once the accepted offsets are
        written (at once when none is)."""
        group, error = self._commit_group_error(body)
        now = self.clock.now_ms()
        max_metadata = self.config.offset_metadata_max_bytes
        results: list[tuple[str, OffsetCommitResponsePartition]] = []
        accepted: list[tuple[TopicPartition, OffsetCommitValue,
                             OffsetCommitResponsePartition]] = []
        for topic in body["topics"]:
            for p in topic["partitions"]:
                result: OffsetCommitResponsePartition = {
                    "partition_index": p["partition_index"], "error_code": 0,
                    "error_message": None}
                results.append((topic["name"], result))
                code, message = error or (ErrorCode.NONE, None)
                metadata = p.get("committed_metadata")
                if code != ErrorCode.NONE:
                    pass
                elif metadata is not None and len(metadata.encode()) > max_metadata:
                    code, message = (ErrorCode.OFFSET_METADATA_TOO_LARGE,
                                     f"metadata is longer than {max_metadata} bytes")
                elif p["committed_offset"] < 0:
                    code, message = (ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
                                     f"offset {p['committed_offset']} is negative")
                elif topic_name_error(topic["name"]) is not None or not \
                        self.partition_exists(topic["name"], p["partition_index"]):
                    code, message = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown partition "
                                     f"{topic['name']}-{p['partition_index']}")
                if code != ErrorCode.NONE:
                    result.update({"error_code": int(code), "error_message": message})
                    continue
                value = OffsetCommitValue(p["committed_offset"], p["committed_leader_epoch"],
                                          metadata, now)
                accepted.append((TopicPartition(topic["name"], p["partition_index"]), value,
                                 result))

        def answer() -> None:
            by_topic: dict[str, list[OffsetCommitResponsePartition]] = {}
            for name, result in results:
                by_topic.setdefault(name, []).append(result)
            respond({"topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})

        if group is None or not accepted:
            answer()
            return

        def stored(code: ErrorCode) -> None:
            mapped = store_error(code)
            if mapped != ErrorCode.NONE:
                for _tp, _value, result in accepted:
                    result.update({"error_code": int(mapped), "error_message":
                                   f"write failed: {ErrorCode(code).name}"})
            answer()

        self.manager.store_offsets(group, [(tp, value) for tp, value, _ in accepted], stored)

    def fetch_offsets(self, group_id: str,
                      wanted: Sequence[OffsetFetchRequestTopic] | None
                      ) -> tuple[ErrorCode, list[OffsetFetchResponseTopic]]:
        """One group's committed offsets: ``(group error, topics)``.  ``wanted`` is
        OffsetFetch's topic list (``name``, ``partition_indexes``), None for every
        partition the group has offsets for.  A partition without an offset: -1 and
        metadata ""."""
        error = self.manager.coordinator_error(group_id)
        if error is not None:
            return error[0], []
        group = self.manager.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        pairs = (sorted(offsets) if wanted is None else
                 [(t["name"], i) for t in wanted for i in t["partition_indexes"]])
        by_topic: dict[str, list[OffsetFetchResponseTopicPartition]] = {}
        for topic, index in pairs:
            found = offsets.get(TopicPartition(topic, index))
            by_topic.setdefault(topic, []).append({
                "partition_index": index, "error_code": 0, "error_message": None,
                "committed_offset": found.offset if found else -1,
                "committed_leader_epoch": found.leader_epoch if found else -1,
                "metadata": (found.metadata or "") if found else ""})
        return ErrorCode.NONE, [{"name": n, "partitions": ps} for n, ps in by_topic.items()]
