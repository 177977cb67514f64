"""Committed offsets and group listings of the coordinator: OffsetCommit, OffsetFetch,
ListGroups, DescribeGroups (functions over a :class:`GroupCoordinator`).

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
the group committed.  ListGroups filters by state and type as Kafka does (unknown states
match nothing; every group here is of type ``classic``).

(* Kafka accepts any offset; a negative one is always a client bug here.)

Costs: commit O(partitions) plus one append; fetch O(partitions asked or committed);
list O(groups); describe O(members).  Not thread-safe: the broker's event loop.
"""

from __future__ import annotations

from broker.group.coordinator import GroupCoordinator
from broker.group.members import Body, Group, Respond
from broker.group.metadata import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from broker.group.protocol import Error, store_error
from broker.group.state import GroupState
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition, topic_name_error

_S = GroupState


def _commit_group_error(coordinator: GroupCoordinator, body: Body
                        ) -> tuple[Group | None, Error | None]:
    group_id, generation = body["group_id"], body["generation_id"]
    simple = generation < 0 and not body["member_id"] and body.get("group_instance_id") is None
    error = coordinator.coordinator_error(group_id)
    if error is not None:
        return None, error
    group = coordinator.groups.get(group_id)
    if group is None:
        if not simple:
            return None, (ErrorCode.ILLEGAL_GENERATION, f"group {group_id!r} has no "
                          f"generation {generation}")
        group = Group(group_id, coordinator.partition_for(group_id),
                      coordinator.clock.now_ms())
        coordinator.groups[group_id] = group
        return group, None
    if simple:
        if group.is_(_S.EMPTY):
            return group, None
        return group, (ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has members: "
                       "commits need a member id and generation")
    group, error = coordinator.member_request(body)
    if error is None and group is not None and group.is_(_S.COMPLETING_REBALANCE):
        error = ErrorCode.REBALANCE_IN_PROGRESS, "the group is completing a rebalance"
    if error is None and group is not None:
        member = group.members[body["member_id"]]
        coordinator.keep_alive(group, member)
    return group, error


def commit_offsets(coordinator: GroupCoordinator, body: Body, respond: Respond) -> None:
    group, error = _commit_group_error(coordinator, body)
    now = coordinator.clock.now_ms()
    max_metadata = coordinator.config.offset_metadata_max_bytes
    results: list[tuple[str, Body]] = []
    accepted: list[tuple[TopicPartition, OffsetCommitValue, Body]] = []
    for topic in body["topics"]:
        for p in topic["partitions"]:
            result: Body = {"partition_index": p["partition_index"], "error_code": 0,
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
                    coordinator.partition_exists(topic["name"], p["partition_index"]):
                code, message = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"unknown partition {topic['name']}-{p['partition_index']}")
            if code != ErrorCode.NONE:
                result.update(error_code=int(code), error_message=message)
                continue
            value = OffsetCommitValue(p["committed_offset"], p["committed_leader_epoch"],
                                      metadata, now)
            accepted.append((TopicPartition(topic["name"], p["partition_index"]), value,
                             result))

    def answer() -> None:
        by_topic: dict[str, list[Body]] = {}
        for name, result in results:
            by_topic.setdefault(name, []).append(result)
        respond({"topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})

    if group is None or not accepted:
        answer()
        return

    def stored(code: ErrorCode, base_offset: int) -> None:
        mapped = store_error(code)
        for i, (tp, value, result) in enumerate(accepted):
            if mapped != ErrorCode.NONE:
                result.update(error_code=int(mapped), error_message=f"write failed: "
                              f"{ErrorCode(code).name}")
            elif group.offset_positions.get(tp, -1) < base_offset + i:
                group.offsets[tp] = value
                group.offset_positions[tp] = base_offset + i
        answer()

    group_id = group.group_id
    records = [(encode_offset_commit_key(OffsetCommitKey(group_id, tp[0], tp[1])),
                encode_offset_commit_value(value)) for tp, value, _ in accepted]
    coordinator.log.append(group.partition, records, stored)


def fetch_offsets(coordinator: GroupCoordinator, group_id: str,
                  wanted: list[Body] | None) -> tuple[ErrorCode, list[Body]]:
    """One group's committed offsets: ``(group error, topics)``.  ``wanted`` is
    OffsetFetch's topic list (``name``, ``partition_indexes``), None for every partition
    the group has offsets for.  A partition without an offset: -1 and metadata ""."""
    error = coordinator.coordinator_error(group_id)
    if error is not None:
        return error[0], []
    group = coordinator.groups.get(group_id)
    offsets = group.offsets if group is not None else {}
    pairs = (sorted(offsets) if wanted is None else
             [(t["name"], i) for t in wanted for i in t["partition_indexes"]])
    by_topic: dict[str, list[Body]] = {}
    for topic, index in pairs:
        found = offsets.get(TopicPartition(topic, index))
        by_topic.setdefault(topic, []).append({
            "partition_index": index, "error_code": 0, "error_message": None,
            "committed_offset": found.offset if found else -1,
            "committed_leader_epoch": found.leader_epoch if found else -1,
            "metadata": (found.metadata or "") if found else ""})
    return ErrorCode.NONE, [{"name": n, "partitions": ps} for n, ps in by_topic.items()]


CLASSIC = "classic"


def list_groups(coordinator: GroupCoordinator, states: list[str],
                types: list[str]) -> Body:
    """ListGroups: the groups of this coordinator, filtered as Kafka does: by state
    (case-insensitive; an unknown state matches nothing) and by type (every group here
    is ``classic``); an empty filter matches everything."""
    wanted = {s.lower() for s in states}
    if types and CLASSIC not in {t.lower() for t in types}:
        wanted_groups: list[Group] = []
    else:
        wanted_groups = [g for g in coordinator.groups.values()
                         if not wanted or g.state.value.lower() in wanted]
    groups = [{"group_id": g.group_id, "protocol_type": g.protocol_type or "",
               "group_state": g.state.value, "group_type": CLASSIC} for g in wanted_groups]
    loading = coordinator.ownership.is_loading
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE
    return {"error_code": int(code), "groups": sorted(groups, key=lambda g: g["group_id"])}


def describe_groups(coordinator: GroupCoordinator, body: Body) -> Body:
    out = []
    for group_id in body["groups"]:
        entry: Body = {"error_code": 0, "error_message": None, "group_id": group_id,
                       "group_state": _S.DEAD.value, "protocol_type": "",
                       "protocol_data": "", "members": []}
        out.append(entry)
        error = coordinator.coordinator_error(group_id)
        group = coordinator.groups.get(group_id)
        if error is not None:
            entry.update(error_code=int(error[0]), error_message=error[1])
        elif group is not None:
            stable = group.is_(_S.STABLE)
            entry.update(group_state=group.state.value, protocol_type=group.protocol_type or "",
                         protocol_data=group.protocol_name or "", members=[{
                             "member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": m.metadata_for(group.protocol_name),
                             "member_assignment": m.assignment if stable else b""}
                             for m in group.members.values()])
    return {"groups": out}
