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

Bulk requests (:func:`trace_request_chain`, used by :mod:`bench.kafka_clients` for a
1 KiB ``send_bulk``): the same capture, on the leader's two ports only, cut per bulk
Produce request into :data:`CHAIN_STAGES` (:func:`chain_stages` says how). A broker reads
one request of a connection at a time (as Kafka's does), so these stages run one after
another for every request, and the cycle is the request's bytes over its round trip.

Costs: O(segments) per send; the capture thread copies every loopback frame into
Python, so it adds load of its own (the total latency is measured with it running and
reported next to the stages).  Not thread-safe; one trace at a time.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import statistics
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from broker.cluster.state import ClusterState
from clients.producer.producer import Producer

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # the second copy of every loopback frame
MAX_SEGMENTS = 1_000_000
STAGES = ("client_send_ms", "leader_append_ms", "followers_ms", "leader_complete_ms",
          "client_receive_ms")

Segment = tuple[float, int, int, int]  # perf_counter, source port, destination port, bytes
CHAIN_STAGES = ("request_transfer_ms", "leader_append_ms", "fan_out_ms", "followers_ack_ms",
                "leader_complete_ms", "client_next_request_ms")
MESSAGE_GAP_S = 0.0003  # segments of one flow closer than this are one message
BIG_REQUEST_BYTES = 64 * 1024  # a bulk Produce request (fetches and acks are far smaller)


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
            out.append((now, src, dst, payload))


def _stages(window: list[Segment], start: float, end: float, leader: int,
            internal: int, client: int) -> dict[str, float] | None:
    request = next((t for t, s, d, _ in window if (s, d) == (client, leader)), None)
    fanout = next((t for t, s, _, _ in window if s == internal), None)
    response = next((t for t, s, d, _ in reversed(window) if (s, d) == (leader, client)),
                    None)
    if request is None or fanout is None or response is None:
        return None
    fetches = [t for t, _, d, _ in window if d == internal and fanout < t < response]
    followers = {s for t, s, d, _ in window if d == internal and fanout < t}
    if len(followers) < 2 or not fetches:
        return None
    last_fetch = max(fetches)
    ms = [request - start, fanout - request, last_fetch - fanout, response - last_fetch,
          end - response]
    return {k: v * 1000 for k, v in zip(STAGES, ms, strict=True)}


@contextlib.contextmanager
def _captured(ports: set[int]) -> Iterator[deque[Segment] | None]:
    """Segments to or from ``ports`` while the block runs (None: raw capture denied)."""
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL))
    except (PermissionError, OSError, AttributeError):
        yield None
        return
    segments: deque[Segment] = deque(maxlen=MAX_SEGMENTS)
    stop = threading.Event()
    with sock:
        sock.bind(("lo", 0))
        sock.settimeout(0.2)
        with contextlib.suppress(OSError):  # room for bursts of 64 KiB loopback frames
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        thread = threading.Thread(target=_capture, name="hops-capture", daemon=True,
                                  args=(sock, ports, segments, stop))
        thread.start()
        try:
            yield segments
        finally:
            stop.set()
            thread.join(5)


def _leader_ports(state: ClusterState, leader_id: int) -> tuple[int, int]:
    """(client port, port follower fetches arrive on) of broker ``leader_id``."""
    entry = state.brokers[str(leader_id)]
    return entry.port, entry.internal_port if entry.internal_port > 0 else entry.port


def trace_hops(state: ClusterState, topic: str, leader_id: int,
               count: int) -> dict[str, float] | None:
    """Median milliseconds per stage (and in total); None if raw capture is denied."""
    leader, internal = _leader_ports(state, leader_id)
    windows = []
    with _captured({p for b in state.brokers.values()
                    for p in (b.port, b.internal_port)}) as segments:
        if segments is None:
            return None
        with Producer(state.bootstrap, acks="all", linger_ms=0) as producer:
            for _ in range(50):
                producer.send(topic, b"warm", partition=0).result(30)
            for _ in range(count):
                t0 = time.perf_counter()
                producer.send(topic, b"x" * 100, partition=0).result(30)
                windows.append((t0, time.perf_counter()))
    captured = sorted(segments)
    cuts: list[list[Segment]] = []
    i = 0
    for start, end in windows:
        while i < len(captured) and captured[i][0] < start:
            i += 1
        j = i
        while j < len(captured) and captured[j][0] <= end:
            j += 1
        cuts.append(captured[i:j])
    # followers are parked in long-poll fetches when a send starts: the first segment
    # to the leader in a window is (nearly always) the producer's request
    firsts = [next((s for _, s, d, _ in w if d == leader), -1) for w in cuts]
    client = statistics.mode(firsts) if firsts else -1
    rows = []
    for (start, end), window in zip(windows, cuts, strict=True):
        row = _stages(window, start, end, leader, internal, client)
        if row is not None:
            row["total_ms"] = (end - start) * 1000
            rows.append(row)
    if not rows:
        return None
    result = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    result["sends_decomposed"] = len(rows)
    result["sends"] = len(windows)
    return result


