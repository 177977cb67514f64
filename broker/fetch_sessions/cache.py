"""The fetch session cache (KIP-227): Kafka's ``FetchSessionCache`` and ``FetchSession``.

A fetch session remembers, per fetcher, the partitions it fetches with their request
parameters (:class:`CachedPartition`: fetch offset, max bytes, leader epochs, the
fetcher's log start) and what the last response told it (high watermark, last stable
offset, log start offset), so an *incremental* Fetch names only the partitions whose
parameters changed and its response only the partitions with something new
(:mod:`broker.fetch_sessions.context` has those rules).

Contract (Kafka's):

- A session has a random id in ``[1, 2^31)`` not in use, an epoch (1 when created, +1
  per incremental fetch, wrapping after ``2^31 - 1`` to 1), its creation and last-used
  times, and whether it is *privileged* (a follower's).  It belongs to the principal and
  replica id that created it (``owner``): another owner gets FETCH_SESSION_ID_NOT_FOUND
  (Kafka does not check; ACLs are checked per request anyway).
- At most ``max_slots`` sessions (Kafka's ``max.incremental.fetch.session.cache.slots``,
  default 1000; 0 disables sessions).  When full, a new session evicts one (Kafka's
  ``tryEvict``): the least recently used session if unused for more than
  ``eviction_ms`` (``min.incremental.fetch.session.eviction.ms``, 120 s); otherwise the
  least valuable *evictable* session if the new one is worth more.  Value orders by
  (privileged, partition count, id): followers above clients, larger sessions above
  smaller (a newcomer ties below an equal session: it must be strictly larger).  A
  session becomes evictable when touched more than ``eviction_ms`` after its creation;
  a client (unprivileged) session is evictable by a privileged newcomer at any time.
  Otherwise the new fetch is served sessionless (session id 0).
- A session is keyed by topic name (Fetch v7-12) or by topic id (v13+, KIP-516: the
  partitions' ``topic`` is then the 16-byte id; ``uses_topic_ids``); one session never
  mixes the two (:mod:`broker.fetch_sessions.context` answers an incremental fetch at the
  other kind of version FETCH_SESSION_TOPIC_ID_ERROR, Kafka's rule).
- A session holds at most ``max_session_partitions`` partitions (our bound; Kafka has
  none besides the request size): the cache holds at most
  ``max_slots * max_session_partitions`` cached partitions.

Costs: ``get``, ``touch``, ``remove`` O(1) (a dict and an insertion-ordered dict kept in
last-used order: the clock never goes back); ``maybe_create_session`` O(1) when there is
room or the least recently used session is stale, else O(sessions) (one scan for the
least valuable evictable one, at most ``max_slots``).  Memory O(cached partitions).

Thread-safety: not thread-safe; the broker's event loop makes every call.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass

from broker.config import BrokerConfig
from clients.protocol.message_types import FetchRequestPartition, FetchResponsePartition
from timer.clock import Clock

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that asks for a new session
FINAL_EPOCH = -1  # a full fetch without a session (and the close of the one named)
SESSION_ID_LIMIT = 2**31  # ids are in [1, 2^31)


def next_epoch(epoch: int) -> int:
    """Kafka's ``FetchMetadata.nextEpoch``: 0 -> 1, -1 stays, wraps to 1 after 2^31-1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 2**31 - 1 else epoch + 1


