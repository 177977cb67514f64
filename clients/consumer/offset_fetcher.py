"""The consumer's offset look-ups: ListOffsets (1-7) to the partition leaders, for
positions awaiting a reset and for ``beginning_offsets`` / ``end_offsets`` /
``offsets_for_times`` (Kafka's OffsetFetcher).

Resets: a partition in AWAIT_RESET (see :mod:`clients.consumer.subscription_state`)
gets its position from ListOffsets with its pending reset timestamp (-2 earliest / -1
latest), else with ``auto_offset_reset``'s; with ``"none"`` and no pending reset,
:class:`NoOffsetForPartitionError` is raised.  Each call sends one request per leader
and returns; partitions not resolved (leadership errors, which refresh the metadata)
are asked again by the next call.

Look-ups: :meth:`OffsetFetcher.list_offsets` asks for any partitions (assigned or not)
and retries leadership errors (refreshing the metadata, sleeping ``retry_backoff_ms``)
until the deadline, then raises RequestTimedOutError naming the last error.

Costs: one ListOffsets round trip per leader per attempt.  Deadlines are seconds on the
consumer's clock (``clock``, passed in); backoffs sleep.  Not thread-safe (the consumer's
thread).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from clients.consumer.subscription_state import PositionState, SubscriptionState
from clients.network.cluster_metadata import ClusterMetadata
from clients.network.node_connections import NodeConnections
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, RequestTimedOutError, error_for
from clients.protocol.message_types import (
    ListOffsetsRequest,
    ListOffsetsRequestPartition,
    ListOffsetsResponse,
)
from clients.protocol.offset_specs import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from clients.protocol.topics import TopicPartition

__all__ = ["RESET_TIMESTAMPS", "NoOffsetForPartitionError", "OffsetFetcher", "OffsetSettings"]

RESET_TIMESTAMPS: dict[str, int | None] = {
    "earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP, "none": None}
"""``auto_offset_reset`` -> the ListOffsets timestamp it asks for (None: raise)."""


class NoOffsetForPartitionError(MiniKafkaError):
    """A partition has no position and ``auto_offset_reset="none"``."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class OffsetSettings(Protocol):
    """The consumer settings the offset look-ups read."""

    auto_offset_reset: str
    request_timeout_ms: int
    retry_backoff_ms: int


