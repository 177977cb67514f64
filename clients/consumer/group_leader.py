"""The group leader's part of the classic consumer protocol (Kafka's
``ConsumerCoordinator.onLeaderElected`` and its metadata snapshot): run the chosen
assignor over every member's subscription, and, while Stable, watch the partition counts
of the topics it assigned.

Assigning: the leader decodes all subscriptions (:mod:`clients.consumer.group_protocol`),
refreshes metadata for every subscribed topic with ``request_timeout_ms`` whatever
``poll``'s timeout (Kafka waits unboundedly: bounded by a short poll the refresh timed
out on a slow broker, and a leader whose cache never saw the topics handed out empty
assignments), runs the assignor on the topics it knows and returns SyncGroup's
``assignments``.  Topics it does not know are remembered with a count of 0.

Watching: :meth:`GroupLeader.partition_counts_changed` is True when a group topic's
partition count changed, or a topic unknown when assigning (count 0) appeared; while one
is unknown it refreshes metadata (every ``retry_backoff_ms``, the metadata's own
backoff, as Kafka).

Costs: an assignment is one metadata round trip plus the assignor
(:mod:`clients.consumer.assignors`); a watch is O(group topics) cache look-ups and at
most one metadata refresh.  Not thread-safe (the consumer's poll thread).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from clients.consumer.assignors import MemberSubscription
from clients.consumer.coordinator_channel import GroupConfig
from clients.consumer.group_protocol import Assignment, decode_subscription, encode_assignment
from clients.network.cluster_metadata import ClusterMetadata
from clients.network.node_connections import NodeConnections
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import JoinGroupResponseMember, SyncGroupRequestAssignment

__all__ = ["GroupLeader"]

log = logging.getLogger(__name__)


class GroupLeader:
    """Assignments made as the leader, and the partition counts they were made with."""

    def __init__(self, config: GroupConfig, net: NodeConnections,
                 metadata: ClusterMetadata) -> None:
        self.config = config
        self._net = net
        self._metadata = metadata
        self.partition_counts: dict[str, int] = {}  # of the last assignment; 0: unknown

    def assign(self, protocol_name: str | None,
               members: list[JoinGroupResponseMember]) -> list[SyncGroupRequestAssignment]:
        """SyncGroup's ``assignments`` for JoinGroup's ``members``."""
        assignor = next((a for a in self.config.assignors if a.name == protocol_name), None)
        if assignor is None:
            raise MiniKafkaError(f"coordinator chose protocol {protocol_name!r} which this "
                                 "consumer did not offer", ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        subscriptions = [
            MemberSubscription(m["member_id"], decode_subscription(m["metadata"]),
                               m.get("group_instance_id"))
            for m in members
        ]  # fmt: skip
        topics = sorted({t for m in subscriptions for t in m.subscription.topics})
        self._metadata.add_topics(topics)
        self._refresh_metadata("before assigning")  # Kafka too waits for it, unbounded
        counts = self._partition_counts(topics)
        self.partition_counts = counts  # unknown topics as 0: watched while Stable
        result = assignor.assign({t: c for t, c in counts.items() if c}, subscriptions)
        log.info("group %s: leader assigned %s with %s", self.config.group_id,
                 {m: len(tps) for m, tps in result.items()}, assignor.name)
        return [{"member_id": m, "assignment": encode_assignment(Assignment(tuple(tps)))}
                for m, tps in result.items()]  # fmt: skip

    def partition_counts_changed(self) -> bool:
        """True when a group topic's partition count changed, or a topic the metadata did
        not know when assigning (count 0) appeared; while one is unknown, keep
        refreshing metadata (every ``retry_backoff_ms``, as Kafka)."""
        if not all(self.partition_counts.values()):
            self._metadata.request_update()
            if self._metadata.update_needed():
                self._refresh_metadata("for a subscribed topic not in the metadata")
        counts = self._partition_counts(self.partition_counts)
        if counts == self.partition_counts:
            return False
        log.info("group %s: partition counts changed %s -> %s, rebalancing",
                 self.config.group_id, self.partition_counts, counts)
        return True

    def _partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """Partition count of each topic from the cache; 0 when it does not know it."""
        return {t: self._metadata.partition_count(t) or 0 for t in topics}

    def _refresh_metadata(self, why: str) -> None:
        """Metadata for every topic of interest, given up to ``request_timeout_ms`` whatever
        the caller's poll timeout: a refresh bounded by a short poll times out on a slow
        broker (which also closes that connection) and leaves the cache as it was."""
        try:
            self._net.refresh_metadata(self._metadata.topics_of_interest,
                                       self.config.request_timeout_ms)
        except MiniKafkaError as e:
            if not e.retriable:
                raise
            log.warning("group %s: metadata refresh %s failed: %s", self.config.group_id,
                        why, e)
