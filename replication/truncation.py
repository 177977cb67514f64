"""Follower truncation: where a follower must cut its log before fetching from a leader.

A replica that becomes a follower (or restarts) sends the leader OffsetsForLeaderEpoch
with its own latest epoch ``E``.  The leader answers ``(E', end)``: the largest epoch
``E' <= E`` it knows and where that epoch ends in its log (see
:meth:`replication.leader_epoch_cache.LeaderEpochCache.end_offset_for`).  This module is
the pure decision that turns the answer into a truncation offset (Kafka's
``AbstractFetcherThread.getOffsetTruncationState``):

===============================  ==========================================================
leader answer                    follower truncates to
===============================  ==========================================================
``E'`` known here as an epoch    ``min(end, own end of E', own LEO)``; done
``E'`` not in the follower's     ``min(own end of its largest epoch < E', own LEO)``; not
cache (``E' < E``)               done: ask again with the new latest epoch
undefined ``(-1, -1)``           own high watermark (not above the LEO), as Kafka does:
                                 the leader cannot vouch for anything of ours above the
                                 HW, and everything below it is committed, so it stays
                                 (dropping it would leave an ISR member without records
                                 it acknowledged); done.  A leader answers undefined
                                 only for an epoch newer than any it knows
follower has no epochs           nothing (its log is empty); done
===============================  ==========================================================

Apart from an undefined answer it never truncates to the high watermark.
:attr:`TruncationPolicy.HIGH_WATERMARK` is the pre-KIP-101 rule (truncate to the
replica's own HW whatever the leader says) kept **only for tests** that show the two
classic data-loss/divergence scenarios happen under it.

Costs: O(entries of the cache) per decision.  Pure: no I/O, thread-safe by having no state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from replication.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache

__all__ = ["EpochEndOffset", "TruncationDecision", "TruncationPolicy", "decide_truncation"]


class TruncationPolicy(enum.Enum):
    LEADER_EPOCH = "leader_epoch"
    HIGH_WATERMARK = "high_watermark"  # test-only: the old, unsafe rule


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """One partition's OffsetsForLeaderEpoch answer (error_code 0 when it carries data)."""

    leader_epoch: int
    end_offset: int
    error_code: int = 0

    @property
    def undefined(self) -> bool:
        return self.leader_epoch == UNDEFINED_EPOCH or self.end_offset == UNDEFINED_EPOCH_OFFSET


UNDEFINED_ANSWER = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@dataclass(frozen=True, slots=True)
class TruncationDecision:
    truncate_to: int      # truncate the log to this offset (>= LEO: nothing to do)
    completed: bool       # False: send OffsetsForLeaderEpoch again after truncating
    reason: str


def decide_truncation(
    answer: EpochEndOffset,
    cache: LeaderEpochCache,
    log_end_offset: int,
    log_start_offset: int,
    high_watermark: int,
    policy: TruncationPolicy = TruncationPolicy.LEADER_EPOCH,
) -> TruncationDecision:
    """The follower's truncation offset for the leader's ``answer`` (see module doc)."""
    if policy is TruncationPolicy.HIGH_WATERMARK:
        return TruncationDecision(min(high_watermark, log_end_offset), True,
                                  f"high watermark {high_watermark} (test-only policy)")
    if answer.error_code:
        raise ValueError(f"cannot truncate on an error answer (code {answer.error_code})")
    if cache.latest_epoch == UNDEFINED_EPOCH:
        return TruncationDecision(log_end_offset, True, "no local epochs")
    if answer.undefined:
        keep = max(log_start_offset, min(high_watermark, log_end_offset))
        return TruncationDecision(keep, True,
                                  "leader has no epoch at or below ours: keep to our HW")
    own_epoch, own_end = cache.end_offset_for(answer.leader_epoch, log_end_offset)
    if own_epoch == UNDEFINED_EPOCH:
        # every local epoch is newer than the leader's answer: none of it is the leader's
        return TruncationDecision(log_start_offset, True,
                                  f"all local epochs are after leader epoch {answer.leader_epoch}")
    if own_epoch != answer.leader_epoch:
        return TruncationDecision(
            min(own_end, log_end_offset), False,
            f"leader epoch {answer.leader_epoch} unknown here; end of local epoch {own_epoch}")
    return TruncationDecision(
        min(own_end, answer.end_offset, log_end_offset), True,
        f"epoch {own_epoch} ends at {answer.end_offset} on the leader, {own_end} here")
