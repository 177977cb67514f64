"""The transaction coordinator's APIs through a standalone core's handlers (manual clock):
FindCoordinator key_type 1 creates ``__transaction_state``, then InitProducerId ->
AddPartitionsToTxn -> AddOffsetsToTxn -> EndTxn with the markers written by the
WriteTxnMarkers handler (in process, as a broker), Describe/ListTransactions, the
refusals (unknown partitions, a client's v4 AddPartitionsToTxn), and a reload of the
state partition that finishes an interrupted commit."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.coordination.placement import partition_for
from broker.handlers.common import RequestContext
from broker.handlers.dispatch import HANDLERS
from broker.txn.markers import MarkersDone, TxnMarker, request_body, response_results
from broker.txn.state_topic import VERIFICATION_LOG_INTERVAL_MS
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode as E
from clients.protocol.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition
from tests.broker.handlers.wire import CoreHarness, call, call1, core_at


class LocalMarkers:
    """The marker channel of a one-broker test: each marker goes to the WriteTxnMarkers
    handler in process as a broker would send it; ``hold`` keeps them for the test."""

    def __init__(self, h: CoreHarness) -> None:
        self.h = h
        self.hold = False
        self.held: list[tuple[TxnMarker, MarkersDone]] = []
        self.results: list[dict[TopicPartition, E]] = []

    def send(self, marker: TxnMarker, done: MarkersDone) -> None:
        if self.hold:
            self.held.append((marker, done))
            return
        batch = [(0, marker, sorted(marker.partitions))]
        answers = call(self.h.core, ApiKey.WRITE_TXN_MARKERS, dict(request_body(batch)), 2)
        assert len(answers) == 1 and answers[0] is not None
        [(_, results)] = response_results(batch, answers[0])  # type: ignore[arg-type]
        self.results.append(results)
        done(all(code == E.NONE for code in results.values()))

    def cancel(self, transactional_ids: set[str]) -> None:
        self.held = [(m, d) for m, d in self.held if m.transactional_id not in transactional_ids]


@pytest.fixture
def h(tmp_path: Path) -> Iterator[CoreHarness]:
    with core_at(tmp_path / "b0") as harness:
        yield harness


def ready(h: CoreHarness) -> LocalMarkers:
    found = call1(h.core, ApiKey.FIND_COORDINATOR, {"key": "tx", "key_type": 1}, 3)
    assert (found["error_code"], found["node_id"]) == (0, 0)
    assert h.core.partition_count(TRANSACTION_STATE_TOPIC) == 5
    call1(h.core, ApiKey.FIND_COORDINATOR, {"key": "g"}, 3)  # the offsets topic too
    h.tick(times=5)
    markers = LocalMarkers(h)
    h.core.transactions.coordinator.markers = markers
    h.create("t", 2)
    return markers


def init(h: CoreHarness, version: int = 4, **fields: Any) -> dict[str, Any]:
    return call1(h.core, ApiKey.INIT_PRODUCER_ID, {
        "transactional_id": "tx", "transaction_timeout_ms": 60_000, "producer_id": -1,
        "producer_epoch": -1, **fields}, version)


def add(h: CoreHarness, pid: int, epoch: int, partitions: list[int],
        topic: str = "t", version: int = 3) -> list[tuple[int, int]]:
    answer = call1(h.core, ApiKey.ADD_PARTITIONS_TO_TXN, {
        "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": partitions}]}, version)
    return [(p["partition_index"], p["partition_error_code"])
            for t in answer["results_by_topic_v3_and_below"] for p in t["results_by_partition"]]


def describe(h: CoreHarness) -> dict[str, Any]:
    answer = call1(h.core, ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["tx"]}, 0)
    state: dict[str, Any] = answer["transaction_states"][0]
    return state


def test_commit_through_the_handlers(h: CoreHarness) -> None:
    markers = ready(h)
    first = init(h)
    assert first["error_code"] == 0 and first["producer_epoch"] == 0
    pid = first["producer_id"]
    assert add(h, pid, 0, [0, 1], version=0) == [(0, 0), (1, 0)]
    offsets = call1(h.core, ApiKey.ADD_OFFSETS_TO_TXN, {
        "transactional_id": "tx", "producer_id": pid, "producer_epoch": 0,
        "group_id": "g"}, 3)
    assert offsets["error_code"] == 0
    state = describe(h)
    assert (state["error_code"], state["transaction_state"], state["producer_id"]) == (
        0, "Ongoing", pid)
    assert {(t["topic"], p) for t in state["topics"] for p in t["partitions"]} == {
        ("t", 0), ("t", 1), (OFFSETS_TOPIC, partition_for("g", 5))}
    listed = call1(h.core, ApiKey.LIST_TRANSACTIONS, {
        "state_filters": ["Ongoing", "Bogus"], "producer_id_filters": []}, 1)
    assert listed["unknown_state_filters"] == ["Bogus"]
    assert [t["transactional_id"] for t in listed["transaction_states"]] == ["tx"]
    end = call1(h.core, ApiKey.END_TXN, {"transactional_id": "tx", "producer_id": pid,
                                         "producer_epoch": 0, "committed": True}, 3)
    assert end["error_code"] == 0
    assert markers.results and all(c == E.NONE for c in markers.results[-1].values())
    assert describe(h)["transaction_state"] == "CompleteCommit"
    for index in (0, 1):  # the COMMIT marker is in each partition, nothing unstable
        partition = h.core.partitions[TopicPartition("t", index)]
        assert partition.log_end_offset == 1
        assert partition.last_stable_offset == 1


def test_add_offsets_creates_the_offsets_topic_it_needs(h: CoreHarness) -> None:
    """kafka-python sends AddOffsetsToTxn before any FindCoordinator for a group: the
    offsets topic is created then, not waited for forever."""
    found = call1(h.core, ApiKey.FIND_COORDINATOR, {"key": "tx", "key_type": 1}, 3)
    assert found["error_code"] == 0
    h.tick(times=5)
    pid = init(h)["producer_id"]
    request = {"transactional_id": "tx", "producer_id": pid, "producer_epoch": 0,
               "group_id": "g"}
    assert h.core.partition_count(OFFSETS_TOPIC) == 0
    first = call1(h.core, ApiKey.ADD_OFFSETS_TO_TXN, request, 3)
    assert first["error_code"] == E.COORDINATOR_NOT_AVAILABLE
    assert h.core.partition_count(OFFSETS_TOPIC) > 0
    h.tick(times=5)
    assert call1(h.core, ApiKey.ADD_OFFSETS_TO_TXN, request, 3)["error_code"] == 0


def test_end_txn_v5_bumps_the_epoch_and_fences_a_stale_end(h: CoreHarness) -> None:
    ready(h)
    pid = init(h)["producer_id"]
    add(h, pid, 0, [0])
    end = call1(h.core, ApiKey.END_TXN, {"transactional_id": "tx", "producer_id": pid,
                                         "producer_epoch": 0, "committed": False}, 5)
    assert (end["error_code"], end["producer_id"], end["producer_epoch"]) == (0, pid, 1)
    assert add(h, pid, 1, [1]) == [(1, 0)]  # the next transaction, at epoch 1
    stale = call1(h.core, ApiKey.END_TXN, {"transactional_id": "tx", "producer_id": pid,
                                           "producer_epoch": 0, "committed": True}, 5)
    assert stale["error_code"] == E.PRODUCER_FENCED
    state = describe(h)
    assert (state["transaction_state"], state["producer_epoch"]) == ("Ongoing", 1)


def test_refusals(h: CoreHarness) -> None:
    ready(h)
    pid = init(h)["producer_id"]
    assert add(h, pid, 0, [0, 7]) == [(0, E.OPERATION_NOT_ATTEMPTED),
                                      (7, E.UNKNOWN_TOPIC_OR_PARTITION)]
    assert describe(h)["transaction_state"] == "Empty"
    assert add(h, pid, 3, [0]) == [(0, E.PRODUCER_FENCED)]
    # clients before KIP-588 (AddPartitionsToTxn v0-1, EndTxn v0-1, InitProducerId v0-3)
    # read the fence as INVALID_PRODUCER_EPOCH, as Kafka answers them
    assert add(h, pid, 3, [0], version=1) == [(0, E.INVALID_PRODUCER_EPOCH)]
    for version, code in [(1, E.INVALID_PRODUCER_EPOCH), (2, E.PRODUCER_FENCED)]:
        end = call1(h.core, ApiKey.END_TXN, {"transactional_id": "tx", "producer_id": pid,
                                             "producer_epoch": 3, "committed": True}, version)
        assert end["error_code"] == code
    for version, code in [(3, E.INVALID_PRODUCER_EPOCH), (4, E.PRODUCER_FENCED)]:
        resumed = init(h, version, producer_id=pid + 100, producer_epoch=0)
        assert resumed["error_code"] == code
    assert init(h, transaction_timeout_ms=900_001)["error_code"] == \
        E.INVALID_TRANSACTION_TIMEOUT
    assert init(h, producer_id=-1, producer_epoch=4)["error_code"] == E.INVALID_REQUEST
    client = RequestContext(4, "c", replication_allowed=False)
    answers: list[Any] = []
    HANDLERS[ApiKey.ADD_PARTITIONS_TO_TXN](h.core, {"transactions": [{
        "transactional_id": "tx", "producer_id": pid, "producer_epoch": 0,
        "verify_only": True, "topics": [{"name": "t", "partitions": [0]}]}]},
        answers.append, client)
    assert answers[0]["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    missing = call1(h.core, ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["nope"]}, 0)
    assert missing["transaction_states"][0]["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND


def test_verify_only_between_brokers(h: CoreHarness) -> None:
    ready(h)
    pid = init(h)["producer_id"]
    add(h, pid, 0, [0])
    answer = call1(h.core, ApiKey.ADD_PARTITIONS_TO_TXN, {"transactions": [{
        "transactional_id": "tx", "producer_id": pid, "producer_epoch": 0,
        "verify_only": True, "topics": [{"name": "t", "partitions": [0, 1]}]}]}, 4)
    results = answer["results_by_transaction"][0]["topic_results"][0]["results_by_partition"]
    assert [(r["partition_index"], r["partition_error_code"]) for r in results] == [
        (0, 0), (1, E.TRANSACTION_ABORTABLE)]
    assert describe(h)["topics"] == [{"topic": "t", "partitions": [0]}]  # nothing added


def test_a_refused_verification_is_logged_once_per_interval(
        h: CoreHarness, caplog: pytest.LogCaptureFixture) -> None:
    ready(h)
    pid = init(h)["producer_id"]
    add(h, pid, 0, [0])
    caplog.set_level(logging.INFO, "broker.txn.state_topic")
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)

    def verify() -> dict[TopicPartition, E]:
        return asyncio.run(h.core.transactions.verify("tx", pid, 0, [t0, t1]))

    for _ in range(3):  # a producer retrying its batch to t-1, not in the transaction
        assert verify() == {t0: E.NONE, t1: E.TRANSACTION_ABORTABLE}
    h.clock.advance(VERIFICATION_LOG_INTERVAL_MS)
    verify()
    line = (f"KIP-890 verification refused TRANSACTION_ABORTABLE for transactional id 'tx' "
            f"(producer {pid} epoch 0): t-1")
    assert [r.getMessage() for r in caplog.records if r.name == "broker.txn.state_topic"
            ] == [line, line + " (2 similar suppressed)"]


def test_reload_finishes_an_interrupted_commit(h: CoreHarness) -> None:
    markers = ready(h)
    pid = init(h)["producer_id"]
    add(h, pid, 0, [0, 1])
    markers.hold = True
    end = call1(h.core, ApiKey.END_TXN, {"transactional_id": "tx", "producer_id": pid,
                                         "producer_epoch": 0, "committed": True}, 3)
    assert end["error_code"] == 0 and describe(h)["transaction_state"] == "PrepareCommit"
    coordinator = h.core.transactions.coordinator
    index = coordinator.partition_for("tx")
    coordinator.unload(index)  # as when leadership moves away and back
    assert markers.held == []  # cancelled
    h.core.transactions.on_partitions_changed()  # led here: a new load
    assert describe(h)["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    markers.hold = False
    h.tick(times=5)
    assert describe(h)["transaction_state"] == "CompleteCommit"
    assert all(h.core.partitions[TopicPartition("t", i)].last_stable_offset == 1
               for i in (0, 1))