class OffsetFetcher:
    """ListOffsets for resets and for the consumer's offset look-ups."""

    def __init__(self, settings: OffsetSettings, subscriptions: SubscriptionState[Any],
                 metadata: ClusterMetadata, net: NodeConnections, *, isolation: int,
                 clock: Callable[[], float]) -> None:
        self._settings = settings
        self._clock = clock  # seconds, the consumer's
        self._subscriptions = subscriptions
        self._metadata = metadata
        self._net = net
        self._isolation = isolation

    def _list_offsets_body(self, topics: dict[str, list[ListOffsetsRequestPartition]],
                           ) -> ListOffsetsRequest:
        return {"replica_id": -1, "isolation_level": self._isolation,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

    def resolve_positions(self, deadline: float) -> None:
        """One attempt at the position of every partition awaiting a reset."""
        states = self._subscriptions.states
        await_reset = PositionState.AWAIT_RESET  # inlined: iteration calls this per record
        missing = [tp for tp, s in states.items() if s.fetch_state is await_reset]
        auto_offset_reset = self._settings.auto_offset_reset
        if missing and auto_offset_reset == "none":
            unreset = [tp for tp in missing if states[tp].reset is None]
            if unreset:
                raise NoOffsetForPartitionError(
                    f"no position for {unreset} and auto_offset_reset='none' (seek first)"
                )
        self.ensure_metadata(deadline)
        if not missing:
            return
        default = RESET_TIMESTAMPS[auto_offset_reset]
        by_node: dict[int, dict[str, list[ListOffsetsRequestPartition]]] = {}
        for tp in missing:
            leader = self._metadata.leader_for(tp)
            if leader is None:
                self._metadata.request_update()
                continue
            state = states[tp]
            ts = state.reset if state.reset is not None else default
            assert ts is not None  # "none" without a pending reset raised above
            by_node.setdefault(leader, {}).setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "timestamp": ts}
            )
        for node, topics in by_node.items():
            timeout_ms = max(1.0, (deadline - self._clock()) * 1000)
            try:
                body = cast(ListOffsetsResponse, self._net.request(
                    node, ApiKey.LIST_OFFSETS, self._list_offsets_body(topics),
                    min(timeout_ms, self._settings.request_timeout_ms)))
            except MiniKafkaError as e:
                if not e.retriable:
                    raise
                self._metadata.request_update()
                continue
            for t in body["topics"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    st = self._subscriptions.states.get(tp)
                    if st is None or st.fetch_state is not PositionState.AWAIT_RESET:
                        continue
                    if p["error_code"] == ErrorCode.NONE:
                        st.offset_resolved(p["offset"])
                        continue
                    error = error_for(p["error_code"], f"list offsets of {tp}")
                    if not error.retriable:
                        raise error
                    self._metadata.request_update()

    def ensure_metadata(self, deadline: float) -> None:
        """Refresh the metadata if an update was requested (retriable errors wait for
        the next call)."""
        if not self._metadata.update_needed():
            return
        timeout_ms = min(self._settings.request_timeout_ms,
                         (deadline - self._clock()) * 1000)  # fmt: skip
        if timeout_ms <= 0:
            return
        try:
            self._net.refresh_metadata(self._metadata.topics_of_interest, timeout_ms)
        except MiniKafkaError as e:
            if not e.retriable:
                raise

    def list_offsets(
        self, query: dict[TopicPartition, int], deadline: float
    ) -> dict[TopicPartition, tuple[int, int, int]]:
        """ListOffsets to each leader: {tp: (offset, timestamp, leader epoch)}; leadership
        errors refresh the metadata and are retried until the deadline."""
        request_timeout_ms = self._settings.request_timeout_ms
        backoff_s = self._settings.retry_backoff_ms / 1000
        out: dict[TopicPartition, tuple[int, int, int]] = {}
        pending = dict(query)
        last: MiniKafkaError | None = None
        while pending:
            remaining_ms = (deadline - self._clock()) * 1000
            if remaining_ms <= 0:
                why = f" (last error: {last})" if last is not None else ""
                raise RequestTimedOutError(
                    f"offsets of {sorted(pending)} not found in time{why}")
            topics = sorted({tp.topic for tp in pending})
            try:
                self._net.refresh_metadata(topics, min(remaining_ms, request_timeout_ms))
            except MiniKafkaError as e:
                if not e.retriable:
                    raise
                last = e
                time.sleep(min(backoff_s, max(0.0, remaining_ms / 1000)))
                continue
            by_node: dict[int, dict[str, list[ListOffsetsRequestPartition]]] = {}
            for tp, ts in pending.items():
                leader = self._metadata.leader_for(tp)
                if leader is None:
                    code = self._metadata.topic_error(tp.topic)
                    last = error_for(code or ErrorCode.LEADER_NOT_AVAILABLE, f"{tp}")
                    continue
                by_node.setdefault(leader, {}).setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "timestamp": ts})
            for node, topics_ in by_node.items():
                remaining_ms = max(1.0, (deadline - self._clock()) * 1000)
                try:
                    body = cast(ListOffsetsResponse, self._net.request(
                        node, ApiKey.LIST_OFFSETS, self._list_offsets_body(topics_),
                        min(remaining_ms, request_timeout_ms)))
                except MiniKafkaError as e:
                    if not e.retriable:
                        raise
                    last = e
                    continue
                for t in body["topics"]:
                    for p in t["partitions"]:
                        tp = TopicPartition(t["name"], p["partition_index"])
                        if tp not in pending:
                            continue
                        if p["error_code"] == ErrorCode.NONE:
                            out[tp] = (p["offset"], p["timestamp"], p["leader_epoch"])
                            del pending[tp]
                            continue
                        error = error_for(p["error_code"], f"list offsets of {tp}")
                        if not error.retriable:
                            raise error
                        last = error
            if pending:
                self._metadata.request_update()
                time.sleep(min(backoff_s, max(0.0, deadline - self._clock())))
        return out
