"""A quorum voter's directory identity: may this directory vote, or is it a lost disk?

A voter whose data directory was wiped comes back with no quorum state and an empty log:
it has forgotten the votes it cast and the entries it acknowledged (which counted toward
committing them).  Trusted as a voter it could elect a leader that lacks committed
entries, or keep a cut-off leader's check quorum alive.  So a voter from a new
directory starts as an *observer* of the KRaft replica (``KRaftReplica(observer=True)``:
it fetches but neither votes, stands, nor counts) and turns voter only once the replica
says it caught up (docs/quorum.md, "A voter whose disk was lost").

File ``<data_dir>/quorum-directory.properties``::

    # written by minikafka; do not edit
    version=1
    directory.id=<32 hex digits: random, new with every new directory (KIP-853)>
    state=voter|observer

Rules (:func:`open_voter_directory`, before the replica is built):

* the file exists: its state;
* no file but quorum data (a ``quorum-state`` file or a non-empty log): a directory
  from before this file: a voter (the file is written);
* no file and no data: a new directory.  The voters of a cluster being created are
  formatted first (:func:`format_voter_directory`: ``cluster start`` does it when every
  voter's directory is new, as ``kafka-storage format`` does); a new directory nobody
  formatted is a voter that lost its disk: an observer.

:func:`record_caught_up` rewrites the state to ``voter`` (fsync'd) once the replica's
``observer`` turned False, before it handles another event (a crash before that
restarts it as an observer again, which is safe).  The directory id is written but not
yet sent (Kafka's Fetch v17 / Vote v1 carry it; our Fetch v12 marks an observer by its
``rack_id``, :mod:`broker.controller.quorum.wire`).

Errors: a file that cannot be parsed raises
:class:`~storage.meta_properties.DataDirIdentityError` (read by
:func:`~storage.meta_properties.read_identity_file`, as ``meta.properties``; never
rewritten: the operator decides).  Costs: one small read at start, one fsync'd write
(temp, rename, directory fsync) when the state changes.  Start-up and the controller's
event loop only; one process per directory (the data-dir lock).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from broker.metadata.records import METADATA_PARTITION, METADATA_TOPIC
from replication.raft.state_file import QUORUM_STATE_FILE
from storage.file_io import atomic_write_text
from storage.meta_properties import read_identity_file

__all__ = ["VOTER_DIRECTORY_FILE", "VoterDirectory", "format_new_quorum", "format_voter_directory",
           "is_new_voter_directory", "open_voter_directory", "record_caught_up"]

VOTER_DIRECTORY_FILE = "quorum-directory.properties"
_VERSION = "1"
_MAX_BYTES = 1024
_STATES = ("voter", "observer")


@dataclass(frozen=True)
class VoterDirectory:
    directory_id: str
    observer: bool


def _path(data_dir: str | Path) -> Path:
    return Path(data_dir) / VOTER_DIRECTORY_FILE


def _read(data_dir: str | Path) -> VoterDirectory | None:
    def check(pairs: dict[str, str]) -> None:
        directory_id = pairs.get("directory.id", "")
        if pairs.get("version") != _VERSION or pairs.get("state") not in _STATES or len(
                bytes.fromhex(directory_id)) != 16:
            raise ValueError("expected version=1, a 16-byte directory.id and a state")

    pairs = read_identity_file(_path(data_dir), check, _MAX_BYTES)
    if pairs is None:
        return None
    return VoterDirectory(pairs["directory.id"], pairs["state"] == "observer")


def _write(data_dir: str | Path, directory: VoterDirectory) -> VoterDirectory:
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    state = "observer" if directory.observer else "voter"
    atomic_write_text(_path(data_dir), "# written by minikafka; do not edit\n"
                      f"version={_VERSION}\ndirectory.id={directory.directory_id}\n"
                      f"state={state}\n")
    return directory


def is_new_voter_directory(data_dir: str | Path) -> bool:
    """No identity file, no ``quorum-state`` and no metadata log segment with bytes (what
    the launcher checks before formatting; the controller asks its open log instead)."""
    root = Path(data_dir)
    segments = (root / f"{METADATA_TOPIC}-{METADATA_PARTITION}").glob("*.log")
    return (not _path(root).exists() and not (root / QUORUM_STATE_FILE).exists()
            and not any(f.stat().st_size > 0 for f in segments))


def format_voter_directory(data_dir: str | Path) -> VoterDirectory:
    """Make a new directory a voter of a cluster being created (a formatted directory
    keeps its file)."""
    return _read(data_dir) or _write(data_dir, VoterDirectory(uuid.uuid4().hex, False))


def format_new_quorum(data_dirs: Sequence[str | Path]) -> bool:
    """Format every voter directory of a quorum being created: only when all of them are
    new (a cluster started again with one directory wiped leaves that one an observer);
    True if it did."""
    if len(data_dirs) < 2 or not all(is_new_voter_directory(d) for d in data_dirs):
        return False
    for d in data_dirs:
        format_voter_directory(d)
    return True


def open_voter_directory(data_dir: str | Path, has_quorum_data: bool) -> VoterDirectory:
    """This directory's identity by the rules of the module docstring (written if new)."""
    found = _read(data_dir)
    if found is not None:
        return found
    return _write(data_dir, VoterDirectory(uuid.uuid4().hex, not has_quorum_data))


def record_caught_up(data_dir: str | Path, directory: VoterDirectory) -> VoterDirectory:
    """The observer caught up: a voter from now on, also after a restart."""
    return _write(data_dir, VoterDirectory(directory.directory_id, False))
