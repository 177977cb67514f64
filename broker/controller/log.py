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

Start (:meth:`open`): check the log read-only first - an invalid batch anywhere but at
its tail (a flipped byte, a cut-off older segment: valid records follow it) stops the
controller with :class:`MetadataLogDamagedError` naming the file and position, because
recovery would cut the log there and silently forget every later record (topics would
vanish while their data stays on the brokers).  Then recover the log (a torn tail from a
crash - the last, unacknowledged write - is cut at the last valid batch, with a
warning), load the newest snapshot that is valid and not beyond the log end (a corrupt
one is skipped in favour of the older one, and with none the whole log is replayed: the
log is never truncated at its head, so snapshots only save replay time), then apply the
records after it.  A snapshot *beyond* the log end means the log lost records it once
had (emptied, or its last segments deleted): also :class:`MetadataLogDamagedError`.
The operator restores the directory from a backup (or moves it away to start a new,
empty cluster); nothing is dropped silently.

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
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.records.record import build_batch
from storage.config import LogConfig
from storage.file_io import atomic_write_bytes, fsync_dir
from storage.lock import DataDirLock
from storage.log.log import Log
from storage.records.scan import scan_segment

log = logging.getLogger(__name__)

SNAPSHOTS_KEPT = 2


class MetadataLogDamagedError(MiniKafkaError):
    """The metadata log is damaged where a crash cannot have left it: starting would
    forget records (topics, partitions, brokers) it once held."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


_SNAPSHOT = re.compile(r"^snapshot-(\d{20})\.msgpack$")
_SEGMENT = re.compile(r"^\d{20}\.log$")
METADATA_LOG_CONFIG = LogConfig(flush_messages=1, max_message_bytes=16 * 1024 * 1024)


def check_damage_is_only_a_torn_tail(directory: Path) -> None:
    """Scan every segment of the metadata log read-only; raise
    :class:`MetadataLogDamagedError` for an invalid batch that valid data follows (more
    bytes after it in its segment, or later segments).  Every append is fsync'd before it
    is acknowledged, so a crash can only tear the last write: the end of the last
    segment.  Cost: one read and CRC pass of the log (it is small: metadata only)."""
    if not directory.is_dir():
        return
    segments = sorted(p for p in directory.iterdir() if _SEGMENT.match(p.name))
    expected: int | None = None
    for i, path in enumerate(segments):
        data = path.read_bytes()
        base = int(path.name[:20])
        following = int(segments[i + 1].name[:20]) if i + 1 < len(segments) else None
        scan = scan_segment(data, base, min_offset=base if expected is None else
                            max(base, expected), index_interval_bytes=1 << 30,
                            max_offset_entries=1, max_time_entries=1,
                            next_segment_offset=following)  # the rules Log.open applies
        if scan.error is None:
            expected = scan.next_offset
            continue
        rest = memoryview(data)[scan.valid_bytes:]
        declared_end = scan.valid_bytes + (
            int.from_bytes(rest[8:12], "big", signed=True) + 12 if len(rest) >= 12 else 0)
        last = i == len(segments) - 1
        if last and (declared_end >= len(data) or not any(rest)):
            return  # a torn last write: recovery cuts it
        later = f" and {len(segments) - i - 1} later segment(s)" if not last else ""
        raise MetadataLogDamagedError(
            f"{path}: {scan.error}, and data follows it ({len(rest)} bytes to the end of "
            f"the segment{later}): the metadata log is damaged, not torn by a crash; "
            f"starting would forget every record from offset {scan.next_offset} on. "
            f"Restore {directory.parent} from a backup (nothing was changed)")


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
        directory = self.data_dir / f"{METADATA_TOPIC}-{METADATA_PARTITION}"
        try:
            check_damage_is_only_a_torn_tail(directory)
            self._log = Log.open(directory, METADATA_LOG_CONFIG, recovery_point=0)
        except BaseException:
            self._lock.release()
            raise
        report = self._log.recovery_report
        if report.truncated_bytes:
            log.warning("metadata log: cut a torn tail of %d bytes at offset %s (%s)",
                        report.truncated_bytes, report.truncated_at_offset,
                        "; ".join(report.problems))
        leo = self._log.log_end_offset
        if snapshots and snapshots[-1][0] >= leo:
            path = snapshots[-1][1]
            self.close()
            raise MetadataLogDamagedError(
                f"{directory} ends at offset {leo} but {path.name} holds the image up to "
                f"offset {snapshots[-1][0]}: the log lost records it had; restore "
                f"{self.data_dir} from a backup (nothing was changed)")
        for offset, path in reversed(snapshots):
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
