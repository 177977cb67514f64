"""A network process with ``max_pipelined_requests`` > 1: several requests of one connection
with the main process, never more than the bound, answers written in the order they come.

Real network processes (:class:`NetworkProcessSupervisor`) against the fake main of
``test_network`` (it holds ``H`` frames until released, echoes ``E`` frames at once).
"""

from __future__ import annotations

import pytest

from tests.broker.network.test_network import (
    assert_pool_clean,
    connect,
    frame,
    make_config,
    running,
    wait_for,
)
from tests.broker.raw_kafka import recv_frame
from tests.broker.raw_kafka import wait_for as raw_wait_for


@pytest.mark.multiprocess
def test_requests_of_one_connection_are_handed_over_up_to_the_bound_and_answered_in_order() -> None:
    with running(make_config(), max_pipelined_requests=3) as (sup, main, pool):
        sock = connect(sup.port)
        try:
            # (a frame is at least 5 bytes, Kafka's smallest header)
            sock.sendall(b"".join(frame(b"Hold%d" % i) for i in range(3)) + frame(b"Echo3"))
            wait_for(lambda: len(main.held) == 3, "three requests of one connection held")
            # the bound reached: the fourth stays in the socket while three are pending
            assert not raw_wait_for(lambda: len(main.requests) > 3, 0.3)
            assert main.release_held() == 3
            assert [recv_frame(sock) for _ in range(4)] == [b"Hold0", b"Hold1", b"Hold2", b"Echo3"]
            # the connection goes on: a fresh pipeline, the echo overtaking nothing
            sock.sendall(frame(b"Hold4") + frame(b"Echo5"))
            wait_for(lambda: len(main.held) == 1 and len(main.requests) == 6,
                     "both handed over")
            assert main.release_held() == 1
            # the fake main answered Echo5 at once, before Hold4: the network process writes
            # what it gets in that order (ordering is the main process's, AnswerOrder)
            assert sorted(recv_frame(sock) for _ in range(2)) == [b"Echo5", b"Hold4"]
        finally:
            sock.close()
        assert_pool_clean(pool)


@pytest.mark.multiprocess
def test_answers_queued_behind_a_blocked_response_are_written_after_it() -> None:
    held = [b"H%d" % i + bytes([i]) * (1 << 20) for i in range(3)]
    with running(make_config(), max_pipelined_requests=3) as (sup, main, pool):
        sock = connect(sup.port, rcvbuf=4096)  # the first answer blocks in the kernel
        try:
            sock.sendall(b"".join(frame(h) for h in held))
            wait_for(lambda: len(main.held) == 3, "three requests held")
            # three answers in one packet: the first one's write blocks, the other two
            # wait in the connection's queue and follow it
            assert main.release_held() == 3
            assert [recv_frame(sock) for _ in range(3)] == held
            sock.sendall(frame(b"E-after"))
            assert recv_frame(sock) == b"E-after"
        finally:
            sock.close()
        assert_pool_clean(pool)
