"""RecordFuture / BatchResult: one shared outcome per batch, one light handle per record."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from clients.memory.buffer_pool import BufferPool
from clients.producer.batch import ProducerBatch
from clients.producer.future import BatchResult, RecordFuture, SendTimeoutError
from clients.protocol.errors import MessageTooLargeError, RequestTimedOutError
from clients.protocol.topics import TopicPartition
from clients.types import RecordMetadata

TP = TopicPartition("t", 3)


def _batch_with(pool: BufferPool, count: int) -> tuple[ProducerBatch, list[RecordFuture]]:
    batch = ProducerBatch(TP, pool.allocate(4096, 1000), 0.0)
    futures = []
    for i in range(count):
        future = batch.try_append(1000 + i, b"k%d" % i, b"v", ())
        assert future is not None
        futures.append(future)
    return batch, futures


@pytest.fixture
def pool() -> Iterator[BufferPool]:
    with BufferPool.create(1 << 16, 4096) as p:
        yield p


def test_records_of_a_batch_resolve_together_with_their_own_offset_and_time(
    pool: BufferPool,
) -> None:
    batch, futures = _batch_with(pool, 4)
    assert not any(f.done() for f in futures) and all(f.running() for f in futures)
    batch.complete(500, -1, None)
    assert [f.result(0) for f in futures] == [
        RecordMetadata("t", 3, 500 + i, 1000 + i) for i in range(4)
    ]
    assert all(f.done() and not f.running() and f.exception(0) is None for f in futures)
    assert futures[2].get() == futures[2].result()
    assert batch.buffer is not None
    pool.deallocate(batch.buffer)


def test_log_append_time_and_acks_zero(pool: BufferPool) -> None:
    batch, futures = _batch_with(pool, 2)
    batch.complete(-1, 77, None)  # acks=0: no offset known; LogAppendTime topic: 77
    assert [f.result(0) for f in futures] == [RecordMetadata("t", 3, -1, 77)] * 2
    assert batch.buffer is not None
    pool.deallocate(batch.buffer)


def test_a_failed_batch_fails_every_record_and_completes_once(pool: BufferPool) -> None:
    batch, futures = _batch_with(pool, 3)
    error = MessageTooLargeError("too big")
    batch.complete(-1, -1, error)
    batch.complete(10, -1, None)  # a late second outcome changes nothing
    assert batch.result is not None
    batch.result.complete(20, -1, None)
    for future in futures:
        assert future.exception(0) is error
        with pytest.raises(MessageTooLargeError):
            future.result(0)
        with pytest.raises(MessageTooLargeError):
            future.get(0)
    assert batch.buffer is not None
    pool.deallocate(batch.buffer)


def test_waiting_runs_out_with_a_send_timeout() -> None:
    future = RecordFuture(BatchResult("t", 0), 0, 5)
    for wait in (future.result, future.get, future.exception):
        with pytest.raises(SendTimeoutError) as info:
            wait(0.01)
        assert isinstance(info.value, TimeoutError)
        assert isinstance(info.value, RequestTimedOutError)
    assert not future.cancel() and not future.cancelled() and not future.done()


def test_a_waiting_thread_wakes_when_the_batch_completes() -> None:
    result = BatchResult("t", 1)
    future = RecordFuture(result, 2, 5)
    got: list[RecordMetadata] = []
    waiter = threading.Thread(target=lambda: got.append(future.result(30)))
    waiter.start()
    result.complete(40, -1, None)
    waiter.join(30)
    assert not waiter.is_alive() and got == [RecordMetadata("t", 1, 42, 5)]


def test_callbacks_run_once_on_completion_or_at_once_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    result = BatchResult("t", 0)
    first, second = RecordFuture(result, 0, 1), RecordFuture(result, 1, 1)
    seen: list[tuple[int, int]] = []

    def boom(_: RecordFuture) -> None:
        raise ValueError("callback bug")

    first.add_done_callback(lambda f: seen.append((0, f.result(0).offset)))
    first.add_done_callback(boom)  # logged, and does not stop the others
    second.add_done_callback(lambda f: seen.append((1, f.result(0).offset)))
    assert seen == []
    with caplog.at_level(logging.ERROR, logger="clients.producer.future"):
        result.complete(9, -1, None)
    assert seen == [(0, 9), (1, 10)]
    assert "callback raised" in caplog.text
    second.add_done_callback(lambda f: seen.append((2, f.result(0).offset)))  # already done
    result.complete(100, -1, None)
    assert seen == [(0, 9), (1, 10), (2, 10)]
