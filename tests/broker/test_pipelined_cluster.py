"""Pipelined Produce requests of one connection on an RF 3 leader (issue 36): the second
starts while the first waits for its followers, and its answer waits for the first's."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response
from clients.records.bulk_encode import encode_batch_bulk
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.raw_kafka import connect, correlation_of, recv_frame, request

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]
PRODUCE_V = 9


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    # paused followers stay in the ISR for the test's few seconds
    with LocalCluster(tmp_path, 3, {"replica_lag_time_max_ms": 30_000}) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic("t", 1, 3, {"min.insync.replicas": "2"})])
        c.wait_partition("t", 0, lambda p: len(p["isr"]) == 3, "full ISR")
        yield c


def produce(cid: int, records: int, acks: int) -> bytes:
    batch = encode_batch_bulk([b"v%d" % i for i in range(records)],
                              timestamps=int(time.time() * 1000))
    return request(ApiKey.PRODUCE, PRODUCE_V, {
        "transactional_id": None, "acks": acks, "timeout_ms": 30_000, "topics": [
            {"name": "t", "partitions": [{"index": 0, "records": batch}]}]}, cid)


def test_a_later_answer_waits_for_the_parked_produce_before_it(cluster: LocalCluster) -> None:
    p = cluster.partition("t", 0)
    leader = p["leader"]
    followers = [str(r) for r in p["replicas"] if r != leader]
    with connect(cluster.state.brokers[str(leader)].port, timeout_s=30) as sock:
        for f in followers:
            cluster.pause(f)
        try:
            # 1: acks=all, parked until a follower fetches; 2: acks=1, appended at once
            sock.sendall(produce(1, 4, -1) + produce(2, 3, 1))
            sock.settimeout(1.0)
            with pytest.raises(socket.timeout):  # 2's answer must not overtake 1's
                recv_frame(sock)
        finally:
            for f in followers:
                cluster.resume(f)
        sock.settimeout(30)
        answers = [recv_frame(sock) for _ in range(2)]
    assert [correlation_of(a) for a in answers] == [1, 2]
    parts = [decode_response(a, ApiKey.PRODUCE, PRODUCE_V).body["responses"][0][
        "partition_responses"][0] for a in answers]
    assert [x["error_code"] for x in parts] == [0, 0]
    # the second was appended behind the first (4 records), while the first was parked
    assert parts[1]["base_offset"] == parts[0]["base_offset"] + 4
