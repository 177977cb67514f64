"""The controller's pure core: brokers, fencing, topics, assignment, elections, ISR changes.

Sans-IO: time comes from an injected clock, nothing touches disk or sockets.  Every
mutating method returns ``(result, records)``: the metadata records the change produced,
**already applied** to :attr:`ControllerState.image` at offsets ``image.last_applied_offset
- len(records) + 1 ..``.  Contract with the adapter (:mod:`broker.controller.server`): append
exactly these records, in order, to the metadata log (whose end offset always equals
``image.last_applied_offset + 1``) and fsync them *before* answering the request or
letting anyone read them.  If that append fails the in-memory image is ahead of the
disk and the adapter must stop the process; a restart replays the log (choice: this
keeps the core one object with no pending/committed split, at the price of a crash on
a disk error, which a single controller cannot survive anyway).

Rules (Kafka KRaft's, simplified; see docs/replication.md):

- Registration creates a *fenced* broker whose ``broker_epoch`` is the offset of its
  registration record; a new incarnation of a known broker first loses its leaderships
  and ISR memberships (it may have lost unflushed data).  Re-sending the same
  incarnation is idempotent.
- Heartbeats renew the session; a fenced broker that has applied its own registration
  record (``current_metadata_offset >= broker_epoch``) is unfenced, and offline
  partitions it can lead get a leader.  :meth:`tick` fences brokers silent for more
  than ``broker_session_timeout_ms``.
- Fencing (session expiry, ``want_fence``, controlled shutdown, re-registration) removes
  the broker from every ISR (except as the last member) and moves its leaderships to
  the first live ISR member in replica order; with none, the partition goes offline
  (leader -1) unless the topic sets ``unclean_leader_election``, then the first live
  replica leads with ISR = [itself] and the partition is marked ``unclean_elected``.
- Controlled shutdown (``want_shut_down``) fences the broker at once (moving everything
  away) and answers ``should_shut_down`` once the broker has applied those records.
- Preferred-leader election (every ``leader_imbalance_check_interval_ms``) gives
  leadership back to ``replicas[0]`` when it is live and in the ISR.
- Every leader change bumps ``leader_epoch``; every record of a partition bumps
  ``partition_epoch``.
- AllocateProducerIds (a registered broker, current broker epoch, fenced or not) gets
  the next :data:`PRODUCER_ID_BLOCK_SIZE` ids ``[next_producer_id, +1000)`` and a
  ``producer_ids`` record raising ``next_producer_id``; the adapter fsyncs it before
  answering, so no id is given twice, across controller restarts too.

Topic operations (CreateTopics with replica assignment, DeleteTopics, CreatePartitions,
topic config changes: AlterConfigs / IncrementalAlterConfigs) are done by a
:class:`~broker.controller.topics.ControllerTopics` this state owns, handed the image,
the config and the record sink (:meth:`ControllerState._emit`); the requests and results
are declared in :mod:`broker.controller.results`.

Costs: fencing/unfencing/preferred election O(partitions); create O(partitions x RF);
a config change O(configs) plus an offline-partition election O(partitions);
alter_partition O(changes x RF); heartbeat O(1) unless it changes the fenced state.
Thread-safety: none; one owner (the controller's event loop).
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.controller.config import ControllerConfig
from broker.controller.results import (
    ConfigResult,
    HeartbeatResult,
    IsrChange,
    IsrChangeResult,
    Outcome,
    PartitionsSpec,
    ProducerIdBlockResult,
    RegistrationResult,
    Rejected,
    ResourceChange,
    T,
    TopicResult,
    TopicSpec,
)
from broker.controller.topics import ControllerTopics
from broker.metadata.image import MetadataImage, PartitionRegistration
from broker.metadata.records import (
    NO_LEADER,
    FenceBrokerRecord,
    MetadataRecord,
    MetadataRecordError,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.errors import ErrorCode
from timer.clock import Clock

__all__ = ["PRODUCER_ID_BLOCK_SIZE", "ControllerState"]

PRODUCER_ID_BLOCK_SIZE = 1000
_INT64_MAX = 2**63 - 1


class ControllerState:
    """The controller's metadata decisions over one image (see the module docstring)."""

    def __init__(self, config: ControllerConfig, clock: Clock,
                 image: MetadataImage | None = None) -> None:
        self.config = config
        self.clock = clock
        self.image = image if image is not None else MetadataImage()
        self._session_deadline_ms: dict[int, int] = {}
        self._shutdown_offset: dict[int, int] = {}  # broker -> last record of its shutdown
        self._next_preferred_check_ms = clock.now_ms() + config.leader_imbalance_check_interval_ms
        self._out: list[MetadataRecord] = []
        self._topics = ControllerTopics(config, self.image, self._emit)

    # -- plumbing ---------------------------------------------------------------------

    def replay(self, record: MetadataRecord, offset: int) -> None:
        """Apply a record read back from the log (startup); no new records."""
        self.image.apply(record, offset)

    def _emit(self, record: MetadataRecord) -> None:
        self.image.apply(record, self.image.last_applied_offset + 1)
        self._out.append(record)

    def _done(self, result: T) -> Outcome[T]:
        out, self._out = self._out, []
        return result, out

    def _alive(self, broker_id: int) -> bool:
        return self.image.is_alive(broker_id)

    # -- brokers ----------------------------------------------------------------------

    def register_broker(self, broker_id: int, incarnation_id: str, host: str, port: int,
                        rack: str | None = None,
                        cluster_id: str | None = None) -> Outcome[RegistrationResult]:
        if cluster_id is not None and cluster_id != self.config.cluster_id:
            return self._done(RegistrationResult(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"cluster id {cluster_id!r} is not this cluster's {self.config.cluster_id!r}"))
        old = self.image.brokers.get(broker_id)
        if old is not None and old.incarnation_id == incarnation_id:
            return self._done(RegistrationResult(ErrorCode.NONE, None, old.broker_epoch))
        if old is not None and self._has_live_session(broker_id, old.fenced):
            # Kafka's rule: another process with this id still heartbeats (or may: its
            # session has not expired); taking the id over would fence it and flap
            return self._done(RegistrationResult(
                ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                f"broker {broker_id} is registered by another live process (its session "
                f"ends within {self.config.broker_session_timeout_ms} ms of its last "
                "heartbeat); retry after that"))
        epoch = self.image.last_applied_offset + 1
        if port == 0:
            return self._done(RegistrationResult(ErrorCode.INVALID_REQUEST, "port must not be 0"))
        try:
            record = RegisterBrokerRecord(broker_id, epoch, incarnation_id, host, port, rack)
        except MetadataRecordError as e:
            return self._done(RegistrationResult(ErrorCode.INVALID_REQUEST, e.message))
        self._emit(record)  # the new incarnation starts fenced
        self._shutdown_offset.pop(broker_id, None)
        self._session_deadline_ms[broker_id] = (self.clock.now_ms()
                                                + self.config.broker_session_timeout_ms)
        if old is not None:
            self._move_away_from(broker_id)
        return self._done(RegistrationResult(ErrorCode.NONE, None, epoch))

    def _has_live_session(self, broker_id: int, fenced: bool) -> bool:
        """The registered incarnation of ``broker_id`` is unfenced, heartbeated within the
        session timeout and is not shutting down (without a deadline - this controller
        just started - it gets the same grace period as in :meth:`tick`).  A fenced one
        (session expired, asked to be fenced, or registered and not yet caught up) may
        be replaced at once: it serves no partition."""
        if fenced or broker_id in self._shutdown_offset:
            return False
        now = self.clock.now_ms()
        deadline = self._session_deadline_ms.setdefault(
            broker_id, now + self.config.broker_session_timeout_ms)
        return now <= deadline

    def heartbeat(self, broker_id: int, broker_epoch: int, current_metadata_offset: int,
                  want_fence: bool = False,
                  want_shut_down: bool = False) -> Outcome[HeartbeatResult]:
        info = self.image.brokers.get(broker_id)
        if info is None or info.broker_epoch != broker_epoch:
            current = "not registered" if info is None else f"at epoch {info.broker_epoch}"
            return self._done(HeartbeatResult(
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker {broker_id} epoch {broker_epoch}: broker is {current}; register again"))
        self._session_deadline_ms[broker_id] = (self.clock.now_ms()
                                                + self.config.broker_session_timeout_ms)
        caught_up = current_metadata_offset >= info.broker_epoch
        if want_shut_down:
            if broker_id not in self._shutdown_offset:
                if not info.fenced:
                    self._fence(broker_id)
                self._shutdown_offset[broker_id] = self.image.last_applied_offset
        elif want_fence:
            if not info.fenced:
                self._fence(broker_id)
        elif info.fenced and caught_up and broker_id not in self._shutdown_offset:
            self._emit(UnfenceBrokerRecord(broker_id, broker_epoch))
            self._elect_offline()
        done = self._shutdown_offset.get(broker_id)
        return self._done(HeartbeatResult(
            ErrorCode.NONE, None, caught_up, self.image.brokers[broker_id].fenced,
            done is not None and current_metadata_offset >= done))

    def allocate_producer_ids(self, broker_id: int,
                              broker_epoch: int) -> Outcome[ProducerIdBlockResult]:
        info = self.image.brokers.get(broker_id)
        if info is None or info.broker_epoch != broker_epoch:
            current = "not registered" if info is None else f"at epoch {info.broker_epoch}"
            return self._done(ProducerIdBlockResult(
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker {broker_id} epoch {broker_epoch}: broker is {current}"))
        start = self.image.next_producer_id
        if start > _INT64_MAX - PRODUCER_ID_BLOCK_SIZE:
            return self._done(ProducerIdBlockResult(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                    "producer ids are exhausted"))
        self._emit(ProducerIdsRecord(broker_id, broker_epoch, start + PRODUCER_ID_BLOCK_SIZE))
        return self._done(ProducerIdBlockResult(ErrorCode.NONE, None, start,
                                                PRODUCER_ID_BLOCK_SIZE))

    def tick(self) -> list[MetadataRecord]:
        """Fence expired sessions; run preferred-leader election when it is due."""
        now = self.clock.now_ms()
        timeout = self.config.broker_session_timeout_ms
        for broker_id in self.image.unfenced_brokers():
            deadline = self._session_deadline_ms.setdefault(broker_id, now + timeout)
            if now > deadline:
                self._fence(broker_id)
        if self.config.auto_leader_rebalance_enable and now >= self._next_preferred_check_ms:
            self._next_preferred_check_ms = now + self.config.leader_imbalance_check_interval_ms
            self._elect_preferred()
        return self._done(None)[1]

    def elect_preferred_leaders(self) -> list[MetadataRecord]:
        self._elect_preferred()
        return self._done(None)[1]

    def _fence(self, broker_id: int) -> None:
        self._emit(FenceBrokerRecord(broker_id, self.image.brokers[broker_id].broker_epoch))
        self._move_away_from(broker_id)

    def _move_away_from(self, broker_id: int) -> None:
        for topic, index, s in list(self.image.replicas_on(broker_id)):
            isr = s.isr
            if broker_id in isr and len(isr) > 1:
                isr = tuple(b for b in isr if b != broker_id)
            if s.leader == broker_id:
                self._elect(topic, index, s, isr)
            else:
                self._update(topic, index, s, s.leader, isr, s.unclean_elected)

    def _elect_offline(self) -> None:
        for topic, index, s in list(self.image.partitions()):
            if s.leader == NO_LEADER:
                self._elect(topic, index, s, s.isr)

    def _elect_preferred(self) -> None:
        for topic, index, s in list(self.image.partitions()):
            preferred = s.replicas[0]
            if s.leader != preferred and preferred in s.isr and self._alive(preferred):
                self._update(topic, index, s, preferred, s.isr, False)

    def _elect(self, topic: str, index: int, s: PartitionRegistration,
               isr: tuple[int, ...]) -> None:
        """Choose a leader for a partition whose leader is gone (or that is offline)."""
        for b in s.replicas:
            if b in isr and self._alive(b):
                self._update(topic, index, s, b, isr, False)
                return
        if self.image.topics[topic].configs.get("unclean_leader_election") == "true":
            for b in s.replicas:
                if self._alive(b):
                    self._update(topic, index, s, b, (b,), True)
                    return
        self._update(topic, index, s, NO_LEADER, isr, s.unclean_elected)

    def _update(self, topic: str, index: int, s: PartitionRegistration, leader: int,
                isr: tuple[int, ...], unclean: bool) -> None:
        if leader == s.leader and isr == s.isr:
            return
        leader_epoch = s.leader_epoch + 1 if leader != s.leader else s.leader_epoch
        self._emit(PartitionRecord(topic, index, s.replicas, leader, leader_epoch, isr,
                                   s.partition_epoch + 1, unclean))

    # -- topics -----------------------------------------------------------------------

    def create_topics(self, specs: Sequence[TopicSpec],
                      validate_only: bool = False) -> Outcome[list[TopicResult]]:
        return self._done(self._topics.create_topics(specs, validate_only))

    def delete_topics(self, names: Sequence[str]) -> Outcome[list[TopicResult]]:
        return self._done(self._topics.delete_topics(names))

    def create_partitions(self, specs: Sequence[PartitionsSpec],
                          validate_only: bool = False) -> Outcome[list[TopicResult]]:
        return self._done(self._topics.create_partitions(specs, validate_only))

    def alter_configs(self, resources: Sequence[ResourceChange], validate_only: bool = False,
                      incremental: bool = True) -> Outcome[list[ConfigResult]]:
        """IncrementalAlterConfigs (``incremental``) or AlterConfigs; a topic that now
        allows unclean elections gets a leader for its offline partitions at once."""
        results = self._topics.alter_configs(resources, validate_only, incremental)
        if self._out:
            self._elect_offline()
        return self._done(results)

    # -- ISR changes ------------------------------------------------------------------

    def alter_partition(self, broker_id: int, broker_epoch: int,
                        changes: Sequence[IsrChange]) -> Outcome[tuple[ErrorCode,
                                                                       list[IsrChangeResult]]]:
        info = self.image.brokers.get(broker_id)
        if info is None or info.broker_epoch != broker_epoch:
            return self._done((ErrorCode.STALE_BROKER_EPOCH, []))
        results = []
        for change in changes:
            state = self.image.partition(change.topic, change.partition)
            try:
                self._alter_isr(broker_id, change, state)
                code, message = ErrorCode.NONE, None
            except Rejected as e:
                code, message = e.code, e.message
            results.append(IsrChangeResult(change.topic, change.partition, code, message,
                                           self.image.partition(change.topic, change.partition)))
        return self._done((ErrorCode.NONE, results))

    def _alter_isr(self, broker_id: int, c: IsrChange, s: PartitionRegistration | None) -> None:
        where = f"{c.topic}-{c.partition}"
        if s is None:
            raise Rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{where} does not exist")
        if s.leader != broker_id:
            raise Rejected(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                            f"{where}: broker {broker_id} is not the leader ({s.leader} is)")
        if c.leader_epoch != s.leader_epoch:
            code = (ErrorCode.FENCED_LEADER_EPOCH if c.leader_epoch < s.leader_epoch
                    else ErrorCode.UNKNOWN_LEADER_EPOCH)
            raise Rejected(code, f"{where}: leader epoch {c.leader_epoch}, current is "
                            f"{s.leader_epoch}")
        if c.partition_epoch != s.partition_epoch:
            raise Rejected(ErrorCode.INVALID_UPDATE_VERSION, f"{where}: partition epoch "
                            f"{c.partition_epoch}, current is {s.partition_epoch}")
        isr = tuple(c.new_isr)
        if (broker_id not in isr or len(set(isr)) != len(isr)
                or not set(isr) <= set(s.replicas)):
            raise Rejected(ErrorCode.INVALID_REQUEST, f"{where}: new isr {list(isr)} must be "
                            f"distinct replicas of {list(s.replicas)} including the leader")
        dead = [b for b in isr if b not in s.isr and not self._alive(b)]
        if dead:
            raise Rejected(ErrorCode.INELIGIBLE_REPLICA,
                            f"{where}: brokers {dead} are fenced and cannot join the isr")
        if set(isr) != set(s.isr):
            self._update(c.topic, c.partition, s, s.leader, isr, s.unclean_elected)

    # -- invariants -------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Image structure plus: every leader is a registered, unfenced broker."""
        self.image.check_invariants()
        for topic, index, s in self.image.partitions():
            if s.leader != NO_LEADER and not self._alive(s.leader):
                raise MetadataRecordError(f"{topic}-{index}: leader {s.leader} is fenced")
