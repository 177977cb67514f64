"""RaftConfig: the timeouts and bounds of one KRaft replica, in milliseconds.

Defaults are Kafka's (``controller.quorum.election.timeout.ms`` 1000,
``controller.quorum.fetch.timeout.ms`` 2000, ``controller.quorum.election.backoff.max.ms``
1000, ``controller.quorum.retry.backoff.ms`` 20); ``request_timeout_ms`` is shorter than
Kafka's 2000 (a request lost on the way is re-sent after it; at 2000 one lost Fetch would
already cost the follower its leader).  ``max_fetch_entries`` bounds one Fetch answer,
``max_fetch_snapshot_bytes`` one FetchSnapshot answer (Kafka's
``controller.quorum.fetch.snapshot.max.bytes`` is not a setting: its FetchSnapshot
``max_bytes``); ``max_snapshot_bytes`` the snapshot a follower accepts (held in memory
until installed).

Costs: none (a frozen value).  Immutable: safe from any thread.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RaftConfig"]


@dataclass(frozen=True, slots=True)
class RaftConfig:
    election_timeout_ms: int = 1000  # randomized in [t, 2t) from the injected RNG
    fetch_timeout_ms: int = 2000  # follower: no answer from the leader; leader: check quorum
    election_backoff_max_ms: int = 1000  # after a lost election
    retry_backoff_ms: int = 20  # re-send Vote / BeginQuorumEpoch; EndQuorumEpoch successor step
    request_timeout_ms: int = 500  # an unanswered Fetch is sent again after this
    fetch_interval_ms: int = 50  # a caught-up follower's next Fetch (the leader's long poll)
    max_fetch_entries: int = 100  # entries in one Fetch answer
    max_fetch_snapshot_bytes: int = 1024 * 1024  # bytes in one FetchSnapshot answer
    max_snapshot_bytes: int = 256 * 1024 * 1024  # a fetched snapshot, whole

    def __post_init__(self) -> None:
        for name in ("election_timeout_ms", "fetch_timeout_ms", "election_backoff_max_ms",
                     "retry_backoff_ms", "request_timeout_ms", "fetch_interval_ms",
                     "max_fetch_entries", "max_fetch_snapshot_bytes", "max_snapshot_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
