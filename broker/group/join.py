"""The join phase of a rebalance as delayed operations: :class:`DelayedJoin` and
:class:`InitialDelayedJoin`.

:class:`DelayedJoin` is parked in the coordinator's join purgatory under the key
``group_id`` for the group's rebalance timeout (the largest of its members').  It
completes early when every known member has rejoined and no KIP-394 member id is still
pending; at completion (early or at the timeout) it calls ``end_join(group)``, with
which the :class:`~broker.group.rebalance.Rebalancer` ends the join phase.

:class:`InitialDelayedJoin` is used instead when a rebalance starts from Empty: it only
completes by its timer (``group_initial_rebalance_delay_ms``), so the first members of
a starting group land in one generation instead of one rebalance each.  At expiry, if
new members joined during the delay and rebalance time remains, it hands a new one
(delay ``min(initial delay, remaining)``) to ``park``, which parks it in the join
purgatory; otherwise it calls ``end_join(group)``.

The operations know nothing of the rebalancer but these two callbacks (given at
construction): ``end_join(group)`` and ``park(op)``.

Costs: ``DelayedJoin.try_complete`` O(members); the rest O(1).  Not thread-safe:
everything runs on the broker's event loop (or a test's thread).
"""

from __future__ import annotations

from collections.abc import Callable

from broker.group.members import Group
from timer.delayed_operation import DelayedOperation


class DelayedJoin(DelayedOperation):
    __slots__ = ("end_join", "group")

    def __init__(self, group: Group, delay_ms: int, end_join: Callable[[Group], None]) -> None:
        super().__init__(delay_ms)
        self.group = group
        self.end_join = end_join

    def try_complete(self) -> bool:
        if self.group.all_joined():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.end_join(self.group)

    def on_expiration(self) -> None:
        pass


class InitialDelayedJoin(DelayedJoin):
    __slots__ = ("initial_delay_ms", "park", "remaining_ms")

    def __init__(self, group: Group, delay_ms: int, remaining_ms: int,
                 end_join: Callable[[Group], None],
                 park: Callable[[DelayedJoin], None]) -> None:
        super().__init__(group, delay_ms, end_join)
        self.initial_delay_ms = delay_ms
        self.remaining_ms = remaining_ms
        self.park = park

    def try_complete(self) -> bool:
        return False  # only the timer ends the initial delay

    def on_complete(self) -> None:
        group = self.group
        if group.new_member_added and self.remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.initial_delay_ms, self.remaining_ms)
            self.park(InitialDelayedJoin(group, delay, max(self.remaining_ms - delay, 0),
                                         self.end_join, self.park))
        else:
            self.end_join(group)
