"""An open transaction survives its leader: followers learn it from the batches they copy.

A 3-broker cluster; a hand-built transactional batch is acknowledged by the ISR
(acks=all), its leader is SIGKILLed, and the new leader holds read_committed readers
below the transaction (LSO) until a broker login's WriteTxnMarkers ABORT, after which
the data is listed in ``aborted_transactions``.  The new leader's HW is waited for (with
a deadline): it may start below the old leader's (see the test), and reaches the
committed end once the other ISR member fetches from it.  WriteTxnMarkers is a broker
API: on a cluster with an internal listener it is served there only, to a broker login.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clients.admin import Admin
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.scram import ScramClient, broker_password, broker_username
from clients.records.batch import TRANSACTIONAL_MASK
from clients.records.record import build_batch
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.raw_kafka import call, connect

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    # hand-built transactional batches with no transaction coordinator involved: its
    # KIP-890 check is off (tests/broker/txn covers the path with it on)
    with LocalCluster(tmp_path, 3, {"replica_lag_time_max_ms": 30_000,
                                    "transaction_partition_verification_enable": False}) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic("t", 1, 3, {"min.insync.replicas": "2"})])
        c.wait_partition("t", 0, lambda p: len(p["isr"]) == 3, "full ISR")
        yield c


def broker_login(cluster: LocalCluster, broker_id: int) -> socket.socket:
    """A broker login on ``broker_id``'s internal listener (as the coordinator's)."""
    secret = (Path(cluster.data_dir) / "cluster.secret").read_text().strip()
    sock = connect(cluster.state.brokers[str(broker_id)].internal_port, timeout_s=30)
    assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})[
        "error_code"] == 0
    scram = ScramClient("SCRAM-SHA-256", broker_username(0), broker_password(secret, 0))
    first = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": scram.first()})
    final = call(sock, ApiKey.SASL_AUTHENTICATE, 2,
                 {"auth_bytes": scram.final(bytes(first["auth_bytes"]))})
    assert final["error_code"] == 0, final
    return sock


def client(cluster: LocalCluster, broker_id: int) -> socket.socket:
    return connect(cluster.state.brokers[str(broker_id)].port, timeout_s=30)


def fetch_committed(sock: socket.socket) -> dict[str, Any]:
    answer = call(sock, ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 1, "session_id": 0, "session_epoch": -1, "rack_id": "",
        "topics": [{"name": "t", "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": []})
    return answer["responses"][0]["partitions"][0]  # type: ignore[no-any-return]


def abort(sock: socket.socket, pid: int, epoch: int) -> int:
    answer = call(sock, ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
        "coordinator_epoch": 0, "topics": [{"name": "t", "partition_indexes": [0]}]}]})
    return answer["markers"][0]["topics"][0]["partitions"][0]["error_code"]  # type: ignore[no-any-return]


def test_a_new_leader_holds_the_open_transaction_and_aborts_it(cluster: LocalCluster) -> None:
    leader = cluster.partition("t", 0)["leader"]
    with client(cluster, leader) as sock:
        init = call(sock, ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout_ms": 60_000,
            "producer_id": -1, "producer_epoch": -1})
        pid, epoch = init["producer_id"], init["producer_epoch"]
        batch = build_batch([(None, b"in flight", 1_000, ())], producer_id=pid,
                            producer_epoch=epoch, base_sequence=0,
                            attributes=TRANSACTIONAL_MASK)
        produced = call(sock, ApiKey.PRODUCE, 9, {
            "transactional_id": "tx", "acks": -1, "timeout_ms": 10_000, "topics": [
                {"name": "t", "partitions": [{"index": 0, "records": batch}]}]})
        assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0
        assert fetch_committed(sock)["last_stable_offset"] == 0
    with client(cluster, leader) as sock:  # the marker needs a broker login ...
        assert abort(sock, pid, epoch) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED

    cluster.kill(str(leader))
    part = cluster.wait_partition("t", 0, lambda p: p["leader"] not in (-1, leader),
                                  "a new leader")
    new_leader = part["leader"]
    with client(cluster, new_leader) as sock:
        # The new leader's HW is the one it had learned as a follower, which may still be
        # 0: the old leader moved its HW to 1 when the ISR had fetched the batch, and a
        # follower hears of it in its next fetch answer, which the kill may have cut off.
        # It reaches 1 once the ISR (the other follower) fetches from it (Kafka's rule
        # too: a new leader's HW may lag the old one's).  What holds at every answer:
        # the follower knew the transaction was open, so the LSO never passes it.
        seen: dict[str, Any] = {}

        def committed_end_reached() -> bool:
            seen.clear()
            seen.update(fetch_committed(sock))
            if seen["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                return False  # the broker has not applied the metadata naming it yet
            assert seen["error_code"] == 0 and seen["high_watermark"] in (0, 1), seen
            assert seen["last_stable_offset"] == 0, seen
            return seen["high_watermark"] == 1

        wait_until(committed_end_reached, 30, "the new leader's HW at the committed end")
    with broker_login(cluster, new_leader) as peer:  # ... on the internal listener
        assert abort(peer, pid, epoch) == 0
    with client(cluster, new_leader) as sock:
        seen = fetch_committed(sock)
        assert seen["last_stable_offset"] == 2, seen
        assert seen["aborted_transactions"] == [{"producer_id": pid, "first_offset": 0}]
