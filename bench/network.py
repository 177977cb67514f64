"""Network process hot path: client -> network process -> main process -> back.

Setup: a real :class:`NetworkProcessSupervisor` (1 network process) and a minimal main
process (an asyncio loop in a thread of this process, the endpoint attached with
``attach_loop``) that reads each request in place, frees it and answers a 32-byte
produce-like response (or, for fetches, a file region sent with ``sendfile``). Clients
run in a spawned process. The baseline is a plain asyncio TCP server on the same loop
doing the same work without the extra process hop (what a single-process broker does).

| measurement | how                                                              | target      |
|-------------|------------------------------------------------------------------|-------------|
| latency     | 1 connection, sequential 1 KiB requests; p50 / p99 round trip    | p50<=0.3 ms |
| throughput  | 4 connections x pipelined 16 KiB requests (~100 records each)    | >=5k req/s  |
| fetch       | 1 connection, 1 MiB file regions (sendfile), MB/s                | (reported)  |

Each figure is the median of ``--runs`` runs; ratios (network path / baseline) are
computed in the same run. Writes ``bench/results/network.json``. Run: ``python -m
bench.network`` (~1 min).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import socket
import statistics
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgpack

from broker.config import BrokerConfig
from broker.network.channel.codec import REQUEST
from broker.network.channel.main_side import MainChannelEndpoint
from broker.network.supervisor import NetworkProcessSupervisor
from clients.memory.buffer_pool import BufferPool
from clients.memory.handles import BufferHandle

RESULTS = Path(__file__).resolve().parent / "results" / "network.json"
KIB, MIB = 1024, 1024 * 1024
TARGET_P50_MS = 0.3
TARGET_REQ_S = 5_000
RESPONSE = struct.pack(">i", 28) + b"r" * 28
CTX = mp.get_context("spawn")


# -------------------------------------------------------------------- main side


class MiniMain:
    """Answers produce-like requests with RESPONSE and fetch requests with a region."""

    def __init__(self, pool: BufferPool, region: tuple[str, int]) -> None:
        self.pool = pool
        self.region = msgpack.packb([[region[0], 0, region[1]]])
        self.fetch_prefix = struct.pack(">i", region[1])
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def attach(self, ep: MainChannelEndpoint) -> None:
        self.loop.call_soon_threadsafe(
            ep.attach_loop, self.loop, lambda msgs: self.on_messages(ep, msgs), lambda: None
        )

    def on_messages(self, ep: MainChannelEndpoint, messages: list[tuple[Any, ...]]) -> None:
        pool = self.pool
        poolable = pool.poolable_size
        for msg in messages:
            if msg[0] != REQUEST:
                continue
            handle = BufferHandle(*msg[2])
            buf = pool.attach_buffer(handle)
            fetch = buf.memory[0] == 70  # b"F"
            buf.release()
            pool.deallocate(handle)
            out = pool.allocate(poolable, 1000)  # pooled size: the free-list fast path
            if fetch:
                n = len(self.fetch_prefix)
                out.memory[:n] = self.fetch_prefix
                out.memory[n : n + len(self.region)] = self.region
                ep.send_response(msg[1], out.handle, n, len(self.region))
            else:
                out.memory[: len(RESPONSE)] = RESPONSE
                ep.send_response(msg[1], out.handle, len(RESPONSE), 0)
            out.release()


class BaselineProtocol(asyncio.Protocol):
    """Single-process asyncio server: frames parsed from a bytearray, same response."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport
        self.data = bytearray()
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.data += data
        while len(self.data) >= 4:
            (n,) = struct.unpack_from(">i", self.data)
            if len(self.data) < 4 + n:
                return
            del self.data[: 4 + n]
            self.transport.write(RESPONSE)


# ------------------------------------------------------------------- client side


def _recv_exact(sock: socket.socket, n: int) -> None:
    view = memoryview(bytearray(n))
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError("server closed")
        got += k


def client_latency(port: int, count: int, size: int, out: Any) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = struct.pack(">i", size) + b"P" * size
    samples = []
    for i in range(count + 200):
        t0 = time.perf_counter()
        sock.sendall(req)
        _recv_exact(sock, len(RESPONSE))
        if i >= 200:  # warm-up excluded
            samples.append(time.perf_counter() - t0)
    sock.close()
    out.put(samples)


def client_throughput(port: int, conns: int, count: int, size: int, out: Any) -> None:
    req = struct.pack(">i", size) + b"P" * size
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]

    def send(sock: socket.socket) -> None:
        for _ in range(count):
            sock.sendall(req)

    def recv(sock: socket.socket) -> None:
        _recv_exact(sock, len(RESPONSE) * count)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=f, args=(s,)) for s in socks for f in (send, recv)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(conns * count / (time.perf_counter() - t0))
    for s in socks:
        s.close()


