"""The two classic HW-truncation failures (KIP-101; seed 004, HW / leader-epoch section).

Each scenario is played step by step on real logs and Partitions, once with the leader-epoch
truncation the replicas use, once with the old rule (truncate to the high watermark,
:attr:`TruncationPolicy.HIGH_WATERMARK`, test-only).  The epoch rule keeps the
acknowledged record / identical logs; the HW rule loses the record / diverges.

1. *Follower restarts and truncates to its HW, then the leader dies.*  B has both records
   but its HW (1) lags the leader's (2): the HW reaches a follower one fetch later.  B
   restarts; the old rule truncates it to 1; A dies; B leads and writes m2 at offset 1: the
   acknowledged m1 is gone from the leader (and A, returning with HW 2, now diverges).
2. *Both replicas crash and come back with divergent tails.*  A has [m0, m1] on disk; B lost
   m1 (not flushed).  B returns first and leads epoch 1, writing m2 at offset 1.  A returns
   with HW 2: the old rule keeps its m1 at offset 1, so A and B differ forever.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.protocol.errors import OffsetOutOfRangeError
from replication.partition import Partition
from replication.truncation import TruncationPolicy
from storage.config import LogConfig
from storage.log.log import Log
from tests.replication.helpers import batch, values

CONFIG = LogConfig(segment_bytes=4096)


def open_replica(root: Path, broker_id: int, high_watermark: int = 0) -> Partition:
    log = Log.open(root / f"b{broker_id}" / "t-0", CONFIG, clock_ms=lambda: 0)
    p = Partition("t", 0, log, broker_id)
    p.high_watermark = min(high_watermark, log.log_end_offset)  # replication-offset-checkpoint
    return p


def crash_and_restart(root: Path, p: Partition, *, lose_unflushed: bool) -> Partition:
    """Kill the replica: unflushed bytes are lost if the disk loses them; reopen."""
    hw = p.high_watermark
    rp = p.log.recovery_point
    if lose_unflushed:
        p.log.truncate_to(rp)  # what a power loss leaves on disk
    p.log.abandon()
    log = Log.open(root / f"b{p.local_broker_id}" / "t-0", CONFIG, recovery_point=rp,
                   had_clean_shutdown=False, clock_ms=lambda: 0)
    restarted = Partition("t", 0, log, p.local_broker_id)
    restarted.high_watermark = min(hw, log.log_end_offset)
    return restarted


def become_follower(leader: Partition, follower: Partition, policy: TruncationPolicy) -> None:
    follower.make_follower(leader.local_broker_id, leader.leader_epoch, [1, 2],
                           leader.partition_epoch)
    for _ in range(10):
        answer = leader.last_offset_for_leader_epoch(leader.leader_epoch,
                                                     follower.truncation_request_epoch)
        if follower.truncate_on_leader_answer(answer, policy).completed:
            return
    raise AssertionError("truncation did not complete")


def fetch(leader: Partition, follower: Partition, *, apply_hw: bool = True) -> None:
    """One follower fetch; a fetch past the leader's LEO truncates to it (Kafka)."""
    offset = follower.log_end_offset
    try:
        data = leader.read_records(offset, 1 << 20, for_follower=True).read_bytes()
    except OffsetOutOfRangeError:
        follower.truncate_to(leader.log_end_offset)
        return
    leader.update_follower_fetch(follower.local_broker_id, offset, now_ms=0)
    hw = leader.high_watermark if apply_hw else follower.high_watermark
    follower.append_records_as_follower(data, hw)


