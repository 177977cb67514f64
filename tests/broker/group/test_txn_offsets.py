"""Transactional offset commits in the group coordinator: the pending state on its own,
TxnOffsetCommit and the marker hook driven with a ManualClock and an in-memory offsets
log, and the load of an offsets partition from hand-built batches (transactional batches
and COMMIT/ABORT control batches)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from broker.group.metadata import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from broker.group.offsets_topic import load_batches
from broker.group.protocol import Done, TxnProducer
from broker.group.txn_offsets import PendingTxnOffsets
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from clients.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, set_base_offset
from clients.records.control import ControlType, build_marker_batch
from clients.records.record import build_batch
from tests.broker.group.test_coordinator import Box, Harness, MemoryLog

TP = TopicPartition("t", 0)
PID = 7


def value(offset: int) -> OffsetCommitValue:
    return OffsetCommitValue(offset, -1, "", 1_000)


# -- the pending state on its own ------------------------------------------------------------


def test_pending_offsets_commit_abort_and_failed_writes() -> None:
    pending = PendingTxnOffsets()
    first = pending.prepare(PID, TP, value(10))
    assert pending.has_pending(TP) and pending.producers() == [PID]
    assert pending.written(first, 100) is None
    second = pending.prepare(PID, TP, value(11))  # replaces it, write in flight
    pending.failed(PID, TP, second)  # never in the log: the written one is back
    assert pending.pending(PID) == {TP: value(10)}
    assert pending.complete(PID, committed=True) == [(TP, value(10), 100)]
    assert not pending and not pending.has_pending(TP)

    aborted = pending.prepare(8, TP, value(5))
    pending.written(aborted, 101)
    assert pending.complete(8, committed=False) == []
    assert not pending


def test_a_commit_while_the_write_is_in_flight_applies_it_once_written() -> None:
    pending = PendingTxnOffsets()
    entry = pending.prepare(PID, TP, value(10))
    assert pending.complete(PID, committed=True) == []  # nothing written yet
    assert pending.has_pending(TP)  # still pending for require_stable until it lands
    assert pending.written(entry, 100) == (TP, value(10), 100)
    assert not pending

    lost = pending.prepare(PID, TP, value(11))
    pending.complete(PID, committed=True)
    pending.failed(PID, TP, lost)  # the write failed: nothing to apply, nothing left
    assert not pending


# -- TxnOffsetCommit and the marker hook --------------------------------------------------------


class TxnLog(MemoryLog):
    """MemoryLog that records each batch's producer and can hold writes in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.producers: list[TxnProducer | None] = []
        self.hold = False
        self.held: list[tuple[Done, int]] = []

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               done: Done, producer: TxnProducer | None = None) -> None:
        self.producers.append(producer)
        if not self.hold:
            super().append(partition, records, done)
            return
        base = len(self.records)
        self.records.extend((k, v, base + i) for i, (k, v) in enumerate(records))
        self.held.append((done, base))

    def release(self, code: ErrorCode = ErrorCode.NONE) -> None:
        held, self.held = self.held, []
        for done, base in held:
            done(code, base if code == ErrorCode.NONE else -1)


def txn_commit(h: Harness, offset: int, *, producer_id: int = PID, group: str = "g",
               generation: int = -1, member_id: str = "", epoch: int = 0) -> Box:
    box = Box()
    h.c.commit_txn_offsets({
        "transactional_id": "tx", "group_id": group, "producer_id": producer_id,
        "producer_epoch": epoch, "generation_id": generation, "member_id": member_id,
        "group_instance_id": None, "topics": [{"name": "t", "partitions": [{
            "partition_index": 0, "committed_offset": offset, "committed_leader_epoch": 2,
            "committed_metadata": "tx-meta"}]}]}, box)
    return box


def code_of(box: Box) -> ErrorCode:
    return ErrorCode(box.answer["topics"][0]["partitions"][0]["error_code"])


def fetch(h: Harness, require_stable: bool = False, group: str = "g") -> dict[str, Any]:
    code, topics = h.c.fetch_offsets(group, [{"name": "t", "partition_indexes": [0]}],
                                     require_stable)
    assert code == ErrorCode.NONE
    return topics[0]["partitions"][0]  # type: ignore[no-any-return]


