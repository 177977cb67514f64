"""A small config file a broker re-reads when it changes (users, ACLs).

:class:`WatchedFile` holds the value parsed from a file and, when asked for it, checks
the file's modification time and size at most once every ``recheck_s`` (a second by
default); a change means a new parse.  A file that disappears gives the empty value; one
that cannot be read or parsed keeps the value last read and logs why (an operator's
half-written edit must not lock everyone out).  The first read happens at construction
and raises: a bad file at start-up is a configuration error.

Writers of such a file (the CLI, and a broker serving CreateAcls or
AlterUserScramCredentials) read, change and replace it inside :func:`edit_lock`, an
exclusive ``flock`` on ``<file>.lock``, so two writers never lose each other's change.

Costs: one ``stat`` per ``recheck_s`` while used; a parse per change; :func:`edit_lock`
blocks while another process edits (a read and an atomic write).  Thread-safety: one
owner (the broker's event loop).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from clients.protocol.errors import InvalidConfigError

__all__ = ["WatchedFile", "edit_lock"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class WatchedFile(Generic[T]):
    """The parsed content of ``path`` (``empty`` while there is none), kept current."""

    def __init__(self, path: Path | None, read: Callable[[Path], T], empty: T, what: str,
                 clock: Callable[[], float] = time.monotonic, recheck_s: float = 1.0) -> None:
        self.path = path
        self._read = read
        self._empty = empty
        self._what = what
        self._clock = clock
        self._recheck_s = recheck_s
        self._value = empty
        self._seen: tuple[int, int] | None = None  # (mtime ns, size) last read
        self._checked_at = float("-inf")
        if path is not None and path.exists():
            self._value = read(path)
            info = os.stat(path)
            self._seen = (info.st_mtime_ns, info.st_size)

    @property
    def value(self) -> T:
        self._maybe_reload()
        return self._value

    def _maybe_reload(self) -> None:
        if self.path is None:
            return
        now = self._clock()
        if now - self._checked_at < self._recheck_s:
            return
        self._checked_at = now
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            self._value, self._seen = self._empty, None
            return
        except OSError as exc:
            log.warning("cannot stat %s: %s; keeping the %s last read", self.path, exc,
                        self._what)
            return
        if (info.st_mtime_ns, info.st_size) == self._seen:
            return
        try:
            self._value = self._read(self.path)
            self._seen = (info.st_mtime_ns, info.st_size)
            log.info("re-read the %s from %s", self._what, self.path)
        except (OSError, InvalidConfigError) as exc:
            log.warning("%s; keeping the %s last read", exc, self._what)


@contextlib.contextmanager
def edit_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive edit lock of ``path`` (``flock`` on ``<path>.lock``, created
    with mode 600) while the body reads, changes and replaces the file."""
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the lock
