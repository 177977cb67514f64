"""One broker, one producer process (acks=1): produce/consume throughput, fetch vs sendfile.

Measured in one run against a real broker (main process + one network process):

- produce records/s and MB/s at 100 B and 1 KiB with the bulk API (``minikafka bench
  produce`` in its own process), median of ``--runs``;
- consume records/s with the bulk poll (``minikafka bench consume``);
- raw fetch bytes/s (a socket client issuing 32 MiB Fetch requests and draining each
  response with ``recv_into`` into one preallocated buffer, reading only batch headers
  for the next offset) next to a plain loopback ``os.sendfile`` of the same segment
  file drained the same way: the ratio is the figure;
- produce latency p50/p99 with one request in flight (``send`` + ``result()``), next to
  the same Produce round trip from a plain blocking socket (the broker's share).

Writes ``bench/results/broker.json``.  Run: ``python -m bench.broker``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from clients.admin import Admin
from clients.cli.demo import free_port, running_broker
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response, encode_request_bytes
from clients.protocol.framing import read_frame
from clients.records.record import build_batch
from clients.types import NewTopic

RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = {"produce_100b_records_per_s": 500_000, "consume_100b_records_per_s": 1_000_000,
           "fetch_vs_sendfile_ratio": 0.70, "produce_p50_ms": 0.3}


def cli_bench(bootstrap: str, mode: str, topic: str, records: int, size: int,
              out: Path) -> dict:
    cmd = [sys.executable, "-m", "clients.cli", "bench", mode, "--bootstrap-server", bootstrap,
           "--topic", topic, "--records", str(records), "--record-size", str(size),
           "--batch-records", str(max(100, 256 * 1024 // (size + 16))), "--json", str(out)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=600)
    return json.loads(out.read_text())["figures"]


FETCH_BYTES = 32 << 20  # max_bytes and partition_max_bytes of each raw Fetch
_BATCH_HEAD = struct.Struct(">qi")  # base_offset, batch_length
_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of a batch


def fetch_throughput(port: int, topic: str, total_bytes: int) -> float:
    """Bytes/s of raw Fetch responses for the whole partition, ``FETCH_BYTES`` at a time.

    Like the sendfile reference below, the client drains into one preallocated buffer
    with ``recv_into`` and decodes nothing but the batch headers' offsets and lengths
    (to find the next fetch offset after the last whole batch).
    """
    buf = bytearray(FETCH_BYTES + (1 << 20))  # records + response meta
    view = memoryview(buf)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        offset, received, correlation_id = 0, 0, 0
        started = time.perf_counter()
        while received < total_bytes:
            correlation_id += 1
            body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": FETCH_BYTES,
                    "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                        {"partition": 0, "fetch_offset": offset,
                         "partition_max_bytes": FETCH_BYTES}]}]}
            sock.sendall(encode_request_bytes(ApiKey.FETCH, FETCH_VERSION, correlation_id,
                                              "bench", body))
            _recv_into(sock, view[:4])
            length = int.from_bytes(view[:4], "big")
            if length > len(buf):
                raise RuntimeError(f"fetch response of {length} bytes exceeds the buffer")
            _recv_into(sock, view[:length])
            next_offset = _next_offset(buf, _records_at(buf, len(topic)), length)
            if next_offset is None:
                break
            received += length + 4
            offset = next_offset
        return received / (time.perf_counter() - started)


FETCH_VERSION = 4  # the first version we serve; not flexible, so the layout is fixed


def _records_at(buf: bytearray, topic_length: int) -> int:
    """Where the records of a one-partition Fetch v4 answer start (after the 4-byte length
    of the records field): correlation id, throttle, [topic [partition, error, HW, LSO,
    aborted transactions (16 bytes each, -1 = null)]], records."""
    pos = 4 + 4 + 4 + 2 + topic_length + 4 + 4 + 2 + 8 + 8
    aborted = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
    return pos + 4 + 16 * max(aborted, 0) + 4


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    got, size = 0, len(view)
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("broker closed the connection mid-response")
        got += n


def _next_offset(buf: bytearray, pos: int, end: int) -> int | None:
    """Offset after the last whole batch in ``buf[pos:end]`` (None: no whole batch)."""
    last = None
    while pos + 27 <= end:
        base_offset, batch_length = _BATCH_HEAD.unpack_from(buf, pos)
        if pos + 12 + batch_length > end:
            break
        last = base_offset + _LAST_OFFSET_DELTA.unpack_from(buf, pos + 23)[0] + 1
        pos += 12 + batch_length
    return last


def sendfile_throughput(path: Path) -> float:
    """Bytes/s of os.sendfile of the file to a loopback socket drained by a reader."""
    size = path.stat().st_size
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    received = [0]

    def drain() -> None:
        with socket.create_connection(("127.0.0.1", port)) as c:
            buf = bytearray(1 << 20)
            while (n := c.recv_into(buf)) > 0:
                received[0] += n

    reader = threading.Thread(target=drain)
    reader.start()
    conn, _ = server.accept()
    started = time.perf_counter()
    with open(path, "rb") as f:
        sent = 0
        while sent < size:
            sent += os.sendfile(conn.fileno(), f.fileno(), sent, size - sent)
    conn.shutdown(socket.SHUT_WR)
    reader.join()
    elapsed = time.perf_counter() - started
    conn.close()
    server.close()
    return received[0] / elapsed


def latency_ms(bootstrap: str, topic: str, count: int) -> list[float]:
    samples = []
    with Producer(bootstrap, acks=1, linger_ms=0) as producer:
        producer.send(topic, b"warm", partition=0).result(30)
        for _ in range(count):
            t0 = time.perf_counter()
            producer.send(topic, b"x" * 100, partition=0).result(30)
            samples.append((time.perf_counter() - t0) * 1000)
    return samples


PRODUCE_VERSION = 8  # what kafka-python sends; not flexible


def raw_latency_ms(port: int, topic: str, count: int) -> list[float]:
    """The same Produce round trip from a plain blocking socket: the broker's share."""
    samples = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(count + 1):
            t0 = time.perf_counter()
            batch = build_batch([(None, b"x" * 100, int(time.time() * 1000), ())])
            body = {"acks": 1, "timeout_ms": 30_000, "topics": [
                {"name": topic, "partitions": [{"index": 0, "records": batch}]}]}
            sock.sendall(encode_request_bytes(ApiKey.PRODUCE, PRODUCE_VERSION, i, "bench-raw",
                                              body))
            frame = read_frame(sock)
            assert frame is not None
            response = decode_response(frame, ApiKey.PRODUCE, PRODUCE_VERSION).body
            assert response["responses"][0]["partition_responses"][0]["error_code"] == 0
            if i:  # the first one warms up
                samples.append((time.perf_counter() - t0) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-samples", type=int, default=2000)
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="minikafka-bench-")
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    figures: dict[str, float] = {}
    with running_broker(data_dir, port), tempfile.TemporaryDirectory() as tmp:
        with Admin(bootstrap) as admin:
            admin.create_topics([NewTopic(f"p{s}-{r}", 1, 1, {}) for s in (100, 1024)
                                 for r in range(args.runs)] + [NewTopic("lat", 1, 1, {})])
        table = []
        for size in (100, 1024):
            n = args.records if size == 100 else args.records // 4
            runs = [cli_bench(bootstrap, "produce", f"p{size}-{r}", n, size,
                              Path(tmp) / f"p{size}-{r}.json") for r in range(args.runs)]
            rate = statistics.median(r["records_per_s"] for r in runs)
            mbs = statistics.median(r["mb_per_s"] for r in runs)
            figures[f"produce_{size}b_records_per_s"] = rate
            figures[f"produce_{size}b_mb_per_s"] = mbs
            consume = [cli_bench(bootstrap, "consume", f"p{size}-{r}", n, size,
                                 Path(tmp) / f"c{size}-{r}.json") for r in range(args.runs)]
            crate = statistics.median(r["records_per_s"] for r in consume)
            figures[f"consume_{size}b_records_per_s"] = crate
            table.append((size, rate, mbs, crate))
        segment = sorted((Path(data_dir) / "p1024-0-0").glob("*.log"))[0]
        fetch = statistics.median(fetch_throughput(port, "p1024-0", segment.stat().st_size)
                                  for _ in range(args.runs))
        plain = statistics.median(sendfile_throughput(segment) for _ in range(args.runs))
        figures.update(fetch_bytes_per_s=fetch, sendfile_bytes_per_s=plain,
                       fetch_vs_sendfile_ratio=fetch / plain)
        samples = latency_ms(bootstrap, "lat", args.latency_samples)
        raw = raw_latency_ms(port, "lat", args.latency_samples)
        qs = statistics.quantiles(samples, n=100)
        raw_qs = statistics.quantiles(raw, n=100)
        figures.update(produce_p50_ms=qs[49], produce_p99_ms=qs[98],
                       raw_socket_p50_ms=raw_qs[49], raw_socket_p99_ms=raw_qs[98],
                       producer_vs_raw_p50_ratio=qs[49] / raw_qs[49])
    print(f"{'size':>6}{'produce rec/s':>16}{'MB/s':>9}{'consume rec/s':>16}")
    for size, rate, mbs, crate in table:
        print(f"{size:>6}{rate:>16,.0f}{mbs:>9.1f}{crate:>16,.0f}")
    print(f"fetch {fetch / 1e6:,.0f} MB/s vs plain sendfile {plain / 1e6:,.0f} MB/s "
          f"(ratio {fetch / plain:.2f})")
    print(f"produce latency p50 {qs[49]:.3f} ms, p99 {qs[98]:.3f} ms (one in flight); "
          f"raw socket p50 {raw_qs[49]:.3f} ms, p99 {raw_qs[98]:.3f} ms "
          f"(producer/raw {qs[49] / raw_qs[49]:.2f})")
    met = {k: (figures[k] <= t if k.endswith("_ms") else figures[k] >= t)
           for k, t in TARGETS.items()}
    for key, ok in met.items():
        print(f"target {key}: {TARGETS[key]:,} -> {figures[key]:,.3f} {'met' if ok else 'MISSED'}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "broker.json").write_text(json.dumps({
        "config": vars(args),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_avg": os.getloadavg()},
        "figures": figures, "targets": TARGETS, "met": met}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
