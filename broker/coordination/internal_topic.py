"""Hosting a coordinator's internal topic on one broker (Kafka's coordinator "partition
loading" and ``__consumer_offsets`` / ``__transaction_state`` handling, shared).

:class:`InternalTopic` is what the group coordinator's
:class:`~broker.group.offsets_topic.OffsetsTopic` and the transaction coordinator's
:class:`~broker.txn.state_topic.TransactionStateTopic` have in common; each owns one,
built with its :class:`InternalTopicSpec`, its sans-IO coordinator (as a
:class:`HostedCoordinator`) and the broker core (as an :class:`InternalTopicHost`;
this module does not import the core):

- **Creation on demand** (:meth:`InternalTopic.coordinator_of` when the topic has no
  partitions yet): standalone, locally (replication factor 1); controller mode, a
  CreateTopics to the controller, one in flight at a time, replication factor
  ``min(spec RF, live brokers)``.  The caller answers COORDINATOR_NOT_AVAILABLE until
  the topic exists (the client retries).  Configs come from the spec (compacted).
- **Placement**: the coordinator of a key is the leader of partition
  ``abs(javaStringHash(key)) % partitions`` (:func:`~broker.coordination.placement.partition_for`;
  the count is the topic's, not this broker's config); no leader ->
  COORDINATOR_NOT_AVAILABLE.
- **Leadership** (:meth:`InternalTopic.on_partitions_changed`, called by the core after
  startup, topic creation/deletion and every metadata reconcile): the partitions this
  broker leads (and their leader epochs) are compared with what the coordinator owns or
  is loading; a new leadership or a new epoch starts a load, a lost one unloads.  Each
  decision is logged once at INFO.
- **Loading** reads the partition from its log start to its log end offset in steps of
  ``LOAD_STEP_BYTES``, one step per timer tick (so a big partition never blocks the
  loop), handing each step's bytes to the coordinator's ``load_batches``; a step that
  finds the leadership or epoch changed stops (unloading when it is no longer led); a
  read error unloads.  The coordinator answers COORDINATOR_LOAD_IN_PROGRESS until the
  last step calls ``finish_load``.
- **Writes** (:meth:`InternalTopic.append`): one batch appended as leader with
  acks=all and origin COORDINATOR (:class:`~replication.append_origin.AppendOrigin`: a
  producer's batch gets the epoch check, not the sequence and duplicate checks),
  answered from the broker's produce purgatory when the high watermark passes it (or
  after ``offsets_commit_timeout_ms``), exactly like a Produce with acks=all; errors
  (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, ...) go back to the coordinator.

Costs: :meth:`~InternalTopic.coordinator_of` O(key length);
:meth:`~InternalTopic.on_partitions_changed` O(partitions on this broker); a load step
O(LOAD_STEP_BYTES); an append is one log append.  Not thread-safe: the broker's event
loop owns it (like the core).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from broker.async_client import ControllerChannel
from broker.config import BrokerConfig
from broker.coordination.placement import partition_for
from broker.delayed import DelayedFetch, DelayedProduce, ProducePartitionStatus
from broker.topic_registry import StandaloneTopic
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import (
    CreateTopicsRequestTopic,
    FindCoordinatorResponseCoordinator,
    ProduceResponsePartitionResponse,
)
from clients.protocol.topics import TopicPartition
from replication.append_origin import AppendOrigin
from replication.partition import Partition
from replication.producer_state import VerificationGuard
from timer.purgatory import Purgatory, TimerLike
from timer.timing_wheel import CallableTask

log = logging.getLogger(__name__)

LOAD_STEP_BYTES = 1024 * 1024
CREATE_TIMEOUT_MS = 10_000

# an append's answer: (error, offset of the batch's first record, -1 on error)
Appended = Callable[[ErrorCode, int], None]
# apply the batches of bytes read from a partition at a position; returns the offset
# after the last one (where the next load step reads)
LoadBatches = Callable[[int, bytes | memoryview, int], int]


class InternalTopicHost(Protocol):
    """What :class:`InternalTopic` asks the broker core that owns it, on every use (the
    answers change with the metadata).  :class:`broker.core.BrokerCore` implements it; it
    is declared here so that the core imports this module and not the other way round."""

    @property
    def controller(self) -> ControllerChannel | None:
        """The connection to the controller (controller mode, once the server set it)."""

    def partition_count(self, topic: str) -> int: ...

    def partition_exists(self, topic: str, index: int) -> bool: ...

    def topic_ids(self) -> Mapping[str, tuple[bytes, int]]:
        """The cluster's topics with a topic id: name -> (id, partition count)."""

    def leader_endpoint(self, topic: str, index: int) -> tuple[int, str, int] | None: ...

    def live_broker_count(self) -> int | None: ...

    def validate_new_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: Mapping[str, str]) -> StandaloneTopic: ...

    def create_topic(self, info: StandaloneTopic) -> None: ...

    def min_insync_replicas(self, topic: str) -> int: ...


