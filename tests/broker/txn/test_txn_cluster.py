"""The transaction coordinator on a real 3-broker cluster, with raw requests:
FindCoordinator key_type 1 -> InitProducerId -> AddPartitionsToTxn -> EndTxn (commit),
the markers written to every partition's leader by WriteTxnMarkers between brokers,
DescribeTransactions on the coordinator; and a coordinator SIGKILLed between
PrepareCommit and CompleteCommit: the next coordinator finishes the commit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clients.admin import Admin
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode as E
from clients.records.record import build_batch
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.raw_kafka import call, connect

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TRANSACTIONAL = 0x10  # batch attributes bit 4
RETRIABLE = {E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS,
             E.CONCURRENT_TRANSACTIONS}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, 3) as c:
        yield c


def port_of(cluster: LocalCluster, node: int) -> int:
    return int(cluster.state.brokers[str(node)].port)


def retried(cluster: LocalCluster, api: ApiKey, version: int, body: dict[str, Any],
            code_of: Any = lambda b: b["error_code"], timeout_s: float = 60) -> dict[str, Any]:
    """Ask the current coordinator of "tx" until the answer is not a retriable error."""
    answer: dict[str, Any] = {}

    def ask() -> bool:
        nonlocal answer
        node = coordinator(cluster)
        if node is None:
            return False
        try:
            with connect(port_of(cluster, node), 5) as sock:
                answer = call(sock, api, version, body)
        except OSError:
            return False
        return code_of(answer) not in RETRIABLE

    wait_until(ask, timeout_s, f"{api.name} answered", 0.1)
    return answer


def coordinator(cluster: LocalCluster) -> int | None:
    for node in sorted(cluster.state.brokers):
        try:
            with connect(port_of(cluster, int(node)), 5) as sock:
                found = call(sock, ApiKey.FIND_COORDINATOR, 3, {"key": "tx", "key_type": 1})
        except OSError:
            continue
        if found["error_code"] == 0:
            return int(found["node_id"])
    return None


def describe(cluster: LocalCluster) -> dict[str, Any]:
    answer = retried(cluster, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx"]},
                     lambda b: b["transaction_states"][0]["error_code"])
    state: dict[str, Any] = answer["transaction_states"][0]
    return state


def end_offsets(cluster: LocalCluster, topic: str, partitions: list[int]) -> dict[int, int]:
    """The read_committed end offset (the LSO) of each partition, from its leader."""
    out: dict[int, int] = {}
    for index in partitions:
        leader = int(cluster.partition(topic, index)["leader"])
        if leader < 0:
            continue  # no leader right now: not known
        try:
            with connect(port_of(cluster, leader), 5) as sock:
                answer = call(sock, ApiKey.LIST_OFFSETS, 2, {
                    "replica_id": -1, "isolation_level": 1, "topics": [
                        {"name": topic, "partitions": [{"partition_index": index,
                                                        "timestamp": -1}]}]})
        except OSError:
            continue
        out[index] = answer["topics"][0]["partitions"][0]["offset"]
    return out


def produce(cluster: LocalCluster, topic: str, index: int, pid: int, epoch: int,
            sequence: int = 0) -> int:
    """One transactional batch to the partition's leader (which verifies it with the
    coordinator, KIP-890 part 1, in process or across brokers); its error code."""
    batch = build_batch([(b"k", b"v", 1_000, ())], producer_id=pid, producer_epoch=epoch,
                        base_sequence=sequence, attributes=TRANSACTIONAL)
    leader = int(cluster.partition(topic, index)["leader"])
    with connect(port_of(cluster, leader), 10) as sock:
        answer = call(sock, ApiKey.PRODUCE, 9, {
            "transactional_id": "tx", "acks": -1, "timeout_ms": 10_000,
            "topics": [{"name": topic, "partitions": [{"index": index, "records": batch}]}]})
    code: int = answer["responses"][0]["partition_responses"][0]["error_code"]
    return code


def begin(cluster: LocalCluster, topic: str, partitions: list[int]) -> tuple[int, int]:
    init = retried(cluster, ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": "tx", "transaction_timeout_ms": 60_000, "producer_id": -1,
        "producer_epoch": -1})
    assert init["error_code"] == 0, init
    pid, epoch = init["producer_id"], init["producer_epoch"]
    added = retried(cluster, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": partitions}]},
        lambda b: b["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
            "partition_error_code"])
    codes = [p["partition_error_code"] for t in added["results_by_topic_v3_and_below"]
             for p in t["results_by_partition"]]
    assert codes == [0] * len(partitions), added
    return pid, epoch


def test_a_transaction_past_its_timeout_is_aborted(tmp_path: Path) -> None:
    """transaction_timeout_ms 1000 with the broker checking every 200 ms: the coordinator
    aborts on its own, with the epoch bumped, and the partition's LSO moves on."""
    with LocalCluster(tmp_path, 3, {
            "transaction_abort_timed_out_transaction_cleanup_interval_ms": 200}) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic("t", 1, 3)])
        init = retried(c, ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": "tx", "transaction_timeout_ms": 1_000, "producer_id": -1,
            "producer_epoch": -1})
        pid, epoch = init["producer_id"], init["producer_epoch"]
        added = retried(c, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": "t", "partitions": [0]}]},
            lambda b: b["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
                "partition_error_code"])
        assert added["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
            "partition_error_code"] == 0
        assert produce(c, "t", 0, pid, epoch) == 0
        wait_until(lambda: describe(c)["transaction_state"] == "CompleteAbort", 60,
                   "the coordinator aborted the expired transaction")
        assert describe(c)["producer_epoch"] == epoch + 1
        wait_until(lambda: end_offsets(c, "t", [0]) == {0: 2}, 30, "the ABORT marker")
        late = retried(c, ApiKey.END_TXN, 3, {"transactional_id": "tx", "producer_id": pid,
                                              "producer_epoch": epoch, "committed": True})
        assert late["error_code"] == E.PRODUCER_FENCED