def client_fetch(port: int, count: int, region_len: int, out: Any) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    req = struct.pack(">i", 8) + b"F" * 8
    t0 = time.perf_counter()
    for _ in range(count):
        sock.sendall(req)
        _recv_exact(sock, 4 + region_len)
    out.put(count * region_len / (time.perf_counter() - t0) / 1e6)
    sock.close()


def run_client(target: Any, *args: Any) -> Any:
    q = CTX.Queue()
    proc = CTX.Process(target=target, args=(*args, q))
    proc.start()
    try:
        return q.get(timeout=300)
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join()


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-requests", type=int, default=3000)
    parser.add_argument("--throughput-requests", type=int, default=3000)
    args = parser.parse_args()

    config = BrokerConfig(
        port=0, buffer_pool_bytes=64 * MIB, buffer_poolable_bytes=64 * KIB
    ).validate()
    pool = BufferPool.create(config.buffer_pool_bytes, config.buffer_poolable_bytes)
    sup = NetworkProcessSupervisor(config, pool)
    region_len = 1 * MIB
    tmp = Path(tempfile.mkdtemp()) / "00000000000000000000.log"
    tmp.write_bytes(os.urandom(region_len))
    mini = MiniMain(pool, (str(tmp), region_len))
    figures: dict[str, list[float]] = {k: [] for k in (
        "net_p50_ms", "net_p99_ms", "base_p50_ms", "base_p99_ms",
        "net_req_s", "base_req_s", "fetch_mb_s")}  # fmt: skip
    try:
        sup.start()
        mini.thread.start()
        mini.attach(sup.endpoint(0))
        server = asyncio.run_coroutine_threadsafe(
            mini.loop.create_server(BaselineProtocol, "127.0.0.1", 0), mini.loop
        ).result(10)
        base_port = server.sockets[0].getsockname()[1]
        for _ in range(args.runs):
            for label, port in (("net", sup.port), ("base", base_port)):
                lat = sorted(run_client(client_latency, port, args.latency_requests, 1 * KIB))
                figures[f"{label}_p50_ms"].append(lat[len(lat) // 2] * 1e3)
                figures[f"{label}_p99_ms"].append(lat[int(len(lat) * 0.99)] * 1e3)
                rate = run_client(client_throughput, port, 4, args.throughput_requests, 16 * KIB)
                figures[f"{label}_req_s"].append(rate)
            figures["fetch_mb_s"].append(run_client(client_fetch, sup.port, 200, region_len))
        mini.loop.call_soon_threadsafe(server.close)
    finally:
        sup.stop()
        if mini.thread.is_alive():
            mini.loop.call_soon_threadsafe(mini.loop.stop)
            mini.thread.join(10)
        pool.close()
        tmp.unlink()
        tmp.parent.rmdir()

    med = {k: statistics.median(v) for k, v in figures.items()}
    print(f"{'path':<22}{'p50 ms':>9}{'p99 ms':>9}{'req/s (16 KiB, 4 conns)':>26}")
    print(f"{'network process':<22}{med['net_p50_ms']:>9.3f}{med['net_p99_ms']:>9.3f}"
          f"{med['net_req_s']:>26,.0f}")  # fmt: skip
    print(f"{'asyncio in-process':<22}{med['base_p50_ms']:>9.3f}{med['base_p99_ms']:>9.3f}"
          f"{med['base_req_s']:>26,.0f}")  # fmt: skip
    ratios = {
        "p50_ratio_net_over_base": med["net_p50_ms"] / med["base_p50_ms"],
        "req_s_ratio_net_over_base": med["net_req_s"] / med["base_req_s"],
    }
    print(f"ratios net/base: p50 {ratios['p50_ratio_net_over_base']:.2f}x, "
          f"req/s {ratios['req_s_ratio_net_over_base']:.2f}x")  # fmt: skip
    print(f"fetch via sendfile, 1 MiB regions: {med['fetch_mb_s']:,.0f} MB/s")
    targets = {
        f"p50_latency_le_{TARGET_P50_MS}_ms": med["net_p50_ms"] <= TARGET_P50_MS,
        f"throughput_ge_{TARGET_REQ_S}_req_s": med["net_req_s"] >= TARGET_REQ_S,
    }
    for key, met in targets.items():
        print(f"target {key}: {'MET' if met else 'NOT MET'}")
    result = {
        "config": {
            "runs": args.runs,
            "latency_requests": args.latency_requests,
            "latency_request_bytes": 1 * KIB,
            "throughput_requests_per_conn": args.throughput_requests,
            "throughput_conns": 4,
            "throughput_request_bytes": 16 * KIB,
            "fetch_region_bytes": region_len,
            "num_network_processes": 1,
        },
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "processor": platform.processor(),
        },
        "figures": {"runs": figures, "medians": med, "ratios": ratios},
        "targets": targets,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
