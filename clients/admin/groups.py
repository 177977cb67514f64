"""Consumer-group operations of :class:`~clients.admin.Admin`: list, describe and
delete groups, and list a group's committed offsets with their lag.

Contract: ``list_groups`` asks every live broker (each knows the groups it
coordinates; one that fails to answer is skipped) and merges; ``describe_groups``,
``list_group_offsets`` and ``delete_groups`` ask each group's coordinator
(FindCoordinator first, shapes in :mod:`clients.consumer.group_requests`;
COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR retried
every 100 ms until the timeout, then RequestTimedOutError).  Member assignments of
``consumer`` groups are decoded (:mod:`clients.consumer.group_protocol`; an
undecodable one is empty); offsets come with the partition's high watermark
(:meth:`~clients.admin.records.RecordAdmin.high_watermarks`) so
:attr:`~clients.types.GroupOffset.lag` is HW - committed.  A group's state is "" when
the broker answers ListGroups below v4 (which carries no state).

Costs: ``list_groups`` a metadata refresh plus one round trip per broker; the others two
round trips per group (FindCoordinator, then the request), plus the high watermarks
for offsets.  Thread-safety: none (one caller thread, as the Admin).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from clients.admin.records import RecordAdmin
from clients.admin.requests import AdminRequests, R, raise_first
from clients.consumer.group_protocol import PROTOCOL_TYPE, GroupProtocolError, decode_assignment
from clients.consumer.group_requests import (
    find_coordinator_request,
    offset_fetch_request,
    read_find_coordinator,
    read_offset_fetch,
)
from clients.network.connection import Body
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import (
    ErrorCode,
    MiniKafkaError,
    RequestTimedOutError,
    UnsupportedVersionError,
    error_for,
)
from clients.protocol.message_types import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from clients.protocol.topics import TopicPartition
from clients.types import GroupDescription, GroupListing, GroupOffset, MemberDescription


class GroupAdmin:
    """ListGroups, DescribeGroups, DeleteGroups and OffsetFetch, via each coordinator."""

    def __init__(self, requests: AdminRequests, records: RecordAdmin) -> None:
        self._requests = requests
        self._records = records
        self._metadata = requests.metadata

    def list_groups(
        self, *, states: Iterable[str] | None = None, types: Iterable[str] | None = None,
        timeout_ms: int | None = None,
    ) -> list[GroupListing]:
        timeout = self._requests.timeout(timeout_ms)
        wanted = None if states is None else sorted(set(states))
        wanted_types = None if types is None else sorted({t.lower() for t in types})
        self._requests.refresh_metadata([], timeout)
        request: ListGroupsRequest = {"states_filter": wanted or [],
                                      "types_filter": wanted_types or []}
        out: dict[str, GroupListing] = {}
        for broker in self._metadata.brokers():
            try:
                body = self._requests.request(broker.node_id, ApiKey.LIST_GROUPS, request,
                                              timeout, ListGroupsResponse)
            except MiniKafkaError:
                continue
            for g in body["groups"]:
                if wanted is not None and g["group_state"] not in wanted:
                    continue  # also drops groups of a broker below v4 (no state known)
                group_type = g["group_type"].lower()
                if wanted_types is not None and group_type not in wanted_types:
                    continue  # also drops groups of a broker below v5 (no type known)
                out[g["group_id"]] = GroupListing(g["group_id"], g["protocol_type"],
                                                  g["group_state"], broker.node_id, group_type)
        return sorted(out.values())

    def describe_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, GroupDescription]:
        out = {}
        for group_id in group_ids:
            consumer_group = self._describe_consumer_group(group_id, timeout_ms)
            if consumer_group is not None:
                out[group_id] = consumer_group
                continue
            request: DescribeGroupsRequest = {"groups": [group_id]}
            node, _, body = self.group_request(
                group_id, ApiKey.DESCRIBE_GROUPS, request, DescribeGroupsResponse,
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

    def _describe_consumer_group(self, group_id: str,
                                 timeout_ms: int | None) -> GroupDescription | None:
        """A KIP-848 consumer group by ConsumerGroupDescribe (member epochs included);
        None for a classic or unknown group (GROUP_ID_NOT_FOUND) or a coordinator that
        does not serve the API: DescribeGroups answers those."""
        request: ConsumerGroupDescribeRequest = {"group_ids": [group_id],
                                                 "include_authorized_operations": False}
        try:
            node, _, body = self.group_request(
                group_id, ApiKey.CONSUMER_GROUP_DESCRIBE, request, ConsumerGroupDescribeResponse,
                lambda b, v: _found_or_none(b["groups"][0]["error_code"] if b["groups"] else 0),
                timeout_ms)
        except UnsupportedVersionError:
            return None
        g = body["groups"][0]
        if g["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        members = [
            MemberDescription(m["member_id"], m["instance_id"], m["client_id"], m["client_host"],
                              tuple(TopicPartition(t["topic_name"], p)
                                    for t in m["assignment"]["topic_partitions"]
                                    for p in sorted(t["partitions"])), m["member_epoch"])
            for m in g["members"]]
        return GroupDescription(group_id, g["group_state"], PROTOCOL_TYPE, g["assignor_name"],
                                members, node, "consumer", g["group_epoch"])

    def delete_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:  # fmt: skip
        out: dict[str, MiniKafkaError | None] = {}
        for group_id in group_ids:
            request: DeleteGroupsRequest = {"groups_names": [group_id]}
            try:
                _, _, body = self.group_request(
                    group_id, ApiKey.DELETE_GROUPS, request, DeleteGroupsResponse,
                    lambda b, v: _retriable_only(b["results"][0]["error_code"]
                                                 if b["results"] else 0), timeout_ms)
            except MiniKafkaError as e:
                out[group_id] = e
                continue
            result = next((r for r in body["results"] if r["group_id"] == group_id), None)
            code = ErrorCode.UNKNOWN_SERVER_ERROR if result is None else result["error_code"]
            out[group_id] = (None if code == ErrorCode.NONE
                             else error_for(code, f"delete group {group_id!r}"))
        return raise_first(out, raise_on_error)

    def list_group_offsets(
        self, group_id: str, *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, GroupOffset]:
        _, version, body = self.group_request(
            group_id, ApiKey.OFFSET_FETCH,
            lambda v: offset_fetch_request(group_id, None, v, require_stable=False), dict,
            lambda b, v: read_offset_fetch(b, v, group_id)[1], timeout_ms)
        result, _ = read_offset_fetch(body, version, group_id)
        committed = {tp: (om.offset, om.metadata) for tp, (om, code) in result.items()
                     if om is not None and not code}  # fmt: skip
        marks = self._records.high_watermarks(committed, self._requests.timeout(timeout_ms))
        return {tp: GroupOffset(off, marks.get(tp, -1), meta)
                for tp, (off, meta) in sorted(committed.items())}  # fmt: skip

    def group_request(
        self,
        group_id: str,
        api: ApiKey,
        body: Body,
        answer_type: type[R],
        error_of: Callable[[R, int], int],
        timeout_ms: int | None,
    ) -> tuple[int, int, R]:
        """(coordinator node, version, answer typed as ``answer_type``) with coordinator
        errors retried until the timeout; ``error_of(answer, version)`` is the answer's
        group error code."""
        deadline = time.monotonic() + self._requests.timeout(timeout_ms) / 1000
        last = "no answer"
        while time.monotonic() < deadline:
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            # FindCoordinator and OffsetFetch keep the consumer's shapes (dict[str, Any])
            version, found_body = self._requests.request_with_version(
                None, ApiKey.FIND_COORDINATOR, lambda v: find_coordinator_request(group_id, v),
                remaining, dict)  # fmt: skip
            found = read_find_coordinator(found_body, version, group_id)
            code = found.error_code
            message = found.error_message
            if code == ErrorCode.NONE:
                node = found.node_id
                if self._metadata.broker(node) is None:
                    self._requests.refresh_metadata([], remaining)
                version, answer = self._requests.request_with_version(node, api, body,
                                                                      remaining, answer_type)
                code = error_of(answer, version)
                if code == ErrorCode.NONE:
                    return node, version, answer
            error = error_for(code, f"group {group_id!r}: {message or ''}".rstrip(": "))
            if not error.retriable:
                raise error
            last = error.message
            time.sleep(0.1)
        raise RequestTimedOutError(f"group {group_id!r}: coordinator not ready ({last})")


def _retriable_only(code: int) -> int:
    """A group answer's code for the retry loop: per-group verdicts are results."""
    return code if error_for(code).retriable else 0


def _found_or_none(code: int) -> int:
    """GROUP_ID_NOT_FOUND is an answer here (a classic group), not an error."""
    return 0 if code == ErrorCode.GROUP_ID_NOT_FOUND else code


def _assigned(protocol_type: str, data: bytes) -> tuple[TopicPartition, ...]:
    if protocol_type != PROTOCOL_TYPE or not data:
        return ()
    try:
        return decode_assignment(data).partitions
    except GroupProtocolError:
        return ()
