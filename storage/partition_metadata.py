"""``partition.metadata``: the topic id a partition directory belongs to.

A topic deleted and re-created under the same name while a broker was down leaves that
broker a directory ``<topic>-<n>`` of the *old* topic; its name alone cannot tell.  As in
Kafka (KIP-516), each partition directory of a broker in a cluster carries the id of its
topic, in Kafka's file format::

    <data_dir>/<topic>-<partition>/partition.metadata
        version: 0
        topic_id: <the topic's id: 16 bytes in URL-safe base64, no padding>

Files written before topic ids were UUIDs hold our old content instead: ``topic_id:``
followed by a decimal integer, the metadata offset of its topic record (the topic's
identity before topic ids; ``TopicInfo.created_offset`` now, used only to match these).
:func:`read_topic_id` returns either form (bytes: a Kafka id; int: an old file); the
broker compares it with the topic it is about to host
(:func:`broker.metadata.replica_plan.log_of_other_topic`) and rewrites an old file with
the topic's UUID once that topic has one (:func:`write_topic_id`).

The broker writes it when it first hosts the partition and compares it before it adopts
a directory for a topic (a different id: the old topic's log is removed, the new topic
starts empty) and before it deletes one (a different id: left alone and reported).  A
missing file (a log written before this file existed, or a standalone broker) is adopted;
a file that cannot be parsed is reported and adopted too - deleting on a guess could lose
data.  Log recovery ignores the file (it is not a segment or an index).

Costs: one small read per partition the broker starts hosting; one fsynced write (temp
file, rename) the first time (and once more for an old file).  Thread-safety: the
broker's main loop only.
"""

from __future__ import annotations

import logging
from pathlib import Path

from clients.protocol.topics import ZERO_UUID, parse_topic_id, topic_id_str
from storage.file_io import atomic_write_text, read_small_file

__all__ = ["PARTITION_METADATA", "read_topic_id", "write_topic_id"]

log = logging.getLogger(__name__)

PARTITION_METADATA = "partition.metadata"
_MAX_BYTES = 1024


def read_topic_id(log_dir: Path) -> bytes | int | None:
    """The topic id recorded in ``log_dir``: 16 bytes (Kafka's form), an int (a file of
    our old form: the offset of its topic's record), or None when there is none (or it
    is damaged, which is logged)."""
    path = log_dir / PARTITION_METADATA
    try:
        raw = read_small_file(path, _MAX_BYTES)
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None
    if raw is None:
        return None
    fields: dict[str, str] = {}
    try:
        for line in raw.decode("utf-8").splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if len(raw) > _MAX_BYTES or fields.get("version") != "0":
            raise ValueError("not a version 0 partition.metadata")
        text = fields["topic_id"]
        if text.isdigit() and len(text) < 22:  # an int64 has at most 19 digits
            return int(text)
        topic_id = parse_topic_id(text)
        if topic_id == ZERO_UUID:
            raise ValueError("the zero topic id")
        return topic_id
    except (UnicodeDecodeError, ValueError, KeyError) as exc:
        log.warning("%s is damaged (%s); treating the directory as unlabelled", path, exc)
        return None


def write_topic_id(log_dir: Path, topic_id: bytes | int) -> None:
    """Record ``topic_id`` (16 bytes; an int only for a topic of a log not yet upgraded
    to topic ids) in ``log_dir`` (durably: temp file, fsync, rename)."""
    text = topic_id_str(topic_id) if isinstance(topic_id, bytes) else str(topic_id)
    atomic_write_text(log_dir / PARTITION_METADATA, f"version: 0\ntopic_id: {text}\n")
