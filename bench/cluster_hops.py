"""Where an acks=all produce spends its time: loopback packet timestamps per stage.

Used by :mod:`bench.cluster`.  While a producer sends one record at a time (acks=all,
``linger_ms=0``) to a partition with two followers, a raw ``AF_PACKET`` socket on ``lo``
(needs root or CAP_NET_RAW; skipped otherwise) timestamps every TCP segment with a
payload to or from the brokers.  Each send's window ``[send() called, result()
returned]`` is cut into stages by the first segment of each kind:

| stage              | from                       | to                                   |
|--------------------|----------------------------|--------------------------------------|
| client_send_ms     | ``send()`` called          | request segment client -> leader     |
| leader_append_ms   | request on the wire        | first fetch response to a follower   |
| followers_ms       | first fetch response       | last follower's next Fetch arrives   |
| leader_complete_ms | last follower Fetch        | response segment leader -> client    |
| client_receive_ms  | response on the wire       | ``result()`` returned                |

``leader_append_ms`` covers the leader's network process reading the request, its main
process appending and completing the followers' parked fetches, and the network
process writing the fetch responses; ``followers_ms`` the followers' appends and next
fetches (acks=all waits for the slower follower); ``leader_complete_ms`` the leader
advancing the HW and answering the parked produce.

Costs: O(segments) per send; the capture thread copies every loopback frame into
Python, so it adds load of its own (the total latency is measured with it running and
reported next to the stages).  Not thread-safe; one trace at a time.
"""

from __future__ import annotations

import socket
import statistics
import struct
import threading
import time
from collections import deque

from broker.cluster.state import ClusterState
from clients.producer.producer import Producer

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # the second copy of every loopback frame
MAX_SEGMENTS = 1_000_000
STAGES = ("client_send_ms", "leader_append_ms", "followers_ms", "leader_complete_ms",
          "client_receive_ms")

Segment = tuple[float, int, int]  # perf_counter, source port, destination port


def _capture(sock: socket.socket, ports: set[int], out: deque[Segment],
             stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            frame, addr = sock.recvfrom(65535)
        except TimeoutError:
            continue
        now = time.perf_counter()
        if addr[2] == PACKET_OUTGOING or len(frame) < 54 or frame[12:14] != b"\x08\x00":
            continue
        ip = memoryview(frame)[14:]
        ihl = (ip[0] & 15) * 4
        if ip[9] != socket.IPPROTO_TCP:
            continue
        total = struct.unpack_from(">H", ip, 2)[0]
        src, dst = struct.unpack_from(">HH", ip, ihl)
        payload = total - ihl - (ip[ihl + 12] >> 4) * 4
        if payload > 0 and (src in ports or dst in ports):
            out.append((now, src, dst))


def _stages(window: list[Segment], start: float, end: float, leader: int,
            client: int) -> dict[str, float] | None:
    request = next((t for t, s, d in window if (s, d) == (client, leader)), None)
    fanout = next((t for t, s, d in window if s == leader and d != client), None)
    response = next((t for t, s, d in reversed(window) if (s, d) == (leader, client)), None)
    if request is None or fanout is None or response is None:
        return None
    fetches = [t for t, s, d in window if d == leader and s != client and fanout < t < response]
    followers = {s for t, s, d in window if d == leader and s != client and fanout < t}
    if len(followers) < 2 or not fetches:
        return None
    last_fetch = max(fetches)
    ms = [request - start, fanout - request, last_fetch - fanout, response - last_fetch,
          end - response]
    return {k: v * 1000 for k, v in zip(STAGES, ms, strict=True)}


def trace_hops(state: ClusterState, topic: str, leader_id: int,
               count: int) -> dict[str, float] | None:
    """Median milliseconds per stage (and in total); None if raw capture is denied."""
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL))
    except (PermissionError, OSError, AttributeError):
        return None
    leader = state.brokers[str(leader_id)].port
    segments: deque[Segment] = deque(maxlen=MAX_SEGMENTS)
    stop = threading.Event()
    with sock:
        sock.bind(("lo", 0))
        sock.settimeout(0.2)
        thread = threading.Thread(target=_capture, name="hops-capture", daemon=True,
                                  args=(sock, {b.port for b in state.brokers.values()},
                                        segments, stop))
        thread.start()
        windows = []
        try:
            with Producer(state.bootstrap, acks="all", linger_ms=0) as producer:
                for _ in range(50):
                    producer.send(topic, b"warm", partition=0).result(30)
                for _ in range(count):
                    t0 = time.perf_counter()
                    producer.send(topic, b"x" * 100, partition=0).result(30)
                    windows.append((t0, time.perf_counter()))
        finally:
            stop.set()
            thread.join(5)
    captured = sorted(segments)
    cuts, i = [], 0
    for start, end in windows:
        while i < len(captured) and captured[i][0] < start:
            i += 1
        j = i
        while j < len(captured) and captured[j][0] <= end:
            j += 1
        cuts.append(captured[i:j])
    # followers are parked in long-poll fetches when a send starts: the first segment
    # to the leader in a window is (nearly always) the producer's request
    firsts = [next((s for _, s, d in w if d == leader), -1) for w in cuts]
    client = statistics.mode(firsts) if firsts else -1
    rows = []
    for (start, end), window in zip(windows, cuts, strict=True):
        row = _stages(window, start, end, leader, client)
        if row is not None:
            row["total_ms"] = (end - start) * 1000
            rows.append(row)
    if not rows:
        return None
    result = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    result["sends_decomposed"] = len(rows)
    result["sends"] = len(windows)
    return result
