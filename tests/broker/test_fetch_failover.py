"""A Fetch is always answered: after a reconnect on the client, and when the fetched
partition changes role on the broker while the Fetch is parked.

The failover symptom ("a consumer's Fetch to the new leader stays in flight until
request_timeout_ms") came from the client: after a failover the consumer's connection
to the new leader was closed (a Metadata request queued behind a parked Fetch timed
out) and reopened; the new socket got the same fd number back, and the long-lived
``Poller`` kept its stale epoll entry (the kernel had dropped the old socket), so the
broker's answer sat in the receive buffer unseen.  The first tests pin that down with a
fake broker socket (no processes, no timing).  The others drive a :class:`BrokerCore`
with a manual clock: a parked Fetch whose partition stops being led here, moves to
another epoch, is deleted, or cannot be read is completed at once with the precise
per-partition error, without waiting for ``max_wait_ms``.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.metadata.records import (
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from clients.network.cluster_metadata import ClusterMetadata
from clients.network.connection import BrokerConnection
from clients.network.node_connections import NodeConnections
from clients.network.poller import Poller
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request, encode_response_bytes
from clients.protocol.errors import ErrorCode
from clients.protocol.framing import read_frame
from clients.records.record import build_batch
from tests.broker.handlers import wire
from tests.broker.image_feed import ImageFeed
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

TOPIC = "fo"
API_VERSIONS_ANSWER = {"error_code": 0, "throttle_time_ms": 0, "api_keys": [
    {"api_key": int(ApiKey.API_VERSIONS), "min_version": 0, "max_version": 3}]}


# -- client: a reconnected socket with a reused fd is watched ----------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0))
    try:
        yield sock
    finally:
        sock.close()


def answer_one(server_side: socket.socket) -> None:
    """Read one request frame and answer it (ApiVersions, at its version) on the same
    socket."""
    frame = read_frame(server_side)
    assert frame is not None, "the client closed before sending its request"
    request = decode_request(frame)
    server_side.sendall(encode_response_bytes(ApiKey.API_VERSIONS, request.api_version,
                                              request.correlation_id, API_VERSIONS_ANSWER))


def connecting(listener: socket.socket, connect: Callable[[], Any]) -> socket.socket:
    """Run ``connect`` (which opens a client connection to ``listener``) while a thread
    accepts it and answers the client's version handshake; returns the server side."""
    accepted: list[socket.socket] = []

    def serve() -> None:
        # accept only once the connection is pending: a blocking accept takes its fd
        # number before it waits, which would steal the number the client should reuse
        select.select([listener], [], [], 30)
        side, _ = listener.accept()
        accepted.append(side)
        answer_one(side)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    connect()
    thread.join(30)
    assert accepted, "the client did not connect"
    return accepted[0]


def reconnect_reusing_fd(conn: BrokerConnection, listener: socket.socket
                         ) -> tuple[socket.socket, int]:
    """Close ``conn`` (as a request timeout does) and reconnect; the kernel hands out
    the lowest free fd, so the new socket gets the old number back."""
    old_fd = conn.fileno()
    conn.close()
    server_side = connecting(listener, conn.connect)
    assert conn.fileno() == old_fd, "precondition: the reconnected socket reuses the fd"
    return server_side, old_fd


def test_poller_watches_a_reconnected_socket_that_got_the_same_fd(
        listener: socket.socket) -> None:
    host, port = listener.getsockname()
    conn = BrokerConnection(host, port, node_id=1, request_timeout_ms=60_000)
    poller = Poller()
    first_side: socket.socket | None = None
    second_side: socket.socket | None = None
    try:
        first_side = connecting(listener, conn.connect)
        conn.send(ApiKey.API_VERSIONS, {})
        answer_one(first_side)
        assert [r.error for r in poller.poll([conn], 30_000)] == [None]  # registered
        second_side, _ = reconnect_reusing_fd(conn, listener)
        request = conn.send(ApiKey.API_VERSIONS, {})
        answer_one(second_side)  # the answer is in the receive buffer before the wait
        responses = poller.poll([conn], 10_000)  # returns at once: data is there
        assert [(r.request, r.error) for r in responses] == [(request, None)]
        assert responses[0].body["api_keys"] == API_VERSIONS_ANSWER["api_keys"]
        assert poller.is_registered(conn)
    finally:
        conn.close()
        poller.close()
        for side in (first_side, second_side):
            if side is not None:
                side.close()


