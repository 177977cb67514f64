"""Connection limits and request memory against a real broker, raw sockets (issue 16).

- ``max_connections`` / ``max_connections_per_ip`` (+ overrides): extra connections are
  closed at once, freed capacity is reused;
- ``connections_max_idle_ms``: idle connections are closed, busy ones (a request with the
  main process, or traffic) are not;
- ``request_read_timeout_ms``: a started frame that does not complete in time closes its
  connection;
- memory for a declared frame is taken as its bytes arrive: twelve connections that
  declare 16 MiB frames and stall do not starve the request pool - a small request and a
  1 MiB request from other clients are still answered;
- partial frames are bounded (issue 30): forty connections that each send 4 MiB of a
  16 MiB frame and stall hold at most ``max_partial_request_bytes`` of the pool; fresh
  clients' ApiVersions, Metadata and an acks=all Produce are answered at once; every
  stalled connection, parked or not, is closed at its ``request_read_timeout_ms``.
"""

from __future__ import annotations

import json
import select
import struct
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import psutil
import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response
from clients.records.record import build_batch
from tests.broker.processes import BrokerProcess
from tests.broker.raw_kafka import (
    api_versions,
    call,
    closed_by_peer,
    connect,
    correlation_of,
    pool_of,
    recv_frame,
    request,
    served,
    stall_frames,
    wait_for,
)

pytestmark = pytest.mark.multiprocess
MiB = 1024 * 1024


def start_broker(stack: ExitStack, tmp_path: Path, topics: dict[str, int] | None = None,
                 **overrides: object) -> BrokerProcess:
    if topics:
        (tmp_path / "topics.json").write_text(json.dumps({"version": 1, "topics": {
            name: {"num_partitions": n, "replication_factor": 1, "configs": {}}
            for name, n in topics.items()}}))
    return stack.enter_context(BrokerProcess(tmp_path, overrides=overrides))


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


def test_stalled_large_frames_do_not_starve_the_request_pool(tmp_path: Path,
                                                              stack: ExitStack) -> None:
    broker = start_broker(stack, tmp_path, request_read_timeout_ms=3000)
    stalled = []
    for _ in range(12):  # 12 x 16 MiB declared: twice the pool's request share (96 MiB)
        sock = stack.enter_context(connect(broker.port))
        sock.sendall(struct.pack(">i", 16 * MiB) + b"\x00" * 100)
        stalled.append(sock)
    started = time.monotonic()
    assert served(broker.port, timeout_s=5)
    small_s = time.monotonic() - started
    big = stack.enter_context(connect(broker.port))  # a 1 MiB request from another client
    body = {"acks": 1, "timeout_ms": 1000, "transactional_id": None, "topics": [
        {"name": "nowhere", "partitions": [{"index": 0, "records": b"\x00" * MiB}]}]}
    answer = call(big, ApiKey.PRODUCE, 9, body)
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 3  # unknown
    # the stalled frames are dropped once request_read_timeout_ms has passed
    assert all(closed_by_peer(s, timeout_s=10) for s in stalled)
    print(f"small request answered in {small_s * 1000:.0f} ms next to 12 stalled 16 MiB frames")


def test_stalled_partial_frames_are_bounded_and_lock_no_one_out(tmp_path: Path,
                                                                  stack: ExitStack) -> None:
    timeout_s = 6.0
    broker = start_broker(stack, tmp_path, topics={"t": 1},
                          request_read_timeout_ms=int(timeout_s * 1000))
    bound = 32 * MiB  # max_partial_request_bytes, auto: a quarter of the 128 MiB pool
    pool = pool_of(broker.pid)
    stack.callback(pool.close)
    network = psutil.Process(broker.network_pids()[0])
    rss_before = network.memory_info().rss
    started = time.monotonic()
    stalled, sent = stall_frames(broker.port, 40, 16 * MiB, 4 * MiB)
    for sock in stalled:
        stack.callback(sock.close)
    # the broker was offered more than the bound (160 MiB here: loopback's socket
    # buffers take 4 MiB per connection while the broker does not read)
    assert sent > bound, f"only {sent / MiB:.0f} MiB could be sent: the attack did not happen"
    held = pool.metrics().allocated_bytes
    assert held <= bound, f"partial frames hold {held / MiB:.1f} MiB"  # today: 96 MiB
    probe_s = 1.0  # much less than request_read_timeout_ms: nobody waits for the stalled
    batch = build_batch([(None, b"v", int(time.time() * 1000), [])])
    produce = {"acks": -1, "timeout_ms": 2000, "transactional_id": None, "topics": [
        {"name": "t", "partitions": [{"index": 0, "records": batch}]}]}
    for i in range(3):
        with connect(broker.port, timeout_s=probe_s) as fresh:
            asked = time.monotonic()
            fresh.sendall(api_versions(100 + i))
            assert correlation_of(recv_frame(fresh)) == 100 + i
            body = call(fresh, ApiKey.METADATA, 12, {"topics": [{"name": "t"}],
                                                      "allow_auto_topic_creation": False,
                                                      "include_topic_authorized_operations":
                                                          False})
            assert body["topics"][0]["error_code"] == 0
            answer = call(fresh, ApiKey.PRODUCE, 9, produce)
            assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
            assert time.monotonic() - asked < probe_s
    grown = network.memory_info().rss - rss_before
    assert grown < bound + 16 * MiB, f"network process RSS +{grown / MiB:.0f} MiB"
    # every stalled connection, parked for memory or not, closes at its deadline
    assert all(closed_by_peer(s, timeout_s=max(0.1, started + timeout_s + 3 - time.monotonic()))
               for s in stalled)
    assert time.monotonic() - started < timeout_s + 3
    assert wait_for(lambda: pool.metrics().allocated_bytes == 0, 5)  # all given back
    assert served(broker.port, timeout_s=5)


