"""A broker's replica directories and the topic each belongs to (``partition.metadata``).

The decisions are :mod:`broker.metadata.replica_plan`'s (pure); this module applies them
to the disk for :class:`broker.core.BrokerCore`:

* :func:`open_replica_log` - the log to host a partition of a topic: the one on disk
  when its ``partition.metadata`` names that topic (or nothing: adopted), else - a topic
  of the same name deleted while this broker was away - a new, empty one (the old
  directory renamed ``-delete`` and removed first).  The file is (re)written when it
  does not hold the topic's label: a new log, an unlabelled one, or an old file of our
  int form once the topic has its id (the upgrade of old data dirs).
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

from broker.metadata.image import TopicInfo
from broker.metadata.replica_plan import (
    TopicLabel,
    log_of_other_topic,
    partition_metadata_label,
)
from clients.protocol.topics import TopicPartition, topic_id_str
from storage.log.log import Log
from storage.log_manager import LogManager
from storage.partition_metadata import read_topic_id, write_topic_id

__all__ = ["open_replica_log", "other_topic_on_disk", "relabel", "shown"]

log = logging.getLogger(__name__)


def shown(label: TopicLabel | None) -> str:
    """A ``partition.metadata`` id as people read it (Kafka's base64 for a UUID)."""
    return topic_id_str(label) if isinstance(label, bytes) else str(label)


def open_replica_log(log_manager: LogManager, key: TopicPartition,
                     topic: TopicInfo) -> tuple[Log, bool]:
    """The log to host ``key`` of ``topic``, and whether a log of another topic (a
    deleted incarnation of the name) was deleted for it."""
    log_ = log_manager.get_log(*key)
    found = None if log_ is None else read_topic_id(log_.dir)
    label = partition_metadata_label(topic)
    replaced = log_ is not None and log_of_other_topic(found, topic)
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


def relabel(log_dir: Path, label: TopicLabel) -> None:
    """Label a hosted replica's directory with its topic's (new) id."""
    write_topic_id(log_dir, label)


def other_topic_on_disk(log_dir: Path, hosted: TopicLabel) -> TopicLabel | None:
    """The id ``log_dir``'s ``partition.metadata`` holds when it is not ``hosted`` (the
    label of the topic this broker hosts there); None when it is (or names none)."""
    found = read_topic_id(log_dir)
    return None if found is None or found == hosted else found
