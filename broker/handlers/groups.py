"""Handlers of the group coordinator APIs (FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch, ListGroups,
DescribeGroups, DeleteGroups).

Thin: each hands the decoded body to the broker's :class:`OffsetsTopic` (FindCoordinator)
or its :class:`GroupCoordinator` (everything else), which answer with the wire bodies
of :mod:`clients.protocol.registry` through ``respond`` (now, or later for a parked JoinGroup /
SyncGroup or a commit waiting for the ISR).  Typed like every handler module: each
handler takes its API's generated request and ``Respond`` of its response
(:mod:`clients.protocol.message_types`) and enters the table through
:func:`~broker.handlers.common.serves`.  Behaviour is documented in
:mod:`broker.group.coordinator`, :mod:`broker.group.offsets`, :mod:`broker.group.offsets_topic`
and docs/groups.md.

What the version changes, here, as Kafka does:

- FindCoordinator v0-3 asks for one ``key`` and gets one answer; v4 batches
  ``coordinator_keys`` and answers ``coordinators``, one entry (with its error) per key.
  key_type 1 (a transactional id) is answered by the transaction coordinator's topic
  (:class:`broker.txn.state_topic.TransactionStateTopic`; Describe on the
  TransactionalId, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
- JoinGroup below v4 (before KIP-394) admits a member without an id at once, with a new
  id; from v4 such a member first gets MEMBER_ID_REQUIRED and the id to rejoin with.
  Below v7 an answer without a protocol (an error) carries "" (null is v7+).
- LeaveGroup v0-2 names one ``member_id`` and gets its error as the top-level
  ``error_code``; v3+ names ``members`` and gets one result each (top-level NONE unless
  the coordinator itself fails).
- OffsetFetch v1 has no top-level error: a coordinator error goes into every partition
  asked; v2-7 carry it at the top; v8 batches ``groups``, each with its own error.
  v7+ ``require_stable`` is passed on (UNSTABLE_OFFSET_COMMIT for a pending commit).
- TxnOffsetCommit v0-4: v3+ carry the member's generation, member id and instance id
  (checked by the coordinator when given); v0-2 do not.  Below v4 TRANSACTION_ABORTABLE
  (KIP-890) is answered INVALID_TXN_STATE, as Kafka does.  With a transaction
  verifier (``core.txn_verifier``) the group's offsets partition is verified with the
  transaction coordinator first (KIP-890, :meth:`OffsetsTopic.commit_txn_offsets`).

ACLs (:mod:`broker.acls`, Kafka's mapping): FindCoordinator, DescribeGroups, OffsetFetch
and ListGroups need Describe on the group (ListGroups leaves out the others), JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and TxnOffsetCommit need Read on it (a
refusal is GROUP_AUTHORIZATION_FAILED, in the API's shape); OffsetCommit and
TxnOffsetCommit also need Read on each topic and OffsetFetch Describe
(TOPIC_AUTHORIZATION_FAILED per partition / left out; the two commits share one check,
``_authorized_commit``); TxnOffsetCommit first needs Write on the TransactionalId (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED in every partition, before the group is checked,
as Kafka orders them); DeleteGroups needs Delete.

Costs: O(1) here plus what the coordinator does.  Not thread-safe: called on the broker's
event loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Handler, RequestContext, serves
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupDescribeResponseGroup,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteGroupsResponseResult,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    FindCoordinatorResponseCoordinator,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponseTopic,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)

GROUP_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)

FIRST_BATCHED_FIND_COORDINATOR = 4
TRANSACTION_KEY_TYPE = 1  # FindCoordinator's key_type of a transactional id
FIRST_MEMBER_ID_REQUIRED_JOIN = 4
FIRST_NULLABLE_PROTOCOL_NAME = 7
FIRST_BATCHED_LEAVE = 3
FIRST_BATCHED_OFFSET_FETCH = 8
FIRST_TOP_LEVEL_OFFSET_FETCH_ERROR = 2
FIRST_TRANSACTION_ABORTABLE_TXN_OFFSET_COMMIT = 4  # KIP-890: older clients do not know it


def _coordinator_of(core: HandlerCore, key: str, key_type: int,
                    ctx: RequestContext) -> FindCoordinatorResponseCoordinator:
    if key_type == 0 and not ctx.allowed("Describe", "Group", key):
        return {"error_code": GROUP_DENIED, "error_message": f"not authorized to Describe "
                f"group {key!r}", "node_id": -1, "host": "", "port": -1}
    if key_type == TRANSACTION_KEY_TYPE:
        if not ctx.allowed("Describe", "TransactionalId", key):
            return {"error_code": int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                    "error_message": f"not authorized to Describe transactional id {key!r}",
                    "node_id": -1, "host": "", "port": -1}
        return core.transactions.find_coordinator(key)
    return core.groups.find_coordinator(key, key_type)


def handle_find_coordinator(core: HandlerCore, body: FindCoordinatorRequest,
                            respond: Respond[FindCoordinatorResponse],
                            ctx: RequestContext) -> None:
    if ctx.version < FIRST_BATCHED_FIND_COORDINATOR:
        found = _coordinator_of(core, body["key"], body["key_type"], ctx)
        respond({"throttle_time_ms": 0, "error_code": found["error_code"],
                 "error_message": found["error_message"], "node_id": found["node_id"],
                 "host": found["host"], "port": found["port"]})
        return
    respond({"throttle_time_ms": 0, "coordinators": [
        {"key": key, **_coordinator_of(core, key, body["key_type"], ctx)}
        for key in body["coordinator_keys"]]})


def _group_allowed(ctx: RequestContext, operation: str, group_id: str) -> bool:
    """Whether the user may ``operation`` the group (if not, the handler answers
    GROUP_AUTHORIZATION_FAILED in its API's shape)."""
    return ctx.allowed(operation, "Group", group_id)


def handle_join_group(core: HandlerCore, body: JoinGroupRequest,
                      respond: Respond[JoinGroupResponse], ctx: RequestContext) -> None:
    if not _group_allowed(ctx, "Read", body["group_id"]):
        respond({"throttle_time_ms": 0, "generation_id": -1, "member_id": "", "leader": "",
                 "members": [], "protocol_name": ""
                 if ctx.version < FIRST_NULLABLE_PROTOCOL_NAME else None,
                 "error_code": GROUP_DENIED})
        return

    def answer(body: JoinGroupResponse | None) -> None:
        if body is not None and body.get("protocol_name") is None \
                and ctx.version < FIRST_NULLABLE_PROTOCOL_NAME:
            body = {**body, "protocol_name": ""}  # Kafka: "" where null cannot be sent
        respond(body)

    core.groups.coordinator.join_group(
        body, answer, client_id=ctx.client_id,
        require_member_id=ctx.version >= FIRST_MEMBER_ID_REQUIRED_JOIN)


def handle_sync_group(core: HandlerCore, body: SyncGroupRequest,
                      respond: Respond[SyncGroupResponse], ctx: RequestContext) -> None:
    if not _group_allowed(ctx, "Read", body["group_id"]):
        respond({"throttle_time_ms": 0, "assignment": b"", "error_code": GROUP_DENIED})
        return
    core.groups.coordinator.sync_group(body, respond)


def handle_heartbeat(core: HandlerCore, body: HeartbeatRequest,
                     respond: Respond[HeartbeatResponse], ctx: RequestContext) -> None:
    if not _group_allowed(ctx, "Read", body["group_id"]):
        respond({"throttle_time_ms": 0, "error_code": GROUP_DENIED})
        return
    core.groups.coordinator.heartbeat(body, respond)


def handle_leave_group(core: HandlerCore, body: LeaveGroupRequest,
                       respond: Respond[LeaveGroupResponse], ctx: RequestContext) -> None:
    if not _group_allowed(ctx, "Read", body["group_id"]):
        respond({"throttle_time_ms": 0, "members": [], "error_code": GROUP_DENIED})
        return
    if ctx.version >= FIRST_BATCHED_LEAVE:
        core.groups.coordinator.leave_group(body, respond)
        return

    def single(answer: LeaveGroupResponse | None) -> None:
        assert answer is not None
        members = answer.get("members") or []
        if answer["error_code"] == 0 and members:
            answer = {**answer, "error_code": members[0]["error_code"]}
        respond(answer)

    core.groups.coordinator.leave_group(
        {**body, "members": [{"member_id": body["member_id"], "group_instance_id": None}]},
        single)


CommitRequestT = TypeVar("CommitRequestT", OffsetCommitRequest, TxnOffsetCommitRequest)


def _refused_partitions(topics: Sequence[OffsetCommitRequestTopic]
                        | Sequence[TxnOffsetCommitRequestTopic], code: int) -> list[Any]:
    """The answer's topics for commits refused with ``code``: every partition asked."""
    return [{"name": t["name"], "partitions": [
        {"partition_index": p["partition_index"], "error_code": code}
        for p in t["partitions"]]} for t in topics]


def _authorized_commit(ctx: RequestContext, body: CommitRequestT,
                       respond: Respond[Any]  # OffsetCommit's or TxnOffsetCommit's
                       ) -> tuple[CommitRequestT, Respond[Any]] | None:
    """Kafka's ACLs of an offset commit (OffsetCommit and TxnOffsetCommit alike): without
    Read on the group the whole request is answered GROUP_AUTHORIZATION_FAILED here
    (None); topics without Read are taken out of the body and their partitions added to
    the answer as TOPIC_AUTHORIZATION_FAILED.  Returns the body and respond to commit with."""
    if not _group_allowed(ctx, "Read", body["group_id"]):
        respond({"throttle_time_ms": 0,
                 "topics": _refused_partitions(body["topics"], GROUP_DENIED)})
        return None
    denied = [t for t in body["topics"] if not ctx.allowed("Read", "Topic", t["name"])]
    if not denied:
        return body, respond
    allowed = [t for t in body["topics"] if t not in denied]
    refused: list[Any] = _refused_partitions(denied, TOPIC_DENIED)

    def with_denied(answer: Any) -> None:
        if answer is not None:
            answer["topics"] = [*answer["topics"], *refused]
        respond(answer)
    return {**body, "topics": allowed}, with_denied


def handle_offset_commit(core: HandlerCore, body: OffsetCommitRequest,
                         respond: Respond[OffsetCommitResponse], ctx: RequestContext) -> None:
    authorized = _authorized_commit(ctx, body, respond)
    if authorized is not None:
        core.groups.coordinator.commit_offsets(*authorized, version=ctx.version)


def handle_txn_offset_commit(core: HandlerCore, body: TxnOffsetCommitRequest,
                             respond: Respond[TxnOffsetCommitResponse],
                             ctx: RequestContext) -> None:
    if not ctx.allowed("Write", "TransactionalId", body["transactional_id"]):
        respond({"throttle_time_ms": 0, "topics": _refused_partitions(
            body["topics"], int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))})
        return
    authorized = _authorized_commit(ctx, body, respond)
    if authorized is None:
        return
    body, respond = authorized
    if ctx.version < FIRST_TRANSACTION_ABORTABLE_TXN_OFFSET_COMMIT:
        answer_new = respond

        def respond(answer: TxnOffsetCommitResponse | None) -> None:
            for topic in answer["topics"] if answer is not None else []:
                for p in topic["partitions"]:
                    if p["error_code"] == ErrorCode.TRANSACTION_ABORTABLE:
                        p["error_code"] = int(ErrorCode.INVALID_TXN_STATE)
            answer_new(answer)

    verifier = core.txn_verifier
    verify = None if verifier is None else functools.partial(
        verifier.verify, body["transactional_id"], body["producer_id"], body["producer_epoch"])
    core.groups.commit_txn_offsets(body, respond, verify)


