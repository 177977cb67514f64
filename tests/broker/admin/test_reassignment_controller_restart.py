"""A reassignment in flight survives a controller restart (a real 3-broker cluster).

Partitions 0 and 1 of a topic on brokers [0, 1] are both sent to [1, 2] while broker 2,
the one joining, is down, so neither can complete.  The controller process is killed
(SIGKILL by PID) and started again: the new one lists both moves (they are in the
partitions' records in the metadata log, not in the old process's memory), cancels
partition 1's (back to brokers 0 and 1 at once: both are in sync) and, once broker 2 is
back and in sync, completes partition 0's: the replicas are the target, leadership left
broker 0, broker 0 deleted its replica and every record written before is still
there."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.admin import Admin
from clients.admin.reassignments import PartitionReassignment
from clients.producer.producer import Producer
from clients.protocol.errors import MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.test_broker_integration import consume_all

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TOPIC = "moving"
MOVED, CANCELLED = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
RECORDS = 200


def listed(cluster: LocalCluster) -> dict[TopicPartition, PartitionReassignment] | None:
    """The listing, or None while the restarted controller cannot answer yet."""
    try:
        with Admin(cluster.bootstrap) as admin:
            return admin.list_partition_reassignments()
    except MiniKafkaError:
        return None


def test_a_restarted_controller_lists_cancels_and_completes_reassignments(
        tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3, controller_overrides={
            "auto_leader_rebalance_enable": "false"}) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, replica_assignments={0: [0, 1], 1: [0, 1]})])
        for index in (0, 1):
            cluster.wait_partition(TOPIC, index, lambda p: p["isr"] == [0, 1], "in sync")
        with Producer(cluster.bootstrap, acks="all", linger_ms=5) as producer:
            sent = [producer.send(TOPIC, b"record-%d" % i, partition=0) for i in range(RECORDS)]
            producer.flush()
            assert sorted(f.result(30).offset for f in sent) == list(range(RECORDS))
        cluster.kill("2")  # the joining broker is down: nothing can complete
        with Admin(cluster.bootstrap) as admin:
            assert admin.alter_partition_reassignments({MOVED: [1, 2], CANCELLED: [1, 2]}) == {
                MOVED: None, CANCELLED: None}
        in_flight = PartitionReassignment((1, 2, 0), (2,), (0,))
        assert listed(cluster) == {MOVED: in_flight, CANCELLED: in_flight}

        cluster.restart("controller")  # SIGKILL by PID, then started again
        wait_until(lambda: listed(cluster) is not None, 30, "the new controller answering")
        assert listed(cluster) == {MOVED: in_flight, CANCELLED: in_flight}
        with Admin(cluster.bootstrap) as admin:
            assert admin.alter_partition_reassignments({CANCELLED: None}) == {CANCELLED: None}
        back = cluster.wait_partition(TOPIC, 1, lambda p: sorted(p["replicas"]) == [0, 1],
                                      "partition 1 back on brokers 0 and 1")
        assert sorted(back["isr"]) == [0, 1]
        assert listed(cluster) == {MOVED: in_flight}

        cluster.restart("2")
        moved = cluster.wait_partition(
            TOPIC, 0, lambda p: p["replicas"] == [1, 2] and sorted(p["isr"]) == [1, 2],
            "partition 0 moved to brokers 1 and 2", timeout_s=60)
        assert moved["leader"] in (1, 2)
        assert listed(cluster) == {}
        wait_until(lambda: not (Path(cluster.state.brokers["0"].data_dir)
                                / f"{TOPIC}-0").exists(), 30, "broker 0's replica deleted")
        got = consume_all(cluster.bootstrap, TOPIC, 1, RECORDS)[0]
        assert [r.value for r in got] == [b"record-%d" % i for i in range(RECORDS)]
