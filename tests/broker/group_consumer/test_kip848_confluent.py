"""KIP-848 with a real client: confluent-kafka (librdkafka >= 2.12) consumers with
``group.protocol=consumer`` against a real broker, each in its own process.

A group of three consumers on a 12-partition topic; one is SIGKILLed (its session times
out: Kafka's default 45 s, the broker's ``group.consumer.session.timeout.ms`` is not a
setting here yet), one is added, one leaves (SIGTERM: it closes, a heartbeat with epoch
-1).  Throughout, a sampler asks the coordinator (ConsumerGroupDescribe, every 50 ms) what
each member currently owns: no partition is ever owned by two members at once.  Every
offset a consumer saw committed is at most the group's final committed offset, which is
the end of every partition (nothing consumed is lost, everything is consumed).  The time
from each change to a Stable group owning all 12 partitions is printed, not asserted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaPartition

from clients.admin import Admin
from clients.protocol.api_keys import ApiKey
from clients.protocol.topics import TopicPartition
from clients.types import (
    NewTopic,
    OffsetAndTimestamp,
)
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.raw_kafka import call, connect

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
TOPIC, GROUP, PARTITIONS = "k848", "k848-group", 12


class Worker:
    """One consumer process and the offsets it saw committed."""

    def __init__(self, bootstrap: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.broker.group_consumer.kip848_consumer", bootstrap,
             GROUP, TOPIC], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        self.commits: list[tuple[int, int]] = []
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            if line.startswith("COMMIT "):
                _, p, o = line.split()
                self.commits.append((int(p), int(o)))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Sampler(threading.Thread):
    """ConsumerGroupDescribe every 50 ms; records each answer's group."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.samples: list[tuple[float, dict[str, Any]]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        sock = connect(self.port)
        try:
            while not self.stopping.is_set():
                answer = call(sock, ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
                              {"group_ids": [GROUP], "include_authorized_operations": False})
                self.samples.append((time.monotonic(), answer["groups"][0]))
                self.stopping.wait(0.05)
        finally:
            sock.close()

    def latest(self) -> dict[str, Any]:
        return self.samples[-1][1] if self.samples else {}

    def settled(self, members: int) -> bool:
        """Stable with ``members`` members owning all partitions between them."""
        group = self.latest()
        if group.get("error_code") != 0 or group["group_state"] != "Stable" \
                or len(group["members"]) != members:
            return False
        return sum(len(t["partitions"]) for m in group["members"]
                   for t in m["assignment"]["topic_partitions"]) == PARTITIONS


def _owned_twice(group: dict[str, Any]) -> list[tuple[int, list[str]]]:
    owners: dict[int, list[str]] = {}
    for m in group.get("members", []):
        for t in m["assignment"]["topic_partitions"]:
            for p in t["partitions"]:
                owners.setdefault(p, []).append(m["member_id"])
    return [(p, ids) for p, ids in owners.items() if len(ids) > 1]


def test_confluent_group_protocol_consumer_rebalances(tmp_path: Path) -> None:
    workers: list[Worker] = []
    with LocalCluster(tmp_path, 1) as cluster, Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})

        def produce(count: int) -> None:
            for i in range(count):
                producer.produce(TOPIC, f"{i}".encode(), partition=i % PARTITIONS)
            assert producer.flush(30) == 0

        produce(1200)
        sampler = Sampler(int(cluster.bootstrap.rsplit(":", 1)[1]))
        sampler.start()
        timings: dict[str, float] = {}
        try:
            def change(what: str, members: int, action: Any, limit_s: float) -> None:
                start = time.monotonic()
                action()
                produce(120)  # keep work flowing through the rebalance
                wait_until(lambda: sampler.settled(members), limit_s,
                           f"{what}: a Stable group of {members} owning all partitions")
                timings[what] = time.monotonic() - start

            change("3 join", 3, lambda: workers.extend(
                Worker(cluster.bootstrap) for _ in range(3)), 60)
            change("SIGKILL", 2, lambda: os.kill(workers[0].proc.pid, signal.SIGKILL), 90)
            change("add", 3, lambda: workers.append(Worker(cluster.bootstrap)), 60)
            change("leave", 2, lambda: workers[1].proc.send_signal(signal.SIGTERM), 60)
            produce(600)

            latest = admin.list_offsets({TopicPartition(TOPIC, p): -1
                                         for p in range(PARTITIONS)})
            ends = {tp.partition: o.offset for tp, o in latest.items()
                    if isinstance(o, OffsetAndTimestamp)}

            def committed() -> dict[int, int]:
                checker = Consumer({"bootstrap.servers": cluster.bootstrap,
                                    "group.id": GROUP, "group.protocol": "classic"})
                try:
                    got = checker.committed([KafkaPartition(TOPIC, p)
                                             for p in range(PARTITIONS)], 30)
                finally:
                    checker.close()
                return {tp.partition: tp.offset for tp in got}

            wait_until(lambda: committed() == ends, 60, f"every partition committed to its "
                       f"end {ends}", 0.5)
        finally:
            sampler.stopping.set()
            sampler.join(10)
            for w in workers:
                w.stop()
        final = committed()
        print("\nKIP-848 rebalance (confluent-kafka group.protocol=consumer, 12 partitions, "
              "heartbeat 5 s, session 45 s): " + ", ".join(
                  f"{k} {v:.1f} s" for k, v in timings.items()))
        print(f"describe samples: {len(sampler.samples)}")
        overlaps = [(t, o) for t, g in sampler.samples if (o := _owned_twice(g))]
        assert overlaps == []
        seen = [c for w in workers for c in w.commits]
        assert seen, "the consumers committed nothing"
        for p, o in seen:
            assert o <= final[p], f"partition {p}: committed {o} then lost (final {final[p]})"
        assert workers[1].lines[-1:] == ["CLOSED"]  # the leaver closed cleanly

