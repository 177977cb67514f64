"""Client users: SCRAM credentials in a file every broker reads (``sasl_users_file``).

Kafka keeps SCRAM credentials in its metadata (AlterUserScramCredentials); a local
minikafka cluster keeps them in one file beside ``cluster.json``, written by
``minikafka cluster add-user NAME --password-stdin`` and read by every broker (the
launcher passes ``sasl_users_file=<data_dir>/users.scram``).  The file never holds a
password, only RFC 5802's salted keys, one line per user and mechanism::

    # minikafka SCRAM users: name mechanism salt iterations stored_key server_key
    alice SCRAM-SHA-256 <salt b64> 4096 <stored key b64> <server key b64>
    alice SCRAM-SHA-512 <salt b64> 4096 <stored key b64> <server key b64>

It must be readable by its owner only (mode 600), like the cluster secret.  Kafka's
DescribeUserScramCredentials / AlterUserScramCredentials
(:mod:`broker.handlers.admin.scram_users`) read and edit the same file
(:func:`read_users`, :func:`edit_users`), so a user a client adds reaches every broker
the way ``add-user`` does; every writer holds the file's edit lock
(:func:`broker.watched_file.edit_lock`) while it reads, changes and replaces it.  A broker
re-reads it when its modification time or size changes (checked at most once a second,
on a login), so adding a user needs no restart; a file that cannot be read or parsed
keeps the users last read and logs why.  Names are 1-64 characters of ``A-Z a-z 0-9 .
_ -`` and may not start with ``broker-`` (the cluster's own brokers log in with names
derived from the cluster secret, :mod:`broker.auth`).

Costs: a login is one dictionary lookup (plus the stat once a second); writing a user is
two PBKDF2 runs (one per mechanism).  Thread-safety: one owner (the broker's event loop,
or the CLI process).
"""

from __future__ import annotations

import base64
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from broker.watched_file import WatchedFile, edit_lock
from clients.protocol.errors import InvalidConfigError
from clients.protocol.scram import (
    BROKER_PREFIX,
    DEFAULT_ITERATIONS,
    MECHANISMS,
    ScramCredential,
    make_credential,
)
from storage.file_io import atomic_write_text

__all__ = ["USERS_FILE", "ScramUsers", "Users", "add_user", "check_user_name", "edit_users",
           "read_users"]


USERS_FILE = "users.scram"
USER_ITERATIONS = DEFAULT_ITERATIONS  # as an unknown user's made-up answer: no tell
_MAX_ITERATIONS = 1_000_000
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_HEADER = "# minikafka SCRAM users: name mechanism salt iterations stored_key server_key\n"
_MAX_FILE_BYTES = 4 << 20


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


Users: TypeAlias = dict[tuple[str, str], ScramCredential]  # (name, mechanism) -> keys


def _parse(text: str, path: Path) -> Users:
    users: Users = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split()
        try:
            name, mechanism, salt, iterations, stored, server = fields
            if not _NAME.fullmatch(name) or mechanism not in MECHANISMS:
                raise ValueError("bad name or mechanism")
            if not DEFAULT_ITERATIONS <= int(iterations) <= _MAX_ITERATIONS:
                raise ValueError(f"iterations must be {DEFAULT_ITERATIONS}..{_MAX_ITERATIONS}")
            users[(name, mechanism)] = ScramCredential(
                base64.b64decode(salt, validate=True), int(iterations),
                base64.b64decode(stored, validate=True), base64.b64decode(server, validate=True))
        except ValueError as exc:
            raise InvalidConfigError(f"{path} line {number}: not a SCRAM user line "
                                     f"({exc})") from None
    return users


def read_users(path: Path) -> Users:
    """The users of the file at ``path`` (none when it does not exist)."""
    if not path.exists():
        return {}
    info = os.stat(path)
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidConfigError(f"{path} is readable by others (chmod 600 it)")
    if info.st_size > _MAX_FILE_BYTES:
        raise InvalidConfigError(f"{path} is larger than {_MAX_FILE_BYTES} bytes")
    return _parse(path.read_text("utf-8"), path)


class ScramUsers:
    """The users of ``path`` ("" for none), re-read when the file changes."""

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path) if path else None
        self._file: WatchedFile[Users] = WatchedFile(self.path, read_users, {}, "SCRAM users",
                                                     clock)

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def credential(self, mechanism: str, name: str) -> ScramCredential | None:
        """The stored keys of ``name`` for ``mechanism`` (None: no such user)."""
        return self._file.value.get((name, mechanism))


def check_user_name(name: str) -> None:
    """InvalidConfigError unless ``name`` may be a client user's."""
    if not _NAME.fullmatch(name) or name.startswith(BROKER_PREFIX):
        raise InvalidConfigError(
            f"user name {name!r}: 1-64 characters of A-Z a-z 0-9 . _ -, not starting with "
            f"{BROKER_PREFIX!r}")


def edit_users(path: Path, edit: Callable[[Users], Users]) -> Users:
    """Under the file's edit lock: read the users, ``edit`` them (it returns the new
    mapping) and write the file (mode 600) when they changed; returns the users now in
    it.  A result too large for the file raises InvalidConfigError, writing nothing."""
    with edit_lock(path):
        users = read_users(path)
        changed = edit(dict(users))
        if changed != users:
            text = "".join([_HEADER] + [
                f"{n} {m} {_b64(c.salt)} {c.iterations} {_b64(c.stored_key)} "
                f"{_b64(c.server_key)}\n" for (n, m), c in sorted(changed.items())])
            if len(text.encode("utf-8")) > _MAX_FILE_BYTES:
                raise InvalidConfigError(f"the users file would exceed {_MAX_FILE_BYTES} bytes")
            atomic_write_text(path, text)
            os.chmod(path, 0o600)
        return changed


def add_user(path: Path, name: str, password: bytes) -> None:
    """Add ``name`` (or replace its credentials) for every SCRAM mechanism."""
    check_user_name(name)
    if len(password) < 8:
        raise InvalidConfigError("a password needs at least 8 bytes")
    made = {(name, mechanism): make_credential(mechanism, password, iterations=USER_ITERATIONS)
            for mechanism in MECHANISMS}
    edit_users(path, lambda users: {**users, **made})
