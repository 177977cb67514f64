"""The simulated disk a :class:`tests.sim.cluster.SimCluster`'s brokers keep their logs on.

:class:`SimDisk` runs the real :class:`storage.log.log.Log` (as
:class:`tests.sim.sim_log.SimLog`, which only observes it) in a directory, by default a
fresh one on tmpfs (``/dev/shm``: an fsync costs a system call, not a device flush), in
every mode.  A crash is a power cut that tears each segment's unflushed bytes (after the
log's recovery point, its own flush mark) at a random byte, sometimes with a flipped bit
or a garbage tail; a leader-epoch checkpoint write not yet made durable is undone; bit
rot flips a byte of a closed segment; a whole-cluster crash cuts bytes off the active
segment of the last ISR member; and the next open runs the real recovery, checked by
:meth:`SimDisk._check_recovered`.  No product code knows it runs in a simulation.

Why real files on tmpfs and not an injected in-memory file layer (measured with
``python3 -m bench.sim --seeds 6 --modes lossy,torn_disk,no_loss,rot --no-write`` on the
shared 2-core machine): the memory log ran lossy 8,177 and no_loss 8,325 steps/s, the
real log on /tmp torn_disk 2,851 and rot 1,977. The real log on tmpfs ran lossy 4,035
and no_loss 1,920 steps/s with the checks reading the files; a profile showed the
simulation's own checks (``batch_at`` and the replica digest walking every batch header
of every log, every step) taking two thirds of that time; fsync made a no-op changed
nothing measurable on tmpfs, and the default 10 MiB index mappings (created, msync'd and
unmapped at every roll, flush and crash) cost about 15%; the rest is the log's Python.
So the checks read :class:`SimLog`'s shadow index (as cheap as the memory log's prefix
sums) and the files stay real: an in-memory file layer would save only system calls that
cost little on tmpfs, at the price of a file abstraction through every storage module
(segments, indexes, checkpoints, snapshots, the cleaner's swap). After (with 4 KiB
indexes instead of 10 MiB mappings, and ``Log.batches(start)`` starting at the index
entry instead of the segment's first byte), measured right after the code before it on
the same machine: lossy 7,881 -> 5,932, torn_disk 2,493 -> 6,006, no_loss 8,743 ->
6,189, rot 1,885 -> 4,977 steps/s (bench/sim.py's docstring): the former memory-log
modes at 0.71-0.75 of their speed (what the storage code costs per append and read, in
Python), the real-log ones 2.4-2.6x faster.  Asked again when winning that speed back
(2026-11-29 c): system time is about 7% of a ``--seeds 30`` run (2.4 of 36 CPU seconds),
so a simulated file layer would still buy little; the Python around the files was the
cost (header objects built per batch, walks repeated per read, append and open), and
that is what went (bench/sim.py's docstring).

Every random number comes from the cluster's seeded ``rng`` (a seed replays exactly).
Costs: the disk reads segment files whole at crash, tear and rot time (segments are
16 KiB, or 1-2 KiB with retention, rot and compaction).  Single-threaded, like the whole
simulation.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clients.protocol.errors import CorruptRecordError, InvalidRecordError
from clients.protocol.topics import TopicPartition
from clients.records.batch import LOG_OVERHEAD, BatchHeader, iter_batches
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from storage.config import LogConfig
from storage.log.validator import validate_append_batches
from storage.partition_metadata import read_topic_id, write_topic_id
from storage.scrubber import DamagedRange, LogScrubber
from tests.sim.controller import TOPIC
from tests.sim.sim_log import SimLog

if TYPE_CHECKING:
    from tests.sim.broker import SimBroker
    from tests.sim.cluster import SimCluster


class SimDisk:
    """storage.log.Log (:class:`tests.sim.sim_log.SimLog`) in a directory. A crash is a
    power cut: what was fsync'd (every byte before the batch holding the recovery point)
    stays; of each segment's bytes after that a random prefix survives, torn anywhere
    (inside a batch header too), and may carry a flipped byte or be followed by garbage
    (a page written out of order). The next start runs the real log recovery on it
    (``had_clean_shutdown=False``)."""

    def __init__(self, cluster: SimCluster, root: Path) -> None:
        self.c = cluster
        self.root = root
        self._dirs: dict[tuple[int, int], Path] = {}  # (broker id, pid) -> log_dir
        self._topic_ids: dict[tuple[int, int], Any] = {}  # (broker id, pid) -> topic_id()
        flush = 1 if cluster.config.no_loss else None
        # with retention: small segments, three kept (the runs write tens of KiB)
        cfg = cluster.config
        segment = (cfg.retention_segment_bytes if cfg.retention_probability
                   else cfg.rot_segment_bytes if cfg.rot_probability
                   else cfg.compaction_segment_bytes if cfg.compaction_probability
                   else 16 * 1024)
        self.config = LogConfig(
            # 4 KiB indexes (a few entries per segment here): the default 10 MiB mapping
            # costs its creation, msync and unmap at every roll, flush and crash
            segment_bytes=segment, flush_messages=flush, segment_index_bytes=4096,
            retention_bytes=int(cfg.retention_segments * segment)
            if cfg.retention_probability else -1,
            **({"cleanup_policy": "compact", "segment_ms": cfg.compaction_segment_ms}
               if cfg.compaction_probability
               else {"segment_ms": cfg.retention_segment_ms} if cfg.retention_probability
               else {}))

    def log_dir(self, broker: SimBroker, pid: int) -> Path:
        found = self._dirs.get((broker.id, pid))
        if found is None:  # (paths built once: a Path join costs microseconds)
            found = self._dirs[(broker.id, pid)] = self.root / f"b{broker.id}" / f"t-{pid}"
        return found

    def open_log(self, broker: SimBroker, pid: int) -> SimLog:
        old = broker.logs.get(pid)
        rp = old.recovery_point if old is not None else 0
        log = SimLog.open(self.log_dir(broker, pid), self.config,
                          recovery_point=rp, had_clean_shutdown=False,
                          clock_ms=lambda: self.c.now_ms)
        assert isinstance(log, SimLog)
        log.on_truncate = self.c.on_truncate
        if old is not None:
            log.restarts = old.restarts  # counted over the replica's life, crashes and all
            self._check_recovered(broker, pid, log)
        return log

    def _check_recovered(self, broker: SimBroker, pid: int, log: SimLog) -> None:
        """Invariant after a restart: recovery left only whole batches with valid CRCs
        (but in a segment rot damaged: recovery leaves closed segments to the scrubber,
        or keeps what it found damaged in place for a repair) and contiguous offsets
        (ascending with compaction: it leaves holes), ending at the log end offset."""
        expected = log.log_start_offset
        rotted = self.c.rotted.get((broker.id, pid), (-1, -1))  # the scrubber's, not this
        try:
            for i, seg in enumerate(log.segments):
                if seg.base_offset == rotted[0] or seg.damage is not None:
                    # its headers may be garbage too
                    later = log.segments[i + 1:]
                    expected = max(expected, later[0].base_offset if later
                                   else log.log_end_offset)
                    continue
                for base, last in _batch_offsets(seg.log_path.read_bytes()):
                    if last < expected or (base > expected and not self.c.compacting):
                        raise InvalidRecordError(f"batch {base}-{last} after offset {expected}")
                    expected = last + 1
        except (CorruptRecordError, InvalidRecordError) as exc:
            self.c.fail(f"b{broker.id} t-{pid} after recovery: {exc}")
        if expected != log.log_end_offset:
            self.c.fail(f"b{broker.id} t-{pid} after recovery: batches end at {expected}, "
                        f"log end offset {log.log_end_offset}")

    def topic_id(self, broker: SimBroker, pid: int) -> bytes | int | None:
        """The replica's ``partition.metadata`` (read once after each write or delete:
        only :meth:`set_topic_id` and :meth:`delete_log` change the file)."""
        key = (broker.id, pid)
        if key not in self._topic_ids:
            self._topic_ids[key] = read_topic_id(self.log_dir(broker, pid))
        return self._topic_ids[key]

    def set_topic_id(self, broker: SimBroker, pid: int, topic_id: bytes | int) -> None:
        self._topic_ids.pop((broker.id, pid), None)
        write_topic_id(self.log_dir(broker, pid), topic_id)

    def delete_log(self, broker: SimBroker, pid: int) -> SimLog:
        self._topic_ids.pop((broker.id, pid), None)
        broker.logs.pop(pid).delete()
        return self.open_log(broker, pid)

    def crash(self, broker: SimBroker) -> int:
        lost = 0
        for pid, entries in broker.durable_epochs.items():  # a write not yet made durable
            checkpoint = LeaderEpochCheckpointFile(  # (LeaderEpochCache.sync) is lost
                self.log_dir(broker, pid) / LEADER_EPOCH_CHECKPOINT)
            if checkpoint.read() != list(entries):
                checkpoint.write(entries)
                self.c.stats["epoch_checkpoints_reverted"] += 1
        for log in broker.logs.values():
            recovery_point = log.recovery_point
            lost += log.log_end_offset - recovery_point
            unflushed = []
            for seg in log.segments:
                found = seg.find_batch(recovery_point)
                # a segment rolled after the last flush starts at its first batch: 0
                durable = seg.size if found is None else found.position
                if durable < seg.size:
                    unflushed.append((seg.log_path, durable, seg.size))
            log.abandon()
            for path, durable, size in unflushed:
                self._tear(path, durable, size)
        return lost

    def headers(self, broker: SimBroker, pid: int) -> list[BatchHeader]:
        """The batch headers in the replica's segment files (open or not; a damaged
        header ends its segment's walk)."""
        out = []
        for seg in broker.logs[pid].segments:
            try:
                out += [h for _, h in iter_batches(seg.log_path.read_bytes(), validate=False)]
            except (CorruptRecordError, InvalidRecordError):
                continue
        return out

    def tear_tail(self, broker: SimBroker, pid: int,
                  copies: set[tuple[int, int, int]]) -> str | None:
        """Cut 1-500 bytes off the stopped replica's active segment, ending inside a
        batch (a torn write the next open's recovery finds and cuts; a cut at a batch
        boundary would leave no trace, a documented limit: docs/replication.md) that,
        with every later one, another replica holds (``copies``, :meth:`FaultInjector.copies`);
        None: nothing to tear."""
        path = broker.logs[pid].segments[-1].log_path
        data = path.read_bytes()
        batches = list(iter_batches(data, validate=False))
        starts = {pos for pos, _ in batches} | {len(data)}
        low = len(data)  # the cut may start in a batch only if it and all later are copied
        for pos, h in reversed(batches):
            if (h.base_offset, h.crc, h.partition_leader_epoch) not in copies:
                break
            low = pos
        sizes = [n for n in range(max(low, len(data) - 500), len(data)) if n not in starts]
        if not sizes:
            return None
        kept = self.c.rng.choice(sizes)
        with open(path, "r+b") as f:
            f.truncate(kept)
        return f"{len(data) - kept} bytes cut off segment {path.name}"

    def _tear(self, path: Path, durable: int, size: int) -> None:
        rng = self.c.rng
        # half the time none of the unflushed bytes reached the disk (the page cache was
        # never written back: what the memory disk always did), else a random prefix
        kept = durable if rng.random() < 0.5 else rng.randint(durable, size)
        with open(path, "r+b") as f:
            f.truncate(kept)
            f.seek(durable)
            at = flippable(f.read(kept - durable), rng)
            if at is not None and rng.random() < 0.2:
                at += durable
                f.seek(at)
                byte = f.read(1)
                f.seek(at)
                f.write(bytes([byte[0] ^ (1 << rng.randrange(8))]))
                self.c.stats["flipped_unflushed_bytes"] += 1
            if rng.random() < 0.2:
                f.seek(kept)
                f.write(rng.randbytes(rng.randint(1, 64)))
                self.c.stats["garbage_tails"] += 1
        self.c.stats["torn_segments"] += kept < size

    def rot(self, broker: SimBroker, pid: int) -> tuple[int, int] | None:
        """Flip one CRC-covered byte of a random closed segment of ``broker``'s replica of
        ``pid``, below its HW and held whole by another replica (the guarantee is for
        records of which an intact copy exists); the segment's offset range (None: no
        such segment)."""
        rng, log = self.c.rng, broker.logs[pid]
        closed = log.segments[:-1]
        if not closed:
            return None
        i = rng.randrange(len(closed))
        seg, end = closed[i], log.segments[i + 1].base_offset
        hw = broker.partitions[pid].high_watermark
        if end > hw or not any(
                other.logs[pid].log_start_offset <= seg.base_offset
                and other.logs[pid].log_end_offset >= end
                for other in self.c.brokers.values() if other is not broker):
            return None
        batches = list(iter_batches(seg.read_bytes(0, seg.size), validate=False))
        pos, header = rng.choice(batches)
        at = rng.randrange(pos + 16, pos + header.size_in_bytes)  # magic on: checked
        with open(seg.log_path, "r+b") as f:
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ (1 << rng.randrange(8))]))
        log.reindex()  # the shadow holds what is on disk now
        return seg.base_offset, end

    def scrub(self, broker: SimBroker, pid: int) -> list[DamagedRange]:
        """One whole round of the broker's real scrubber over its replica of ``pid``."""
        scrubber = LogScrubber(self.root / f"b{broker.id}" / "scrubber-checkpoint",
                               step_bytes=1 << 20)
        found: list[DamagedRange] = []
        while scrubber.rounds_completed == 0:
            found += scrubber.step({TopicPartition(TOPIC, pid): broker.logs[pid]},
                                   self.c.now_ms)
        return found

    def apply_retention(self, broker: SimBroker, pid: int, high_watermark: int) -> int:
        log = broker.logs[pid]
        log.delete_old_segments(high_watermark)  # the broker's retention (LogManager)
        return log.log_start_offset



