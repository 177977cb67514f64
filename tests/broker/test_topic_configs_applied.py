"""Every topic config the catalog accepts reaches the logs of its topic, on the leader and
on a follower replica, on each path: at creation, on a change, on a change back to the
defaults, and after a restart of the broker (issue 30 item 9).

One mechanism does it (:meth:`TopicConfigs.apply` -> :meth:`Log.update_config`
-> every segment); these tests drive a :class:`BrokerCore` in controller mode with a
metadata image, as the metadata follower does.  The real-process twin (a 3-broker
cluster, file sizes and index entries on disk) is
``tests/broker/test_topic_configs_cluster.py``.

What "applied" means per key: a :class:`LogConfig` setting is the log's config (what
validation, rolls, flushes, retention and the cleaner read), and for
``index_interval_bytes`` / ``segment_index_bytes`` also the active segment's own copy (its
index interval and preallocated index size); ``min_insync_replicas`` is what the leader's
acks=all check uses (a produce answered NOT_ENOUGH_REPLICAS).  ``unclean_leader_election``
is read by the controller's elections only (broker/controller), not by brokers.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from broker.config import BrokerConfig
from broker.controller.config import ControllerConfig, validate_topic_configs
from broker.core import BrokerCore
from broker.handlers.configs import TOPIC_CONFIGS
from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    PartitionRecord,
    RegisterBrokerRecord,
    TopicConfigsRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from clients.records.record import build_batch
from storage.config import LogConfig
from storage.index.offset_index import OffsetIndex
from storage.index.time_index import TimeIndex
from storage.log.log import Log, wall_clock_ms
from storage.log_dirs import CLEAN_SHUTDOWN_MARKER
from tests.broker.handlers.wire import call
from tests.broker.image_feed import ImageFeed
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

LEADS, FOLLOWS = TopicPartition("t", 0), TopicPartition("t", 1)  # on broker 1
BROKER_ONLY = {"min_insync_replicas"}  # read by the broker, not a log setting
CONTROLLER_ONLY = {"unclean_leader_election"}  # read by the controller's elections

# two sets of values: FIRST's differ from the defaults and from SECOND's
FIRST = {"cleanup.policy": "compact", "delete.retention.ms": "1000", "flush.messages": "7",
         "flush.ms": "9000", "index.interval.bytes": "512", "max.message.bytes": "2097152",
         "min.cleanable.dirty.ratio": "0.25", "min.compaction.lag.ms": "60000",
         "message.timestamp.after.max.ms": "5000", "message.timestamp.before.max.ms": "6000",
         "message.timestamp.type": "LogAppendTime", "min.insync.replicas": "3",
         "retention.bytes": "1048576", "retention.ms": "3600000", "segment.bytes": "65536",
         "segment.index.bytes": "8192", "segment.ms": "600000",
         "unclean.leader.election.enable": "true"}
SECOND = {"cleanup_policy": "delete", "delete_retention_ms": "2000", "flush_messages": "70",
          "flush_ms": "90000", "index_interval_bytes": "1024", "max_message_bytes": "3000000",
          "min_cleanable_dirty_ratio": "0.75", "min_compaction_lag_ms": "120000",
          "message_timestamp_after_max_ms": "50000",
          "message_timestamp_before_max_ms": "60000",
          "message_timestamp_type": "CreateTime", "min_insync_replicas": "2",
          "retention_bytes": "2097152", "retention_ms": "7200000", "segment_bytes": "131072",
          "segment_index_bytes": "16384", "segment_ms": "1200000",
          "unclean_leader_election": "false"}
BROKER = BrokerConfig(node_id=1, controller_address="127.0.0.1:9", segment_bytes=1 << 20,
                      retention_ms=86_400_000, min_insync_replicas=1)
# what a log has when the topic sets nothing: the broker's settings, else LogConfig's
DEFAULTS = LogConfig.from_dict({k: v for k, v in BROKER.log_defaults().items()
                                if v is not None})


def expected(configs: dict[str, str]) -> LogConfig:
    """The LogConfig ``configs`` stand for, parsed here by hand (not by the code tested)."""
    values: dict[str, Any] = {}
    for name, text in configs.items():
        key = name.replace(".", "_")
        if key in BROKER_ONLY or key.startswith("unclean_leader_election"):
            continue
        field_type = {f.name: f.type for f in dataclasses.fields(LogConfig)}[key]
        values[key] = (text if field_type == "str" else float(text) if field_type == "float"
                       else int(text))
    return dataclasses.replace(DEFAULTS, **values)


def started(data_dir: Path) -> BrokerCore:
    clock = ManualClock(1_000_000)
    core = BrokerCore(dataclasses.replace(BROKER, data_dir=str(data_dir)), clock,
                      SystemTimer(clock))
    core.startup()
    return core


def as_recorded(configs: dict[str, str]) -> dict[str, str]:
    """The configs as the controller writes them in its records (validated, our keys)."""
    return validate_topic_configs(configs, ControllerConfig())


def created(core: BrokerCore, configs: dict[str, str]) -> ImageFeed:
    """Topic t (RF 2, brokers 1 and 2): broker 1 leads t-0 and follows t-1."""
    feed = ImageFeed(core)
    feed.apply(RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001),
               RegisterBrokerRecord(2, 1, "b", "127.0.0.1", 9002),
               UnfenceBrokerRecord(1, 0), UnfenceBrokerRecord(2, 1),
               TopicRecord("t", 7, 2, 2, as_recorded(configs)),
               PartitionRecord("t", 0, (1, 2), 1, 0, (1, 2), 0),
               PartitionRecord("t", 1, (2, 1), 2, 0, (2, 1), 0))
    return feed


def acks_all_error(core: BrokerCore) -> int | None:
    """The error of an acks=all produce to t-0 answered at once; None: it was taken and
    waits for the follower (parked)."""
    answers = call(core, ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 1000, "topics": [
        {"name": "t", "partitions": [{"index": 0, "records": build_batch(
            [(b"k", b"v", wall_clock_ms(), ())])}]}]})  # the logs' clock
    if not answers:
        return None
    answer = answers[0]
    assert answer is not None
    return int(answer["responses"][0]["partition_responses"][0]["error_code"])


def assert_log_has(log: Log, want: LogConfig) -> None:
    assert log.config == want, (log.dir, log.config)
    active = log.active  # the segment appends go to now
    assert active.config == want, log.dir
    assert active._index_interval_bytes == want.index_interval_bytes, log.dir
    assert active.index.max_entries == want.segment_index_bytes // OffsetIndex.ENTRY_SIZE
    assert active.time_index.max_entries == want.segment_index_bytes // TimeIndex.ENTRY_SIZE
    assert active.index.path.stat().st_size == want.segment_index_bytes // 8 * 8, log.dir


def assert_applied(core: BrokerCore, want: LogConfig, min_isr: int) -> None:
    assert core.partitions[LEADS].is_leader and not core.partitions[FOLLOWS].is_leader
    for key in (LEADS, FOLLOWS):
        assert_log_has(core.partitions[key].log, want)
    assert core.configs.min_insync_replicas("t") == min_isr
    # the leader's acks=all check: ISR (1, 2) is short of 3
    assert acks_all_error(core) == (ErrorCode.NOT_ENOUGH_REPLICAS if min_isr > 2 else None)


def test_the_catalog_is_covered() -> None:
    """Every key the topic-config catalog accepts is set by both value sets (a key added
    to the catalog must be added here, with what "applied" means for it)."""
    catalog = {d.key for d in TOPIC_CONFIGS}
    assert catalog == {k.replace(".", "_").replace("_enable", "") for k in FIRST}
    assert catalog == set(SECOND)
    assert catalog == ({f.name for f in dataclasses.fields(LogConfig)} | BROKER_ONLY
                       | CONTROLLER_ONLY)
    for key in catalog - BROKER_ONLY - CONTROLLER_ONLY:
        default = getattr(DEFAULTS, key)
        # so each step of FIRST -> SECOND -> FIRST -> defaults changes every key
        assert getattr(expected(FIRST), key) not in (default, getattr(expected(SECOND), key))


def test_configs_reach_leader_and_follower_at_creation_on_change_and_back_to_defaults(
        tmp_path: Path) -> None:
    core = started(tmp_path / "b1")
    try:
        feed = created(core, FIRST)
        assert_applied(core, expected(FIRST), 3)
        feed.apply(TopicConfigsRecord("t", as_recorded(SECOND)))  # (Incremental)AlterConfigs
        assert_applied(core, expected(SECOND), 2)
        feed.apply(TopicConfigsRecord("t", as_recorded(FIRST)))
        assert_applied(core, expected(FIRST), 3)
        feed.apply(TopicConfigsRecord("t", as_recorded({})))  # every override deleted
        assert_applied(core, DEFAULTS, 1)
    finally:
        core.shutdown()


def test_configs_reach_leader_and_follower_after_a_restart(tmp_path: Path) -> None:
    """A restarted broker opens its logs before it has a metadata image, so with the
    config stored beside each log (storage/log/config_file.py: the topic's as last
    applied); once the image arrives the topic's configs hold again, the active
    segment's included."""
    data = tmp_path / "b1"
    core = started(data)
    try:
        created(core, SECOND)
        assert_applied(core, expected(SECOND), 2)
    finally:
        core.shutdown()
    core = started(data)
    try:
        opened = core.log_manager.get_log("t", 0)
        assert opened is not None and opened.config == expected(SECOND)  # no image yet
        created(core, SECOND)
        assert_applied(core, expected(SECOND), 2)
    finally:
        core.shutdown()


