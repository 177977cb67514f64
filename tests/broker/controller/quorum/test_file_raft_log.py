"""FileRaftLog (the replica's log on the metadata log files) against the RaftLog contract:
the same random operations on it and on the reference MemoryRaftLog give the same log,
epochs and divergence answers; it survives a reopen; a crash keeps exactly the flushed
entries; truncation inside a batch ends exactly where asked; three KRaftReplicas on files
elect a leader and commit.
"""

from __future__ import annotations

import random
from collections import deque
from pathlib import Path

import pytest

from broker.controller.quorum.entry_batches import batches_to_entries, entries_to_batches
from broker.controller.quorum.file_raft_log import RAFT_LOG_CONFIG, FileRaftLog
from broker.metadata.records import FenceBrokerRecord, decode_record_batches, encode_record
from replication.raft.messages import Entry, OffsetAndEpoch, RaftMessage
from replication.raft.quorum_state import QuorumRole
from replication.raft.raft_log import MemoryRaftLog
from replication.raft.replica import LEADER_CHANGE, KRaftReplica
from replication.raft.state_file import QuorumStateFile
from storage.log.log import Log
from timer.clock import ManualClock


def _open(path: Path) -> tuple[Log, FileRaftLog]:
    log = Log.open(path / "__cluster_metadata-0", RAFT_LOG_CONFIG)
    return log, FileRaftLog(log, max_batch_records=3)


