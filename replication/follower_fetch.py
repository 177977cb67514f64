"""The follower side of replication from one leader, sans-IO: which partitions truncate
or fetch, the requests that says, and what each answer does to the partitions.

A follower partition is added with the leader epoch it follows and starts *truncating*:
:meth:`FollowerFetchSession.truncate_request` asks OffsetsForLeaderEpoch (v4) for each
truncating partition's latest epoch and :meth:`on_truncate_response` lets
:meth:`Partition.truncate_on_leader_answer` cut the log (never below the HW), asking
again until the decision is complete.  Then it is *fetching*:
:meth:`fetch_request` builds one Fetch (v13+ by topic id when every fetched partition
was added with its topic's id, else v12 by name) with ``replica_id`` = this broker (and
``replica_state``, v15+) and per partition ``current_leader_epoch``, its LEO as
``fetch_offset``, its log start and, as Kafka's followers do, ``last_fetched_epoch``,
in a fetch session (KIP-227, :mod:`clients.protocol.fetch_session.handler`: after the
first full fetch only the partitions whose fields changed are sent, and a partition the
answer leaves out had nothing new; a session error makes the next fetch full);
:meth:`on_fetch_response` appends returned batches with
:meth:`Partition.append_records_as_follower` (offsets and epochs kept, follower HW =
min(leader HW, own LEO), log start raised to the leader's).

Answers are matched to the request they answer (:class:`PendingRequest` holds the states
it was built from): a partition removed or re-added meanwhile is skipped, and a fetch
answer for a partition whose log end moved while it was in flight (the scrubber cut a
range, a truncation) is dropped - it would leave a hole.

Errors per partition: FENCED_LEADER_EPOCH *parks* it (dropped until new metadata adds it
again); UNKNOWN_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION (the
leader has not applied the same metadata yet) and, by id, UNKNOWN_TOPIC_ID /
INCONSISTENT_TOPIC_ID (our topic id is not the leader's: a deleted topic's, or the
leader's metadata is behind; nothing of another topic is ever appended) set
:attr:`backoff`; a ``diverging_epoch``
(the leader's log went another way after our last epoch) goes back to truncation;
OFFSET_OUT_OF_RANGE makes :meth:`on_fetch_response` return a ListOffsets (earliest)
request, as Kafka's follower does (an error entry carries no offsets), and
:meth:`on_list_offsets_response` restarts the log at the leader's log start when the
follower fell behind it, else goes back to truncation.  When the leader's log start falls
inside the first batch an empty log then gets, the log restarts at the batch's base
offset (Kafka's rule).  A top-level Fetch error raises :class:`MiniKafkaError`.

Repairs: a fetching partition with a damaged segment under repair
(:attr:`Partition.repair`, begun by the broker when its CRC check found bad batches)
also gets :meth:`repair_request`: a Fetch as a consumer (``replica_id`` -1, so the
leader counts it in no follower's state; up to the leader's HW; ``max_wait_ms`` 0) from
the repair's next missing offset, whose answer :meth:`on_repair_response` feeds to
:meth:`Partition.feed_repair`.  A leader that cannot serve the range (its copy is
damaged too: KAFKA_STORAGE_ERROR, or CRC-bad bytes) sets :attr:`backoff` and the repair
waits; nothing is cut.  ``on_repaired`` is called with the partition and the segment's base
offset when its repaired segment is in.

Throttle (optional, :class:`replication.throttle.ReplicationThrottle`): replicas not in
their ISR are left out of the Fetch while the throttle's bucket is empty and their
``partition_max_bytes`` is capped at the tokens left; the record bytes they receive are
counted; :meth:`throttle_delay_ms` says how long to wait when only they have something
to fetch.

The owner (the asyncio :class:`broker.replica_fetcher.ReplicaFetcher`, or the
simulation) sends the request bodies and feeds the answers back, one request at a time,
and waits a backoff when :attr:`backoff` is set (it clears it).

Costs: each request and answer O(partitions of the session).  Not thread-safe: one
owner (the broker's event loop, or the simulation's single thread).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import CorruptRecordError, ErrorCode, error_for
from clients.protocol.fetch_session.handler import (
    SESSION_ERRORS,
    FetchRequestData,
    FetchSessionHandler,
)
from clients.protocol.offset_specs import EARLIEST_TIMESTAMP
from clients.protocol.topics import ZERO_UUID, TopicPartition
from clients.records.batch import iter_batches
from replication.partition import Partition
from replication.throttle import ReplicationThrottle
from replication.truncation import EpochEndOffset, TruncationPolicy
from storage.segment_repair import SegmentRepairError

__all__ = ["PARK_CODES", "FetchState", "FollowerFetchSession", "PendingRequest"]

log = logging.getLogger(__name__)

# Our epoch is older than the leader's: only new metadata can help.  Other errors are
# retried after a backoff.
PARK_CODES = {ErrorCode.FENCED_LEADER_EPOCH}

Body = dict[str, Any]


@dataclass
class FetchState:
    partition: Partition
    leader_epoch: int
    truncating: bool = True
    topic_id: bytes = ZERO_UUID  # the topic's id (Fetch by id, v13+); zero: by name


@dataclass
class PendingRequest:
    """A request on its way: its API, body, the states it was built from and (Fetch) the
    log end of each partition when it was sent."""

    api_key: ApiKey
    body: Body
    states: dict[TopicPartition, FetchState]
    sent: dict[TopicPartition, int] = field(default_factory=dict)
    session: FetchRequestData | None = None  # a replica Fetch's session fields
    api_version: int | None = None  # the highest version it may go at (None: any)
    repair: bool = False  # a repair Fetch (:meth:`FollowerFetchSession.on_repair_response`)


class FollowerFetchSession:
    """The partitions this broker follows from one leader (see the module docstring)."""

    def __init__(self, node_id: int, leader_id: int, replica_fetch_max_bytes: int,
                 replica_fetch_wait_max_ms: int,
                 on_progress: Callable[[TopicPartition], None] | None = None,
                 truncation_policy: TruncationPolicy = TruncationPolicy.LEADER_EPOCH,
                 on_repaired: Callable[[TopicPartition, int], None] | None = None,
                 clock_ms: Callable[[], int] | None = None,
                 throttle: ReplicationThrottle | None = None) -> None:
        self.node_id = node_id
        self.leader_id = leader_id
        self.replica_fetch_max_bytes = replica_fetch_max_bytes
        self.replica_fetch_wait_max_ms = replica_fetch_wait_max_ms
        self.on_progress = on_progress
        self.on_repaired = on_repaired
        self.clock_ms = clock_ms or (lambda: 0)
        self.truncation_policy = truncation_policy  # HIGH_WATERMARK: only to show its loss
        self.states: dict[TopicPartition, FetchState] = {}
        self.backoff = False
        # replicas outside their ISR fetch at most this fast (replication.throttle)
        self.throttle = throttle
        self.fetch_session = FetchSessionHandler()  # KIP-227, with the leader

    def add(self, partition: Partition, topic_id: bytes = ZERO_UUID) -> None:
        """Follow ``partition`` (of the topic with id ``topic_id``: fetched by id when
        every fetched topic has one)."""
        key = TopicPartition(partition.topic, partition.index)
        self.states[key] = FetchState(partition, partition.leader_epoch, topic_id=topic_id)

    def remove(self, key: TopicPartition) -> None:
        self.states.pop(key, None)

    def any_truncating(self) -> bool:
        return any(s.truncating for s in self.states.values())

    def any_fetching(self) -> bool:
        return any(not s.truncating for s in self.states.values())

    def _park(self, key: TopicPartition, code: int) -> None:
        log.info("fetcher for leader %d: %s-%d parked (%s) until new metadata",
                 self.leader_id, key[0], key[1], ErrorCode(code).name)
        self.states.pop(key, None)

    def _current(self, key: TopicPartition, pending: PendingRequest) -> FetchState | None:
        """The state an answer applies to, or None (removed or re-added since)."""
        state = self.states.get(key)
        return state if state is not None and state is pending.states.get(key) else None

    def _partition_error(self, key: TopicPartition, code: int) -> None:
        if code in PARK_CODES:
            self._park(key, code)
        self.backoff = True

    # -- truncation -----------------------------------------------------------------------

    def truncate_request(self) -> PendingRequest | None:
        pending = {k: s for k, s in self.states.items() if s.truncating}
        if not pending:
            return None
        topics: dict[str, list[Body]] = {}
        for (topic, index), s in pending.items():
            topics.setdefault(topic, []).append({
                "partition": index, "current_leader_epoch": s.leader_epoch,
                "leader_epoch": s.partition.truncation_request_epoch})
        return PendingRequest(ApiKey.OFFSETS_FOR_LEADER_EPOCH, {
            "replica_id": self.node_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}, pending)

    def on_truncate_response(self, pending: PendingRequest, body: Body) -> None:
        for topic in body["topics"]:
            for p in topic["partitions"]:
                key = TopicPartition(topic["name"], p["partition"])
                state = self._current(key, pending)
                if state is None or not state.truncating:
                    continue
                if p["error_code"]:
                    self._partition_error(key, p["error_code"])
                    continue
                decision = state.partition.truncate_on_leader_answer(
                    EpochEndOffset(p["leader_epoch"], p["end_offset"]),
                    self.truncation_policy)
                if decision.completed:
                    state.truncating = False
                    log.info("%s-%d truncated to %d (%s); fetching from %d", *key,
                             state.partition.log_end_offset, decision.reason, self.leader_id)

    # -- fetching -------------------------------------------------------------------------

    def _throttled(self, s: FetchState) -> bool:
        return (self.throttle is not None and self.throttle.enabled
                and s.partition.local_broker_id not in s.partition.isr)

    def throttle_delay_ms(self) -> int:
        """How long to wait before the next Fetch when only throttled replicas (held
        back: no tokens left) have something to fetch; 0 otherwise."""
        if self.throttle is None or not any(
                not s.truncating and self._throttled(s) for s in self.states.values()):
            return 0
        return self.throttle.delay_ms()

    def fetch_request(self) -> PendingRequest | None:
        held_back = self.throttle is not None and self.throttle.exceeded()
        fetching = {k: s for k, s in self.states.items()
                    if not s.truncating and not (held_back and self._throttled(s))}
        if not fetching:
            return None
        sent = {k: s.partition.log_end_offset for k, s in fetching.items()}
        wanted: dict[tuple[str, int], Body] = {}
        for key, s in fetching.items():
            wanted[key] = {
                "partition": key.partition, "current_leader_epoch": s.leader_epoch,
                "fetch_offset": sent[key],
                "last_fetched_epoch": s.partition.truncation_request_epoch,
                "log_start_offset": s.partition.log_start_offset,
                "partition_max_bytes": (
                    self.throttle.max_bytes(self.replica_fetch_max_bytes)
                    if self.throttle is not None and self._throttled(s)
                    else self.replica_fetch_max_bytes)}
        session = self.fetch_session.build(
            wanted, {key.topic: s.topic_id for key, s in fetching.items()})
        body: Body = {"replica_id": self.node_id, "max_wait_ms": self.replica_fetch_wait_max_ms,
                      "min_bytes": 1, "max_bytes": self.replica_fetch_max_bytes * 8,
                      "isolation_level": 0, **session.fields()}
        if session.names_by_id is not None:  # v15+ carries our id here (KIP-903)
            body["replica_state"] = {"replica_id": self.node_id, "replica_epoch": -1}
        return PendingRequest(ApiKey.FETCH, body, fetching, sent, session,
                              api_version=session.max_version)

    def on_fetch_response(self, pending: PendingRequest, body: Body) -> PendingRequest | None:
        """Apply a Fetch answer; returns the ListOffsets request to send for partitions
        that got OFFSET_OUT_OF_RANGE (None when there are none).  A fetch session error
        answers nothing: the next fetch is full."""
        if pending.session is not None and not self.fetch_session.handle_response(
                pending.session, body) and body["error_code"] in SESSION_ERRORS:
            log.info("fetch session with leader %d: error %d, fetching in full",
                     self.leader_id, body["error_code"])
            return None
        if body["error_code"]:
            raise error_for(body["error_code"], f"fetch from leader {self.leader_id}")
        out_of_range: list[TopicPartition] = []
        for topic in body["responses"]:
            for p in topic["partitions"]:
                state = pending.states.get(TopicPartition(topic["name"], p["partition_index"]))
                if self.throttle is not None and state is not None and self._throttled(state):
                    self.throttle.record(len(p["records"] or b""))
                key = self._on_partition(topic["name"], p, pending)
                if key is not None:
                    out_of_range.append(key)
        if not out_of_range:
            return None
        topics: dict[str, list[Body]] = {}
        for key in out_of_range:
            topics.setdefault(key.topic, []).append({
                "partition_index": key.partition,
                "current_leader_epoch": pending.states[key].leader_epoch,
                "timestamp": EARLIEST_TIMESTAMP})
        return PendingRequest(ApiKey.LIST_OFFSETS, {
            "replica_id": self.node_id, "isolation_level": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            {k: pending.states[k] for k in out_of_range})

    def _on_partition(self, topic: str, p: Body,
                      pending: PendingRequest) -> TopicPartition | None:
        """Apply one partition's answer; returns its key when it is OFFSET_OUT_OF_RANGE."""
        key = TopicPartition(topic, p["partition_index"])
        state = self._current(key, pending)
        if state is None:
            return None
        if state.partition.log_end_offset != pending.sent.get(key):
            # the log changed while the fetch was in flight: the answer starts at the old
            # end and would leave a hole - drop it, the next fetch asks from the new end
            log.info("%s-%d: log end moved from %s to %d during the fetch: answer dropped",
                     *key, pending.sent.get(key), state.partition.log_end_offset)
            return None
        code = p["error_code"]
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            return key
        if code:
            self._partition_error(key, code)
            return None
        if p.get("diverging_epoch") is not None:
            log.info("%s-%d: the leader's log diverges after epoch %d (ends at %d): "
                     "truncating", *key, p["diverging_epoch"]["epoch"],
                     p["diverging_epoch"]["end_offset"])
            state.truncating = True
            return None
        records = p["records"] or b""
        partition = state.partition
        if len(records) and partition.log_end_offset == partition.log_start_offset:
            _pos, first = next(iter_batches(records))
            if first.base_offset < partition.log_end_offset <= first.last_offset:
                # Kafka's rule: the leader's log start (where this empty log restarted)
                # falls inside the first batch; restart at the batch, the log start
                # offset is raised again below from the leader's
                partition.truncate_fully_and_start_at(first.base_offset)
        partition.append_records_as_follower(
            records, p["high_watermark"],
            p["log_start_offset"] if p["log_start_offset"] >= 0 else None)
        if self.on_progress is not None:
            self.on_progress(key)
        return None

    # -- repairs --------------------------------------------------------------------------

    def repair_request(self) -> PendingRequest | None:
        """A consumer's Fetch for the fetching partitions with a repair under way."""
        repairing = {k: s for k, s in self.states.items()
                     if not s.truncating and s.partition.repair is not None
                     and not s.partition.repair.done}
        if not repairing:
            return None
        topics: dict[str, list[Body]] = {}
        sent: dict[TopicPartition, int] = {}
        for key, s in repairing.items():
            repair = s.partition.repair
            assert repair is not None
            sent[key] = repair.next_offset
            topics.setdefault(key.topic, []).append({
                "partition": key.partition, "current_leader_epoch": s.leader_epoch,
                "fetch_offset": repair.next_offset, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": self.replica_fetch_max_bytes})
        return PendingRequest(ApiKey.FETCH, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0,
            "max_bytes": self.replica_fetch_max_bytes * 8, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            repairing, sent, repair=True)

    def on_repair_response(self, pending: PendingRequest, body: Body) -> None:
        if body["error_code"]:
            raise error_for(body["error_code"], f"repair fetch from leader {self.leader_id}")
        for topic in body["responses"]:
            for p in topic["partitions"]:
                key = TopicPartition(topic["name"], p["partition_index"])
                state = self._current(key, pending)
                repair = state.partition.repair if state is not None else None
                if state is None or repair is None or repair.next_offset != pending.sent[key]:
                    continue  # replaced, or another answer moved it on
                if p["error_code"]:
                    log.info("%s-%d: the leader cannot serve the range under repair from %d "
                             "yet (%s); waiting", *key, repair.next_offset,
                             ErrorCode(p["error_code"]).name)
                    self._partition_error(key, p["error_code"])
                    continue
                try:
                    repaired = state.partition.feed_repair(p["records"] or b"",
                                                           self.clock_ms())
                except CorruptRecordError as exc:
                    log.warning("%s-%d: the leader's copy of the range under repair is bad "
                                "too (%s); waiting", *key, exc)
                    self.backoff = True
                    continue
                except SegmentRepairError as exc:
                    log.warning("%s-%d: %s; cut the log at %d instead, fetching the rest "
                                "again", *key, exc, state.partition.log_end_offset)
                    continue
                if repaired:
                    if self.on_repaired is not None:
                        self.on_repaired(key, repair.segment.base_offset)
                elif state.partition.repair is repair and repair.next_offset == pending.sent[key]:
                    self.backoff = True  # nothing new (the leader's HW is not there yet)

    def on_list_offsets_response(self, pending: PendingRequest, body: Body) -> None:
        """Kafka's follower rule: behind the leader's log start -> restart the log there;
        an empty log beyond the leader's end -> restart at the leader's log start too;
        otherwise (ahead of the leader's end, or an epoch it does not know) truncate."""
        for topic in body["topics"]:
            for p in topic["partitions"]:
                key = TopicPartition(topic["name"], p["partition_index"])
                state = self._current(key, pending)
                if state is None:
                    continue
                if p["error_code"]:
                    self._partition_error(key, p["error_code"])
                    continue
                partition = state.partition
                if p["offset"] > partition.log_end_offset:
                    log.info("%s-%d: behind the leader's log start %d: restarting there",
                             *key, p["offset"])
                    partition.truncate_fully_and_start_at(p["offset"])
                elif partition.log_end_offset == partition.log_start_offset:
                    # an empty log (restarted at an earlier leader's log start) beyond this
                    # leader's end: the epoch handshake has no epoch to compare and would
                    # keep it; nothing is lost by restarting at the leader's log start
                    log.info("%s-%d: empty log at %d, beyond the leader's end: restarting at "
                             "its log start %d", *key, partition.log_end_offset, p["offset"])
                    partition.truncate_fully_and_start_at(p["offset"])
                else:
                    state.truncating = True