def handle_offset_fetch(core: HandlerCore, body: OffsetFetchRequest,
                        respond: Respond[OffsetFetchResponse], ctx: RequestContext) -> None:
    coordinator = core.groups.coordinator
    require_stable = bool(body.get("require_stable", False))

    def fetch(group_id: str, wanted: Sequence[OffsetFetchRequestTopic] | None,
              member_id: str | None = None, member_epoch: int = -1
              ) -> tuple[int, list[OffsetFetchResponseTopic]]:
        if not _group_allowed(ctx, "Describe", group_id):
            return GROUP_DENIED, []
        code, topics = coordinator.fetch_offsets(group_id, wanted, require_stable,
                                                 member_id, member_epoch)
        return int(code), [t for t in topics if ctx.allowed("Describe", "Topic", t["name"])]

    if ctx.version >= FIRST_BATCHED_OFFSET_FETCH:
        groups: list[OffsetFetchResponseGroup] = []
        for group in body["groups"]:
            code, topics = fetch(group["group_id"], group["topics"], group["member_id"],
                                 group["member_epoch"])
            groups.append({"group_id": group["group_id"], "error_code": code,
                           "topics": topics})
        respond({"throttle_time_ms": 0, "groups": groups})
        return
    code, topics = fetch(body["group_id"], body["topics"])
    if code != ErrorCode.NONE and ctx.version < FIRST_TOP_LEVEL_OFFSET_FETCH_ERROR:
        topics = [{"name": t["name"], "partitions": [
            {"partition_index": i, "committed_offset": -1, "metadata": "",
             "error_code": int(code)} for i in t["partition_indexes"]]}
            for t in body["topics"] or []]
    respond({"throttle_time_ms": 0, "error_code": int(code), "topics": topics})


