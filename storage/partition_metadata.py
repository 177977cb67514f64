"""``partition.metadata``: the topic id a partition directory belongs to.

A topic deleted and re-created under the same name while a broker was down leaves that
broker a directory ``<topic>-<n>`` of the *old* topic; its name alone cannot tell.  As in
Kafka (KIP-516), each partition directory of a broker in a cluster carries the id of its
topic::

    <data_dir>/<topic>-<partition>/partition.metadata
        version: 0
        topic_id: <the controller's topic id>

The broker writes it when it first hosts the partition and compares it before it adopts
a directory for a topic (a different id: the old topic's log is removed, the new topic
starts empty) and before it deletes one (a different id: left alone and reported).  A
missing file (a log written before this file existed, or a standalone broker) is adopted;
a file that cannot be parsed is reported and adopted too - deleting on a guess could lose
data.  Log recovery ignores the file (it is not a segment or an index).

Costs: one small read per partition the broker starts hosting; one fsynced write (temp
file, rename) the first time.  Thread-safety: the broker's main loop only.
"""

from __future__ import annotations

import logging
from pathlib import Path

from storage.file_io import atomic_write_text, read_small_file

__all__ = ["PARTITION_METADATA", "read_topic_id", "write_topic_id"]

log = logging.getLogger(__name__)

PARTITION_METADATA = "partition.metadata"
_MAX_BYTES = 1024


def read_topic_id(log_dir: Path) -> int | None:
    """The topic id recorded in ``log_dir``; None when there is none (or it is damaged,
    which is logged)."""
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
        return int(fields["topic_id"])
    except (UnicodeDecodeError, ValueError, KeyError) as exc:
        log.warning("%s is damaged (%s); treating the directory as unlabelled", path, exc)
        return None


def write_topic_id(log_dir: Path, topic_id: int) -> None:
    """Record ``topic_id`` in ``log_dir`` (durably: temp file, fsync, rename)."""
    atomic_write_text(log_dir / PARTITION_METADATA, f"version: 0\ntopic_id: {topic_id}\n")
