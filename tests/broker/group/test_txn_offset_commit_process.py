"""TxnOffsetCommit on a real broker process: raw requests with a producer id from
InitProducerId, markers written with WriteTxnMarkers as a broker login.  The offsets stay
invisible to OffsetFetch (UNSTABLE_OFFSET_COMMIT with ``require_stable``) until the
COMMIT marker on the group's ``__consumer_offsets`` partition; an ABORT drops them; after
a restart the coordinator loads the partition's log with its markers (committed,
aborted, and one transaction still open, which stays pending until its marker).

The broker runs standalone with a cluster secret (brokers log in with credentials
derived from it) and one client user, so both kinds of login exist on one listener.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.coordination.placement import partition_for
from broker.users import add_user
from clients.admin import Admin
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.scram import ScramClient, broker_password, broker_username
from clients.protocol.topics import OFFSETS_TOPIC
from clients.types import NewTopic
from tests.broker.processes import BrokerProcess, wait_until
from tests.broker.raw_kafka import call, connect

pytestmark = [pytest.mark.multiprocess]
SECRET = "s" * 40
PASSWORD = "a long enough password"
GROUP = "txg"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    os.chmod(secret, 0o600)
    users = tmp_path / "users.scram"
    add_user(users, "alice", PASSWORD.encode())
    # The producer ids here come from a plain InitProducerId (no transaction coordinator
    # involved), so the coordinator's KIP-890 check is off, as in tests/broker/test_txn_markers.py;
    # tests/broker/txn covers TxnOffsetCommit with it on (AddOffsetsToTxn first).
    with BrokerProcess(tmp_path / "broker", overrides={
            "cluster_secret_file": str(secret), "sasl_users_file": str(users),
            "transaction_partition_verification_enable": False}) as b:
        with Admin(b.bootstrap, security_protocol="SASL_PLAINTEXT",
                   sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                   sasl_plain_password=PASSWORD) as admin:
            admin.create_topics([NewTopic("t", 1, 1, {})])
        yield b


def login(port: int, username: str, password: bytes) -> socket.socket:
    sock = connect(port, timeout_s=30)
    assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})[
        "error_code"] == 0
    scram = ScramClient("SCRAM-SHA-256", username, password)
    first = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": scram.first()})
    assert first["error_code"] == 0, first
    final = call(sock, ApiKey.SASL_AUTHENTICATE, 2,
                 {"auth_bytes": scram.final(bytes(first["auth_bytes"]))})
    assert final["error_code"] == 0, final
    return sock


def coordinator_ready(sock: socket.socket) -> bool:
    """FindCoordinator for the group (creates the offsets topic), and the group's
    partition loaded (an OffsetFetch answers without a coordinator error)."""
    found = call(sock, ApiKey.FIND_COORDINATOR, 4, {"key_type": 0,
                                                    "coordinator_keys": [GROUP]})
    if found["coordinators"][0]["error_code"] != 0:
        return False
    return bool(offset_fetch(sock, require_stable=False)["error_code"] == 0)


def offset_fetch(sock: socket.socket, require_stable: bool) -> dict[str, Any]:
    answer = call(sock, ApiKey.OFFSET_FETCH, 8, {"require_stable": require_stable, "groups": [
        {"group_id": GROUP, "topics": [{"name": "t", "partition_indexes": [0]}]}]})
    return answer["groups"][0]  # type: ignore[no-any-return]


def committed(sock: socket.socket, require_stable: bool = False) -> tuple[int, int]:
    """(partition error, committed offset) of t-0 for the group."""
    group = offset_fetch(sock, require_stable)
    assert group["error_code"] == 0, group
    part = group["topics"][0]["partitions"][0]
    return part["error_code"], part["committed_offset"]


def txn_offset_commit(sock: socket.socket, pid: int, epoch: int, offset: int) -> int:
    answer = call(sock, ApiKey.TXN_OFFSET_COMMIT, 3, {
        "transactional_id": "tx", "group_id": GROUP, "producer_id": pid,
        "producer_epoch": epoch, "generation_id": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": "t", "partitions": [{
            "partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
            "committed_metadata": "in a transaction"}]}]})
    return answer["topics"][0]["partitions"][0]["error_code"]  # type: ignore[no-any-return]


def write_marker(sock: socket.socket, pid: int, epoch: int, commit: bool) -> int:
    index = partition_for(GROUP, 5)  # offsets_topic_num_partitions' default
    answer = call(sock, ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
        "coordinator_epoch": 0, "topics": [{"name": OFFSETS_TOPIC,
                                            "partition_indexes": [index]}]}]})
    return answer["markers"][0]["topics"][0]["partitions"][0]["error_code"]  # type: ignore[no-any-return]


UNSTABLE = int(ErrorCode.UNSTABLE_OFFSET_COMMIT)


def test_txn_offsets_show_only_after_the_commit_marker_and_survive_a_restart(
        broker: BrokerProcess) -> None:
    client = login(broker.port, "alice", PASSWORD.encode())
    peer = login(broker.port, broker_username(0), broker_password(SECRET, 0))
    try:
        wait_until(lambda: coordinator_ready(client), 30, "the group coordinator")
        init = call(client, ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout_ms": 60_000,
            "producer_id": -1, "producer_epoch": -1})
        assert init["error_code"] == 0, init
        pid, epoch = init["producer_id"], init["producer_epoch"]

        assert txn_offset_commit(client, pid, epoch, 42) == 0
        assert committed(client) == (0, -1)  # pending: invisible
        assert committed(client, require_stable=True) == (UNSTABLE, -1)
        assert write_marker(peer, pid, epoch, commit=True) == 0
        assert committed(client, require_stable=True) == (0, 42)

        assert txn_offset_commit(client, pid, epoch, 50) == 0
        assert write_marker(peer, pid, epoch, commit=False) == 0
        assert committed(client, require_stable=True) == (0, 42)  # aborted: dropped

        assert txn_offset_commit(client, pid, epoch, 60) == 0  # left open
    finally:
        client.close()
        peer.close()

    broker.stop()
    broker.start()
    client = login(broker.port, "alice", PASSWORD.encode())
    peer = login(broker.port, broker_username(0), broker_password(SECRET, 0))
    try:
        wait_until(lambda: coordinator_ready(client), 30, "the reloaded group coordinator")
        assert committed(client) == (0, 42)  # COMMIT applied, ABORT dropped, 60 pending
        assert committed(client, require_stable=True) == (UNSTABLE, -1)
        assert write_marker(peer, pid, epoch, commit=True) == 0
        assert committed(client, require_stable=True) == (0, 60)
        # a new epoch of the producer fences the old one on the offsets partition
        assert txn_offset_commit(client, pid, epoch + 1, 70) == 0
        assert txn_offset_commit(client, pid, epoch, 71) == ErrorCode.INVALID_PRODUCER_EPOCH
    finally:
        client.close()
        peer.close()
