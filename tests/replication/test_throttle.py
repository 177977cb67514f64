"""The follower's replication throttle: a token bucket of ``rate`` bytes a second, and
the fetch session leaving replicas outside their ISR out of its Fetch while the bucket is
empty (in-sync replicas are never held back)."""

from __future__ import annotations

from pathlib import Path

from clients.protocol.topics import TopicPartition
from replication.follower_fetch import FollowerFetchSession
from replication.throttle import ReplicationThrottle
from tests.replication.helpers import batch, make_partition


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def test_the_bucket_refills_at_the_rate_and_saves_at_most_a_second() -> None:
    clock = Clock()
    t = ReplicationThrottle(1000, clock)
    assert not t.exceeded() and t.max_bytes(1 << 20) == 1000
    t.record(1500)  # one answer may overshoot (a whole batch)
    assert t.exceeded() and t.delay_ms() == 501
    clock.now += 500
    assert t.exceeded()
    clock.now += 2
    assert not t.exceeded() and t.max_bytes(1 << 20) == 2
    clock.now += 10_000
    assert t.max_bytes(1 << 20) == 1000  # never more than a second's worth
    off = ReplicationThrottle(0, clock)
    off.record(10**9)
    assert not off.exceeded() and off.max_bytes(7) == 7 and off.delay_ms() == 0


def _answer(key: TopicPartition, records: bytes) -> dict[str, object]:
    return {"error_code": 0, "responses": [{"name": key.topic, "partitions": [{
        "partition_index": key.partition, "error_code": 0, "high_watermark": 2,
        "log_start_offset": 0, "records": records, "diverging_epoch": None}]}]}


def test_only_replicas_outside_their_isr_are_held_back(tmp_path: Path) -> None:
    clock = Clock()
    throttle = ReplicationThrottle(100, clock)
    session = FollowerFetchSession(2, 1, 1 << 20, 100, clock_ms=clock, throttle=throttle)
    catching_up = make_partition(tmp_path, 2, name="t-0")
    catching_up.make_follower(1, 0, [1, 2], 1, isr=[1])
    in_sync = make_partition(tmp_path / "other", 2, name="t-0")
    in_sync.topic = "u"
    in_sync.make_follower(1, 0, [1, 2], 1, isr=[1, 2])
    for p in (catching_up, in_sync):
        session.add(p)
        session.states[TopicPartition(p.topic, 0)].truncating = False
    first = session.fetch_request()
    assert first is not None
    sizes = {t["name"]: t["partitions"][0]["partition_max_bytes"]  # type: ignore[index]
             for t in first.body["topics"]}
    assert sizes == {"t": 100, "u": 1 << 20}  # the throttled one: the tokens left
    session.on_fetch_response(first, _answer(TopicPartition("t", 0),
                                             batch(b"x" * 200, b"y" * 200, epoch=0)))
    assert catching_up.log_end_offset == 2 and throttle.exceeded()
    held = session.fetch_request()
    assert held is not None and [t["name"] for t in held.body["topics"]] == ["u"]
    session.remove(TopicPartition("u", 0))
    assert session.fetch_request() is None and session.throttle_delay_ms() > 0
    clock.now += session.throttle_delay_ms()
    again = session.fetch_request()
    assert again is not None and [t["name"] for t in again.body["topics"]] == ["t"]


def test_a_new_rate_applies_from_now_without_a_restart() -> None:
    """The dynamic ``follower.replication.throttled.rate``: lowered, raised, lifted (0)
    and set again on a running throttle (injected clock)."""
    clock = Clock()
    t = ReplicationThrottle(1000, clock)
    t.record(1000)
    assert t.exceeded() and t.delay_ms() == 1
    clock.now += 100  # 100 tokens earned at the old rate
    t.set_rate(50)  # lowered: at most one second of the new rate is kept
    assert t.rate == 50 and t.max_bytes(1 << 20) == 50
    t.record(50)
    assert t.exceeded() and t.delay_ms() == 20  # refills at 50 bytes/s now
    t.set_rate(10_000)  # raised: refills at the new rate from now on
    clock.now += 10
    assert t.max_bytes(1 << 20) == 100
    t.record(10**6)
    assert t.exceeded()
    t.set_rate(0)  # lifted: nothing is held back, whatever was fetched
    assert not t.exceeded() and t.max_bytes(7) == 7 and t.delay_ms() == 0
    clock.now += 5_000
    t.set_rate(2000)  # switched on again: starts with a second's worth
    assert not t.exceeded() and t.max_bytes(1 << 20) == 2000
