"""QuorumSnapshots: a quorum voter's snapshots of its committed metadata image (KIP-630),
as files beside its raft log; the replica's
:class:`~replication.raft.snapshot_store.SnapshotStore` (FetchSnapshot serves and installs
them).

Layout (Kafka's names)::

    <data_dir>/__cluster_metadata-0/<end offset, 20 digits>-<epoch, 10 digits>.checkpoint

A snapshot ``(end_offset, epoch)`` holds the metadata image after applying every entry
below ``end_offset`` (``MetadataImage.encode_snapshot``, the single controller's format:
a header with a CRC over the payload); ``epoch`` is the epoch of the entry at
``end_offset - 1`` (KIP-630's snapshot id).  A voter writes one only of a committed image
(every entry below ``end_offset`` below its high watermark).

Contract:

* :meth:`write` (the voter's own snapshot) and :meth:`install` (one fetched from the
  leader with FetchSnapshot) are durable on return: temp file, fsync, rename, fsync the
  directory.  Both keep the newest ``kept`` snapshots and delete the older ones.
  :meth:`install` first decodes the bytes and checks the image ends at the snapshot's
  end offset: else it is refused (False, nothing written, a warning).
* :meth:`size` / :meth:`read` serve a snapshot's bytes to FetchSnapshot (None: not held).
* :meth:`load_latest` returns the newest snapshot that is valid for the log: its file
  decodes (CRC), the image inside ends exactly at its end offset, it is not below the
  log start, and when the log holds the entry before its end offset, that entry has the
  snapshot's epoch.  A snapshot past the log end is valid (committed when written: the
  caller resets the log to start at it, as Kafka does).  A snapshot that fails a check
  is refused with a warning naming the file and the reason, and the next older one is
  tried (with none: ``None``).

Costs: write and install O(image) + two fsyncs; list O(files in the directory); read
O(bytes read) (one open + seek); load O(snapshot bytes) per snapshot tried.  Not
thread-safe: one owner (the controller's event loop).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

from broker.metadata.image import MetadataImage
from broker.metadata.records import MetadataRecordError
from replication.raft.messages import OffsetAndEpoch
from storage.file_io import atomic_write_bytes, fsync_dir

__all__ = ["SNAPSHOT_SUFFIX", "QuorumSnapshots", "snapshot_file_name"]

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".checkpoint"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


def snapshot_file_name(snapshot_id: OffsetAndEpoch) -> str:
    """``<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`` (Kafka's name)."""
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


class QuorumSnapshots:
    def __init__(self, directory: str | Path, *, kept: int = 2) -> None:
        if kept < 1:
            raise ValueError("kept must be >= 1")
        self.directory = Path(directory)
        self.kept = kept

    def list(self) -> list[tuple[OffsetAndEpoch, Path]]:
        """Every snapshot file, oldest first (by end offset)."""
        if not self.directory.is_dir():
            return []
        found = []
        for entry in self.directory.iterdir():
            match = _NAME.match(entry.name)
            if match:
                found.append((OffsetAndEpoch(int(match.group(1)), int(match.group(2))), entry))
        return sorted(found)

    def latest_id(self) -> OffsetAndEpoch | None:
        found = self.list()
        return found[-1][0] if found else None

    def write(self, image: MetadataImage, epoch: int) -> OffsetAndEpoch:
        """Write ``image`` (committed, written by ``epoch`` last) durably; drop old ones."""
        snapshot_id = OffsetAndEpoch(image.last_applied_offset + 1, epoch)
        if snapshot_id.end_offset < 1 or epoch < 0:
            raise ValueError(f"nothing to snapshot: {snapshot_id}")
        self._keep(snapshot_id, image.encode_snapshot())
        return snapshot_id

    def install(self, snapshot_id: OffsetAndEpoch, data: bytes) -> bool:
        """A snapshot fetched from the leader: kept durably if it decodes and ends at
        its end offset (else False, nothing written)."""
        try:
            image = MetadataImage.decode_snapshot(data)
        except MetadataRecordError as e:
            log.warning("metadata quorum: fetched snapshot %s refused: %s", snapshot_id, e)
            return False
        if image.last_applied_offset + 1 != snapshot_id.end_offset:
            log.warning("metadata quorum: fetched snapshot %s refused: its image ends at "
                        "offset %d", snapshot_id, image.last_applied_offset)
            return False
        self._keep(snapshot_id, data)
        return True

    def size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        try:
            return (self.directory / snapshot_file_name(snapshot_id)).stat().st_size
        except FileNotFoundError:
            return None

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int
             ) -> bytes | None:
        try:
            with open(self.directory / snapshot_file_name(snapshot_id), "rb") as f:
                f.seek(position)
                return f.read(max_bytes)
        except FileNotFoundError:
            return None

    def _keep(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.directory / snapshot_file_name(snapshot_id), data,
                           sync_dir=False)
        for _id, old in self.list()[:-self.kept]:
            old.unlink(missing_ok=True)
        fsync_dir(self.directory)

    def load_latest(self, log_start_offset: int, log_end_offset: int,
                    epoch_for_offset: Callable[[int], int]
                    ) -> tuple[OffsetAndEpoch, MetadataImage] | None:
        """The newest valid snapshot for a log holding ``[log_start_offset,
        log_end_offset)`` whose entry at offset ``o`` has epoch ``epoch_for_offset(o)``
        (see the module docstring)."""
        for snapshot_id, path in reversed(self.list()):
            reason = None
            last = snapshot_id.end_offset - 1
            if snapshot_id.end_offset < log_start_offset:
                reason = f"it ends below the log start {log_start_offset}"
            elif log_start_offset <= last < log_end_offset and \
                    epoch_for_offset(last) != snapshot_id.epoch:
                reason = f"the log's entry at offset {last} has epoch {epoch_for_offset(last)}"
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
