"""Names in a broker data directory: log directories, deletions, the shutdown marker.

The names this module defines (the whole layout, checkpoints included, is in
:mod:`storage.log_manager`)::

    <data_dir>/
      .kafka_cleanshutdown               CLEAN_SHUTDOWN_MARKER: empty file, present only
                                         between a clean shutdown and the next startup
      <topic>-<partition>/               log_dir_name(topic, partition): one Log
      <topic>-<partition>.<uuid>-delete/ DELETE_SUFFIX: a deleted log being removed

Topic names may contain ``-``, so a directory name is split on its last ``-``
(:func:`parse_log_dir_name`); a name that would not round-trip (``t-01``) or an illegal
topic name is not a log directory.  :class:`StartupReport` is what the manager's startup
found in the directory (logs loaded and recovered, deletions finished, entries ignored).

:func:`scan_log_dirs` is startup's walk of the directory: it finishes interrupted
deletions and lists the log directories to open.

Costs: O(len(name)) per name; the scan O(entries) plus the removals.  The name functions
and value types are pure (thread-safe); the scan mutates the directory and must run on
the one thread running startup, as must whoever fills a report.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clients.protocol.topics import TopicPartition, topic_name_error
from storage.file_io import fsync_dir

__all__ = [
    "CLEAN_SHUTDOWN_MARKER",
    "DELETE_SUFFIX",
    "StartupReport",
    "log_dir_name",
    "parse_log_dir_name",
    "scan_log_dirs",
]

CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
DELETE_SUFFIX = "-delete"


def log_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_log_dir_name(name: str) -> TopicPartition | None:
    """``"<topic>-<partition>"`` -> ``(topic, partition)``; None if not a log directory."""
    topic, sep, partition_s = name.rpartition("-")
    if not sep or not partition_s.isascii() or not partition_s.isdigit():
        return None
    if partition_s != str(int(partition_s)):  # "t-01" would not round-trip to its dir
        return None
    if topic_name_error(topic) is not None:
        return None
    return TopicPartition(topic, int(partition_s))


@dataclass
class StartupReport:
    """What :meth:`storage.log_manager.LogManager.startup` found and did."""

    had_clean_shutdown: bool
    logs_loaded: int = 0
    load_ms: float = 0.0
    recovered: dict[TopicPartition, Any] = field(default_factory=dict)  # Log.recovery_report
    finished_deletes: list[str] = field(default_factory=list)
    ignored_entries: list[str] = field(default_factory=list)


def scan_log_dirs(data_dir: Path, report: StartupReport) -> list[tuple[TopicPartition, Path]]:
    """The log directories of ``data_dir`` to load, sorted by name.  Finishes deletions
    (``*-delete`` directories are removed, then the directory fsync'd) and records them
    and every ignored entry in ``report``.  Cost: O(entries) + the removals."""
    to_load: list[tuple[TopicPartition, Path]] = []
    for entry in sorted(os.scandir(data_dir), key=lambda e: e.name):
        if not entry.is_dir(follow_symlinks=False):
            continue
        if entry.name.endswith(DELETE_SUFFIX):
            shutil.rmtree(entry.path)
            report.finished_deletes.append(entry.name)
            continue
        tp = parse_log_dir_name(entry.name)
        if tp is None:
            report.ignored_entries.append(entry.name)
            continue
        to_load.append((tp, Path(entry.path)))
    if report.finished_deletes:
        fsync_dir(data_dir)
    return to_load
