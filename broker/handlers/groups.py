"""Handlers of the group coordinator APIs (FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups,
DeleteGroups).

Thin: each hands the decoded body to the broker's :class:`OffsetsTopic` (FindCoordinator)
or its :class:`GroupCoordinator` (everything else), which answer with the wire bodies
of :mod:`clients.protocol.registry` through ``respond`` (now, or later for a parked JoinGroup /
SyncGroup or a commit waiting for the ISR).  Behaviour is documented in
:mod:`broker.group.coordinator`, :mod:`broker.group.offsets`, :mod:`broker.group.offsets_topic`
and docs/groups.md.

What the version changes, here, as Kafka does:

- FindCoordinator v0-3 asks for one ``key`` and gets one answer; v4 batches
  ``coordinator_keys`` and answers ``coordinators``, one entry (with its error) per key.
- JoinGroup below v4 (before KIP-394) admits a member without an id at once, with a new
  id; from v4 such a member first gets MEMBER_ID_REQUIRED and the id to rejoin with.
  Below v7 an answer without a protocol (an error) carries "" (null is v7+).
- LeaveGroup v0-2 names one ``member_id`` and gets its error as the top-level
  ``error_code``; v3+ names ``members`` and gets one result each (top-level NONE unless
  the coordinator itself fails).
- OffsetFetch v1 has no top-level error: a coordinator error goes into every partition
  asked; v2-7 carry it at the top; v8 batches ``groups``, each with its own error.

Costs: O(1) here plus what the coordinator does.  Not thread-safe: called on the broker's
event loop.
"""

from __future__ import annotations

from broker.core import BrokerCore
from broker.group.offsets import commit_offsets, describe_groups, fetch_offsets, list_groups
from broker.handlers.common import Body, Handler, RequestContext, Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode

FIRST_BATCHED_FIND_COORDINATOR = 4
FIRST_MEMBER_ID_REQUIRED_JOIN = 4
FIRST_NULLABLE_PROTOCOL_NAME = 7
FIRST_BATCHED_LEAVE = 3
FIRST_BATCHED_OFFSET_FETCH = 8
FIRST_TOP_LEVEL_OFFSET_FETCH_ERROR = 2


def handle_find_coordinator(core: BrokerCore, body: Body, respond: Respond,
                            ctx: RequestContext) -> None:
    if ctx.version < FIRST_BATCHED_FIND_COORDINATOR:
        respond({"throttle_time_ms": 0,
                 **core.groups.find_coordinator(body["key"], body["key_type"])})
        return
    respond({"throttle_time_ms": 0, "coordinators": [
        {"key": key, **core.groups.find_coordinator(key, body["key_type"])}
        for key in body["coordinator_keys"]]})


def handle_join_group(core: BrokerCore, body: Body, respond: Respond,
                      ctx: RequestContext) -> None:
    def answer(body: Body | None) -> None:
        if body is not None and body.get("protocol_name") is None \
                and ctx.version < FIRST_NULLABLE_PROTOCOL_NAME:
            body = {**body, "protocol_name": ""}  # Kafka: "" where null cannot be sent
        respond(body)

    core.groups.coordinator.join_group(
        body, answer, client_id=ctx.client_id,
        require_member_id=ctx.version >= FIRST_MEMBER_ID_REQUIRED_JOIN)


def handle_sync_group(core: BrokerCore, body: Body, respond: Respond,
                      ctx: RequestContext) -> None:
    core.groups.coordinator.sync_group(body, respond)


def handle_heartbeat(core: BrokerCore, body: Body, respond: Respond,
                     ctx: RequestContext) -> None:
    core.groups.coordinator.heartbeat(body, respond)


def handle_leave_group(core: BrokerCore, body: Body, respond: Respond,
                       ctx: RequestContext) -> None:
    if ctx.version >= FIRST_BATCHED_LEAVE:
        core.groups.coordinator.leave_group(body, respond)
        return

    def single(answer: Body | None) -> None:
        assert answer is not None
        members = answer.get("members") or []
        if answer["error_code"] == 0 and members:
            answer = {**answer, "error_code": members[0]["error_code"]}
        respond(answer)

    core.groups.coordinator.leave_group(
        {**body, "members": [{"member_id": body["member_id"], "group_instance_id": None}]},
        single)


def handle_offset_commit(core: BrokerCore, body: Body, respond: Respond,
                         ctx: RequestContext) -> None:
    commit_offsets(core.groups.coordinator, body, respond)


def handle_offset_fetch(core: BrokerCore, body: Body, respond: Respond,
                        ctx: RequestContext) -> None:
    coordinator = core.groups.coordinator
    if ctx.version >= FIRST_BATCHED_OFFSET_FETCH:
        groups = []
        for group in body["groups"]:
            code, topics = fetch_offsets(coordinator, group["group_id"], group["topics"])
            groups.append({"group_id": group["group_id"], "error_code": int(code),
                           "topics": topics})
        respond({"throttle_time_ms": 0, "groups": groups})
        return
    code, topics = fetch_offsets(coordinator, body["group_id"], body["topics"])
    if code != ErrorCode.NONE and ctx.version < FIRST_TOP_LEVEL_OFFSET_FETCH_ERROR:
        topics = [{"name": t["name"], "partitions": [
            {"partition_index": i, "committed_offset": -1, "metadata": "",
             "error_code": int(code)} for i in t["partition_indexes"]]}
            for t in body["topics"] or []]
    respond({"throttle_time_ms": 0, "error_code": int(code), "topics": topics})


def handle_list_groups(core: BrokerCore, body: Body, respond: Respond,
                       ctx: RequestContext) -> None:
    respond({"throttle_time_ms": 0, **list_groups(core.groups.coordinator,
                                                  body["states_filter"],
                                                  body["types_filter"])})


def handle_describe_groups(core: BrokerCore, body: Body, respond: Respond,
                           ctx: RequestContext) -> None:
    respond({"throttle_time_ms": 0, **describe_groups(core.groups.coordinator, body)})


def handle_delete_groups(core: BrokerCore, body: Body, respond: Respond,
                         ctx: RequestContext) -> None:
    core.groups.coordinator.delete_groups(body["groups_names"], lambda results: respond({
        "throttle_time_ms": 0,
        "results": [{"group_id": g, "error_code": int(code)} for g, code in results]}))


GROUP_HANDLERS: dict[int, Handler] = {
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
}
