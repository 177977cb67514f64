"""Handlers of the group coordinator APIs (FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups).

Thin: each hands the decoded body to the broker's :class:`OffsetsTopic` (FindCoordinator)
or its :class:`GroupCoordinator` (everything else), which answer with the wire bodies
of :mod:`clients.protocol.registry` through ``respond`` (now, or later for a parked JoinGroup /
SyncGroup or a commit waiting for the ISR).  Behaviour is documented in
:mod:`broker.group.coordinator`, :mod:`broker.group.offsets`, :mod:`broker.group.offsets_topic`
and docs/groups.md.

Costs: O(1) here.  Not thread-safe: called on the broker's event loop.
"""

from __future__ import annotations

from broker.core import BrokerCore
from broker.group.offsets import commit_offsets, describe_groups, fetch_offsets, list_groups
from broker.handlers.common import Body, Handler, Respond
from clients.protocol.api_keys import ApiKey


def handle_find_coordinator(core: BrokerCore, body: Body, respond: Respond) -> None:
    respond(core.groups.find_coordinator(body))


def handle_join_group(core: BrokerCore, body: Body, respond: Respond) -> None:
    core.groups.coordinator.join_group(body, respond)


def handle_sync_group(core: BrokerCore, body: Body, respond: Respond) -> None:
    core.groups.coordinator.sync_group(body, respond)


def handle_heartbeat(core: BrokerCore, body: Body, respond: Respond) -> None:
    core.groups.coordinator.heartbeat(body, respond)


def handle_leave_group(core: BrokerCore, body: Body, respond: Respond) -> None:
    core.groups.coordinator.leave_group(body, respond)


def handle_offset_commit(core: BrokerCore, body: Body, respond: Respond) -> None:
    commit_offsets(core.groups.coordinator, body, respond)


def handle_offset_fetch(core: BrokerCore, body: Body, respond: Respond) -> None:
    respond(fetch_offsets(core.groups.coordinator, body))


def handle_list_groups(core: BrokerCore, body: Body, respond: Respond) -> None:
    respond(list_groups(core.groups.coordinator, body))


def handle_describe_groups(core: BrokerCore, body: Body, respond: Respond) -> None:
    respond(describe_groups(core.groups.coordinator, body))


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
}
