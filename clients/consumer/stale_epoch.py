"""Offset commits answered STALE_MEMBER_EPOCH (KIP-848): retried at the member's new
epoch, or failed when the member was fenced.

A KIP-848 member's OffsetCommit (v9+) carries its member epoch as the generation.  The
coordinator bumps the epoch in a heartbeat answer; a commit sent with the previous one
before that answer arrived is refused with STALE_MEMBER_EPOCH.  Kafka's consumer retries
such a commit (sync, async and auto) with the member's current epoch once its heartbeat
has brought the new one, and fails it with ``CommitFailedException`` when the member is
no longer the member that sent it.  :func:`after_stale_epoch` is that decision, from the
:class:`MemberEpoch` the commit was sent with and the member's now:

- RETRY: the same membership (no rejoin since) at another epoch > 0: send again now;
- WAIT: the same membership at the same epoch: the heartbeat answer with the new epoch
  is still on its way; ask again after a backoff, until the commit's deadline;
- FAIL: the member left, was fenced or rejoined (``incarnation`` moved: its partitions
  were lost, another member may own them) or is not a member (epoch <= 0).

:class:`StaleCommits` holds the asynchronous commits waiting for one of these outcomes
(the poll thread asks :meth:`StaleCommits.due` on every poll; nothing is re-sent from a
response handler), each until its deadline, at most ``max_waiting`` of them (the
oldest is failed to make room: async commits are superseded by later ones anyway).

Format: ``MemberEpoch(epoch, incarnation)``; ``GroupShared`` publishes both (the
heartbeat thread; the classic protocol never gets STALE_MEMBER_EPOCH).  Costs: O(1) per
decision, O(waiting) per :meth:`StaleCommits.due`.  Pure (time is the ``now`` given);
not thread-safe: the consumer's poll thread only.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class MemberEpoch:
    epoch: int  # the member epoch; -1 (or 0, joining): not a member
    incarnation: int  # counts the member's (re)joins: a rejoin is a new membership


class StaleAction(Enum):
    RETRY = "retry"
    WAIT = "wait"
    FAIL = "fail"


def after_stale_epoch(sent: MemberEpoch, now: MemberEpoch) -> StaleAction:
    """What to do with a commit sent at ``sent`` and answered STALE_MEMBER_EPOCH, the
    member being at ``now`` (module docstring)."""
    if now.incarnation != sent.incarnation or now.epoch <= 0:
        return StaleAction.FAIL
    return StaleAction.WAIT if now.epoch == sent.epoch else StaleAction.RETRY


@dataclass(frozen=True)
class _Waiting(Generic[T]):
    commit: T
    sent: MemberEpoch
    deadline: float


class StaleCommits(Generic[T]):
    """Asynchronous commits answered STALE_MEMBER_EPOCH, waiting to be retried or failed."""

    def __init__(self, max_waiting: int) -> None:
        if max_waiting < 1:
            raise ValueError(f"max_waiting must be >= 1, got {max_waiting}")
        self.max_waiting = max_waiting
        self._waiting: deque[_Waiting[T]] = deque()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, commit: T, sent: MemberEpoch, deadline: float) -> T | None:
        """Hold ``commit`` until :meth:`due` decides; returns the oldest commit held,
        to be failed, when there was no room for this one."""
        evicted = self._waiting.popleft().commit if len(self._waiting) >= self.max_waiting \
            else None
        self._waiting.append(_Waiting(commit, sent, deadline))
        return evicted

    def due(self, member: MemberEpoch, now: float) -> tuple[list[T], list[T]]:
        """The commits to send again now and those to fail (fenced, or past their
        deadline); the others keep waiting."""
        retry: list[T] = []
        failed: list[T] = []
        keep: deque[_Waiting[T]] = deque()
        for w in self._waiting:
            action = after_stale_epoch(w.sent, member)
            if action is StaleAction.RETRY:
                retry.append(w.commit)
            elif action is StaleAction.FAIL or now >= w.deadline:
                failed.append(w.commit)
            else:
                keep.append(w)
        self._waiting = keep
        return retry, failed
