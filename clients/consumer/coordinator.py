"""Consumer side of the classic group protocol: membership, rebalances, offset commits.

Membership state machine (driven from the consumer's ``poll`` thread)::

    UNJOINED --JoinGroup sent--> JOINING --join ok--> SYNCING --sync ok--> STABLE
        ^  (MEMBER_ID_REQUIRED: rejoin with the id given)            |
        |  (errors: back off, maybe rediscover, rejoin)               | rejoin needed:
        +-------------------------------------------------------------+ heartbeat said
                                                                        REBALANCE_IN_PROGRESS,
                                                                        ILLEGAL_GENERATION,
                                                                        UNKNOWN_MEMBER_ID,
                                                                        subscription or
                                                                        partition count
                                                                        changed, cooperative
                                                                        revocation

- **Coordinator** discovery and the dedicated connection:
  :mod:`clients.consumer.coordinator_channel` (COORDINATOR_NOT_AVAILABLE /
  LOAD_IN_PROGRESS retried, NOT_COORDINATOR rediscovers).
- **Join/sync**: JoinGroup carries protocol_type ``consumer`` and one protocol per
  configured assignor (preference order) with the subscription bytes of
  :mod:`clients.consumer.group_protocol` (Kafka's ConsumerProtocol, so Kafka clients can
  share the group). Versions are the connection's highest common ones (JoinGroup 0-9,
  SyncGroup 0-5, Heartbeat 0-4, LeaveGroup 0-5; LeaveGroup's shape by version in
  :mod:`clients.consumer.group_requests`). MEMBER_ID_REQUIRED (v4+): rejoin with the id
  given (KIP-394). JoinGroup v9's ``skip_assignment`` (a static leader rejoining) makes
  the leader send no assignments. The leader's part (decode every subscription,
  refresh metadata, run the chosen assignor; while Stable, rejoin when a group topic's
  partition count changes or a topic unknown when it assigned appears) is
  :mod:`clients.consumer.group_leader`.
  A join not finished by ``poll``'s deadline stays in flight; the next ``poll`` resumes it.
- **Eager** protocol (range, roundrobin): before rejoining, auto-commit (sync) and
  revoke every owned partition.  **Cooperative** (all assignors cooperative): nothing
  is revoked before the join; afterwards the partitions no longer assigned are revoked
  and the member rejoins at once (the second round hands them over).  While a rebalance
  runs ``poll`` returns no records (simpler than Kafka, which keeps fetching).
- **Heartbeats**: :mod:`clients.consumer.heartbeat` (own thread, own connection).
- **Commits**: :mod:`clients.consumer.offset_committer`; auto commit
  (:mod:`clients.consumer.auto_commit`, shared with KIP-848) every
  ``auto_commit_interval_ms`` (async, from ``poll``), before a rebalance and on close
  (sync).  ``close`` then revokes and sends LeaveGroup (dynamic members only: a static
  member (``group_instance_id``) keeps its slot until its session times out, so a quick
  restart causes no rebalance).

Costs: a rebalance is 2 round trips (3 with MEMBER_ID_REQUIRED) plus the leader's
metadata refresh and assignor (:mod:`clients.consumer.assignors`).

Thread safety: every method belongs to the consumer's poll thread; the heartbeat thread
shares only :class:`~clients.consumer.coordinator_channel.GroupShared` (behind its lock).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from typing import Protocol, cast

from clients.consumer.auto_commit import AutoCommit
from clients.consumer.coordinator_channel import (
    CoordinatorChannel,
    GroupConfig,
    GroupShared,
    MemberState,
)
from clients.consumer.group_leader import GroupLeader
from clients.consumer.group_protocol import (
    PROTOCOL_TYPE,
    Subscription,
    decode_assignment,
    encode_subscription,
)
from clients.consumer.group_requests import leave_group_request, read_leave_group
from clients.consumer.heartbeat import HeartbeatThread
from clients.consumer.offset_committer import (
    COORDINATOR_GONE,
    REJOIN,
    CommitCallback,
    OffsetCommitter,
)
from clients.network.cluster_metadata import ClusterMetadata
from clients.network.node_connections import NodeConnections
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError, error_for
from clients.protocol.message_types import (
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from clients.protocol.request_channel import ClientResponse, InFlightRequest
from clients.protocol.topics import TopicPartition
from clients.types import ConsumerGroupMetadata, OffsetAndMetadata

__all__ = ["ConsumerCoordinator", "RebalanceListener"]

log = logging.getLogger(__name__)

_FATAL = frozenset({ErrorCode.FENCED_INSTANCE_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    ErrorCode.INVALID_SESSION_TIMEOUT, ErrorCode.INVALID_GROUP_ID})  # fmt: skip


class RebalanceListener(Protocol):
    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


class ConsumerCoordinator:
    """Group membership for one consumer (see the module docstring)."""

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
            on_response=self._on_response, clock=clock,
        )  # fmt: skip
        self.offsets = OffsetCommitter(self.channel, in_group=lambda: bool(self.subscription),
                                       instance_id=config.group_instance_id)
        self.auto_commit = AutoCommit(
            self.offsets, positions, enabled=config.enable_auto_commit,
            interval_ms=config.auto_commit_interval_ms,
            request_timeout_ms=config.request_timeout_ms, clock=clock)
        self.group_leader = GroupLeader(config, net, metadata)
        self.heartbeat = HeartbeatThread(
            self.shared, group_id=config.group_id, group_instance_id=config.group_instance_id,
            client_id=client_id, sasl=net.sasl, ssl_context=net.ssl_context,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            session_timeout_ms=config.session_timeout_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            request_timeout_ms=config.request_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms, clock=clock,
        )  # fmt: skip
        self._join: tuple[InFlightRequest, int] | None = None  # request, channel epoch
        self._sync: tuple[InFlightRequest, int] | None = None
        self._arrived: ClientResponse | None = None  # the join/sync answer read early
        self._needs_join_prepare = True
        self.subscription: tuple[str, ...] = ()
        self.listener: RebalanceListener | None = None
        self.owned: set[TopicPartition] = set()
        self.leader = False
        self.rebalances = 0  # completed generations (stats, tests)

    # ------------------------------------------------------------ subscription
    def subscribe(self, topics: Iterable[str], listener: RebalanceListener | None,
                  pattern: str | re.Pattern[str] | None = None) -> None:
        if pattern is not None:  # not done: Kafka's classic consumer matches client-side
            raise InvalidConfigError("subscribe(pattern=...) needs group_protocol='consumer'")
        names = tuple(sorted(set(topics)))
        if not names or not all(isinstance(t, str) and t for t in names):
            raise ValueError(f"subscribe needs non-empty topic names, got {names!r}")
        self.listener = listener
        self._metadata.add_topics(names)
        if names != self.subscription:
            self.subscription = names
            self.request_rejoin()
        self.heartbeat.start()

    def unsubscribe(self) -> None:
        """Revoke everything, leave the group (dynamic members), forget the subscription."""
        if self.subscription:
            self._revoke(set(self.owned))
            self.maybe_leave_group("unsubscribe")
        self.subscription = ()

    @property
    def subscribed(self) -> bool:
        return bool(self.subscription)

    @property
    def generation(self) -> tuple[int, str]:
        with self.shared.lock:
            return self.shared.generation_id, self.shared.member_id

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The membership a transactional producer's TxnOffsetCommit carries (generation
        -1 and member "" while not in a generation)."""
        generation_id, member_id = self.generation
        return ConsumerGroupMetadata(self.config.group_id, generation_id, member_id,
                                     self.config.group_instance_id)  # fmt: skip

    @property
    def state(self) -> MemberState:
        with self.shared.lock:
            return self.shared.state

    def request_rejoin(self) -> None:
        with self.shared.lock:
            self.shared.rejoin_needed = True

    # ------------------------------------------------------------ poll
    def poll(self, deadline: float) -> bool:
        """Commit callbacks, auto commit, rebalance; True when the assignment is current."""
        with self.shared.lock:
            self.shared.last_poll = self._clock()
        self._raise_fatal()
        self.channel.drain(0)
        self.offsets.run_callbacks()
        stable = True
        if self.subscription:
            if (self.leader and self.state == MemberState.STABLE
                    and self.group_leader.partition_counts_changed()):
                self.request_rejoin()
            stable = self._ensure_active_group(deadline)
        if stable:
            self.auto_commit.maybe_commit_async()
        self.offsets.run_callbacks()
        return stable

    def time_to_next_poll_ms(self) -> float:
        """How long the consumer may wait for fetches before calling :meth:`poll` again."""
        wait = float(self.config.retry_backoff_ms)  # notice heartbeat-thread news soon
        return max(0.0, min(wait, self.auto_commit.time_to_next_ms()))

    def _raise_fatal(self) -> None:
        with self.shared.lock:
            fatal, self.shared.fatal = self.shared.fatal, None
        if fatal is not None:
            raise fatal

    def _on_response(self, response: ClientResponse) -> None:
        """A response that came while nobody waited for it (``drain`` at the start of
        ``poll``, a commit's wait...): the in-flight JoinGroup's or SyncGroup's is kept for
        :meth:`_wait` (dropping it left the member waiting for an answer already read,
        until the request timed out); others go to the committer (async commits)."""
        if any(pending is not None and response.request is pending[0]
               for pending in (self._join, self._sync)):
            self._arrived = response
            return
        self.offsets.on_response(response)

    def _wait(self, request: InFlightRequest, deadline: float) -> ClientResponse | None:
        """``request``'s response: already arrived, or waited for until ``deadline``."""
        arrived, self._arrived = self._arrived, None
        if arrived is not None and arrived.request is request:
            if arrived.error is not None:  # as wait_for: the coordinator is unusable
                self.channel.dead(arrived.error.message)
            return arrived
        return self.channel.wait_for(request, deadline)

    # ------------------------------------------------------------ join / sync
    def _ensure_active_group(self, deadline: float) -> bool:
        while True:
            self._raise_fatal()
            with self.shared.lock:
                if self.shared.state == MemberState.STABLE and not self.shared.rejoin_needed:
                    return True
            if self.channel.ensure(deadline) is None:
                return False
            epoch = self.channel.epoch
            if self._join is not None and self._join[1] != epoch:
                self._join = self._arrived = None  # lost with the old connection
            if self._sync is not None and self._sync[1] != epoch:
                self._sync = self._arrived = None
            if self._join is None and self._sync is None:
                if self._needs_join_prepare:
                    self._on_join_prepare()
                self._send_join()
            if self._join is not None:
                response = self._wait(self._join[0], deadline)
                if response is None:
                    return False
                self._join = None
                self._on_join_response(response, deadline)
            if self._sync is not None:
                response = self._wait(self._sync[0], deadline)
                if response is None:
                    return False
                self._sync = None
                self._on_sync_response(response, deadline)

    def _on_join_prepare(self) -> None:
        if self.config.enable_auto_commit and self.owned:
            self.auto_commit.commit_sync("before rebalance")
        if self.config.protocol == "eager":
            self._revoke(set(self.owned))
        else:  # cooperative: only what left the subscription
            self._revoke({tp for tp in self.owned if tp.topic not in self.subscription})
        self._needs_join_prepare = False

    def _revoke(self, revoked: set[TopicPartition]) -> None:
        if not revoked:
            return
        if self.listener is not None:
            self.listener.on_partitions_revoked(set(revoked))
        self.owned -= revoked
        self._set_assignment(set(self.owned))

    def _send_join(self) -> None:
        with self.shared.lock:
            generation, member_id = self.shared.generation_id, self.shared.member_id
            self.shared.state = MemberState.JOINING
            self.shared.rejoin_needed = False
        cooperative = self.config.protocol == "cooperative"
        owned = tuple(sorted(self.owned)) if cooperative else ()
        metadata = encode_subscription(Subscription(self.subscription, owned, None,
                                                    generation if owned else -1))
        body: JoinGroupRequest = {
            "group_id": self.config.group_id,
            "session_timeout_ms": self.config.session_timeout_ms,
            "rebalance_timeout_ms": self.config.rebalance_timeout_ms,
            "member_id": member_id,
            "group_instance_id": self.config.group_instance_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocols": [{"name": a.name, "metadata": metadata} for a in self.config.assignors],
        }
        timeout_ms = max(self.config.request_timeout_ms, self.config.rebalance_timeout_ms + 5000)
        request = self.channel.send(ApiKey.JOIN_GROUP, body, timeout_ms)
        if request is None:
            self.request_rejoin()
        else:
            self._join = (request, self.channel.epoch)

    def _on_join_response(self, response: ClientResponse, deadline: float) -> None:
        if response.error is not None:  # channel already forgot the coordinator
            self.request_rejoin()
            self.channel.backoff(deadline)
            return
        assert response.body is not None
        body = cast(JoinGroupResponse, response.body)
        code = body["error_code"]
        if code == ErrorCode.MEMBER_ID_REQUIRED:  # KIP-394: rejoin with the id given
            with self.shared.lock:
                self.shared.member_id = body["member_id"]
                self.shared.rejoin_needed = True
            return
        if code != ErrorCode.NONE:
            self._on_group_error("JoinGroup", code, body.get("error_message"), deadline)
            return
        with self.shared.lock:
            self.shared.member_id = body["member_id"]
            self.shared.generation_id = body["generation_id"]
            self.shared.state = MemberState.SYNCING
        self.leader = body["leader"] == body["member_id"]
        assignments = []
        # JoinGroup v9 (KIP-814): a static leader rejoining unchanged must not reassign
        if self.leader and not body["skip_assignment"]:
            assignments = self.group_leader.assign(body["protocol_name"], body["members"])
        sync: SyncGroupRequest = {
            "group_id": self.config.group_id, "generation_id": body["generation_id"],
            "member_id": body["member_id"], "group_instance_id": self.config.group_instance_id,
            "protocol_type": PROTOCOL_TYPE, "protocol_name": body["protocol_name"],
            "assignments": assignments,
        }  # fmt: skip
        request = self.channel.send(ApiKey.SYNC_GROUP, sync, self.config.request_timeout_ms)
        if request is None:
            self.request_rejoin()
        else:
            self._sync = (request, self.channel.epoch)

    def _on_sync_response(self, response: ClientResponse, deadline: float) -> None:
        if response.error is not None:
            self.request_rejoin()
            self.channel.backoff(deadline)
            return
        assert response.body is not None
        body = cast(SyncGroupResponse, response.body)
        if body["error_code"] != ErrorCode.NONE:
            self._on_group_error("SyncGroup", body["error_code"], body.get("error_message"),
                                 deadline)
            return
        assigned = {tp for tp in decode_assignment(body["assignment"]).partitions
                    if tp.topic in self.subscription}  # fmt: skip
        with self.shared.lock:
            if self.shared.rejoin_needed or self.shared.state != MemberState.SYNCING:
                return  # the heartbeat thread saw the group move on meanwhile
            self.shared.state = MemberState.STABLE
        self._needs_join_prepare = True
        self.rebalances += 1
        self.heartbeat.reset()
        revoked, added = self.owned - assigned, assigned - self.owned
        self._revoke(revoked)  # eager: nothing owned any more, so nothing here
        self.owned = set(assigned)
        self._set_assignment(set(self.owned))
        if self.listener is not None:
            self.listener.on_partitions_assigned(added)
        if revoked:  # cooperative: rejoin so the new owners get them
            self.request_rejoin()
        log.info("group %s: generation %s, assigned %d partitions%s", self.config.group_id,
                 self.generation[0], len(assigned), " (leader)" if self.leader else "")

    def _on_group_error(self, api: str, code: int, message: str | None, deadline: float) -> None:
        error = error_for(code, f"{api} of group {self.config.group_id!r}: {message or ''}")
        with self.shared.lock:
            self.shared.state = MemberState.UNJOINED
            self.shared.rejoin_needed = True
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.shared.reset_member()
            elif code == ErrorCode.ILLEGAL_GENERATION:
                self.shared.reset_member(keep_member_id=True)
        if code in _FATAL:
            raise error
        if code in COORDINATOR_GONE:
            self.channel.dead(error.message)
        elif code not in REJOIN and not error.retriable:
            raise error
        if code != ErrorCode.REBALANCE_IN_PROGRESS:
            self.channel.backoff(deadline)

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
    def maybe_leave_group(self, why: str) -> None:
        """LeaveGroup for a dynamic member (static members keep their slot)."""
        with self.shared.lock:
            member_id, coordinator = self.shared.member_id, self.shared.coordinator
            self.shared.reset_member(keep_member_id=self.config.group_instance_id is not None)
        self._join, self._sync, self._arrived = None, None, None
        self._needs_join_prepare = True
        conn = self.channel.conn
        if self.config.group_instance_id is not None or not member_id or coordinator is None \
                or conn is None:
            return
        group_id = self.config.group_id
        try:
            version, answer = conn.request_with_version(
                ApiKey.LEAVE_GROUP,
                lambda v: leave_group_request(group_id, member_id, None, v, why),
                timeout_ms=min(self.config.request_timeout_ms, 5000))  # fmt: skip
            code = read_leave_group(cast(LeaveGroupResponse, answer), version)
            log.info("group %s: member %s left (%s)%s", group_id, member_id, why,
                     f", answered error {code}" if code else "")
        except MiniKafkaError as e:
            log.info("group %s: LeaveGroup failed (%s): %s", self.config.group_id, why, e)

    def close(self, timeout_ms: int) -> None:
        """Auto commit (sync), revoke, leave the group, stop the heartbeat thread."""
        try:
            if self.config.enable_auto_commit and (self.owned or not self.subscription):
                self.auto_commit.commit_sync("on close")
            if self.offsets.in_flight:
                self.channel.drain(min(timeout_ms, self.config.request_timeout_ms))
            self.offsets.run_callbacks()
            if self.subscription:
                self._revoke(set(self.owned))
                self.maybe_leave_group("consumer closed")
        finally:
            self.heartbeat.stop()
            self.channel.close()
