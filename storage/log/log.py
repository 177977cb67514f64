"""One partition's log: an ordered list of segments in ``<data_dir>/<topic>-<partition>/``.

Directory layout (formats: :mod:`storage.segment`, :mod:`storage.index.offset_index`,
:mod:`storage.index.time_index`, :mod:`storage.index.txn_index`; batches:
:mod:`clients.records.batch`)::

    00000000000000000000.log        batches with offsets [0, 1200)
    00000000000000000000.index      sparse offset -> position (trimmed: inactive)
    00000000000000000000.timeindex  sparse max timestamp -> offset (trimmed)
    00000000000000000000.txnindex   aborted transactions whose ABORT marker is in the
                                    segment (only once there is one)
    00000000000000001200.log        active segment (appends go here)
    00000000000000001200.index      preallocated to segment_index_bytes, mmapped
    00000000000000001200.timeindex  preallocated to segment_index_bytes, mmapped
    recovery-cut                    only while a cut by log recovery is unacknowledged
                                    (:mod:`storage.log.recovery`)
    log.config                      the LogConfig the log was last given
                                    (:mod:`storage.log.config_file`)

:class:`Log` owns four collaborators and delegates to them explicitly: a
:class:`~storage.log.segment_list.SegmentList` (the segments, the offsets and every edit of
them: roll, truncation, deletion, swap, fsync), a :class:`~storage.log.appender.LogAppender`
(leader and follower appends, cut across segments), a
:class:`~storage.log.reader.LogReader` (file regions, timestamp lookup) and a
:class:`~storage.log.segment_policy.SegmentPolicy` (when to roll, what retention deletes).
This module has opening, the leader's record check, the flush policy, the lifecycle and
the checks every public method makes (log open, arguments).

Semantics worth knowing (Kafka's unless stated):

* Appends are all-or-nothing per request: every batch is validated first (length, magic,
  CRC-32C, counts, compression, ``max_message_bytes``), then the whole request goes to the
  active segment with one ``writev`` (leader appends patch only the 16 bytes of
  base_offset/batch_length/leader_epoch per batch, the records are not copied).  A roll
  happens before a request that would not fit; a request of several batches that would
  take a segment past ``segment_bytes`` is cut at batch boundaries, one ``writev`` per
  segment (a failed later write truncates the earlier ones back out), so segments keep to
  ``segment_bytes`` unless one batch alone is larger (Kafka's producer sends one batch
  per partition per request; ours, and a follower's fetch, carry many).  The bytes a
  leader append patches: :mod:`storage.log.appender`.

* Reads, regions and their identity: see :mod:`storage.log.reader`; ``truncate_to``,
  rolls and swaps: see :mod:`storage.log.segment_list`; retention and the roll rules:
  see :mod:`storage.log.segment_policy`.
* Flushing: by default nothing is fsync'd on append (replication is the durability);
  ``flush_messages``/``flush_ms`` are applied after each append and by
  :meth:`Log.maybe_flush`.  A roll does not fsync inline: it schedules a flush of the
  rolled segment that the owner's next :meth:`Log.maybe_flush` performs (Kafka does it on
  a background scheduler).
* A compacted log (``cleanup_policy="compact"``) must not take a produced record without
  a key (Kafka's rule: compaction keeps the latest record per key, so a keyless record
  has no meaning there).  The check :meth:`Log.leader_check` returns refuses such a
  request with INVALID_RECORD (:class:`~storage.log.validator.KeylessRecordError`; the
  Produce handler runs it before the leader append, so nothing is appended, and
  :meth:`Log.require_keys` runs it alone).  On compacted logs only, it decodes the
  records into columns (no fast path) instead of proving them well formed.  The
  appends themselves stay permissive: follower
  appends copy the leader, and the cleaner still drops keyless records that got in
  before a topic became compacted.  Control batches are not checked.
* Transactions: the log stores control batches and transactional batches like any other
  (the partition's producer state decides what they mean).  The owner records each
  aborted transaction with :meth:`Log.append_aborted_txn` right after its ABORT marker's
  append; :meth:`Log.collect_aborted_transactions` answers a ``read_committed`` fetch.
  Recovery keeps the segments' ``.txnindex`` files true (:mod:`storage.log.txn_rebuild`).
* Only CreateTime timestamps are supported (a LogAppendTime batch would need its CRC
  recomputed); batches are stored as received.

Concurrency: **not thread-safe**; the broker's event loop thread owns the Log (several
Logs may be opened in parallel threads, each by one thread).  Other processes may read
file regions concurrently (see :mod:`storage.log.reader` for what they must tolerate).

Costs: append O(batches + bytes for the CRC); open after a clean shutdown O(index bytes)
+ a tail walk per segment; unclean open O(bytes after the recovery point); flush
O(segments) + the fsyncs; reads, edits and retention: see their modules.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from clients.protocol.errors import MiniKafkaError, OffsetOutOfRangeError
from clients.protocol.topics import TopicPartition
from clients.records.batch import BatchHeader
from storage.config import LogConfig
from storage.errors import StorageError
from storage.index.txn_index import AbortedTxn
from storage.log.appender import LogAppender, byte_view
from storage.log.config_file import read_log_config, write_log_config
from storage.log.invariants import check_log_invariants
from storage.log.reader import FetchDataInfo, LogReader, TimestampAndOffset
from storage.log.recovery import RecoveryReport, acknowledge_cut, load_segments
from storage.log.segment_list import SegmentList
from storage.log.segment_policy import SegmentPolicy
from storage.log.validator import (
    MAX_BATCH_DECOMPRESSED_BYTES,
    MAX_BATCH_RECORDS,
    BatchInfo,
    KeylessRecordError,
    LeaderCheck,
    LogAppendInfo,
    validate_append_batches,
)
from storage.log_dirs import parse_log_dir_name
from storage.records.scan import INT32_MAX
from storage.segment import Segment

__all__ = ["Log", "wall_clock_ms"]

log = logging.getLogger(__name__)

_INT64_MAX, _INT64_MIN = 2**63 - 1, -(2**63)


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: the default clock of a log (and of its owners)."""
    return time.time_ns() // 1_000_000


