"""A topic's ``segment.bytes`` holds on every replica: at creation, after a change, after
restarts (issue 30, item 9).

The workload is the one that found the hole: per-record ``Producer.send`` of 100 B values
with ``batch_size=4096, linger_ms=0``.  Behind a backlog the producer grows batches to
``batch_max_size`` (64 KiB here) and sends several of a partition's batches in one
Produce request; the leader appended each request into one segment, so with
``segment.bytes=65536`` its segments held ~200 KB while the followers' (whose fetched
batches were already cut at batch boundaries) kept to 64 KiB.  Every replica's segments
must keep to the topic's value, except a segment holding a single batch larger than it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.producer.producer import Producer
from clients.records.batch import iter_batches
from clients.types import AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic
from tests.broker.cluster_harness import LocalCluster

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def _all_in_sync(p: dict) -> bool:
    offsets = list(p["replica_offsets"].values())
    return (len(p["isr"]) == 3 and all(o is not None for o in offsets)
            and len({(o["hw"], o["leo"]) for o in offsets}) == 1)


def _send(cluster: LocalCluster, count: int) -> int:
    """The issue's workload; returns the log end offset once every replica has it all."""
    with Producer(cluster.bootstrap, acks="all", batch_size=4096, linger_ms=0) as producer:
        for _ in range(count):
            producer.send("cfg", os.urandom(100), partition=0)
        producer.flush()
    p = cluster.wait_partition("cfg", 0, _all_in_sync, "every replica has every record")
    return int(p["replica_offsets"][str(p["leader"])]["leo"])


def _segments(cluster: LocalCluster, since_offset: int) -> dict[str, list[tuple[int, int]]]:
    """Per broker: (size, batches) of each segment whose base offset is >= ``since_offset``
    (segments begun after a change), the active one included."""
    out: dict[str, list[tuple[int, int]]] = {}
    for node, info in cluster.state.brokers.items():
        found = []
        for path in sorted(Path(info.data_dir, "cfg-0").glob("*.log")):
            if int(path.stem) >= since_offset:
                data = path.read_bytes()
                found.append((len(data), sum(1 for _ in iter_batches(data))))
        out[node] = found
    return out


def _check(cluster: LocalCluster, since_offset: int, segment_bytes: int) -> None:
    for node, segments in _segments(cluster, since_offset).items():
        assert len(segments) >= 3, (node, segments)
        over = [(size, batches) for size, batches in segments
                if size > segment_bytes and batches > 1]
        assert not over, f"broker {node}: segments over {segment_bytes} B: {over}"


def test_segment_bytes_holds_on_leader_and_followers_at_creation_change_and_restart(
        tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic("cfg", 1, 3, {"segment_bytes": "65536"})])
        cluster.wait_partition("cfg", 0, _all_in_sync, "the topic is in sync")

        # creation: the topic's value from the first append on
        end = _send(cluster, 8_000)
        _check(cluster, 0, 65536)

        # change: segments begun after it keep to the new value (and use it: larger ones)
        with Admin(cluster.bootstrap) as admin:
            admin.incremental_alter_configs({
                ConfigResource(ConfigResourceType.TOPIC, "cfg"):
                    [AlterConfigOp("segment.bytes", "131072")]})
        end_changed = _send(cluster, 8_000)
        _check(cluster, end, 131072)
        sizes = [s for segs in _segments(cluster, end).values() for s, _ in segs]
        assert max(sizes) > 65536, sizes  # the new value is in use, not the old one

        # restart of every broker: the value comes back from the metadata image
        for node in list(cluster.state.brokers):
            cluster.restart(node)
        cluster.wait_partition("cfg", 0, _all_in_sync, "in sync after the restarts")
        _send(cluster, 8_000)
        _check(cluster, end_changed, 131072)
