"""MetadataQuorum: the controller's metadata log replicated by the KRaft quorum, and the
metadata image that only committed records build.

A controller started with several voters (``controller_quorum_voters``) keeps its metadata
log through this object instead of :class:`~broker.controller.log.ControllerLog`:

* **Files**: ``<data_dir>/.lock`` (one process per directory), the raft log
  ``<data_dir>/__cluster_metadata-0/`` (:class:`~.file_raft_log.FileRaftLog`, checked for
  damage like the single controller's, :func:`~broker.controller.log.
  check_damage_is_only_a_torn_tail`) and ``<data_dir>/quorum-state``
  (:class:`~replication.raft.state_file.QuorumStateFile`: epoch, voted-for, leader,
  fsync'd before any answer that depends on it), ``<data_dir>/quorum-directory.properties``
  (:mod:`~.voter_directory`: a new directory nobody formatted is a lost disk, its
  replica an observer until caught up; recorded a voter before its next event).
* **Snapshots** (:class:`~.snapshots.QuorumSnapshots`, KIP-630's
  ``<end_offset>-<epoch>.checkpoint`` beside the log): once ``snapshot_interval_records``
  entries were committed and applied since the last one, the committed image is written
  (fsync'd) - by the active controller only when its image holds nothing uncommitted (it
  is built speculatively).  With ``cut_log_at_snapshot`` the log's entries below the
  *previous* snapshot are then dropped (:meth:`FileRaftLog.advance_start_offset`: the log
  keeps one interval before the newest snapshot, so a broker or voter a little behind
  still reads entries): a voter behind the log start catches up by FetchSnapshot, served
  from these files.  At open the newest valid snapshot is loaded and only the log after
  it is applied (the log continues the snapshot at its start:
  :meth:`FileRaftLog.start_at_snapshot`).  A snapshot installed by FetchSnapshot replaces the
  image (``on_image(image, False)``).
* **Committed image**: :attr:`image` holds exactly the entries below the replica's high
  watermark, applied in order (a LeaderChange control entry advances its offset,
  :meth:`MetadataImage.advance_to`).  A restarted voter starts from its newest valid
  snapshot (committed when written; else an empty image) and applies as it relearns the
  high watermark (it is not persisted).
* **Active controller**: the leader becomes *active* once its own LeaderChange entry is
  committed and applied (high watermark = log end): :attr:`active` turns True and
  ``on_image(image, True)`` is called; from then on the caller's state builds records on
  :attr:`image` *speculatively* (applied at the offsets the log will give them; a
  LeaderChange entry the replica appends itself, for an observer's rejoining, takes its
  offset at once) and :meth:`commit` appends them through the replica and returns only once the high
  watermark is past them.  When the voter stops being the leader, the speculative image
  is dropped: a new image is rebuilt (newest snapshot + the log) up to the high watermark and
  ``on_image(image, False)`` is called (Kafka's controller reverts to its last committed
  state the same way).
* ``on_committed()`` is called whenever the high watermark moved (wake the brokers'
  metadata fetches, which :meth:`read_committed` serves up to the high watermark, in
  whole batches).

:func:`controller_quorum` builds it from the controller's config (None for one voter).

Errors: :meth:`commit` raises :class:`NotCommittedError` (NOT_CONTROLLER if this voter
is no longer the active controller, REQUEST_TIMED_OUT if the quorum did not commit within
``commit_timeout_ms``: the records may still commit later, as with Kafka's controller).

Costs: a commit is one append (no fsync of its own: the replica's next poll flushes once
for every proposal pending), then the wait for a majority's Fetch; applying is O(records);
a snapshot O(image) + two fsyncs every ``snapshot_interval_records`` entries, on the event
loop; losing leadership loads the newest snapshot and replays the log after it.
Not thread-safe: one event loop (the controller's).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from broker.auth import controller_login
from broker.controller.config import ControllerConfig
from broker.controller.log import MetadataLogDamagedError, check_damage_is_only_a_torn_tail
from broker.controller.quorum.driver import QuorumDriver
from broker.controller.quorum.file_raft_log import RAFT_LOG_CONFIG, FileRaftLog
from broker.controller.quorum.snapshots import QuorumSnapshots
from broker.controller.quorum.voter_directory import (
    VoterDirectory,
    open_voter_directory,
    record_caught_up,
)
from broker.controller.quorum.voters import voter_map
from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    METADATA_PARTITION,
    METADATA_TOPIC,
    MetadataRecord,
    decode_record,
    encode_record,
)
from clients.protocol.errors import ErrorCode, MiniKafkaError
from replication.raft.config import RaftConfig
from replication.raft.messages import OffsetAndEpoch
from replication.raft.quorum_state import QuorumRole
from replication.raft.replica import LEADER_CHANGE, KRaftReplica
from replication.raft.state_file import QUORUM_STATE_FILE, QuorumStateFile
from storage.lock import DataDirLock
from storage.log.log import Log
from timer.clock import Clock

__all__ = ["MetadataQuorum", "NotCommittedError", "controller_quorum"]

log = logging.getLogger(__name__)

_APPLY_CHUNK = 1000  # entries read from the log per step while applying


class NotCommittedError(MiniKafkaError):
    """Records of the active controller were not committed: ``code`` is NOT_CONTROLLER
    (leadership lost) or REQUEST_TIMED_OUT."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class MetadataQuorum:
    def __init__(self, data_dir: str | Path, node_id: int,
                 voters: Mapping[int, tuple[str, int]], clock: Clock, *,
                 raft_config: RaftConfig, commit_timeout_ms: int,
                 login: tuple[str, bytes] | None, require_login: bool, cluster_id: str,
                 max_batch_records: int, snapshot_interval_records: int,
                 cut_log_at_snapshot: bool,
                 on_image: Callable[[MetadataImage, bool], None],
                 on_committed: Callable[[], None],
                 on_fatal: Callable[[BaseException], None]) -> None:
        self.data_dir = Path(data_dir)
        self.node_id = node_id
        self.voters = dict(voters)
        self._clock = clock
        self._raft_config = raft_config
        self._commit_timeout_ms = commit_timeout_ms
        self._login = login
        self._require_login = require_login
        self._cluster_id = cluster_id
        self._max_batch_records = max_batch_records
        if snapshot_interval_records < 1:
            raise ValueError("snapshot_interval_records must be >= 1")
        self.snapshot_interval_records = snapshot_interval_records
        self.cut_log_at_snapshot = cut_log_at_snapshot
        self.snapshots = QuorumSnapshots(
            self.data_dir / f"{METADATA_TOPIC}-{METADATA_PARTITION}")
        self.snapshot_loaded: OffsetAndEpoch | None = None  # at open
        self._last_snapshot_end = 0  # end offset of the newest snapshot (0: none)
        self._on_image = on_image
        self._on_committed = on_committed
        self._on_fatal = on_fatal
        self._lock = DataDirLock(self.data_dir)
        self._log: Log | None = None
        self._raft_log: FileRaftLog | None = None
        self._driver: QuorumDriver | None = None
        self._directory: VoterDirectory | None = None
        self.image = MetadataImage()
        self.active = False
        self._active_epoch = -1
        self._committed_end = 0  # the high watermark last seen

    @property
    def driver(self) -> QuorumDriver:
        if self._driver is None:
            raise RuntimeError("the metadata quorum is not open")
        return self._driver

    @property
    def replica(self) -> KRaftReplica:
        return self.driver.replica

    @property
    def high_watermark(self) -> int:
        return self.replica.high_watermark

    @property
    def log_start_offset(self) -> int:
        """Where the log starts (past 0 once cut at a snapshot: brokers' fetches below it
        are OFFSET_OUT_OF_RANGE)."""
        return self.replica.log.start_offset

    # -- lifecycle ---------------------------------------------------------------------

    def open(self) -> None:
        """Lock the directory, recover the log, build the replica and its driver."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        directory = self.data_dir / f"{METADATA_TOPIC}-{METADATA_PARTITION}"
        try:
            check_damage_is_only_a_torn_tail(directory)
            self._log = Log.open(directory, RAFT_LOG_CONFIG, recovery_point=0)
            raft_log = self._raft_log = FileRaftLog(self._log,
                                                    max_batch_records=self._max_batch_records)
            has_data = raft_log.end_offset > 0 or (self.data_dir / QUORUM_STATE_FILE).exists()
            self._directory = open_voter_directory(self.data_dir, has_data)
            loaded = self.snapshots.load_latest(raft_log.start_offset, raft_log.end_offset,
                                                raft_log.epoch_cache.epoch_for_offset)
            try:
                raft_log.start_at_snapshot(self._start_snapshot(raft_log, loaded))
            except ValueError as e:
                raise MetadataLogDamagedError(f"{directory}: {e}; restore {self.data_dir} "
                                              "from a backup (nothing was changed)") from None
            replica = KRaftReplica(self.node_id, list(self.voters), raft_log,
                                   QuorumStateFile(self.data_dir), self._clock,
                                   random.Random(), self._raft_config, self.snapshots,
                                   observer=self._directory.observer)
        except BaseException:
            self.close()
            raise
        if loaded is not None:
            self.snapshot_loaded, self.image = loaded
            self._last_snapshot_end = self.snapshot_loaded.end_offset
            log.info("metadata quorum: loaded snapshot %s (the log after it is replayed "
                     "as the high watermark is relearned)", self.snapshot_loaded)
        report = self._log.recovery_report
        if report.truncated_bytes:
            log.warning("metadata log: cut a torn tail of %d bytes at offset %s (%s)",
                        report.truncated_bytes, report.truncated_at_offset,
                        "; ".join(report.problems))
        peers = {v: a for v, a in self.voters.items() if v != self.node_id}
        self._driver = QuorumDriver(replica, peers, clock=self._clock, login=self._login,
                                    require_login=self._require_login,
                                    cluster_id=self._cluster_id, on_change=self._on_change)
        log.info("metadata quorum: voter %d of %s, epoch %d, role %s, log end %d%s",
                 self.node_id, sorted(self.voters), replica.epoch, replica.role.name,
                 raft_log.end_offset, ": a new directory (lost disk?), an observer until "
                 "caught up" if replica.observer else "")

    def _start_snapshot(self, raft_log: FileRaftLog,
                        loaded: tuple[OffsetAndEpoch, MetadataImage] | None
                        ) -> OffsetAndEpoch | None:
        """The snapshot the log continues at open: the newest valid one if it ends past
        the log (installed, the log not reset yet); else, for a log cut at its head, the
        snapshot ending exactly there (the log keeps an interval before the newest one),
        or the newest valid one; a log starting at 0 continues none."""
        if loaded is not None and loaded[0].end_offset > raft_log.end_offset:
            return loaded[0]
        if raft_log.start_offset == 0:
            return None
        at_start = [i for i, _p in self.snapshots.list() if i.end_offset == raft_log.start_offset]
        return at_start[0] if at_start else (None if loaded is None else loaded[0])

    def start(self) -> None:
        self.driver.start()

    async def stop(self) -> None:
        """Hand leadership over (EndQuorumEpoch) and stop the driver; no longer active."""
        self.active = False
        if self._driver is not None:
            await self._driver.stop()

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        self._lock.release()

    # -- the active controller's side -------------------------------------------------

    async def commit(self, records: Sequence[MetadataRecord], image: MetadataImage) -> None:
        """Append ``records`` (already applied to ``image`` at the offsets the log gives
        them) through the leader and return once they are committed; else raise
        :class:`NotCommittedError`."""
        if not records:
            return
        if not self.active or image is not self.image:
            raise NotCommittedError(ErrorCode.NOT_CONTROLLER,
                                    f"controller {self.node_id} is not the active controller")
        last = self.driver.propose([encode_record(r) for r in records])
        if last != image.last_applied_offset:
            # the image and the log disagree: a bug; stepping down rebuilds the image
            raise RuntimeError(f"{len(records)} records appended up to offset {last} but "
                               f"the image is at offset {image.last_applied_offset}")
        if not await self.driver.wait_committed(last, self._commit_timeout_ms):
            still = self.active and image is self.image
            raise NotCommittedError(
                ErrorCode.REQUEST_TIMED_OUT if still else ErrorCode.NOT_CONTROLLER,
                f"metadata records up to offset {last} not committed "
                + (f"within {self._commit_timeout_ms} ms" if still else
                   "before the controller lost its leadership"))

    def read_committed(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset``, every entry of them below the
        high watermark (at least one batch if any fits that, then up to ``max_bytes``)."""
        assert self._log is not None
        if offset < self._log.log_start_offset:
            return b""  # cut below the log start (the caller answers OFFSET_OUT_OF_RANGE)
        end = self.high_watermark
        out: list[bytes] = []
        size = 0
        for header, data in self._log.batches(offset):
            if header.next_offset > end or (out and size + len(data) > max_bytes):
                break
            out.append(bytes(data))
            size += len(data)
        return b"".join(out)

    # -- following the replica ----------------------------------------------------------

    def _on_change(self) -> None:
        """After every event that moved the high watermark, the role or the epoch.  A
        committed entry that cannot be applied stops the process (``on_fatal``): serving
        on without it would answer from metadata the quorum does not hold."""
        try:
            self._follow()
        except Exception as e:
            log.critical("metadata quorum: cannot apply the committed log: %r", e)
            self._on_fatal(e)

    def _follow(self) -> None:
        replica = self.replica
        if self._directory is not None and self._directory.observer and not replica.observer:
            self._directory = record_caught_up(self.data_dir, self._directory)
            log.info("metadata quorum: caught up as an observer (log end %d): a voter again",
                     replica.log.end_offset)
        leading = replica.role is QuorumRole.LEADER
        if self.active and not (leading and replica.epoch == self._active_epoch):
            log.info("metadata quorum: no longer the active controller (epoch %d, role %s, "
                     "leader %s): back to the committed image", replica.epoch,
                     replica.role.name, replica.leader_id)
            self.active = False
            self.image = self._newest_snapshot_image()
            self._apply_committed()
            self._on_image(self.image, False)
        elif self.active:
            self._take_leader_entries()
        else:
            if self.image.last_applied_offset + 1 < replica.log.start_offset:
                self.image = self._newest_snapshot_image()  # installed by FetchSnapshot
                self._last_snapshot_end = self.image.last_applied_offset + 1
                log.info("metadata quorum: image replaced by the snapshot up to offset %d",
                         self.image.last_applied_offset)
                self._on_image(self.image, False)
            self._apply_committed()
            if (leading and replica.high_watermark == replica.log.end_offset
                    and self.image.last_applied_offset + 1 == replica.high_watermark):
                self.active = True
                self._active_epoch = replica.epoch
                log.info("metadata quorum: active controller at epoch %d (offset %d)",
                         replica.epoch, replica.high_watermark)
                self._on_image(self.image, True)
        if replica.high_watermark != self._committed_end:
            self._committed_end = replica.high_watermark
            self._maybe_snapshot()
            self._on_committed()

    def _maybe_snapshot(self) -> None:
        """Write a snapshot of the committed image once ``snapshot_interval_records``
        entries were applied since the last one (the active controller's image only when
        it holds nothing uncommitted)."""
        replica, image = self.replica, self.image
        end = image.last_applied_offset + 1
        if end > replica.high_watermark or end - self._last_snapshot_end < \
                self.snapshot_interval_records:
            return
        written = self.snapshots.write(image, replica.log.epoch_cache.epoch_for_offset(end - 1))
        self._last_snapshot_end = written.end_offset
        older = self.snapshots.list()[0][0]  # the older of the two kept (or this one)
        cut = (self.cut_log_at_snapshot and self._raft_log is not None
               and self._raft_log.start_offset < older.end_offset < written.end_offset)
        if cut:
            assert self._raft_log is not None
            self._raft_log.advance_start_offset(older.end_offset, older.epoch)
        log.info("metadata quorum: wrote snapshot %s%s", written,
                 f" (log cut below the previous one, {older})" if cut else "")

    def _newest_snapshot_image(self) -> MetadataImage:
        """The newest valid snapshot's image not past the high watermark, else empty."""
        log_ = self.replica.log
        loaded = self.snapshots.load_latest(log_.start_offset, min(self.replica.high_watermark,
                                                                   log_.end_offset),
                                            log_.epoch_cache.epoch_for_offset)
        if loaded is None and log_.start_offset > 0:
            raise RuntimeError(f"no valid snapshot reaches the log start {log_.start_offset}")
        return MetadataImage() if loaded is None else loaded[1]

    def _take_leader_entries(self) -> None:
        """The leader appended LeaderChange entries of its own (one per observer that
        rejoins, :mod:`replication.raft.rejoin`): the speculative image takes their
        offsets, so the next records are applied where the log puts them."""
        replica, image = self.replica, self.image
        start = image.last_applied_offset + 1
        count = replica.log.end_offset - start
        if count <= 0:
            return
        for offset, entry in enumerate(replica.log.entries_from(start, count), start):
            if entry.payload != LEADER_CHANGE:
                return  # not the replica's: the next commit finds the image and log apart
            image.advance_to(offset)

    def _apply_committed(self) -> None:
        """Apply the log's entries from the image's end up to the high watermark."""
        replica, image = self.replica, self.image
        end = replica.high_watermark
        while image.last_applied_offset + 1 < end:
            start = image.last_applied_offset + 1
            entries = replica.log.entries_from(start, min(_APPLY_CHUNK, end - start))
            if not entries:
                raise RuntimeError(f"the log has no entry at offset {start} below the high "
                                   f"watermark {end}")
            for offset, entry in enumerate(entries, start):
                if entry.payload == LEADER_CHANGE:
                    image.advance_to(offset)
                else:
                    image.apply(decode_record(entry.payload), offset)


