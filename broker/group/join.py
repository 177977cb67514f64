"""Delayed operations of the group coordinator: the join phase and member heartbeats.

:class:`DelayedJoin` is parked in the coordinator's join purgatory under the key
``group_id`` for the group's rebalance timeout (the largest of its members').  It
completes early when every known member has rejoined and no KIP-394 member id is still
pending; at completion (early or at the timeout) the coordinator ends the join phase.

:class:`InitialDelayedJoin` is used instead when a rebalance starts from Empty: it only
completes by its timer (``group_initial_rebalance_delay_ms``), so the first members of
a starting group land in one generation instead of one rebalance each.  At expiry, if
new members joined during the delay and rebalance time remains, it parks a new one
(delay ``min(initial delay, remaining)``); otherwise it ends the join phase.

:class:`DelayedHeartbeat` is parked in the heartbeat purgatory under
``(group_id, member_id)`` for the member's session timeout.  A heartbeat (or any
liveness signal) marks it satisfied and completes it through ``check_and_complete``;
at expiry the coordinator removes the member (or the pending member id) unless it is
parked in JoinGroup/SyncGroup, which keeps it alive (a new heartbeat is scheduled).

Costs: ``DelayedJoin.try_complete`` O(members); heartbeat operations O(1).  Not
thread-safe: everything runs on the broker's event loop (or a test's thread).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from timer.delayed_operation import DelayedOperation

if TYPE_CHECKING:
    from broker.group.coordinator import GroupCoordinator
    from broker.group.members import Group
    from broker.group.ownership import GroupOwnership


class DelayedJoin(DelayedOperation):
    __slots__ = ("coordinator", "group")

    def __init__(self, coordinator: GroupCoordinator, group: Group, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        if self.group.all_joined():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.coordinator.complete_join(self.group)

    def on_expiration(self) -> None:
        pass


class InitialDelayedJoin(DelayedJoin):
    __slots__ = ("initial_delay_ms", "remaining_ms")

    def __init__(self, coordinator: GroupCoordinator, group: Group, delay_ms: int,
                 remaining_ms: int) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.initial_delay_ms = delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False  # only the timer ends the initial delay

    def on_complete(self) -> None:
        group = self.group
        if group.new_member_added and self.remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.initial_delay_ms, self.remaining_ms)
            self.coordinator.park_join(group, InitialDelayedJoin(
                self.coordinator, group, delay, max(self.remaining_ms - delay, 0)))
        else:
            self.coordinator.complete_join(group)


class DelayedHeartbeat(DelayedOperation):
    __slots__ = ("coordinator", "group", "member_id", "satisfied")

    def __init__(self, coordinator: GroupOwnership, group: Group, member_id: str,
                 session_timeout_ms: int) -> None:
        super().__init__(session_timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self.satisfied = False

    def try_complete(self) -> bool:
        if self.satisfied:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator.on_heartbeat_expired(self)