class HostedCoordinator(Protocol):
    """What :class:`InternalTopic` does to its coordinator as partitions are led, loaded
    and lost (both coordinators are sans-IO and implement it)."""

    num_partitions: int  # of the topic; 0 = no topic yet

    def epochs(self) -> dict[int, int]:
        """Owned and loading partitions and their coordinator (leader) epochs."""

    def loading_epoch(self, partition: int) -> int | None:
        """The epoch ``partition`` is being loaded in, None when it is not loading."""

    def begin_load(self, partition: int, epoch: int) -> None: ...

    def finish_load(self, partition: int) -> None: ...

    def unload(self, partition: int) -> None: ...


@dataclass(frozen=True, slots=True)
class InternalTopicSpec:
    """One internal topic: its name, partition count and replication factor (from the
    broker's config), its configs for a replication factor, and what its coordinator
    loads (named in log lines: "groups", "transactions")."""

    name: str
    num_partitions: int
    replication_factor: int
    configs: Callable[[int], dict[str, str]]
    loads: str


class InternalTopic:
    """One coordinator's internal topic on this broker; see the module docstring.  Gets:
    the spec, the broker config (``controller_address``, ``offsets_commit_timeout_ms``),
    the timer (load steps), the hosted partitions (read, never changed here), the
    produce and fetch purgatories (a write parks in the first and wakes followers in the
    second), the core, the coordinator and its ``load_batches``."""

    def __init__(self, spec: InternalTopicSpec, config: BrokerConfig, timer: TimerLike,
                 partitions: Mapping[TopicPartition, Partition],
                 produce_purgatory: Purgatory[DelayedProduce],
                 fetch_purgatory: Purgatory[DelayedFetch], host: InternalTopicHost,
                 coordinator: HostedCoordinator, load_batches: LoadBatches) -> None:
        self.spec = spec
        self.config = config
        self.timer = timer
        self.partitions = partitions
        self.produce_purgatory = produce_purgatory
        self.fetch_purgatory = fetch_purgatory
        self.host = host
        self.coordinator = coordinator
        self.load_batches = load_batches
        self.creating = False
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self.spec.name

    def num_partitions(self) -> int:
        return self.host.partition_count(self.spec.name)

    # -- creation on demand and placement ---------------------------------------------

    def _create(self) -> None:
        spec, host = self.spec, self.host
        if not self.config.controller_address:
            info = host.validate_new_topic(spec.name, spec.num_partitions, 1, spec.configs(1))
            host.create_topic(info)
            log.info("created %s with %d partitions", spec.name, info.num_partitions)
            return
        controller, live_brokers = host.controller, host.live_broker_count()
        if self.creating or controller is None or live_brokers is None:
            return
        self.creating = True
        rf = max(1, min(spec.replication_factor, live_brokers))
        request: CreateTopicsRequestTopic = {
            "name": spec.name, "num_partitions": spec.num_partitions,
            "replication_factor": rf, "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in spec.configs(rf).items()]}

        async def create() -> None:
            try:
                answer = await controller.request(
                    ApiKey.CREATE_TOPICS, {"topics": [request],
                                           "timeout_ms": CREATE_TIMEOUT_MS,
                                           "validate_only": False},
                    timeout_ms=CREATE_TIMEOUT_MS)
                code = answer["topics"][0]["error_code"]
                if code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                    log.warning("creating %s failed: %s %s", spec.name, ErrorCode(code).name,
                                answer["topics"][0]["error_message"])
                else:
                    log.info("created %s (RF %d)", spec.name, rf)
            except MiniKafkaError as exc:
                log.warning("creating %s failed: %s", spec.name, exc)
            finally:
                self.creating = False

        task = asyncio.get_running_loop().create_task(create())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def coordinator_of(self, key: str) -> FindCoordinatorResponseCoordinator:
        """Where the coordinator of ``key`` is: ``{error_code, error_message, node_id,
        host, port}`` (FindCoordinator's v0-3 answer, one entry of its v4 batch).  Creates
        the topic when it has no partitions yet (COORDINATOR_NOT_AVAILABLE meanwhile)."""
        name = self.spec.name

        def error(message: str) -> FindCoordinatorResponseCoordinator:
            return {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                    "error_message": message, "node_id": -1, "host": "", "port": -1}

        count = self.num_partitions()
        if count == 0:
            try:
                self._create()
            except MiniKafkaError as exc:
                return error(f"cannot create {name}: {exc}")
            count = self.num_partitions()
            if count == 0:
                return error(f"{name} is being created")
        index = partition_for(key, count)
        leader = self.host.leader_endpoint(name, index)
        if leader is None:
            return error(f"{name}-{index} has no leader")
        node_id, host, port = leader
        return {"error_code": 0, "error_message": None, "node_id": node_id, "host": host,
                "port": port}

    # -- leadership and loading -----------------------------------------------------------

    def on_partitions_changed(self) -> None:
        """Load the partitions newly led here (or in a new epoch); unload those not led
        any more."""
        name, coordinator = self.spec.name, self.coordinator
        coordinator.num_partitions = self.num_partitions()
        led = {index: p.leader_epoch for (topic, index), p in self.partitions.items()
               if topic == name and p.is_leader}
        current = coordinator.epochs()
        for index, epoch in current.items():
            if led.get(index) != epoch:
                log.info("%s-%d: not led here any more (epoch %d); unloading %s", name,
                         index, epoch, self.spec.loads)
                coordinator.unload(index)
        for index, epoch in led.items():
            if current.get(index) != epoch:
                log.info("%s-%d: leader in epoch %d; loading %s", name, index, epoch,
                         self.spec.loads)
                coordinator.begin_load(index, epoch)
                start = self.partitions[TopicPartition(name, index)].log_start_offset
                self._schedule_load(index, epoch, start)

    def _schedule_load(self, index: int, epoch: int, position: int) -> None:
        self.timer.add(CallableTask(1, lambda: self._load_step(index, epoch, position)))

    def _load_step(self, index: int, epoch: int, position: int) -> None:
        name, coordinator = self.spec.name, self.coordinator
        partition = self.partitions.get(TopicPartition(name, index))
        if coordinator.loading_epoch(index) != epoch:
            return  # unloaded or reloaded meanwhile
        if partition is None or not partition.is_leader or partition.leader_epoch != epoch:
            coordinator.unload(index)
            return
        end = partition.log_end_offset
        try:
            data = partition.log.read(position, LOAD_STEP_BYTES, max_offset=end).read_bytes() \
                if position < end else b""
        except Exception:
            log.exception("%s-%d: load failed at offset %d; unloading", name, index, position)
            coordinator.unload(index)
            return
        if not data:
            coordinator.finish_load(index)
            return
        self._schedule_load(index, epoch, self.load_batches(index, data, position))

    # -- writes -----------------------------------------------------------------------------

    def leader(self, index: int) -> Partition | None:
        """The partition ``index`` when this broker leads it, else None."""
        replica = self.partitions.get(TopicPartition(self.spec.name, index))
        return replica if replica is not None and replica.is_leader else None

    def append(self, index: int, batch: bytes, done: Appended, *,
               guard: VerificationGuard | None = None,
               verification_required: bool = False) -> None:
        """Append ``batch`` to partition ``index`` as its leader, acks=all: ``done(error,
        first offset)`` once the high watermark passes it, or at once on a refusal
        (NOT_LEADER_OR_FOLLOWER here; the log's errors).  ``guard`` and
        ``verification_required``: a transactional batch's KIP-890 verification."""
        key = TopicPartition(self.spec.name, index)
        replica = self.leader(index)
        if replica is None:
            done(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
            return
        try:
            info = replica.append_records_as_leader(
                batch, -1, self.host.min_insync_replicas(self.spec.name), guard=guard,
                verification_required=verification_required, origin=AppendOrigin.COORDINATOR)
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

    def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
