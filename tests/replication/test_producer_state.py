"""ProducerStateManager: the idempotence rules, one by one and against a plain model."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from clients.protocol.errors import CorruptRecordError, ErrorCode, MiniKafkaError
from clients.records.record import build_batch
from replication.leader_epoch_cache import LeaderEpochCache
from replication.partition import Partition
from replication.producer_state import (
    MAX_BATCHES_PER_PRODUCER,
    ProducerStateManager,
    Verdict,
    VerdictKind,
    next_sequence,
)
from storage.producer_snapshot import list_snapshot_offsets
from tests.replication.helpers import batch, make_partition, open_log, values

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Hdr:
    """The header fields the state reads (like clients.records.BatchHeader)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int = 1
    base_offset: int = 0
    max_timestamp: int = 1_000

    @property
    def last_sequence(self) -> int:
        return (self.base_sequence + self.count - 1) & INT32_MAX

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1


def append(state: ProducerStateManager, pid: int, epoch: int, seq: int, count: int,
           offset: int, ts: int = 1_000) -> Verdict:
    last = (seq + count - 1) & INT32_MAX
    verdict = state.check(pid, epoch, seq, last)
    if verdict.kind is VerdictKind.APPEND:
        state.update(pid, epoch, seq, last, offset, offset + count - 1, ts)
    return verdict


def test_new_producer_must_start_at_zero() -> None:
    state = ProducerStateManager("t-0")
    verdict = state.check(7, 0, 5, 5)
    assert verdict.kind is VerdictKind.ERROR
    assert verdict.error_code == ErrorCode.UNKNOWN_PRODUCER_ID
    assert "producer 7" in verdict.message and "sequence 5" in verdict.message
    assert state.check(7, 0, 0, 3).kind is VerdictKind.APPEND


def test_in_order_batches_append_and_gaps_are_out_of_order() -> None:
    state = ProducerStateManager("t-0")
    assert append(state, 1, 0, 0, 3, 0).kind is VerdictKind.APPEND
    assert append(state, 1, 0, 3, 2, 3).kind is VerdictKind.APPEND
    gap = state.check(1, 0, 6, 6)
    assert gap.kind is VerdictKind.ERROR
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "expected sequence 5, got 6" in gap.message
    overlap = state.check(1, 0, 4, 5)  # neither next nor an exact earlier batch
    assert overlap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_duplicate_of_any_of_the_last_five_returns_original_offsets() -> None:
    state = ProducerStateManager("t-0")
    for i in range(7):  # batches of 2 records at offsets 100 + 10 * i
        append(state, 1, 0, 2 * i, 2, 100 + 10 * i)
    for i in range(2, 7):
        verdict = state.check(1, 0, 2 * i, 2 * i + 1)
        assert verdict == Verdict(VerdictKind.DUPLICATE, first_offset=100 + 10 * i,
                                  last_offset=101 + 10 * i)
    # older than the last five: no longer recognised, and not in sequence
    assert state.check(1, 0, 2, 3).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    entry = state.entry(1)
    assert entry is not None and len(entry.batches) == MAX_BATCHES_PER_PRODUCER


def test_epochs_fence_and_restart_sequences() -> None:
    state = ProducerStateManager("t-0")
    append(state, 1, 3, 0, 5, 0)
    fenced = state.check(1, 2, 5, 5)
    assert fenced.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert "epoch 2 is older than the current epoch 3" in fenced.message
    assert state.check(1, 2, 0, 4).error_code == ErrorCode.INVALID_PRODUCER_EPOCH  # not a dup
    assert state.check(1, 4, 5, 5).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(state, 1, 4, 0, 1, 5).kind is VerdictKind.APPEND
    # the new epoch's state forgot the old epoch's batches
    assert state.check(1, 4, 0, 0).kind is VerdictKind.DUPLICATE
    assert state.check(1, 3, 0, 4).error_code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_sequence_wraps_from_int32_max_to_zero() -> None:
    assert next_sequence(INT32_MAX) == 0 and next_sequence(5) == 6
    state = ProducerStateManager("t-0")
    state.update(1, 0, INT32_MAX - 2, INT32_MAX - 1, 0, 1, 1_000)
    assert append(state, 1, 0, INT32_MAX, 3, 2).kind is VerdictKind.APPEND  # MAX, 0, 1
    entry = state.entry(1)
    assert entry is not None and entry.batches[-1].last_seq == 1
    assert state.check(1, 0, 2, 2).kind is VerdictKind.APPEND
    assert state.check(1, 0, INT32_MAX, 1).kind is VerdictKind.DUPLICATE


