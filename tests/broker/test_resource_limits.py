"""Per-request bounds, error answers and the controller's connection limits (issue 16),
against real broker and controller processes with raw sockets.

- a legal Metadata request naming 1,000,000 topics is answered (capped: no topic) without
  holding the broker's event loop: small requests on other connections keep flowing;
- a Fetch naming 5,000 partitions with ``max_bytes`` 0 gets one batch of the first
  partition with data; with a larger ``max_bytes`` never more record bytes than it (nor
  than ``fetch_max_bytes``); over ``max_fetch_partitions`` it gets INVALID_REQUEST;
- an error answer (SyncGroup for an unknown group, at every version) keeps the
  connection open;
- the controller keeps capacity for brokers: 1,100 idle client connections do not stop
  a restarting broker from registering; idle connections are closed; per-IP caps hold.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response
from clients.records.batch import iter_batches
from clients.records.record import build_batch
from tests.broker.processes import BrokerProcess
from tests.broker.raw_kafka import (
    LoopProbe,
    api_versions,
    call,
    closed_by_peer,
    connect,
    correlation_of,
    recv_frame,
    request,
    wait_for,
)

pytestmark = pytest.mark.multiprocess
MiB = 1024 * 1024


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


def start_broker(stack: ExitStack, data_dir: Path, topics: dict[str, int] | None = None,
                 **overrides: object) -> BrokerProcess:
    if topics:
        (data_dir / "topics.json").write_text(json.dumps({"version": 1, "topics": {
            name: {"num_partitions": n, "replication_factor": 1, "configs": {}}
            for name, n in topics.items()}}))
    return stack.enter_context(BrokerProcess(data_dir, overrides=overrides))


# ---------------------------------------------------------------- Metadata


def test_metadata_naming_a_million_topics_does_not_hold_the_loop(tmp_path: Path,
                                                                  stack: ExitStack) -> None:
    broker = start_broker(stack, tmp_path)
    frame = request(ApiKey.METADATA, 9, {"topics": [{"name": f"t{i}"} for i in range(1_000_000)]})
    assert len(frame) < 16 * MiB  # legal: within max_request_bytes
    sock = stack.enter_context(connect(broker.port, timeout_s=60))
    with LoopProbe(broker.port) as probe:
        started = time.time()
        sock.sendall(frame)
        answer = recv_frame(sock)
        ended = time.time()
        probe.stop()
    body = decode_response(answer, ApiKey.METADATA, 9).body
    assert body["topics"] == [] and body["brokers"]  # capped: the cluster, no topic
    worst = probe.worst(started, ended)
    print(f"Metadata x 1,000,000 topics: answered in {(ended - started) * 1000:.0f} ms, "
          f"slowest concurrent ApiVersions {worst * 1000:.1f} ms")
    assert worst < 0.5, f"small requests waited {worst:.3f} s"  # was ~7-9 s: loop held
    sock.sendall(api_versions(9))  # the connection is still in order
    assert correlation_of(recv_frame(sock)) == 9


def test_metadata_within_the_bound_is_answered_per_topic(tmp_path: Path,
                                                         stack: ExitStack) -> None:
    broker = start_broker(stack, tmp_path, max_metadata_topics=3)
    sock = stack.enter_context(connect(broker.port))
    names = ["unknown", "bad name!", "other"]  # at the bound: answered topic by topic
    body = call(sock, ApiKey.METADATA, 12, {"topics": [{"name": n} for n in names]})
    assert [t["name"] for t in body["topics"]] == names
    assert [t["error_code"] for t in body["topics"]] == [3, 17, 3]
    over = call(sock, ApiKey.METADATA, 12, {"topics": [{"name": f"t{i}"} for i in range(4)]})
    assert over["topics"] == []


# ---------------------------------------------------------------- Fetch


def _records_sizes(body: dict[str, Any]) -> list[int]:
    return [len(p["records"] or b"") for t in body["responses"] for p in t["partitions"]]


@pytest.fixture
def wide_broker(tmp_path: Path, stack: ExitStack) -> BrokerProcess:
    """200 partitions holding one 16 kB batch each; fetch_max_bytes 1 MiB."""
    broker = start_broker(stack, tmp_path, topics={"wide": 200}, fetch_max_bytes=MiB,
                          max_fetch_partitions=5000)
    batch = build_batch([(None, b"x" * 16_000, int(time.time() * 1000), [])])
    with connect(broker.port) as sock:
        body = call(sock, ApiKey.PRODUCE, 9, {"acks": 1, "timeout_ms": 5000, "topics": [
            {"name": "wide", "partitions": [{"index": p, "records": batch}
                                            for p in range(200)]}]})
    assert all(p["error_code"] == 0 for p in body["responses"][0]["partition_responses"])
    return broker


def _fetch_5000(max_bytes: int) -> dict[str, Any]:
    part = {"fetch_offset": 0, "partition_max_bytes": MiB}
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
            "isolation_level": 0, "topics": [
                {"name": "wide", "partitions": [{"partition": i, **part} for i in range(200)]},
                {"name": "elsewhere", "partitions": [{"partition": i, **part}
                                                     for i in range(4800)]}]}


@pytest.mark.parametrize("max_bytes", [0, 100_000, 2**31 - 1])
def test_fetch_of_5000_partitions_keeps_fetch_max_bytes(wide_broker: BrokerProcess,
                                                        max_bytes: int) -> None:
    with connect(wide_broker.port, timeout_s=60) as sock, LoopProbe(wide_broker.port) as probe:
        started = time.time()
        body = call(sock, ApiKey.FETCH, 12, _fetch_5000(max_bytes))
        ended = time.time()
        probe.stop()
    sizes = _records_sizes(body)
    assert len(sizes) == 5000 and body["error_code"] == 0
    one_batch = sizes[0]
    assert 16_000 < one_batch < 17_000
    limit = min(max_bytes, MiB)
    if max_bytes == 0:  # Kafka: the first batch even if max_bytes is smaller, nothing else
        assert sum(sizes) == one_batch
    else:
        assert one_batch <= sum(sizes) <= limit
        assert sum(sizes) > limit - one_batch  # filled up to the limit
    first = next(p for t in body["responses"] for p in t["partitions"])
    assert len(list(iter_batches(first["records"]))) == 1
    print(f"Fetch x 5000 partitions, max_bytes {max_bytes}: {sum(sizes)} record bytes in "
          f"{(ended - started) * 1000:.0f} ms, slowest concurrent ApiVersions "
          f"{probe.worst(started, ended) * 1000:.1f} ms")


def test_fetch_over_max_fetch_partitions_is_refused(tmp_path: Path, stack: ExitStack) -> None:
    broker = start_broker(stack, tmp_path, topics={"t": 1})  # max_fetch_partitions 1000
    sock = stack.enter_context(connect(broker.port))
    body = _fetch_5000(MiB)
    body["topics"][0]["name"] = "t"
    answer = call(sock, ApiKey.FETCH, 12, body)
    assert answer["error_code"] == 42 and answer["responses"] == []  # INVALID_REQUEST
    body["topics"][1]["partitions"] = body["topics"][1]["partitions"][:799]  # 999: served
    answer = call(sock, ApiKey.FETCH, 12, body)
    assert answer["error_code"] == 0 and len(_records_sizes(answer)) == 999


# ---------------------------------------------------------------- error answers


@pytest.mark.parametrize("version", [0, 3, 5])
def test_sync_group_error_keeps_the_connection(tmp_path: Path, stack: ExitStack,
                                               version: int) -> None:
    broker = start_broker(stack, tmp_path)
    sock = stack.enter_context(connect(broker.port))
    body = {"group_id": "nobody", "generation_id": 1, "member_id": "m",
            "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
            "assignments": []}
    answer = call(sock, ApiKey.SYNC_GROUP, version, body)
    assert answer["error_code"] != 0 and answer["assignment"] == b""
    sock.sendall(api_versions(11))  # still open, still in order
    assert correlation_of(recv_frame(sock)) == 11


def test_error_answers_do_not_close_the_connection(tmp_path: Path, stack: ExitStack) -> None:
    broker = start_broker(stack, tmp_path)
    sock = stack.enter_context(connect(broker.port))
    for version in (0, 5, 9):  # whatever the group state, an answer, never a close
        answer = call(sock, ApiKey.JOIN_GROUP, version, {
            "group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [], "reason": None})
        assert answer["error_code"] != 0
    sock.sendall(api_versions(12))
    assert correlation_of(recv_frame(sock)) == 12


# ---------------------------------------------------------------- controller


def _registration() -> dict[str, Any]:
    return {"broker_id": 1, "cluster_id": "minikafka", "incarnation_id": bytes(range(16)),
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9999,
                           "security_protocol": 0}], "features": [], "rack": None}


def _heartbeat() -> dict[str, Any]:
    return {"broker_id": 1, "broker_epoch": 0, "current_metadata_offset": 0,
            "want_fence": False, "want_shut_down": False}


def _broker_served(port: int) -> bool:
    """A new connection that speaks as a broker (ApiVersions, BrokerRegistration,
    BrokerHeartbeat) gets its answers.  (Whether the registration itself succeeds is
    the controller core's business, not the connection handling's.)"""
    try:
        with connect(port, timeout_s=5) as sock:
            call(sock, ApiKey.API_VERSIONS, 3, {})
            call(sock, ApiKey.BROKER_REGISTRATION, 0, _registration())
            call(sock, ApiKey.BROKER_HEARTBEAT, 0, _heartbeat())
            return True
    except (OSError, ConnectionError):
        return False


def test_idle_clients_cannot_keep_a_broker_from_the_controller(tmp_path: Path,
                                                               stack: ExitStack) -> None:
    from tests.broker.controller.processes import ControllerProcess

    controller = stack.enter_context(ControllerProcess(tmp_path))
    idle = []
    for _ in range(1_100):  # the attack: more idle connections than max_connections
        sock = socket.create_connection(("127.0.0.1", controller.port), timeout=10)
        stack.callback(sock.close)
        idle.append(sock)
    started = time.monotonic()
    # a (re)starting broker retries until it is served, as the metadata follower does
    assert wait_for(lambda: _broker_served(controller.port), 20), "broker never served"
    print(f"broker served {time.monotonic() - started:.1f} s after 1,100 idle connections")
    with connect(controller.port, timeout_s=5) as client:  # a client beyond the limits
        client.sendall(request(ApiKey.METADATA, 12, {"topics": None}))
        assert closed_by_peer(client)  # a reserved place is not for Metadata


def test_controller_connection_limits(tmp_path: Path, stack: ExitStack) -> None:
    from tests.broker.controller.processes import ControllerProcess

    controller = stack.enter_context(ControllerProcess(tmp_path, overrides={
        "max_connections": 10, "max_connections_per_ip": 2, "reserved_broker_connections": 1,
        "connections_max_idle_ms": 1500, "request_read_timeout_ms": 1000,
        "max_metadata_topics": 2}))
    port = controller.port
    clients = [stack.enter_context(connect(port)) for _ in range(2)]
    for c in clients:
        assert call(c, ApiKey.METADATA, 12, {"topics": None})["cluster_id"] == "minikafka"
    over = call(clients[0], ApiKey.METADATA, 12, {"topics": [{"name": n} for n in "abc"]})
    assert over["topics"] == []  # over max_metadata_topics: no topic, connection kept
    broker = stack.enter_context(connect(port))  # 3rd from 127.0.0.1: the reserved place
    call(broker, ApiKey.BROKER_HEARTBEAT, 0, _heartbeat())
    refused = stack.enter_context(connect(port))  # reserve full too: closed at once
    assert closed_by_peer(refused)
    partial = clients.pop()
    partial.sendall(b"\x00\x00\x00")  # a started frame that never completes
    assert closed_by_peer(partial, timeout_s=5)
    # clients[0] idle since its last answer, the reserved place silent (2 s session)
    assert closed_by_peer(clients[0], timeout_s=5)  # idle client closed
    assert closed_by_peer(broker, timeout_s=5)  # silent reserved place closed
    assert _broker_served(port) and wait_for(lambda: served_metadata(port), 5)


def served_metadata(port: int) -> bool:
    try:
        with connect(port, timeout_s=5) as sock:
            return call(sock, ApiKey.METADATA, 12, {"topics": None})["cluster_id"] == "minikafka"
    except (OSError, ConnectionError):
        return False


def test_a_controller_with_a_secret_takes_back_places_held_without_a_broker_login(
        tmp_path: Path, stack: ExitStack) -> None:
    """With a cluster secret the controller serves brokers only: a connection that has
    not logged in as one within ``request_read_timeout_ms`` of opening is closed, even
    one that keeps asking ApiVersions (which it is served) and even on a reserved place;
    a broker's login keeps its place."""
    from broker.auth import write_cluster_secret
    from clients.protocol.scram import broker_password
    from tests.broker.controller.processes import ControllerProcess
    from tests.broker.test_internal_auth import login

    secret_file = tmp_path / "cluster.secret"
    write_cluster_secret(secret_file)
    controller = stack.enter_context(ControllerProcess(tmp_path / "controller", overrides={
        "cluster_secret_file": secret_file, "request_read_timeout_ms": 1_000,
        "max_connections_per_ip": 1, "reserved_broker_connections": 2}))
    broker = stack.enter_context(connect(controller.port))  # the client place
    chatty = stack.enter_context(connect(controller.port))  # a reserved place
    opened = time.monotonic()
    secret = secret_file.read_text().strip()
    assert login(broker, "broker-0", broker_password(secret, 0)) == 0
    rounds = 0
    while True:  # served ApiVersions, again and again, until the login deadline
        try:
            chatty.sendall(api_versions())
            recv_frame(chatty)
        except ConnectionError:
            break
        rounds += 1
        if closed_by_peer(chatty, timeout_s=0.1):
            break
        assert time.monotonic() - opened < 10, "a place held without a login for 10 s"
    assert rounds >= 1 and time.monotonic() - opened >= 0.8  # not (much) before 1 s
    answer = call(broker, ApiKey.METADATA, 12, {"topics": None})  # still served
    assert answer["cluster_id"] == "minikafka"
