"""A replica whose log recovery cut stays marked across restarts until it is back in an
ISR with a leader (controller mode): the mark is what keeps the controller from
electing it while another replica may hold the acknowledged records it lost.  Before the
mark was kept on disk a second restart forgot it: a broker that shut down before it had
a metadata image wrote an empty high-watermark checkpoint (it now keeps the HWs of logs
it does not host yet), and a truncation by recovery leaves no trace in the HWs anyway.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.metadata.records import (
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.topics import TopicPartition
from clients.records.record import build_batch
from storage.checkpoint import (
    RECOVERY_CUT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from storage.log.recovery import RECOVERY_CUT_MARKER
from storage.log_dirs import CLEAN_SHUTDOWN_MARKER
from tests.broker.handlers.wire import call1
from tests.broker.image_feed import ImageFeed
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

TP = TopicPartition("t", 0)


def started(data_dir: Path) -> BrokerCore:
    clock = ManualClock(1_000_000)
    core = BrokerCore(BrokerConfig(node_id=1, data_dir=str(data_dir),
                                   controller_address="127.0.0.1:9"), clock, SystemTimer(clock))
    core.startup()
    return core


def feed_with(core: BrokerCore, leader: int, isr: tuple[int, ...], epoch: int) -> None:
    feed = ImageFeed(core)
    feed.apply(RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001),
               RegisterBrokerRecord(2, 1, "b", "127.0.0.1", 9002),
               UnfenceBrokerRecord(1, 0), UnfenceBrokerRecord(2, 1),
               TopicRecord("t", 7, 1, 2),
               PartitionRecord("t", 0, (1, 2), leader, epoch, isr, epoch))


def hosted_once(tmp_path: Path) -> Path:
    """A data directory whose broker led t-0 once (an empty log), then stopped."""
    data = tmp_path / "b1"
    core = started(data)
    try:
        feed_with(core, leader=1, isr=(1,), epoch=0)
    finally:
        core.shutdown()
    return data


def stored_cuts(data_dir: Path) -> dict[TopicPartition, int]:
    return OffsetCheckpointFile(data_dir / RECOVERY_CUT_CHECKPOINT).read()


def led_and_torn(tmp_path: Path) -> Path:
    """A data directory whose broker led t-0 and wrote 5 records (HW 5), then stopped
    uncleanly with the last batch torn (its recovery cuts the log to 4)."""
    data = tmp_path / "b1"
    core = started(data)
    try:
        feed_with(core, leader=1, isr=(1,), epoch=0)
        for i in range(5):
            answer = call1(core, ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 1000, "topics": [
                {"name": "t", "partitions": [{"index": 0, "records": build_batch(
                    [(b"k", b"value-%d" % i, 5, ())])}]}]})
            assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
        assert core.partitions[TP].high_watermark == 5
    finally:
        core.shutdown()
    (data / CLEAN_SHUTDOWN_MARKER).unlink()  # an unclean stop that tore the last batch
    segment = next((data / "t-0").glob("*.log"))
    segment.write_bytes(segment.read_bytes()[:-10])
    return data


def test_a_cut_replica_stays_marked_across_restarts_until_it_is_in_an_isr(
        tmp_path: Path) -> None:
    data = led_and_torn(tmp_path)

    core = started(data)
    try:
        assert core.recovery.recovery_cuts == {TP}
        assert stored_cuts(data) == {TP: 4}  # on disk before the broker registers
    finally:
        core.shutdown()  # no image yet: nothing hosted
    assert OffsetCheckpointFile(data / REPLICATION_OFFSET_CHECKPOINT).read() == {TP: 5}
    core = started(data)
    try:
        assert core.recovery.recovery_cuts == {TP}  # still reported
        feed_with(core, leader=2, isr=(2,), epoch=1)  # following, not yet in sync
        assert core.recovery.recovery_cuts == {TP} and stored_cuts(data) == {TP: 4}
        core.image.apply(PartitionRecord("t", 0, (1, 2), 2, 1, (2, 1), 2),
                         core.image.last_applied_offset + 1)
        core.reconcile()  # back in the ISR with a leader: healed
        assert core.recovery.recovery_cuts == set() and stored_cuts(data) == {}
    finally:
        core.shutdown()
    core = started(data)
    try:
        assert core.recovery.recovery_cuts == set()
    finally:
        core.shutdown()


# a broker process's start up to its log recovery, then SIGKILL: before BrokerCore
# saves its marks (storage.log_manager.LogManager.startup is that recovery)
RECOVER_AND_DIE = """
import os, signal, sys
from storage.log_manager import LogManager
LogManager(sys.argv[1]).startup()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_start_killed_between_its_cut_and_its_mark_still_reports_the_cut(
        tmp_path: Path) -> None:
    """Issue 30, item 11: killed after its recovery had cut the torn tail and before it
    had saved the mark, the broker came back with a log that recovered clean and no
    mark; its HW checkpoint (written every few seconds) lagged below the cut, so nothing
    told the controller, and it could lead with acknowledged records missing."""
    data = led_and_torn(tmp_path)
    OffsetCheckpointFile(data / REPLICATION_OFFSET_CHECKPOINT).write({TP: 3})  # it lags
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", RECOVER_AND_DIE, str(data)], cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)}, check=False,
                          timeout=60)
    assert done.returncode == -signal.SIGKILL
    assert next((data / "t-0").glob("*.log")).stat().st_size > 0
    core = started(data)  # its recovery has nothing left to cut
    try:
        assert core.recovery.recovery_cuts == {TP}
        assert stored_cuts(data) == {TP: 4}
        assert not (data / "t-0" / RECOVERY_CUT_MARKER).exists()  # the mark holds it now
    finally:
        core.shutdown()
    core = started(data)
    try:
        assert core.recovery.recovery_cuts == {TP}  # from the mark, until back in an ISR
    finally:
        core.shutdown()


def test_an_unreadable_mark_file_reports_every_log_as_cut(tmp_path: Path) -> None:
    data = hosted_once(tmp_path)
    (data / RECOVERY_CUT_CHECKPOINT).write_text("0\n7\n")  # a count with no lines
    core = started(data)
    try:
        assert core.recovery.recovery_cuts == {TP}  # the safe side: none leads while others may
        assert stored_cuts(data) == {TP: 0}  # rewritten readable
    finally:
        core.shutdown()


def test_a_mark_of_a_partition_moved_away_is_dropped(tmp_path: Path) -> None:
    data = hosted_once(tmp_path)
    OffsetCheckpointFile(data / RECOVERY_CUT_CHECKPOINT).write({TP: 0})
    core = started(data)
    try:
        assert core.recovery.recovery_cuts == {TP}
        feed = ImageFeed(core)
        feed.apply(RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001),
                   RegisterBrokerRecord(2, 1, "b", "127.0.0.1", 9002),
                   UnfenceBrokerRecord(1, 0), UnfenceBrokerRecord(2, 1),
                   TopicRecord("t", 7, 1, 1),
                   PartitionRecord("t", 0, (2,), 2, 1, (2,), 1))  # only broker 2 now
        assert core.recovery.recovery_cuts == set() and stored_cuts(data) == {}
    finally:
        core.shutdown()
