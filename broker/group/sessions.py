"""Member liveness: session timeouts as delayed operations in the heartbeat purgatory.

:class:`DelayedHeartbeat` is parked under ``(group_id, member_id)`` for the member's
session timeout.  A heartbeat (or any other sign of life) marks it satisfied and
completes it through ``check_and_complete``; at expiry it calls ``on_expired(op)``.

:class:`MemberSessions` is the group coordinator's liveness collaborator:

- owns the heartbeat purgatory and every :class:`DelayedHeartbeat` in it: one per member
  (``GroupMember.heartbeat``) and one per pending KIP-394 member id
  (``Group.pending_members``); its callers store the ops they are handed there;
- reads nothing of its owner: it is given the timer and ``on_expired``, the coordinator's
  callback for a passed session timeout (which removes the member, or keeps a member
  parked in JoinGroup/SyncGroup alive);
- is called by the coordinator's rooms only (:mod:`broker.group.coordinator`,
  :mod:`~broker.group.rebalance`, :mod:`~broker.group.membership`,
  :mod:`~broker.group.offsets`): :meth:`schedule`, :meth:`keep_alive`, :meth:`satisfy`,
  :meth:`cancel`, :meth:`shutdown`.

Costs: every method O(1) (amortized, the purgatory's).  Not thread-safe: the broker's
event loop (or a test's thread) owns it.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.group.members import Group, GroupMember
from timer.delayed_operation import DelayedOperation
from timer.purgatory import Purgatory, TimerLike


class DelayedHeartbeat(DelayedOperation):
    __slots__ = ("group", "member_id", "on_expired", "satisfied")

    def __init__(self, group: Group, member_id: str, session_timeout_ms: int,
                 on_expired: Callable[[DelayedHeartbeat], None]) -> None:
        super().__init__(session_timeout_ms)
        self.group = group
        self.member_id = member_id
        self.on_expired = on_expired
        self.satisfied = False

    def try_complete(self) -> bool:
        if self.satisfied:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.on_expired(self)


class MemberSessions:
    """Session timeouts of the members of a coordinator's groups; see the module
    docstring for the contract."""

    def __init__(self, timer: TimerLike, on_expired: Callable[[DelayedHeartbeat], None]) -> None:
        self.purgatory: Purgatory[DelayedHeartbeat] = Purgatory("heartbeat", timer)
        self.on_expired = on_expired

    def schedule(self, group: Group, member_id: str, timeout_ms: int) -> DelayedHeartbeat:
        """Start a session timeout of ``timeout_ms`` for ``member_id`` of ``group``."""
        op = DelayedHeartbeat(group, member_id, timeout_ms, self.on_expired)
        self.purgatory.try_complete_else_watch(op, [(group.group_id, member_id)])
        return op

    def satisfy(self, op: DelayedOperation | None) -> None:
        """End a session timeout without expiry (the member is alive, left or moved)."""
        if isinstance(op, DelayedHeartbeat) and not op.is_completed:
            op.satisfied = True
            self.purgatory.check_and_complete((op.group.group_id, op.member_id))

    def keep_alive(self, group: Group, member: GroupMember) -> None:
        """The member showed it is alive: restart its session timeout."""
        self.satisfy(member.heartbeat)
        member.heartbeat = self.schedule(group, member.member_id, member.session_timeout_ms)

    def cancel(self, group_id: str, member_id: str) -> None:
        """Drop the member's session timeout without calling anything (unload)."""
        self.purgatory.cancel_for_key((group_id, member_id))

    def shutdown(self) -> None:
        self.purgatory.shutdown()
