"""A restarted broker in a cluster opens its logs before the metadata image (with the
topics' configs) arrives: until then nothing may be deleted or compacted by defaults.

And once the image arrives every hosted log takes its topic's config (segment size,
retention, cleanup policy), on every broker, after every restart.

Seen before: a topic kept forever (``retention.ms=-1``) whose broker restarted while the
controller was away had its old segments deleted by the broker's default retention.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.cluster.state import ProcessInfo
from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.metadata.image import MetadataImage
from clients.admin import Admin
from clients.producer.producer import Producer
from clients.records.record import build_batch
from clients.types import NewTopic
from storage.config import LogConfig
from storage.log.log import Log
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

OLD_MS = 1_000  # 1970: far beyond any default retention


def test_no_retention_or_compaction_before_the_topic_configs_are_known(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker-0"
    log = Log.open(data_dir / "kept-0", LogConfig(segment_bytes=1024))
    for i in range(20):
        log.append_as_leader(build_batch([(b"k%d" % (i % 3), b"v" * 100, OLD_MS, ())]), 0)
    segments = len(log.segments)
    log.close()
    assert segments > 3
    clock = ManualClock(2_000_000_000_000)
    config = BrokerConfig(node_id=0, data_dir=str(data_dir),
                          controller_address="127.0.0.1:9")
    core = BrokerCore(config, clock, SystemTimer(clock))
    core.startup()
    try:
        assert not core.topic_configs_known()
        core.image = MetadataImage()  # what the metadata follower installs before a fetch
        assert not core.topic_configs_known()
        assert core.run_retention() == 0
        core.run_log_cleaner()
        opened = core.log_manager.get_log("kept", 0)
        assert opened is not None and len(opened.segments) == segments
        assert opened.log_start_offset == 0
        core.reconcile()  # the complete image (here: no topics) was applied
        assert core.topic_configs_known()
    finally:
        core.shutdown()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_topic_configs_hold_after_every_broker_restarts(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic("seg", 1, 3, {"segment.bytes": "262144",
                                                        "retention.ms": "-1"})])

        def produce(n: int) -> None:
            with Producer(cluster.bootstrap, acks="all") as producer:
                producer.send_bulk("seg", [os.urandom(1000) for _ in range(n)],
                                   partition=0).result(60)

        produce(1500)
        for node in cluster.state.brokers:
            cluster.restart(node)
        produce(3000)

        def sizes(info: ProcessInfo) -> list[int]:
            return [p.stat().st_size for p in Path(info.data_dir, "seg-0").glob("*.log")]

        # acks=all waits for the ISR only: a replica the restarts left behind catches up
        brokers = cluster.state.brokers
        wait_until(lambda: len({sum(sizes(info)) for info in brokers.values()}) == 1,
                   30, "every replica holding the same log")
        for node, info in brokers.items():
            found = sizes(info)
            assert len(found) > 10 and max(found) <= 262144, (node, sorted(found)[-3:])
