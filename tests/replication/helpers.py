"""Shared helpers for replication tests: batches and real logs in a temp dir."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clients.records.batch import iter_batches
from clients.records.record import build_batch, decode_batch
from replication.leader_epoch_cache import LeaderEpochCache
from replication.partition import Partition
from storage.config import LogConfig
from storage.log.log import Log


def batch(*values: bytes, base_offset: int = 0, epoch: int = -1) -> bytes:
    return build_batch([(None, v, 1_000 + i, ()) for i, v in enumerate(values)],
                       base_offset=base_offset, partition_leader_epoch=epoch)


def open_log(root: Path, name: str = "t-0") -> Log:
    return Log.open(root / name, LogConfig(segment_bytes=4096), clock_ms=lambda: 1_000)


def make_partition(root: Path, broker_id: int, *, name: str | None = None,
                   in_memory_cache: bool = False) -> Partition:
    log = open_log(root / f"b{broker_id}", name or "t-0")
    cache = LeaderEpochCache() if in_memory_cache else None
    return Partition("t", 0, log, broker_id, leader_epoch_cache=cache)


def values(log: Log) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in the log."""
    out: list[tuple[int, bytes | None]] = []
    for _, data in log.batches():
        out.extend((r.offset, r.value) for r in decode_batch(data))
    return out


def epochs_in(data: bytes) -> list[tuple[int, int]]:
    return [(h.partition_leader_epoch, h.base_offset) for _, h in iter_batches(data)]


class RecordingCheckpoint:
    """An EpochCheckpoint that remembers each write and whether it was durable."""

    def __init__(self) -> None:
        self.writes: list[tuple[list[tuple[int, int]], bool]] = []

    def write(self, entries: Sequence[tuple[int, int]], *, durable: bool = True) -> None:
        self.writes.append((list(entries), durable))

    def read(self) -> list[tuple[int, int]]:
        return self.writes[-1][0] if self.writes else []
