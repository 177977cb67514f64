"""Framing and reaping against a real broker (main process + network process), raw sockets.

Each test is one finding of issue 16 ("Framing and resources"):

- a request whose 4-byte length prefix arrives in pieces (any split, also right after the
  previous answer while the connection was muted) is answered;
- one connection pipelining 10,000 small requests gets 10,000 answers, in order;
- 1,000 clients that send one request and close leave no CLOSE-WAIT socket and no
  descriptor behind in the network process, and new clients are still served.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from tests.broker.processes import BrokerProcess
from tests.broker.raw_kafka import (
    api_versions,
    connect,
    correlation_of,
    fd_count,
    recv_frame,
    served,
    tcp_states,
    wait_for,
)

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("framing")) as b:
        yield b


def network_pid(broker: BrokerProcess) -> int:
    pids = broker.network_pids()
    assert len(pids) == 1, pids
    return pids[0]


def test_every_split_of_a_frame_is_answered(broker: BrokerProcess) -> None:
    with connect(broker.port) as sock:
        frame_len = len(api_versions(0))
        for split in range(1, frame_len):  # inside the length prefix (1-3) and after it
            frame = api_versions(split)
            sock.sendall(frame[:split])
            time.sleep(0.005)  # the two pieces arrive as two segments
            sock.sendall(frame[split:])
            assert correlation_of(recv_frame(sock)) == split


def test_length_prefix_split_after_a_pipelined_request(broker: BrokerProcess) -> None:
    """The first bytes of the next length prefix arrive with a request (the connection is
    then muted), the rest only after its answer was read."""
    with connect(broker.port) as sock:
        cid = 100
        for head in (1, 2, 3, 4, 5):
            first, second = api_versions(cid), api_versions(cid + 1)
            sock.sendall(first + second[:head])
            assert correlation_of(recv_frame(sock)) == cid
            time.sleep(0.02)
            for i in range(head, len(second), 2):  # the rest two bytes at a time
                sock.sendall(second[i:i + 2])
                time.sleep(0.001)
            assert correlation_of(recv_frame(sock)) == cid + 1
            cid += 2


def test_ten_thousand_pipelined_requests_get_ten_thousand_answers(
        broker: BrokerProcess) -> None:
    count = 10_000
    payload = b"".join(api_versions(i) for i in range(1, count + 1))
    answers: list[int] = []
    failure: list[BaseException] = []

    def read(sock: socket.socket) -> None:
        try:
            for _ in range(count):
                answers.append(correlation_of(recv_frame(sock)))
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)

    with connect(broker.port, timeout_s=60) as sock:
        reader = threading.Thread(target=read, args=(sock,), daemon=True)
        reader.start()
        sock.sendall(payload)  # all at once: the broker must read them as it answers
        reader.join(120)
    assert not failure, f"{len(answers)} answers, then {failure[0]!r}"
    assert answers == list(range(1, count + 1))


def test_clients_that_send_and_close_are_reaped(broker: BrokerProcess) -> None:
    pid = network_pid(broker)
    assert served(broker.port)
    wait_for(lambda: tcp_states(pid).get("ESTABLISHED", 0) == 0, 10)
    fds_before = fd_count(pid)
    for batch in range(10):
        socks = []
        for i in range(100):
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
            if i % 2:  # half close with a reset (SO_LINGER 0), half with a FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.sendall(api_versions(batch * 100 + i))
            socks.append(sock)
        for sock in socks:
            sock.close()
    assert wait_for(lambda: fd_count(pid) <= fds_before, 10), (
        f"network process fds: {fds_before} before, {fd_count(pid)} after; "
        f"sockets {tcp_states(pid)}")
    states = tcp_states(pid)
    assert states.get("CLOSE_WAIT", 0) == 0, states
    assert served(broker.port)
    print(f"network process fds before {fds_before}, after {fd_count(pid)}; sockets {states}")


def test_a_peer_that_vanishes_mid_frame_is_reaped(broker: BrokerProcess) -> None:
    pid = network_pid(broker)
    fds_before = fd_count(pid)
    for cut in (1, 3, 4, 10):
        sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        sock.sendall(api_versions(1)[:cut])
        sock.close()
    assert wait_for(lambda: fd_count(pid) <= fds_before, 10), fd_count(pid)
    assert tcp_states(pid).get("CLOSE_WAIT", 0) == 0
    assert served(broker.port)
