"""The cluster's internal APIs from an outsider's plain socket: refused, state unchanged.

A cluster started by ``minikafka cluster start`` has a secret; its brokers log in to the
controller and to each other with SCRAM credentials derived from it (:mod:`broker.auth`).
Each attack below worked before (a raw-socket report against a 3-broker cluster): a
forged heartbeat fenced every broker for good, a forged registration moved a live
broker's address, a rogue broker 9 got a partition, producer ids and the whole metadata
log went to a plain client, and a client posing as a follower (Fetch with a follower's
``replica_id``) moved the HW so an acks=all record was acknowledged that no follower
held.  Now the controller closes a connection that sends any of them (or any other API
but ApiVersions and the SASL exchange) before a broker login, a broker's login cannot
act for another broker (CLUSTER_AUTHORIZATION_FAILED), a follower's requests on a leader
need the follower's login, and the cluster stays as it was.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.metadata.records import METADATA_VERSION, METADATA_VERSION_FEATURE
from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.scram import ScramClient, broker_password
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from storage.meta_properties import read_meta_properties
from tests.broker.cluster_harness import LocalCluster
from tests.broker.raw_kafka import api_versions, call, connect, recv_frame, request

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]
DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
LOGIN_WITHIN_MS = 3_000  # request_read_timeout_ms: how long an internal connection may wait


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("auth")), 3,
                      {"replica_lag_time_max_ms": 30_000,
                       "request_read_timeout_ms": LOGIN_WITHIN_MS}) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic("t", 1, 3, {"min.insync.replicas": "2"})])
        c.wait_partition("t", 0, lambda p: len(p["isr"]) == 3, "full ISR")
        yield c


def controller(cluster: LocalCluster) -> socket.socket:
    return connect(cluster.state.controller.port, timeout_s=10)


def registration(broker_id: int, port: int) -> dict[str, Any]:
    return {"broker_id": broker_id, "cluster_id": "minikafka",
            "incarnation_id": bytes(range(16)),
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": port,
                           "security_protocol": 0}], "features": [], "rack": None}


def heartbeat(broker_id: int, **flags: bool) -> dict[str, Any]:
    return {"broker_id": broker_id, "broker_epoch": 0, "current_metadata_offset": 0,
            "want_fence": False, "want_shut_down": False, **flags}


def login(sock: socket.socket, username: str, password: bytes) -> int:
    """SCRAM-SHA-256 over SaslHandshake v1 + SaslAuthenticate; the last error code."""
    assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})[
        "error_code"] == 0
    scram = ScramClient("SCRAM-SHA-256", username, password)
    first = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": scram.first()})
    assert first["error_code"] == 0
    final = call(sock, ApiKey.SASL_AUTHENTICATE, 2,
                 {"auth_bytes": scram.final(bytes(first["auth_bytes"]))})
    if final["error_code"] == 0:
        scram.verify(bytes(final["auth_bytes"]))
    return int(final["error_code"])


def healthy(cluster: LocalCluster) -> None:
    report = cluster.report()
    ports = {str(b["node_id"]): b["port"] for b in report["brokers"] if not b["fenced"]}
    assert ports == {k: v.port for k, v in cluster.state.brokers.items()}, report["brokers"]
    part = cluster.partition("t", 0)
    assert part["leader"] >= 0 and len(part["isr"]) == 3, part


def closed_unanswered(sock: socket.socket, api: ApiKey, version: int,
                      body: dict[str, Any]) -> bool:
    """``sock`` is closed by the peer after (or before) ``api`` instead of answering it."""
    try:
        sock.sendall(request(api, version, body))
        recv_frame(sock)
    except ConnectionError:
        return True
    return False


def test_forged_control_plane_requests_are_refused(cluster: LocalCluster) -> None:
    part = cluster.partition("t", 0)
    change = {"partition_index": 0, "leader_epoch": part["leader_epoch"],
              "new_isr": [part["leader"]], "partition_epoch": 0, "leader_recovery_state": 0}
    forged: list[tuple[ApiKey, int, dict[str, Any]]] = [
        *((ApiKey.BROKER_HEARTBEAT, 0, heartbeat(broker_id, **{flag: True}))
          for broker_id in (0, 1, 2)  # fence everyone / shut everyone down
          for flag in ("want_shut_down", "want_fence")),
        (ApiKey.BROKER_REGISTRATION, 0, registration(1, 4444)),  # move live broker 1
        (ApiKey.BROKER_REGISTRATION, 0, registration(9, 4444)),  # a rogue broker 9
        (ApiKey.ALTER_PARTITION, 0, {"broker_id": part["leader"], "broker_epoch": 0,
                                     "topics": [{"name": "t", "partitions": [change]}]}),
        (ApiKey.ALLOCATE_PRODUCER_IDS, 0, {"broker_id": 0, "broker_epoch": 0}),
        *((ApiKey.FETCH, 12, {  # the metadata log
            "replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                {"name": "__cluster_metadata", "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
          for replica_id in (-1, 0, 9)),
    ]
    for api, version, body in forged:  # before a broker login: closed, never answered
        with controller(cluster) as sock:
            assert call(sock, ApiKey.API_VERSIONS, 3, {})["error_code"] == 0
            assert closed_unanswered(sock, api, version, body), api.name
    healthy(cluster)


def test_a_login_proves_one_broker_id_only(cluster: LocalCluster) -> None:
    with controller(cluster) as sock:  # a guessed secret: the login fails
        assert login(sock, "broker-1", broker_password("x" * 64, 1)) == \
            ErrorCode.SASL_AUTHENTICATION_FAILED
        assert closed_unanswered(sock, ApiKey.BROKER_HEARTBEAT, 0,
                                 heartbeat(1, want_fence=True))
    secret = (Path(cluster.data_dir) / "cluster.secret").read_text().strip()
    with controller(cluster) as sock:  # broker 0's own login cannot speak for broker 1
        assert login(sock, "broker-0", broker_password(secret, 0)) == 0
        assert call(sock, ApiKey.BROKER_HEARTBEAT, 0, heartbeat(1, want_shut_down=True))[
            "error_code"] == DENIED
        assert call(sock, ApiKey.BROKER_REGISTRATION, 0, registration(1, 4444))[
            "error_code"] == DENIED
    healthy(cluster)


def test_a_second_process_with_a_live_brokers_id_or_another_cluster_is_refused(
        cluster: LocalCluster) -> None:
    # an insider with the secret (say, a stray second copy of broker 1): the login
    # passes, but the controller keeps the live broker 1 and this cluster's id
    root = Path(cluster.data_dir)
    ids = {read_meta_properties(root / d)["cluster.id"]  # type: ignore[index]
           for d in ("controller", "broker-0", "broker-1", "broker-2")}
    assert len(ids) == 1 and ids != {"minikafka"}, ids  # one random id, in every data dir
    (cluster_id,) = ids
    features = [{"name": METADATA_VERSION_FEATURE, "min_supported_version": METADATA_VERSION,
                 "max_supported_version": METADATA_VERSION}]
    secret = (root / "cluster.secret").read_text().strip()
    with controller(cluster) as sock:
        assert login(sock, "broker-1", broker_password(secret, 1)) == 0
        answer = call(sock, ApiKey.BROKER_REGISTRATION, 0,
                      {**registration(1, 4444), "cluster_id": cluster_id,
                       "features": features})
        assert answer["error_code"] == ErrorCode.DUPLICATE_BROKER_REGISTRATION, answer
        answer = call(sock, ApiKey.BROKER_REGISTRATION, 0,
                      {**registration(1, 4444), "features": features})
        assert answer["error_code"] == ErrorCode.INCONSISTENT_CLUSTER_ID, answer
        assert "minikafka" in answer["error_message"]
    healthy(cluster)


def test_a_client_posing_as_a_follower_cannot_move_the_high_watermark(
        cluster: LocalCluster) -> None:
    part = cluster.partition("t", 0)
    leader = part["leader"]
    followers = [r for r in part["replicas"] if r != leader]
    leader_port = cluster.state.brokers[str(leader)].port
    with Consumer(bootstrap_servers=cluster.bootstrap) as consumer:
        end = consumer.end_offsets([TopicPartition("t", 0)])[TopicPartition("t", 0)]
    for f in followers:
        cluster.pause(str(f))
    try:
        with Producer(cluster.bootstrap, acks="all", request_timeout_ms=4000,
                      delivery_timeout_ms=5000, retries=0,
                      enable_idempotence=False) as producer:
            future = producer.send("t", b"must not be acknowledged", partition=0)
            with connect(leader_port, timeout_s=10) as sock:
                for f in followers:  # "I am follower f and I have everything"
                    answer = call(sock, ApiKey.FETCH, 12, {
                        "replica_id": f, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                        "topics": [{"name": "t", "partitions": [
                            {"partition": 0, "fetch_offset": end + 1, "current_leader_epoch": -1,
                             "partition_max_bytes": 1 << 20}]}]})
                    assert answer["error_code"] == DENIED
                    (p,) = answer["responses"][0]["partitions"]
                    assert p["error_code"] == DENIED and not bytes(p["records"])
            with pytest.raises(Exception):  # noqa: B017 - any failure: it was not acknowledged
                future.result(15)
    finally:
        for f in followers:
            cluster.resume(str(f))
    cluster.wait_partition("t", 0, lambda p: len(p["isr"]) == 3, "followers back")


def test_a_client_cannot_read_the_log_end_as_a_follower(cluster: LocalCluster) -> None:
    """ListOffsets latest as a replica answers the log end (above the HW, as Kafka gives
    a follower), OffsetsForLeaderEpoch the end of the leader's epoch: both only to the
    broker the replica id names.  As a consumer (-1) the same calls are answered."""
    part = cluster.partition("t", 0)
    follower = next(r for r in part["replicas"] if r != part["leader"])
    leader_port = cluster.state.brokers[str(part["leader"])].port
    with connect(leader_port, timeout_s=10) as sock:
        for replica_id, wanted in ((follower, DENIED), (-1, ErrorCode.NONE)):
            answer = call(sock, ApiKey.LIST_OFFSETS, 7, {
                "replica_id": replica_id, "isolation_level": 0, "topics": [{
                    "name": "t", "partitions": [{"partition_index": 0, "timestamp": -1,
                                                 "current_leader_epoch": -1}]}]})
            (p,) = answer["topics"][0]["partitions"]
            assert p["error_code"] == wanted, p
            assert (p["offset"] == -1) == (wanted == DENIED)
            answer = call(sock, ApiKey.OFFSETS_FOR_LEADER_EPOCH, 4, {
                "replica_id": replica_id, "topics": [{"name": "t", "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
            (p,) = answer["topics"][0]["partitions"]
            assert p["error_code"] == wanted, p
            assert (p["end_offset"] == -1) == (wanted == DENIED)
    healthy(cluster)


def list_offsets_as(sock: socket.socket, replica_id: int) -> dict[str, Any]:
    answer = call(sock, ApiKey.LIST_OFFSETS, 7, {
        "replica_id": replica_id, "isolation_level": 0, "topics": [{
            "name": "t", "partitions": [{"partition_index": 0, "timestamp": -1,
                                         "current_leader_epoch": -1}]}]})
    (p,) = answer["topics"][0]["partitions"]
    return dict(p)


def test_follower_requests_are_served_on_the_internal_listener_only(
        cluster: LocalCluster) -> None:
    """Each broker has a second port for its followers (``internal_port``, laid out by
    ``cluster start``): there only a broker login is served; on the client port even a
    broker's valid login cannot ask as a replica."""
    part = cluster.partition("t", 0)
    follower = next(r for r in part["replicas"] if r != part["leader"])
    leader = cluster.state.brokers[str(part["leader"])]
    assert leader.internal_port > 0 and leader.internal_port != leader.port
    secret = (Path(cluster.data_dir) / "cluster.secret").read_text().strip()
    with connect(leader.port, timeout_s=10) as sock:  # the client listener
        assert login(sock, f"broker-{follower}", broker_password(secret, follower)) == 0
        assert list_offsets_as(sock, follower)["error_code"] == DENIED
        assert list_offsets_as(sock, -1)["error_code"] == ErrorCode.NONE
    with connect(leader.internal_port, timeout_s=10) as sock:  # nothing before a login
        sock.sendall(request(ApiKey.METADATA, 12, {
            "topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}))
        with pytest.raises(ConnectionError):
            recv_frame(sock)
    with connect(leader.internal_port, timeout_s=10) as sock:  # brokers' logins only
        answer = call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})
        assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer["mechanisms"] == ["SCRAM-SHA-256"]
        started = time.monotonic()  # and a place held without a login is taken back
        with pytest.raises(ConnectionError):
            recv_frame(sock)
        assert time.monotonic() - started < LOGIN_WITHIN_MS / 1000 + 2
    with connect(leader.internal_port, timeout_s=10) as sock:
        assert login(sock, f"broker-{follower}", broker_password(secret, follower)) == 0
        answer = list_offsets_as(sock, follower)  # the log end, as a follower sees it
        assert answer["error_code"] == ErrorCode.NONE and answer["offset"] >= 0, answer
    healthy(cluster)


def test_clients_filling_the_client_port_do_not_keep_a_follower_out(
        cluster: LocalCluster) -> None:
    """A restarted follower reconnects to its leader while the leader's client port is
    at ``max_connections_per_ip`` for 127.0.0.1 (the followers' address too): it fetches
    on the internal listener, so it catches up and rejoins the ISR.  (With one shared
    port it stays out: its fetcher's connections are closed like any other.)"""
    part = cluster.partition("t", 0)
    follower = next(r for r in part["replicas"] if r != part["leader"])
    leader = cluster.state.brokers[str(part["leader"])]
    cluster.kill(str(follower))
    cluster.wait_partition("t", 0, lambda p: follower not in p["isr"], "the follower fenced")
    with Producer(cluster.bootstrap, acks="all") as producer:  # one it must fetch to rejoin
        producer.send("t", b"while the follower was down", partition=0).result(30)
    held: list[socket.socket] = []
    try:
        while True:  # fill the leader's client port up to its cap (500 per IP)
            sock = connect(leader.port, timeout_s=10)
            held.append(sock)
            sock.sendall(api_versions())
            try:
                recv_frame(sock)
            except OSError:
                break  # refused: the cap is reached
            assert len(held) <= 600, "no per-IP cap on the client port"
        cluster.restart(str(follower))
        cluster.wait_partition("t", 0, lambda p: len(p["isr"]) == 3,
                               "the follower back in the ISR", timeout_s=60)
        with connect(leader.port, timeout_s=10) as extra:  # clients were still shut out
            extra.sendall(api_versions())
            with pytest.raises(OSError):
                recv_frame(extra)
    finally:
        for sock in held:
            sock.close()
    healthy(cluster)