def index_entries(batch_sizes: list[int], interval: int) -> int:
    """Offset-index entries a segment of these batches has (storage/segment.py's rule:
    the first batch, then the first after every ``interval`` bytes)."""
    entries, since = 0, 0
    for size in batch_sizes:
        if since >= interval or not entries:
            entries, since = entries + 1, 0
        since += size
    return entries


def test_an_unclean_restart_rebuilds_indexes_with_the_topics_interval(tmp_path: Path) -> None:
    """A broker killed (no clean shutdown) rescans its logs at the next start, before its
    metadata image says what the topics' configs are: the rebuilt offset index has the
    entries the topic's ``index.interval.bytes`` gives, not the broker default's (seen:
    3 entries where 8192 gives 2 in tests/broker/test_topic_configs_cluster.py)."""
    data = tmp_path / "b1"
    topic = {"index.interval.bytes": "8192"}
    core = started(data)
    try:
        created(core, topic)
        log = core.partitions[LEADS].log
        for value_bytes in (4000, 4000, 23000, 4000, 4000):  # the flake's batch shapes
            log.append_as_leader(build_batch([(b"k", os.urandom(value_bytes),
                                               wall_clock_ms(), ())]), 0)
        sizes = [b.size for b in log.active.iter_batches(0)]
        assert index_entries(sizes, 8192) != index_entries(sizes, DEFAULTS.index_interval_bytes)
    finally:
        core.shutdown()
    (data / CLEAN_SHUTDOWN_MARKER).unlink()  # what a SIGKILL leaves: an unclean stop
    core = started(data)
    try:
        opened = core.log_manager.get_log(*LEADS)
        assert opened is not None and core.image is None  # before any metadata
        assert opened.recovery_report.segments_rescanned == 1
        assert opened.active.index.entries == index_entries(sizes, 8192)
        created(core, topic)
        assert_log_has(core.partitions[LEADS].log, expected(topic))
    finally:
        core.shutdown()


