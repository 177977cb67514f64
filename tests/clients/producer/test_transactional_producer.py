"""The transactional producer end to end against the fake transaction coordinator
(tests/clients/producer/fake_txn_coordinator.py): real sockets, the real wire protocol."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from clients.consumer.consumer import Consumer
from clients.producer.idempotence import ProducerFencedError
from clients.producer.producer import Producer
from clients.producer.transactions.state import (
    IllegalTransactionStateError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.records.batch import iter_batches
from clients.records.control import parse_marker
from clients.records.record import decode_batch
from clients.types import ConsumerGroupMetadata, OffsetAndMetadata
from tests.broker.processes import wait_until
from tests.clients.producer.fake_txn_coordinator import FakeTxnCluster

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
FAST: dict[str, Any] = {"linger_ms": 5, "retry_backoff_ms": 5, "max_block_ms": 10_000}


@pytest.fixture
def txn_cluster() -> Iterator[FakeTxnCluster]:
    c = FakeTxnCluster(1)
    c.create_topic("t", 2)
    try:
        yield c
    finally:
        c.close()
    assert c.errors == [], "the fake broker received requests it could not serve"


def layout(cluster: FakeTxnCluster, tp: TopicPartition) -> list[tuple[int, int, str]]:
    """(base offset, epoch, what) of each stored batch: data, COMMIT or ABORT."""
    out = []
    for raw in cluster.batches(tp):
        h = next(iter_batches(raw))[1]
        if h.is_control:
            record = decode_batch(raw)[0]
            what = parse_marker(record.key, record.value)[0].name
        else:
            what = "txn-data" if h.is_transactional else "data"
        out.append((h.base_offset, h.producer_epoch, what))
    return out


def read_committed(cluster: FakeTxnCluster, tp: TopicPartition) -> list[bytes]:
    with Consumer(cluster.bootstrap, isolation_level="read_committed", fetch_max_wait_ms=10,
                  auto_offset_reset="earliest") as consumer:  # fmt: skip
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        out: list[bytes] = []
        deadline = time.monotonic() + 20
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline
            for records in consumer.poll(50).values():
                out += [r.value for r in records]
        return out


def test_commit_and_abort_write_markers_and_read_committed_sees_committed_only(
        txn_cluster: FakeTxnCluster) -> None:  # fmt: skip
    with Producer(txn_cluster.bootstrap, transactional_id="tx", **FAST) as prod:
        prod.init_transactions()
        prod.begin_transaction()
        futures = [prod.send("t", b"c%d" % i, partition=i % 2) for i in range(4)]
        prod.commit_transaction()
        assert [f.get(0).offset for f in futures] == [0, 0, 1, 1]
        prod.begin_transaction()
        prod.send("t", b"aborted", partition=0)
        prod.flush()
        prod.abort_transaction()
        prod.begin_transaction()
        prod.send("t", b"last", partition=0)
        prod.commit_transaction()
    # EndTxn v5: each transaction ends with a bumped epoch, its markers written with it
    assert layout(txn_cluster, T0) == [(0, 0, "txn-data"), (2, 1, "COMMIT"),
                                       (3, 1, "txn-data"), (4, 2, "ABORT"),
                                       (5, 2, "txn-data"), (6, 3, "COMMIT")]  # fmt: skip
    assert layout(txn_cluster, T1) == [(0, 0, "txn-data"), (2, 1, "COMMIT")]
    assert read_committed(txn_cluster, T0) == [b"c0", b"c2", b"last"]
    assert read_committed(txn_cluster, T1) == [b"c1", b"c3"]
    txn = txn_cluster.txns["tx"]
    assert (txn.commits, txn.aborts) == (2, 1)


def test_send_bulk_batches_are_transactional_and_abort_hides_them(
        txn_cluster: FakeTxnCluster) -> None:  # fmt: skip
    # send_bulk queues closed batches: the transactional bit is stamped on their first
    # drain, with the producer id (without it read_committed returned aborted records)
    with Producer(txn_cluster.bootstrap, transactional_id="tx", **FAST) as prod:
        prod.init_transactions()
        prod.begin_transaction()
        prod.send_bulk("t", [b"a0", b"a1"], partition=0)
        prod.flush()
        prod.abort_transaction()
        prod.begin_transaction()
        prod.send_bulk("t", [b"c0", b"c1"], partition=0)
        prod.commit_transaction()
    assert layout(txn_cluster, T0) == [(0, 0, "txn-data"), (2, 1, "ABORT"),
                                       (3, 1, "txn-data"), (5, 2, "COMMIT")]  # fmt: skip
    assert read_committed(txn_cluster, T0) == [b"c0", b"c1"]


def test_each_partition_is_added_before_its_first_batch(txn_cluster: FakeTxnCluster) -> None:
    with Producer(txn_cluster.bootstrap, transactional_id="tx", **FAST) as prod:
        prod.init_transactions()
        prod.begin_transaction()
        for i in range(20):
            prod.send("t", b"v%d" % i, partition=i % 2)
        prod.commit_transaction()
    apis = [api for _, api in txn_cluster.request_log]
    first_produce = apis.index(ApiKey.PRODUCE)
    adds = [i for i, api in enumerate(apis) if api == ApiKey.ADD_PARTITIONS_TO_TXN]
    assert adds and adds[0] < first_produce  # a partition is named before its first batch
    assert len(adds) <= 2  # each partition once (both may share one request)
    assert apis.index(ApiKey.END_TXN) > max(i for i, a in enumerate(apis) if a == ApiKey.PRODUCE)
    versions = {v for api, v in txn_cluster.version_log if api == ApiKey.ADD_PARTITIONS_TO_TXN}
    assert versions == {3}  # v4+ is broker to broker


def test_end_txn_below_v5_keeps_the_epoch(txn_cluster: FakeTxnCluster) -> None:
    txn_cluster.version_caps[ApiKey.END_TXN] = (0, 3)
    with Producer(txn_cluster.bootstrap, transactional_id="tx", **FAST) as prod:
        prod.init_transactions()
        for _ in range(2):
            prod.begin_transaction()
            prod.send("t", b"x", partition=0)
            prod.commit_transaction()
        assert prod.metrics()["producer_epoch"] == 0
    assert layout(txn_cluster, T0) == [(0, 0, "txn-data"), (1, 0, "COMMIT"),
                                       (2, 0, "txn-data"), (3, 0, "COMMIT")]  # fmt: skip


def test_a_second_producer_with_the_same_id_fences_the_first(
        txn_cluster: FakeTxnCluster) -> None:  # fmt: skip
    old = Producer(txn_cluster.bootstrap, transactional_id="tx", **FAST)
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send("t", b"zombie", partition=0)
        old.flush()
        with Producer(txn_cluster.bootstrap, transactional_id="tx", **FAST) as new:
            new.init_transactions()  # bumps the epoch, aborts the old open transaction
            with pytest.raises(ProducerFencedError):
                old.commit_transaction()
            with pytest.raises(ProducerFencedError):
                old.send("t", b"more", partition=0)
            with pytest.raises(ProducerFencedError):
                old.abort_transaction()
            new.begin_transaction()
            new.send("t", b"fresh", partition=0)
            new.commit_transaction()
    finally:
        old.close()
    assert read_committed(txn_cluster, T0) == [b"fresh"]


def test_abort_fails_records_not_yet_sent(txn_cluster: FakeTxnCluster) -> None:
    with Producer(txn_cluster.bootstrap, transactional_id="tx", **{**FAST,
                  "linger_ms": 60_000}) as prod:  # fmt: skip
        prod.init_transactions()
        prod.begin_transaction()
        future = prod.send("t", b"never", partition=0)
        prod.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            future.get(5)
        prod.begin_transaction()  # the producer goes on
        prod.send("t", b"ok", partition=1)
        prod.commit_transaction()
    assert read_committed(txn_cluster, T1) == [b"ok"]
    assert not any(raw for raw in txn_cluster.batches(T0)
                   if not next(iter_batches(raw))[1].is_control)  # fmt: skip


def test_send_offsets_commit_with_the_transaction_only(txn_cluster: FakeTxnCluster) -> None:
    with Producer(txn_cluster.bootstrap, transactional_id="tx", **FAST) as prod:
        prod.init_transactions()
        prod.begin_transaction()
        prod.send("t", b"out", partition=0)
        prod.send_offsets_to_transaction({T1: OffsetAndMetadata(42)},
                                         ConsumerGroupMetadata("g"))  # fmt: skip
        prod.abort_transaction()
        assert txn_cluster.group("g").offsets == {}
        prod.begin_transaction()
        prod.send_offsets_to_transaction({T1: 43}, "g")  # offsets alone are a transaction
        prod.commit_transaction()
    assert txn_cluster.group("g").offsets == {("t", 1): 43}
    apis = [api for _, api in txn_cluster.request_log]
    assert ApiKey.ADD_OFFSETS_TO_TXN in apis and ApiKey.TXN_OFFSET_COMMIT in apis


def test_retriable_coordinator_answers_are_retried(txn_cluster: FakeTxnCluster) -> None:
    txn_cluster.txn_errors = {
        ApiKey.INIT_PRODUCER_ID: [ErrorCode.CONCURRENT_TRANSACTIONS],
        ApiKey.ADD_PARTITIONS_TO_TXN: [ErrorCode.NOT_COORDINATOR],
        ApiKey.END_TXN: [ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_NOT_AVAILABLE],
    }
    with Producer(txn_cluster.bootstrap, transactional_id="tx", **FAST) as prod:
        prod.init_transactions()
        prod.begin_transaction()
        prod.send("t", b"v", partition=0)
        prod.commit_transaction()
    assert read_committed(txn_cluster, T0) == [b"v"]
    assert all(not codes for codes in txn_cluster.txn_errors.values())


def test_concurrent_transactions_on_add_partitions_is_retried_within_20_ms(
        txn_cluster: FakeTxnCluster) -> None:  # fmt: skip
    # the previous transaction's markers still being written: Kafka retries the
    # AddPartitionsToTxn after 20 ms, not retry_backoff_ms (100), and the sender loop
    # wakes when the backoff ends (it used to sleep its 100 ms poll bound): 5 retries
    # took >= 500 ms, now about 100
    txn_cluster.txn_errors = {ApiKey.ADD_PARTITIONS_TO_TXN: [
        ErrorCode.CONCURRENT_TRANSACTIONS] * 5}
    with Producer(txn_cluster.bootstrap, transactional_id="tx", max_block_ms=10_000) as prod:
        prod.init_transactions()
        t0 = time.monotonic()
        prod.begin_transaction()
        prod.send("t", b"v", partition=0)
        prod.commit_transaction()
        elapsed_s = time.monotonic() - t0
    assert txn_cluster.txn_errors[ApiKey.ADD_PARTITIONS_TO_TXN] == []
    assert elapsed_s < 0.45, elapsed_s
    assert read_committed(txn_cluster, T0) == [b"v"]


def test_an_abortable_answer_makes_commit_fail_and_abort_recover(
        txn_cluster: FakeTxnCluster) -> None:  # fmt: skip
    txn_cluster.txn_errors = {ApiKey.ADD_PARTITIONS_TO_TXN: [ErrorCode.TRANSACTION_ABORTABLE]}
    with Producer(txn_cluster.bootstrap, transactional_id="tx", **FAST) as prod:
        prod.init_transactions()
        prod.begin_transaction()
        future = prod.send("t", b"v", partition=0)
        with pytest.raises(TransactionAbortableError):
            prod.commit_transaction()
        with pytest.raises(MiniKafkaError) as info:  # queued records fail with the cause
            future.get(5)
        assert info.value.code == ErrorCode.TRANSACTION_ABORTABLE
        prod.abort_transaction()
        prod.begin_transaction()
        prod.send("t", b"w", partition=0)
        prod.commit_transaction()
    assert read_committed(txn_cluster, T0) == [b"w"]


def test_call_order_and_settings_errors(txn_cluster: FakeTxnCluster) -> None:
    with pytest.raises(InvalidConfigError, match="idempotence"):
        Producer(txn_cluster.bootstrap, transactional_id="tx", enable_idempotence=False)
    with pytest.raises(InvalidConfigError, match="acks"):
        Producer(txn_cluster.bootstrap, transactional_id="tx", acks=1)
    with pytest.raises(InvalidConfigError, match="transactional_id"):
        Producer(txn_cluster.bootstrap, transactional_id="")
    with pytest.raises(InvalidConfigError, match="transaction_timeout_ms"):
        Producer(txn_cluster.bootstrap, transactional_id="tx", transaction_timeout_ms=0)
    with (Producer(txn_cluster.bootstrap, **FAST) as plain,
          pytest.raises(IllegalTransactionStateError, match="non-transactional")):
        plain.init_transactions()
    with Producer(txn_cluster.bootstrap, transactional_id="tx", **FAST) as prod:
        with pytest.raises(IllegalTransactionStateError, match="init_transactions"):
            prod.send("t", b"x", partition=0)
        with pytest.raises(IllegalTransactionStateError):
            prod.begin_transaction()
        prod.init_transactions()
        with pytest.raises(IllegalTransactionStateError, match="begin_transaction"):
            prod.send("t", b"x", partition=0)
        with pytest.raises(IllegalTransactionStateError):
            prod.commit_transaction()
        prod.begin_transaction()
        with pytest.raises(IllegalTransactionStateError):
            prod.begin_transaction()
        prod.commit_transaction()  # empty: nothing sent
    assert txn_cluster.txns["tx"].commits == 0
    assert [api for _, api in txn_cluster.request_log].count(ApiKey.END_TXN) == 0


def test_consumer_group_metadata_before_joining() -> None:
    with Consumer("127.0.0.1:1", group_id="g", group_instance_id="i-1") as consumer:
        assert consumer.group_metadata() == ConsumerGroupMetadata("g", -1, "", "i-1")
    with Consumer("127.0.0.1:1") as consumer, pytest.raises(InvalidConfigError):
        consumer.group_metadata()


def test_abort_before_any_partition_was_added_fails_the_queued_records(
        txn_cluster: FakeTxnCluster) -> None:  # fmt: skip
    # the coordinator keeps answering CONCURRENT_TRANSACTIONS (a previous transaction
    # completing): nothing of this transaction reaches it, so the abort ends it locally;
    # its queued records must fail, not ride along with the next transaction
    with Producer(txn_cluster.bootstrap, transactional_id="tx",
                  **{**FAST, "retry_backoff_ms": 300}) as prod:  # fmt: skip
        prod.init_transactions()
        with txn_cluster.cond:
            txn_cluster.txn_errors[ApiKey.ADD_PARTITIONS_TO_TXN] = (
                [ErrorCode.CONCURRENT_TRANSACTIONS] * 1_000_000)
        prod.begin_transaction()
        future = prod.send("t", b"aborted", partition=0)
        manager = prod._txn.manager if prod._txn is not None else None
        assert manager is not None
        # the add was refused once and waits for its retry (nothing in flight)
        wait_until(lambda: T0 in manager._new_partitions and manager._in_flight is None
                   and ApiKey.ADD_PARTITIONS_TO_TXN in [a for _, a in txn_cluster.request_log],
                   10, "a refused AddPartitionsToTxn")  # fmt: skip
        prod.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            future.get(5)
        with txn_cluster.cond:
            txn_cluster.txn_errors[ApiKey.ADD_PARTITIONS_TO_TXN] = []
        prod.begin_transaction()
        prod.send("t", b"ok", partition=0)
        prod.commit_transaction()
    assert [api for _, api in txn_cluster.request_log].count(ApiKey.END_TXN) == 1
    assert read_committed(txn_cluster, T0) == [b"ok"]
    assert layout(txn_cluster, T0) == [(0, 0, "txn-data"), (1, 1, "COMMIT")]


def test_read_committed_stops_at_an_open_transaction(txn_cluster: FakeTxnCluster) -> None:
    with Producer(txn_cluster.bootstrap, transactional_id="tx", **FAST) as prod:
        prod.init_transactions()
        prod.begin_transaction()
        prod.send("t", b"c", partition=0)
        prod.commit_transaction()  # offsets 0 (data) and 1 (COMMIT)
        prod.begin_transaction()
        prod.send("t", b"open", partition=0)
        prod.flush()  # offset 2, its transaction still open
        levels = {}
        for level in ("read_committed", "read_uncommitted"):
            with Consumer(txn_cluster.bootstrap, isolation_level=level,
                          fetch_max_wait_ms=10, auto_offset_reset="earliest") as consumer:
                consumer.assign([T0])
                levels[level] = consumer.end_offsets([T0])[T0]  # ListOffsets latest
                consumer.seek_to_end([T0])
                assert consumer.position(T0) == levels[level]
        assert levels == {"read_committed": 2, "read_uncommitted": 3}  # the LSO, the HW
        assert read_committed(txn_cluster, T0) == [b"c"]
        prod.commit_transaction()
    assert read_committed(txn_cluster, T0) == [b"c", b"open"]
