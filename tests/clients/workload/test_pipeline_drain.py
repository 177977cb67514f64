"""The pipeline's drain (clients/workload/pipeline.py ``_caught_up``) says the group consumed
topic A to its end only when it did, against a real broker.

Found in CI (`minikafka demo`, kill-coordinator): both workers sat in a rebalance with
no partitions for over ``idle_s`` (both "idle"), and the drain took "every worker idle and
an offset committed on every partition" as the end while a partition's committed offset
was ~500 committed records short: the run stopped the workers and the verify counted
those records as "pipeline lost".  Now an idle drain accepts a committed offset short of
the end only when nothing committed lies between the two (aborted data and markers, which
librdkafka's position may stop before).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.topics import TopicPartition
from clients.workload.pipeline import _caught_up
from tests.broker.cluster_harness import LocalCluster
from tests.broker.compat.common import OVERRIDES, create
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess]

TOPIC = "drain-a"
GROUP = "drain-group"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("drain")), 3, OVERRIDES) as running:
        create(running, TOPIC, partitions=1)
        # offsets 0-2 committed data, 3 its marker, 4-5 aborted data, 6 its marker
        with Producer(running.bootstrap, transactional_id="drain-writer") as producer:
            producer.init_transactions()
            for values, commit in (([b"a", b"b", b"c"], True), ([b"x", b"y"], False)):
                producer.begin_transaction()
                for v in values:
                    producer.send(TOPIC, v, partition=0)
                if commit:
                    producer.commit_transaction()
                else:
                    producer.flush()  # the aborted records reach the log before the marker
                    producer.abort_transaction()
        yield running  # stopped by PID when the module ends, failed or not


def drain_verdict(bootstrap: str, committed: int, *, strict: bool) -> str | None:
    tp = TopicPartition(TOPIC, 0)
    with Consumer(bootstrap, group_id=GROUP, enable_auto_commit=False) as committer:
        committer.commit({tp: committed})
    with Consumer(bootstrap, group_id=GROUP, isolation_level="read_committed",
                  enable_auto_commit=False) as probe, \
            Consumer(bootstrap, enable_auto_commit=False) as plain, \
            Consumer(bootstrap, isolation_level="read_committed",
                     enable_auto_commit=False) as scan:
        # the markers land a moment after the commit returns
        wait_until(lambda: probe.end_offsets([tp]) == plain.end_offsets([tp]) == {tp: 7}, 30,
                   "both markers written (LSO = HW = 7)")
        return _caught_up(probe, plain, scan, TOPIC, strict=strict)


def test_idle_workers_short_of_committed_records_are_not_the_end(cluster: LocalCluster) -> None:
    # committed 1: records b and c (committed data) are still to be consumed
    assert drain_verdict(cluster.bootstrap, 1, strict=False) is None
    assert drain_verdict(cluster.bootstrap, 1, strict=True) is None


def test_idle_workers_before_markers_and_aborted_data_are_at_the_end(
        cluster: LocalCluster) -> None:
    # committed 3: only the commit marker, the aborted x and y and the abort marker follow
    how = drain_verdict(cluster.bootstrap, 3, strict=False)
    assert how is not None and "0: 3 of 7" in how, how
    assert drain_verdict(cluster.bootstrap, 3, strict=True) is None  # strict wants 7


def test_a_committed_offset_at_the_end_is_the_end(cluster: LocalCluster) -> None:
    how = drain_verdict(cluster.bootstrap, 7, strict=True)
    assert how == "every partition's committed offset at its end"