# -- bulk requests ------------------------------------------------------------------------

Message = tuple[float, float, int, int, int]  # start, end, source port, dest port, bytes


def _messages(segments: list[Segment]) -> list[Message]:
    """Runs of one flow's segments, each closer than ``MESSAGE_GAP_S`` to the last."""
    open_runs: dict[tuple[int, int], list[float]] = {}
    out: list[Message] = []
    for t, src, dst, size in segments:
        run = open_runs.get((src, dst))
        if run is not None and t - run[1] <= MESSAGE_GAP_S:
            run[1] = t
            run[2] += size
            continue
        if run is not None:
            out.append((run[0], run[1], src, dst, int(run[2])))
        open_runs[(src, dst)] = [t, t, size]
    out.extend((r[0], r[1], src, dst, int(r[2])) for (src, dst), r in open_runs.items())
    return sorted(out)


def chain_stages(segments: list[Segment], leader: int, internal: int) -> dict[str, float] | None:
    """Medians of :data:`CHAIN_STAGES` over the bulk Produce requests in ``segments``.

    Per request (a client message to ``leader`` of at least ``BIG_REQUEST_BYTES``):
    its transfer; until the first fetch answer with data leaves for a follower (the
    leader's network and main processes: read, check, append, answer the parked
    fetches); until the last such byte is on the wire (``fan_out``); until the later
    follower's next Fetch arrives (its read, append and next request); until the
    produce answer leaves (HW moved, parked produce answered); until the client's next
    request starts (0 when it was already sent).  Requests whose stages cannot be told
    apart (no data fetch answer or no ack from two followers before the answer) are
    left out and counted in ``requests_skipped``.  Also the MB/s of the median cycle and
    of all requests' cycles together (the long ones included).
    """
    messages = _messages(segments)
    flows: dict[int, int] = {}
    for _, _, src, dst, size in messages:
        if dst == leader:
            flows[src] = flows.get(src, 0) + size
    if not flows:
        return None
    client = max(flows, key=lambda port: flows[port])
    requests = [m for m in messages if (m[2], m[3]) == (client, leader)
                and m[4] >= BIG_REQUEST_BYTES]
    rows: list[dict[str, float]] = []
    for request, following in itertools.pairwise(requests):
        end = request[1]
        answer = next((m for m in messages if (m[2], m[3]) == (leader, client)
                       and m[0] > end), None)
        if answer is None:
            continue
        fan = [m for m in messages if m[2] == internal and m[4] > 100 and end < m[0] < answer[0]]
        if not fan:
            continue
        fan_start, fan_end = fan[0][0], max(m[1] for m in fan)
        acks: dict[int, float] = {}
        for m in messages:
            if m[3] == internal and fan_end < m[0] <= answer[0]:
                acks.setdefault(m[2], m[0])
        if len(acks) < 2:
            continue
        ack = max(acks.values())
        values = (end - request[0], fan_start - end, fan_end - fan_start, ack - fan_end,
                  answer[0] - ack, max(0.0, following[0] - answer[0]))
        row = {k: v * 1000 for k, v in zip(CHAIN_STAGES, values, strict=True)}
        row["cycle_ms"] = (following[0] - request[0]) * 1000
        row["request_bytes"] = request[4]
        rows.append(row)
    if not rows:
        return None
    out = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    out["requests"] = len(rows)
    out["requests_skipped"] = max(0, len(requests) - 1 - len(rows))
    out["mb_per_s_of_median_cycle"] = out["request_bytes"] / out["cycle_ms"] / 1000
    # every request, decomposed or not: the slow cycles (rolls, flushes) count here
    out["mb_per_s_over_all_cycles"] = (sum(r[4] for r in requests[:-1])
                                       / (requests[-1][0] - requests[0][0]) / 1e6)
    return out


def trace_request_chain(state: ClusterState, leader_id: int,
                        run: Callable[[], object]) -> dict[str, float] | None:
    """:func:`chain_stages` of what ``run()`` sends to broker ``leader_id`` (a bulk
    producer writing to one partition it leads); None if raw capture is denied or no
    request could be cut into stages."""
    leader, internal = _leader_ports(state, leader_id)
    with _captured({leader, internal}) as segments:
        if segments is None:
            return None
        run()
    return chain_stages(sorted(segments), leader, internal)
