"""Durable file writes: the write-all loop, fsync of files and directories, atomic replace.

Every storage file that must survive a crash is written through these helpers:
checkpoints (:mod:`storage.checkpoint`), producer snapshots
(:mod:`storage.producer_snapshot`), the cleaner's swap files (:mod:`storage.cleaner.swap`),
index rebuilds (:mod:`storage.index.offset_index`), the clean-shutdown marker
(:mod:`storage.log_manager`) and the directory syncs of a log
(:mod:`storage.log.segment_list`, :mod:`storage.log.recovery`).

* :func:`write_all` loops ``os.write`` until every byte is written (a short write is
  legal for regular files too, e.g. on a full disk before the error surfaces).
* :func:`fsync_dir` makes creations, renames and deletions in a directory durable.
* :func:`atomic_write_bytes` replaces a file so that a crash leaves the old or the new
  content, never a mix: write ``<path>.tmp``, fsync it, ``os.replace`` it over ``<path>``,
  fsync the directory.  A stray ``.tmp`` from a crash is overwritten by the next write.

Costs: O(bytes) to write plus one fsync per file and per directory.  Thread safety: the
functions share no state; two writers of the same path (or of its ``.tmp``) must not run
at once, which the one-owner rule of each file guarantees.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "TMP_SUFFIX",
    "atomic_write_bytes",
    "atomic_write_text",
    "fsync_dir",
    "write_all",
    "write_file_fsynced",
]

TMP_SUFFIX = ".tmp"


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of ``data`` to ``fd`` at its current position (or end, with
    ``O_APPEND``), looping over short writes."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def fsync_dir(path: str | Path) -> None:
    """fsync a directory so that creations, renames and deletions in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_fsynced(path: str | Path, data: bytes | bytearray | memoryview, *,
                       fsync: bool = True) -> None:
    """Create or truncate ``path``, write all of ``data`` and fsync the file (not the
    directory: callers that rename it fsync the directory after the rename); with
    ``fsync=False`` the bytes are left to the kernel's writeback."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes | bytearray | memoryview,
                       *, sync_dir: bool = True, durable: bool = True) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync the directory
    (skip the last step with ``sync_dir=False`` when the caller fsyncs it later).  With
    ``durable=False`` neither fsync is done: after a crash ``path`` may be missing,
    empty or partly written, so only files whose reader checks them (a CRC, or a count
    and an order) and can do without them may be written that way."""
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    write_file_fsynced(tmp, data, fsync=durable)
    os.replace(tmp, path)
    if sync_dir and durable:
        fsync_dir(path.parent)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) as :func:`atomic_write_bytes` does."""
    atomic_write_bytes(path, text.encode("utf-8"))


def read_small_file(path: str | Path, max_bytes: int) -> bytes | None:
    """The first ``max_bytes + 1`` bytes of ``path`` (one more than allowed, so the caller
    can tell a file that is too large); None when it does not exist; OSError otherwise."""
    try:
        with open(path, "rb") as f:
            return f.read(max_bytes + 1)
    except FileNotFoundError:
        return None
