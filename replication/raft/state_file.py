"""QuorumStateFile: the fsync'd ``quorum-state`` file of a KRaft voter (the real store).

Format: JSON ``{"version": 0, "epoch": E, "voted_for": id|null, "leader_id": id|null}``
in ``<data dir>/quorum-state`` (Kafka keeps the same three facts in its
``quorum-state`` file).  Written with :func:`storage.file_io.atomic_write_bytes`: temp file,
fsync, rename, fsync of the directory, so :meth:`QuorumStateFile.write` returns only once
the state survives a power cut (the :class:`replication.raft.quorum_state.QuorumStateStore`
contract).  A missing file reads as None (a new voter); a file that does not parse, or has
another version, raises ``ValueError`` (a voter must not forget a vote it cast).

Costs: two fsyncs and a rename per write (writes happen only on epoch, vote and leader
changes); one small read at start.  Not thread-safe: one owner writes it.
"""

from __future__ import annotations

import json
from pathlib import Path

from replication.raft.quorum_state import ElectionState
from storage.file_io import atomic_write_bytes, read_small_file

__all__ = ["QUORUM_STATE_FILE", "QuorumStateFile"]

QUORUM_STATE_FILE = "quorum-state"
_MAX_BYTES = 4096


class QuorumStateFile:
    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / QUORUM_STATE_FILE

    def read(self) -> ElectionState | None:
        data = read_small_file(self.path, _MAX_BYTES)
        if data is None:
            return None
        try:
            doc = json.loads(data) if len(data) <= _MAX_BYTES else None
            if not isinstance(doc, dict) or doc.get("version") != 0:
                raise ValueError("not a version 0 quorum-state document")
            epoch, voted, leader = doc["epoch"], doc["voted_for"], doc["leader_id"]
            if not isinstance(epoch, int) or not all(
                    v is None or isinstance(v, int) for v in (voted, leader)):
                raise ValueError("fields of the wrong type")
            return ElectionState(epoch, voted, leader)
        except (ValueError, KeyError) as exc:
            raise ValueError(f"{self.path}: unreadable quorum state: {exc}") from exc

    def write(self, state: ElectionState) -> None:
        doc = {"version": 0, "epoch": state.epoch, "voted_for": state.voted_for,
               "leader_id": state.leader_id}
        atomic_write_bytes(self.path, json.dumps(doc).encode())
