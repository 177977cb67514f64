"""Consumer-group lag per partition, as kafka-exporter names it.

:func:`group_lag_families` renders, for the groups this broker coordinates:

- ``kafka_consumergroup_current_offset{consumergroup, topic, partition}``: the committed
  offset;
- ``kafka_consumergroup_lag{consumergroup, topic, partition}``: the partition's high
  watermark minus the committed offset (at least 0);
- ``kafka_consumergroup_members{consumergroup}``: members of the group.

Where it is known: the coordinator holds the committed offsets, the replicas the high
watermarks, so lag is exported for the partitions that have a replica on the group's
coordinator (a follower's high watermark trails the leader's by at most one fetch).  On
a cluster where every broker holds every partition (replication factor = brokers, e.g.
``cluster start``'s 3 brokers with RF 3) that is every partition; otherwise a partition
without a replica on the coordinator has ``current_offset`` but no ``lag`` series.
Not done: a cluster-wide view (ListOffsets to the leaders, as kafka-exporter does).

Bound: at most ``max_series`` partitions in all (``metrics_max_lag_series``); the ones
beyond are counted in ``minikafka_consumergroup_lag_series_dropped``.

Costs: O(committed offsets of the coordinated groups), bounded as above; reads only.
Not thread-safe: the event loop's thread (a scrape), like the coordinator.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from broker.group.members import Group
from clients.protocol.topics import TopicPartition
from replication.partition import Partition


def group_lag_families(groups: Mapping[str, Group], partitions: Mapping[TopicPartition, Partition],
                       max_series: int) -> Iterator[Metric]:
    labels = ["consumergroup", "topic", "partition"]
    current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                "Committed offset of a group on a partition", labels=labels)
    lag = GaugeMetricFamily("kafka_consumergroup_lag", "High watermark minus the committed "
                            "offset (partitions with a replica on the coordinator)",
                            labels=labels)
    members = GaugeMetricFamily("kafka_consumergroup_members", "Members of the group",
                                labels=["consumergroup"])
    series = dropped = 0
    for group_id, group in sorted(groups.items()):
        members.add_metric([group_id], len(group.members))
        for key, value in group.offsets.items():
            if series >= max_series:
                dropped += 1
                continue
            series += 1
            values = [group_id, key.topic, str(key.partition)]
            current.add_metric(values, value.offset)
            partition = partitions.get(key)
            if partition is not None and value.offset >= 0:
                lag.add_metric(values, max(0, partition.high_watermark - value.offset))
    yield current
    yield lag
    yield members
    yield GaugeMetricFamily("minikafka_consumergroup_lag_series_dropped",
                            "Group partitions left out past metrics_max_lag_series",
                            value=dropped)
