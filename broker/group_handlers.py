"""Handlers of the group coordinator APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, FindCoordinator, ListGroups, DescribeGroups).

Not served yet: the table is empty, so a broker does not advertise these APIs.
"""

from __future__ import annotations

from broker.handlers import Handler

GROUP_HANDLERS: dict[int, Handler] = {}
