"""Client-side cache of cluster metadata: brokers, topics, partitions and their leaders.

Filled from Metadata responses (any version 0-12; fields a version lacks read as their
defaults, e.g. no leader epoch before v7; shape in
:mod:`clients.protocol.messages.metadata`). The cache never asks the network itself: the
owner (the producer's sender thread, the consumer or the admin client) calls
:meth:`ClusterMetadata.update_needed` to decide when to send a Metadata request and
feeds the answer to :meth:`ClusterMetadata.update`. Refreshes are rate limited: after
any attempt the next one waits ``retry_backoff_ms``; without a request the cache is
refreshed every ``metadata_max_age_ms``.

A topic whose metadata carries an error (UNKNOWN_TOPIC_OR_PARTITION right after its
creation, LEADER_NOT_AVAILABLE during an election) is kept with that error and no
partitions, so callers can tell "unknown yet" from "never asked".

Time: seconds on the ``clock`` passed in (the owner's; the monotonic clock when none
is), or the ``now`` a caller passes.

Topic ids (Metadata v10+) are kept per topic (:meth:`ClusterMetadata.topic_id`; the
zero UUID when unknown): the consumer fetches by id when every topic has one.

Costs: an update is O(partitions in the response); lookups are O(1) dict reads.

Thread safety: every method takes the instance lock, so user threads (``send`` waiting
for a topic's partitions) and the sender thread (updating) may share one instance;
:meth:`wait_for_update` blocks on a condition, always with a timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence

from clients.protocol.errors import ErrorCode, InvalidConfigError
from clients.protocol.message_types import MetadataResponse
from clients.protocol.topics import ZERO_UUID, TopicPartition
from clients.types import BrokerNode, PartitionInfo

__all__ = ["ClusterMetadata", "parse_bootstrap"]


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` or ``["h1:9092", ...]`` -> ``[("h1", 9092), ...]``."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[tuple[str, int]] = []
    for raw in items:
        item = raw.strip()
        host, sep, port_text = item.rpartition(":")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise InvalidConfigError(f"bootstrap server {item!r} is not host:port")
        out.append((host.strip("[]"), int(port_text)))
    if not out:
        raise InvalidConfigError("bootstrap_servers is empty")
    return out


class ClusterMetadata:
    """Brokers and topic partitions as last reported by the cluster."""

    def __init__(
        self,
        *,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self._clock = clock
        self._cond = threading.Condition(threading.Lock())
        self.version = 0
        self.cluster_id: str | None = None
        self.controller_id = -1
        self._brokers: dict[int, BrokerNode] = {}
        self._partitions: dict[str, dict[int, PartitionInfo]] = {}
        self._topic_errors: dict[str, ErrorCode] = {}
        self._topic_ids: dict[str, bytes] = {}  # Metadata v10+ (the zero UUID: none)
        self._internal: set[str] = set()
        self._interest: set[str] = set()
        self._need_update = True
        self._last_attempt = float("-inf")
        self._last_success = float("-inf")

    # ------------------------------------------------------------ refresh policy
    def add_topics(self, topics: Iterable[str]) -> bool:
        """Track topics for refreshes; True (and an update requested) if any was new."""
        with self._cond:
            new = set(topics) - self._interest
            if new:
                self._interest |= new
                self._need_update = True
            return bool(new)

    @property
    def topics_of_interest(self) -> list[str]:
        with self._cond:
            return sorted(self._interest)

    def request_update(self) -> int:
        """Ask for a refresh at the next opportunity; returns the current version."""
        with self._cond:
            self._need_update = True
            return self.version

    def time_to_next_update_ms(self, now: float | None = None) -> float:
        """0 when a Metadata request should be sent now, else how long to wait."""
        now = self._clock() if now is None else now
        with self._cond:
            backoff_left = (self._last_attempt + self.retry_backoff_ms / 1000 - now) * 1000
            if self._need_update:
                return max(0.0, backoff_left)
            age_left = (self._last_success + self.metadata_max_age_ms / 1000 - now) * 1000
            return max(0.0, backoff_left, age_left)

    def update_needed(self, now: float | None = None) -> bool:
        return self.time_to_next_update_ms(now) == 0.0

    def attempt_started(self, now: float | None = None) -> None:
        with self._cond:
            self._last_attempt = self._clock() if now is None else now

    def failed_update(self, now: float | None = None) -> None:
        with self._cond:
            self._last_attempt = self._clock() if now is None else now
            self._need_update = True

    # ------------------------------------------------------------ update
    def update(self, body: MetadataResponse, now: float | None = None) -> None:
        """Replace the cache with a Metadata response body (brokers and listed topics)."""
        now = self._clock() if now is None else now
        brokers = {
            b["node_id"]: BrokerNode(b["node_id"], b["host"], b["port"], b.get("rack"))
            for b in body["brokers"]
        }
        partitions: dict[str, dict[int, PartitionInfo]] = {}
        errors: dict[str, ErrorCode] = {}
        internal: set[str] = set()
        ids: dict[str, bytes] = {}
        for t in body["topics"]:
            name = t["name"]
            if name is None:  # answered by topic id alone: we always ask by name
                continue
            code = _code(t["error_code"])
            ids[name] = t.get("topic_id", ZERO_UUID)
            if t.get("is_internal"):
                internal.add(name)
            if code != ErrorCode.NONE:
                errors[name] = code
                continue
            partitions[name] = {
                p["partition_index"]: PartitionInfo(
                    name,
                    p["partition_index"],
                    p["leader_id"],
                    p["leader_epoch"],
                    tuple(p["replica_nodes"]),
                    tuple(p["isr_nodes"]),
                    tuple(p.get("offline_replicas", ())),
                    p["error_code"],
                )
                for p in t["partitions"]
            }
        with self._cond:
            self._brokers = brokers
            self.cluster_id = body.get("cluster_id")
            self.controller_id = body["controller_id"]
            for name, parts in partitions.items():
                self._partitions[name] = parts
                self._topic_errors.pop(name, None)
                self._topic_ids[name] = ids[name]
            for name, code in errors.items():
                self._partitions.pop(name, None)
                self._topic_ids.pop(name, None)
                self._topic_errors[name] = code
            self._internal = internal | (self._internal - set(partitions) - set(errors))
            self._need_update = any(
                p.leader < 0 for parts in partitions.values() for p in parts.values()
            ) or bool(errors.keys() & self._interest)
            self._last_attempt = now
            self._last_success = now
            self.version += 1
            self._cond.notify_all()

    def wait_for_update(self, version: int, timeout_s: float) -> bool:
        """Block until the version moves past ``version`` (True) or the timeout (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.version > version, timeout=max(0, timeout_s))

    def forget_topic(self, topic: str) -> None:
        with self._cond:
            self._partitions.pop(topic, None)
            self._topic_errors.pop(topic, None)
            self._topic_ids.pop(topic, None)
            self._interest.discard(topic)

    # ------------------------------------------------------------ lookups
    def brokers(self) -> list[BrokerNode]:
        with self._cond:
            return sorted(self._brokers.values())

    def broker(self, node_id: int) -> BrokerNode | None:
        with self._cond:
            return self._brokers.get(node_id)

    def topics(self) -> list[str]:
        with self._cond:
            return sorted(self._partitions)

    def topic_id(self, topic: str) -> bytes:
        """The topic's id (Metadata v10+); the zero UUID when unknown or it has none."""
        with self._cond:
            return self._topic_ids.get(topic, ZERO_UUID)

    def is_internal(self, topic: str) -> bool:
        with self._cond:
            return topic in self._internal

    def topic_error(self, topic: str) -> ErrorCode | None:
        """The error the last metadata gave for ``topic`` (None: known fine or never seen)."""
        with self._cond:
            return self._topic_errors.get(topic)

    def partition_count(self, topic: str) -> int | None:
        with self._cond:
            parts = self._partitions.get(topic)
            return len(parts) if parts is not None else None

    def partitions_for(self, topic: str) -> list[PartitionInfo] | None:
        with self._cond:
            parts = self._partitions.get(topic)
            return [parts[i] for i in sorted(parts)] if parts is not None else None

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        with self._cond:
            parts = self._partitions.get(tp.topic)
            return parts.get(tp.partition) if parts is not None else None

    def leader_for(self, tp: TopicPartition) -> int | None:
        """Node id of the partition's leader, or None when unknown/unavailable."""
        with self._cond:
            parts = self._partitions.get(tp.topic)
            info = parts.get(tp.partition) if parts is not None else None
            if info is None or info.leader < 0 or info.leader not in self._brokers:
                return None
            return info.leader


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
