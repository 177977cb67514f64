"""Batches grow under a backlog (KIP-782's batch.max.size); a batch refused as too large
(MESSAGE_TOO_LARGE) is split and resent, its futures kept (clients.producer.split)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from clients.memory.buffer_pool import BufferPool
from clients.producer.accumulator import RecordAccumulator
from clients.producer.batch import BulkTracker, ProducerBatch
from clients.producer.compression import compression_codec, compressor
from clients.producer.config import resolve_batch_max_size
from clients.producer.future import ProducerFuture, RecordFuture
from clients.producer.idempotence import IdempotenceManager
from clients.producer.producer import Producer
from clients.producer.split import can_split, split_batch
from clients.protocol.errors import InvalidConfigError, MessageTooLargeError
from clients.protocol.topics import TopicPartition
from clients.records.batch import iter_batches, read_header
from clients.records.bulk_decode import decode_batch_bulk
from clients.types import BulkResult, RecordMetadata
from tests.clients.fake_broker import FakeCluster, one_leader_metadata

T0 = TopicPartition("t", 0)
LIMIT = 2048  # the topic's max.message.bytes in the end-to-end tests


@pytest.fixture
def pool() -> Iterator[BufferPool]:
    with BufferPool.create(64 * 512, 512) as p:
        yield p


# ------------------------------------------------------------------ growth


def test_batch_max_size_setting() -> None:
    assert resolve_batch_max_size(None, 16384, 1 << 20, 32 << 20) == 256 * 1024
    assert resolve_batch_max_size(None, 1024, 1 << 20, 32 << 20) == 16 * 1024  # 16 x
    assert resolve_batch_max_size(None, 16384, 100_000, 32 << 20) == 100_000  # request cap
    assert resolve_batch_max_size(None, 16384, 1 << 20, 512 * 1024) == 128 * 1024  # pool / 4
    assert resolve_batch_max_size(None, 16384, 1 << 20, 32768) == 16384  # never below
    assert resolve_batch_max_size(0, 16384, 1 << 20, 32 << 20) == 16384  # off
    assert resolve_batch_max_size(65536, 16384, 1 << 20, 32 << 20) == 65536
    with pytest.raises(InvalidConfigError, match="batch_max_size must be an int >= 16384"):
        resolve_batch_max_size(1000, 16384, 1 << 20, 32 << 20)


def test_a_new_batch_grows_only_behind_a_backlog(pool: BufferPool) -> None:
    acc = RecordAccumulator(pool, batch_size=512, linger_ms=50, retry_backoff_ms=20,
                            delivery_timeout_ms=10_000, batch_max_size=2048)  # fmt: skip
    for _ in range(40):
        acc.append(T0, 0, None, bytes(100), (), 0)
    sizes = [len(b.memory) for b in acc._batches[T0]]
    # two batch_size batches queue first; from then on, new batches wait behind them
    assert sizes[:2] == [512, 512] and set(sizes[2:]) == {2048}
    assert sum(b.record_count for b in acc._batches[T0]) == 40
    drained = acc.drain(one_leader_metadata(), {0}, 1 << 20, 0)[0]
    assert len(acc._batches[T0]) <= 1
    acc.append(T0, 0, None, bytes(100), (), 0)  # the queue is short again: no growth
    assert len(acc._batches[T0][-1].memory) in (512, 2048)
    for b in [*drained, *acc.undrained_batches()]:
        b.complete(-1, -1, RuntimeError("test"))
        acc.deallocate(b)
    pool.check_accounting()


def test_growth_never_waits_for_memory(pool: BufferPool) -> None:
    acc = RecordAccumulator(pool, batch_size=512, linger_ms=50, retry_backoff_ms=20,
                            delivery_timeout_ms=10_000, batch_max_size=2048)  # fmt: skip
    held = [pool.allocate(512, 0) for _ in range(61)]  # 3 slots left, none 4 in a row free
    for _ in range(12):  # three batches of 512: the third cannot grow, and does not wait
        acc.append(T0, 0, None, bytes(100), (), 0)
    assert [len(b.memory) for b in acc._batches[T0]] == [512, 512, 512]
    for b in acc.undrained_batches():
        b.complete(-1, -1, RuntimeError("test"))
        acc.deallocate(b)
    for buf in held:
        pool.deallocate(buf)
    pool.check_accounting()


# ------------------------------------------------------------------ split, unit


def _closed_batch(pool: BufferPool, count: int, codec: str = "none",
                  sequence: int = -1) -> tuple[ProducerBatch, list[RecordFuture]]:  # fmt: skip
    code = compression_codec(codec)
    batch = ProducerBatch(T0, pool.allocate(4096, 0), 5.0, code, compressor(code))
    futures = []
    for i in range(count):
        headers = [("h", b"%d" % i)] if i % 3 == 0 else []
        future = batch.try_append(1000 + i, None if i == 1 else b"k%d" % i,
                                  b"value %d " % i * 4, headers)  # fmt: skip
        assert future is not None
        futures.append(future)
    if sequence >= 0:
        batch.set_producer_state(77, 3, sequence)
    batch.close()
    return batch, futures


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_split_keeps_records_order_sequences_and_futures(pool: BufferPool, codec: str) -> None:
    batch, futures = _closed_batch(pool, 9, codec, sequence=2**31 - 4)
    before = decode_batch_bulk(batch.wire()).to_records()
    parts = split_batch(batch, 512)
    assert len(parts) >= 2 and all(p.record_count <= 5 for p in parts)  # at most half
    after = []
    sequence = 2**31 - 4
    for part in parts:
        part.close()
        header = read_header(part.wire())
        assert header.compression == read_header(batch.wire()).compression
        assert (header.producer_id, header.producer_epoch) == (77, 3)
        assert header.base_sequence == sequence  # the range, cut in order (and wrapped)
        sequence = (sequence + part.record_count) % 2**31
        assert part.buffer is None and part.created_ms == 5.0 and part.full
        after += [(r.timestamp, r.key, r.value, r.headers)
                  for r in decode_batch_bulk(part.wire()).to_records()]  # fmt: skip
    assert after == [(r.timestamp, r.key, r.value, r.headers) for r in before]
    # the futures handed out before the split follow their records into the parts
    assert not any(f.done() for f in futures)
    bases = [100, 500, 900, 1300, 1700][: len(parts)]
    for part, base in zip(parts, bases, strict=False):
        assert not futures[0].done()
        part.complete(base, -1, None)
    expected, index = [], 0
    for part, base in zip(parts, bases, strict=False):
        expected += [base + i for i in range(part.record_count)]
        index += part.record_count
    assert [f.result(0).offset for f in futures] == expected
    assert futures[4].result(0) == RecordMetadata("t", 0, expected[4], 1004)
    assert batch.buffer is not None
    pool.deallocate(batch.buffer)


def test_a_failed_part_fails_only_its_records_and_parts_split_again(pool: BufferPool) -> None:
    batch, futures = _closed_batch(pool, 8)
    first, second = split_batch(batch, 4096)
    assert (first.record_count, second.record_count) == (4, 4)
    first.close()
    one, two = split_batch(first, 4096)  # a part refused again splits again
    seen: list[str] = []
    futures[7].add_done_callback(lambda f: seen.append(type(f.exception(0)).__name__))
    one.complete(10, -1, None)
    second.complete(-1, -1, MessageTooLargeError("still too large"))
    assert not futures[0].done() and seen == []  # "two" is still out
    two.complete(20, -1, None)
    assert [f.result(0).offset for f in futures[:4]] == [10, 11, 20, 21]
    for f in futures[4:]:
        assert isinstance(f.exception(0), MessageTooLargeError)
    assert seen == ["MessageTooLargeError"]  # once, when the last part was done
    assert can_split(two) and not can_split(batch)  # a split batch is not split twice
    assert batch.buffer is not None
    pool.deallocate(batch.buffer)


def test_idempotence_takes_the_parts_in_place_of_the_batch() -> None:
    manager = IdempotenceManager(5)
    manager.set_producer_id(9, 0)
    sequences = [manager.assign_sequence(T0, n) for n in (10, 6, 4)]
    assert sequences == [0, 10, 16]
    manager.on_split(T0, 10, [10, 13])
    state = manager.partition(T0)
    assert state is not None
    assert list(state.unresolved) == [0, 10, 13, 16] and state.retrying == {10, 13}
    assert state.next_sequence == 20  # later batches keep their sequences


# ------------------------------------------------------------------ end to end


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_topic_limit_below_the_batch_size_loses_and_duplicates_nothing(
    cluster: FakeCluster, idempotent: bool,
) -> None:
    cluster.create_topic("t", 1)
    cluster.topic_configs["t"] = {"max.message.bytes": str(LIMIT)}
    values = [b"%05d" % i + bytes(95) for i in range(300)]
    with Producer(cluster.bootstrap, linger_ms=20, batch_size=16384,
                  enable_idempotence=idempotent, retry_backoff_ms=1) as producer:  # fmt: skip
        futures = [producer.send("t", v, key=b"k%d" % i) for i, v in enumerate(values)]
        producer.flush()
        metas = [f.result(0) for f in futures]
        assert producer.metrics()["split_batches"] > 0
    assert cluster.too_large_answers > 0
    assert [r.value for r in cluster.records(T0)] == values  # each once, in order
    assert [m.offset for m in metas] == list(range(300))
    assert all(len(b) <= LIMIT for b in cluster.batches(T0))
    for batch in cluster.batches(T0):
        assert next(iter_batches(batch))[1].record_count >= 1


def test_one_record_above_the_topic_limit_fails_alone(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    cluster.topic_configs["t"] = {"max.message.bytes": str(LIMIT)}
    with Producer(cluster.bootstrap, linger_ms=0, retry_backoff_ms=1,
                  delivery_timeout_ms=20_000, request_timeout_ms=5_000) as producer:  # fmt: skip
        big = producer.send("t", bytes(LIMIT + 100))
        small = producer.send("t", b"fits")
        with pytest.raises(MessageTooLargeError):
            big.result(20)
        assert small.result(20).offset == 0
    assert [r.value for r in cluster.records(T0)] == [b"fits"]


# ------------------------------------------------------------------ send_bulk


def _bulk_batch(pool: BufferPool, n: int) -> tuple[ProducerBatch, BulkTracker,
                                                   ProducerFuture[BulkResult]]:
    """A closed batch of ``n`` records queued as chunk 1 of a two-chunk ``send_bulk``."""
    batch, _ = _closed_batch(pool, n)
    future: ProducerFuture[BulkResult] = ProducerFuture()
    tracker = BulkTracker("t", future, 2)
    slot = tracker.slot(1)
    slot.partition, slot.record_count = 0, n
    batch.bulk, batch.result = (tracker, slot), None
    first = tracker.slot(0)
    first.partition, first.record_count = 0, 3
    return batch, tracker, future


def test_a_bulk_batch_splits_into_entries_of_the_bulk_result(pool: BufferPool) -> None:
    batch, tracker, future = _bulk_batch(pool, 8)
    assert can_split(batch)
    first, second = split_batch(batch, 4096)
    assert first.bulk is not None and second.bulk is not None and first.result is None
    first.close()
    one, two = split_batch(first, 4096)  # a part refused again splits again
    assert (one.record_count, two.record_count, second.record_count) == (2, 2, 4)
    for part, base in ((two, 12), (second, 14), (one, 10)):
        assert not future.done()
        part.complete(base, -1, None)
    assert not future.done()  # chunk 0 is still out
    tracker.batch_done(tracker.slot(0), 0, None)
    # one entry per batch as written, in record order
    assert future.result(0) == BulkResult("t", [0, 0, 0, 0], [0, 10, 12, 14], [3, 2, 2, 4])
    assert batch.buffer is not None
    pool.deallocate(batch.buffer)


def test_a_failed_part_of_a_bulk_batch_fails_the_call_once(pool: BufferPool) -> None:
    batch, tracker, future = _bulk_batch(pool, 6)
    first, second = split_batch(batch, 4096)
    seen: list[BaseException | None] = []
    future.add_done_callback(lambda f: seen.append(f.exception(0)))
    first.complete(-1, -1, MessageTooLargeError("still too large"))
    second.complete(-1, -1, MessageTooLargeError("again"))  # settles nothing twice
    tracker.batch_done(tracker.slot(0), 0, None)
    assert len(seen) == 1 and isinstance(seen[0], MessageTooLargeError)
    assert "still too large" in str(seen[0])
    assert batch.buffer is not None
    pool.deallocate(batch.buffer)


@pytest.mark.parametrize("idempotent", [True, False])
def test_send_bulk_to_a_topic_limit_below_its_batches_loses_and_duplicates_nothing(
    cluster: FakeCluster, idempotent: bool,
) -> None:
    cluster.create_topic("t", 1)
    cluster.topic_configs["t"] = {"max.message.bytes": str(LIMIT)}
    values = [b"%05d" % i + bytes(95) for i in range(300)]
    keys = [b"k%d" % i for i in range(300)]
    with Producer(cluster.bootstrap, linger_ms=5, batch_size=16384,
                  enable_idempotence=idempotent, retry_backoff_ms=1) as producer:  # fmt: skip
        result = producer.send_bulk("t", values, partition=0, keys=keys).result(20)
        assert producer.metrics()["split_batches"] > 0
    assert cluster.too_large_answers > 0
    assert [r.value for r in cluster.records(T0)] == values  # each once, in order
    assert [r.key for r in cluster.records(T0)] == keys
    assert sum(result.record_counts) == 300 and len(result.record_counts) > 1
    # the entries are the batches as written: offsets follow one another
    assert result.base_offsets == [sum(result.record_counts[:i])
                                   for i in range(len(result.record_counts))]
    assert all(len(b) <= LIMIT for b in cluster.batches(T0))
    assert len(cluster.batches(T0)) == len(result.record_counts)
