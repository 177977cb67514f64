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
- **Safe election after unclean restarts** (our rule, beyond Kafka's KIP-966): a broker
  registers with a report of every log it holds (:class:`ReplicaLog`: last leader epoch,
  log end, and whether its log recovery cut it).  An ISR member whose log recovery cut
  (``recovery_cut``) may lack acknowledged records: it leads only when no other ISR
  member can and every replica of the partition has reported since this controller
  started; then the replica with the longest log of the latest epoch
  ``(last_leader_epoch, log_end_offset)`` leads (ties: an uncut one, then an ISR member,
  then replica order), with ISR = [itself] when it was not in the ISR.  Until then the
  partition stays offline with the reason in :attr:`ControllerState.offline_reasons`
  (and the controller's log), whatever the order in which brokers come back and report:
  no other path (preferred-leader election included) elects an offline partition.  The
  mark is dropped once the replica is back in the ISR (AlterPartition) or leads.
  Reports live in memory: after a controller restart a replica that has not reported
  since counts as not reported (the partition waits for it; ``unclean_leader_election``
  remains the explicit way out).  A partition offline when this controller started may
  be waiting on a cut reported to the old one (a broker reports its cut until its
  replica is back in an ISR with a leader), so its live ISR members are asked for a
  fresh report (the heartbeat answer's ``report_replica_logs``) and lead only after it;
  the first :meth:`tick` runs that offline election, as nothing else may (every broker
  heartbeats, none registers).  It also upgrades a metadata log written before topic
  ids: every topic without one gets its id in an ``assign_topic_id`` record
  (:meth:`broker.controller.topics.ControllerTopics.assign_missing_topic_ids`).
- A leader may resign with an AlterPartition whose new ISR is the current one without
  itself (non-empty): its scrubber found a damaged range, which it repairs as a
  follower; a leader is elected from that ISR as when a leader is fenced.
- Preferred-leader election (every ``leader_imbalance_check_interval_ms``) gives
  leadership back to ``replicas[0]`` when it is live, in the ISR and not marked cut, and
  only for a partition that has a leader: an offline one gets the safe election
  (:meth:`_elect`) there too.  Found by issue 30, item 11: the preferred replica was
  the cut last ISR member of an offline partition waiting for the others' reports, and
  it led; the replicas that held more truncated to it.  Every path that chooses a
  leader for an offline partition goes through :meth:`_elect`.
- ElectLeaders (an operator's request, :meth:`ControllerState.elect_leaders`): the
  decisions of :mod:`broker.controller.elections`, applied through the paths above (a
  preferred move under the periodic election's conditions, the safe election for an
  offline partition; unclean only where the topic allows it).
- Partition reassignments (:attr:`ControllerState.reassignments`,
  :mod:`broker.controller.reassignments`): add the target replicas, then, once all are
  in the ISR, drop the others (leadership to an in-sync, uncut target replica).  The
  reassignment in flight is in the partition's record (``adding_replicas`` /
  ``removing_replicas``), which every other path here carries over
  (:meth:`PartitionRegistration.next_record`), so it survives a restart.
- Every leader change bumps ``leader_epoch``; every record of a partition bumps
  ``partition_epoch``.
- **Logs**: every decision is logged once, when it is made: a registration, an
  unfencing and a fencing (with its cause) at INFO; an election (old and new leader,
  leader epoch, ISR, and what made it due: a fencing, an unfencing, a restart, a
  resignation, the preferred-leader check, a safe or unclean election's reason) at INFO;
  an ISR change this controller makes (a fenced broker leaves the ISR) at INFO; a
  partition going offline, or still offline for a new reason, at WARNING.  A leader's
  own ISR change (AlterPartition) is logged by that broker (DEBUG here).  Nothing is
  logged when a tick, heartbeat or report decides nothing.
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

import logging
from collections.abc import Sequence

from broker.controller.config import ControllerConfig
from broker.controller.elections import elect_leaders
from broker.controller.reassignments import Reassignments
from broker.controller.recovery_choice import longest_log_choice
from broker.controller.results import (
    ConfigResult,
    ElectionType,
    HeartbeatResult,
    IsrChange,
    IsrChangeResult,
    Outcome,
    PartitionResult,
    PartitionsSpec,
    ProducerIdBlockResult,
    RegistrationResult,
    Rejected,
    ReplicaLog,
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
    ProducerIdsRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.errors import ErrorCode
from timer.clock import Clock

__all__ = ["PRODUCER_ID_BLOCK_SIZE", "ControllerState"]

log = logging.getLogger(__name__)

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
        # broker -> its logs as it reported them when it registered (this process's
        # lifetime only); partition -> replicas whose log recovery cut it
        self._replica_logs: dict[int, dict[tuple[str, int], ReplicaLog]] = {}
        self._report_offset: dict[int, int] = {}  # broker -> image offset of its report
        self._report_wanted: set[int] = set()  # live brokers asked for a fresh report
        self._recovery_cut: dict[tuple[str, int], set[int]] = {}
        # partition -> offset of the record that took its leader away (this process)
        self._offline_since: dict[tuple[str, int], int] = {}
        self.offline_reasons: dict[tuple[str, int], str] = {}
        self._ticked = False
        self.reassignments = Reassignments(self.image, self._alive,
                                           lambda k: self._recovery_cut.get(k, ()), self._emit)
        # elections after recovery cuts (the longest log leads) and unclean ones (metrics)
        self.safe_elections = self.unclean_elections = 0

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
                        rack: str | None = None, cluster_id: str | None = None,
                        replica_logs: Sequence[ReplicaLog] = (),
                        internal: tuple[str, int] | None = None
                        ) -> Outcome[RegistrationResult]:
        """Register a broker listening for clients on ``host:port`` and, when
        ``internal`` is given, for its followers on that ``(host, port)``."""
        if cluster_id is not None and cluster_id != self.config.cluster_id:
            return self._done(RegistrationResult(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"cluster id {cluster_id!r} is not this cluster's {self.config.cluster_id!r}"))
        old = self.image.brokers.get(broker_id)
        if old is not None and old.incarnation_id == incarnation_id:
            # the same process again (a retry, or the fresh report we asked for in a
            # heartbeat): only its report is renewed
            self._take_replica_logs(broker_id, replica_logs)
            self._elect_offline(f"broker {broker_id} reported its logs")
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
            record = RegisterBrokerRecord(broker_id, epoch, incarnation_id, host, port, rack,
                                          *(internal or (None, None)))
        except MetadataRecordError as e:
            return self._done(RegistrationResult(ErrorCode.INVALID_REQUEST, e.message))
        self._emit(record)  # the new incarnation starts fenced
        log.info("broker %d registered%s at broker epoch %d (%s:%d), fenced until caught up",
                 broker_id, "" if old is None else " again (a new process)", epoch, host, port)
        self._take_replica_logs(broker_id, replica_logs)
        self._shutdown_offset.pop(broker_id, None)
        self._session_deadline_ms[broker_id] = (self.clock.now_ms()
                                                + self.config.broker_session_timeout_ms)
        if old is not None:
            self._move_away_from(broker_id, f"broker {broker_id} restarted")
        return self._done(RegistrationResult(ErrorCode.NONE, None, epoch))

    def _take_replica_logs(self, broker_id: int, replica_logs: Sequence[ReplicaLog]) -> None:
        """Keep a broker's report; its logs that recovery cut are marked (a broker keeps
        reporting a cut until its replica is back in an ISR with a leader; a cut is
        logged when first reported, not on every re-report)."""
        known = {key for key, marked in self._recovery_cut.items() if broker_id in marked}
        for marked in self._recovery_cut.values():
            marked.discard(broker_id)
        self._report_wanted.discard(broker_id)
        self._report_offset[broker_id] = self.image.last_applied_offset
        logs: dict[tuple[str, int], ReplicaLog] = {}
        for r in replica_logs:
            topic = self.image.topics.get(r.topic)
            if topic is None or r.of_another_topic(topic):
                continue  # a log of a deleted topic (or of an older one of that name)
            key = (r.topic, r.partition)
            logs[key] = r
            if r.recovery_cut:
                self._recovery_cut.setdefault(key, set()).add(broker_id)
                log.log(logging.DEBUG if key in known else logging.WARNING,
                        "broker %d: log recovery cut its replica of %s-%d (log end %d, epoch "
                        "%d); it leads only if no replica holds more", broker_id, *key,
                        r.log_end_offset, r.last_leader_epoch)
        self._replica_logs[broker_id] = logs

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
                    self._fence(broker_id, "controlled shutdown")
                self._shutdown_offset[broker_id] = self.image.last_applied_offset
        elif want_fence:
            if not info.fenced:
                self._fence(broker_id, "it asked to be fenced")
        elif info.fenced and caught_up and broker_id not in self._shutdown_offset:
            self._emit(UnfenceBrokerRecord(broker_id, broker_epoch))
            log.info("broker %d unfenced at metadata offset %d", broker_id, current_metadata_offset)
            self._elect_offline(f"broker {broker_id} unfenced")
        done = self._shutdown_offset.get(broker_id)
        return self._done(HeartbeatResult(
            ErrorCode.NONE, None, caught_up, self.image.brokers[broker_id].fenced,
            done is not None and current_metadata_offset >= done,
            broker_id in self._report_wanted))

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
        """Fence expired sessions; run preferred-leader election when it is due.  The
        first tick also runs the offline election and gives old topics ids (module doc)."""
        if not self._ticked:
            self._ticked = True
            self._elect_offline("this controller started")
            self._topics.assign_missing_topic_ids()
        now = self.clock.now_ms()
        timeout = self.config.broker_session_timeout_ms
        for broker_id in self.image.unfenced_brokers():
            deadline = self._session_deadline_ms.setdefault(broker_id, now + timeout)
            if now > deadline:
                self._fence(broker_id, f"session expired (no heartbeat for {timeout} ms)")
        if self.config.auto_leader_rebalance_enable and now >= self._next_preferred_check_ms:
            self._next_preferred_check_ms = now + self.config.leader_imbalance_check_interval_ms
            self._elect_preferred()
        self.reassignments.advance()
        return self._done(None)[1]

    def elect_preferred_leaders(self) -> list[MetadataRecord]:
        self._elect_preferred()
        return self._done(None)[1]

    def elect_leaders(self, kind: ElectionType, wanted: Sequence[tuple[str, int]] | None
                      ) -> Outcome[list[PartitionResult]]:
        """ElectLeaders (:func:`broker.controller.elections.elect_leaders`) through this
        state's election paths: the preferred move and the safe election."""
        return self._done(elect_leaders(
            kind, wanted, self.image, self._alive, lambda k: self._recovery_cut.get(k, ()),
            lambda t, i, s: self._update(t, i, s, s.replicas[0], s.isr, False,
                                         "preferred-leader election asked (ElectLeaders)"),
            lambda t, i, s: self._elect(t, i, s, s.isr, "election asked (ElectLeaders)"),
            self.offline_reasons.get))

    def alter_reassignments(self, changes: Sequence[tuple[str, int, Sequence[int] | None]]
                            ) -> Outcome[list[PartitionResult]]:
        """AlterPartitionReassignments (:mod:`broker.controller.reassignments`)."""
        return self._done(self.reassignments.alter_all(changes))

    def _fence(self, broker_id: int, why: str) -> None:
        self._emit(FenceBrokerRecord(broker_id, self.image.brokers[broker_id].broker_epoch))
        log.info("broker %d fenced: %s; moving its leaderships and ISR memberships away",
                 broker_id, why)
        self._move_away_from(broker_id, f"broker {broker_id} fenced")

    def _move_away_from(self, broker_id: int, why: str) -> None:
        for topic, index, s in list(self.image.replicas_on(broker_id)):
            isr = s.isr
            if broker_id in isr and len(isr) > 1:
                isr = tuple(b for b in isr if b != broker_id)
            if s.leader == broker_id:
                self._elect(topic, index, s, isr, why)
            else:
                self._update(topic, index, s, s.leader, isr, s.unclean_elected, why)

    def _elect_offline(self, why: str) -> None:
        for topic, index, s in list(self.image.partitions()):
            if s.leader == NO_LEADER:
                self._elect(topic, index, s, s.isr, why)

    def _elect_preferred(self) -> None:
        """Give each led partition back to ``replicas[0]`` when it is live, in the ISR
        and not marked cut; an offline partition gets the safe election instead (the
        preferred replica may be a cut last ISR member while the others' reports are
        awaited: issue 30, item 11)."""
        for topic, index, s in list(self.image.partitions()):
            if s.leader == NO_LEADER:
                self._elect(topic, index, s, s.isr, "preferred-leader check")
                continue
            preferred = s.replicas[0]
            if (s.leader != preferred and preferred in s.isr and self._alive(preferred)
                    and preferred not in self._recovery_cut.get((topic, index), ())):
                self._update(topic, index, s, preferred, s.isr, False, "preferred-leader election")

    def _elect(self, topic: str, index: int, s: PartitionRegistration,
               isr: tuple[int, ...], why: str) -> None:
        """Choose a leader for a partition whose leader is gone (or offline), due to ``why``."""
        key = (topic, index)
        cut = self._recovery_cut.get(key, set())
        live_isr = [b for b in s.replicas if b in isr and self._alive(b)]
        # offline since before this controller started: whether recovery cut an ISR
        # member's log was reported to the old controller, so it must report again
        inherited = s.leader == NO_LEADER and key not in self._offline_since
        unreported = [b for b in live_isr if inherited and b not in self._replica_logs]
        for b in live_isr:
            if b not in cut and b not in unreported:
                self.offline_reasons.pop(key, None)
                self._update(topic, index, s, b, isr, False, why)
                return
        reason = f"no live in-sync replica (ISR {list(isr)})"
        if live_isr:
            if unreported:
                self._report_wanted.update(unreported)
                chosen, reason = None, (
                    "offline since before this controller started; waiting for in-sync "
                    f"replicas {unreported} to report their logs")
            else:
                chosen, reason, asked = longest_log_choice(
                    key, s, cut, self._replica_logs, self._report_offset,
                    self._offline_since.get(key, -1), self._alive)
                self._report_wanted.update(asked)
            if chosen is not None:
                self.offline_reasons.pop(key, None)
                self.safe_elections += 1
                why += (f"; in-sync replicas {sorted(set(isr) & cut)} lost records in log "
                        f"recovery and broker {chosen} holds the longest log of the latest epoch")
                cut.discard(chosen)  # its log is the partition's now
                self._update(topic, index, s, chosen, isr if chosen in isr else (chosen,),
                             s.unclean_elected, why)
                return
            if s.leader == NO_LEADER and self.offline_reasons.get(key) != reason:
                log.warning("%s-%d: still offline: %s", topic, index, reason)
            self.offline_reasons[key] = reason
        if self.image.topics[topic].configs.get("unclean_leader_election") == "true":
            for b in s.replicas:
                if self._alive(b):
                    self.unclean_elections += 1
                    self._update(topic, index, s, b, (b,), True,
                                 f"{why}; UNCLEAN election ({reason})")
                    return
        self._update(topic, index, s, NO_LEADER, isr, s.unclean_elected, f"{why}; {reason}")

    def _update(self, topic: str, index: int, s: PartitionRegistration, leader: int,
                isr: tuple[int, ...], unclean: bool, why: str) -> None:
        """Write the partition's new leader and ISR (the decision logged: :func:`_log_change`)."""
        if leader == s.leader and isr == s.isr:
            return
        leader_epoch = s.leader_epoch + 1 if leader != s.leader else s.leader_epoch
        _log_change(topic, index, s, leader, leader_epoch, isr, why)
        self._emit(s.next_record(topic, index, leader, leader_epoch, isr, unclean))
        if leader == NO_LEADER:
            if s.leader != NO_LEADER:  # nothing is appended to it from here on
                self._offline_since[(topic, index)] = self.image.last_applied_offset
        else:
            self._offline_since.pop((topic, index), None)

    # -- topics -----------------------------------------------------------------------

    def create_topics(self, specs: Sequence[TopicSpec],
                      validate_only: bool = False) -> Outcome[list[TopicResult]]:
        return self._done(self._topics.create_topics(specs, validate_only))

    def delete_topics(self, topics: Sequence[str | bytes]) -> Outcome[list[TopicResult]]:
        return self._done(self._topics.delete_topics(topics))

    def create_partitions(self, specs: Sequence[PartitionsSpec],
                          validate_only: bool = False) -> Outcome[list[TopicResult]]:
        return self._done(self._topics.create_partitions(specs, validate_only))

    def alter_configs(self, resources: Sequence[ResourceChange], validate_only: bool = False,
                      incremental: bool = True) -> Outcome[list[ConfigResult]]:
        """IncrementalAlterConfigs (``incremental``) or AlterConfigs; a topic that now
        allows unclean elections gets a leader for its offline partitions at once."""
        results = self._topics.alter_configs(resources, validate_only, incremental)
        if self._out:
            self._elect_offline("topic configs changed")
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
            self.reassignments.advance()
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
        if (broker_id not in isr and isr and set(isr) < set(s.isr)
                and len(set(isr)) == len(isr)):
            # the leader resigns: its scrubber found a damaged range in its log, which it
            # repairs as a follower; the remaining ISR elects a leader (our rule)
            self._elect(c.topic, c.partition, s, isr,
                        f"leader {broker_id} resigned to repair a damaged range")
            return
        if (broker_id not in isr or len(set(isr)) != len(isr)
                or not set(isr) <= set(s.replicas)):
            raise Rejected(ErrorCode.INVALID_REQUEST, f"{where}: new isr {list(isr)} must be "
                            f"distinct replicas of {list(s.replicas)} including the leader")
        dead = [b for b in isr if b not in s.isr and not self._alive(b)]
        if dead:
            raise Rejected(ErrorCode.INELIGIBLE_REPLICA,
                            f"{where}: brokers {dead} are fenced and cannot join the isr")
        if set(isr) != set(s.isr):
            cut = self._recovery_cut.get((c.topic, c.partition))
            if cut:
                cut.difference_update(isr)  # caught up with the leader again
            self._update(c.topic, c.partition, s, s.leader, isr, s.unclean_elected, "")

    # -- invariants -------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Image structure plus: every leader is a registered, unfenced broker."""
        self.image.check_invariants()
        for topic, index, s in self.image.partitions():
            if s.leader != NO_LEADER and not self._alive(s.leader):
                raise MetadataRecordError(f"{topic}-{index}: leader {s.leader} is fenced")


def _log_change(topic: str, index: int, s: PartitionRegistration, leader: int,
                leader_epoch: int, isr: tuple[int, ...], why: str) -> None:
    """Log a partition change once: an election or an offline partition, or an ISR
    change this controller made (``why``; a leader's own AlterPartition, ``why`` empty,
    is logged by that broker: DEBUG here)."""
    if leader == NO_LEADER and s.leader != NO_LEADER:
        log.warning("%s-%d: offline: leader %d gone and none elected (%s)", topic, index,
                    s.leader, why)
    elif leader != s.leader:
        log.info("%s-%d: leader %s -> %d in leader epoch %d, ISR %s (%s)", topic, index,
                 "none" if s.leader == NO_LEADER else s.leader, leader, leader_epoch,
                 list(isr), why)
    else:
        log.log(logging.INFO if why else logging.DEBUG, "%s-%d: ISR %s -> %s (%s)", topic,
                index, list(s.isr), list(isr), why or f"AlterPartition of leader {leader}")