def test_min_insync_replicas_holds_while_the_image_is_rebuilt(tmp_path: Path) -> None:
    """The metadata log no longer has the follower's offset (OFFSET_OUT_OF_RANGE): the
    follower installs an empty image and rebuilds it; the hosted logs keep their
    topic's settings meanwhile, and so does the leader's acks=all check (it fell back to
    the broker's default, 1, and took writes a topic asking for 3 in-sync replicas
    refuses)."""
    core = started(tmp_path / "b1")
    try:
        created(core, FIRST)
        core.image = MetadataImage()  # what follower.py does on OFFSET_OUT_OF_RANGE
        assert core.configs.min_insync_replicas("t") == 3
        assert acks_all_error(core) == ErrorCode.NOT_ENOUGH_REPLICAS
        assert_log_has(core.partitions[LEADS].log, expected(FIRST))
        created(core, SECOND)  # the image rebuilt (reconciled once complete)
        assert_applied(core, expected(SECOND), 2)
    finally:
        core.shutdown()


def test_standalone_configs_reach_the_logs_at_creation_on_change_and_after_a_restart(
        tmp_path: Path) -> None:
    clock = ManualClock(1_000_000)
    config = dataclasses.replace(BROKER, node_id=0, controller_address="",
                                 data_dir=str(tmp_path / "b0"))

    def started_alone() -> BrokerCore:
        core = BrokerCore(config, clock, SystemTimer(clock))
        core.startup()
        return core

    def check(core: BrokerCore, want: LogConfig, min_isr: int) -> None:
        for index in range(2):
            assert_log_has(core.partitions[TopicPartition("t", index)].log, want)
        assert core.configs.min_insync_replicas("t") == min_isr

    core = started_alone()
    try:
        core.create_topic(core.validate_new_topic("t", 2, 1, FIRST))
        check(core, expected(FIRST), 3)
        core.set_topic_configs("t", core.configs.validate(SECOND))
        check(core, expected(SECOND), 2)
    finally:
        core.shutdown()
    core = started_alone()
    try:
        check(core, expected(SECOND), 2)
        core.delete_topic("t")
        core.create_topic(core.validate_new_topic("t", 2, 1, {}))
        check(core, DEFAULTS, 1)
    finally:
        core.shutdown()