def scenario_follower_restart_then_leader_dies(root: Path, policy: TruncationPolicy
                                               ) -> tuple[Partition, Partition, int]:
    a, b = open_replica(root, 1), open_replica(root, 2)
    a.make_leader(0, [1, 2], [1, 2], partition_epoch=0)
    become_follower(a, b, policy)
    a.append_records_as_leader(batch(b"m0"))
    fetch(a, b)
    a.append_records_as_leader(batch(b"m1"))
    fetch(a, b)                       # B has m1; leader HW 1
    fetch(a, b, apply_hw=False)       # leader HW 2: m1 acknowledged; B's answer is lost
    assert a.acked_by_isr(2) and b.high_watermark == 1 and b.log_end_offset == 2
    acked_offset = 1
    b = crash_and_restart(root, b, lose_unflushed=False)
    become_follower(a, b, policy)     # B restarts and truncates before fetching again
    a.log.abandon()                   # A dies; the controller elects B (in the ISR)
    b.make_leader(1, [1, 2], [2], partition_epoch=1)
    b.append_records_as_leader(batch(b"m2"))
    a = open_replica(root, 1, high_watermark=2)
    become_follower(b, a, policy)
    fetch(b, a)
    fetch(b, a)
    return a, b, acked_offset


def scenario_both_crash_divergent_tails(root: Path, policy: TruncationPolicy
                                        ) -> tuple[Partition, Partition]:
    a, b = open_replica(root, 1), open_replica(root, 2)
    a.make_leader(0, [1, 2], [1, 2], partition_epoch=0)
    become_follower(a, b, policy)
    a.append_records_as_leader(batch(b"m0"))
    fetch(a, b)
    b.log.flush()                     # m0 is on B's disk
    a.append_records_as_leader(batch(b"m1"))
    a.log.flush()                     # A's disk has both
    fetch(a, b)
    fetch(a, b)                       # A's HW reaches 2; B never flushed m1
    assert a.high_watermark == 2
    b = crash_and_restart(root, b, lose_unflushed=True)
    a = crash_and_restart(root, a, lose_unflushed=True)
    assert values(b.log) == [(0, b"m0")] and a.log_end_offset == 2
    b.make_leader(1, [1, 2], [2, 1], partition_epoch=1)   # B returns first and leads
    b.append_records_as_leader(batch(b"m2"))
    become_follower(b, a, policy)
    fetch(b, a)
    b.append_records_as_leader(batch(b"m3"))
    fetch(b, a)
    fetch(b, a)
    return a, b


def test_scenario1_leader_epoch_keeps_the_acknowledged_record(tmp_path: Path) -> None:
    a, b, acked = scenario_follower_restart_then_leader_dies(tmp_path,
                                                             TruncationPolicy.LEADER_EPOCH)
    assert (acked, b"m1") in values(b.log)
    assert values(a.log) == values(b.log) == [(0, b"m0"), (1, b"m1"), (2, b"m2")]


def test_scenario1_fails_under_high_watermark_truncation(tmp_path: Path) -> None:
    a, b, acked = scenario_follower_restart_then_leader_dies(tmp_path,
                                                             TruncationPolicy.HIGH_WATERMARK)
    # the leader lost the acknowledged record; A keeps it at the offset where B has m2
    assert (acked, b"m1") not in values(b.log)
    assert values(b.log) == [(0, b"m0"), (1, b"m2")]
    assert values(a.log) == [(0, b"m0"), (1, b"m1")]


def test_scenario2_leader_epoch_replicas_converge(tmp_path: Path) -> None:
    a, b = scenario_both_crash_divergent_tails(tmp_path, TruncationPolicy.LEADER_EPOCH)
    assert values(a.log) == values(b.log) == [(0, b"m0"), (1, b"m2"), (2, b"m3")]
    assert a.leader_epoch_cache.entries == b.leader_epoch_cache.entries


def test_scenario2_fails_under_high_watermark_truncation(tmp_path: Path) -> None:
    a, b = scenario_both_crash_divergent_tails(tmp_path, TruncationPolicy.HIGH_WATERMARK)
    assert values(a.log) != values(b.log)
    assert values(a.log)[1] == (1, b"m1") and values(b.log)[1] == (1, b"m2")


@pytest.mark.parametrize("policy", list(TruncationPolicy))
def test_policies_agree_when_nothing_fails(tmp_path: Path, policy: TruncationPolicy) -> None:
    a, b = open_replica(tmp_path, 1), open_replica(tmp_path, 2)
    a.make_leader(0, [1, 2], [1, 2])
    become_follower(a, b, policy)
    for v in (b"x", b"y"):
        a.append_records_as_leader(batch(v))
        fetch(a, b)
    fetch(a, b)
    assert values(a.log) == values(b.log)
