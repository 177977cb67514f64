"""The consumer's KIP-848 group membership (``group_protocol="consumer"``): what
:class:`~clients.consumer.consumer.Consumer` drives from ``poll``, with the same surface
as the classic protocol's :class:`~clients.consumer.coordinator.ConsumerCoordinator`.

Parts: the pure member state machine (:mod:`clients.consumer.membership.member`), its
heartbeat thread (:mod:`clients.consumer.membership.heartbeat_thread`), and the classic
protocol's coordinator discovery and commit channel
(:class:`~clients.consumer.coordinator_channel.CoordinatorChannel`,
:class:`~clients.consumer.offset_committer.OffsetCommitter` with
:class:`~clients.consumer.auto_commit.AutoCommit`, shared with the classic protocol;
OffsetCommit carries the member epoch as its generation, which is what v9 means by it).

``poll`` (the consumer's thread): restarts the poll timer, finds the coordinator when
none is known, and runs the step the state machine hands out, in Kafka's order:

- reconcile: auto commit (sync) of the partitions being revoked, then
  ``on_partitions_revoked(revoked)``, then they leave the fetch positions; then the
  added partitions join them (at their committed offsets) and
  ``on_partitions_assigned(added)``;
- lose (fenced, or stuck past ``max_poll_interval_ms``): ``on_partitions_revoked`` of
  everything owned, no commit (another member may own them already);
- leave (``unsubscribe``, ``close``): auto commit (sync), ``on_partitions_revoked``, then
  the leave heartbeat (epoch -1; -2 for a static member).

Records are fetched for the partitions owned meanwhile (the protocol never gives a
partition to a member before its previous owner revoked it).  Topic ids of the target
assignment are resolved by the consumer's metadata (Metadata v10+); the topics of the
subscription are added to it, so a target naming them resolves after one refresh.
A pattern subscription (``subscribe(pattern=...)``, a ``str`` or flag-less
``re.Pattern``) goes as ``subscribed_topic_regex`` and the broker resolves it (RE2
syntax; it refuses the rest with INVALID_REGULAR_EXPRESSION, raised from poll as a
fatal error, as Kafka's); the member does not know the matched names, so a target
topic id it cannot resolve refreshes the metadata of every topic.  Names and a pattern
are mutually exclusive until ``unsubscribe`` (Kafka's rule); ``subscription`` is then
the topics of the partitions owned.
``group_instance_id`` makes the member static.  Server-side assignor: the broker's
default unless ``group_remote_assignor`` names one (``uniform``, ``range``).

Costs: see the parts.  Thread safety: the consumer's poll thread; the heartbeat thread
shares only :class:`~clients.consumer.coordinator_channel.GroupShared` (its lock also
guards the state machine).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable

from clients.consumer.auto_commit import AutoCommit
from clients.consumer.coordinator import ConsumerCoordinator, RebalanceListener
from clients.consumer.coordinator_channel import CoordinatorChannel, GroupConfig, GroupShared
from clients.consumer.membership.heartbeat_thread import MembershipHeartbeat
from clients.consumer.membership.member import (
    ConsumerMembership,
    MembershipConfig,
    MembershipState,
    Step,
    StepKind,
)
from clients.consumer.offset_committer import CommitCallback, OffsetCommitter
from clients.network.cluster_metadata import ClusterMetadata
from clients.network.node_connections import NodeConnections
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.protocol.request_channel import ClientResponse
from clients.protocol.topics import ZERO_UUID, TopicPartition
from clients.types import ConsumerGroupMetadata, OffsetAndMetadata

log = logging.getLogger(__name__)

FETCHING_STATES = frozenset({MembershipState.STABLE, MembershipState.RECONCILING,
                             MembershipState.ACKNOWLEDGING})


class ConsumerProtocolMembership:
    """KIP-848 membership for one consumer (see the module docstring)."""

    def __init__(
        self,
        config: GroupConfig,
        net: NodeConnections,
        metadata: ClusterMetadata,
        *,
        client_id: str,
        positions: Callable[[], dict[TopicPartition, int]],
        set_assignment: Callable[[set[TopicPartition]], None],
        clock: Callable[[], float],
        remote_assignor: str | None = None,
    ) -> None:
        self.config = config
        self._net = net
        self._metadata = metadata
        self._set_assignment = set_assignment
        self._clock = clock
        self.shared = GroupShared(last_poll=clock())
        self.channel = CoordinatorChannel(
            config.group_id, net, self.shared, client_id=client_id,
            request_timeout_ms=config.request_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms, max_in_flight=config.max_in_flight,
            on_response=self._on_response, clock=clock)
        self.offsets = OffsetCommitter(self.channel, in_group=lambda: self.subscribed,
                                       instance_id=config.group_instance_id)
        self.auto_commit = AutoCommit(
            self.offsets, positions, enabled=config.enable_auto_commit,
            interval_ms=config.auto_commit_interval_ms,
            request_timeout_ms=config.request_timeout_ms, clock=clock)
        self.membership = ConsumerMembership(MembershipConfig(
            config.group_id, str(uuid.uuid4()),
            rebalance_timeout_ms=config.rebalance_timeout_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            retry_backoff_ms=config.retry_backoff_ms, server_assignor=remote_assignor,
            instance_id=config.group_instance_id))
        self.heartbeat = MembershipHeartbeat(
            self.shared, self.membership, client_id=client_id, sasl=net.sasl,
            ssl_context=net.ssl_context, request_timeout_ms=config.request_timeout_ms,
            clock=clock)
        self.topics: tuple[str, ...] = ()
        self.pattern: str | None = None  # subscribed_topic_regex, resolved by the broker
        self.listener: RebalanceListener | None = None
        self.owned: set[TopicPartition] = set()
        self.rebalances = 0  # reconciliations completed (stats, tests)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # ------------------------------------------------------------ subscription
    def subscribe(self, topics: Iterable[str], listener: RebalanceListener | None,
                  pattern: Pattern | None = None) -> None:
        """Join for topic names, or for ``pattern`` (a regular expression the broker
        resolves, ``subscribed_topic_regex``; ``topics`` then empty)."""
        names = tuple(sorted(set(topics)))
        pattern = pattern_string(pattern)
        if pattern is not None:
            if names:
                raise ValueError("subscribe to topic names or to a pattern, not both")
            if not isinstance(pattern, str) or not pattern:
                raise ValueError(f"subscribe needs a non-empty pattern, got {pattern!r}")
        elif not names or not all(isinstance(t, str) and t for t in names):
            raise ValueError(f"subscribe needs non-empty topic names, got {names!r}")
        if self.subscribed and (self.pattern is None) != (pattern is None):
            raise MiniKafkaError("subscribe: topic names and a pattern are mutually exclusive "
                                 "(Kafka's rule): unsubscribe() first", ErrorCode.INVALID_REQUEST)
        self.listener = listener
        self._metadata.add_topics(names)
        self.topics, self.pattern = names, pattern
        with self.shared.lock:
            if pattern is not None:
                self.membership.subscribe(self._now_ms(), pattern=pattern)
            else:
                self.membership.subscribe(self._now_ms(), topics=names)
        self.heartbeat.start()
        self.heartbeat.wake.set()

    def unsubscribe(self) -> None:
        """Revoke everything (with an auto commit), leave the group, forget the subscription."""
        if self.subscribed:
            self._leave(self._clock() + self.config.request_timeout_ms / 1000)
        self.topics, self.pattern = (), None

    @property
    def subscribed(self) -> bool:
        return bool(self.topics) or self.pattern is not None

    @property
    def subscription(self) -> tuple[str, ...]:
        """The topic names; with a pattern, those of the partitions owned (Kafka's)."""
        if self.pattern is None:
            return self.topics
        return tuple(sorted({tp.topic for tp in self.owned}))

    def group_metadata(self) -> ConsumerGroupMetadata:
        """What a transactional producer's TxnOffsetCommit carries: the member epoch as
        the generation (-1 and "" while not a member)."""
        with self.shared.lock:
            epoch = self.membership.member_epoch
            member_id = self.membership.config.member_id if epoch > 0 else ""
        return ConsumerGroupMetadata(self.config.group_id, epoch if epoch > 0 else -1,
                                     member_id, self.config.group_instance_id)

    @property
    def state(self) -> MembershipState:
        with self.shared.lock:
            return self.membership.state

    # ------------------------------------------------------------ poll
    def poll(self, deadline: float) -> bool:
        """Commit callbacks, auto commit, the membership's step; True when the member
        may fetch what it owns."""
        with self.shared.lock:
            self.shared.last_poll = self._clock()
            self.membership.poll(self._now_ms())
        self._raise_fatal()
        self.channel.drain(0)
        self.offsets.run_callbacks()
        if not self.subscribed:
            return True
        if self.channel.ensure(deadline) is None:
            return False
        self._run_step()
        with self.shared.lock:
            fetching = self.membership.state in FETCHING_STATES
        if fetching:
            self.auto_commit.maybe_commit_async()
        self.offsets.run_callbacks()
        return fetching

    def time_to_next_poll_ms(self) -> float:
        wait = float(self.config.retry_backoff_ms)
        return max(0.0, min(wait, self.auto_commit.time_to_next_ms()))

    def _raise_fatal(self) -> None:
        with self.shared.lock:
            fatal, self.shared.fatal = self.shared.fatal, None
        if fatal is not None:
            raise fatal

    def _on_response(self, response: ClientResponse) -> None:
        self.offsets.on_response(response)

    def _topic_names(self) -> dict[bytes, str]:
        out = {}
        for name in self._metadata.topics():
            topic_id = self._metadata.topic_id(name)
            if topic_id != ZERO_UUID:
                out[topic_id] = name
        return out

    def _run_step(self) -> None:
        with self.shared.lock:
            step = self.membership.next_step(self._topic_names())
            unresolved = (step is None and self.membership.state is MembershipState.RECONCILING)
        if unresolved:  # a target topic id the metadata does not know yet
            self._refresh_metadata()
        if step is None:
            return
        self._execute(step)
        with self.shared.lock:
            self.membership.step_done(self._now_ms())
        self.heartbeat.wake.set()  # acknowledge / rejoin / leave at once

    def _refresh_metadata(self) -> None:
        """Metadata for the subscription (rate-limited by the metadata's own backoff), so a
        target's topic ids resolve; with a pattern, every topic's (the broker matched
        them; we do not know their names); a failure waits for the next poll."""
        self._metadata.request_update()
        if not self._metadata.update_needed():
            return
        topics = None if self.pattern is not None else self._metadata.topics_of_interest
        try:
            self._net.refresh_metadata(topics, self.config.request_timeout_ms)
        except MiniKafkaError as e:
            if not e.retriable:
                raise
            log.warning("group %s: metadata refresh failed: %s", self.config.group_id, e)

    def _execute(self, step: Step) -> None:
        if step.kind is not StepKind.LOSE and step.revoked:
            self.auto_commit.commit_sync("before revoking", step.revoked)
        if step.revoked:
            if self.listener is not None:
                self.listener.on_partitions_revoked(set(step.revoked))
            self.owned -= step.revoked
            self._set_assignment(set(self.owned))
        if step.added:
            self.owned |= step.added
            self._set_assignment(set(self.owned))
            if self.listener is not None:
                self.listener.on_partitions_assigned(set(step.added))
        if step.kind is StepKind.RECONCILE:
            self.rebalances += 1
            log.info("group %s: epoch %d, owns %d partitions", self.config.group_id,
                     self.membership.member_epoch, len(self.owned))

    # ------------------------------------------------------------ offsets
    def commit_sync(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                    deadline: float) -> None:
        self.offsets.commit_sync(offsets, deadline)

    def commit_async(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                     callback: CommitCallback | None) -> None:
        self.offsets.commit_async(offsets, callback)

    def fetch_committed(self, partitions: Iterable[TopicPartition],
                        deadline: float) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self.offsets.fetch_committed(partitions, deadline)

    # ------------------------------------------------------------ leaving
    def _leave(self, deadline: float) -> None:
        with self.shared.lock:
            self.membership.unsubscribe()
        self._run_step()  # revoke (with the auto commit)
        if self.channel.ensure(deadline) is None:
            return  # no coordinator to tell: the session times out on the broker
        self.heartbeat.wake.set()
        while self._clock() < deadline:  # the leave heartbeat goes on the heartbeat thread
            with self.shared.lock:
                if self.membership.state is not MembershipState.LEAVING:
                    return
            self.heartbeat.wake.set()
            self.channel.backoff(min(deadline, self._clock() + 0.05))

    def close(self, timeout_ms: int) -> None:
        """Revoke (auto commit), leave the group, stop the heartbeat thread."""
        try:
            if self.offsets.in_flight:
                self.channel.drain(min(timeout_ms, self.config.request_timeout_ms))
            self.offsets.run_callbacks()
            if self.subscribed:
                self._leave(self._clock() + min(timeout_ms, self.config.request_timeout_ms) / 1000)
        finally:
            self.heartbeat.stop()
            self.channel.close()


Pattern = str | re.Pattern[str]


def pattern_string(pattern: Pattern | None) -> str | None:
    """A subscription pattern as the string the broker takes (``re`` flags have no RE2
    equivalent on the wire: refused; RE2 takes inline ones such as ``(?i)``)."""
    if isinstance(pattern, re.Pattern):
        if pattern.flags & ~re.UNICODE:
            raise ValueError("a subscription pattern takes no flags (RE2 syntax: (?i)...)")
        return pattern.pattern
    return pattern


GroupMembership = ConsumerCoordinator | ConsumerProtocolMembership
GROUP_PROTOCOLS = ("classic", "consumer")


def group_membership(
    group_protocol: str, config: GroupConfig, net: NodeConnections, metadata: ClusterMetadata,
    *, client_id: str, positions: Callable[[], dict[TopicPartition, int]],
    set_assignment: Callable[[set[TopicPartition]], None], clock: Callable[[], float],
    remote_assignor: str | None,
) -> GroupMembership:
    """The consumer's membership for Kafka's ``group.protocol``: ``classic``
    (JoinGroup/SyncGroup, :mod:`clients.consumer.coordinator`) or ``consumer`` (KIP-848)."""
    if group_protocol == "classic":
        if remote_assignor is not None:
            raise InvalidConfigError("group_remote_assignor needs group_protocol='consumer'")
        return ConsumerCoordinator(config, net, metadata, client_id=client_id,
                                   positions=positions, set_assignment=set_assignment,
                                   clock=clock)
    if group_protocol == "consumer":
        return ConsumerProtocolMembership(config, net, metadata, client_id=client_id,
                                   positions=positions, set_assignment=set_assignment,
                                   clock=clock, remote_assignor=remote_assignor)
    raise InvalidConfigError(f"group_protocol must be one of {', '.join(GROUP_PROTOCOLS)}, "
                             f"got {group_protocol!r}")
