"""LogManager: create/get/delete, restart and recovery, checkpoints, the data-dir lock."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from clients.protocol.topics import InvalidTopicError, TopicPartition
from clients.records.record import build_batch
from storage.checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from storage.config import LogConfig
from storage.lock import DataDirLockedError
from storage.log_dirs import CLEAN_SHUTDOWN_MARKER
from storage.log_manager import LogManager, ManagerSchedule
from storage.scrubber import DamagedRange

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_index_bytes=4096)
SPAWN = multiprocessing.get_context("spawn")
CHILD_TIMEOUT_S = 60.0


def batch(n: int = 1, size: int = 100, ts: int = 1_000) -> bytes:
    return build_batch([(None, b"x" * size, ts + i, ()) for i in range(n)])


class ManualClock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def managers(tmp_path: Path) -> Iterator[Callable[..., LogManager]]:
    """Factory of started managers on tmp_path/data, all shut down at the end."""
    made: list[LogManager] = []

    def make(**kwargs: Any) -> LogManager:
        kwargs.setdefault("default_config", SMALL)
        manager = LogManager(tmp_path / "data", **kwargs)
        manager.startup()
        made.append(manager)
        return manager

    yield make
    for manager in made:
        manager.shutdown()


# -- child processes (spawned: module-level functions) --------------------------------


def _child_hold_lock(data_dir: str, conn: Connection) -> None:
    """Start a manager, write some data, report, then wait to be killed or told to stop."""
    manager = LogManager(data_dir, SMALL)
    manager.startup()
    log = manager.create_log("held-topic", 0)
    for _ in range(30):
        log.append_as_leader(batch(3), leader_epoch=0)
    log.flush()
    manager.checkpoint()
    flushed_to = log.recovery_point
    for _ in range(10):  # appended after the checkpoint: must be rescanned after a crash
        log.append_as_leader(batch(3), leader_epoch=0)
    conn.send(("ready", flushed_to, log.log_end_offset))
    conn.recv()  # blocks until told to stop (or SIGKILL)
    manager.shutdown()
    conn.send("stopped")


def _child_try_start(data_dir: str, conn: Connection) -> None:
    manager = LogManager(data_dir, SMALL)
    try:
        manager.startup()
    except DataDirLockedError as exc:
        conn.send(("locked", exc.holder_pid, str(exc)))
        return
    conn.send(("started", sorted(manager.all_logs()), None))
    manager.shutdown()


def _start_child(target: Callable[..., None], data_dir: Path) -> tuple[Any, Connection]:
    parent_conn, child_conn = SPAWN.Pipe()
    process = SPAWN.Process(target=target, args=(str(data_dir), child_conn), daemon=True)
    process.start()
    child_conn.close()
    return process, parent_conn


def _recv(conn: Connection) -> Any:
    if not conn.poll(CHILD_TIMEOUT_S):
        raise AssertionError("child process did not answer in time")
    return conn.recv()


def _stop(process: Any) -> None:
    if process.pid is not None and process.is_alive():
        os.kill(process.pid, signal.SIGKILL)
    process.join(CHILD_TIMEOUT_S)


# -- create / get / delete ------------------------------------------------------------


def test_create_get_delete(managers: Callable[..., LogManager], tmp_path: Path) -> None:
    manager = managers()
    log = manager.create_log("orders-eu", 3)
    assert manager.create_log("orders-eu", 3) is log  # idempotent
    assert manager.get_log("orders-eu", 3) is log
    assert manager.get_log("orders-eu", 4) is None
    assert (tmp_path / "data" / "orders-eu-3").is_dir()
    log.append_as_leader(batch(5), leader_epoch=0)
    assert log.log_end_offset == 5
    manager.checkpoint()
    assert manager.recovery_point_checkpoint.read().keys() == {("orders-eu", 3)}

    assert manager.delete_log("orders-eu", 3) is True
    assert manager.get_log("orders-eu", 3) is None
    assert manager.delete_log("orders-eu", 3) is False
    assert sorted(p.name for p in (tmp_path / "data").iterdir() if p.is_dir()) == []
    assert manager.recovery_point_checkpoint.read() == {}
    # A new log of the same name starts empty.
    assert manager.create_log("orders-eu", 3).log_end_offset == 0


@pytest.mark.parametrize("topic", ["", "a b", "..", "x" * 250, "t/0"])
def test_create_rejects_illegal_topic(managers: Callable[..., LogManager], topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        managers().create_log(topic, 0)


def test_create_rejects_negative_partition(managers: Callable[..., LogManager]) -> None:
    with pytest.raises(ValueError, match="partition"):
        managers().create_log("t", -1)


def test_config_for_is_consulted_per_topic(managers: Callable[..., LogManager]) -> None:
    tiny = LogConfig(segment_bytes=1024, index_interval_bytes=256, segment_index_bytes=4096)
    manager = managers(config_for=lambda topic: tiny if topic == "tiny" else SMALL)
    tiny_log = manager.create_log("tiny", 0)
    small_log = manager.create_log("small", 0)
    for _ in range(8):
        tiny_log.append_as_leader(batch(1, 300), leader_epoch=0)
        small_log.append_as_leader(batch(1, 300), leader_epoch=0)
    assert len(tiny_log.segments) > len(small_log.segments)


def test_not_started_and_double_start_are_errors(tmp_path: Path) -> None:
    manager = LogManager(tmp_path / "d", SMALL)
    with pytest.raises(RuntimeError, match="not started"):
        manager.get_log("t", 0)
    manager.startup()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            manager.startup()
    finally:
        manager.shutdown()
    manager.shutdown()  # idempotent


# -- restart --------------------------------------------------------------------------


def _fill(manager: LogManager) -> dict[tuple[str, int], int]:
    leos = {}
    for topic in ("a", "with-dash", "x.y_z"):
        for partition in range(3):
            log = manager.create_log(topic, partition)
            for _ in range(partition * 7 + len(topic)):
                log.append_as_leader(batch(2), leader_epoch=1)
            leos[(topic, partition)] = log.log_end_offset
    return leos


def test_restart_after_clean_shutdown_loads_all_logs_without_recovery(
    tmp_path: Path,
) -> None:
    first = LogManager(tmp_path / "data", SMALL)
    first.startup()
    leos = _fill(first)
    first.shutdown()
    assert (tmp_path / "data" / CLEAN_SHUTDOWN_MARKER).exists()
    assert first.recovery_point_checkpoint.read() == leos  # shutdown flushed everything

    second = LogManager(tmp_path / "data", SMALL, load_threads=2)
    report = second.startup()
    try:
        assert report.had_clean_shutdown
        assert report.recovered == {}
        assert report.logs_loaded == len(leos)
        assert {tp: log.log_end_offset for tp, log in second.all_logs().items()} == leos
        assert not (tmp_path / "data" / CLEAN_SHUTDOWN_MARKER).exists()
        for log in second.all_logs().values():
            assert log.recovery_report.had_clean_shutdown
            assert log.recovery_report.segments_rescanned == 0  # no rescan after a clean stop
            log.check_invariants()
    finally:
        second.shutdown()


def test_crash_then_restart_recovers_from_checkpointed_recovery_point(tmp_path: Path) -> None:
    data = tmp_path / "data"
    process, conn = _start_child(_child_hold_lock, data)
    try:
        status, flushed_to, leo = _recv(conn)
        assert status == "ready"
        os.kill(process.pid, signal.SIGKILL)  # crash: no checkpoint, no marker
        process.join(CHILD_TIMEOUT_S)
    finally:
        _stop(process)
    assert not (data / CLEAN_SHUTDOWN_MARKER).exists()
    assert OffsetCheckpointFile(data / "recovery-point-offset-checkpoint").read() == {
        ("held-topic", 0): flushed_to
    }
    # A torn write at the tail: garbage after the last complete batch.
    active = sorted((data / "held-topic-0").glob("*.log"))[-1]
    with open(active, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x99\x00\x00\x01\x00torn")
    bases = sorted(int(p.stem) for p in (data / "held-topic-0").glob("*.log"))
    holding_recovery_point = max(b for b in bases if b <= flushed_to)
    expected_rescans = sum(1 for b in bases if b >= holding_recovery_point)
    assert expected_rescans < len(bases)  # the test needs flushed segments to skip

    manager = LogManager(data, SMALL)
    report = manager.startup()
    try:
        assert not report.had_clean_shutdown
        log = manager.get_log("held-topic", 0)
        assert log is not None
        assert log.log_end_offset == leo
        recovery = report.recovered[("held-topic", 0)]
        assert recovery.truncated_bytes == 16
        # Only the segment holding the recovery point and those after it were rescanned.
        assert recovery.segments_rescanned == expected_rescans
        assert recovery.truncated_at_offset == leo
        log.check_invariants()
    finally:
        manager.shutdown()


def test_startup_finishes_deletes_and_ignores_foreign_entries(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "t-0.0123abcd-delete").mkdir(parents=True)
    (data / "t-0.0123abcd-delete" / "00000000000000000000.log").write_bytes(b"old")
    (data / "lost+found").mkdir()
    (data / "t-01").mkdir()  # not canonical: "t-1" is partition 1's directory
    (data / "notes.txt").write_text("hello")
    manager = LogManager(data, SMALL)
    report = manager.startup()
    try:
        assert report.finished_deletes == ["t-0.0123abcd-delete"]
        assert report.ignored_entries == ["lost+found", "t-01"]
        assert not (data / "t-0.0123abcd-delete").exists()
        assert manager.all_logs() == {}
    finally:
        manager.shutdown()


def test_corrupt_checkpoint_fails_startup_and_releases_lock(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    checkpoint = data / "log-start-offset-checkpoint"
    checkpoint.write_text("0\n1\nt 0 x\n")
    manager = LogManager(data, SMALL)
    with pytest.raises(CorruptCheckpointError, match=f"{checkpoint}:3: "):
        manager.startup()
    checkpoint.unlink()
    manager.startup()  # the failed attempt released the lock
    manager.shutdown()


def test_a_log_that_fails_to_load_fails_startup_and_releases_everything(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first = LogManager(data, SMALL)
    first.startup()
    for partition in range(4):
        first.create_log("ok", partition).append_as_leader(batch(2), leader_epoch=0)
    first.shutdown()
    # A segment "file" that is a directory cannot be opened.
    (data / "bad-0" / "00000000000000000000.log").mkdir(parents=True)
    manager = LogManager(data, SMALL, load_threads=3)
    with pytest.raises(OSError) as info:
        manager.startup()
    assert any(str(data / "bad-0") in note for note in info.value.__notes__)
    with pytest.raises(RuntimeError, match="not started"):
        manager.all_logs()
    (data / "bad-0" / "00000000000000000000.log").rmdir()
    report = manager.startup()  # lock released, healthy logs reopen
    try:
        assert report.logs_loaded == 5
        assert manager.get_log("ok", 3).log_end_offset == 2  # type: ignore[union-attr]
    finally:
        manager.shutdown()


def test_high_watermarks_round_trip(managers: Callable[..., LogManager]) -> None:
    manager = managers()
    assert manager.read_high_watermarks() == {}
    manager.write_high_watermarks({("t", 0): 10, ("u-v", 2): 0})
    assert manager.read_high_watermarks() == {("t", 0): 10, ("u-v", 2): 0}


# -- periodic work --------------------------------------------------------------------


def test_retention_advances_and_checkpoints_log_start_offset(
    managers: Callable[..., LogManager],
) -> None:
    config = LogConfig(segment_bytes=2048, index_interval_bytes=256, segment_index_bytes=4096,
                       retention_bytes=4096)
    manager = managers(config_for=lambda topic: config)
    log = manager.create_log("r", 0)
    for _ in range(40):
        log.append_as_leader(batch(1, 400), leader_epoch=0)
    assert log.log_start_offset == 0
    deleted = manager.run_retention()
    assert deleted > 0
    assert log.log_start_offset > 0
    assert manager.log_start_offset_checkpoint.read() == {("r", 0): log.log_start_offset}
    assert manager.run_retention() == 0


def test_run_due_tasks_follows_the_injected_clock(managers: Callable[..., LogManager]) -> None:
    clock = ManualClock()
    schedule = ManagerSchedule(retention_check_interval_ms=10_000, flush_check_interval_ms=100,
                               checkpoint_interval_ms=1_000)
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=256,
                       segment_index_bytes=4096, flush_messages=1)
    manager = managers(default_config=config, clock_ms=clock, schedule=schedule)
    log = manager.create_log("p", 0)
    log.append_as_leader(batch(1), leader_epoch=0)
    log.append_as_leader(batch(1), leader_epoch=0)

    assert manager.run_due_tasks() == 100  # nothing due yet
    assert not manager.recovery_point_checkpoint.path.exists()
    clock.now_ms += 999
    assert manager.run_due_tasks() == 1  # flush ran (not observable yet); checkpoint due in 1 ms
    assert not manager.recovery_point_checkpoint.path.exists()
    clock.now_ms += 1
    manager.run_due_tasks()
    assert manager.recovery_point_checkpoint.read() == {("p", 0): log.recovery_point}
    assert log.recovery_point == 2


def test_schedule_rejects_non_positive_intervals() -> None:
    with pytest.raises(ValueError, match="flush_check_interval_ms"):
        ManagerSchedule(flush_check_interval_ms=0)


# -- the data directory lock ----------------------------------------------------------


def test_second_process_is_refused_until_first_shuts_down(tmp_path: Path) -> None:
    data = tmp_path / "data"
    manager = LogManager(data, SMALL)
    manager.startup()
    manager.create_log("t", 0)
    try:
        process, conn = _start_child(_child_try_start, data)
        try:
            status, holder_pid, message = _recv(conn)
        finally:
            _stop(process)
        assert status == "locked"
        assert holder_pid == os.getpid()
        assert str(data) in message and f"pid {os.getpid()}" in message
    finally:
        manager.shutdown()
    process, conn = _start_child(_child_try_start, data)
    try:
        assert _recv(conn) == ("started", [("t", 0)], None)
    finally:
        _stop(process)


def test_lock_of_a_sigkilled_process_is_released(tmp_path: Path) -> None:
    data = tmp_path / "data"
    process, conn = _start_child(_child_hold_lock, data)
    try:
        assert _recv(conn)[0] == "ready"
        with pytest.raises(DataDirLockedError) as info:
            LogManager(data, SMALL).startup()
        assert info.value.holder_pid == process.pid
        os.kill(process.pid, signal.SIGKILL)
        process.join(CHILD_TIMEOUT_S)
        assert process.exitcode == -signal.SIGKILL
    finally:
        _stop(process)
    manager = LogManager(data, SMALL)
    manager.startup()
    try:
        assert manager.get_log("held-topic", 0) is not None
    finally:
        manager.shutdown()


def test_second_manager_in_same_process_is_refused(managers: Callable[..., LogManager],
                                                   tmp_path: Path) -> None:
    managers()
    with pytest.raises(DataDirLockedError, match="locked by another live process"):
        LogManager(tmp_path / "data", SMALL).startup()


def test_a_log_start_checkpoint_beyond_the_data_is_ignored_not_obeyed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    first = LogManager(tmp_path / "data", SMALL)
    first.startup()
    log = first.create_log("kept", 0)
    for _ in range(60):  # several segments
        log.append_as_leader(batch(2), leader_epoch=1)
    leo, files = log.log_end_offset, sorted(p.name for p in log.dir.iterdir())
    first.shutdown()
    OffsetCheckpointFile(tmp_path / "data" / "log-start-offset-checkpoint").write(
        {("kept", 0): 999_999})  # damaged or hand-edited: far beyond the log end

    second = LogManager(tmp_path / "data", SMALL)
    with caplog.at_level("WARNING", logger="storage.log"):
        second.startup()
    try:
        log = second.get_log("kept", 0)
        assert log is not None and len(files) > 3
        assert (log.log_start_offset, log.log_end_offset) == (0, leo)
        assert sorted(p.name for p in log.dir.iterdir()) == files  # nothing deleted
        served = log.read(0, 1 << 20)
        assert served.start_offset == 0 and served.size_in_bytes > 0  # still served
        assert "log start offset 999999 is beyond the log end" in caplog.text
        log.check_invariants()
    finally:
        second.shutdown()


def test_the_scrubber_resumes_after_a_clean_start_and_starts_over_after_a_crash(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = LogManager(data, SMALL)
    first.startup()
    for topic in ("a", "b"):
        log = first.create_log(topic, 0)
        for _ in range(20):
            log.append_as_leader(batch(3), 0)
    first.scrubber.cursor = (TopicPartition("b", 0), 0, 0)  # mid-round, past "a"
    first.shutdown()  # clean: the scrubber's progress is checkpointed
    clean = LogManager(data, SMALL)
    clean.startup()
    assert clean.scrubber.cursor == (TopicPartition("b", 0), 0, 0)  # resumes
    clean.shutdown()
    (data / CLEAN_SHUTDOWN_MARKER).unlink()  # as if it had crashed
    crashed = LogManager(data, SMALL)
    crashed.startup()
    try:
        assert crashed.scrubber.cursor is None  # a new round, from the first log
        crashed.run_scrub_step()
        assert crashed.scrubber.cursor is not None and crashed.scrubber.cursor[0] == (
            TopicPartition("a", 0))
        crashed.scrubber.cursor = (TopicPartition("b", 0), 0, 0)
        crashed.scrubber.findings.append(DamagedRange("a", 0, 0, 0, 0, "test", 0))
    finally:
        crashed.shutdown()  # clean, but damage was found in this run
    after_damage = LogManager(data, SMALL)
    after_damage.startup()
    try:  # from the start again: an unrepaired range is found again soon
        assert after_damage.scrubber.cursor is None
    finally:
        after_damage.shutdown()