TopicKey = str | bytes  # a topic's name (Fetch v7-12) or its 16-byte id (v13+)


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the fetcher's last request for it and the values the
    last response carried (-1 until a response carried them: always sent first)."""

    topic: TopicKey
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    fetcher_log_start_offset: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    @classmethod
    def of(cls, topic: TopicKey, request: FetchRequestPartition) -> CachedPartition:
        part = cls(topic, request["partition"], request["fetch_offset"],
                   request["partition_max_bytes"])
        part.update_request(request)
        return part

    def update_request(self, request: FetchRequestPartition) -> None:
        """Kafka's ``updateRequestParams``: the fetcher's new position and limits."""
        self.fetch_offset = request["fetch_offset"]
        self.partition_max_bytes = request["partition_max_bytes"]
        self.current_leader_epoch = request.get("current_leader_epoch", -1)
        self.last_fetched_epoch = request.get("last_fetched_epoch", -1)
        self.fetcher_log_start_offset = request.get("log_start_offset", -1)

    def as_request(self) -> FetchRequestPartition:
        return {"partition": self.partition, "fetch_offset": self.fetch_offset,
                "partition_max_bytes": self.partition_max_bytes,
                "current_leader_epoch": self.current_leader_epoch,
                "last_fetched_epoch": self.last_fetched_epoch,
                "log_start_offset": self.fetcher_log_start_offset}

    def must_respond(self, response: FetchResponsePartition, record_bytes: int,
                     update: bool) -> bool:
        """Kafka's ``maybeUpdateResponseData``: whether an incremental response must carry
        this partition (records, a changed high watermark, last stable offset or log
        start offset, an error, a diverging epoch); ``update`` records the values sent.
        An error resets the cached high watermark to -1, so the partition is sent again
        once the error is gone.  (Kafka does not compare the last stable offset; we do,
        so a read_committed fetcher always learns it.)"""
        respond = record_bytes > 0
        hw, lso = response.get("high_watermark", -1), response.get("last_stable_offset", -1)
        log_start = response.get("log_start_offset", -1)
        if (hw, lso, log_start) != (self.high_watermark, self.last_stable_offset,
                                    self.log_start_offset):
            respond = True
            if update:
                self.high_watermark, self.last_stable_offset = hw, lso
                self.log_start_offset = log_start
        if response.get("error_code", 0) != 0:
            if update:
                self.high_watermark = -1
            respond = True
        if response.get("diverging_epoch") is not None:
            respond = True
        return respond


PartitionKey = tuple[TopicKey, int]
Owner = tuple[str | None, int]  # (principal, replica_id)


class FetchSession:
    """One session: its partitions in fetch order (an insertion-ordered dict; a
    partition that returned records moves to the end, Kafka's fairness rule)."""

    __slots__ = ("cached_size", "creation_ms", "epoch", "evictable_by_all",
                 "evictable_by_privileged", "id", "last_used_ms", "owner", "partitions",
                 "privileged", "uses_topic_ids")

    def __init__(self, session_id: int, privileged: bool, owner: Owner,
                 partitions: dict[PartitionKey, CachedPartition], now_ms: int,
                 uses_topic_ids: bool = False) -> None:
        self.id = session_id
        self.uses_topic_ids = uses_topic_ids  # keyed by topic id (Fetch v13+)
        self.privileged = privileged
        self.owner = owner
        self.partitions = partitions
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.cached_size = len(partitions)
        self.evictable_by_privileged = False
        self.evictable_by_all = False

    @property
    def size(self) -> int:
        return len(self.partitions)

    def value_key(self) -> tuple[bool, int, int]:
        """Kafka's ``EvictableKey`` order: the least valuable session sorts first."""
        return (self.privileged, self.cached_size, self.id)

    def update(self, added: list[tuple[TopicKey, FetchRequestPartition]],
               forgotten: list[PartitionKey]) -> None:
        """Kafka's ``FetchSession.update``: add or update the partitions an incremental
        request names, then drop the forgotten ones (a partition both named and
        forgotten is dropped, as in Kafka)."""
        for topic, request in added:
            key = (topic, request["partition"])
            part = self.partitions.get(key)
            if part is None:
                self.partitions[key] = CachedPartition.of(topic, request)
            else:
                part.update_request(request)
        for key in forgotten:
            self.partitions.pop(key, None)


class FetchSessionCache:
    """The sessions of one broker, bounded; see the module docstring."""

    __slots__ = ("_clock", "_last_used", "_random", "_sessions", "eviction_ms",
                 "evictions", "max_session_partitions", "max_slots", "partitions")

    def __init__(self, max_slots: int, eviction_ms: int, max_session_partitions: int,
                 clock: Clock, rng: random.Random | None = None) -> None:
        if max_slots < 0 or eviction_ms < 0 or max_session_partitions < 1:
            raise ValueError("max_slots and eviction_ms must be >= 0, "
                             "max_session_partitions >= 1")
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.max_session_partitions = max_session_partitions
        self._clock = clock
        self._random = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}
        self._last_used: OrderedDict[int, FetchSession] = OrderedDict()
        self.partitions = 0  # cached partitions over all sessions (as last touched)
        self.evictions = 0

    @classmethod
    def for_broker(cls, config: BrokerConfig, clock: Clock) -> FetchSessionCache:
        """Kafka's bounds from the broker's config; a session holds at most the
        partitions one Fetch may name (``max_fetch_partitions``)."""
        return cls(config.max_incremental_fetch_session_cache_slots,
                   config.min_incremental_fetch_session_eviction_ms,
                   config.max_fetch_partitions, clock)

    def __len__(self) -> int:
        return len(self._sessions)

    def now_ms(self) -> int:
        return self._clock.now_ms()

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def maybe_create_session(self, privileged: bool, owner: Owner,
                             partitions: dict[PartitionKey, CachedPartition],
                             uses_topic_ids: bool = False) -> int:
        """A new session holding ``partitions``, evicting one if the cache is full and
        Kafka's rule allows; its id, or 0 (no session: the fetch is sessionless)."""
        if len(partitions) > self.max_session_partitions or self.max_slots == 0:
            return INVALID_SESSION_ID
        now = self._clock.now_ms()
        if len(self._sessions) >= self.max_slots and not self._try_evict(
                privileged, len(partitions), now):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, owner, partitions, now,
                               uses_topic_ids)
        session.cached_size = -1  # not yet counted: touch counts it
        self._sessions[session.id] = session
        self.touch(session)
        return session.id

    def touch(self, session: FetchSession) -> None:
        """Kafka's ``touch``: mark used now, recount its partitions, and mark it
        evictable once it is older than ``eviction_ms``."""
        now = self._clock.now_ms()
        session.last_used_ms = now
        self._last_used.pop(session.id, None)
        self._last_used[session.id] = session
        if session.cached_size >= 0:
            self.partitions -= session.cached_size
        session.cached_size = session.size
        self.partitions += session.cached_size
        old = now - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._last_used.pop(session_id, None)
            self.partitions -= max(session.cached_size, 0)
        return session

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's ``tryEvict``: a stale session first, else the least valuable
        evictable one if the newcomer (privileged, size) is worth more."""
        oldest = next(iter(self._last_used.values()), None)
        if oldest is None:
            return False
        if now - oldest.last_used_ms > self.eviction_ms:
            self.remove(oldest.id)
            self.evictions += 1
            return True
        candidates = [s for s in self._sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.value_key)
        if (privileged, size, 0) < victim.value_key():
            return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def _new_id(self) -> int:
        while True:
            session_id = self._random.randrange(1, SESSION_ID_LIMIT)
            if session_id not in self._sessions:
                return session_id
