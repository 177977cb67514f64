"""Fetch file regions carry the segment file's identity; nothing else is ever sent.

A Fetch response names its record bytes as ``[path, position, length, st_dev,
st_ino]`` regions that the network process ``sendfile``s after the main process
answered.  Between the two, log compaction may rename a rewritten ``B.log`` over the
old one, and retention may delete a segment.  These tests check that a region is read
from the very file the log read (a cached descriptor of it still serves after the path
moved on, and then leaves the cache), and that otherwise the region is refused: the
network process closes the connection (the frame length was promised; the client
retries) instead of sending bytes of another file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from broker.network.regions import FileCache, RegionError
from clients.protocol.topics import TopicPartition
from clients.records.record import build_batch
from storage.cleaner.cleaner import LogCleaner
from storage.config import LogConfig
from storage.errors import StorageError
from storage.log.log import Log
from storage.log.reader import FetchDataInfo, FileRegion
from tests.broker.network.test_network import (
    assert_pool_clean,
    connect,
    echo,
    frame,
    make_config,
    recv_until_closed,
    running,
)
from tests.broker.raw_kafka import recv_frame

EPOCH = 3


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def small_segments(**overrides: object) -> LogConfig:
    settings: dict[str, object] = dict(segment_bytes=1024, index_interval_bytes=128,
                                       segment_index_bytes=4096)
    settings.update(overrides)
    return LogConfig(**settings)  # type: ignore[arg-type]


def fill(log: Log, clock: Clock, batches: int, keys: int) -> None:
    for i in range(batches):
        items = [(f"key-{(3 * i + j) % keys}".encode(), b"value-%d" % (3 * i + j), clock.now,
                  ()) for j in range(3)]
        log.append_as_leader(build_batch(items), EPOCH)  # type: ignore[arg-type]
        clock.now += 1


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def compacted_log(tmp_path: Path, clock: Clock) -> Iterator[Log]:
    log = Log.open(tmp_path / "c-0", small_segments(cleanup_policy="compact",
                                                    min_cleanable_dirty_ratio=0.0),
                   clock_ms=clock)
    fill(log, clock, 40, keys=4)  # many segments of duplicates: compaction rewrites them
    try:
        yield log
    finally:
        log.abandon()


def compact(log: Log, clock: Clock) -> None:
    assert LogCleaner(clock_ms=clock).clean_until_idle({TopicPartition("c", 0): log}) >= 1


def first_region(info: FetchDataInfo) -> FileRegion:
    assert info.regions, "the read returned no region"
    return info.regions[0]


# -- the log side -------------------------------------------------------------------------


def test_regions_name_the_segment_file_they_were_read_from(compacted_log: Log,
                                                           clock: Clock) -> None:
    region = first_region(compacted_log.read(0, 1 << 20))
    st = os.stat(region.path)
    assert (region.device, region.inode) == (st.st_dev, st.st_ino)
    assert region.wire() == [region.path, region.position, region.length, st.st_dev,
                             st.st_ino]
    assert FileRegion("p", 1, 2).wire() == ["p", 1, 2]  # identity unknown: not checked
    before = region.read_bytes()
    compact(compacted_log, clock)
    after = first_region(compacted_log.read(0, 1 << 20))
    assert after.path == region.path  # same name, another file
    assert (after.device, after.inode) != (region.device, region.inode)
    assert (after.device, after.inode) == (os.stat(after.path).st_dev,
                                           os.stat(after.path).st_ino)
    with pytest.raises(StorageError, match="replaced"):
        region.read_bytes()
    assert after.read_bytes() != before  # the swap really rewrote the bytes


def test_a_region_of_a_segment_deleted_by_retention_is_an_error_not_other_bytes(
        tmp_path: Path, clock: Clock) -> None:
    log = Log.open(tmp_path / "d-0", small_segments(retention_bytes=0), clock_ms=clock)
    try:
        fill(log, clock, 40, keys=1000)
        region = first_region(log.read(0, 1 << 20))
        assert log.delete_old_segments() >= 1
        assert not os.path.exists(region.path)
        with pytest.raises(StorageError, match="gone"):
            region.read_bytes()
        cache = FileCache(capacity=4)
        try:
            with pytest.raises(RegionError, match="cannot stat"):
                cache.acquire(region.path, (region.device, region.inode))
        finally:
            cache.close()
    finally:
        log.abandon()


# -- the network process's descriptor cache ---------------------------------------------


def identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def swap_in(path: Path, content: bytes) -> None:
    """What the cleaner's S3 step does: rename a new file over ``path``."""
    tmp = path.with_suffix(".log.swap")
    tmp.write_bytes(content)
    os.rename(tmp, path)


def test_cache_serves_the_read_file_and_refuses_a_replaced_path(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"old-bytes-" * 10)
    old = identity(path)
    cache = FileCache(capacity=4)
    try:
        entry = cache.acquire(str(path), old)  # cached from an earlier fetch
        cache.release(entry)
        swap_in(path, b"NEW-BYTES-" * 10)
        # a region read before the swap: served from the cached descriptor of the old
        # file (its bytes never change), which then leaves the cache
        again = cache.acquire(str(path), old)
        assert again is entry and os.pread(again.fd, 9, 0) == b"old-bytes"
        assert len(cache) == 0
        cache.release(again)
        assert entry.fd == -1  # closed: the replaced file's space is freed
        # nothing cached any more: the old file is unreachable by its path -> refused
        with pytest.raises(RegionError, match="not the file the fetch read"):
            cache.acquire(str(path), old)
        fresh = cache.acquire(str(path), identity(path))  # a region read after the swap
        assert os.pread(fresh.fd, 9, 0) == b"NEW-BYTES"
        cache.release(fresh)
        legacy = cache.acquire(str(path))  # no identity: the path's current file
        assert legacy is fresh
        cache.release(legacy)
    finally:
        cache.close()


def test_cache_drops_the_entry_of_a_deleted_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"x" * 100)
    cache = FileCache(capacity=4)
    try:
        entry = cache.acquire(str(path))
        cache.release(entry)
        path.unlink()  # retention, no identity known: refused, and the stale fd goes
        with pytest.raises(RegionError, match="cannot stat"):
            cache.acquire(str(path))
        assert len(cache) == 0 and entry.fd == -1
    finally:
        cache.close()


# -- end to end through a network process -------------------------------------------------


@pytest.mark.multiprocess
def test_network_process_closes_instead_of_sending_a_replaced_file(
        compacted_log: Log, clock: Clock) -> None:
    stale = compacted_log.read(0, 1 << 20)
    stale_bytes = stale.read_bytes()
    compact(compacted_log, clock)
    fresh = compacted_log.read(0, 1 << 20)
    assert [r.path for r in stale.regions][:1] == [r.path for r in fresh.regions][:1]
    with running(make_config()) as (sup, _main, pool):
        bad, good = connect(sup.port), connect(sup.port)
        try:
            bad.sendall(frame(b"F" + msgpack.packb([r.wire() for r in stale.regions])))
            received = recv_until_closed(bad)
            # the promised length at most, then closed: never bytes of the new file
            assert received == struct.pack(">i", stale.size_in_bytes)
            good.sendall(frame(b"F" + msgpack.packb([r.wire() for r in fresh.regions])))
            assert recv_frame(good) == fresh.read_bytes() != stale_bytes
            echo(good, b"unaffected")
        finally:
            bad.close()
            good.close()
        assert_pool_clean(pool)
