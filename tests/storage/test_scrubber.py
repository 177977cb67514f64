"""The background CRC check of closed segments (storage/scrubber.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from clients.protocol.topics import TopicPartition
from clients.records.batch import iter_batches
from clients.records.record import build_batch
from storage.config import LogConfig
from storage.log.log import Log
from storage.scrubber import LogScrubber

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=512)


def fill(directory: Path, batches: int, seed: int = 0) -> Log:
    rng = random.Random(seed)
    log = Log.open(directory, CONFIG)
    for i in range(batches):
        records = [(b"k%d" % i, rng.randbytes(rng.randrange(20, 300)), 1_000 + i, ())
                   for _ in range(rng.randrange(1, 6))]
        log.append_as_leader(build_batch(records), leader_epoch=0)
    return log


def run_round(scrubber: LogScrubber, logs: dict[TopicPartition, Log]) -> list:
    found = []
    start = scrubber.rounds_completed
    for _ in range(100_000):
        found += scrubber.step(logs, 0)
        if scrubber.rounds_completed > start:
            return found
    raise AssertionError("no round completed")


def test_clean_logs_are_walked_in_bounded_steps_without_findings(tmp_path: Path) -> None:
    logs = {TopicPartition("a", 0): fill(tmp_path / "a-0", 120, 1),
            TopicPartition("b", 3): fill(tmp_path / "b-3", 80, 2)}
    closed = sum(s.size for log in logs.values() for s in log.segments[:-1])
    assert closed > 20_000
    scrubber = LogScrubber(tmp_path / "scrubber-checkpoint", step_bytes=1000)
    before = scrubber.bytes_checked
    steps = 0
    while scrubber.rounds_completed == 0:
        checked = scrubber.bytes_checked
        assert scrubber.step(logs, 0) == []
        assert scrubber.bytes_checked - checked <= 1000 + 4096  # a step, plus one batch
        steps += 1
    assert scrubber.bytes_checked - before == closed  # every closed byte, once
    assert steps >= closed // (1000 + 4096)
    for log in logs.values():
        log.close()


@pytest.mark.parametrize("seed", range(25))
def test_random_damage_in_one_closed_segment_is_found_where_it_is(
        tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    logs = {TopicPartition("t", p): fill(tmp_path / f"t-{p}", 60, seed * 10 + p)
            for p in range(2)}
    tp = TopicPartition("t", rng.randrange(2))
    log = logs[tp]
    segment = rng.choice(log.segments[:-1])
    data = segment.read_bytes(0, segment.size)
    batches = list(iter_batches(data))
    pos, header = rng.choice(batches)
    # a byte the CRC or the header checks cover (the base offset and the partition
    # leader epoch are outside Kafka's CRC; the offset order check sees the former)
    flip = rng.randrange(pos + 16, pos + header.size_in_bytes)
    with open(segment.log_path, "r+b") as f:
        f.seek(flip)
        byte = f.read(1)
        f.seek(flip)
        f.write(bytes([byte[0] ^ (1 << rng.randrange(8))]))
    scrubber = LogScrubber(tmp_path / "scrubber-checkpoint", step_bytes=rng.randrange(200, 9000))
    found = run_round(scrubber, logs)
    assert len(found) == 1, (seed, found)
    (damage,) = found
    assert (damage.topic, damage.partition, damage.segment_base_offset) == (
        tp.topic, tp.partition, segment.base_offset)
    assert damage.position == pos and damage.first_bad_offset == header.base_offset, seed
    assert scrubber.findings == found
    assert run_round(scrubber, logs) == found and len(scrubber.findings) == 1  # logged once
    for log_ in logs.values():
        log_.close()


def test_progress_survives_a_restart(tmp_path: Path) -> None:
    logs = {TopicPartition("a", 0): fill(tmp_path / "a-0", 120, 3)}
    first = LogScrubber(tmp_path / "scrubber-checkpoint", step_bytes=3000)
    for _ in range(3):
        first.step(logs, 0)
    first.write_checkpoint()
    second = LogScrubber(tmp_path / "scrubber-checkpoint", step_bytes=3000)
    second.load_checkpoint()
    assert second.cursor == first.cursor and second.cursor is not None
    assert second.cursor[2] > 0 or second.cursor[1] > 0  # not back at the start
    (tmp_path / "scrubber-checkpoint").write_text("garbage")
    third = LogScrubber(tmp_path / "scrubber-checkpoint", step_bytes=3000)
    third.load_checkpoint()
    assert third.cursor is None  # a damaged checkpoint: a new round
    logs[TopicPartition("a", 0)].close()


def test_rounds_are_apart_by_the_pause(tmp_path: Path) -> None:
    logs = {TopicPartition("a", 0): fill(tmp_path / "a-0", 60, 4)}
    scrubber = LogScrubber(tmp_path / "scrubber-checkpoint", step_bytes=1 << 20,
                           round_pause_ms=60_000)
    scrubber.step(logs, 1_000)
    assert scrubber.rounds_completed == 1
    checked = scrubber.bytes_checked
    scrubber.step(logs, 60_999)
    assert scrubber.bytes_checked == checked  # still pausing
    scrubber.step(logs, 61_000)
    assert scrubber.bytes_checked > checked and scrubber.rounds_completed == 2
    logs[TopicPartition("a", 0)].close()
