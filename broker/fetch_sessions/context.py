"""One Fetch request against the session cache: Kafka's ``FetchManager.newContext`` and
its ``FetchContext`` kinds.

:func:`new_context` decides, from ``session_id`` / ``session_epoch`` (KIP-227), what the
request reads and how its response is built:

| request                          | context       | reads                | response            |
|----------------------------------|---------------|----------------------|---------------------|
| v4-6, or epoch -1 (FINAL)        | sessionless   | the named partitions | all, session_id 0   |
| epoch 0 (INITIAL)                | full          | the named partitions | all; a new session  |
|                                  |               |                      | id (0: cache full)  |
| epoch > 0, session found, epoch  | incremental   | every partition of   | only partitions     |
| matches, owner matches           |               | the session          | with news (below)   |
| epoch > 0, no such session       | error         | nothing              | FETCH_SESSION_ID_   |
| (or another owner's, or over the |               |                      | NOT_FOUND (70)      |
| per-session partition bound)     |               |                      |                     |
| epoch > 0, epoch differs         | error         | nothing              | INVALID_FETCH_      |
|                                  |               |                      | SESSION_EPOCH (71)  |

A full fetch naming a ``session_id`` closes that session first (epoch 0 or -1, Kafka's
rule).  An incremental request adds or updates the partitions it names and drops its
``forgotten_topics_data``; if nothing is left the session is closed and the fetch is
sessionless.  Its response carries a partition only when
:meth:`~broker.fetch_sessions.cache.CachedPartition.must_respond` says so (records, a
changed high watermark / last stable offset / log start offset, an error, a diverging
epoch); a partition that returned records moves to the end of the session's order
(Kafka's fairness rule under ``max_bytes``).  If the session changed between the
request and its response (a parked fetch, evicted or re-used meanwhile) the response is
INVALID_FETCH_SESSION_EPOCH, as in Kafka.

Authorization is not the session's business: the handler checks every partition it
reads on every request (incremental ones included), as Kafka does.

Costs: :func:`new_context` O(named + forgotten partitions), plus O(session partitions)
to list an incremental read; :meth:`FetchContext.finish` O(response partitions).
Thread-safety: the broker's event loop only (as the cache).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.fetch_sessions.cache import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    Owner,
    PartitionKey,
    next_epoch,
)
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    FetchRequest,
    FetchRequestPartition,
    FetchRequestTopic,
    FetchResponse,
    FetchResponseResponse,
)

SESSIONLESS, FULL, INCREMENTAL, ERROR = "sessionless", "full", "incremental", "error"
FIRST_SESSION_VERSION = 7


@dataclass(slots=True)
class FetchContext:
    """What one Fetch reads (``topics``, in order) and how its response is finished."""

    kind: str
    topics: list[FetchRequestTopic]
    error_code: int = 0
    session: FetchSession | None = None
    expected_epoch: int = 0
    privileged: bool = False
    owner: Owner = (None, -1)
    cache: FetchSessionCache | None = field(default=None, repr=False)

    def finish(self, response: FetchResponse) -> FetchResponse:
        """The response to send for ``response`` (every read partition answered):
        unchanged but for ``session_id`` (sessionless, full), filtered (incremental),
        or the context's error with no partition."""
        if self.kind == ERROR:
            return {"throttle_time_ms": 0, "error_code": self.error_code,
                    "session_id": INVALID_SESSION_ID, "responses": []}
        if self.kind == SESSIONLESS or self.cache is None:
            response["session_id"] = INVALID_SESSION_ID
            return response
        if self.kind == FULL:
            response["session_id"] = self._create(response)
            return response
        return self._incremental(response)

    def _create(self, response: FetchResponse) -> int:
        assert self.cache is not None
        if response.get("error_code", 0) != 0:
            return INVALID_SESSION_ID
        parts: dict[PartitionKey, CachedPartition] = {}
        for topic in self.topics:
            for request in topic["partitions"]:
                parts[(topic["name"], request["partition"])] = CachedPartition.of(
                    topic["name"], request)
        for topic_response in response["responses"]:
            for p in topic_response["partitions"]:
                cached = parts.get((topic_response["name"], p["partition_index"]))
                if cached is not None:
                    cached.must_respond(p, 0, update=True)
        return self.cache.maybe_create_session(self.privileged, self.owner, parts)

    def _incremental(self, response: FetchResponse) -> FetchResponse:
        session = self.session
        assert session is not None and self.cache is not None
        if self.cache.get(session.id) is not session or session.epoch != self.expected_epoch:
            return {"throttle_time_ms": 0, "session_id": session.id, "responses": [],
                    "error_code": int(ErrorCode.INVALID_FETCH_SESSION_EPOCH)}
        kept: list[FetchResponseResponse] = []
        for topic_response in response["responses"]:
            name = topic_response["name"]
            parts = []
            for p in topic_response["partitions"]:
                key = (name, p["partition_index"])
                cached = session.partitions.get(key)
                records = p.get("records")
                size = len(records) if records is not None else 0
                if cached is None or not cached.must_respond(p, size, update=True):
                    continue
                parts.append(p)
                if size > 0:  # fetched last next time (Kafka's fairness rule)
                    session.partitions[key] = session.partitions.pop(key)
            if parts:
                kept.append({"name": name, "partitions": parts})
        return {"throttle_time_ms": response.get("throttle_time_ms", 0),
                "error_code": response.get("error_code", 0), "session_id": session.id,
                "responses": kept}


