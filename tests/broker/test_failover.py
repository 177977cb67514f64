"""Leader failover on a real 3-broker cluster: SIGKILL leaders, the controller, pause a leader.

acks=all with min ISR 2 while faults are injected; at the end every acknowledged record
is in every in-sync replica at the offset it was acknowledged with, and the replicas
are byte-identical up to the HW.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.producer.producer import Producer
from clients.records.batch import iter_batches
from clients.records.record import decode_batch
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.test_cluster import all_in_sync

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TOPIC = "failover"


class BackgroundProducer:
    """Sends numbered records with acks=all until stopped; remembers what was acked."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: dict[int, bytes] = {}  # offset -> value (partition 0)
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with Producer(self.bootstrap, acks="all", linger_ms=2, retry_backoff_ms=50,
                      request_timeout_ms=5_000, delivery_timeout_ms=60_000) as producer:
            sequence = 0
            while not self._stop.is_set():
                batch = []
                for _ in range(50):
                    value = f"seq-{sequence}".encode()
                    sequence += 1
                    batch.append((value, producer.send(TOPIC, value, partition=0)))
                for value, future in batch:
                    try:
                        self.acked[future.result(90).offset] = value
                    except Exception:
                        self.errors += 1

    def acked_count(self) -> int:
        return len(self.acked)

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, 3, {"replica_lag_time_max_ms": 1500}) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 3, {"min_insync_replicas": "2"})])
        yield c


def wait_more_acks(producer: BackgroundProducer, more: int, what: str) -> None:
    target = producer.acked_count() + more
    wait_until(lambda: producer.acked_count() >= target, 60, what, 0.05)


def check_replicas(cluster: LocalCluster, producer: BackgroundProducer) -> None:
    p = cluster.wait_partition(TOPIC, 0, all_in_sync, "all replicas in sync", 60)
    hw = p["replica_offsets"][str(p["leader"])]["hw"]
    copies = {r: cluster.replica_bytes(r, TOPIC, 0, hw) for r in p["replica_offsets"]}
    assert len(set(copies.values())) == 1, "replicas differ below the HW"
    data = next(iter(copies.values()))
    stored = {r.offset: r.value for pos, _ in iter_batches(data) for r in decode_batch(data, pos)}
    lost = {o: v for o, v in producer.acked.items() if stored.get(o) != v}
    assert not lost, f"{len(lost)} acknowledged records missing or changed, e.g. " \
                     f"{sorted(lost.items())[:5]}"
    assert max(producer.acked) < hw


def test_leader_sigkill_repeatedly_loses_no_acknowledged_record(
        cluster: LocalCluster) -> None:
    with BackgroundProducer(cluster.bootstrap) as producer:
        wait_more_acks(producer, 500, "first acknowledgements")
        for round_ in range(3):
            leader = str(cluster.partition(TOPIC, 0)["leader"])
            cluster.kill(leader)
            cluster.wait_partition(TOPIC, 0, lambda p, old=leader: str(p["leader"]) not in
                                   (old, "-1"), f"round {round_}: a new leader")
            wait_more_acks(producer, 300, f"round {round_}: acks from the new leader")
            cluster.restart(leader)
            cluster.wait_partition(TOPIC, 0, all_in_sync, "the old leader back in sync", 60)
    check_replicas(cluster, producer)


def test_controller_sigkill_during_production(cluster: LocalCluster) -> None:
    with BackgroundProducer(cluster.bootstrap) as producer:
        wait_more_acks(producer, 300, "first acknowledgements")
        cluster.kill("controller")
        wait_more_acks(producer, 300, "acks while the controller is down")
        cluster.restart("controller")
        leader = str(cluster.partition(TOPIC, 0)["leader"])
        cluster.kill(leader)  # the restarted controller still elects
        cluster.wait_partition(TOPIC, 0, lambda p: str(p["leader"]) not in (leader, "-1"),
                               "a leader elected by the restarted controller")
        wait_more_acks(producer, 300, "acks from the new leader")
        cluster.restart(leader)
    check_replicas(cluster, producer)


def test_paused_leader_is_deposed_and_does_not_serve_stale_data(
        cluster: LocalCluster) -> None:
    with BackgroundProducer(cluster.bootstrap) as producer:
        wait_more_acks(producer, 300, "first acknowledgements")
        old = cluster.partition(TOPIC, 0)
        leader = str(old["leader"])
        cluster.pause(leader)
        new = cluster.wait_partition(TOPIC, 0, lambda p: str(p["leader"]) not in (leader, "-1"),
                                     "a new leader while the old one is paused")
        assert new["leader_epoch"] > old["leader_epoch"]
        wait_more_acks(producer, 300, "acks from the new leader")
        cluster.resume(leader)
        wait_more_acks(producer, 300, "acks after the old leader came back")
    back = cluster.wait_partition(TOPIC, 0, all_in_sync, "the deposed leader re-joined", 60)
    assert str(back["leader"]) != leader or back["leader_epoch"] > new["leader_epoch"]
    check_replicas(cluster, producer)