def test_node_connections_poll_sees_the_answer_after_a_timeout_reconnect(
        listener: socket.socket) -> None:
    """The consumer's path: ``NodeConnections.get`` reconnects the same connection
    object after a close; ``poll`` (the long-lived poller) must report its answers."""
    host, port = listener.getsockname()
    net = NodeConnections([(host, port)], ClusterMetadata(), client_id="t",
                          request_timeout_ms=60_000)
    sides: list[socket.socket] = []
    try:
        sides.append(connecting(listener, lambda: net.get(-1)))
        conn = net.get(-1)
        conn.send(ApiKey.API_VERSIONS, {})
        answer_one(sides[0])
        assert len(net.poll(30_000)) == 1
        old_fd = conn.fileno()
        conn.close()  # e.g. a Metadata request timed out behind a parked Fetch
        sides.append(connecting(listener, lambda: net.get(-1)))
        assert net.get(-1) is conn
        assert conn.fileno() == old_fd, "precondition: the reconnected socket reuses the fd"
        request = conn.send(ApiKey.API_VERSIONS, {})
        answer_one(sides[1])
        responses = net.poll(10_000)  # returns at once: data is there
        assert [(r.request, r.error) for r in responses] == [(request, None)]
    finally:
        net.close()
        for side in sides:
            side.close()


# -- broker: a parked fetch completes when its partition changes role ----------------------


def fetch_body(offset: int = 0, epoch: int = -1, partitions: tuple[int, ...] = (0,),
               max_wait_ms: int = 500) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition": p, "current_leader_epoch": epoch, "fetch_offset": offset,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}
                for p in partitions]}]}


def call(core: BrokerCore, api: ApiKey, body: dict[str, Any]) -> list[dict[str, Any] | None]:
    """Run the handler at our highest version; the list fills with the answers (as a
    client reads them) whenever they come."""
    return wire.call(core, api, body)


def codes(answer: dict[str, Any] | None) -> dict[int, int]:
    assert answer is not None
    return {p["partition_index"]: p["error_code"]
            for t in answer["responses"] for p in t["partitions"]}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def standalone(tmp_path: Path, clock: ManualClock) -> Iterator[BrokerCore]:
    core = BrokerCore(BrokerConfig(node_id=0, data_dir=str(tmp_path / "b0")), clock,
                      SystemTimer(clock))
    core.startup()
    core.create_topic(core.validate_new_topic(TOPIC, 2, 1, {}))
    try:
        yield core
    finally:
        core.shutdown()


def test_parked_fetch_expires_at_max_wait_with_an_empty_answer(
        standalone: BrokerCore, clock: ManualClock) -> None:
    answers = call(standalone, ApiKey.FETCH, fetch_body(max_wait_ms=100))
    assert answers == [] and standalone.fetch_purgatory.watched_for((TOPIC, 0)) == 1
    clock.advance(99)
    standalone.timer.advance_clock()
    assert answers == []
    clock.advance(1)
    standalone.timer.advance_clock()
    answer = answers[0]
    assert answer is not None and codes(answer) == {0: 0}
    assert len(answer["responses"][0]["partitions"][0]["records"]) == 0


def test_parked_fetch_completes_at_once_on_a_new_leader_epoch(
        standalone: BrokerCore) -> None:
    partition = standalone.partitions[(TOPIC, 0)]
    answers = call(standalone, ApiKey.FETCH, fetch_body(epoch=partition.leader_epoch))
    assert answers == []
    # re-elected here in a newer epoch (what reconcile does), the request's is stale
    assert partition.make_leader(partition.leader_epoch + 1, [0], [0])
    standalone.wake_partition((TOPIC, 0))
    assert len(answers) == 1 and codes(answers[0]) == {0: ErrorCode.FENCED_LEADER_EPOCH}


