"""A fetcher's fetch session with one broker: Kafka's client ``FetchSessionHandler``.

Sans-IO state shared by our followers (:mod:`replication.follower_fetch`) and our
consumer (:mod:`clients.consumer.fetcher`).  Each Fetch to the broker is built with
:meth:`FetchSessionHandler.build` from the partitions to fetch now and their request
fields; each answer goes to :meth:`handle_response`, a lost connection or a failed
request to :meth:`handle_error`.

Contract (Kafka's):

- No session yet (``session_id`` 0, epoch 0: INITIAL): a *full* fetch naming every
  partition; the broker answers every one and, if it kept a session, its id.  A full
  answer that does not name every partition, or no session id, leaves the next fetch
  full (epoch 0) again.
- In a session (epoch >= 1): an *incremental* fetch names only the partitions added or
  whose fields changed since the last request (``fetch_offset``, ``partition_max_bytes``,
  leader epochs, log start), and lists the partitions no longer fetched in
  ``forgotten_topics_data``; the broker answers only partitions with news, so a
  partition missing from an answer had nothing new.  An answer naming a partition
  outside the session, a top-level error (FETCH_SESSION_ID_NOT_FOUND: a new session;
  any other: close this one and start again) or :meth:`handle_error` make the next fetch
  full.  An answer with ``session_id`` 0 means the broker closed the session.
- The epoch advances by one per answered incremental fetch, wrapping to 1 after
  ``2^31 - 1``.
- Topic ids (KIP-516, Fetch v13+): :meth:`build` given every topic's id (none the zero
  UUID) names topics by id (``topic_id``; ``name`` kept for our own reading) and the
  request may go at v13+ (:attr:`FetchRequestData.max_version`); otherwise by name, at
  most v12 (Kafka's ``FetchRequest.Builder`` rule).  A session never mixes the two: a
  change between names and ids, or of a topic's id (deleted and re-created), makes the
  next fetch full (closing the session).  :meth:`handle_response` puts the names back
  into a v13+ answer's topics (an id it did not send: ``name`` "", which fails the
  answer as a partition outside the session).

Costs: :meth:`build` O(partitions to fetch + session partitions) dict work, one
comparison of the request fields per partition; :meth:`handle_response` O(answer
partitions) (O(session) for a full answer).  Memory: one request entry per session
partition.  Not thread-safe: one owner (an event loop or the consumer's thread).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.registry import APIS
from clients.protocol.topics import ZERO_UUID

Key = tuple[str, int]  # (topic, partition)
PartitionFields = dict[str, Any]  # a FetchRequest partition entry
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
SESSION_ERRORS = frozenset({int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
                            int(ErrorCode.INVALID_FETCH_SESSION_EPOCH),
                            int(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)})
LAST_NAME_VERSION = 12  # Fetch names topics up to v12, by id from v13 (KIP-516)


def highest_fetch_version(body: Mapping[str, Any], highest: int) -> int:
    """The highest version a Fetch ``body`` can go at: ``highest`` when its topics carry
    ids, else at most v12 (names).  For requests built without a session handler (the
    metadata log fetch, repair fetches, tests)."""
    topics = [*body.get("topics", ()), *(body.get("forgotten_topics_data") or ())]
    if any(t.get("topic_id", ZERO_UUID) != ZERO_UUID for t in topics):
        return highest
    return min(highest, LAST_NAME_VERSION)


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


@dataclass(slots=True)
class FetchRequestData:
    """What one Fetch sends: its session fields, partitions and forgotten partitions."""

    session_id: int
    session_epoch: int
    topics: list[dict[str, Any]]
    forgotten_topics_data: list[dict[str, Any]]
    fetched: set[Key] = field(default_factory=set)  # every partition of the session
    names_by_id: dict[bytes, str] | None = None  # by topic id (v13+) when set

    @property
    def full(self) -> bool:
        return self.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    @property
    def max_version(self) -> int:
        """The highest Fetch version this request may go at (v13+ only by id)."""
        return (APIS[ApiKey.FETCH].max_version if self.names_by_id is not None
                else LAST_NAME_VERSION)

    def fields(self) -> dict[str, Any]:
        """The Fetch body fields this sets."""
        return {"session_id": self.session_id, "session_epoch": self.session_epoch,
                "topics": self.topics, "forgotten_topics_data": self.forgotten_topics_data}


def _grouped(keys: list[Key], parts: Mapping[Key, PartitionFields],
             ids: Mapping[str, bytes]) -> list[dict[str, Any]]:
    topics: list[dict[str, Any]] = []
    by_topic: dict[str, dict[str, Any]] = {}
    for topic, index in keys:
        entry = by_topic.get(topic)
        if entry is None:
            entry = by_topic[topic] = {"name": topic, "partitions": []}
            if ids:
                entry["topic_id"] = ids[topic]
            topics.append(entry)
        entry["partitions"].append(parts[(topic, index)])
    return topics


class FetchSessionHandler:
    """The session with one broker; see the module docstring.  ``enabled`` False: every
    fetch is full and sessionless (epoch -1), the behaviour before KIP-227."""

    __slots__ = ("enabled", "epoch", "incremental_fetches", "partitions", "session_id",
                 "topic_ids")

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.session_id = 0
        self.epoch = INITIAL_EPOCH if enabled else FINAL_EPOCH
        self.partitions: dict[Key, PartitionFields] = {}  # as last sent
        self.topic_ids: dict[str, bytes] = {}  # the session's topic ids (empty: by name)
        self.incremental_fetches = 0  # answered without error (for tests and stats)

    def build(self, wanted: Mapping[Key, PartitionFields],
              topic_ids: Mapping[str, bytes] | None = None) -> FetchRequestData:
        """The Fetch fields for fetching ``wanted`` now (insertion order kept); by topic
        id when ``topic_ids`` gives every wanted topic a (non-zero) id."""
        ids: dict[str, bytes] = {}
        if topic_ids is not None:
            ids = {t: topic_ids.get(t, ZERO_UUID) for t, _ in wanted}
            if ZERO_UUID in ids.values():
                ids = {}
        old_ids = self.topic_ids
        if self.epoch not in (INITIAL_EPOCH, FINAL_EPOCH) and (
                bool(ids) != bool(old_ids)
                or any(old_ids.get(t, i) != i for t, i in ids.items())):
            self.epoch = INITIAL_EPOCH  # names <-> ids, or an id changed: start over
        self.topic_ids = ids
        names = {i: t for t, i in ids.items()} if ids else None
        if self.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            self.partitions = dict(wanted)
            return FetchRequestData(self.session_id, self.epoch,
                                    _grouped(list(wanted), wanted, ids), [], set(wanted),
                                    names)
        send = [k for k, fields in wanted.items() if self.partitions.get(k) != fields]
        forgotten = [k for k in self.partitions if k not in wanted]
        self.partitions = dict(wanted)
        forgotten_topics: dict[str, list[int]] = {}
        for topic, index in forgotten:
            forgotten_topics.setdefault(topic, []).append(index)
        return FetchRequestData(
            self.session_id, self.epoch, _grouped(send, wanted, ids),
            [{"name": t, "topic_id": old_ids[t], "partitions": ps} if old_ids
             else {"name": t, "partitions": ps} for t, ps in forgotten_topics.items()],
            set(wanted), names)

    def handle_response(self, sent: FetchRequestData, body: Mapping[str, Any]) -> bool:
        """Take a Fetch answer to ``sent``; False when it cannot be used as an answer
        for the session (a session error, or partitions that do not fit): the next
        fetch is full.  Partition errors are the caller's business.  A v13+ answer's
        topics get their names back (``name``, from the ids ``sent``)."""
        names = sent.names_by_id
        if names is not None:
            for t in body.get("responses", ()):
                t["name"] = names.get(t.get("topic_id", ZERO_UUID), "")
        if not self.enabled:
            return body.get("error_code", 0) == 0
        code = body.get("error_code", 0)
        if code:
            self._restart(close=code != ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
            return False
        answered = {(t["name"], p["partition_index"]) for t in body.get("responses", [])
                    for p in t["partitions"]}
        session_id = body.get("session_id", 0)
        if sent.full:
            if answered != sent.fetched:
                self._restart(close=False)
                return False
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH if session_id == 0 else 1
            return True
        if not answered <= sent.fetched:
            self._restart(close=True)
            return False
        if session_id == 0:  # the broker closed the session
            self._restart(close=False)
            return True
        self.epoch = _next_epoch(self.epoch)
        self.incremental_fetches += 1
        return True

    def handle_error(self) -> None:
        """The request failed (lost connection, timeout): the next fetch is full and
        closes this session (Kafka's ``nextCloseExisting``)."""
        if self.enabled:
            self._restart(close=True)

    def _restart(self, close: bool) -> None:
        if not close:
            self.session_id = 0
        self.epoch = INITIAL_EPOCH