def test_non_idempotent_and_invalid_batches() -> None:
    state = ProducerStateManager("t-0")
    assert state.check(-1, -1, -1, -1).kind is VerdictKind.APPEND
    state.update(-1, -1, -1, -1, 0, 0, 0)
    assert len(state) == 0
    bad = state.check(1, -1, 0, 0)
    assert bad.error_code == ErrorCode.INVALID_RECORD
    assert state.check(1, 0, -1, -1).error_code == ErrorCode.INVALID_RECORD


def test_check_append_treats_a_request_as_a_sequence() -> None:
    state = ProducerStateManager("t-0")
    two = [Hdr(1, 0, 0, 2), Hdr(1, 0, 2, 3)]
    assert state.check_append(two).kind is VerdictKind.APPEND
    assert state.check_append([Hdr(1, 0, 0, 2), Hdr(1, 0, 3, 1)]).error_code == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    for h, offset in zip(two, (10, 12), strict=True):
        state.update(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                     offset, offset + h.count - 1, 1_000)
    dup = state.check_append(two)
    assert (dup.kind, dup.first_offset, dup.last_offset) == (VerdictKind.DUPLICATE, 10, 14)
    mixed = state.check_append([Hdr(1, 0, 2, 3), Hdr(1, 0, 5, 1)])
    assert mixed.error_code == ErrorCode.INVALID_REQUEST and "mixes" in mixed.message
    assert state.check_append([Hdr(-1, -1, -1)]).kind is VerdictKind.APPEND
    assert state.check_append([Hdr(2, 0, 0), Hdr(-1, -1, -1)]).kind is VerdictKind.APPEND


def test_snapshot_load_round_trip_and_bounds() -> None:
    state = ProducerStateManager("t-0", max_producers=3)
    for pid in range(5):
        append(state, pid, 1, 0, 2, 10 * pid, ts=1_000 + pid)
    assert sorted(e.producer_id for e in state.entries()) == [2, 3, 4]  # LRU evicted 0, 1
    assert state.evicted == 2
    append(state, 2, 1, 2, 1, 100, ts=5_000)  # producer 2 becomes the most recent
    append(state, 9, 0, 0, 1, 101, ts=5_000)
    assert 3 not in state and 2 in state
    copy = ProducerStateManager("t-0")
    copy.load(state.snapshot())
    assert copy.snapshot() == state.snapshot()
    assert copy.check(2, 1, 0, 1) == Verdict(VerdictKind.DUPLICATE, first_offset=20,
                                              last_offset=21)
    # expiry runs on the sweeper's clock: batch timestamps from 1970 do not matter
    expiration = copy.producer_id_expiration_ms
    assert copy.remove_expired(now_ms=10**12) == 0  # first sweep: everyone just seen
    append(copy, 9, 0, 1, 1, 102)  # producer 9 writes again
    assert copy.remove_expired(now_ms=10**12 + 5) == 0  # stamps 9 at 10**12 + 5
    assert copy.remove_expired(now_ms=10**12 + expiration - 1) == 0
    assert copy.remove_expired(now_ms=10**12 + expiration) == 2  # 2 and 4
    assert [e.producer_id for e in copy.entries()] == [9]
    assert copy.remove_expired(now_ms=10**12 + expiration + 4) == 0
    assert copy.remove_expired(now_ms=10**12 + expiration + 5) == 1
    with pytest.raises(ValueError, match="max_producers"):
        ProducerStateManager(max_producers=0)


# -- property test against a plain model ------------------------------------------------


