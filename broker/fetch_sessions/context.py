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
| epoch > 0, a session by topic id | error         | nothing              | FETCH_SESSION_TOPIC |
| at v7-12, or by name at v13+     |               |                      | _ID_ERROR (106)     |

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

Topics are keyed by name at v7-12 and by topic id at v13+ (KIP-516): the context's
``topics`` then carry ``topic_id`` (and an empty ``name``: the handler resolves the names
from the metadata image on every read, so an id the broker does not know is answered
UNKNOWN_TOPIC_ID and stays in the session, as in Kafka); responses are matched to the
session by the same key.

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
    TopicKey,
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
FIRST_TOPIC_ID_VERSION = 13  # Fetch names topics by id from here on (KIP-516)


def topic_key(topic: FetchRequestTopic | FetchResponseResponse, by_id: bool) -> TopicKey:
    """The key of a request's or response's topic entry: its id (v13+) or its name."""
    return topic["topic_id"] if by_id else topic["name"]


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
    by_id: bool = False  # topics keyed by id (v13+)

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
        by_id = self.by_id
        parts: dict[PartitionKey, CachedPartition] = {}
        for topic in self.topics:
            key = topic_key(topic, by_id)
            for request in topic["partitions"]:
                parts[(key, request["partition"])] = CachedPartition.of(key, request)
        for topic_response in response["responses"]:
            key = topic_key(topic_response, by_id)
            for p in topic_response["partitions"]:
                cached = parts.get((key, p["partition_index"]))
                if cached is not None:
                    cached.must_respond(p, 0, update=True)
        return self.cache.maybe_create_session(self.privileged, self.owner, parts, by_id)

    def _incremental(self, response: FetchResponse) -> FetchResponse:
        session = self.session
        assert session is not None and self.cache is not None
        if self.cache.get(session.id) is not session or session.epoch != self.expected_epoch:
            return {"throttle_time_ms": 0, "session_id": session.id, "responses": [],
                    "error_code": int(ErrorCode.INVALID_FETCH_SESSION_EPOCH)}
        kept: list[FetchResponseResponse] = []
        for topic_response in response["responses"]:
            topic = topic_key(topic_response, self.by_id)
            parts = []
            for p in topic_response["partitions"]:
                key = (topic, p["partition_index"])
                cached = session.partitions.get(key)
                records = p.get("records")
                size = len(records) if records is not None else 0
                if cached is None or not cached.must_respond(p, size, update=True):
                    continue
                parts.append(p)
                if size > 0:  # fetched last next time (Kafka's fairness rule)
                    session.partitions[key] = session.partitions.pop(key)
            if parts:
                kept.append({**topic_response, "partitions": parts})
        answer: FetchResponse = {"throttle_time_ms": response.get("throttle_time_ms", 0),
                                 "error_code": response.get("error_code", 0),
                                 "session_id": session.id, "responses": kept}
        if "node_endpoints" in response:
            answer["node_endpoints"] = response["node_endpoints"]
        return answer


def _named(body: FetchRequest, by_id: bool) -> list[tuple[TopicKey, FetchRequestPartition]]:
    return [(topic_key(t, by_id), p) for t in body.get("topics", []) for p in t["partitions"]]


def _forgotten(body: FetchRequest, by_id: bool) -> list[PartitionKey]:
    return [(t["topic_id"] if by_id else t["name"], p)
            for t in body.get("forgotten_topics_data") or [] for p in t["partitions"]]


def session_topics(parts: Iterable[CachedPartition], by_id: bool) -> list[FetchRequestTopic]:
    """The partitions as a request's ``topics`` (consecutive partitions of one topic
    grouped; a topic may appear twice when the session's order interleaves); by id
    (``topic_id``, the name left for the handler to resolve) or by name."""
    topics: list[FetchRequestTopic] = []
    last: TopicKey | None = None
    for part in parts:
        if last != part.topic:
            last = part.topic
            topics.append({"topic_id": part.topic, "name": "", "partitions": []}
                          if isinstance(part.topic, bytes)
                          else {"name": part.topic, "partitions": []})
        topics[-1]["partitions"].append(part.as_request())
    return topics


def new_context(cache: FetchSessionCache, body: FetchRequest, version: int,
                owner: Owner) -> FetchContext:
    """Kafka's ``FetchManager.newContext`` for one request; see the module docstring."""
    privileged = owner[1] >= 0
    by_id = version >= FIRST_TOPIC_ID_VERSION
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
                            cache=cache, by_id=by_id)
    session = cache.get(session_id)
    if session is None or session.owner != owner:
        return FetchContext(ERROR, [], int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
    if epoch != session.epoch:
        return FetchContext(ERROR, [], int(ErrorCode.INVALID_FETCH_SESSION_EPOCH))
    if session.uses_topic_ids != by_id:  # names and ids never mix in a session
        return FetchContext(ERROR, [], int(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR))
    session.update(_named(body, by_id), _forgotten(body, by_id))
    if session.size > cache.max_session_partitions:  # our bound: the fetcher starts over
        cache.remove(session.id)
        return FetchContext(ERROR, [], int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
    if session.size == 0:
        cache.remove(session.id)
        return FetchContext(SESSIONLESS, [])
    cache.touch(session)
    session.epoch = next_epoch(session.epoch)
    return FetchContext(INCREMENTAL, session_topics(session.partitions.values(), by_id),
                        session=session, expected_epoch=session.epoch,
                        privileged=privileged, owner=owner, cache=cache, by_id=by_id)
