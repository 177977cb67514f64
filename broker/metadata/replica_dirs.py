"""A broker's replica directories and the topic each belongs to (``partition.metadata``).

The decisions are :mod:`broker.metadata.replica_plan`'s (pure); this module applies them
to the disk for :class:`broker.core.BrokerCore`:

* :func:`open_replica_log` - the log to host a partition of a topic: the one on disk
  when its ``partition.metadata`` names that topic (or nothing: adopted), else - a topic
  of the same name deleted while this broker was away - a new, empty one.  The file is
  (re)written when it does not hold the topic's label: a new log, an unlabelled one, or
  an old file of our int form once the topic has its id (the upgrade of old data dirs).
* :func:`relabel` - a hosted replica whose topic just got its id (an old metadata log
  upgraded by the controller while this broker ran): its file gets the id.
* :func:`other_topic_on_disk` - before a hosted replica's directory is deleted: the id
  of another topic its file names, if any (then it is left alone and reported).

Costs: one small read per call, one fsynced write (temp file, rename) when the label
changes.  Thread-safety: the broker's main loop only (it owns the logs).
"""

from __future__ import annotations

import logging
from pathlib import Path

from broker.metadata.replica_plan import log_of_other_topic, partition_metadata_label
from clients.protocol.topics import TopicPartition, topic_id_str
from storage.log.log import Log
from storage.log_manager import LogManager
from storage.partition_metadata import read_topic_id, write_topic_id

__all__ = ["open_replica_log", "other_topic_on_disk", "relabel", "shown"]

log = logging.getLogger(__name__)


def shown(topic_id: bytes | int | None) -> str:
    """A ``partition.metadata`` id as people read it (Kafka's base64 for a UUID)."""
    return topic_id_str(topic_id) if isinstance(topic_id, bytes) else str(topic_id)


def open_replica_log(log_manager: LogManager, key: TopicPartition, topic_id: int,
                     topic_uuid: bytes) -> tuple[Log, bool]:
    """The log to host ``key`` of the topic of incarnation ``topic_id`` and id
    ``topic_uuid``, and whether a log of another topic was deleted for it."""
    log_ = log_manager.get_log(*key)
    found = None if log_ is None else read_topic_id(log_.dir)
    label = partition_metadata_label(topic_id, topic_uuid)
    replaced = log_ is not None and log_of_other_topic(found, topic_id, topic_uuid)
    if replaced:
        log.warning("%s-%d: the log on disk belongs to topic %s, deleted since; "
                    "removing it, topic %s starts empty", *key, shown(found), shown(label))
        log_manager.delete_log(*key)
        log_ = None
    if log_ is None:
        log_ = log_manager.create_log(*key)
    if found != label:
        write_topic_id(log_.dir, label)
    return log_, replaced


def relabel(log_dir: Path, topic_id: int, topic_uuid: bytes) -> None:
    """Label a hosted replica's directory with its topic's (new) id."""
    write_topic_id(log_dir, partition_metadata_label(topic_id, topic_uuid))


def other_topic_on_disk(log_dir: Path, topic_id: int, topic_uuid: bytes) -> bytes | int | None:
    """The id ``log_dir``'s ``partition.metadata`` holds when it is not the topic's of
    incarnation ``topic_id`` and id ``topic_uuid``; None when it is that topic's (or
    names none)."""
    found = read_topic_id(log_dir)
    return found if log_of_other_topic(found, topic_id, topic_uuid) else None