def _named(body: FetchRequest) -> list[tuple[str, FetchRequestPartition]]:
    return [(t["name"], p) for t in body.get("topics", []) for p in t["partitions"]]


def _forgotten(body: FetchRequest) -> list[PartitionKey]:
    return [(t["name"], p) for t in body.get("forgotten_topics_data") or []
            for p in t["partitions"]]


def session_topics(parts: Iterable[CachedPartition]) -> list[FetchRequestTopic]:
    """The partitions as a request's ``topics`` (consecutive partitions of one topic
    grouped; a topic may appear twice when the session's order interleaves)."""
    topics: list[FetchRequestTopic] = []
    for part in parts:
        if not topics or topics[-1]["name"] != part.topic:
            topics.append({"name": part.topic, "partitions": []})
        topics[-1]["partitions"].append(part.as_request())
    return topics


def new_context(cache: FetchSessionCache, body: FetchRequest, version: int,
                owner: Owner) -> FetchContext:
    """Kafka's ``FetchManager.newContext`` for one request; see the module docstring."""
    privileged = owner[1] >= 0
    session_id = body.get("session_id", INVALID_SESSION_ID)
    epoch = body.get("session_epoch", FINAL_EPOCH)
    if version < FIRST_SESSION_VERSION:
        return FetchContext(SESSIONLESS, body["topics"])
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            closed = cache.get(session_id)
            if closed is not None and closed.owner == owner:
                cache.remove(session_id)
        kind = SESSIONLESS if epoch == FINAL_EPOCH else FULL
        return FetchContext(kind, body["topics"], privileged=privileged, owner=owner,
                            cache=cache)
    session = cache.get(session_id)
    if session is None or session.owner != owner:
        return FetchContext(ERROR, [], int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
    if epoch != session.epoch:
        return FetchContext(ERROR, [], int(ErrorCode.INVALID_FETCH_SESSION_EPOCH))
    session.update(_named(body), _forgotten(body))
    if session.size > cache.max_session_partitions:  # our bound: the fetcher starts over
        cache.remove(session.id)
        return FetchContext(ERROR, [], int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
    if session.size == 0:
        cache.remove(session.id)
        return FetchContext(SESSIONLESS, [])
    cache.touch(session)
    session.epoch = next_epoch(session.epoch)
    return FetchContext(INCREMENTAL, session_topics(session.partitions.values()),
                        session=session, expected_epoch=session.epoch,
                        privileged=privileged, owner=owner, cache=cache)
