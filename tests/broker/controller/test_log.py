"""ControllerLog: fsync'd metadata log, snapshots (kept, corrupt, missing), torn tails."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.controller.config import ControllerConfig
from broker.controller.log import ControllerLog, MetadataLogDamagedError
from broker.controller.results import TopicSpec
from broker.controller.state import ControllerState
from broker.metadata.image import MetadataImage
from broker.metadata.records import MetadataRecordError, decode_record_batches
from clients.records.batch import iter_batches
from storage.lock import DataDirLockedError
from timer.clock import ManualClock


def build(directory: Path, topics: int, *, interval: int = 5,
          batch: int = 1000) -> tuple[ControllerLog, ControllerState]:
    store = ControllerLog(directory, snapshot_interval_records=interval, max_batch_records=batch)
    state = ControllerState(ControllerConfig(), ManualClock(0), store.open())
    for b in (1, 2):
        result, records = state.register_broker(b, f"i{b}", "h", 9000 + b)
        store.append(records, state.image)
        _, records = state.heartbeat(b, result.broker_epoch, state.image.last_applied_offset)
        store.append(records, state.image)
    for i in range(topics):
        _, records = state.create_topics([TopicSpec(f"t{i}", 2, 2)])
        store.append(records, state.image)
    return store, state


def reopen(directory: Path) -> tuple[ControllerLog, MetadataImage]:
    store = ControllerLog(directory, snapshot_interval_records=5)
    return store, store.open()


def test_reopen_gives_the_same_image_and_keeps_two_snapshots(tmp_path: Path) -> None:
    store, state = build(tmp_path, 6)
    assert store.log_end_offset == state.image.last_applied_offset + 1 == 4 + 6 * 3
    snapshots = sorted(tmp_path.glob("snapshot-*.msgpack"))
    assert len(snapshots) == 2
    store.close()
    again, image = reopen(tmp_path)
    assert image == state.image and again.snapshot_loaded == snapshots[-1]
    again.close()


def test_corrupt_or_missing_snapshots_fall_back_to_older_ones_or_the_log(tmp_path: Path) -> None:
    store, state = build(tmp_path, 6)
    store.close()
    older, newest = sorted(tmp_path.glob("snapshot-*.msgpack"))
    newest.write_bytes(newest.read_bytes()[:-1] + b"\x00")
    again, image = reopen(tmp_path)
    assert image == state.image and again.snapshot_loaded == older
    again.close()
    for path in (older, newest):
        path.unlink()
    again, image = reopen(tmp_path)
    assert image == state.image and again.snapshot_loaded is None
    again.close()


def test_a_torn_tail_is_cut_at_the_last_whole_batch(tmp_path: Path) -> None:
    store, state = build(tmp_path, 1, interval=1000)
    expected = MetadataImage.from_records(state.image.to_records(),
                                          state.image.last_applied_offset)
    _, records = state.create_topics([TopicSpec("late", 1, 1)])
    store.append(records, state.image)
    store.close()
    segment = next((tmp_path / "__cluster_metadata-0").glob("*.log"))
    data = segment.read_bytes()
    segment.write_bytes(data[:-7])  # the crash tore the last batch
    again, image = reopen(tmp_path)
    assert image == expected and again.log_end_offset == expected.last_applied_offset + 1
    again.close()


def test_a_flipped_byte_inside_the_log_stops_the_controller_and_changes_nothing(
        tmp_path: Path) -> None:
    store, _ = build(tmp_path, 4, interval=1000)  # no snapshot: the log is the only copy
    store.close()
    segment = next((tmp_path / "__cluster_metadata-0").glob("*.log"))
    data = bytearray(segment.read_bytes())
    second = next(iter(iter_batches(bytes(data))))[1].size_in_bytes  # inside batch 2
    data[second + 70] ^= 0x5A
    segment.write_bytes(bytes(data))
    with pytest.raises(MetadataLogDamagedError, match=r"CRC-32C mismatch.*data follows it"):
        reopen(tmp_path)
    assert segment.read_bytes() == bytes(data)  # nothing cut: the operator decides
    store = ControllerLog(tmp_path)  # the lock was released with the refusal
    with pytest.raises(MetadataLogDamagedError):
        store.open()


@pytest.mark.parametrize("damage", ["emptied", "segment removed"])
def test_a_log_that_lost_records_a_snapshot_holds_stops_the_controller(
        tmp_path: Path, damage: str) -> None:
    store, _ = build(tmp_path, 6)
    store.close()
    log_dir = tmp_path / "__cluster_metadata-0"
    for path in log_dir.iterdir():
        if damage == "emptied" and path.suffix == ".log":
            path.write_bytes(b"")
        elif damage == "segment removed":
            path.unlink()
    with pytest.raises(MetadataLogDamagedError, match="lost records it had"):
        reopen(tmp_path)


def test_records_are_split_into_batches_and_read_back(tmp_path: Path) -> None:
    store, _ = build(tmp_path, 2, batch=2, interval=1000)
    data = store.read(0, 1 << 20)
    decoded = decode_record_batches(data)
    # 4 broker appends of 1 record + 2 topic appends of 3 records split 2 + 1
    assert len(list(iter_batches(data))) == 4 + 2 * 2
    assert [o for o, _ in decoded] == list(range(store.log_end_offset))
    assert store.read_records(3) == decoded[3:]
    store.close()


def test_append_must_match_the_image_and_the_directory_is_locked(tmp_path: Path) -> None:
    store, state = build(tmp_path, 1)
    _, records = state.create_topics([TopicSpec("x", 1, 1)])
    with pytest.raises(MetadataRecordError, match="do not end at the image's offset"):
        store.append(records[:1], state.image)
    with pytest.raises(DataDirLockedError):
        ControllerLog(tmp_path).open()
    store.close()


def test_a_base_offset_pushed_into_the_next_segment_stops_the_controller(
        tmp_path: Path) -> None:
    """The base offset is outside the CRC; recovery bounds it by the next segment's base,
    and the damage check applies the same rule, so an fsync'd record is never cut."""
    store, state = build(tmp_path, 2, interval=1000)
    store.close()
    log_dir = tmp_path / "__cluster_metadata-0"
    segment = next(log_dir.glob("*.log"))
    end = state.image.last_applied_offset + 1
    (log_dir / f"{end:020d}.log").write_bytes(b"")  # rolled, nothing appended yet
    data = bytearray(segment.read_bytes())
    last = [pos for pos, _ in iter_batches(bytes(data))][-1]
    assert not data[last + 7] & 0x08
    data[last + 7] ^= 0x08  # base offset + 8: into the next segment
    segment.write_bytes(bytes(data))
    with pytest.raises(MetadataLogDamagedError, match="at or past the next segment's base"):
        reopen(tmp_path)
    assert segment.read_bytes() == bytes(data)
