"""A reassignment in flight survives a controller restart: it is the partition's own
record in the metadata log (``adding_replicas`` / ``removing_replicas``, Kafka's
PartitionRecord fields), so a controller rebuilt from the log (records or snapshot)
lists it, completes it once the target is in sync, and cancels it back to the original
replicas; elections and ISR changes in between carry it over; a log written before the
fields existed reads as nothing in flight."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from broker.controller.log import ControllerLog
from broker.controller.results import TopicSpec
from broker.controller.state import ControllerState
from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    MetadataRecordError,
    PartitionRecord,
    decode_record,
    encode_record,
)
from clients.protocol.errors import ErrorCode
from tests.broker.controller.test_reassignments import cluster_with, reassign
from tests.broker.controller.test_state import Cluster


def restart(c: Cluster) -> None:
    """A new controller: a fresh core over the image replayed from ``c``'s log."""
    c.state = ControllerState(c.config, c.clock, c.replayed())


def test_a_restarted_controller_lists_and_completes_the_reassignment() -> None:
    c = cluster_with([1, 2])
    reassign(c, [2, 3])
    started = c.log[-1]
    assert isinstance(started, PartitionRecord)
    assert (started.replicas, started.adding_replicas, started.removing_replicas) == (
        (2, 3, 1), (3,), (1,))
    restart(c)
    flying = c.state.reassignments.in_flight
    assert list(flying) == [("t", 0)] and flying[("t", 0)].target == (2, 3)
    c.tick()
    assert c.part("t").replicas == (2, 3, 1)  # 3 is not in sync: nothing leaves
    c.alter(1, "t", [1, 2, 3])  # 3 joins the ISR: the new controller completes it
    done = c.part("t")
    assert (done.replicas, done.leader, done.isr) == ((2, 3), 2, (2, 3))
    assert not done.is_reassigning and c.state.reassignments.in_flight == {}
    assert c.replayed().partition("t", 0) == done


def test_cancel_after_a_restart_returns_to_the_original_replicas() -> None:
    c = cluster_with([1, 2])
    reassign(c, [3, 4])
    c.alter(1, "t", [1, 2, 3])  # 3 joined; 4 has not
    restart(c)
    assert c.state.reassignments.in_flight[("t", 0)].original == (1, 2)
    assert reassign(c, None).error == ErrorCode.NONE
    back = c.part("t")  # 1 and 2 are in sync: done at once, 3 and 4 leave
    assert (back.replicas, back.leader, back.isr) == ((1, 2), 1, (1, 2))
    assert not back.is_reassigning
    restart(c)
    assert reassign(c, None).error == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_a_replaced_target_keeps_the_original_and_elections_carry_it_over() -> None:
    c = cluster_with([1, 2])
    reassign(c, [3, 4])
    c.alter(1, "t", [1, 2, 4])
    reassign(c, [2, 3])  # 4 joined for the old target and leaves with it: both lists
    s = c.part("t")
    assert (s.replicas, s.adding_replicas, s.removing_replicas) == ((2, 3, 4, 1), (3, 4),
                                                                    (4, 1))
    c.heartbeat(1, want_fence=True)  # the leader goes: an election rewrites the record
    moved = c.part("t")
    assert moved.leader == 2 and moved.isr == (2, 4)
    assert (moved.adding_replicas, moved.removing_replicas) == ((3, 4), (4, 1))
    restart(c)
    assert c.state.reassignments.in_flight[("t", 0)].target == (2, 3)
    c.alter(2, "t", [2, 3, 4])
    done = c.part("t")
    assert (done.replicas, done.leader, done.isr) == ((2, 3), 2, (2, 3))


def test_snapshots_keep_it_and_a_log_without_the_fields_reads_as_nothing_in_flight(
        tmp_path: Path) -> None:
    c = cluster_with([1, 2])
    reassign(c, [2, 3])
    store = ControllerLog(tmp_path, snapshot_interval_records=1)
    store.open()
    store.append(c.log, c.state.image)  # written with a snapshot at its end
    store.close()
    store = ControllerLog(tmp_path)
    image = store.open()
    store.close()
    assert store.snapshot_loaded is not None
    assert image == c.state.image
    assert [(t, i) for t, i, _ in image.reassigning()] == [("t", 0)]
    decoded = MetadataImage.decode_snapshot(c.state.image.encode_snapshot())
    assert decoded.partition("t", 0) == c.part("t")
    # a partition record as written before the fields existed: nothing in flight
    s = c.part("t")
    old = msgpack.packb({"type": "partition", "topic": "t", "partition": 0,
                         "replicas": [2, 3, 1], "leader": 1, "leader_epoch": s.leader_epoch,
                         "isr": [1, 2], "partition_epoch": s.partition_epoch + 1,
                         "unclean_elected": False}, use_bin_type=True)
    record = decode_record(old)
    assert isinstance(record, PartitionRecord) and record.adding_replicas == ()
    assert encode_record(record) == old  # written only when set: the bytes are unchanged
    image = c.replayed()
    image.apply(record, image.last_applied_offset + 1)
    assert list(image.reassigning()) == []


@pytest.mark.parametrize(("adding", "removing"), [((3,), (3, 3)), ((9,), ()),
                                                  ((1, 2, 3), ()), ((), (1, 2, 3))])
def test_bad_adding_or_removing_lists_are_refused(adding: tuple[int, ...],
                                                  removing: tuple[int, ...]) -> None:
    with pytest.raises(MetadataRecordError):
        PartitionRecord("t", 0, (1, 2, 3), 1, 0, (1,), 0, False, adding, removing)


def test_a_deleted_topic_leaves_nothing_in_flight() -> None:
    c = cluster_with([1, 2])
    reassign(c, [3, 4])
    c.keep(c.state.delete_topics(["t"])[1])
    assert c.state.reassignments.in_flight == {} and list(c.replayed().reassigning()) == []
    c.keep(c.state.create_topics([TopicSpec("t", assignments={0: [1, 2]})])[1])
    c.tick()
    assert c.state.reassignments.in_flight == {} and c.part("t").replicas == (1, 2)
