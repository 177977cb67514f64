"""The offsets topic ``__consumer_offsets`` and the broker's group coordinator around it.

:class:`OffsetsTopic` glues the sans-IO :class:`GroupCoordinator` to the broker core
(:class:`broker.core.BrokerCore`, which creates it and implements
:class:`OffsetsTopicHost`; this module does not import the core):

- **Creation on demand**: the first FindCoordinator that finds no offsets topic creates
  it (and answers COORDINATOR_NOT_AVAILABLE; the client retries).  Controller mode: a
  CreateTopics to the controller (one in flight at a time); standalone: locally.
  Partitions ``offsets_topic_num_partitions`` (default 5), replication factor
  ``min(offsets_topic_replication_factor, live brokers)``, configs
  ``cleanup_policy=compact``, ``min_insync_replicas=min(2, RF)``,
  ``segment_bytes=offsets_topic_segment_bytes``, ``max_message_bytes`` large enough for
  a group's record at ``group_max_metadata_bytes`` (plus 1 MiB for the members' fixed
  fields; at least the broker's ``max_message_bytes``).
- **FindCoordinator**: the coordinator of a group is the leader of partition
  ``abs(javaStringHash(group_id)) % partitions`` (:func:`partition_for`; the partition
  count is the topic's, not this broker's config).  No leader, or a fenced one ->
  COORDINATOR_NOT_AVAILABLE.  Only groups (key_type 0) have coordinators here
  (transactional ids: :mod:`broker.txn.state_topic`).
- **Leadership**: :meth:`on_partitions_changed` (called by the core after startup,
  topic creation/deletion and every metadata reconcile) compares the offsets
  partitions this broker leads (and their leader epochs) with what the coordinator
  owns: a new leadership (or a new epoch) starts a load, a lost one unloads the groups.
- **Loading** reads the partition from its log start to its log end offset in steps of
  ``LOAD_STEP_BYTES``, one step per timer tick, so a big partition never blocks the
  loop; the coordinator answers COORDINATOR_LOAD_IN_PROGRESS until the last step.
  Records of a transactional batch are loaded as its producer's (pending), a control
  batch as its marker (:func:`~clients.records.control.parse_marker`: COMMIT or ABORT
  of the batch's producer); a batch or marker that does not decode is skipped and
  counted.
- **Writes** (:meth:`append`): one record batch (wall-clock timestamps) appended as
  leader with acks=all; the answer waits in the broker's produce purgatory until the
  high watermark passes the batch (or ``offsets_commit_timeout_ms``), exactly like a
  Produce with acks=all, and errors (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS...) go
  back to the coordinator, which maps them for its clients.  A TxnOffsetCommit's
  records go as one transactional batch of its producer id and epoch, with the
  sequence the leader's producer-state check expects (:func:`_next_sequence`).
- **TxnOffsetCommit** (:meth:`commit_txn_offsets`): KIP-890 part 1, the group's offsets
  partition verified with the transaction coordinator before the producer's first
  transactional batch there (as Kafka's ``maybeStartTransactionVerificationForPartition``),
  when the handler passes a verifier.
- **Transaction markers**: :meth:`on_txn_marker` is the core's ``TxnMarkerListener``
  (:mod:`broker.handlers.broker_view`), told by WriteTxnMarkers after a marker on an
  offsets partition is replicated; the coordinator commits or drops the producer's
  pending offsets of that partition's groups.

Costs: FindCoordinator O(group id length); ``on_partitions_changed`` O(partitions on
this broker); a load step O(LOAD_STEP_BYTES); an append is one log append.
Not thread-safe: the broker's event loop owns it (like the core).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from broker.async_client import ControllerChannel
from broker.config import BrokerConfig
from broker.delayed import DelayedFetch, DelayedProduce, ProducePartitionStatus
from broker.group.coordinator import GroupCoordinator
from broker.group.offsets import txn_commit_error
from broker.group.protocol import (
    Done,
    GroupCoordinatorConfig,
    TxnProducer,
    partition_for,
    verification_error,
)
from broker.requests.respond import Respond
from broker.topic_registry import StandaloneTopic
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import (
    CreateTopicsRequestTopic,
    FindCoordinatorResponseCoordinator,
    ProduceResponsePartitionResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from clients.protocol.topics import OFFSETS_TOPIC, TopicPartition
from clients.records.batch import TRANSACTIONAL_MASK, iter_batches
from clients.records.control import ControlType, parse_marker
from clients.records.record import build_batch, decode_batch
from replication.partition import Partition
from replication.producer_state import next_sequence
from storage.log.log import wall_clock_ms
from timer.clock import Clock
from timer.purgatory import Purgatory, TimerLike
from timer.timing_wheel import CallableTask

log = logging.getLogger(__name__)

# the transaction coordinator's KIP-890 check of a producer's partitions, bound to its
# transactional id, producer id and epoch: partition -> the coordinator's answer
Verify = Callable[[list[TopicPartition]], Awaitable[dict[TopicPartition, ErrorCode]]]

LOAD_STEP_BYTES = 1024 * 1024
GROUP_RECORD_SLACK_BYTES = 1024 * 1024  # members' fixed fields and the batch's framing
CREATE_TIMEOUT_MS = 10_000


class OffsetsTopicHost(Protocol):
    """What :class:`OffsetsTopic` asks the broker core that owns it, on every use (the
    answers change with the metadata).  :class:`broker.core.BrokerCore` implements it; it
    is declared here so that the core imports this module and not the other way round."""

    @property
    def controller(self) -> ControllerChannel | None:
        """The connection to the controller (controller mode, once the server set it)."""

    def partition_count(self, topic: str) -> int: ...

    def partition_exists(self, topic: str, index: int) -> bool: ...

    def leader_endpoint(self, topic: str, index: int) -> tuple[int, str, int] | None: ...

    def live_broker_count(self) -> int | None: ...

    def validate_new_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: Mapping[str, str]) -> StandaloneTopic: ...

    def create_topic(self, info: StandaloneTopic) -> None: ...

    def min_insync_replicas(self, topic: str) -> int: ...


class OffsetsTopic:
    """The offsets topic and the group coordinator of one broker; see the module docstring.

    Owns the :class:`GroupCoordinator` (``coordinator``) and is its offsets log.  Gets from
    the broker core that creates it: the config (read for the offsets-topic and group
    settings only; the port the server may set later is the core's business), clock
    and timer, the hosted partitions (read, never changed here), the produce and fetch
    purgatories (a write parks in the first and wakes followers in the second), and the
    :class:`OffsetsTopicHost` functions.  Called by the core: :meth:`on_partitions_changed`
    and :meth:`shutdown`; by the group handlers: :meth:`find_coordinator`,
    :meth:`commit_txn_offsets` (TxnOffsetCommit with its verification) and the
    coordinator's request methods; by WriteTxnMarkers, as the core's
    ``TxnMarkerListener``: :meth:`on_txn_marker`.
    """

    def __init__(self, config: BrokerConfig, clock: Clock, timer: TimerLike,
                 partitions: Mapping[TopicPartition, Partition],
                 produce_purgatory: Purgatory[DelayedProduce],
                 fetch_purgatory: Purgatory[DelayedFetch], host: OffsetsTopicHost) -> None:
        self.config = config
        self.timer = timer
        self.partitions = partitions
        self.produce_purgatory = produce_purgatory
        self.fetch_purgatory = fetch_purgatory
        self.host = host
        self.coordinator = GroupCoordinator(GroupCoordinatorConfig.from_broker(config), clock,
                                            timer, self, partition_exists=host.partition_exists)
        self.creating = False
        self._tasks: set[asyncio.Task[None]] = set()

    # -- topic -------------------------------------------------------------------------

    def num_partitions(self) -> int:
        return self.host.partition_count(OFFSETS_TOPIC)

    def _topic_configs(self, replication_factor: int) -> dict[str, str]:
        config = self.config
        # a group's record holds every member's metadata and assignment: up to
        # group_max_metadata_bytes, plus the members' fixed fields
        record_bytes = config.group_max_metadata_bytes + GROUP_RECORD_SLACK_BYTES
        return {"cleanup_policy": "compact",
                "min_insync_replicas": str(min(2, replication_factor)),
                "segment_bytes": str(config.offsets_topic_segment_bytes),
                "max_message_bytes": str(max(record_bytes, config.max_message_bytes))}

    def _topic_spec(self, live_brokers: int) -> CreateTopicsRequestTopic:
        config = self.config
        rf = max(1, min(config.offsets_topic_replication_factor, live_brokers))
        return {"name": OFFSETS_TOPIC, "num_partitions": config.offsets_topic_num_partitions,
                "replication_factor": rf, "assignments": [],
                "configs": [{"name": k, "value": v}
                            for k, v in self._topic_configs(rf).items()]}

    def _create_topic(self) -> None:
        host = self.host
        if not self.config.controller_address:
            info = host.validate_new_topic(OFFSETS_TOPIC, self.config.offsets_topic_num_partitions,
                                           1, self._topic_configs(1))
            host.create_topic(info)
            log.info("created %s with %d partitions", OFFSETS_TOPIC, info.num_partitions)
            return
        controller, live_brokers = host.controller, host.live_broker_count()
        if self.creating or controller is None or live_brokers is None:
            return
        self.creating = True
        spec = self._topic_spec(live_brokers)

        async def create() -> None:
            try:
                answer = await controller.request(
                    ApiKey.CREATE_TOPICS, {"topics": [spec], "timeout_ms": CREATE_TIMEOUT_MS,
                                           "validate_only": False},
                    timeout_ms=CREATE_TIMEOUT_MS)
                code = answer["topics"][0]["error_code"]
                if code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                    log.warning("creating %s failed: %s %s", OFFSETS_TOPIC,
                                ErrorCode(code).name, answer["topics"][0]["error_message"])
                else:
                    log.info("created %s (RF %d)", OFFSETS_TOPIC, spec["replication_factor"])
            except MiniKafkaError as exc:
                log.warning("creating %s failed: %s", OFFSETS_TOPIC, exc)
            finally:
                self.creating = False

        task = asyncio.get_running_loop().create_task(create())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- FindCoordinator ---------------------------------------------------------------

    def find_coordinator(self, key: str,
                         key_type: int = 0) -> FindCoordinatorResponseCoordinator:
        """Where the coordinator of ``key`` is: ``{error_code, error_message, node_id,
        host, port}`` (FindCoordinator's v0-3 answer, and one entry of its v4 batch).
        Only groups (``key_type`` 0) have coordinators here: transactional ids (1) are
        answered by :class:`broker.txn.state_topic.TransactionStateTopic`, any other key
        type is INVALID_REQUEST."""
        def error(code: ErrorCode, message: str) -> FindCoordinatorResponseCoordinator:
            return {"error_code": int(code), "error_message": message, "node_id": -1,
                    "host": "", "port": -1}

        if key_type != 0:
            return error(ErrorCode.INVALID_REQUEST, f"key_type {key_type} is not "
                         "supported (only 0: groups)")
        if not key:
            return error(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        count = self.num_partitions()
        if count == 0:
            try:
                self._create_topic()
            except MiniKafkaError as exc:
                return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"cannot create "
                             f"{OFFSETS_TOPIC}: {exc}")
            count = self.num_partitions()
            if count == 0:
                return error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{OFFSETS_TOPIC} is being created")
        index = partition_for(key, count)
        leader = self.host.leader_endpoint(OFFSETS_TOPIC, index)
        if leader is None:
            return error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         f"{OFFSETS_TOPIC}-{index} has no leader")
        node_id, host, port = leader
        return {"error_code": 0, "error_message": None, "node_id": node_id, "host": host,
                "port": port}

    # -- leadership and loading ----------------------------------------------------------

    def on_partitions_changed(self) -> None:
        """Load the offsets partitions newly led here; unload those not led any more."""
        coordinator = self.coordinator
        coordinator.num_partitions = self.num_partitions()
        led = {index: p.leader_epoch for (topic, index), p in self.partitions.items()
               if topic == OFFSETS_TOPIC and p.is_leader}
        current = coordinator.ownership.epochs()
        for index, epoch in current.items():
            if led.get(index) != epoch:
                log.info("%s-%d: not led here any more (epoch %d); unloading groups",
                         OFFSETS_TOPIC, index, epoch)
                coordinator.unload(index)
        for index, epoch in led.items():
            if current.get(index) != epoch:
                log.info("%s-%d: leader in epoch %d; loading groups", OFFSETS_TOPIC, index,
                         epoch)
                coordinator.begin_load(index, epoch)
                start = self.partitions[TopicPartition(OFFSETS_TOPIC, index)].log_start_offset
                self._schedule_load(index, epoch, start)

    def _schedule_load(self, index: int, epoch: int, position: int) -> None:
        self.timer.add(CallableTask(1, lambda: self._load_step(index, epoch, position)))

    def _load_step(self, index: int, epoch: int, position: int) -> None:
        coordinator = self.coordinator
        partition = self.partitions.get(TopicPartition(OFFSETS_TOPIC, index))
        if coordinator.ownership.loading_epoch(index) != epoch:
            return  # unloaded or reloaded meanwhile
        if partition is None or not partition.is_leader or partition.leader_epoch != epoch:
            coordinator.unload(index)
            return
        end = partition.log_end_offset
        try:
            data = partition.log.read(position, LOAD_STEP_BYTES, max_offset=end).read_bytes() \
                if position < end else b""
        except Exception:
            log.exception("%s-%d: load failed at offset %d; unloading", OFFSETS_TOPIC, index,
                          position)
            coordinator.unload(index)
            return
        if not data:
            coordinator.finish_load(index)
            return
        self._schedule_load(index, epoch, load_batches(coordinator, index, data, position))

    # -- writes (the coordinator's OffsetsLog) ----------------------------------------------

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               done: Done, producer: TxnProducer | None = None) -> None:
        key = TopicPartition(OFFSETS_TOPIC, partition)
        replica = self.partitions.get(key)
        if replica is None or not replica.is_leader:
            done(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
            return
        now = wall_clock_ms()
        items = [(k, v, now, ()) for k, v in records]
        if producer is None:
            batch = build_batch(items)
        else:
            batch = build_batch(items, producer_id=producer.producer_id,
                                producer_epoch=producer.producer_epoch,
                                base_sequence=_next_sequence(replica, producer),
                                attributes=TRANSACTIONAL_MASK)
        try:
            info = replica.append_records_as_leader(
                batch, -1, self.host.min_insync_replicas(OFFSETS_TOPIC),
                guard=None if producer is None else producer.guard,
                verification_required=producer is not None and producer.verification_required)
        except MiniKafkaError as exc:
            done(exc.code, -1)
            return
        self.fetch_purgatory.check_and_complete(key)  # followers may be waiting
        result: ProduceResponsePartitionResponse = {"error_code": 0}
        status = ProducePartitionStatus(replica, info.last_offset + 1, result,
                                        replica.leader_epoch)
        op = DelayedProduce(self.config.offsets_commit_timeout_ms, [status],
                            self.host.min_insync_replicas,
                            lambda: done(ErrorCode(result["error_code"]), info.first_offset))
        self.produce_purgatory.try_complete_else_watch(op, [key])

    # -- TxnOffsetCommit's KIP-890 verification ---------------------------------------------

    def commit_txn_offsets(self, body: TxnOffsetCommitRequest,
                           respond: Respond[TxnOffsetCommitResponse],
                           verify: Verify | None) -> None:
        """TxnOffsetCommit, verified first when ``verify`` is given (the transaction
        coordinator's KIP-890 check, bound to the request's transactional id, producer
        id and epoch): when the producer has no transaction open on the group's offsets
        partition, its verification guard is taken, the coordinator asked whether that
        partition is in the producer's ongoing transaction (AddOffsetsToTxn put it
        there), and only a yes lets the commit go on (with the guard: a marker written
        meanwhile refuses the append, INVALID_TXN_STATE); a no is every partition's
        error (:func:`~broker.group.protocol.verification_error`).  The group checks
        come first (a group this coordinator cannot serve is answered at once)."""
        coordinator = self.coordinator
        if verify is None:
            coordinator.commit_txn_offsets(body, respond)
            return
        producer_id, epoch = body["producer_id"], body["producer_epoch"]
        group_id = body["group_id"]
        tp = TopicPartition(OFFSETS_TOPIC, coordinator.manager.partition_for(group_id)) \
            if coordinator.manager.coordinator_error(group_id) is None else None
        replica = None if tp is None else self.partitions.get(tp)
        if tp is None or replica is None or producer_id < 0 or epoch < 0 \
                or not replica.producer_state.needs_verification(producer_id, epoch):
            coordinator.commit_txn_offsets(body, respond, verification_required=True)
            return
        guard = replica.producer_state.verification_guard(producer_id)
        wanted = tp

        async def verify_then_commit() -> None:
            try:
                answers = await verify([wanted])
            except Exception as exc:  # the transaction coordinator cannot be reached
                log.warning("TxnOffsetCommit %s: verification failed: %s", group_id, exc)
                answers = {}
            code = verification_error(answers.get(wanted, ErrorCode.NETWORK_EXCEPTION))
            if code != ErrorCode.NONE:
                respond(txn_commit_error(body, code))
                return
            coordinator.commit_txn_offsets(body, respond, guard, verification_required=True)

        task = asyncio.get_running_loop().create_task(verify_then_commit())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- transaction markers (the core's TxnMarkerListener) ---------------------------------

    def on_txn_marker(self, topic: str, partition: int, producer_id: int,
                      committed: bool) -> None:
        """A COMMIT (``committed``) or ABORT marker of ``producer_id`` was written and
        replicated on ``topic``-``partition`` (WriteTxnMarkers): the coordinator commits or
        drops the producer's pending offsets of that partition's groups."""
        if topic == OFFSETS_TOPIC:
            self.coordinator.complete_txn(partition, producer_id, committed)

    def shutdown(self) -> None:
        self.coordinator.shutdown()
        for task in list(self._tasks):
            task.cancel()


def _next_sequence(replica: Partition, producer: TxnProducer) -> int:
    """The sequence a TxnOffsetCommit's batch takes on the offsets partition: the next
    one of the producer's epoch there, 0 for a new producer or epoch.  Kafka skips the
    sequence check for the coordinator's own appends; here the batch goes through the
    leader's producer-state check like any, so it carries the sequence that check expects
    (the epoch check still applies: an older epoch is INVALID_PRODUCER_EPOCH)."""
    entry = replica.partition_log.producer_state.entry(producer.producer_id)
    if entry is None or entry.epoch != producer.producer_epoch or not entry.batches:
        return 0
    return next_sequence(entry.batches[-1].last_seq)


def load_batches(coordinator: GroupCoordinator, partition: int, data: bytes | memoryview,
                 position: int) -> int:
    """Apply the batches of ``data`` (read from offsets ``partition`` at ``position``) to
    the coordinator's load in log order; returns the offset after the last one.  A
    control batch is its producer's marker, a transactional batch's records are its
    producer's; a batch (or marker) that does not decode is skipped and counted."""
    for pos, header in iter_batches(data, validate=False):
        try:
            records = decode_batch(data, pos, validate=False)
            if header.is_control:
                control_type, _epoch = parse_marker(records[0].key, records[0].value)
                coordinator.load_marker(partition, header.producer_id,
                                        control_type == ControlType.COMMIT)
                records = []
        except (MiniKafkaError, IndexError) as exc:  # forged or damaged: the rest loads
            coordinator.ownership.skip(partition, header.base_offset,
                                       f"a batch that does not decode ({exc!r})")
            records = []
        txn_producer_id = header.producer_id if header.is_transactional else -1
        for record in records:
            coordinator.load_record(partition, record.key, record.value, record.offset,
                                    txn_producer_id)
        position = header.next_offset
    return position