def handle_list_groups(core: HandlerCore, body: ListGroupsRequest,
                       respond: Respond[ListGroupsResponse], ctx: RequestContext) -> None:
    answer = core.groups.coordinator.list_groups(body["states_filter"], body["types_filter"])
    answer["groups"] = [g for g in answer["groups"]
                        if ctx.allowed("Describe", "Group", g["group_id"])]
    respond({"throttle_time_ms": 0, **answer})


def handle_describe_groups(core: HandlerCore, body: DescribeGroupsRequest,
                           respond: Respond[DescribeGroupsResponse],
                           ctx: RequestContext) -> None:
    answer = core.groups.coordinator.describe_groups(body)
    for entry in answer["groups"]:
        if not _group_allowed(ctx, "Describe", entry["group_id"]):
            entry.update({"error_code": GROUP_DENIED, "error_message": None, "members": [],
                          "group_state": "", "protocol_type": "", "protocol_data": ""})
    respond({"throttle_time_ms": 0, **answer})


def handle_delete_groups(core: HandlerCore, body: DeleteGroupsRequest,
                         respond: Respond[DeleteGroupsResponse], ctx: RequestContext) -> None:
    names = body["groups_names"]
    denied = [g for g in names if not ctx.allowed("Delete", "Group", g)]

    def answer(results: list[tuple[str, ErrorCode]]) -> None:
        entries: list[DeleteGroupsResponseResult] = [
            {"group_id": g, "error_code": int(code)} for g, code in results]
        entries += [{"group_id": g, "error_code": GROUP_DENIED} for g in denied]
        respond({"throttle_time_ms": 0, "results": entries})

    core.groups.coordinator.delete_groups([g for g in names if g not in denied], answer)


