"""Fetch file regions on the network process side: their wire form, and the descriptor cache.

A RESPONSE's segments part (after the response's buffer bytes, see
:mod:`broker.network`) is a msgpack array that says, in order, what goes on the wire:
``[n]`` sends the next ``n`` bytes of the buffer (the frame's bytes are in the buffer in
order, and the ``n`` of all such entries add up to them), a region
``[path, position, length, st_dev, st_ino]`` (``storage.log.FileRegion.wire``; the
legacy ``[path, position, length]`` skips the identity check) is sent with ``sendfile``.
A Kafka Fetch response has records in the middle of each partition's answer, so bytes
and regions interleave.  A region:

| field    | msgpack type | meaning                                                    |
|----------|--------------|------------------------------------------------------------|
| path     | str / bin    | segment file the main process read                         |
| position | int >= 0     | byte position in that file                                 |
| length   | int >= 0     | bytes to ``sendfile`` (0: skipped)                         |
| st_dev   | int          | device of the file the main process read (optional)        |
| st_ino   | int          | inode of that file (optional, with st_dev)                 |

:func:`parse_regions` checks exactly this shape and raises :class:`RegionError`
otherwise.  Files are opened through :class:`FileCache`, a bounded LRU of descriptors,
re-opened when the path now names another file.  A region is sent only from a
descriptor of the very file the main process read (same device and inode): a cached
descriptor of that file still serves it even if the path was since replaced or
unlinked (segment bytes below the log end offset never change in place), and the stale
entry then leaves the cache; otherwise a missing, too short or *replaced* file
(compaction swapped a rewritten ``B.log`` in, retention deleted it, the topic was
re-created) is a :class:`RegionError`, on which the network process closes the
connection.

Costs: ``parse_regions`` O(regions); ``FileCache.acquire`` one ``stat`` (plus ``open``
and ``fstat`` on a miss), O(1) amortised, ``release`` O(1) unless over capacity
(O(capacity) trim).  Memory: at most ``capacity`` idle descriptors (plus those in use).
Thread-safety: none; a cache belongs to the one thread of its network process.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

import msgpack

from clients.protocol.errors import InvalidConfigError


class RegionError(Exception):
    """A fetch region cannot be sent as promised (missing or short file, bad entry)."""


class OpenFile:
    """A cached read-only descriptor of one segment file, with its identity and size."""

    __slots__ = ("dev", "fd", "ino", "path", "refs", "size")

    def __init__(self, path: str, fd: int, st: os.stat_result) -> None:
        self.path, self.fd, self.refs = path, fd, 0
        self.dev, self.ino, self.size = st.st_dev, st.st_ino, st.st_size


class FileCache:
    """LRU of open read-only descriptors by path, at most ``capacity`` idle entries.

    ``acquire(path, identity)`` stats the path (one syscall) and reuses the cached
    descriptor only if it still names the same file (device + inode), so a deleted and
    re-created segment is never read through a stale descriptor.  With ``identity``
    (the ``(st_dev, st_ino)`` the region was read from) the returned descriptor is
    always of that file: a cached descriptor of it is used even when the path was
    replaced or removed meanwhile (and leaves the cache, so the old file's space is
    freed on release); a path that now names another file raises :class:`RegionError`.
    A path found missing or replaced drops its cached entry.  Entries in use by a
    connection are never closed; an entry replaced while in use is closed on its last
    ``release``.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise InvalidConfigError(f"file cache capacity must be positive, got {capacity}")
        self.capacity = capacity
        self._files: OrderedDict[str, OpenFile] = OrderedDict()

    def __len__(self) -> int:
        return len(self._files)

    def acquire(self, path: str, identity: tuple[int, int] | None = None) -> OpenFile:
        files = self._files
        entry = files.get(path)
        try:
            st: os.stat_result | None = os.stat(path)
            stat_error = ""
        except OSError as exc:
            st, stat_error = None, exc.strerror or str(exc)
        if entry is not None:
            current = st is not None and entry.ino == st.st_ino and entry.dev == st.st_dev
            if current or (entry.dev, entry.ino) == identity:
                entry.refs += 1
                if current:
                    assert st is not None
                    entry.size = st.st_size
                    files.move_to_end(path)
                else:  # the path moved on: serve this region, then let the file go
                    entry.size = os.fstat(entry.fd).st_size
                    del files[path]
                return self._checked(entry, identity)
            del files[path]
            self._close_if_idle(entry)
        if st is None:
            raise RegionError(f"cannot stat {path!r}: {stat_error}")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise RegionError(f"cannot open {path!r}: {exc.strerror}") from None
        entry = OpenFile(path, fd, os.fstat(fd))
        entry.refs = 1
        files[path] = entry
        if len(files) > self.capacity:
            self._trim()
        return self._checked(entry, identity)

    def _checked(self, entry: OpenFile, identity: tuple[int, int] | None) -> OpenFile:
        if identity is None or (entry.dev, entry.ino) == identity:
            return entry
        self.release(entry)
        raise RegionError(
            f"{entry.path!r} is not the file the fetch read (device/inode {identity}, now "
            f"{(entry.dev, entry.ino)}): replaced by a compaction swap or a re-created topic"
        )

    def release(self, entry: OpenFile) -> None:
        entry.refs -= 1
        if self._files.get(entry.path) is not entry:
            self._close_if_idle(entry)
        elif len(self._files) > self.capacity:
            self._trim()

    def _trim(self) -> None:
        files = self._files
        idle = [e for e in files.values() if e.refs == 0][: len(files) - self.capacity]
        for entry in idle:  # least recently used first
            del files[entry.path]
            os.close(entry.fd)
            entry.fd = -1

    @staticmethod
    def _close_if_idle(entry: OpenFile) -> None:
        if entry.refs == 0 and entry.fd >= 0:
            os.close(entry.fd)
            entry.fd = -1

    def close(self) -> None:
        for entry in self._files.values():
            os.close(entry.fd)
            entry.fd = -1
        self._files.clear()


def parse_regions(data: memoryview, inline_bytes: int) -> list[Any]:
    """The segments of a RESPONSE (the table above), checked; :class:`RegionError`
    otherwise (also when the ``[n]`` entries do not add up to ``inline_bytes``)."""
    try:
        regions = msgpack.unpackb(data)
    except Exception as exc:
        raise RegionError(f"regions are not msgpack: {exc}") from None
    if type(regions) is not list:
        raise RegionError(f"regions must be a list, got {type(regions).__name__}")
    inline = 0
    for region in regions:
        if type(region) is list and len(region) == 1:
            if type(region[0]) is not int or region[0] < 0:
                raise RegionError(f"inline entry must be [n >= 0], got {region!r}")
            inline += region[0]
            continue
        if (
            type(region) is not list
            or len(region) not in (3, 5)
            or type(region[0]) not in (str, bytes)
            or not all(type(v) is int for v in region[1:])
            or region[1] < 0
            or region[2] < 0
        ):
            raise RegionError(
                "region must be [path, position >= 0, length >= 0(, st_dev, st_ino)], "
                f"got {region!r}"
            )
    if inline != inline_bytes:
        raise RegionError(f"inline entries name {inline} bytes, the response has {inline_bytes}")
    return regions
