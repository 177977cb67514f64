"""The idempotent producer against the fake broker (real sockets, real wire protocol).

The fake applies the broker's producer-state rules (tests/clients/producer/fake_producer_state.py):
duplicates answered with their original offset, OUT_OF_ORDER_SEQUENCE_NUMBER on gaps,
INVALID_PRODUCER_EPOCH for old epochs, UNKNOWN_PRODUCER_ID without state.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from clients.memory.buffer_pool import BufferPool
from clients.producer.accumulator import RecordAccumulator
from clients.producer.idempotence import (
    IdempotenceManager,
    IdempotenceUnsupportedError,
    ProducerFencedError,
    SequenceAbandonedError,
)
from clients.producer.producer import Producer
from clients.protocol.errors import ErrorCode, InvalidConfigError
from clients.protocol.topics import TopicPartition
from clients.records.batch import iter_batches
from clients.records.record import build_batch
from tests.clients.fake_broker import FakeCluster, one_leader_metadata

T0 = TopicPartition("t", 0)
# many small batches (no growth behind a backlog), so that faults hit several of them
FAST: dict[str, Any] = {"linger_ms": 0, "batch_size": 256, "batch_max_size": 0,
                        "retry_backoff_ms": 5}  # fmt: skip


def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        time.sleep(0.005)


def values(n: int) -> list[bytes]:
    return [b"%04d" % i + bytes(60) for i in range(n)]


def headers(cluster: FakeCluster, tp: TopicPartition) -> list[tuple[int, int, int, int]]:
    """(producer_id, epoch, base_sequence, record_count) of each stored batch."""
    out = []
    for b in cluster.batches(tp):
        h = next(iter_batches(b))[1]
        out.append((h.producer_id, h.producer_epoch, h.base_sequence, h.record_count))
    return out


def test_batches_carry_producer_id_epoch_and_contiguous_sequences(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, linger_ms=0, batch_size=512) as prod:
        assert prod.enable_idempotence and prod.acks == -1
        futures = [prod.send("t", v, partition=0) for v in values(30)]
        bulk = prod.send_bulk("t", values(40), partition=0).result(20)  # closed before drain
        assert [f.result(20).offset for f in futures] == list(range(30))
        assert bulk.base_offsets[0] == 30
        assert prod.metrics()["producer_id"] == 1000
    stored = headers(cluster, T0)
    assert {(pid, epoch) for pid, epoch, _, _ in stored} == {(1000, 0)}
    expected = 0
    for _, _, seq, count in stored:
        assert seq == expected
        expected += count
    assert expected == 70
    assert [r.value for r in cluster.records(T0)] == values(30) + values(40)


def test_retry_after_dropped_responses_is_not_duplicated(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    sent = values(120)
    with Producer(cluster.bootstrap, debug_drop_response_ratio=0.3, debug_drop_seed=7,
                  **FAST) as prod:  # fmt: skip
        futures = [prod.send("t", v, partition=0) for v in sent]
        assert [f.result(30).offset for f in futures] == list(range(120))
        metrics = prod.metrics()
    assert metrics["debug_dropped_responses"] > 0 and metrics["retries"] > 0
    assert metrics["duplicates"] <= metrics["debug_dropped_responses"]
    assert [r.value for r in cluster.records(T0)] == sent  # each once, in order
    assert cluster.topics["t"][0].producers.duplicates > 0  # the broker did see retries


def test_without_idempotence_dropped_responses_duplicate(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    sent = values(40)
    with Producer(cluster.bootstrap, enable_idempotence=False, debug_drop_response_ratio=0.3,
                  debug_drop_seed=7, **FAST) as prod:  # fmt: skip
        assert not prod.enable_idempotence
        for v in sent:  # one request each: 40 draws of the seeded generator
            prod.send("t", v, partition=0).result(30)
        dropped = prod.metrics()["debug_dropped_responses"]
    stored = [r.value for r in cluster.records(T0)]
    assert dropped > 0 and len(stored) > len(sent)  # at-least-once: duplicates
    assert set(stored) == set(sent)
    assert all(h[0] == -1 for h in headers(cluster, T0))  # no producer id


def test_lost_connection_after_append_is_not_duplicated(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    sent = values(40)
    with Producer(cluster.bootstrap, **FAST) as prod:
        prod.send("t", b"warm-up", partition=0).result(20)
        cluster.lose_next_produce_responses(3)
        futures = [prod.send("t", v, partition=0) for v in sent]
        assert [f.result(30).offset for f in futures] == list(range(1, 41))
    assert [r.value for r in cluster.records(T0)] == [b"warm-up", *sent]


def test_five_in_flight_and_a_failure_in_the_middle_keep_order(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    sent = values(30)
    # max_request_size fits one batch: five requests of one batch each in flight
    with Producer(cluster.bootstrap, max_request_size=300, **FAST) as prod:
        prod.send("t", b"warm-up", partition=0).result(20)
        cluster.hold_produce()
        # the third request fails (not appended); the two after it then meet a gap
        cluster.inject_produce_errors(T0, ErrorCode.NOT_LEADER_OR_FOLLOWER, times=1, skip=2)
        futures = [prod.send("t", v, partition=0) for v in sent]
        wait_until(lambda: prod.metrics()["in_flight_batches"] == 5)
        cluster.release_produce()
        assert [f.result(30).offset for f in futures] == list(range(1, 31))
        metrics = prod.metrics()
    assert metrics["retries"] >= 3  # the failed batch and the two out-of-order ones
    assert metrics["epoch_bumps"] == 0
    assert [r.value for r in cluster.records(T0)] == [b"warm-up", *sent]


def test_fenced_producer_fails_its_futures_and_later_sends(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    prod = Producer(cluster.bootstrap, **FAST)
    try:
        prod.send("t", b"a", partition=0).result(20)
        pid = prod.metrics()["producer_id"]
        # a newer epoch of the same producer id writes to the partition
        cluster.append(T0, build_batch([(None, b"other", 0, ())], producer_id=pid,
                                       producer_epoch=1, base_sequence=0))  # fmt: skip
        future = prod.send("t", b"b", partition=0)
        with pytest.raises(ProducerFencedError) as info:
            future.result(20)
        assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
        with pytest.raises(ProducerFencedError):
            prod.send("t", b"c", partition=0)
        with pytest.raises(ProducerFencedError):
            prod.send_bulk("t", [b"d"], partition=0)
        prod.flush(timeout_s=20)  # errors surface on futures, not from flush
        assert prod.metrics()["fenced"] is True
    finally:
        prod.close(timeout_s=5)
    assert [r.value for r in cluster.records(T0)] == [b"a", b"other"]


def test_unknown_producer_id_bumps_the_epoch_and_delivers(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, **FAST) as prod:
        prod.send("t", b"a", partition=0).result(20)
        cluster.forget_producer_state(T0)  # e.g. its batches were deleted by retention
        assert prod.send("t", b"b", partition=0).result(20).offset == 1
        assert prod.send("t", b"c", partition=0).result(20).offset == 2
        metrics = prod.metrics()
    assert metrics["epoch_bumps"] == 1 and metrics["producer_epoch"] == 1
    assert [r.value for r in cluster.records(T0)] == [b"a", b"b", b"c"]
    assert [h[1:3] for h in headers(cluster, T0)] == [(0, 0), (1, 0), (1, 1)]


def test_unknown_outcome_before_a_bump_is_abandoned_not_duplicated(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, **FAST) as prod:
        prod.send("t", b"a", partition=0).result(20)
        # b is appended but its response is lost, and the broker forgets the producer:
        # its retry meets UNKNOWN_PRODUCER_ID; resending it under a new epoch could
        # duplicate it, so it fails instead
        cluster.lose_next_produce_responses(1, forget_producers=True)
        with pytest.raises(SequenceAbandonedError, match="may or may not be in the log"):
            prod.send("t", b"b", partition=0).result(20)
        assert prod.send("t", b"c", partition=0).result(20).offset == 2
        assert prod.metrics()["epoch_bumps"] == 1
    assert [r.value for r in cluster.records(T0)] == [b"a", b"b", b"c"]


def test_non_retriable_failure_leaves_a_gap_repaired_by_a_bump(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster.bootstrap, **FAST) as prod:
        prod.send("t", b"a", partition=0).result(20)
        cluster.inject_produce_errors(T0, ErrorCode.INVALID_RECORD, times=1)
        failed = prod.send("t", b"bad", partition=0)
        with pytest.raises(Exception) as info:
            failed.result(20)
        assert getattr(info.value, "code", None) == ErrorCode.INVALID_RECORD
        later = [prod.send("t", v, partition=0) for v in values(5)]
        assert [f.result(20).offset for f in later] == list(range(1, 6))
        assert prod.metrics()["epoch_bumps"] == 1
    assert [r.value for r in cluster.records(T0)] == [b"a", *values(5)]


def test_broker_without_init_producer_id_gives_a_precise_error(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    cluster.serve_init_producer_id = False
    prod = Producer(cluster.bootstrap, **FAST)
    try:
        with pytest.raises(IdempotenceUnsupportedError, match="enable_idempotence=False"):
            prod.send("t", b"x", partition=0).result(20)
        with pytest.raises(IdempotenceUnsupportedError):
            prod.send("t", b"y", partition=0)
    finally:
        prod.close(timeout_s=5)
    with Producer(cluster.bootstrap, enable_idempotence=False, **FAST) as plain:
        assert plain.send("t", b"z", partition=0).result(20).offset == 0


def test_init_producer_id_retriable_errors_are_retried(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    cluster.inject_init_producer_id_errors(ErrorCode.COORDINATOR_NOT_AVAILABLE, times=2)
    with Producer(cluster.bootstrap, **FAST) as prod:
        assert prod.send("t", b"x", partition=0).result(20).offset == 0


def test_idempotence_config_rules(cluster: FakeCluster) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"acks": 1}, "acks must be 'all'"),
        ({"acks": 0}, "acks must be 'all'"),
        ({"retries": 0}, "retries must be > 0"),
        ({"max_in_flight_requests_per_connection": 6}, "<= 5"),
    ]
    for bad, match in cases:
        with pytest.raises(InvalidConfigError, match=match):
            Producer(cluster.bootstrap, enable_idempotence=True, **bad)
    for bad_ratio in (-0.1, 1.0, "x"):
        with pytest.raises(InvalidConfigError, match="debug_drop_response_ratio"):
            Producer(cluster.bootstrap, debug_drop_response_ratio=bad_ratio)  # type: ignore[arg-type]
    # unset: on unless an explicit setting conflicts (Kafka 3's rule)
    with Producer(cluster.bootstrap, acks=1) as p1:
        assert not p1.enable_idempotence and p1.acks == 1
    with Producer(cluster.bootstrap, max_in_flight_requests_per_connection=10) as p2:
        assert not p2.enable_idempotence and p2.acks == -1
    with Producer(cluster.bootstrap) as p3:
        assert p3.enable_idempotence and p3.metrics()["idempotent"]


# ------------------------------------------------------------------ accumulator with a manager


def test_accumulator_stamps_at_drain_and_requeues_in_sequence_order() -> None:
    md = one_leader_metadata()
    manager = IdempotenceManager(5)
    with BufferPool.create(16 * 256, 256) as pool:
        acc = RecordAccumulator(pool, batch_size=256, linger_ms=0, retry_backoff_ms=0,
                                delivery_timeout_ms=60_000, idempotence=manager)  # fmt: skip
        for i in range(12):
            acc.append(T0, 0, None, b"%02d" % i + bytes(60), (), 0)
        assert acc.ready(md, 0)[0] == set()  # no producer id yet
        manager.set_producer_id(1000, 0)
        drained = [acc.drain(md, {0}, 300, 0)[0] for _ in range(3)]  # room for one batch
        assert [len(d) for d in drained] == [1, 1, 1]
        batches = [d[0] for d in drained]
        sequences = [b.base_sequence for b in batches]
        assert sequences[0] == 0 and sequences == sorted(sequences)
        for b in batches:
            header = next(iter_batches(b.wire()))[1]  # CRC checked
            assert (header.producer_id, header.producer_epoch) == (1000, 0)
            assert header.base_sequence == b.base_sequence
        # they come back from separate requests, last one first
        for b in reversed(batches):
            manager.on_attempt_done(T0)
            manager.on_retry(T0, b.base_sequence)
            acc.reenqueue([b], 0)
        queued = list(acc._batches[T0])
        assert queued[:3] == batches and queued[3].base_sequence == -1
        retried = acc.drain(md, {0}, 1 << 20, 0)[0]
        assert retried == batches[:1]  # alone, first in line, same sequence
        assert acc.ready(md, 0)[0] == set()  # the next retry waits for it
        for i in range(1, 4):  # each acked retry lets the next one go alone
            done = retried[0]
            manager.on_attempt_done(T0)
            manager.on_acked(T0, done.base_sequence, 0, done.record_count, retried=True)
            if i < 3:
                retried = acc.drain(md, {0}, 1 << 20, 0)[0]
                assert retried == [batches[i]]
        fresh = acc.drain(md, {0}, 1 << 20, 0)[0]  # new batches travel together, <= 5
        assert 1 < len(fresh) <= 5 and all(b.attempts == 0 for b in fresh)
        assert [b.base_sequence for b in fresh] == sorted(b.base_sequence for b in fresh)
        assert not acc.drain(md, {0}, 1 << 20, 0)  # 5 batches in flight: none more
        for b in acc.undrained_batches() + retried + fresh:
            b.complete(-1, -1, RuntimeError("test"))
            acc.deallocate(b)
        pool.check_accounting()
