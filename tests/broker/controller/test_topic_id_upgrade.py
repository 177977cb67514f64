"""A metadata log written before topic ids, on disk: the controller that opens it gives
each topic an id once (``assign_topic_id`` records appended to the log), and every later
open - a restarted controller, or a broker replaying the log - reads the same ids."""

from __future__ import annotations

from pathlib import Path

from broker.controller.config import ControllerConfig
from broker.controller.log import ControllerLog
from broker.controller.state import ControllerState
from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    AssignTopicIdRecord,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.topics import ZERO_UUID
from timer.clock import ManualClock

OLD_LOG: list[MetadataRecord] = [  # as a controller before topic ids wrote it
    RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001), UnfenceBrokerRecord(1, 0),
    TopicRecord("a", 2, 1, 1), PartitionRecord("a", 0, (1,), 1, 2, (1,), 0),
    TopicRecord("b", 4, 1, 1), PartitionRecord("b", 0, (1,), 1, 4, (1,), 0)]


def _run_controller(data_dir: Path) -> dict[str, bytes]:
    """Open the log as the controller does, tick once, append what it emits; the ids."""
    store = ControllerLog(data_dir, snapshot_interval_records=4)
    try:
        state = ControllerState(ControllerConfig().validate(), ManualClock(1_000), store.open())
        store.append(state.tick(), state.image)
        return {name: t.topic_uuid for name, t in state.image.topics.items()}
    finally:
        store.close()


def test_an_old_log_on_disk_is_upgraded_once_and_reads_the_same_ids_after(
        tmp_path: Path) -> None:
    store = ControllerLog(tmp_path, snapshot_interval_records=4)  # a snapshot of the old
    image = MetadataImage()                                       # image too
    store.open()
    for offset, record in enumerate(OLD_LOG):
        image.apply(record, offset)
    store.append(OLD_LOG, image)
    assert store.snapshot_loaded is None and store.last_snapshot_offset == 5
    store.close()

    first = _run_controller(tmp_path)
    assert set(first) == {"a", "b"} and ZERO_UUID not in first.values()
    assert len(set(first.values())) == 2
    assert _run_controller(tmp_path) == first  # a restarted controller: the same ids

    store = ControllerLog(tmp_path)
    try:
        store.open()
        written = [r for _, r in store.read_records(0) if isinstance(r, AssignTopicIdRecord)]
    finally:
        store.close()
    assert {r.name: r.topic_uuid for r in written} == first  # once each, in the log