def test_connections_beyond_the_limits_are_closed(tmp_path: Path, stack: ExitStack) -> None:
    broker = start_broker(stack, tmp_path, max_connections=8, max_connections_per_ip=3,
                          max_connections_per_ip_overrides="10.1.2.3:1")
    first = [stack.enter_context(connect(broker.port)) for _ in range(3)]
    for i, sock in enumerate(first):
        sock.sendall(api_versions(i))
        assert correlation_of(recv_frame(sock)) == i
    extra = stack.enter_context(connect(broker.port))
    assert closed_by_peer(extra, timeout_s=5)  # a 4th from 127.0.0.1
    first.pop().close()
    assert wait_for(lambda: served(broker.port, 2), 10)  # the freed place is reused


def test_per_ip_override_and_max_connections(tmp_path: Path, stack: ExitStack) -> None:
    broker = start_broker(stack, tmp_path, max_connections=5, max_connections_per_ip=2,
                          max_connections_per_ip_overrides="127.0.0.1:100")
    socks = [stack.enter_context(connect(broker.port)) for _ in range(5)]
    for i, sock in enumerate(socks):  # the override lets 127.0.0.1 open 5
        sock.sendall(api_versions(i))
        assert correlation_of(recv_frame(sock)) == i
    assert closed_by_peer(stack.enter_context(connect(broker.port)), timeout_s=5)  # 6th


def test_idle_connections_are_closed_busy_ones_are_not(tmp_path: Path,
                                                       stack: ExitStack) -> None:
    broker = start_broker(stack, tmp_path, topics={"t": 1}, connections_max_idle_ms=1000)
    idle = stack.enter_context(connect(broker.port))
    chatty = stack.enter_context(connect(broker.port))
    waiting = stack.enter_context(connect(broker.port))
    fetch = {"replica_id": -1, "max_wait_ms": 2500, "min_bytes": 1, "max_bytes": MiB,
             "isolation_level": 0, "topics": [{"name": "t", "partitions": [
                 {"partition": 0, "fetch_offset": 0, "partition_max_bytes": MiB}]}]}
    waiting.sendall(request(ApiKey.FETCH, 12, fetch, correlation_id=77))  # parked 2.5 s
    deadline = time.monotonic() + 2.2  # past the idle timeout, before the fetch answers
    idle_closed = False
    while time.monotonic() < deadline:
        chatty.sendall(api_versions(5))
        assert correlation_of(recv_frame(chatty)) == 5
        if not idle_closed:  # paced by waiting (at most 0.25 s) for the idle one to close
            idle_closed = closed_by_peer(idle, timeout_s=0.25)
        else:  # or for the parked fetch's answer to arrive
            select.select([waiting], [], [], 0.25)
    assert idle_closed or closed_by_peer(idle, timeout_s=5)
    answer = recv_frame(waiting)  # the long request was not cut as "idle"
    assert correlation_of(answer) == 77
    assert decode_response(answer, ApiKey.FETCH, 12).body["error_code"] == 0
    waiting.sendall(api_versions(78))
    assert correlation_of(recv_frame(waiting)) == 78


def test_a_started_frame_must_complete_in_time(tmp_path: Path, stack: ExitStack) -> None:
    broker = start_broker(stack, tmp_path, request_read_timeout_ms=1000)
    in_length = stack.enter_context(connect(broker.port))
    in_length.sendall(b"\x00\x00")
    in_body = stack.enter_context(connect(broker.port))
    in_body.sendall(api_versions(1)[:10])
    slow = stack.enter_context(connect(broker.port))
    frame = api_versions(2)
    for i in range(0, len(frame), 8):  # the whole frame within ~0.5 s: in time
        slow.sendall(frame[i:i + 8])
        time.sleep(0.05)
    assert correlation_of(recv_frame(slow)) == 2
    started = time.monotonic()
    assert closed_by_peer(in_length, timeout_s=5)
    assert closed_by_peer(in_body, timeout_s=5)
    assert time.monotonic() - started < 3
    quiet = stack.enter_context(connect(broker.port))  # no frame started: no read deadline
    started_late = stack.enter_context(connect(broker.port))
    started_late.sendall(b"\x00")  # opened with quiet: its frame's deadline passes first
    assert closed_by_peer(started_late, timeout_s=5)  # so quiet's time has passed too
    quiet.sendall(api_versions(3))
    assert correlation_of(recv_frame(quiet)) == 3
