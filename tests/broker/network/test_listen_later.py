"""Listeners bound now, listening later: the network side of a broker that serves only
once its metadata caught up (``NetworkProcessSupervisor.start(listening=False)``, then
``start_listening``; broker/server.py says when).

Real network processes with the stand-in main process of ``test_network``: before
LISTEN both ports refuse connections - also after a network process died and was
restarted meanwhile - and the processes stay up without watching them; after it both
ports serve, from every process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from broker.network.channel.codec import LISTEN, decode_message, encode_listen
from broker.network.supervisor import NetworkProcessSupervisor
from clients.memory.buffer_pool import BufferPool
from tests.broker.network.test_network import (
    FakeMain,
    assert_pool_clean,
    connect,
    echo,
    make_config,
    wait_for,
)


def test_listen_message_round_trips() -> None:
    assert decode_message(encode_listen()) == (LISTEN,)


def watched_fds(pid: int) -> set[int]:
    """The descriptors process ``pid`` watches with epoll (``/proc``'s fdinfo)."""
    fds: set[int] = set()
    for info in Path(f"/proc/{pid}/fdinfo").iterdir():
        with contextlib.suppress(OSError):
            fds |= {int(line.split()[1]) for line in info.read_text().splitlines()
                    if line.startswith("tfd:")}
    return fds


def listener_fds(pid: int) -> set[int]:
    """The listening sockets' descriptors in network process ``pid`` (its arguments)."""
    argv = psutil.Process(pid).cmdline()
    return {int(argv[i + 1]) for i, arg in enumerate(argv)
            if arg in ("--listener-fd", "--internal-listener-fd")}


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


@contextlib.contextmanager
def held_back(processes: int) -> Iterator[tuple[NetworkProcessSupervisor, FakeMain, BufferPool]]:
    config = make_config(num_network_processes=processes, internal_port=0)
    pool = BufferPool.create(config.buffer_pool_bytes, config.buffer_poolable_bytes)
    sup = NetworkProcessSupervisor(config, pool)
    main: FakeMain | None = None
    try:
        sup.start(listening=False)
        main = FakeMain(sup, pool)
        main.start()
        yield sup, main, pool
        assert not main.errors, main.errors
    finally:
        if main is not None:
            main.stop()
        sup.stop()  # SIGTERM, then SIGKILL by PID after the deadline
        pool.close()


@pytest.mark.multiprocess
def test_ports_refuse_until_start_listening_then_every_process_serves() -> None:
    with held_back(2) as (sup, main, pool):
        assert sup.port > 0 and sup.internal_port > 0 and not sup.listening
        assert refused(sup.port) and refused(sup.internal_port)
        os.kill(sup.pids[1], signal.SIGKILL)  # restarted while held: held too
        wait_for(lambda: main.restarts and sup.endpoint(1).ready,
                 "network process 1 restarted and ready")
        assert refused(sup.port) and refused(sup.internal_port)
        assert all(p.poll() is None for p in sup.processes)
        # not even watched: a socket that does not listen would wake epoll forever
        assert not any(listener_fds(pid) & watched_fds(pid) for pid in sup.pids)
        main.call(sup.start_listening)
        assert sup.listening
        wait_for(lambda: all(listener_fds(pid) <= watched_fds(pid) for pid in sup.pids),
                 "every process watches both listeners")
        clients = [connect(sup.port) for _ in range(20)]
        try:
            for i, c in enumerate(clients):
                echo(c, b"client-%d" % i)
            with connect(sup.internal_port) as follower:
                echo(follower, b"follower")
        finally:
            for c in clients:
                c.close()
        served = Counter(index for index, _, _ in main.requests)
        assert sorted(served) == [0, 1], served  # the restarted process got LISTEN too
        assert_pool_clean(pool)