class Log:
    """A partition log; build with :meth:`Log.open`.

    Holds the directory, config, :attr:`recovery_report`, :attr:`topic_partition` (the
    directory name parsed by :func:`storage.log_dirs.parse_log_dir_name`; ``(name, -1)``
    if it is not a log directory name, e.g. a test's scratch directory), the
    flush-policy counters and the closed flag; segments and offsets are its
    :class:`SegmentList`'s (read-only views here).
    """

    def __init__(self, directory: Path, config: LogConfig, segments: SegmentList,
                 recovery_report: RecoveryReport, clock_ms: Callable[[], int]) -> None:
        self.dir = directory
        self.config = config
        self.recovery_report = recovery_report
        self.topic_partition = (parse_log_dir_name(directory.name)
                                or TopicPartition(directory.name, -1))
        self._clock_ms = clock_ms
        self._segments = segments
        topic, partition = self.topic_partition
        self._reader = LogReader(segments, f"{topic}-{partition}")
        self._policy = SegmentPolicy(config)
        self._appender = LogAppender(segments, config, clock_ms, self._after_write)
        self._unflushed_messages = 0
        self._first_unflushed_ms: int | None = None
        self._closed = False
        # called before a flush moves the recovery point up: the owner makes what must
        # be durable with those records durable first (Partition: its leader-epoch
        # checkpoint, which log recovery checks the next unflushed tail against)
        self.before_flush: Callable[[], None] | None = None

    # -- opening -----------------------------------------------------------------------

    def now_ms(self) -> int:
        """The log's clock (:func:`wall_clock_ms` unless one was injected): what stamps
        roll times, LogAppendTime batches and the markers the broker writes."""
        return self._clock_ms()

    @classmethod
    def open(cls, dir: str | Path, config: LogConfig, *, recovery_point: int = 0,
             log_start_offset: int = 0, had_clean_shutdown: bool = False,
             clock_ms: Callable[[], int] = wall_clock_ms,
             prefer_stored_config: bool = False) -> Log:
        """Open (creating if missing) and, after an unclean shutdown, recover the log.

        ``recovery_point`` and ``log_start_offset`` come from the owner's checkpoints;
        what recovery did is in :attr:`recovery_report`.  ``prefer_stored_config``: the
        owner does not know the log's config yet, so the one stored beside the log
        (:mod:`storage.log.config_file`; a created log stores ``config``) wins.
        """
        directory = Path(dir)
        directory.mkdir(parents=True, exist_ok=True)
        now = clock_ms()
        config = (read_log_config(directory) if prefer_stored_config else None) or config

        def open_segment(base: int) -> Segment:
            return Segment(directory, base, config, create=False, now_ms=now)

        loaded, report = load_segments(directory, recovery_point=recovery_point,
                                       had_clean_shutdown=had_clean_shutdown,
                                       open_segment=open_segment)
        created = not loaded
        if created:
            loaded = [Segment(directory, max(log_start_offset, 0), config, create=True,
                              now_ms=now)]
            write_log_config(directory, config)
        if had_clean_shutdown and report.segments_rescanned == 0:
            recovery_point = loaded[-1].next_offset  # else only a flush advances it (Kafka)
        segments = SegmentList(directory, config, loaded, log_start_offset=log_start_offset,
                               recovery_point=recovery_point, now_ms=now, dir_dirty=created)
        return cls(directory, config, segments, report, clock_ms)

    # -- offsets and segments (views of the SegmentList) -------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._segments.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._segments.recovery_point

    @property
    def segments(self) -> list[Segment]:
        """The live segment list, oldest first (read it, never change it)."""
        return self._segments.segments

    @property
    def active(self) -> Segment:
        return self._segments.active

    @property
    def size_in_bytes(self) -> int:
        return self._segments.size_in_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.dir} is closed")

    # -- reads (LogReader) -------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchDataInfo:
        """Whole batches from the one containing ``start_offset``, below ``max_offset``
        (see :meth:`LogReader.read`)."""
        self._check_open()
        return self._reader.read(start_offset, max_bytes, max_offset, min_one_batch)

    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampAndOffset | None:
        """``(offset, timestamp)`` of the first record (>= log start) with ts >= the target."""
        self._check_open()
        return self._reader.offset_for_timestamp(timestamp_ms)

    def batches(self, start_offset: int | None = None, *, producers_only: bool = False
                ) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every stored batch whose last offset is >= ``start_offset`` (tests, tools);
        ``producers_only``: those with a producer id (see :meth:`LogReader.batches`)."""
        self._check_open()
        yield from self._reader.batches(start_offset, producers_only=producers_only)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int
                                     ) -> list[AbortedTxn]:
        """Every aborted transaction with ``last_offset >= start_offset`` and
        ``first_offset < upper_bound_offset``, ordered by first offset (what a
        ``read_committed`` fetch of ``[start_offset, upper_bound_offset)`` returns).
        Reads the indexes of the segments from the one holding ``start_offset`` on,
        until an entry's LSO reaches the bound (Kafka's ``collectAbortedTransactions``):
        O(segments read + entries)."""
        self._check_open()
        segments = self._segments.segments
        found: list[AbortedTxn] = []
        for seg in segments[self._segments.floor_index(start_offset):]:
            entries, complete = seg.txn_index.collect(start_offset, upper_bound_offset)
            found += entries
            if complete:
                break
        return sorted(found, key=lambda e: e.first_offset)

    # -- append ------------------------------------------------------------------------

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Record an aborted transaction in the ``.txnindex`` of the segment holding
        ``entry.last_offset`` (its ABORT marker, already appended: the active segment
        right after the marker's append).  ValueError when that offset is not in the log
        or not above the segment's last entry.  O(1) + one ``write``."""
        self._check_open()
        segments = self._segments
        if not segments.segments[0].base_offset <= entry.last_offset < segments.log_end_offset:
            raise ValueError(f"{self.dir}: aborted transaction {entry} ends outside the log "
                             f"[{segments.segments[0].base_offset}, "
                             f"{segments.log_end_offset})")
        segments.segments[segments.floor_index(entry.last_offset)].txn_index.append(entry)

    def append_as_leader(self, batches: bytes | bytearray | memoryview,
                         leader_epoch: int, checked: Sequence[BatchInfo] | None = None
                         ) -> LogAppendInfo:
        """Validate, assign offsets from the LEO, stamp ``leader_epoch``, append.

        ``checked``: what :meth:`leader_check` (``keys=False`` or not) answered for these
        same bytes, e.g. on another thread (the Produce handler's record check): the
        validation is not done again.  With ``message_timestamp_type=LogAppendTime`` each
        batch is also stamped with the
        leader's clock (Kafka's rule for magic v2: the timestamp-type attribute bit set,
        ``max_timestamp`` = now, the CRC recomputed; readers give every record of such a
        batch that time); the CreateTime window does not apply.  Costs one copy and one
        CRC-32C pass per batch, only for such topics."""
        if self._closed:
            self._check_open()
        if not 0 <= leader_epoch <= INT32_MAX:
            raise ValueError(f"leader_epoch must be in [0, 2**31 - 1], got {leader_epoch}")
        view = byte_view(batches)
        infos = checked if checked is not None else self.leader_check(keys=False).run(view)
        return self._appender.append_as_leader(view, leader_epoch, infos)

    def _timestamp_bounds(self) -> tuple[int, int] | None:
        """The CreateTime window producers' records must fall in (None: no limit)."""
        cfg = self.config
        if cfg.message_timestamp_before_max_ms == _INT64_MAX and \
                cfg.message_timestamp_after_max_ms == _INT64_MAX:
            return None
        now = self._clock_ms()
        return (max(now - cfg.message_timestamp_before_max_ms, _INT64_MIN),
                min(now + cfg.message_timestamp_after_max_ms, _INT64_MAX))

    def leader_check(self, *, keys: bool = True, max_batch_records: int = MAX_BATCH_RECORDS,
                     max_decompressed_bytes: int = MAX_BATCH_DECOMPRESSED_BYTES
                     ) -> LeaderCheck:
        """What a leader append of producers' batches checks here, now: this log's
        ``max_message_bytes``, the CreateTime window around the clock (none for
        LogAppendTime) and, with ``keys`` on a compacted log, that every record has a
        key; with the broker's per-batch bounds.  A value: it may run on any thread."""
        self._check_open()
        cfg = self.config
        topic, partition = self.topic_partition
        return LeaderCheck(
            cfg.max_message_bytes,
            None if cfg.log_append_time else self._timestamp_bounds(),
            f"{topic}-{partition}" if keys and cfg.compact else None,
            max_batch_records, max_decompressed_bytes)

    def require_keys(self, batches: bytes | bytearray | memoryview) -> None:
        """Compacted log: raise InvalidRecordError if a record of ``batches`` (a produce
        request's records) has no key; no-op otherwise.  Malformed batches are left to
        the append, which reports them precisely (the Produce handler gets the same
        check from :meth:`leader_check`)."""
        self._check_open()
        if not self.config.compact:
            return
        try:
            self.leader_check().run(batches)
        except KeylessRecordError:
            raise
        except MiniKafkaError:
            return

    def follower_check(self, batches: bytes | bytearray | memoryview) -> list[BatchInfo]:
        """What a follower append of ``batches`` checks (length, magic, CRC-32C, counts,
        codec, ``max_message_bytes``; the records are the leader's business), run now:
        the result may be handed to :meth:`append_as_follower` (``checked``) of the same
        bytes, and its header fields read, instead of walking the batches again."""
        self._check_open()
        return validate_append_batches(byte_view(batches), self.config.max_message_bytes,
                                       require_records=False)

    def append_as_follower(self, batches: bytes | bytearray | memoryview,
                           checked: Sequence[BatchInfo] | None = None) -> LogAppendInfo:
        """Append replicated batches as they are (offsets and epochs kept); ``checked``:
        what :meth:`follower_check` answered for these same bytes (not done again)."""
        self._check_open()
        return self._appender.append_as_follower(byte_view(batches), checked)

    def _after_write(self, records: int, now_ms: int) -> None:
        """The flush policy after each write of an append (``flush_messages``,
        ``flush_ms``): the appender's ``on_written``."""
        self._unflushed_messages += records
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = now_ms
        cfg = self.config
        if (cfg.flush_messages is not None and self._unflushed_messages >= cfg.flush_messages) or (
            cfg.flush_ms is not None and now_ms - self._first_unflushed_ms >= cfg.flush_ms
        ):
            self.flush()

    # -- segment edits (SegmentList, as SegmentPolicy decides) --------------------------

    def update_config(self, config: LogConfig) -> None:
        """Use ``config`` from now on (a topic config change, or the topic's config
        reaching a log opened with the broker's defaults): validation, later appends,
        rolls, flushes, retention and cleaning follow it, the active segment too (its
        index interval and preallocated index size); batches and index entries already
        written stay as they are.  A change is stored beside the log
        (:mod:`storage.log.config_file`; a failed write is only logged).  O(segments)."""
        self._check_open()
        if config != self.config:
            try:
                write_log_config(self.dir, config)
            except OSError as exc:
                log.warning("%s: cannot store the log's config: %s", self.dir, exc)
        self.config = config
        self._segments.update_config(config)
        self._policy = SegmentPolicy(config)
        self._appender.update_config(config)

    def roll(self) -> None:
        """Force a roll at the LEO (no-op when the active segment is empty)."""
        self._check_open()
        if self._segments.active.size:
            self._segments.roll(self._segments.log_end_offset, self._clock_ms())

    def truncate_to(self, offset: int) -> None:
        """Drop every batch with last offset >= ``offset`` (LEO becomes <= ``offset``)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if offset < self._segments.log_end_offset:
            if offset < self._segments.segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
            else:
                self._segments.truncate_to(offset, self._clock_ms())

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment; the log restarts empty at ``offset`` (start = end)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._segments.restart_at(offset, self._clock_ms())
        self._unflushed_messages, self._first_unflushed_ms = 0, None

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """Raise the log start offset (DeleteRecords / follower following its leader).

        Reads below it fail at once; whole segments below it are deleted by the next
        :meth:`delete_old_segments`.  Above the LEO -> OffsetOutOfRangeError.
        """
        self._check_open()
        leo = self._segments.log_end_offset
        if offset > leo:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset to {offset}, past the log end offset {leo}"
            )
        self._segments.raise_log_start(offset)

    def delete_old_segments(self, high_watermark: int | None = None) -> int:
        """Apply retention (:meth:`SegmentPolicy.deletable_prefix`, bounded by
        ``high_watermark`` when given); return the number of segments deleted (never the
        active one).  The log start offset moves to the first kept segment's base offset."""
        self._check_open()
        segments = self._segments
        k = self._policy.deletable_prefix(segments.segments, segments.log_start_offset,
                                          self._clock_ms(), high_watermark)
        return segments.delete_prefix(k)

    def replace_segments(self, old: list[Segment], new: Segment) -> None:
        """Put ``new`` in place of ``old`` (consecutive inactive segments, ``new`` based at
        the first one's base): the in-memory half of a cleaner swap (storage.cleaner),
        called after the files were renamed.  The old segments' descriptors are closed."""
        self._check_open()
        self._segments.replace(old, new)

    # -- durability and lifecycle ------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync segments (and the directory if segments came or went); advance the
        recovery point to ``up_to_offset`` (default: the LEO)."""
        self._check_open()
        leo = self._segments.log_end_offset
        target = leo if up_to_offset is None else min(up_to_offset, leo)
        if self.before_flush is not None and target > self._segments.recovery_point:
            self.before_flush()
        self._segments.flush(target)
        if target >= leo:
            self._unflushed_messages, self._first_unflushed_ms = 0, None

    def maybe_flush(self) -> None:
        """Run the flush policy: rolled segments, ``flush_messages``, ``flush_ms``."""
        self._check_open()
        if self._segments.roll_flush_offset > self._segments.recovery_point:
            self.flush(self._segments.roll_flush_offset)
        cfg = self.config
        if self._first_unflushed_ms is None:
            return
        if (cfg.flush_messages is not None and self._unflushed_messages >= cfg.flush_messages) or (
            cfg.flush_ms is not None and self._clock_ms() - self._first_unflushed_ms >= cfg.flush_ms
        ):
            self.flush()

    def close(self) -> None:
        """Flush, write the final time-index entries, trim indexes, close descriptors."""
        if self._closed:
            return
        if self.before_flush is not None:
            self.before_flush()  # durable too after a clean stop, even with nothing to flush
        self.flush()
        for seg in self._segments.segments:
            seg.close()
        self._closed = True

    def acknowledge_recovery_cut(self) -> None:
        """The owner recorded that recovery cut this log (``recovery_report.
        cut_unacknowledged``): later opens stop reporting it
        (:func:`storage.log.recovery.acknowledge_cut`)."""
        acknowledge_cut(self.dir)
        self.recovery_report.cut_unacknowledged = False

    def abandon(self) -> None:
        """Simulate a process crash: close descriptors without flushing or trimming."""
        if self._closed:
            return
        for seg in self._segments.segments:
            seg.abandon()
        self._closed = True

    def delete(self) -> None:
        """Close and remove the whole directory."""
        if not self._closed:
            for seg in self._segments.segments:
                seg.abandon()
            self._closed = True
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- invariants --------------------------------------------------------------------

    def check_invariants(self) -> None:
        """O(log bytes) structural check; raises :class:`LogInvariantError`."""
        self._check_open()
        check_log_invariants(self._segments)

    def __repr__(self) -> str:
        segments = self._segments
        return (f"Log({self.dir}, start={segments.log_start_offset}, "
                f"end={segments.log_end_offset}, segments={len(segments.segments)})")

