"""A topic deleted and re-created while one of its brokers is down, on a real 2-broker
cluster: the returning broker finds its log of the deleted topic (same name, same
partition, leader epochs from 0 in both) and tells it apart by topic id
(``partition.metadata``, :mod:`broker.metadata.replica_plan`): it drops the old data and
copies the new topic's from the leader; the new topic's data is intact and every batch
of it is in leader epoch 0 (Kafka's rule: a new topic starts at 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.topics import topic_id_str
from clients.records.batch import iter_batches
from clients.types import NewTopic
from storage.partition_metadata import read_topic_id
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.test_broker_integration import consume_all

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

OLD, NEW = 60, 20  # the deleted topic had more records: its offsets cover the new one's


def _create(bootstrap: str) -> str:
    """Topic "re": one partition on brokers 0 (leader) and 1; its id."""
    with Admin(bootstrap) as admin:
        admin.create_topics([NewTopic("re", replica_assignments={0: [0, 1]})])
        topic_id = admin.describe_topics(["re"])["re"].topic_id
    assert topic_id is not None
    return topic_id


def _produce(bootstrap: str, prefix: str, n: int, one_per_batch: bool = False) -> None:
    """``n`` records ``prefix-i`` at offsets 0..n-1 (``one_per_batch``: a batch each, so
    a truncation of the log to the new topic's end would keep whole old batches)."""
    with Producer(bootstrap, acks="all", delivery_timeout_ms=60_000) as producer:
        sent = []
        for i in range(n):
            sent.append(producer.send("re", f"{prefix}-{i}".encode(), partition=0))
            if one_per_batch:
                producer.flush()
        producer.flush()
        assert [f.result(60).offset for f in sent] == list(range(n))


def _batches(cluster: LocalCluster, broker: str) -> list[tuple[int, int, bytes]]:
    """(base offset, partition leader epoch, bytes) of each batch of broker's re-0."""
    out = []
    for segment in sorted((Path(cluster.state.brokers[broker].data_dir) / "re-0").glob("*.log")):
        data = segment.read_bytes()
        for pos, header in iter_batches(data, validate=True):
            out.append((header.base_offset, header.partition_leader_epoch,
                        data[pos:pos + header.size_in_bytes]))
    return out


def test_a_broker_back_after_its_topic_was_recreated_drops_the_old_data_by_id(
        tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 2) as cluster:
        old_id = _create(cluster.bootstrap)
        _produce(cluster.bootstrap, "old", OLD, one_per_batch=True)
        cluster.wait_partition("re", 0, lambda p: p["isr"] == [0, 1] and all(
            o is not None and o["leo"] == OLD for o in p["replica_offsets"].values()),
            "broker 1 holds the old topic's records")
        old_dir = Path(cluster.state.brokers["1"].data_dir) / "re-0"
        assert read_topic_id(old_dir) is not None
        assert topic_id_str(read_topic_id(old_dir)) == old_id  # type: ignore[arg-type]

        cluster.kill("1")
        cluster.wait_partition("re", 0, lambda p: p["isr"] == [0], "broker 1 fenced")
        with Admin(cluster.bootstrap) as admin:
            admin.delete_topics(["re"])
            wait_until(lambda: "re" not in admin.list_topics(), 30, "re deleted", 0.1)
        new_id = _create(cluster.bootstrap)
        assert new_id != old_id
        assert cluster.partition("re", 0)["leader_epoch"] == 0  # Kafka's: from 0 again
        _produce(cluster.bootstrap, "new", NEW)

        cluster.restart("1")  # with the deleted topic's log of re-0 on its disk
        p = cluster.wait_partition("re", 0, lambda p: p["isr"] == [0, 1] and all(
            o is not None and o["leo"] == NEW for o in p["replica_offsets"].values()),
            "broker 1 back in sync with the new topic")
        assert p["leader_epoch"] == 0
        assert topic_id_str(read_topic_id(old_dir)) == new_id  # type: ignore[arg-type]
        leader, returned = _batches(cluster, "0"), _batches(cluster, "1")
        assert returned == leader  # byte-identical: nothing of the old topic kept
        assert {epoch for _, epoch, _ in returned} == {0}
        assert all(b"old-" not in data for _, _, data in returned)
        values = [r.value for r in consume_all(cluster.bootstrap, "re", 1, NEW)[0]]
        assert values == [f"new-{i}".encode() for i in range(NEW)]
