"""``minikafka demo``: start a local cluster, produce with acks=all, consume back, stop.

The README's first command runs this.  It starts a real cluster (one controller and
three brokers, ``minikafka cluster start``) on free loopback ports with a temporary data
directory, creates a topic with replication factor 3 and min ISR 2, produces records
(keyed, with headers and nulls) with acks=all, consumes them all back, checks every
acknowledged record came back once and in order, prints ``cluster status`` and a
summary, and stops the cluster (``minikafka cluster stop``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from clients.errors import MiniKafkaError


def add_parser(sub: Any) -> None:
    demo = sub.add_parser("demo", help="start a cluster, produce, consume back, stop",
                          description=__doc__.split("\n")[0])
    demo.add_argument("--records", type=int, default=20_000)
    demo.add_argument("--partitions", type=int, default=3)
    demo.add_argument("--data-dir", default=None, help="default: a temporary directory")
    demo.set_defaults(func=run_demo)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise MiniKafkaError(f"broker exited with status {proc.returncode} during startup")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise MiniKafkaError(f"broker did not listen on port {port} within {timeout_s:.0f} s")


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> int:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def cluster_command(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "broker.cluster", *args], check=False)
    if result.returncode != 0:
        raise MiniKafkaError(f"'minikafka cluster {args[0]}' failed ({result.returncode})")


@contextmanager
def running_cluster(data_dir: str, brokers: int = 3) -> Iterator[str]:
    try:
        cluster_command("start", "--data-dir", data_dir, "--brokers", str(brokers),
                        "--base-port", "0")
        # the launcher's state file (broker/cluster.py) names the ports it chose
        state = json.loads((Path(data_dir) / "cluster.json").read_text())
        yield ",".join(f"127.0.0.1:{b['port']}" for b in state["brokers"].values())
    finally:
        cluster_command("stop", "--data-dir", data_dir)


@contextmanager
def running_broker(data_dir: str, port: int, extra: list[str] | None = None,
                   quiet: bool = True) -> Iterator[subprocess.Popen[bytes]]:
    cmd = [sys.executable, "-m", "broker", "start", "--port", str(port), "--data-dir", data_dir,
           *(extra or [])]
    out = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen(cmd, stdout=out, stderr=out)
    try:
        wait_for_port(port, proc, 30.0)
        yield proc
    finally:
        stop_process(proc)


def run_demo(args: argparse.Namespace) -> int:
    from clients.admin import Admin
    from clients.consumer import Consumer
    from clients.producer import Producer
    from clients.types import NewTopic, TopicPartition

    owned_dir = args.data_dir is None
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="minikafka-demo-")
    topic = "demo"
    started = time.monotonic()
    try:
        print(f"starting a local cluster: 1 controller + 3 brokers (data in {data_dir})")
        with running_cluster(data_dir) as bootstrap:
            with Admin(bootstrap) as admin:
                admin.create_topics([NewTopic(topic, args.partitions, 3,
                                              {"min_insync_replicas": "2"})])
            print(f"created topic {topic!r}: {args.partitions} partitions, replication "
                  "factor 3, min ISR 2")
            sent: dict[int, list[bytes]] = {}
            t0 = time.monotonic()
            with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as producer:
                futures = []
                for i in range(args.records):
                    value = None if i % 1000 == 999 else f"record-{i}".encode()
                    key = f"key-{i % 97}".encode()
                    headers = [("seq", str(i).encode())]
                    futures.append((value, producer.send(topic, value, key=key,
                                                         headers=headers)))
                producer.flush()
                for value, future in futures:
                    meta = future.result()
                    sent.setdefault(meta.partition, []).append(value)  # type: ignore[arg-type]
            produce_s = time.monotonic() - t0
            print(f"produced {args.records} records (acks=all) in {produce_s:.2f} s")
            t0 = time.monotonic()
            received: dict[int, list[bytes | None]] = {p: [] for p in range(args.partitions)}
            with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
                consumer.assign([TopicPartition(topic, p) for p in range(args.partitions)])
                deadline = time.monotonic() + 60
                while sum(map(len, received.values())) < args.records:
                    if time.monotonic() > deadline:
                        break
                    for tp, records in consumer.poll(timeout_ms=500).items():
                        received[tp.partition].extend(r.value for r in records)
            consume_s = time.monotonic() - t0
            total = sum(map(len, received.values()))
            print(f"consumed {total} records in {consume_s:.2f} s")
            ok = all(received.get(p, []) == values for p, values in sent.items())
            print("summary:")
            for p in range(args.partitions):
                print(f"  partition {p}: {len(sent.get(p, []))} acknowledged, "
                      f"{len(received[p])} consumed")
            print(f"  every acknowledged record consumed once, in order: {'yes' if ok else 'NO'}")
            cluster_command("status", "--data-dir", data_dir)
        print(f"cluster stopped; demo took {time.monotonic() - started:.1f} s")
        return 0 if ok else 1
    finally:
        if owned_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
