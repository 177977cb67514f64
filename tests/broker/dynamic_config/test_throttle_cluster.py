"""The replication throttle lifted at run time on a real 2-broker cluster: a partition
moves from broker 0 to broker 1 while broker 1's follower.replication.throttled.rate
(static: 1 byte/s) holds the copy back; IncrementalAlterConfigs on broker 1 sets the
rate to 0 (DescribeConfigs then shows it as DYNAMIC_BROKER_CONFIG), and the move
completes without a restart.  At 1 byte/s the 60 one-KiB batches would take hours."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.topics import TopicPartition
from clients.types import AlterConfigOp, ConfigResource, ConfigResourceType, ConfigSource, NewTopic
from tests.broker.cluster_harness import LocalCluster

pytestmark = [pytest.mark.multiprocess]

RATE = "follower.replication.throttled.rate"
TP = TopicPartition("lift", 0)


def test_a_throttle_lifted_at_run_time_lets_a_reassignment_finish(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 2, {"follower_replication_throttled_rate": 1},
                      controller_overrides={"auto_leader_rebalance_enable": "false"}
                      ) as cluster, Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic("lift", replica_assignments={0: [0]})])
        cluster.wait_partition("lift", 0, lambda p: p["isr"] == [0], "a leader")
        with Producer(cluster.bootstrap, acks="all", batch_size=1024, linger_ms=0) as producer:
            for i in range(60):  # one batch each
                producer.send("lift", b"%04d" % i + b"x" * 1000, partition=0).result(30)
        broker1 = ConfigResource(ConfigResourceType.BROKER, "1")
        entry = admin.describe_configs([broker1])[broker1][RATE]  # type: ignore[index]
        assert (entry.value, entry.source, entry.is_read_only) == (
            "1", ConfigSource.STATIC_BROKER_CONFIG, False)
        assert admin.alter_partition_reassignments({TP: [1]}) == {TP: None}
        # the new replica outside the ISR: one batch, then the bucket is ~1 KB in debt
        cluster.wait_partition("lift", 0, lambda p: p["replicas"] == [1, 0], "moving")
        assert admin.list_partition_reassignments().keys() == {TP}
        assert admin.incremental_alter_configs({broker1: [AlterConfigOp(RATE, "0")]}) == {
            broker1: None}
        entry = admin.describe_configs([broker1])[broker1][RATE]  # type: ignore[index]
        assert (entry.value, entry.source) == ("0", ConfigSource.DYNAMIC_BROKER_CONFIG)
        cluster.wait_partition("lift", 0, lambda p: p["replicas"] == [1] and p["isr"] == [1],
                               "moved to broker 1", timeout_s=30)
        assert admin.list_partition_reassignments() == {}