def _batch_offsets(data: bytes) -> Iterator[tuple[int, int]]:
    """(base offset, last offset) of each batch of a segment file, every batch checked
    (length, magic, CRC-32C, counts, codec): in one pass of the storage validator
    (tuples, no header objects) when the whole file is valid; otherwise the codec's
    checked walk, which yields the batches before the first bad one and raises there
    (the caller reads them in order, so its own finding may come first)."""
    try:
        infos = validate_append_batches(memoryview(data), len(data) + 1, require_records=False)
    except (CorruptRecordError, InvalidRecordError):
        for _, header in iter_batches(data):
            yield header.base_offset, header.last_offset
        return
    for _pos, _size, base, last_offset_delta, *_ in infos:
        yield base, base + last_offset_delta


def flippable(data: bytes, rng: random.Random) -> int | None:
    """A random position in ``data`` (batches from a batch boundary, maybe torn) outside
    every batch's base offset: a bit flipped there is not detected by log recovery (see
    storage.records.scan.scan_segment), and a flip the recovery cannot see is not a
    fault this simulation asserts anything about."""
    guarded: set[int] = set()
    pos = 0
    while pos + LOG_OVERHEAD <= len(data):  # base offset (8 bytes), batch length (4)
        guarded.update(range(pos, pos + 8))
        pos += LOG_OVERHEAD + max(0, int.from_bytes(data[pos + 8:pos + LOG_OVERHEAD], "big",
                                                   signed=True))
    candidates = [i for i in range(len(data)) if i not in guarded]
    return rng.choice(candidates) if candidates else None
