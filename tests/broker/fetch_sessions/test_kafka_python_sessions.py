"""kafka-python (3.0.x, KIP-227 sessions on by default) and our own consumer fetch with
incremental fetch sessions from a 3-broker minikafka cluster; kafka-python through a
leader change (SIGKILL).

The client's ``FetchSessionHandler`` is watched, not changed: every session id and
epoch it sends and whether it accepted each response (it rejects a full response that
does not answer every session partition, or an incremental one naming a partition
outside the session).
"""

from __future__ import annotations

import gc
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.fetcher import FetchSessionHandler

from clients.consumer.consumer import Consumer
from clients.protocol.topics import TopicPartition as OurTopicPartition
from tests.broker.cluster_harness import LocalCluster
from tests.broker.compat.common import create, start_cluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]
TOPIC = "kp-sessions"
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from start_cluster(Path(tmp_path_factory.mktemp("fetch-sessions")))


@pytest.fixture(autouse=True)
def _close_refused_sockets() -> Iterator[None]:
    """kafka-python keeps the socket of a refused connection (to the killed broker) open,
    pinned by the frames of a traceback it keeps; it would be reported as an unclosed
    socket (ResourceWarning) in whichever later test frees it.  Once the client's IO
    threads are gone, close the sockets of this process that never connected."""
    yield

    def io_threads_gone() -> bool:
        return not any(t.name.startswith("kafka-io-") for t in threading.enumerate())

    wait_until(io_threads_gone, 15, "kafka-python's IO threads to exit", 0)
    gc.collect()
    for obj in gc.get_objects():
        if isinstance(obj, socket.socket) and obj.fileno() != -1:
            try:
                obj.getpeername()
            except OSError:  # never connected (refused): kafka-python's leftover
                obj.close()


class Watched:
    """What the client's session handlers sent and accepted, per node."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[tuple[int, int, int]] = []  # (node, session id, epoch)
        self.answered: list[int] = []  # nodes whose incremental fetch was answered, no error
        self.rejected = 0
        build, handle = FetchSessionHandler.build_next, FetchSessionHandler.handle_response

        def build_next(handler: Any, partitions: Any) -> Any:
            data = build(handler, partitions)
            self.sent.append((handler.node_id, data.id, data.epoch))
            return data

        def handle_response(handler: Any, response: Any) -> bool:
            last = [epoch for node, _, epoch in self.sent if node == handler.node_id][-1]
            accepted = bool(handle(handler, response))
            self.rejected += not accepted
            if accepted and last >= 1 and response.error_code == 0:
                self.answered.append(handler.node_id)
            return accepted

        monkeypatch.setattr(FetchSessionHandler, "build_next", build_next)
        monkeypatch.setattr(FetchSessionHandler, "handle_response", handle_response)

    def incremental(self, since: int = 0) -> set[int]:
        """Nodes that answered the client's incremental fetches without error."""
        return set(self.answered[since:])


def produce(bootstrap: str, start: int, n: int) -> set[bytes]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        sent = {f"v{i}".encode() for i in range(start, start + n)}
        for i, value in enumerate(sorted(sent)):
            producer.send(TOPIC, value=value, partition=i % PARTITIONS)
        producer.flush(30)
        return sent
    finally:
        producer.close(timeout=10)


def test_our_consumer_fetches_in_incremental_sessions(cluster: LocalCluster) -> None:
    topic = create(cluster, "ours-sessions", PARTITIONS)
    sent = {f"o{i}".encode() for i in range(60)}
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    try:
        for i, value in enumerate(sorted(sent)):
            producer.send(topic, value=value, partition=i % PARTITIONS)
        producer.flush(30)
    finally:
        producer.close(timeout=10)
    got: list[bytes] = []
    leaders = {int(cluster.partition(topic, p)["leader"]) for p in range(PARTITIONS)}
    with Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                  fetch_max_wait_ms=50) as consumer:
        consumer.assign([OurTopicPartition(topic, p) for p in range(PARTITIONS)])
        sessions = consumer._fetcher._sessions  # the fetcher's KIP-227 state per node

        def done() -> bool:
            for records in consumer.poll(timeout_ms=100).values():
                got.extend(r.value for r in records if r.value is not None)
            return sent <= set(got) and leaders <= set(sessions) and all(
                sessions[n].incremental_fetches >= 2 and sessions[n].session_id != 0
                for n in leaders)

        wait_until(done, 60, f"every record, and incremental fetches to the leaders {leaders}", 0)
    assert sorted(got) == sorted(sent)


def test_incremental_sessions_through_a_leader_kill(cluster: LocalCluster,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    create(cluster, TOPIC, PARTITIONS)
    watched = Watched(monkeypatch)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, fetch_max_wait_ms=100,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    got: list[bytes] = []

    def read(expected: set[bytes]) -> bool:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(r.value for r in records)
        return expected <= set(got)

    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        sent = produce(cluster.bootstrap, 0, 60)
        wait_until(lambda: read(sent) and len(watched.incremental()) == 3, 60,
                   "every record, with incremental fetches to all three leaders", 0)
        leader = str(cluster.partition(TOPIC, 0)["leader"])
        before = len(watched.answered)
        cluster.kill(leader)
        cluster.wait_partition(TOPIC, 0, lambda p: str(p["leader"]) not in (leader, "-1"),
                               "a new leader")
        sent |= produce(cluster.bootstrap, 60, 60)
        survivors = {int(b) for b in cluster.state.brokers} - {int(leader)}
        wait_until(lambda: read(sent) and watched.incremental(before) >= survivors, 60,
                   f"every record from the new leaders, in incremental sessions to "
                   f"{survivors} (missing {len(sent - set(got))}, "
                   f"sent since the kill {watched.sent[before:][-6:]})", 0)
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)  # each record once: no session lost a position
    assert watched.rejected == 0  # every response was one the client's session accepts
