"""Transactions through the handlers of a standalone core: WriteTxnMarkers, read_committed
Fetch and ListOffsets, DescribeProducers, and the Produce path's KIP-890 verification."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.acls import Authorizer, edit_acls
from broker.handlers.common import RequestContext
from broker.handlers.dispatch import HANDLERS
from broker.handlers.produce import verification_error
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import OFFSETS_TOPIC, TopicPartition
from clients.records.batch import TRANSACTIONAL_MASK, iter_batches
from clients.records.record import build_batch
from tests.broker.handlers.wire import CoreHarness, call, call1, core_at


@pytest.fixture
def h(tmp_path: Path) -> Iterator[CoreHarness]:
    # the partition side alone: no coordinator verification (the tests that need it set
    # core.txn_verifier themselves)
    with core_at(tmp_path, group_initial_rebalance_delay_ms=0,
                 transaction_partition_verification_enable=False) as harness:
        harness.create("t", 2)
        yield harness


def txn(pid: int, seq: int, *values: bytes, epoch: int = 0) -> bytes:
    return build_batch([(None, v, 1_000, ()) for v in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, attributes=TRANSACTIONAL_MASK)


def produce_body(records: bytes, partition: int = 0, tid: str | None = "tx") -> dict[str, Any]:
    return {"transactional_id": tid, "acks": -1, "timeout_ms": 1000, "topics": [
        {"name": "t", "partitions": [{"index": partition, "records": records}]}]}


def produce(h: CoreHarness, records: bytes, partition: int = 0, tid: str | None = "tx",
            version: int | None = None) -> dict[str, Any]:
    answer = call1(h.core, ApiKey.PRODUCE, produce_body(records, partition, tid), version)
    return answer["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


def markers_body(pid: int, commit: bool, *partitions: tuple[str, int], epoch: int = 0,
                 coordinator_epoch: int = 0) -> dict[str, Any]:
    return {"markers": [{"producer_id": pid, "producer_epoch": epoch,
                         "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
                         "transaction_version": 0,
                         "topics": [{"name": n, "partition_indexes": [i]}
                                    for n, i in partitions]}]}


def write_markers(h: CoreHarness, pid: int, commit: bool, *partitions: tuple[str, int],
                  **fields: int) -> list[int]:
    answer = call1(h.core, ApiKey.WRITE_TXN_MARKERS,
                   markers_body(pid, commit, *partitions, **fields))
    return [p["error_code"] for m in answer["markers"] for t in m["topics"]
            for p in t["partitions"]]


def fetch(h: CoreHarness, isolation: int, offset: int = 0) -> dict[str, Any]:
    answer = call1(h.core, ApiKey.FETCH, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
        "topics": [{"name": "t", "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    return answer["responses"][0]["partitions"][0]  # type: ignore[no-any-return]


def offsets_of(part: dict[str, Any]) -> list[int]:
    return [hdr.base_offset for _, hdr in iter_batches(bytes(part["records"] or b""))]


def latest(h: CoreHarness, isolation: int) -> int:
    answer = call1(h.core, ApiKey.LIST_OFFSETS, {
        "replica_id": -1, "isolation_level": isolation, "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return answer["topics"][0]["partitions"][0]["offset"]  # type: ignore[no-any-return]


def test_read_committed_sees_a_transaction_only_after_its_commit(h: CoreHarness) -> None:
    assert produce(h, txn(7, 0, b"a", b"b"))["error_code"] == 0
    assert offsets_of(fetch(h, 0)) == [0]  # read_uncommitted sees it
    committed = fetch(h, 1)
    assert (committed["high_watermark"], committed["last_stable_offset"]) == (2, 0)
    assert offsets_of(committed) == [] and committed["aborted_transactions"] == []
    assert (latest(h, 0), latest(h, 1)) == (2, 0)
    producers = call1(h.core, ApiKey.DESCRIBE_PRODUCERS, {"topics": [
        {"name": "t", "partition_indexes": [0, 1, 5]}]})["topics"][0]["partitions"]
    assert [p["error_code"] for p in producers] == [0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert producers[0]["active_producers"] == [{
        "producer_id": 7, "producer_epoch": 0, "last_sequence": 1, "last_timestamp": 1_000,
        "coordinator_epoch": -1, "current_txn_start_offset": 0}]
    assert write_markers(h, 7, True, ("t", 0)) == [0]
    after = fetch(h, 1)
    assert after["last_stable_offset"] == 3 and offsets_of(after) == [0, 2]
    assert latest(h, 1) == 3


def test_an_aborted_transaction_is_listed_for_read_committed(h: CoreHarness) -> None:
    assert produce(h, txn(7, 0, b"x"))["error_code"] == 0
    assert produce(h, build_batch([(None, b"plain", 1_000, ())]), tid=None)["error_code"] == 0
    assert write_markers(h, 7, False, ("t", 0)) == [0]
    part = fetch(h, 1)
    assert offsets_of(part) == [0, 1, 2]
    assert part["aborted_transactions"] == [{"producer_id": 7, "first_offset": 0}]
    assert fetch(h, 0)["aborted_transactions"] is None  # read_uncommitted: none


def test_stale_markers_get_kafkas_errors_per_partition(h: CoreHarness) -> None:
    assert produce(h, txn(7, 0, b"a", epoch=2))["error_code"] == 0
    assert write_markers(h, 7, True, ("t", 0), epoch=1) == [ErrorCode.INVALID_PRODUCER_EPOCH]
    assert write_markers(h, 7, True, ("t", 0), ("t", 9), ("nope", 0), epoch=2,
                         coordinator_epoch=5) == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert write_markers(h, 7, False, ("t", 0), epoch=2, coordinator_epoch=4) == \
        [ErrorCode.TRANSACTION_COORDINATOR_FENCED]
    assert produce(h, build_batch([(None, b"c", 1_000, ())]), tid=None)["error_code"] == 0


def test_a_resent_tv2_marker_is_answered_as_written_once_and_not_written_twice(
        h: CoreHarness) -> None:
    """Transaction version 2: the coordinator resends a marker whose answer it did not
    get; the leader wrote it already, so rule 8 refuses it (same epoch), but it is the
    same marker: answered NONE once replicated, nothing appended.  A late marker of the
    previous transaction once the next one wrote here stays refused (KAFKA-17754)."""
    assert produce(h, txn(7, 0, b"a", epoch=2))["error_code"] == 0            # 0
    tv2 = {"epoch": 3, "coordinator_epoch": 1}
    body = markers_body(7, True, ("t", 0), **tv2)
    body["markers"][0]["transaction_version"] = 2
    for _ in range(2):  # the first copy writes the COMMIT at 1, the resend only waits
        answer = call1(h.core, ApiKey.WRITE_TXN_MARKERS, body)
        assert answer["markers"][0]["topics"][0]["partitions"][0]["error_code"] == 0
    assert latest(h, 0) == 2
    assert produce(h, txn(7, 0, b"b", epoch=3))["error_code"] == 0            # 2: opens
    answer = call1(h.core, ApiKey.WRITE_TXN_MARKERS, body)
    assert answer["markers"][0]["topics"][0]["partitions"][0]["error_code"] == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    assert latest(h, 0) == 3


def test_only_a_broker_login_may_write_markers(h: CoreHarness) -> None:
    answers: list[Any] = []
    for principal in ("alice", None):
        ctx = RequestContext(2, "c", principal=principal, brokers_authenticate=True)
        HANDLERS[ApiKey.WRITE_TXN_MARKERS](h.core, markers_body(7, True, ("t", 0)),
                                           answers.append, ctx)
    ctx = RequestContext(2, "c", principal="broker-3", brokers_authenticate=True)
    HANDLERS[ApiKey.WRITE_TXN_MARKERS](h.core, markers_body(7, True, ("t", 0)),
                                       answers.append, ctx)
    codes = [a["markers"][0]["topics"][0]["partitions"][0]["error_code"] for a in answers]
    assert codes == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2 + [0]
    assert h.core.partitions[TopicPartition("t", 0)].log_end_offset == 1  # one marker


def test_control_batches_from_producers_stay_refused(h: CoreHarness) -> None:
    from clients.records.control import ControlType, build_marker_batch
    forged = build_marker_batch(7, 0, ControlType.COMMIT, 0, 1_000)
    assert produce(h, forged)["error_code"] == ErrorCode.INVALID_RECORD


def test_markers_on_the_offsets_topic_reach_the_listener(h: CoreHarness) -> None:
    call(h.core, ApiKey.FIND_COORDINATOR, {"key": "g"}, 0)  # creates __consumer_offsets
    h.tick(times=5)
    heard: list[tuple[str, int, int, bool]] = []

    class Listener:
        def on_txn_marker(self, topic: str, partition: int, producer_id: int,
                          committed: bool) -> None:
            heard.append((topic, partition, producer_id, committed))

    h.core.txn_marker_listener = Listener()
    assert write_markers(h, 7, True, (OFFSETS_TOPIC, 0), ("t", 0)) == [0, 0]
    assert heard == [(OFFSETS_TOPIC, 0, 7, True)]


class FakeVerifier:
    def __init__(self, answer: ErrorCode | Exception) -> None:
        self.answer = answer
        self.asked: list[tuple[str, int, int, list[TopicPartition]]] = []

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        self.asked.append((transactional_id, producer_id, producer_epoch, partitions))
        await asyncio.sleep(0)
        if isinstance(self.answer, Exception):
            raise self.answer
        return dict.fromkeys(partitions, self.answer)


def produce_async(h: CoreHarness, records: bytes, version: int | None = None
                  ) -> dict[str, Any]:
    async def run() -> list[Any]:
        answers = call(h.core, ApiKey.PRODUCE, produce_body(records), version)
        for _ in range(50):
            if answers:
                break
            await asyncio.sleep(0)
        return answers
    answers = asyncio.run(run())
    assert len(answers) == 1, answers
    return answers[0]["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("answer", "version", "expected"), [
    (ErrorCode.NONE, 12, ErrorCode.NONE),
    (ErrorCode.TRANSACTION_ABORTABLE, 12, ErrorCode.TRANSACTION_ABORTABLE),
    (ErrorCode.TRANSACTION_ABORTABLE, 10, ErrorCode.INVALID_TXN_STATE),
    (ErrorCode.INVALID_TXN_STATE, 12, ErrorCode.INVALID_TXN_STATE),
    (ErrorCode.PRODUCER_FENCED, 12, ErrorCode.INVALID_PRODUCER_EPOCH),
    (ErrorCode.CONCURRENT_TRANSACTIONS, 11, ErrorCode.NOT_ENOUGH_REPLICAS),
    (ErrorCode.CONCURRENT_TRANSACTIONS, 12, ErrorCode.CONCURRENT_TRANSACTIONS),
    (ConnectionError("coordinator gone"), 12, ErrorCode.NOT_ENOUGH_REPLICAS),
])
def test_the_first_transactional_batch_is_verified_by_the_coordinator(
        h: CoreHarness, answer: ErrorCode | Exception, version: int,
        expected: ErrorCode) -> None:
    verifier = FakeVerifier(answer)
    h.core.txn_verifier = verifier
    result = produce_async(h, txn(7, 0, b"a"), version)
    assert result["error_code"] == expected, result
    assert verifier.asked == [("tx", 7, 0, [TopicPartition("t", 0)])]
    partition = h.core.partitions[TopicPartition("t", 0)]
    assert partition.log_end_offset == (1 if expected == ErrorCode.NONE else 0)
    if expected == ErrorCode.NONE:  # the next batch continues the open transaction
        assert produce_async(h, txn(7, 1, b"b"))["error_code"] == 0
        assert len(verifier.asked) == 1


def test_verification_error_messages_follow_kafka() -> None:
    assert verification_error(ErrorCode.INVALID_TXN_STATE, 12) == (
        "Partition was not added to the transaction", ErrorCode.INVALID_TXN_STATE)
    message, code = verification_error(ErrorCode.NOT_COORDINATOR, 12)
    assert code == ErrorCode.NOT_ENOUGH_REPLICAS and message.endswith("NOT_COORDINATOR")


def test_a_transactional_request_without_a_transactional_id_fails_whole(
        h: CoreHarness) -> None:
    answer = call1(h.core, ApiKey.PRODUCE, {
        "transactional_id": None, "acks": -1, "timeout_ms": 1000, "topics": [
            {"name": "t", "partitions": [
                {"index": 0, "records": build_batch([(None, b"plain", 1_000, ())])},
                {"index": 1, "records": txn(7, 0, b"a")}]}]})
    codes = [p["error_code"] for p in answer["responses"][0]["partition_responses"]]
    assert codes == [ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * 2
    assert all(p.log_end_offset == 0 for p in h.core.partitions.values())


def test_a_transactional_produce_needs_write_on_its_transactional_id(
        h: CoreHarness, tmp_path: Path) -> None:
    acls = tmp_path / "acls.txt"
    edit_acls(acls, add=["User:alice", "Allow", "Write", "Topic", "t"])
    ctx = RequestContext(9, "c", principal="alice", authorizer=Authorizer(True, str(acls)))
    answers: list[Any] = []
    for records in (build_batch([(None, b"plain", 1_000, ())]), txn(7, 0, b"a")):
        HANDLERS[ApiKey.PRODUCE](h.core, produce_body(records), answers.append, ctx)
    codes = [a["responses"][0]["partition_responses"][0]["error_code"] for a in answers]
    assert codes == [0, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]


def test_a_marker_is_stamped_with_wall_clock_time(h: CoreHarness) -> None:
    # Kafka stamps markers with the broker's wall clock (time indexes and timestamp
    # look-ups depend on it), not a monotonic clock
    assert produce(h, txn(7, 0, b"a"))["error_code"] == 0
    before_ms = time.time_ns() // 1_000_000
    assert write_markers(h, 7, True, ("t", 0)) == [0]
    after_ms = time.time_ns() // 1_000_000
    marker = [hdr for _, hdr in iter_batches(bytes(fetch(h, 0)["records"] or b""))][-1]
    assert marker.base_offset == 1
    assert before_ms <= marker.max_timestamp <= after_ms