def _same(file_log: FileRaftLog, memory: MemoryRaftLog) -> None:
    assert file_log.end_offset == memory.end_offset
    assert file_log.last_epoch == memory.last_epoch
    assert list(file_log.entries_from(0, 10_000)) == list(memory.entries_from(0, 10_000))
    assert file_log.epoch_cache.entries == memory.epoch_cache.entries


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_match_the_reference_log(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    log, file_log = _open(tmp_path)
    memory = MemoryRaftLog()
    epoch = 0
    for _ in range(150):
        op = rng.random()
        if op < 0.5:
            epoch += rng.random() < 0.3
            batch = [Entry(epoch, LEADER_CHANGE if rng.random() < 0.1 else
                           rng.randbytes(rng.randrange(1, 20))) for _ in range(rng.randrange(1, 7))]
            file_log.append(batch)
            memory.append(batch)
        elif op < 0.7 and memory.end_offset:
            cut = rng.randrange(memory.end_offset + 1)
            file_log.truncate_to(cut)
            memory.truncate_to(cut)
        elif op < 0.85:
            file_log.flush()
            memory.flush()
            assert file_log.flushed_end_offset == memory.flushed_end_offset == memory.end_offset
        else:
            start = rng.randrange(memory.end_offset + 1)
            n = rng.randrange(1, 8)
            assert list(file_log.entries_from(start, n)) == list(memory.entries_from(start, n))
            ask = rng.randrange(epoch + 2)
            assert (file_log.epoch_cache.end_offset_for(ask, file_log.end_offset)
                    == memory.epoch_cache.end_offset_for(ask, memory.end_offset))
        assert file_log.flushed_end_offset <= file_log.end_offset
        _same(file_log, memory)
    file_log.flush()
    log.close()
    _reopened_log, reopened = _open(tmp_path)
    _same(reopened, memory)
    assert reopened.flushed_end_offset == memory.end_offset


def test_a_crash_keeps_the_flushed_entries_only(tmp_path: Path) -> None:
    log, file_log = _open(tmp_path)
    file_log.append([Entry(1, LEADER_CHANGE), Entry(1, b"a"), Entry(1, b"b")])
    file_log.flush()
    segment = next((tmp_path / "__cluster_metadata-0").glob("*.log"))
    flushed_bytes = segment.stat().st_size
    file_log.append([Entry(2, b"c"), Entry(2, b"d")])
    assert (file_log.end_offset, file_log.flushed_end_offset) == (5, 3)
    log.abandon()  # the process dies
    # what a power cut may leave of the unflushed write: a torn tail
    with segment.open("r+b") as f:
        f.truncate(flushed_bytes + 17)
    log, reopened = _open(tmp_path)
    assert log.recovery_report.truncated_bytes == 17
    assert (reopened.end_offset, reopened.flushed_end_offset, reopened.last_epoch) == (3, 3, 1)
    assert list(reopened.entries_from(0, 10)) == [Entry(1, LEADER_CHANGE), Entry(1, b"a"),
                                                  Entry(1, b"b")]
    reopened.append([Entry(3, b"e")])
    assert reopened.epoch_cache.end_offset_for(1, reopened.end_offset) == (1, 3)


def test_truncation_inside_a_batch_ends_where_asked(tmp_path: Path) -> None:
    log, file_log = _open(tmp_path)
    file_log.append([Entry(4, bytes([i])) for i in range(3)])  # one batch of 3
    file_log.flush()
    file_log.truncate_to(2)
    assert file_log.end_offset == 2
    assert file_log.flushed_end_offset == 0  # the kept entries were written again
    file_log.flush()
    assert list(file_log.entries_from(0, 5)) == [Entry(4, b"\x00"), Entry(4, b"\x01")]
    assert [h.base_offset for h, _d in log.batches(0)] == [0]


def test_leader_change_entries_are_control_batches_metadata_readers_skip() -> None:
    record = FenceBrokerRecord(broker_id=3, broker_epoch=5)
    data = entries_to_batches(7, [Entry(2, LEADER_CHANGE), Entry(2, encode_record(record))], 0)
    assert [(o, e.epoch) for o, e in batches_to_entries(data)] == [(7, 2), (8, 2)]
    assert decode_record_batches(data) == [(8, record)]


def test_three_replicas_on_files_elect_and_commit(tmp_path: Path) -> None:
    clock = ManualClock(0)
    ids = [1, 2, 3]
    logs = {i: _open(tmp_path / str(i))[1] for i in ids}
    nodes = {i: KRaftReplica(i, ids, logs[i], QuorumStateFile(tmp_path / str(i)), clock,
                             random.Random(i)) for i in ids}
    queue: deque[tuple[int, int, RaftMessage]] = deque()

    def step(ms: int) -> None:
        clock.advance(ms)
        for i in ids:
            queue.extend((i, s.destination, s.message) for s in nodes[i].poll())
        while queue:
            src, dst, message = queue.popleft()
            queue.extend((dst, s.destination, s.message) for s in nodes[dst].handle(src, message))

    for _ in range(400):
        step(10)
        if any(n.role is QuorumRole.LEADER for n in nodes.values()):
            break
    leader = next(n for n in nodes.values() if n.role is QuorumRole.LEADER)
    last = leader.append([b"x", b"y"])
    for _ in range(50):
        step(10)
    assert last is not None
    assert all(n.high_watermark == last + 1 for n in nodes.values())
    assert all(list(logs[i].entries_from(0, 10)) == list(logs[leader.node_id].entries_from(0, 10))
               for i in ids)
    state = QuorumStateFile(tmp_path / str(leader.node_id)).read()
    assert state is not None and state.leader_id == leader.node_id


def _same_from_start(file_log: FileRaftLog, memory: MemoryRaftLog) -> None:
    assert (file_log.start_offset, file_log.end_offset) == (memory.start_offset,
                                                            memory.end_offset)
    assert file_log.last_epoch == memory.last_epoch
    assert file_log.start_snapshot == memory.start_snapshot
    assert list(file_log.entries_from(file_log.start_offset, 10_000)) == \
        list(memory.entries_from(memory.start_offset, 10_000))
    assert file_log.epoch_cache.entries == memory.epoch_cache.entries


@pytest.mark.parametrize("seed", range(4))
def test_log_start_operations_match_the_reference_log(tmp_path: Path, seed: int) -> None:
    """Appends, truncations (never below the start), advancing the start (a snapshot)
    and resets to a fetched snapshot give the same log as MemoryRaftLog; reopened, the
    log continues its snapshot (start_at_snapshot) with the same entries and epochs."""
    rng = random.Random(seed)
    log, file_log = _open(tmp_path)
    memory = MemoryRaftLog()
    epoch = 0
    for _ in range(120):
        op = rng.random()
        if op < 0.5:
            epoch += rng.random() < 0.3
            batch = [Entry(epoch, rng.randbytes(rng.randrange(1, 9)))
                     for _ in range(rng.randrange(1, 5))]
            file_log.append(batch)
            memory.append(batch)
        elif op < 0.65 and memory.end_offset > memory.start_offset:
            cut = rng.randrange(memory.start_offset, memory.end_offset + 1)
            file_log.truncate_to(cut)
            memory.truncate_to(cut)
        elif op < 0.8 and memory.end_offset > memory.start_offset:
            start = rng.randrange(memory.start_offset + 1, memory.end_offset + 1)
            file_log.advance_start_offset(start)
            memory.advance_start_offset(start)
        elif op < 0.85:
            epoch += 1
            snapshot = OffsetAndEpoch(memory.end_offset + rng.randrange(1, 9), epoch)
            file_log.reset_to_snapshot(snapshot)
            memory.reset_to_snapshot(snapshot)
        else:
            file_log.flush()
            memory.flush()
        _same_from_start(file_log, memory)
        with pytest.raises(ValueError):
            file_log.truncate_to(memory.start_offset - 1) if memory.start_offset else \
                file_log.truncate_to(-1)
    file_log.flush()
    memory.flush()
    log.close()
    reopened_log, reopened = _open(tmp_path)
    reopened.start_at_snapshot(memory.start_snapshot)
    _same_from_start(reopened, memory)
    reopened_log.close()


def test_a_log_cut_at_its_head_without_a_snapshot_is_refused(tmp_path: Path) -> None:
    log, file_log = _open(tmp_path)
    file_log.reset_to_snapshot(OffsetAndEpoch(10, 2))
    file_log.append([Entry(3, b"a")])
    file_log.flush()
    log.close()
    log, reopened = _open(tmp_path)
    assert reopened.start_offset == 10
    with pytest.raises(ValueError, match="no valid snapshot reaches it"):
        reopened.start_at_snapshot(None)
    log.close()