def handle_consumer_group_heartbeat(core: HandlerCore, body: ConsumerGroupHeartbeatRequest,
                                    respond: Respond[ConsumerGroupHeartbeatResponse],
                                    ctx: RequestContext) -> None:
    """ConsumerGroupHeartbeat (KIP-848): Read on the group, Describe on every topic the
    member subscribes to by name (Kafka's checks); its regular expression resolves only
    to the topics the principal may Describe (the coordinator keeps
    :func:`_describable_topics` for that, Kafka's ``TopicRegexResolver``)."""
    def refused(code: int, message: str) -> ConsumerGroupHeartbeatResponse:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
                "member_id": None, "member_epoch": -1, "heartbeat_interval_ms": 0,
                "assignment": None}

    if not _group_allowed(ctx, "Read", body["group_id"]):
        respond(refused(GROUP_DENIED, f"not authorized to Read group {body['group_id']!r}"))
        return
    denied = [t for t in body["subscribed_topic_names"] or ()
              if not ctx.allowed("Describe", "Topic", t)]
    if denied:
        respond(refused(TOPIC_DENIED, f"not authorized to Describe topics {denied}"))
        return
    core.groups.coordinator.consumer_group_heartbeat(
        body, ctx.version, respond, ctx.client_id, may_describe=_describable_topics(ctx))


def _every_topic(name: str) -> bool:
    return True


def _describable_topics(ctx: RequestContext) -> Callable[[str], bool]:
    """Whether the request's principal may Describe a topic (by name).  The coordinator
    keeps it past the request (a member's regular expression is resolved with it at its
    group's later heartbeats), so it holds the authorizer and principal, not ``ctx``."""
    if ctx.authorizer is None:
        return _every_topic
    return functools.partial(ctx.authorizer.allowed, ctx.principal, "Describe", "Topic")


def handle_consumer_group_describe(core: HandlerCore, body: ConsumerGroupDescribeRequest,
                                   respond: Respond[ConsumerGroupDescribeResponse],
                                   ctx: RequestContext) -> None:
    """ConsumerGroupDescribe (KIP-848): Describe on each group."""
    coordinator = core.groups.coordinator
    groups: list[ConsumerGroupDescribeResponseGroup] = []
    for group_id in body["group_ids"]:
        if _group_allowed(ctx, "Describe", group_id):
            groups.append(coordinator.consumer_group_describe(group_id))
        else:
            groups.append({"error_code": GROUP_DENIED, "error_message": None,
                           "group_id": group_id, "group_state": "", "group_epoch": -1,
                           "assignment_epoch": -1, "assignor_name": "", "members": []})
    respond({"throttle_time_ms": 0, "groups": groups})


GROUP_HANDLERS: dict[int, Handler] = {
    ApiKey.FIND_COORDINATOR: serves(handle_find_coordinator),
    ApiKey.JOIN_GROUP: serves(handle_join_group),
    ApiKey.SYNC_GROUP: serves(handle_sync_group),
    ApiKey.HEARTBEAT: serves(handle_heartbeat),
    ApiKey.LEAVE_GROUP: serves(handle_leave_group),
    ApiKey.OFFSET_COMMIT: serves(handle_offset_commit),
    ApiKey.OFFSET_FETCH: serves(handle_offset_fetch),
    ApiKey.TXN_OFFSET_COMMIT: serves(handle_txn_offset_commit),
    ApiKey.LIST_GROUPS: serves(handle_list_groups),
    ApiKey.DESCRIBE_GROUPS: serves(handle_describe_groups),
    ApiKey.DELETE_GROUPS: serves(handle_delete_groups),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: serves(handle_consumer_group_heartbeat),
    ApiKey.CONSUMER_GROUP_DESCRIBE: serves(handle_consumer_group_describe),
}