def controller_quorum(config: ControllerConfig, clock: Clock, cluster_secret: str,
                      on_image: Callable[[MetadataImage, bool], None],
                      on_committed: Callable[[], None],
                      on_fatal: Callable[[BaseException], None]) -> MetadataQuorum | None:
    """The quorum of a controller configured with several voters (None: one voter or
    none named, the single controller).  With a cluster secret voters log in to each
    other as ``controller-<id>`` (:func:`broker.auth.controller_login`) and require it."""
    voters = voter_map(config.controller_quorum_voters)
    if len(voters) <= 1:
        return None
    return MetadataQuorum(
        config.data_dir, config.node_id, voters, clock,
        raft_config=RaftConfig(election_timeout_ms=config.quorum_election_timeout_ms,
                               fetch_timeout_ms=config.quorum_fetch_timeout_ms),
        commit_timeout_ms=config.quorum_commit_timeout_ms,
        login=controller_login(cluster_secret, config.node_id),
        require_login=bool(cluster_secret), cluster_id=config.cluster_id,
        max_batch_records=config.metadata_max_batch_records,
        snapshot_interval_records=config.metadata_snapshot_interval_records,
        cut_log_at_snapshot=config.quorum_cut_log_at_snapshot,
        on_image=on_image, on_committed=on_committed, on_fatal=on_fatal)
