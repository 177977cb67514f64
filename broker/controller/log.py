"""The controller's durable state: the metadata log and its snapshots in ``data_dir``.

Layout::

    <data_dir>/.lock                                  flock: one controller per directory
    <data_dir>/__cluster_metadata-0/                  a storage.Log (segments + indexes)
    <data_dir>/snapshot-<20-digit offset>.msgpack     MetadataImage.encode_snapshot()
                                                      as of that offset (last 2 kept)

Every metadata record is one record of a Kafka v2 record batch (key null, value = the
msgpack map of :mod:`broker.metadata.records`, timestamp = wall clock ms); a call to
:meth:`ControllerLog.append` writes its records as batches of at most
``max_batch_records`` with a single write and fsyncs them before it returns
(``flush_messages=1``).  Record offsets are the metadata offsets: the log's end offset
always equals ``image.last_applied_offset + 1``.

Start (:meth:`open`): recover the log (a torn tail from a crash is cut at the last valid
batch), load the newest snapshot that is valid and not beyond the log end (a corrupt one
is skipped in favour of the older one, and with none the whole log is replayed: the log
is never truncated at its head, so snapshots only save replay time), then apply the
records after it.

Costs: append O(records) + one fsync; snapshot O(image) every ``snapshot_interval_records``
records; open O(records after the snapshot).  Not thread-safe: one owner (the
controller's event loop).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path

from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    METADATA_PARTITION,
    METADATA_TOPIC,
    MetadataRecord,
    MetadataRecordError,
    decode_record_batches,
    encode_record,
)
from clients.records.record import build_batch
from storage.config import LogConfig
from storage.file_io import atomic_write_bytes, fsync_dir
from storage.lock import DataDirLock
from storage.log.log import Log

log = logging.getLogger(__name__)

SNAPSHOTS_KEPT = 2
_SNAPSHOT = re.compile(r"^snapshot-(\d{20})\.msgpack$")
METADATA_LOG_CONFIG = LogConfig(flush_messages=1, max_message_bytes=16 * 1024 * 1024)


class ControllerLog:
    def __init__(self, data_dir: str | Path, *, snapshot_interval_records: int = 1000,
                 max_batch_records: int = 1000) -> None:
        if snapshot_interval_records < 1 or max_batch_records < 1:
            raise ValueError("snapshot_interval_records and max_batch_records must be >= 1")
        self.data_dir = Path(data_dir)
        self.snapshot_interval_records = snapshot_interval_records
        self.max_batch_records = max_batch_records
        self._lock = DataDirLock(self.data_dir)
        self._log: Log | None = None
        self.last_snapshot_offset = -1
        self.snapshot_loaded: Path | None = None

    @property
    def log(self) -> Log:
        if self._log is None:
            raise RuntimeError("the controller log is not open")
        return self._log

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    # -- start --------------------------------------------------------------------------

    def open(self) -> MetadataImage:
        """Lock the directory, recover the log, return the image it holds."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        snapshots = self._snapshots()
        image, recovery_point = MetadataImage(), 0
        self._log = Log.open(self.data_dir / f"{METADATA_TOPIC}-{METADATA_PARTITION}",
                             METADATA_LOG_CONFIG, recovery_point=0)
        leo = self._log.log_end_offset
        for offset, path in reversed(snapshots):
            if offset >= leo:
                log.warning("ignoring snapshot %s beyond the log end offset %d", path, leo)
                continue
            try:
                image = MetadataImage.decode_snapshot(path.read_bytes())
            except (OSError, MetadataRecordError) as e:
                log.warning("ignoring unreadable snapshot %s: %s", path, e)
                continue
            self.snapshot_loaded, recovery_point = path, offset + 1
            break
        self.last_snapshot_offset = image.last_applied_offset
        for offset, record in self.read_records(recovery_point):
            image.apply(record, offset)
        image.check_invariants()
        if image.last_applied_offset != leo - 1:
            raise MetadataRecordError(
                f"metadata log ends at {leo} but its records end at {image.last_applied_offset}")
        return image

    def read_records(self, start_offset: int) -> list[tuple[int, MetadataRecord]]:
        """Every record from ``start_offset`` on, decoded (startup and tests)."""
        out = []
        for _header, data in self.log.batches(start_offset):
            out.extend(decode_record_batches(data, start_offset))
        return out

    # -- running ------------------------------------------------------------------------

    def append(self, records: Sequence[MetadataRecord], image: MetadataImage) -> None:
        """Write and fsync ``records`` (already applied to ``image``); maybe snapshot."""
        if not records:
            return
        first = self.log.log_end_offset
        if first + len(records) != image.last_applied_offset + 1:
            raise MetadataRecordError(
                f"{len(records)} records from offset {first} do not end at the image's "
                f"offset {image.last_applied_offset}")
        now_ms = time.time_ns() // 1_000_000
        step = self.max_batch_records
        batches = b"".join(
            build_batch([(None, encode_record(r), now_ms, ()) for r in records[i : i + step]])
            for i in range(0, len(records), step))
        self.log.append_as_leader(batches, leader_epoch=0)  # flush_messages=1: fsync'd
        if image.last_applied_offset - self.last_snapshot_offset >= self.snapshot_interval_records:
            self.write_snapshot(image)

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from ``offset`` (at least one if any), as bytes."""
        return self.log.read(offset, max_bytes).read_bytes()

    def write_snapshot(self, image: MetadataImage) -> Path:
        offset = image.last_applied_offset
        path = self.data_dir / f"snapshot-{offset:020d}.msgpack"
        atomic_write_bytes(path, image.encode_snapshot(), sync_dir=False)
        for _offset, old in self._snapshots()[:-SNAPSHOTS_KEPT]:
            old.unlink(missing_ok=True)
        fsync_dir(self.data_dir)
        self.last_snapshot_offset = offset
        return path

    def _snapshots(self) -> list[tuple[int, Path]]:
        found = []
        for entry in self.data_dir.iterdir():
            match = _SNAPSHOT.match(entry.name)
            if match:
                found.append((int(match.group(1)), entry))
        return sorted(found)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        self._lock.release()