@dataclass
class Model:
    """Every appended batch of every producer; the rules recomputed from scratch."""

    batches: dict[int, list[tuple[int, int, int, int, int]]] = field(default_factory=dict)

    def verdict(self, pid: int, epoch: int, first: int, last: int) -> tuple[str, int, int]:
        history = self.batches.get(pid)
        if not history:
            return ("append", -1, -1) if first == 0 else ("error", ErrorCode.UNKNOWN_PRODUCER_ID,
                                                          -1)
        current = history[-1][0]
        if epoch < current:
            return "error", ErrorCode.INVALID_PRODUCER_EPOCH, -1
        same_epoch = [b for b in history if b[0] == current][-5:]
        if epoch == current:
            for _e, f, l_, fo, lo in same_epoch:
                if (f, l_) == (first, last):
                    return "duplicate", fo, lo
            expected = (same_epoch[-1][2] + 1) % 2**31
            return ("append", -1, -1) if first == expected else (
                "error", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        return ("append", -1, -1) if first == 0 else (
            "error", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)


ATTEMPT = st.tuples(
    st.integers(0, 2),  # producer id
    st.sampled_from(["next"] * 6 + ["retry"] * 3 + ["gap", "bump", "old", "zero"]),
    st.integers(0, 7),  # how far back a retry reaches
    st.integers(1, 4),  # records in the batch
)


@settings(max_examples=300, deadline=None)
@example([(0, "next", 0, 1)] * 6 + [(0, "retry", 4, 1), (0, "retry", 5, 1)], 0)  # window
@example([(0, "next", 0, 4), (0, "next", 0, 1), (0, "retry", 0, 1)], INT32_MAX - 3)  # wrap
@given(st.lists(ATTEMPT, max_size=80), st.sampled_from([0, INT32_MAX - 5, INT32_MAX - 3]))
def test_matches_model_and_never_appends_twice(attempts: list, start_seq: int) -> None:
    state = ProducerStateManager("t-0")
    model = Model()
    sent: dict[int, list[tuple[int, int, int]]] = {}  # what each producer sent
    epochs = {0: 0, 1: 0, 2: 0}
    nexts = {0: start_seq, 1: start_seq, 2: start_seq}
    offset = 0
    appended: set[tuple[int, int, int, int]] = set()
    if start_seq:  # the producers already wrote up to start_seq - 1 (reach the wrap)
        for pid in nexts:
            state.update(pid, 0, start_seq - 1, start_seq - 1, offset, offset, 0)
            model.batches[pid] = [(0, start_seq - 1, start_seq - 1, offset, offset)]
            offset += 1
    for i, (pid, kind, back, count) in enumerate(attempts):
        epoch, seq = epochs[pid], nexts[pid]
        if kind == "retry" and sent.get(pid):
            epoch, seq, count = sent[pid][max(0, len(sent[pid]) - 1 - back)]
        elif kind == "gap":
            seq = (seq + 1 + back) % 2**31
        elif kind == "bump":
            epochs[pid] = epoch = epoch + 1
            seq = 0
        elif kind == "old":
            epoch = max(0, epoch - 1)
        elif kind == "zero":
            seq = 0
        last = (seq + count - 1) % 2**31
        expected = model.verdict(pid, epoch, seq, last)
        got = state.check(pid, epoch, seq, last)
        if got.kind is VerdictKind.ERROR:
            assert expected[:2] == ("error", got.error_code), (i, expected, got)
            continue
        if got.kind is VerdictKind.DUPLICATE:
            assert expected == ("duplicate", got.first_offset, got.last_offset)
            continue
        assert expected[0] == "append", (i, expected, got)
        key = (pid, epoch, seq, last)
        assert key not in appended, f"batch {key} appended twice"
        appended.add(key)
        state.update(pid, epoch, seq, last, offset, offset + count - 1, 1_000 + i)
        model.batches.setdefault(pid, []).append((epoch, seq, last, offset, offset + count - 1))
        sent.setdefault(pid, []).append((epoch, seq, count))
        epochs[pid], nexts[pid] = epoch, (last + 1) % 2**31
        offset += count
        if i % 7 == 0:  # a snapshot round trip never changes a verdict
            restored = ProducerStateManager("t-0")
            restored.load(state.snapshot())
            state = restored


# -- wired into a Partition with a real log ---------------------------------------------


def idem(pid: int, epoch: int, seq: int, *values: bytes, base_offset: int = 0) -> bytes:
    return build_batch([(None, v, 1_000 + i, ()) for i, v in enumerate(values)],
                       base_offset=base_offset, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq)


def leader(root: Path, broker_id: int = 1) -> Partition:
    p = make_partition(root, broker_id)
    p.make_leader(1, [broker_id], [broker_id])
    return p


def test_leader_appends_once_and_answers_retries_with_original_offsets(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append_records_as_leader(batch(b"plain"))
    first = p.append_records_as_leader(idem(5, 0, 0, b"a", b"b"))
    retry = p.append_records_as_leader(idem(5, 0, 0, b"a", b"b"))
    assert (first.first_offset, first.last_offset) == (1, 2)
    assert (retry.first_offset, retry.last_offset, retry.num_batches) == (1, 2, 0)
    assert values(p.log) == [(0, b"plain"), (1, b"a"), (2, b"b")]
    with pytest.raises(MiniKafkaError) as gap:
        p.append_records_as_leader(idem(5, 0, 3, b"c"))
    assert gap.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(MiniKafkaError) as unknown:
        p.append_records_as_leader(idem(6, 0, 4, b"c"))
    assert unknown.value.code == ErrorCode.UNKNOWN_PRODUCER_ID
    p.append_records_as_leader(idem(5, 1, 0, b"new epoch"))
    with pytest.raises(MiniKafkaError) as fenced:
        p.append_records_as_leader(idem(5, 0, 2, b"zombie"))
    assert fenced.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert p.log_end_offset == 4


def test_follower_state_lets_it_detect_duplicates_after_becoming_leader(
        tmp_path: Path) -> None:
    lead = leader(tmp_path / "a", 1)
    lead.append_records_as_leader(idem(5, 0, 0, b"a"))
    lead.append_records_as_leader(idem(5, 0, 1, b"b", b"c"))
    follower = make_partition(tmp_path / "b", 2)
    follower.make_follower(1, 1, [1, 2])
    follower.append_records_as_follower(lead.read_records(0, 1 << 20, for_follower=True)
                                        .read_bytes(), leader_high_watermark=3)
    follower.make_leader(2, [1, 2], [2])
    dup = follower.append_records_as_leader(idem(5, 0, 1, b"b", b"c"))
    assert (dup.first_offset, dup.last_offset, dup.num_batches) == (1, 2, 0)
    assert follower.append_records_as_leader(idem(5, 0, 3, b"d")).first_offset == 3


def test_state_is_rebuilt_from_snapshot_plus_log_and_after_truncation(
        tmp_path: Path) -> None:
    p = leader(tmp_path)
    for seq in range(3):
        p.append_records_as_leader(idem(5, 0, seq, f"v{seq}".encode()))
    assert p.take_producer_snapshot()
    assert not p.take_producer_snapshot()  # unchanged since
    p.append_records_as_leader(idem(5, 0, 3, b"v3"))
    directory = Path(p.log.dir)
    assert list_snapshot_offsets(directory) == [3]
    p.log.close()
    reopened = make_partition(tmp_path, 1)  # snapshot at 3 + replay of offset 3
    reopened.make_leader(2, [1], [1])
    assert reopened.append_records_as_leader(idem(5, 0, 3, b"v3")).num_batches == 0
    assert reopened.append_records_as_leader(idem(5, 0, 0, b"v0")).first_offset == 0
    reopened.take_producer_snapshot()
    assert list_snapshot_offsets(directory) == [3, 4]
    reopened.make_follower(7, 3, [1, 7])
    reopened.truncate_to(2)
    assert list_snapshot_offsets(directory) == []  # both describe offsets now gone
    entry = reopened.producer_state.entry(5)
    assert entry is not None and entry.batches[-1].last_seq == 1
    reopened.truncate_fully_and_start_at(10)
    assert len(reopened.producer_state) == 0


def test_corrupt_snapshot_is_ignored_and_state_rebuilt_from_log(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    p = leader(tmp_path)
    p.append_records_as_leader(idem(5, 0, 0, b"a"))
    p.append_records_as_leader(idem(5, 0, 1, b"b"))
    p.take_producer_snapshot()
    path = Path(p.log.dir) / "00000000000000000002.snapshot"
    path.write_bytes(path.read_bytes()[:-3])
    p.log.close()
    with caplog.at_level(logging.WARNING):
        reopened = make_partition(tmp_path, 1)
    assert "ignoring producer snapshot" in caplog.text and str(path) in caplog.text
    entry = reopened.producer_state.entry(5)
    assert entry is not None and [b.first_offset for b in entry.batches] == [0, 1]


def test_a_roll_writes_a_snapshot_at_the_new_segment_base(tmp_path: Path) -> None:
    p = leader(tmp_path)  # 4 KiB segments
    seq = 0
    while len(p.log.segments) < 3:
        p.append_records_as_leader(idem(5, 0, seq, b"x" * 500))
        seq += 1
    bases = [s.base_offset for s in p.log.segments]
    assert list_snapshot_offsets(Path(p.log.dir)) == bases[1:]


def test_corrupt_bytes_are_reported_as_corrupt_not_as_a_sequence_error(
        tmp_path: Path) -> None:
    p = leader(tmp_path)
    data = bytearray(idem(5, 0, 0, b"a"))
    data[43:51] = (77).to_bytes(8, "big")  # producer id changed in flight: CRC mismatch
    data[53:57] = (9).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="CRC"):
        p.append_records_as_leader(bytes(data))
    assert p.log_end_offset == 0 and len(p.producer_state) == 0


def test_a_failed_roll_snapshot_still_records_the_appended_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = leader(tmp_path)

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("replication.producer_state_store.write_snapshot", disk_full)
    seq = 0
    while len(p.log.segments) < 2:
        data = idem(5, 0, seq, b"x" * 500)
        p.append_records_as_leader(data)
        seq += 1
    assert p.append_records_as_leader(data).num_batches == 0  # the retry is a duplicate


def test_a_log_without_idempotent_producers_is_not_replayed_again(tmp_path: Path) -> None:
    p = leader(tmp_path)
    for i in range(3):
        p.append_records_as_leader(batch(b"plain %d" % i))
    assert p.take_producer_snapshot()  # empty, but marks where a replay would start
    p.log.close()
    log = open_log(tmp_path / "b1")
    replayed: list[int | None] = []
    original = log.batches

    def spy(start_offset: int | None = None) -> Any:
        replayed.append(start_offset)
        return original(start_offset)

    log.batches = spy  # type: ignore[method-assign]
    Partition("t", 0, log, 1, leader_epoch_cache=LeaderEpochCache())
    assert replayed == []  # the snapshot is at the log end: nothing to replay


def test_running_snapshots_skip_fsync_and_a_power_cut_falls_back_to_the_durable_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots on the checkpoint timer and on rolls are written without fsync (none on
    the event loop); the shutdown's one is fsync'd, and retention keeps it while newer
    ones may be lost.  A power cut that tears every newer one leaves the state rebuilt
    from it plus the log, the same as before."""
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    p = leader(tmp_path)
    directory = Path(p.log.dir)
    p.append_records_as_leader(idem(5, 0, 0, b"a"))
    fsyncs.clear()
    assert p.take_producer_snapshot(durable=True)  # a clean shutdown's
    assert len(fsyncs) == 2  # the file and its directory
    durable = list_snapshot_offsets(directory)
    for seq in range(1, 6):  # the timer's, while the broker runs
        p.append_records_as_leader(idem(5, 0, seq, b"v%d" % seq))
        fsyncs.clear()
        assert p.take_producer_snapshot()
        assert fsyncs == []
    kept = list_snapshot_offsets(directory)
    assert durable[0] in kept and len(kept) == 4  # the 3 newest and the durable one
    expected = repr(p.producer_state.entry(5))  # epoch and its last batches
    p.log.close()
    for offset in kept[1:]:  # a power cut: what was never fsync'd is torn
        path = directory / f"{offset:020d}.snapshot"
        path.write_bytes(path.read_bytes()[:10])
    reopened = make_partition(tmp_path, 1)
    assert repr(reopened.producer_state.entry(5)) == expected
    assert list_snapshot_offsets(directory) == durable