def test_commit_with_raw_requests(cluster: LocalCluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic("t", 3, 3, {"min_insync_replicas": "2"}),
                             NewTopic("u", 1, 3)])
    pid, epoch = begin(cluster, "t", [0, 1, 2])
    # data on every partition of the transaction: each leader asks the coordinator
    # (another broker for two of the three); a partition not in it is refused
    for index in range(3):
        def accepted(i: int = index) -> bool:
            return produce(cluster, "t", i, pid, epoch) == 0
        wait_until(accepted, 30, f"t-{index} accepted the transactional batch")
    assert produce(cluster, "u", 0, pid, epoch) in (E.INVALID_TXN_STATE,
                                                    E.TRANSACTION_ABORTABLE)
    assert end_offsets(cluster, "t", [0, 1, 2]) == {0: 0, 1: 0, 2: 0}  # LSO held
    state = describe(cluster)
    assert (state["transaction_state"], state["producer_id"]) == ("Ongoing", pid)
    assert sorted(state["topics"][0]["partitions"]) == [0, 1, 2]
    end = retried(cluster, ApiKey.END_TXN, 3, {"transactional_id": "tx", "producer_id": pid,
                                               "producer_epoch": epoch, "committed": True})
    assert end["error_code"] == 0
    wait_until(lambda: describe(cluster)["transaction_state"] == "CompleteCommit", 60,
               "CompleteCommit")
    # the batch and one COMMIT marker per partition, replicated (read_committed end 2)
    wait_until(lambda: end_offsets(cluster, "t", [0, 1, 2]) == {0: 2, 1: 2, 2: 2}, 30,
               "the markers at every leader")


@pytest.mark.parametrize("committed", [True, False])
def test_a_new_coordinator_finishes_the_end_after_a_sigkill(cluster: LocalCluster,
                                                           committed: bool) -> None:
    """The markers cannot be written while the only replica of the data partition is
    paused; the coordinator (PrepareCommit/PrepareAbort written) is SIGKILLed; once the
    partition is back, the coordinator elected next loads the state and completes."""
    prepared, complete = (("PrepareCommit", "CompleteCommit") if committed
                          else ("PrepareAbort", "CompleteAbort"))
    old = coordinator(cluster)
    while old is None:
        wait_until(lambda: coordinator(cluster) is not None, 60, "a coordinator")
        old = coordinator(cluster)
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic("one", 3, 1)])
    index, holder = next((i, int(cluster.partition("one", i)["leader"])) for i in range(3)
                         if int(cluster.partition("one", i)["leader"]) != old)
    pid, epoch = begin(cluster, "one", [index])
    wait_until(lambda: produce(cluster, "one", index, pid, epoch) == 0, 30, "the data")
    cluster.pause(str(holder))
    try:
        end = retried(cluster, ApiKey.END_TXN, 3, {
            "transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch,
            "committed": committed})
        assert end["error_code"] == 0
        assert describe(cluster)["transaction_state"] == prepared
        cluster.kill(str(old))
    finally:
        cluster.resume(str(holder))
    wait_until(lambda: coordinator(cluster) not in (None, old), 60, "a new coordinator")
    wait_until(lambda: describe(cluster)["transaction_state"] == complete, 90,
               f"the new coordinator reached {complete}")
    # the data and the marker; the LSO is past both, committed or aborted
    wait_until(lambda: end_offsets(cluster, "one", [index]) == {index: 2}, 30,
               "the marker on the resumed partition")
