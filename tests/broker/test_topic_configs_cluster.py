"""A topic's configs hold on the logs of a real 3-broker cluster, leader and followers, at
creation, after IncrementalAlterConfigs, after AlterConfigs and after every broker
restarted (issue 30 item 9).  Seen before: ``segment_bytes=65536`` on a topic whose
producer sends per-record ``send()`` with ``batch_size=4096, linger_ms=0`` left the
leader's segments at ~200 KB (5 batches of up to 65 KB each: the producer grows batches
and puts up to 5 of a partition in one request, and the leader never split a request).

What is looked at, on every broker's disk: the segments' sizes (``segment.bytes``), the
offset-index entries of each inactive segment against the batches it holds
(``index.interval.bytes``), the active segment's preallocated index size
(``segment.index.bytes``) and a record above the default ``max.message.bytes`` taken by the
leader and every follower (acks=all).  The in-process twin, every key of the catalog on
each path: ``tests/broker/test_topic_configs_applied.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.errors import MessageTooLargeError
from clients.records.batch import iter_batches
from clients.types import AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until

TOPIC = "cfg"
RESOURCE = ConfigResource(ConfigResourceType.TOPIC, TOPIC)
BIG = 1_500_000  # one record above the default max.message.bytes (1 MiB + 12)


def produce_per_record(bootstrap: str, count: int = 8000) -> None:
    """The issue's workload: per-record send() of 100 B, batch_size=4096, linger_ms=0."""
    with Producer(bootstrap, acks="all", batch_size=4096, linger_ms=0) as producer:
        futures = [producer.send(TOPIC, os.urandom(100), partition=0) for _ in range(count)]
        producer.flush()
        for future in futures[-1:]:
            future.result(60)


def produce_big(bootstrap: str) -> None:
    with Producer(bootstrap, acks="all", max_request_size=4 << 20) as producer:
        producer.send(TOPIC, os.urandom(BIG), partition=0).result(60)


def in_sync(cluster: LocalCluster) -> int:
    """Wait until every replica holds the leader's log end offset; return it."""
    p = cluster.wait_partition(
        TOPIC, 0, lambda p: len(p["isr"]) == 3 and len(
            {o["leo"] if o else -1 for o in p["replica_offsets"].values()}) == 1,
        "every replica in sync", timeout_s=60)
    return int(next(iter(p["replica_offsets"].values()))["leo"])


def replica_dirs(cluster: LocalCluster) -> dict[str, Path]:
    return {node: Path(info.data_dir) / f"{TOPIC}-0"
            for node, info in cluster.state.brokers.items()}


def index_entries(batch_sizes: list[int], interval: int) -> int:
    """Offset-index entries a segment of these batches has (storage/segment.py's rule:
    the first batch, then the first after every ``interval`` bytes)."""
    entries, since = 0, 0
    for size in batch_sizes:
        if since >= interval or not entries:
            entries, since = entries + 1, 0
        since += size
    return entries


def check_segments(cluster: LocalCluster, from_offset: int, to_offset: int,
                   segment_bytes: int, interval: int) -> int:
    """On every broker, the segments based in ``[from_offset, to_offset)`` keep to
    ``segment_bytes`` (one batch larger than that may be alone in a segment) and, once
    inactive, have the offset-index entries ``interval`` gives.  Returns how many were
    looked at."""
    checked = 0
    for node, directory in replica_dirs(cluster).items():
        logs = sorted(directory.glob("*.log"))
        for i, path in enumerate(logs):
            base = int(path.stem)
            if not from_offset <= base < to_offset:
                continue
            data = path.read_bytes()
            sizes = [h.size_in_bytes for _, h in iter_batches(data, validate=False)]
            assert len(data) <= segment_bytes or len(sizes) == 1, (
                f"broker {node}: {path.name} holds {len(data)} B in {len(sizes)} batches "
                f"(segment.bytes {segment_bytes}): {sizes}")
            if i < len(logs) - 1:  # inactive: its index is trimmed to its entries
                index = path.with_suffix(".index").stat().st_size // 8
                assert index == index_entries(sizes, interval), (
                    f"broker {node}: {path.name} has {index} index entries, "
                    f"index.interval.bytes {interval} gives {index_entries(sizes, interval)}")
            checked += 1
    return checked


def active_index_bytes(cluster: LocalCluster) -> dict[str, int]:
    return {node: sorted(directory.glob("*.index"))[-1].stat().st_size
            for node, directory in replica_dirs(cluster).items()}


@pytest.mark.multiprocess
@pytest.mark.slow
def test_topic_configs_hold_on_every_replica_from_creation_through_changes_and_restarts(
        tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3) as cluster:
        bootstrap = cluster.bootstrap
        with Admin(bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 3, {
                "segment.bytes": "65536", "index.interval.bytes": "16384",
                "segment.index.bytes": "65536", "max.message.bytes": "2097152"})])
        # creation
        produce_per_record(bootstrap)
        produce_big(bootstrap)
        end = in_sync(cluster)
        assert check_segments(cluster, 0, end, 65536, 16384) > 3 * 5

        # IncrementalAlterConfigs
        with Admin(bootstrap) as admin:
            admin.incremental_alter_configs({RESOURCE: [
                AlterConfigOp("segment.bytes", "150000"),
                AlterConfigOp("index.interval.bytes", "2048")]})
        start = end
        produce_per_record(bootstrap)
        end = in_sync(cluster)
        assert check_segments(cluster, start + 1, end, 150000, 2048) > 3 * 3

        # AlterConfigs: the whole set replaced (max.message.bytes back to its default)
        with Admin(bootstrap) as admin:
            admin.alter_configs({RESOURCE: {"segment.bytes": "100000",
                                            "index.interval.bytes": "8192",
                                            "segment.index.bytes": "40960"}})
            with pytest.raises(MessageTooLargeError):  # the leader's answer
                produce_big(bootstrap)
            admin.alter_configs({RESOURCE: {"segment.bytes": "100000",
                                            "index.interval.bytes": "8192",
                                            "segment.index.bytes": "40960",
                                            "max.message.bytes": "2097152"}})
        start = end
        produce_per_record(bootstrap)
        end = in_sync(cluster)
        assert check_segments(cluster, start + 1, end, 100000, 8192) > 3 * 3

        # every broker restarted (SIGKILL): its logs recover with the config stored beside
        # them (storage/log/config_file.py; the defaults rebuilt the rescanned active
        # segment's index with 4096, the flake) and take the topic's configs from the
        # metadata image (the active segment's index too)
        active = min(int(sorted(d.glob("*.log"))[-1].stem)
                     for d in replica_dirs(cluster).values())
        assert active > start  # created under the AlterConfigs' set
        for node in sorted(cluster.state.brokers):
            cluster.restart(node)
            in_sync(cluster)
        wait_until(lambda: set(active_index_bytes(cluster).values()) == {40960}, 30,
                   "every replica's active index preallocated to segment.index.bytes")
        produce_per_record(bootstrap)
        produce_big(bootstrap)
        end = in_sync(cluster)
        # the segments that were active at the restarts included
        assert check_segments(cluster, active, end, 100000, 8192) > 3 * 3
