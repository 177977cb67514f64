"""The safe election's last resort: which replica leads a partition whose every live
in-sync replica lost records in log recovery (see :mod:`broker.controller.state`,
"Safe election after unclean restarts").

:func:`longest_log_choice`: once every replica of the partition has reported its log
since the partition went offline, the replica with the longest log of the latest epoch
``(last_leader_epoch, log_end_offset)`` leads (ties: an uncut one, then an ISR member,
then replica order), if it is live; otherwise no one leads yet, with the reason, and the
live replicas whose report is missing or older than the outage are to be asked for a
fresh one.  Moved out of :class:`~broker.controller.state.ControllerState` unchanged
(that class is at its size limit); the state keeps the bookkeeping it reads.

Costs: O(replicas).  Thread-safety: a pure function of its arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from broker.controller.results import ReplicaLog
from broker.metadata.image import PartitionRegistration

__all__ = ["longest_log_choice"]


def longest_log_choice(key: tuple[str, int], s: PartitionRegistration, cut: set[int],
                       replica_logs: Mapping[int, Mapping[tuple[str, int], ReplicaLog]],
                       report_offset: Mapping[int, int], offline_since: int,
                       alive: Callable[[int], bool]) -> tuple[int | None, str, list[int]]:
    """(the replica to lead or None, why it waits, live brokers to ask for a report)."""
    # no report, or one from before the partition went offline (the log may have
    # grown since): each live one of them is asked for a fresh report
    missing = [r for r in s.replicas if r not in replica_logs
               or report_offset[r] < offline_since]
    if missing:
        return None, (f"in-sync replicas {sorted(set(s.isr) & cut)} lost records in "
                      f"log recovery; waiting for brokers {sorted(missing)} to report "
                      "their logs"), [r for r in missing if alive(r)]
    best: tuple[tuple[int, int, bool, bool, int], int] | None = None
    for order, r in enumerate(s.replicas):
        found = replica_logs[r].get(key)
        place = (found.last_leader_epoch, found.log_end_offset) if found else (-1, 0)
        rank = (*place, r not in cut, r in s.isr, -order)
        if best is None or rank > best[0]:
            best = (rank, r)
    assert best is not None
    chosen = best[1]
    if not alive(chosen):
        return None, (f"in-sync replicas {sorted(set(s.isr) & cut)} lost records in log "
                      f"recovery; broker {chosen} holds the longest log and is fenced"), []
    return chosen, "", []
