"""LogManager: every partition log of one broker, in one data directory.

Data directory layout (everything else is ignored and reported)::

    <data_dir>/
      .lock                              flock'd for the manager's life; holder pid inside
      .kafka_cleanshutdown               present only between a clean shutdown and the
                                         next startup (empty file)
      recovery-point-offset-checkpoint   topic partition offset: all below is fsync'd
      log-start-offset-checkpoint        topic partition offset: first offset kept
      cleaner-offset-checkpoint          topic partition offset: first dirty (not yet
                                         compacted) offset of each compacted log
      replication-offset-checkpoint      topic partition offset: high watermark (written
                                         by the owner via write_high_watermarks)
      recovery-cut-checkpoint            topic partition offset: a replica whose log
                                         recovery cut, not yet back in an ISR (log end
                                         after the cut; written by the owner via
                                         write_recovery_cuts)
      <topic>-<partition>/               one Log (segments, indexes, leader-epoch-checkpoint,
                                         log.config: storage.log.config_file)
      <topic>-<partition>.<uuid>-delete/ a deleted log being removed (finished at startup)

Checkpoint formats: see :mod:`storage.checkpoint`.  The names of log directories, the
marker and deletions, and the :class:`~storage.log_dirs.StartupReport`:
:mod:`storage.log_dirs`.

Lifecycle: ``startup()`` takes the data-directory lock (a second live process gets
:class:`~storage.lock.DataDirLockedError`), reads the checkpoints, checks and removes the
clean-shutdown marker, and opens every partition log on ``load_threads`` threads.  After a
clean shutdown a log opens without rescanning; otherwise each log is recovered from its
checkpointed recovery point (the bytes above it are revalidated and a torn tail cut off).
``shutdown()`` flushes and closes every log, writes the checkpoints, then the marker, and
releases the lock; if any step fails no marker is written, so the next start recovers.

Scheduling: there are no background threads.  The owner (the broker's event loop) calls
:meth:`run_retention`, :meth:`flush_dirty_logs`, :meth:`checkpoint` and
:meth:`run_cleaner_step` (bounded log compaction, :mod:`storage.cleaner`) on its own timers,
or :meth:`run_due_tasks` with a :class:`ManagerSchedule`, which runs what is due by the
injected clock and returns the milliseconds until the next task.

Costs: startup O(partitions) opens plus the rescan of unflushed bytes after a crash;
create/get are O(1); delete is O(files of the partition); checkpoints are O(partitions)
plus two fsyncs each; retention and flush are O(partitions) calls into the logs.

Thread safety: none.  One owner calls every method from one thread.  The only
concurrency is inside ``startup()``, which opens distinct logs on a bounded thread pool.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from clients.protocol.topics import TopicPartition, validate_topic_name
from storage.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_CUT_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
)
from storage.cleaner.cleaner import CLEANER_CHECKPOINT, LogCleaner
from storage.cleaner.config import CleanerConfig, CleanStepResult
from storage.config import LogConfig
from storage.file_io import fsync_dir, write_file_fsynced
from storage.lock import DataDirLock
from storage.log.log import Log, wall_clock_ms
from storage.log_dirs import (
    CLEAN_SHUTDOWN_MARKER,
    DELETE_SUFFIX,
    StartupReport,
    log_dir_name,
    scan_log_dirs,
)
from storage.scrubber import SCRUBBER_CHECKPOINT, DamagedRange, LogScrubber

__all__ = ["MAX_LOAD_THREADS", "LogManager", "ManagerSchedule"]

MAX_LOAD_THREADS = 64


@dataclass(frozen=True)
class ManagerSchedule:
    """Intervals of the periodic tasks :meth:`LogManager.run_due_tasks` runs (ms)."""

    retention_check_interval_ms: int = 5 * 60 * 1000
    flush_check_interval_ms: int = 1000
    checkpoint_interval_ms: int = 60 * 1000

    def __post_init__(self) -> None:
        for name in ("retention_check_interval_ms", "flush_check_interval_ms",
                     "checkpoint_interval_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


class LogManager:
    """Owns the data directory of one broker and every :class:`~storage.log.log.Log` in it."""

    def __init__(
        self,
        data_dir: str | Path,
        default_config: LogConfig | None = None,
        *,
        config_for: Callable[[str], LogConfig] | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        load_threads: int = 2,
        schedule: ManagerSchedule | None = None,
        cleaner_config: CleanerConfig | None = None,
        scrub_step_bytes: int = 1 << 20,
        scrub_round_pause_ms: int = 0,
        prefer_stored_configs: bool = False,
    ) -> None:
        """``prefer_stored_configs``: ``config_for`` does not know the topics' configs
        when :meth:`startup` loads the logs (a broker in a cluster, before its first
        metadata image), so each log opens and recovers with the config stored beside
        it (:mod:`storage.log.config_file`) where there is one; the owner gives it its
        topic's config later (:meth:`Log.update_config`)."""
        if not isinstance(load_threads, int) or not 1 <= load_threads <= MAX_LOAD_THREADS:
            raise ValueError(f"load_threads must be in [1, {MAX_LOAD_THREADS}], got {load_threads}")
        self.data_dir = Path(data_dir)
        self.default_config = default_config if default_config is not None else LogConfig()
        self._config_for = config_for
        self._prefer_stored_configs = prefer_stored_configs
        self._clock_ms = clock_ms
        self.load_threads = load_threads
        self.schedule = schedule if schedule is not None else ManagerSchedule()
        self._lock = DataDirLock(self.data_dir)
        self._logs: dict[TopicPartition, Log] = {}
        self._started = False
        self._next_due_ms: dict[str, int] = {}
        self.startup_report: StartupReport | None = None
        self.recovery_point_checkpoint = OffsetCheckpointFile(
            self.data_dir / RECOVERY_POINT_CHECKPOINT
        )
        self.log_start_offset_checkpoint = OffsetCheckpointFile(
            self.data_dir / LOG_START_OFFSET_CHECKPOINT
        )
        self.high_watermark_checkpoint = OffsetCheckpointFile(
            self.data_dir / REPLICATION_OFFSET_CHECKPOINT
        )
        self.recovery_cut_checkpoint = OffsetCheckpointFile(
            self.data_dir / RECOVERY_CUT_CHECKPOINT
        )
        self.cleaner = LogCleaner(cleaner_config, clock_ms=clock_ms,
                                  checkpoint_path=self.data_dir / CLEANER_CHECKPOINT)
        self.scrubber = LogScrubber(self.data_dir / SCRUBBER_CHECKPOINT, scrub_step_bytes,
                                    scrub_round_pause_ms)

    # -- lifecycle ----------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._config_for(topic) if self._config_for is not None else self.default_config

    def startup(self) -> StartupReport:
        """Lock the directory and load every partition log (see the module docstring)."""
        if self._started:
            raise RuntimeError(f"LogManager for {self.data_dir} is already started")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            report = self._load_all()
        except BaseException:
            self._lock.release()
            raise
        self._started = True
        self.cleaner.load_checkpoint()
        if report.had_clean_shutdown:
            self.scrubber.load_checkpoint()
        # after an unclean start the scrubber begins a new round at once (cursor None):
        # every closed segment is CRC-checked soon after it, not only when the round it
        # was in comes around again (up to log_scrub_round_pause_ms later)
        now_ms = self._clock_ms()
        self._next_due_ms = {
            "retention": now_ms + self.schedule.retention_check_interval_ms,
            "flush": now_ms + self.schedule.flush_check_interval_ms,
            "checkpoint": now_ms + self.schedule.checkpoint_interval_ms,
        }
        self.startup_report = report
        return report

    def _load_all(self) -> StartupReport:
        marker = self.data_dir / CLEAN_SHUTDOWN_MARKER
        clean = marker.exists()
        report = StartupReport(had_clean_shutdown=clean)
        recovery_points = self.recovery_point_checkpoint.read()
        log_start_offsets = self.log_start_offset_checkpoint.read()
        to_load = scan_log_dirs(self.data_dir, report)

        def load(item: tuple[TopicPartition, Path]) -> Log:
            tp, path = item
            try:
                return Log.open(
                    path,
                    self.config_for(tp[0]),
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=log_start_offsets.get(tp, 0),
                    had_clean_shutdown=clean,
                    clock_ms=self._clock_ms,
                    prefer_stored_config=self._prefer_stored_configs,
                )
            except Exception as exc:
                exc.add_note(f"while loading partition log {path}")
                raise

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=self.load_threads,
                                thread_name_prefix="log-load") as pool:
            futures = [(tp, pool.submit(load, (tp, path))) for tp, path in to_load]
        # The pool has joined: every future is done.  Keep what opened, or close it all.
        errors = [f.exception() for _, f in futures if f.exception() is not None]
        if errors:
            for _, f in futures:
                if f.exception() is None:
                    f.result().close()
            raise errors[0]  # type: ignore[misc]
        for tp, f in futures:
            log = f.result()
            self._logs[tp] = log
            found = log.recovery_report
            if not clean or (found.truncated_bytes or found.damaged or found.segments_deleted
                             or found.cut_unacknowledged):
                report.recovered[tp] = found  # (after a clean stop: a bad index's rescan)
        report.logs_loaded = len(self._logs)
        report.load_ms = (time.perf_counter() - started) * 1000.0
        if clean:
            marker.unlink()
            fsync_dir(self.data_dir)
        return report

    def shutdown(self) -> None:
        """Flush and close all logs, checkpoint, mark the shutdown clean, release the lock.

        Idempotent.  If closing any log fails the others are still closed, the lock is
        released, no clean-shutdown marker is written and the first error is raised.
        """
        if not self._started:
            return
        self._started = False
        self.cleaner.abort()
        first_error: BaseException | None = None
        recovery_points: dict[TopicPartition, int] = {}
        log_start_offsets: dict[TopicPartition, int] = {}
        try:
            for tp, log in sorted(self._logs.items()):
                try:
                    log.flush()
                    recovery_points[tp] = log.recovery_point
                    log_start_offsets[tp] = log.log_start_offset
                    log.close()
                except Exception as exc:
                    exc.add_note(f"while closing partition log {tp[0]}-{tp[1]}")
                    first_error = first_error or exc
            self._logs.clear()
            if first_error is None:
                self.recovery_point_checkpoint.write(recovery_points)
                self.log_start_offset_checkpoint.write(log_start_offsets)
                self.cleaner.write_checkpoint()
                if self.scrubber.findings:
                    # damage found in this run may be unrepaired (a leader alone in its
                    # ISR keeps it): the next start scrubs from the beginning, so the
                    # range is found (and fenced) again soon, not a round pause later
                    self.scrubber.cursor = None
                self.scrubber.write_checkpoint()
                write_file_fsynced(self.data_dir / CLEAN_SHUTDOWN_MARKER, b"")
                fsync_dir(self.data_dir)
        finally:
            self._lock.release()
        if first_error is not None:
            raise first_error

    # -- partition logs -----------------------------------------------------------------

    def _check_started(self) -> None:
        if not self._started:
            raise RuntimeError(f"LogManager for {self.data_dir} is not started")

    def get_log(self, topic: str, partition: int) -> Log | None:
        self._check_started()
        return self._logs.get(TopicPartition(topic, partition))

    def all_logs(self) -> dict[TopicPartition, Log]:
        """A copy of the ``(topic, partition) -> Log`` map."""
        self._check_started()
        return dict(self._logs)

    def log_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / log_dir_name(topic, partition)

    def create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The log of ``topic-partition``, created (empty) if absent.  Idempotent: an
        existing log is returned as it is, whatever ``config`` says.

        An illegal topic name -> ``InvalidTopicError``; a negative partition -> ValueError.
        """
        self._check_started()
        validate_topic_name(topic)
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise ValueError(f"partition must be a non-negative integer, got {partition!r}")
        existing = self._logs.get(TopicPartition(topic, partition))
        if existing is not None:
            return existing
        log = Log.open(
            self.log_dir(topic, partition),
            config if config is not None else self.config_for(topic),
            clock_ms=self._clock_ms,
        )
        fsync_dir(self.data_dir)
        self._logs[TopicPartition(topic, partition)] = log
        return log

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close and remove the log; False if there was none.

        The directory is first renamed to ``<topic>-<partition>.<uuid>-delete`` (durable),
        so a crash mid-removal is finished by the next startup instead of resurrecting the
        log; the checkpoints are rewritten without the partition so a later log of the
        same name cannot inherit its recovery point.
        """
        self._check_started()
        log = self._logs.pop(TopicPartition(topic, partition), None)
        if log is None:
            return False
        self.cleaner.forget(TopicPartition(topic, partition))
        log.abandon()  # no flush: the bytes are about to go
        source = self.log_dir(topic, partition)
        target = self.data_dir / f"{source.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
        os.rename(source, target)
        fsync_dir(self.data_dir)
        self.checkpoint()
        shutil.rmtree(target)
        return True

    def leader_epoch_checkpoint(self, topic: str, partition: int) -> LeaderEpochCheckpointFile:
        """The leader-epoch checkpoint file inside the partition directory."""
        return LeaderEpochCheckpointFile(self.log_dir(topic, partition) / LEADER_EPOCH_CHECKPOINT)

    # -- checkpoints --------------------------------------------------------------------

    def checkpoint_recovery_points(self) -> None:
        self._check_started()
        self.recovery_point_checkpoint.write(
            {tp: log.recovery_point for tp, log in self._logs.items()}
        )

    def checkpoint_log_start_offsets(self) -> None:
        self._check_started()
        self.log_start_offset_checkpoint.write(
            {tp: log.log_start_offset for tp, log in self._logs.items()}
        )

    def checkpoint(self) -> None:
        """The manager-owned checkpoints (recovery points, log start offsets, the
        scrubber's progress)."""
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.scrubber.write_checkpoint()

    def write_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Replace the high-watermark checkpoint (the owner knows the HWs, not the logs)."""
        self.high_watermark_checkpoint.write(high_watermarks)

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        return self.high_watermark_checkpoint.read()

    def write_recovery_cuts(self, cuts: Mapping[TopicPartition, int]) -> None:
        """Replace the recovery-cut checkpoint (replica -> its log end after the cut)."""
        self.recovery_cut_checkpoint.write(cuts)

    def read_recovery_cuts(self) -> dict[TopicPartition, int]:
        return self.recovery_cut_checkpoint.read()

    # -- periodic work (called by the owner) --------------------------------------------

    def run_retention(self, high_watermarks: Mapping[TopicPartition, int] | None = None) -> int:
        """Apply time/size retention to every log; returns segments deleted.  Log start
        offsets are checkpointed when anything was deleted.

        With ``high_watermarks`` (a broker's partitions), each log is bounded by its HW
        and a log without one (not hosted as a partition) is left alone."""
        self._check_started()
        if high_watermarks is None:
            deleted = sum(log.delete_old_segments() for log in self._logs.values())
        else:
            deleted = sum(log.delete_old_segments(high_watermarks[key])
                          for key, log in self._logs.items() if key in high_watermarks)
        if deleted:
            self.checkpoint_log_start_offsets()
        return deleted

    def run_cleaner_step(self, max_bytes: int | None = None,
                         high_watermarks: Mapping[TopicPartition, int] | None = None
                         ) -> CleanStepResult:
        """One bounded step of log compaction over the compacted logs (at most
        ``max_bytes`` read, default the cleaner's ``step_bytes``), below each log's HW
        when ``high_watermarks`` is given (logs without one are left alone)."""
        self._check_started()
        return self.cleaner.clean_step(self._logs, max_bytes, high_watermarks)

    def run_scrub_step(self) -> list[DamagedRange]:
        """One bounded step of the background CRC check of closed segments
        (:mod:`storage.scrubber`); returns what it found damaged."""
        self._check_started()
        return self.scrubber.step(self._logs, self._clock_ms())

    def clean_until_idle(self, max_steps: int = 100_000) -> int:
        """Test hook: compact until no log needs it; returns the passes completed."""
        self._check_started()
        return self.cleaner.clean_until_idle(self._logs, max_steps)

    def flush_dirty_logs(self) -> None:
        """Let each log apply its flush_messages / flush_ms policy."""
        self._check_started()
        for log in self._logs.values():
            log.maybe_flush()

    def run_due_tasks(self) -> int:
        """Run the periodic tasks that are due by the clock; returns ms until the next."""
        self._check_started()
        tasks: dict[str, tuple[Callable[[], object], int]] = {
            "retention": (self.run_retention, self.schedule.retention_check_interval_ms),
            "flush": (self.flush_dirty_logs, self.schedule.flush_check_interval_ms),
            "checkpoint": (self.checkpoint, self.schedule.checkpoint_interval_ms),
        }
        now_ms = self._clock_ms()
        for name, (task, interval_ms) in tasks.items():
            if now_ms >= self._next_due_ms[name]:
                task()
                self._next_due_ms[name] = now_ms + interval_ms
        return max(0, min(self._next_due_ms.values()) - now_ms)
