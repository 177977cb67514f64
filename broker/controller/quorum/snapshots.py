"""QuorumSnapshots: a quorum voter's snapshots of its committed metadata image (KIP-630's
local snapshots), as files beside its raft log.

Layout (Kafka's names)::

    <data_dir>/__cluster_metadata-0/<end offset, 20 digits>-<epoch, 10 digits>.checkpoint

A snapshot ``(end_offset, epoch)`` holds the metadata image after applying every entry
below ``end_offset`` (``MetadataImage.encode_snapshot``, the single controller's format:
a header with a CRC over the payload); ``epoch`` is the epoch of the entry at
``end_offset - 1`` (KIP-630's snapshot id).  A voter writes one only of a committed image
(every entry below ``end_offset`` below its high watermark).

Contract:

* :meth:`write` is durable on return: temp file, fsync, rename, fsync the directory.  It
  keeps the newest ``kept`` snapshots and deletes the older ones.
* :meth:`load_latest` returns the newest snapshot that is valid for the given log: its
  file decodes (CRC), the image inside ends exactly at its end offset, the end offset is
  not past the log end and the log's entry before it has the snapshot's epoch.  A
  snapshot that fails a check is refused with a warning naming the file and the reason,
  and the next older one is tried (with none: ``None``, the whole log is replayed).

The log is not cut at its head in this version: snapshots only save replay time (a
follower behind a log start would need FetchSnapshot, not implemented: docs/quorum.md).

Costs: write O(image) + two fsyncs; list O(files in the directory); load O(snapshot
bytes) per snapshot tried.  Not thread-safe: one owner (the controller's event loop).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.metadata.image import MetadataImage
from broker.metadata.records import MetadataRecordError
from storage.file_io import atomic_write_bytes, fsync_dir

__all__ = ["SNAPSHOT_SUFFIX", "QuorumSnapshots", "SnapshotId"]

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".checkpoint"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """KIP-630's snapshot id: the image holds every entry below ``end_offset``;
    ``epoch`` wrote the entry at ``end_offset - 1``."""

    end_offset: int
    epoch: int

    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SNAPSHOT_SUFFIX}"


class QuorumSnapshots:
    def __init__(self, directory: str | Path, *, kept: int = 2) -> None:
        if kept < 1:
            raise ValueError("kept must be >= 1")
        self.directory = Path(directory)
        self.kept = kept

    def list(self) -> list[tuple[SnapshotId, Path]]:
        """Every snapshot file, oldest first (by end offset)."""
        if not self.directory.is_dir():
            return []
        found = []
        for entry in self.directory.iterdir():
            match = _NAME.match(entry.name)
            if match:
                found.append((SnapshotId(int(match.group(1)), int(match.group(2))), entry))
        return sorted(found)

    def latest_id(self) -> SnapshotId | None:
        found = self.list()
        return found[-1][0] if found else None

    def write(self, image: MetadataImage, epoch: int) -> SnapshotId:
        """Write ``image`` (committed, written by ``epoch`` last) durably; drop old ones."""
        snapshot_id = SnapshotId(image.last_applied_offset + 1, epoch)
        if snapshot_id.end_offset < 1 or epoch < 0:
            raise ValueError(f"nothing to snapshot: {snapshot_id}")
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.directory / snapshot_id.file_name(), image.encode_snapshot(),
                           sync_dir=False)
        for _id, old in self.list()[:-self.kept]:
            old.unlink(missing_ok=True)
        fsync_dir(self.directory)
        return snapshot_id

    def load_latest(self, log_end_offset: int, epoch_for_offset: Callable[[int], int]
                    ) -> tuple[SnapshotId, MetadataImage] | None:
        """The newest valid snapshot for a log ending at ``log_end_offset`` whose entry
        at offset ``o`` has epoch ``epoch_for_offset(o)`` (see the module docstring)."""
        for snapshot_id, path in reversed(self.list()):
            reason = None
            if snapshot_id.end_offset > log_end_offset:
                reason = f"it ends past the log end {log_end_offset}"
            elif epoch_for_offset(snapshot_id.end_offset - 1) != snapshot_id.epoch:
                reason = (f"the log's entry at offset {snapshot_id.end_offset - 1} has epoch "
                          f"{epoch_for_offset(snapshot_id.end_offset - 1)}")
            else:
                try:
                    image = MetadataImage.decode_snapshot(path.read_bytes())
                except (OSError, MetadataRecordError) as e:
                    reason = str(e)
                else:
                    if image.last_applied_offset + 1 == snapshot_id.end_offset:
                        return snapshot_id, image
                    reason = f"its image ends at offset {image.last_applied_offset}"
            log.warning("metadata quorum: snapshot %s refused: %s", path, reason)
        return None
