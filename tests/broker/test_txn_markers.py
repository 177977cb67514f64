"""Transaction markers on a real broker process: a hand-built transactional batch, then
WriteTxnMarkers as a broker login; read_committed Fetch and ListOffsets see the data only
after the COMMIT, an ABORT's data is listed in ``aborted_transactions``, and a client
login's WriteTxnMarkers is refused with nothing written.

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

from broker.users import add_user
from clients.admin import Admin
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.scram import ScramClient, broker_password, broker_username
from clients.records.batch import TRANSACTIONAL_MASK, iter_batches
from clients.records.record import build_batch
from clients.types import NewTopic
from tests.broker.processes import BrokerProcess
from tests.broker.raw_kafka import call, connect

pytestmark = [pytest.mark.multiprocess]
SECRET = "s" * 40
PASSWORD = "a long enough password"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    os.chmod(secret, 0o600)
    users = tmp_path / "users.scram"
    add_user(users, "alice", PASSWORD.encode())
    with BrokerProcess(tmp_path / "broker", overrides={  # no AddPartitionsToTxn here:
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


def produce(sock: socket.socket, records: bytes) -> dict[str, Any]:
    answer = call(sock, ApiKey.PRODUCE, 9, {
        "transactional_id": "tx", "acks": -1, "timeout_ms": 10_000, "topics": [
            {"name": "t", "partitions": [{"index": 0, "records": records}]}]})
    return answer["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


def write_marker(sock: socket.socket, pid: int, epoch: int, commit: bool) -> int:
    answer = call(sock, ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
        "coordinator_epoch": 0, "topics": [{"name": "t", "partition_indexes": [0]}]}]})
    return answer["markers"][0]["topics"][0]["partitions"][0]["error_code"]  # type: ignore[no-any-return]


def fetch_committed(sock: socket.socket) -> dict[str, Any]:
    answer = call(sock, ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 1, "session_id": 0, "session_epoch": -1, "rack_id": "",
        "topics": [{"name": "t", "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": []})
    return answer["responses"][0]["partitions"][0]  # type: ignore[no-any-return]


def latest_committed(sock: socket.socket) -> int:
    answer = call(sock, ApiKey.LIST_OFFSETS, 5, {
        "replica_id": -1, "isolation_level": 1, "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return answer["topics"][0]["partitions"][0]["offset"]  # type: ignore[no-any-return]


def batch_offsets(part: dict[str, Any]) -> list[int]:
    return [h.base_offset for _, h in iter_batches(bytes(part["records"] or b""))]


def test_markers_from_a_broker_login_commit_and_abort(broker: BrokerProcess) -> None:
    client = login(broker.port, "alice", PASSWORD.encode())
    peer = login(broker.port, broker_username(0), broker_password(SECRET, 0))
    try:
        init = call(client, ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout_ms": 60_000,
            "producer_id": -1, "producer_epoch": -1})
        assert init["error_code"] == 0, init
        pid, epoch = init["producer_id"], init["producer_epoch"]

        def txn(seq: int, value: bytes) -> bytes:
            return build_batch([(None, value, 1_000, ())], producer_id=pid,
                               producer_epoch=epoch, base_sequence=seq,
                               attributes=TRANSACTIONAL_MASK)

        assert produce(client, txn(0, b"committed"))["error_code"] == 0  # offset 0
        part = fetch_committed(client)
        assert (part["high_watermark"], part["last_stable_offset"]) == (1, 0)
        assert batch_offsets(part) == [] and latest_committed(client) == 0
        # a client login may not write markers: refused, nothing written
        assert write_marker(client, pid, epoch, True) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert fetch_committed(client)["high_watermark"] == 1
        assert write_marker(peer, pid, epoch, True) == 0  # COMMIT at offset 1
        part = fetch_committed(client)
        assert part["last_stable_offset"] == 2 and batch_offsets(part) == [0, 1]
        assert part["aborted_transactions"] == [] and latest_committed(client) == 2

        assert produce(client, txn(1, b"aborted"))["error_code"] == 0  # offset 2
        assert write_marker(peer, pid, epoch, False) == 0  # ABORT at offset 3
        part = fetch_committed(client)
        assert part["last_stable_offset"] == 4 and batch_offsets(part) == [0, 1, 2, 3]
        assert part["aborted_transactions"] == [{"producer_id": pid, "first_offset": 2}]
    finally:
        client.close()
        peer.close()
