"""Exclusive lock on a broker data directory, so two live brokers never share one.

The lock is ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<data_dir>/.lock``.  The holder writes
its pid into the file (ASCII decimal, then ``\\n``) so the refusal can name it; the pid
is informational only - the kernel lock is what counts.  The kernel drops the lock when
the holding process exits for any reason (including SIGKILL), so a crashed broker never
leaves a stale lock behind; a leftover ``.lock`` file with a dead pid is harmless.

flock locks belong to an open file description: a second :class:`DataDirLock` on the
same directory in the same process is refused too.  A child created by ``fork`` while
the lock is held shares the description (and so the lock) until it exits; the file
descriptor is close-on-exec, so ``exec``'d or ``spawn``'ed children do not.

Costs: one open + one flock syscall to acquire, O(1).  Not thread-safe: one owner.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from clients.protocol.errors import ErrorCode, MiniKafkaError

LOCK_FILE = ".lock"


class DataDirLockedError(MiniKafkaError):
    """Another live process holds the data directory lock."""

    code = ErrorCode.KAFKA_STORAGE_ERROR

    def __init__(self, data_dir: str | Path, holder_pid: int | None) -> None:
        self.data_dir = str(data_dir)
        self.holder_pid = holder_pid
        holder = f"pid {holder_pid}" if holder_pid is not None else "an unknown pid"
        super().__init__(
            f"data directory {self.data_dir} is locked by another live process ({holder}); "
            "stop that process or use another data directory"
        )


class DataDirLock:
    """Holds the lock from :meth:`acquire` until :meth:`release` or process exit."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise :class:`DataDirLockedError` at once (never blocks)."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise DataDirLockedError(self.data_dir, holder) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except BaseException:
            os.close(fd)  # closing drops the lock
            raise
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (idempotent).  The file stays; its pid is simply stale."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode("ascii").strip())
    return None
