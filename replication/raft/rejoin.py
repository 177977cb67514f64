"""RejoinMark: when an observer (a voter whose disk was lost) may vote again.

The observer (``KRaftReplica(observer=True)``) fetches from the leader without being
counted.  When an answer brings no entries it is at the leader's log end: it marks that
offset in that epoch.  The leader, seeing an observer at its log end with nothing
uncommitted, appends a LeaderChange entry there.  Once the high watermark the observer
learns is past its mark (same epoch), an entry appended after it caught up was committed
by a majority *without* it: that leader was a real one then, and the observer's log
holds every entry committed before (it is a prefix of that leader's log up to the high
watermark).  A leader cut off from its majority cannot move the high watermark, so an
observer that reached only it never turns voter through it.  A new epoch drops the mark.

Costs: O(1) per Fetch answer.  Not thread-safe: owned by one replica.
"""

from __future__ import annotations

__all__ = ["RejoinMark"]


class RejoinMark:
    def __init__(self) -> None:
        self._mark: tuple[int, int] | None = None  # (epoch, log end) at the leader's end

    def caught_up(self, epoch: int, got_entries: bool, log_end_offset: int,
                  high_watermark: int) -> bool:
        """After a Fetch answer was applied: True once the observer may vote again."""
        mark = self._mark
        if mark is not None and mark[0] == epoch and high_watermark > mark[1]:
            self._mark = None
            return True
        if not got_entries and (mark is None or mark[0] != epoch):
            self._mark = (epoch, log_end_offset)
        return False
