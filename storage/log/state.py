"""The in-memory state of one partition log: its directory, segment list and offsets.

:class:`LogState` is the base that :class:`storage.log.Log` is built from (with
:class:`storage.log.reader.LogReader` and :class:`storage.log.retention.LogRetention`): it
holds the fields every part shares and the read-only views of them.

Offsets: ``log_start_offset`` <= every readable offset < ``log_end_offset`` (LEO, the next
offset to assign).  Everything below ``recovery_point`` has been fsync'd.  ``segments`` is
sorted by base offset and ``_bases`` mirrors their base offsets (for bisect); the last
segment is the active one.  The directory name ``<topic>-<partition>`` gives
``topic_partition`` (``(name, -1)`` if it does not parse).

Costs: every view is O(1) except ``size_in_bytes`` (O(segments)).

Concurrency: **not thread-safe**; one thread (the broker's event loop) owns a log.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from storage.config import LogConfig
from storage.errors import StorageError
from storage.log.recovery import RecoveryReport
from storage.segment import Segment

__all__ = ["LogState", "wall_clock_ms"]

_TOPIC_PARTITION = re.compile(r"^(.+)-(\d+)$")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class LogState:
    """Fields and views shared by the parts of :class:`storage.log.Log`."""

    def __init__(self, directory: Path, config: LogConfig, clock_ms: Callable[[], int]) -> None:
        self.dir = directory
        self.config = config
        self._clock_ms = clock_ms
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._recovery_point = 0
        self._unflushed_messages = 0
        self._first_unflushed_ms: int | None = None
        self._roll_flush_offset = 0  # a roll asks maybe_flush() to fsync below this
        self._dir_dirty = False
        self._closed = False
        self._file_ids: dict[Segment, tuple[int, int]] = {}  # (st_dev, st_ino) by segment
        self.recovery_report = RecoveryReport(had_clean_shutdown=True)
        self.topic_partition = _parse_topic_partition(directory.name)

    # -- state -------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.dir} is closed")


def _parse_topic_partition(name: str) -> tuple[str, int]:
    """``"<topic>-<partition>"`` -> (topic, partition); (name, -1) if it does not parse."""
    match = _TOPIC_PARTITION.match(name)
    if match is None:
        return name, -1
    return match.group(1), int(match.group(2))