def test_parked_fetch_completes_at_once_when_the_topic_is_deleted(
        standalone: BrokerCore) -> None:
    answers = call(standalone, ApiKey.FETCH, fetch_body(partitions=(0, 1)))
    assert answers == []
    standalone.delete_topic(TOPIC)
    assert len(answers) == 1
    assert codes(answers[0]) == {0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 1: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_a_read_failure_while_waking_completes_the_fetch_not_the_producer(
        standalone: BrokerCore, monkeypatch: pytest.MonkeyPatch) -> None:
    partition = standalone.partitions[(TOPIC, 0)]
    fetch = call(standalone, ApiKey.FETCH, fetch_body())
    assert fetch == []

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(partition, "read_records", broken)
    produced = call(standalone, ApiKey.PRODUCE, {
        "acks": 1, "timeout_ms": 1000, "transactional_id": None,
        "topics": [{"name": TOPIC, "partitions": [
            {"index": 0, "records": build_batch([(None, b"v", 1, ())])}]}]})
    answer = produced[0]
    assert answer is not None
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
    assert len(fetch) == 1 and codes(fetch[0]) == {0: ErrorCode.UNKNOWN_SERVER_ERROR}


# controller mode: reconcile against a metadata image -----------------------------------


@pytest.fixture
def controlled(tmp_path: Path, clock: ManualClock) -> Iterator[tuple[BrokerCore, ImageFeed]]:
    config = BrokerConfig(node_id=1, data_dir=str(tmp_path / "b1"),
                          controller_address="127.0.0.1:9")
    core = BrokerCore(config, clock, SystemTimer(clock))
    core.startup()
    feed = ImageFeed(core)
    feed.apply(RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001),
               RegisterBrokerRecord(2, 1, "b", "127.0.0.1", 9002),
               RegisterBrokerRecord(3, 2, "c", "127.0.0.1", 9003),
               UnfenceBrokerRecord(1, 0), UnfenceBrokerRecord(2, 1), UnfenceBrokerRecord(3, 2),
               TopicRecord(TOPIC, 7, 2, 2),
               PartitionRecord(TOPIC, 0, (1, 2), 1, 0, (1, 2), 0),
               PartitionRecord(TOPIC, 1, (1, 2), 1, 0, (1, 2), 0))
    try:
        yield core, feed
    finally:
        core.shutdown()


def test_parked_fetch_completes_at_once_when_leadership_moves_away(
        controlled: tuple[BrokerCore, ImageFeed]) -> None:
    core, feed = controlled
    assert core.partitions[(TOPIC, 0)].is_leader
    answers = call(core, ApiKey.FETCH, fetch_body(partitions=(0, 1)))
    assert answers == []  # nothing below the HW yet: parked
    feed.apply(PartitionRecord(TOPIC, 0, (1, 2), 2, 1, (1, 2), 1))  # broker 2 leads now
    assert len(answers) == 1
    assert codes(answers[0]) == {0: ErrorCode.NOT_LEADER_OR_FOLLOWER, 1: 0}


def test_parked_fetch_completes_at_once_when_the_topic_is_removed(
        controlled: tuple[BrokerCore, ImageFeed]) -> None:
    core, feed = controlled
    # the broker's timer is shared (the transaction coordinator's expiry check lives there
    # too): the parked fetch is the one task added, and it must be gone again
    before = core.fetch_purgatory.delayed
    answers = call(core, ApiKey.FETCH, fetch_body(partitions=(0, 1)))
    assert answers == [] and core.fetch_purgatory.delayed == before + 1
    feed.apply(RemoveTopicRecord(TOPIC))
    assert len(answers) == 1
    assert codes(answers[0]) == {0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 1: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert core.fetch_purgatory.delayed == before
