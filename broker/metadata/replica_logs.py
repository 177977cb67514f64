"""What a starting broker tells the controller about each log it holds.

The controller's safe election (:mod:`broker.controller.state`) must not hand a
partition to a replica whose log recovery cut (a torn tail, a bad batch, or a log that
now ends below the high watermark it had checkpointed) while another replica may hold
more.  So a broker registers with one entry per log on its disk, in the
``replica_logs`` tagged field of BrokerRegistration
(:mod:`clients.protocol.messages.controller`)::

    topic_name, topic_id (partition.metadata of our old form: the offset of its topic's
    record, -1 unknown), partition_index,
    last_leader_epoch (of the last batch; -1 empty), log_end_offset, recovery_cut,
    topic_uuid (partition.metadata in Kafka's form; the zero UUID unknown)

A log with a damaged range that recovery kept in place (``Segment.damage``, being repaired
from another replica) is reported with its whole log end and ``recovery_cut`` set (the
broker lists it among its recovery cuts): the controller prefers an uncut in-sync
replica, and among cut ones the longest log, which may be this one.  Choice, found by
the simulation (rot seed 4504 with parked follower fetches): reporting the log as if it
ended where the damage starts handed the partition to a replica that lacked the
committed records this one held after the range, and they were lost; with the whole
log end it leads, serves around the range, and resigns to repair it once another
replica is in sync (a follower that needs the range from it waits; nothing is lost).

Format choice: the whole list at every registration (not only the cut logs): the
controller needs the other replicas' log ends to pick the longest one.  Size: about 30
bytes per log, bounded by the logs on disk.

Costs: O(logs); one read of the last batch header per log (an index lookup).
Thread-safety: the broker's main loop (reads the logs).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from clients.protocol.topics import ZERO_UUID, TopicPartition
from storage.log.log import Log
from storage.partition_metadata import read_topic_id

__all__ = ["last_leader_epoch", "replica_log_reports"]


def last_leader_epoch(log: Log, end_offset: int | None = None) -> int:
    """The leader epoch of the log's last batch below ``end_offset`` (default: the log
    end offset; -1 for none)."""
    end = log.log_end_offset if end_offset is None else end_offset
    if end <= log.log_start_offset:
        return -1
    last = -1
    for header, _ in log.batches(end - 1):
        if header.base_offset >= end:
            break
        last = header.partition_leader_epoch
    return last


def replica_log_reports(logs: Mapping[TopicPartition, Log],
                        recovery_cuts: Collection[TopicPartition]) -> list[dict[str, Any]]:
    """The ``replica_logs`` entries of a BrokerRegistration for ``logs``; a partition in
    ``recovery_cuts`` is reported with ``recovery_cut`` set."""
    out = []
    for key, log in sorted(logs.items()):
        topic_id = read_topic_id(log.dir)
        out.append({"topic_name": key.topic, "partition_index": key.partition,
                    "topic_id": topic_id if isinstance(topic_id, int) else -1,
                    "topic_uuid": topic_id if isinstance(topic_id, bytes) else ZERO_UUID,
                    "last_leader_epoch": last_leader_epoch(log),
                    "log_end_offset": log.log_end_offset,
                    "recovery_cut": key in recovery_cuts})
    return out
