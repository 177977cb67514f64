"""A partition moves between brokers under produce load (AlterPartitionReassignments on
a real 3-broker cluster): from replicas [0, 1] to [1, 2] while a producer (acks=all)
keeps writing; the listing shows it in flight until the new replica is in sync; then the
old replica leaves, leadership moves off broker 0, and every acknowledged record is read
back in order.  The new replica copies the 2 MiB already written at most at the
replication throttle's rate (``follower_replication_throttled_rate``, 512 KiB/s here):
the move cannot finish sooner than the bytes beyond the bucket's one-second burst allow."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.admin.reassignments import PartitionReassignment
from clients.producer.producer import Producer
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.test_broker_integration import consume_all

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TOPIC = "moving"
TP = TopicPartition(TOPIC, 0)
RATE = 512 * 1024  # bytes/s
PREFILL = 2048  # records of 1 KiB


class Load:
    """A producer thread (acks=all) writing numbered records until stopped; what was
    acknowledged, by offset."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.acked: dict[int, bytes] = {}
        self.failed = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with Producer(self.bootstrap, acks="all", linger_ms=2, retries=1000,
                      delivery_timeout_ms=60_000) as producer:
            n = 0
            while not self.stop.is_set():
                sent = [(b"record-%d" % i, producer.send(TOPIC, b"record-%d" % i, partition=0))
                        for i in range(n, n + 100)]
                n += 100
                producer.flush()
                # paced to at most ~2,000 records (~40 KiB) a second: well under the
                # throttle, so the new replica catches up (a load faster than the throttle
                # keeps it out of the ISR for good, in Kafka too)
                self.stop.wait(0.05)
                for value, future in sent:
                    try:
                        self.acked[future.result(60).offset] = value
                    except MiniKafkaError:
                        self.failed += 1


def test_a_partition_moves_to_other_brokers_under_load_without_losing_a_record(
        tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3, {"follower_replication_throttled_rate": RATE},
                      controller_overrides={"auto_leader_rebalance_enable": "false"}
                      ) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, configs={"min_insync_replicas": "2"},
                                          replica_assignments={0: [0, 1]})])
        cluster.wait_partition(TOPIC, 0, lambda p: p["isr"] == [0, 1], "in sync")
        prefilled: dict[int, bytes] = {}
        with Producer(cluster.bootstrap, acks="all", linger_ms=5) as producer:
            sent = [(b"%04d" % i + b"p" * 1020, producer.send(TOPIC, b"%04d" % i + b"p" * 1020,
                                                              partition=0))
                    for i in range(PREFILL)]
            producer.flush()
            prefilled = {f.result(30).offset: v for v, f in sent}
        load = Load(cluster.bootstrap)
        load.thread.start()
        try:
            wait_until(lambda: len(load.acked) >= 2000, 60, "records before the move")
            with Admin(cluster.bootstrap) as admin:
                started = time.monotonic()
                assert admin.alter_partition_reassignments({TP: [1, 2]}) == {TP: None}
                listed = admin.list_partition_reassignments()
                # in flight for seconds: the throttle holds the new replica back
                assert listed == {TP: PartitionReassignment((1, 2, 0), (2,), (0,))}
                with pytest.raises(MiniKafkaError) as bad:
                    admin.alter_partition_reassignments({TopicPartition(TOPIC, 0): [1, 9]})
                assert bad.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
            moved = cluster.wait_partition(
                TOPIC, 0, lambda p: p["replicas"] == [1, 2] and sorted(p["isr"]) == [1, 2],
                "moved to brokers 1 and 2", timeout_s=60)
            took_s = time.monotonic() - started
            assert moved["leader"] in (1, 2)
            # 2 MiB through a 512 KiB/s bucket that starts with one second's worth
            assert took_s >= (PREFILL * 1024 - RATE) / RATE * 0.9, took_s
            with Admin(cluster.bootstrap) as admin:
                assert admin.list_partition_reassignments() == {}
                assert admin.alter_partition_reassignments({TP: None}, raise_on_error=False)[
                    TP].code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS  # type: ignore[union-attr]
            before = len(load.acked)
            wait_until(lambda: len(load.acked) >= before + 1000, 60, "records after the move")
        finally:
            load.stop.set()
            load.thread.join(90)
        assert not load.thread.is_alive()
        acked = {**prefilled, **load.acked}
        print(f"moved in {took_s:.1f} s; {len(acked)} records acknowledged "
              f"({len(load.acked)} under load, {load.failed} failed sends)")
        got = {r.offset: r.value for r in consume_all(cluster.bootstrap, TOPIC, 1,
                                                      max(acked) + 1)[0]}
        lost = sorted(set(acked) - set(got))
        assert not lost, f"{len(lost)} acknowledged records lost, from offset {lost[0]}"
        assert all(got[offset] == value for offset, value in acked.items())
        # broker 0 deleted its replica
        wait_until(lambda: not (Path(cluster.state.brokers["0"].data_dir)
                                / f"{TOPIC}-0").exists(), 30, "broker 0's replica deleted")