def test_txn_offsets_are_pending_until_the_commit_marker() -> None:
    log = TxnLog()
    h = Harness(log=log)
    assert code_of(txn_commit(h, 42)) == ErrorCode.NONE
    assert log.producers == [TxnProducer(PID, 0)]  # a transactional batch of the producer
    assert fetch(h)["committed_offset"] == -1  # invisible
    unstable = fetch(h, require_stable=True)
    assert unstable["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert unstable["committed_offset"] == -1
    h.c.complete_txn(1, PID, committed=True)  # another partition's marker: nothing
    assert fetch(h)["committed_offset"] == -1
    h.c.complete_txn(0, 99, committed=True)  # another producer's marker: nothing
    assert fetch(h)["committed_offset"] == -1
    h.c.complete_txn(0, PID, committed=True)
    stable = fetch(h, require_stable=True)
    assert (stable["error_code"], stable["committed_offset"], stable["metadata"],
            stable["committed_leader_epoch"]) == (0, 42, "tx-meta", 2)
    assert h.c.manager.txn_producers == {}


def test_an_abort_drops_the_pending_offsets() -> None:
    h = Harness(log=TxnLog())
    h.commit("", -1, 5)
    assert code_of(txn_commit(h, 42)) == ErrorCode.NONE
    h.c.complete_txn(0, PID, committed=False)
    assert fetch(h, require_stable=True)["committed_offset"] == 5
    h.c.complete_txn(0, PID, committed=True)  # a late marker finds nothing to commit
    assert fetch(h)["committed_offset"] == 5


def test_a_commit_marker_wins_only_over_older_commits_in_log_order() -> None:
    h = Harness(log=TxnLog())
    assert code_of(txn_commit(h, 42)) == ErrorCode.NONE  # log position 0
    h.commit("", -1, 50)  # a plain commit later in the log (position 1)
    h.c.complete_txn(0, PID, committed=True)
    assert fetch(h)["committed_offset"] == 50  # the transactional one is older
    assert code_of(txn_commit(h, 60)) == ErrorCode.NONE  # position 2: newer
    h.c.complete_txn(0, PID, committed=True)
    assert fetch(h)["committed_offset"] == 60


def test_a_commit_marker_during_the_write_applies_the_offset_once_written() -> None:
    log = TxnLog()
    h = Harness(log=log)
    log.hold = True
    box = txn_commit(h, 42)
    assert not box.answers
    assert fetch(h, require_stable=True)["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    h.c.complete_txn(0, PID, committed=True)
    assert fetch(h)["committed_offset"] == -1
    log.release()
    assert code_of(box) == ErrorCode.NONE
    assert fetch(h, require_stable=True)["committed_offset"] == 42


def test_a_failed_write_is_answered_and_leaves_nothing_pending() -> None:
    log = TxnLog()
    h = Harness(log=log)
    log.fail_with = ErrorCode.INVALID_PRODUCER_EPOCH  # the producer state's answer
    assert code_of(txn_commit(h, 42)) == ErrorCode.INVALID_PRODUCER_EPOCH
    log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    assert code_of(txn_commit(h, 42)) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert fetch(h, require_stable=True)["error_code"] == 0
    assert "g" not in h.c.groups  # created for the commit, dropped: it holds nothing
    assert h.c.manager.txn_producers == {}


def test_plain_commits_in_flight_are_unstable_too() -> None:
    log = TxnLog()
    h = Harness(log=log)
    log.hold = True
    box = Box()
    h.c.commit_offsets({"group_id": "g", "generation_id": -1, "member_id": "",
                        "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                            {"partition_index": 0, "committed_offset": 3,
                             "committed_leader_epoch": -1, "committed_metadata": None}]}]},
                       box)
    assert fetch(h, require_stable=True)["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert fetch(h)["error_code"] == 0
    log.release()
    assert fetch(h, require_stable=True)["committed_offset"] == 3


def test_member_and_generation_checks_of_v3() -> None:
    h = Harness(log=TxnLog())
    (a, _b), generation = h.stable_group(2)
    # v0-2 (no member): accepted whatever the group's state
    assert code_of(txn_commit(h, 1)) == ErrorCode.NONE
    assert code_of(txn_commit(h, 1, member_id=a, generation=generation)) == ErrorCode.NONE
    assert code_of(txn_commit(h, 1, member_id="nobody", generation=generation)) == \
        ErrorCode.UNKNOWN_MEMBER_ID
    assert code_of(txn_commit(h, 1, member_id=a, generation=generation + 1)) == \
        ErrorCode.ILLEGAL_GENERATION
    assert code_of(txn_commit(h, 1, member_id="", generation=generation)) == \
        ErrorCode.UNKNOWN_MEMBER_ID
    assert code_of(txn_commit(h, 1, producer_id=-1)) == ErrorCode.INVALID_REQUEST
    h.c.unload(0)
    assert code_of(txn_commit(h, 1)) == ErrorCode.NOT_COORDINATOR


def test_unload_forgets_pending_offsets_and_a_reload_brings_them_back() -> None:
    log = TxnLog()
    h = Harness(log=log)
    assert code_of(txn_commit(h, 42)) == ErrorCode.NONE
    h.c.unload(0)
    assert h.c.manager.txn_producers == {}
    h.c.begin_load(0, 1)
    for key, val, offset in log.records:
        h.c.load_record(0, key, val, offset, txn_producer_id=PID)
    h.c.finish_load(0)
    assert fetch(h, require_stable=True)["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert h.c.manager.txn_producers == {PID: {"g"}}
    h.c.complete_txn(0, PID, committed=True)
    assert fetch(h)["committed_offset"] == 42


# -- loading: transactional batches and markers from the log ---------------------------------


def offset_record(group: str, offset: int | None) -> tuple[bytes, bytes | None]:
    return (encode_offset_commit_key(OffsetCommitKey(group, "t", 0)),
            None if offset is None else encode_offset_commit_value(value(offset)))


def at(batch: bytes, base_offset: int) -> bytes:
    buf = bytearray(batch)
    set_base_offset(buf, base_offset)
    return bytes(buf)


def plain(base: int, *records: tuple[bytes, bytes | None]) -> bytes:
    return build_batch([(k, v, 1_000, ()) for k, v in records], base_offset=base)


def txn(base: int, pid: int, *records: tuple[bytes, bytes | None]) -> bytes:
    return build_batch([(k, v, 1_000, ()) for k, v in records], base_offset=base,
                       producer_id=pid, producer_epoch=0, base_sequence=0,
                       attributes=TRANSACTIONAL_MASK)


def marker(base: int, pid: int, commit: bool) -> bytes:
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    return at(build_marker_batch(pid, 0, kind, 0, 1_000), base)


def loaded(*batches: bytes, end: int) -> Harness:
    """A coordinator that loaded ``batches`` (the partition's log up to ``end``)."""
    h = Harness(log=TxnLog())
    h.c.unload(0)
    h.c.begin_load(0, 1)
    assert load_batches(h.c, 0, b"".join(batches), 0) == end
    h.c.finish_load(0)
    return h


def test_load_commits_at_commit_markers_and_drops_at_aborts() -> None:
    h = loaded(
        plain(0, offset_record("g", 5)),
        txn(1, 7, offset_record("g", 10), offset_record("h", 11)),  # offsets 1-2
        txn(3, 8, offset_record("g", 99)),
        marker(4, 7, commit=True),
        marker(5, 8, commit=False),
        txn(6, 9, offset_record("open", 1)),  # no marker: still pending
        end=7)
    assert fetch(h)["committed_offset"] == 10
    assert fetch(h, group="h")["committed_offset"] == 11
    assert fetch(h, group="open", require_stable=True)["error_code"] == \
        ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert fetch(h, group="open")["committed_offset"] == -1
    assert h.c.manager.txn_producers == {9: {"open"}}
    h.c.complete_txn(0, 9, committed=True)  # its marker comes after the load
    assert fetch(h, group="open")["committed_offset"] == 1


def test_load_applies_a_committed_offset_only_over_older_ones() -> None:
    h = loaded(
        txn(0, 7, offset_record("g", 10)),
        plain(1, offset_record("g", 20)),  # later in the log than the txn record
        marker(2, 7, commit=True),
        plain(3, offset_record("h", 1)),
        txn(4, 8, offset_record("h", 30)),
        marker(5, 8, commit=True),
        end=6)
    assert fetch(h)["committed_offset"] == 20
    assert fetch(h, group="h")["committed_offset"] == 30


def test_load_skips_a_damaged_marker_and_a_txn_tombstone_drops_the_pending_offset() -> None:
    junk = at(build_batch([(b"\x00", b"\x00", 1_000, ())], producer_id=7, producer_epoch=0,
                          attributes=TRANSACTIONAL_MASK | CONTROL_MASK), 3)
    h = loaded(
        txn(0, 7, offset_record("g", 10)),
        txn(1, 8, offset_record("g", 11), offset_record("g", None)),  # offsets 1-2
        junk,  # a control batch that is no marker: skipped, counted
        marker(4, 8, commit=True),
        end=5)
    assert fetch(h)["committed_offset"] == -1
    assert fetch(h, require_stable=True)["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    h.c.complete_txn(0, 7, committed=True)
    assert fetch(h)["committed_offset"] == 10


def test_a_deleted_group_takes_its_pending_offsets_along_also_after_a_reload() -> None:
    log = TxnLog()
    h = Harness(log=log)
    assert code_of(txn_commit(h, 42)) == ErrorCode.NONE  # pending only, nothing committed
    results: list[list[tuple[str, ErrorCode]]] = []
    h.c.delete_groups(["g"], results.append)
    assert results == [[("g", ErrorCode.NONE)]]
    tombstones = log.records[1:]
    assert [v for _, v, _ in tombstones] == [None, None]  # the group, and t-0's offset
    assert h.c.manager.txn_producers == {}
    h.c.complete_txn(0, PID, committed=True)  # the transaction commits after the delete
    assert "g" not in h.c.groups
    # a reload of that log brings nothing back, with or without the marker in it
    for with_marker in (False, True):
        h.c.unload(0)
        h.c.begin_load(0, 1)
        for (key, val, offset), pid in zip(log.records, (PID, -1, -1), strict=True):
            h.c.load_record(0, key, val, offset, txn_producer_id=pid)
        if with_marker:
            h.c.load_marker(0, PID, committed=True)
        h.c.finish_load(0)
        assert "g" not in h.c.groups
        h.c.complete_txn(0, PID, committed=True)
        assert "g" not in h.c.groups
