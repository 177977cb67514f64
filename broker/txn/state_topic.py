"""The transaction-state topic ``__transaction_state`` and the broker's transaction
coordinator around it (Kafka's TransactionStateManager's I/O side).

:class:`TransactionStateTopic` glues the sans-IO
:class:`~broker.txn.coordinator.TransactionCoordinator` to the broker core
(:class:`broker.core.BrokerCore` creates it and implements :class:`TransactionStateHost`;
this module does not import the core), the same way
:class:`broker.group.offsets_topic.OffsetsTopic` hosts the group coordinator:

- **Creation on demand**: the first FindCoordinator of a transactional id (key_type 1)
  that finds no state topic creates it and answers COORDINATOR_NOT_AVAILABLE (the client
  retries).  Controller mode: a CreateTopics to the controller (one in flight);
  standalone: locally.  Partitions ``transaction_state_log_num_partitions`` (default 5),
  replication factor ``min(transaction_state_log_replication_factor, live brokers)``,
  configs ``cleanup_policy=compact``, ``min_insync_replicas=min(2, RF)``,
  ``segment_bytes=transaction_state_log_segment_bytes``.
- **FindCoordinator** key_type 1: the leader of partition
  ``abs(javaStringHash(transactional_id)) % partitions``; no leader:
  COORDINATOR_NOT_AVAILABLE; an empty id: INVALID_REQUEST.
- **Leadership**: :meth:`on_partitions_changed` (the core calls it where it calls the
  offsets topic's) loads the state partitions newly led here (coordinator epoch = the
  partition's leader epoch) and unloads those lost.  Loading reads the partition from
  its log start to its log end in steps of ``LOAD_STEP_BYTES``, one step per timer tick,
  answering COORDINATOR_LOAD_IN_PROGRESS until the last; then the coordinator finishes
  the transactions that were being completed (markers again, then Complete*).
- **Writes** (:meth:`append`): one batch appended as leader with acks=all, answered from
  the produce purgatory when the high watermark passes it (or after
  ``offsets_commit_timeout_ms``), like the offsets topic's writes.
- **Timers**: :meth:`tick` every
  ``transaction_abort_timed_out_transaction_cleanup_interval_ms`` on the broker's timer
  (timeouts, expiry, retried Complete* writes).
- **Markers**: a :class:`~broker.txn.markers.MarkerSender` to each partition's leader
  (``host.leader_id``) at its replication endpoint, logged in as this broker.
- **KIP-890 verification** (:meth:`verify`, the core's ``txn_verifier``): a leader's
  question about its own partitions is answered by asking the coordinator here when the
  transactional id's state partition is led by this broker; otherwise
  :class:`~broker.txn.verifier.RemoteTxnVerifier` (AddPartitionsToTxn v4
  ``verify_only`` to the coordinator broker, batched; no cache, see there).

Costs: FindCoordinator O(id length); :meth:`on_partitions_changed` O(partitions here);
a load step O(LOAD_STEP_BYTES).  Not thread-safe: the broker's event loop owns it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Protocol

from broker.auth import broker_login
from broker.config import BrokerConfig
from broker.delayed import DelayedFetch, DelayedProduce, ProducePartitionStatus
from broker.group.offsets_topic import OffsetsTopicHost
from broker.group.protocol import partition_for
from broker.metadata.image import MetadataImage
from broker.network.tls import client_context
from broker.producer_ids import ProducerIdAllocator
from broker.txn.coordinator import (
    Done,
    IdAnswer,
    TransactionCoordinator,
    TxnCoordinatorConfig,
)
from broker.txn.markers import GONE, MarkerSender
from broker.txn.state import TxnError
from broker.txn.verifier import RemoteTxnVerifier
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import (
    CreateTopicsRequestTopic,
    FindCoordinatorResponseCoordinator,
    ProduceResponsePartitionResponse,
)
from clients.protocol.topics import TRANSACTION_STATE_TOPIC, TopicPartition
from clients.records.batch import iter_batches
from clients.records.record import build_batch, decode_batch
from replication.partition import Partition
from storage.log.log import wall_clock_ms
from timer.clock import Clock
from timer.purgatory import Purgatory, TimerLike
from timer.timing_wheel import CallableTask

log = logging.getLogger(__name__)

LOAD_STEP_BYTES = 1024 * 1024
CREATE_TIMEOUT_MS = 10_000
ID_TIMEOUT_MS = 5_000


class TransactionStateHost(OffsetsTopicHost, Protocol):
    """What :class:`TransactionStateTopic` reads of the core beyond the offsets topic's
    questions: its current config (the server sets the ports it got), the metadata image
    (where each broker's replication listener is) and the cluster secret (the broker
    login of the marker and verification connections)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def image(self) -> MetadataImage | None: ...

    @property
    def cluster_secret(self) -> str: ...


class _AllocatorIds:
    """:class:`~broker.txn.coordinator.ProducerIdSource` over the broker's allocator."""

    def __init__(self, allocator: ProducerIdAllocator) -> None:
        self.allocator = allocator
        self._tasks: set[asyncio.Task[None]] = set()

    def next_producer_id(self, done: IdAnswer) -> None:
        try:
            now = self.allocator.next_id_now()
        except MiniKafkaError as exc:
            done(None, exc.code)
            return
        if now is not None:
            done(now, ErrorCode.NONE)
            return

        async def wait() -> None:
            try:
                done(await self.allocator.next_id(ID_TIMEOUT_MS), ErrorCode.NONE)
            except MiniKafkaError as exc:
                done(None, exc.code)

        task = asyncio.get_running_loop().create_task(wait())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class TransactionStateTopic:
    """The state topic and the transaction coordinator of one broker; see the module
    docstring.  Owns the :class:`TransactionCoordinator` (``coordinator``) and is its
    :class:`~broker.txn.coordinator.TxnLog`."""

    def __init__(self, config: BrokerConfig, clock: Clock, timer: TimerLike,
                 partitions: Mapping[TopicPartition, Partition],
                 produce_purgatory: Purgatory[DelayedProduce],
                 fetch_purgatory: Purgatory[DelayedFetch], host: TransactionStateHost,
                 producer_ids: ProducerIdAllocator) -> None:
        self.config = config
        self.timer = timer
        self.partitions = partitions
        self.produce_purgatory = produce_purgatory
        self.fetch_purgatory = fetch_purgatory
        self.host = host
        tls = (client_context(config.ssl_cafile, config.ssl_certfile, config.ssl_keyfile)
               if config.ssl_certfile else None)
        self.tls: ssl.SSLContext | None = tls
        self.markers = MarkerSender(config.node_id,
                                    broker_login(host.cluster_secret, config.node_id),
                                    self._leader_of, self.replication_endpoint, tls)
        self.coordinator = TransactionCoordinator(
            TxnCoordinatorConfig(config.transaction_max_timeout_ms,
                                 config.transactional_id_expiration_ms),
            clock, self, _AllocatorIds(producer_ids), self.markers)
        self.creating = False
        self.closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.remote_verifier = RemoteTxnVerifier(
            config.node_id, broker_login(host.cluster_secret, config.node_id), tls)
        self._schedule_tick()

    # -- topic -----------------------------------------------------------------------

    def num_partitions(self) -> int:
        return self.host.partition_count(TRANSACTION_STATE_TOPIC)

    def _topic_configs(self, replication_factor: int) -> dict[str, str]:
        return {"cleanup_policy": "compact",
                "min_insync_replicas": str(min(2, replication_factor)),
                "segment_bytes": str(self.config.transaction_state_log_segment_bytes)}

    def _create_topic(self) -> None:
        config, host = self.config, self.host
        count = config.transaction_state_log_num_partitions
        if not config.controller_address:
            host.create_topic(host.validate_new_topic(TRANSACTION_STATE_TOPIC, count, 1,
                                                      self._topic_configs(1)))
            log.info("created %s with %d partitions", TRANSACTION_STATE_TOPIC, count)
            return
        controller, live_brokers = host.controller, host.live_broker_count()
        if self.creating or controller is None or live_brokers is None:
            return
        self.creating = True
        rf = max(1, min(config.transaction_state_log_replication_factor, live_brokers))
        spec: CreateTopicsRequestTopic = {
            "name": TRANSACTION_STATE_TOPIC, "num_partitions": count,
            "replication_factor": rf, "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in self._topic_configs(rf).items()]}

        async def create() -> None:
            try:
                answer = await controller.request(
                    ApiKey.CREATE_TOPICS, {"topics": [spec], "timeout_ms": CREATE_TIMEOUT_MS,
                                           "validate_only": False},
                    timeout_ms=CREATE_TIMEOUT_MS)
                code = answer["topics"][0]["error_code"]
                if code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                    log.warning("creating %s failed: %s", TRANSACTION_STATE_TOPIC,
                                ErrorCode(code).name)
            except MiniKafkaError as exc:
                log.warning("creating %s failed: %s", TRANSACTION_STATE_TOPIC, exc)
            finally:
                self.creating = False

        self._spawn(create())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- FindCoordinator ---------------------------------------------------------------

    def find_coordinator(self, transactional_id: str) -> FindCoordinatorResponseCoordinator:
        """FindCoordinator key_type 1: ``{error_code, error_message, node_id, host,
        port}``."""
        def error(code: ErrorCode, message: str) -> FindCoordinatorResponseCoordinator:
            return {"error_code": int(code), "error_message": message, "node_id": -1,
                    "host": "", "port": -1}

        if not transactional_id:
            return error(ErrorCode.INVALID_REQUEST, "transactional id is empty")
        count = self.num_partitions()
        if count == 0:
            try:
                self._create_topic()
            except MiniKafkaError as exc:
                return error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"cannot create {TRANSACTION_STATE_TOPIC}: {exc}")
            count = self.num_partitions()
            if count == 0:
                return error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{TRANSACTION_STATE_TOPIC} is being created")
        index = partition_for(transactional_id, count)
        leader = self.host.leader_endpoint(TRANSACTION_STATE_TOPIC, index)
        if leader is None:
            return error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         f"{TRANSACTION_STATE_TOPIC}-{index} has no leader")
        node_id, host, port = leader
        return {"error_code": 0, "error_message": None, "node_id": node_id, "host": host,
                "port": port}

    # -- leadership and loading ----------------------------------------------------------

    def on_partitions_changed(self) -> None:
        coordinator = self.coordinator
        coordinator.num_partitions = self.num_partitions()
        led = {index: p.leader_epoch for (topic, index), p in self.partitions.items()
               if topic == TRANSACTION_STATE_TOPIC and p.is_leader}
        current = coordinator.epochs()
        for index, epoch in current.items():
            if led.get(index) != epoch:
                log.info("%s-%d: not led here any more (epoch %d); unloading",
                         TRANSACTION_STATE_TOPIC, index, epoch)
                coordinator.unload(index)
        for index, epoch in led.items():
            if current.get(index) != epoch:
                log.info("%s-%d: leader in epoch %d; loading transactions",
                         TRANSACTION_STATE_TOPIC, index, epoch)
                coordinator.begin_load(index, epoch)
                start = self.partitions[TopicPartition(TRANSACTION_STATE_TOPIC,
                                                       index)].log_start_offset
                self._schedule_load(index, epoch, start)

    def _schedule_load(self, index: int, epoch: int, position: int) -> None:
        self.timer.add(CallableTask(1, lambda: self._load_step(index, epoch, position)))

    def _load_step(self, index: int, epoch: int, position: int) -> None:
        coordinator = self.coordinator
        partition = self.partitions.get(TopicPartition(TRANSACTION_STATE_TOPIC, index))
        if index not in coordinator.loading or coordinator.loading[index][0] != epoch:
            return  # unloaded or reloaded meanwhile
        if partition is None or not partition.is_leader or partition.leader_epoch != epoch:
            coordinator.unload(index)
            return
        end = partition.log_end_offset
        try:
            data = partition.log.read(position, LOAD_STEP_BYTES, max_offset=end).read_bytes() \
                if position < end else b""
        except Exception:
            log.exception("%s-%d: load failed at offset %d; unloading",
                          TRANSACTION_STATE_TOPIC, index, position)
            coordinator.unload(index)
            return
        if not data:
            coordinator.finish_load(index)
            return
        for pos, header in iter_batches(data, validate=False):
            if not header.is_control:
                try:
                    records = decode_batch(data, pos, validate=False)
                except MiniKafkaError as exc:
                    log.warning("%s-%d: skipped a batch at %d: %s", TRANSACTION_STATE_TOPIC,
                                index, header.base_offset, exc)
                    records = []
                for record in records:
                    coordinator.load_record(index, record.key, record.value)
            position = header.next_offset
        self._schedule_load(index, epoch, position)

    # -- writes (the coordinator's TxnLog) -----------------------------------------------

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               done: Done) -> None:
        key = TopicPartition(TRANSACTION_STATE_TOPIC, partition)
        replica = self.partitions.get(key)
        if replica is None or not replica.is_leader:
            done(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
            return
        now = wall_clock_ms()
        batch = build_batch([(k, v, now, ()) for k, v in records])
        try:
            info = replica.append_records_as_leader(
                batch, -1, self.host.min_insync_replicas(TRANSACTION_STATE_TOPIC))
        except MiniKafkaError as exc:
            done(exc.code, -1)
            return
        self.fetch_purgatory.check_and_complete(key)
        result: ProduceResponsePartitionResponse = {"error_code": 0}
        status = ProducePartitionStatus(replica, info.last_offset + 1, result,
                                        replica.leader_epoch)
        op = DelayedProduce(self.config.offsets_commit_timeout_ms, [status],
                            self.host.min_insync_replicas,
                            lambda: done(ErrorCode(result["error_code"]), info.first_offset))
        self.produce_purgatory.try_complete_else_watch(op, [key])

    # -- markers and timers ------------------------------------------------------------

    def _leader_of(self, tp: TopicPartition) -> int | None:
        if not self.host.partition_exists(tp.topic, tp.partition):
            return GONE
        found = self.host.leader_endpoint(tp.topic, tp.partition)
        return found[0] if found is not None else None

    def replication_endpoint(self, node_id: int) -> tuple[str, int] | None:
        """Where broker ``node_id`` serves other brokers (its internal listener, else its
        client one); standalone: this broker's own."""
        image, config = self.host.image, self.host.config
        if image is None:
            if node_id != config.node_id:
                return None
            internal = config.internal_advertised
            return internal if internal is not None else config.advertised
        broker = image.brokers.get(node_id)
        return broker.replication_endpoint if broker is not None else None

    def _schedule_tick(self) -> None:
        interval = self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms
        self.timer.add(CallableTask(interval, self._tick))

    def _tick(self) -> None:
        if self.closed:
            return
        try:
            self.coordinator.tick()
        except Exception:
            log.exception("transaction coordinator tick failed")
        self._schedule_tick()

    # -- KIP-890 verification (the core's TxnVerifier) ----------------------------------

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Whether ``partitions`` are in ``transactional_id``'s ongoing transaction of
        this producer: asked here when this broker coordinates the id, else by an
        AddPartitionsToTxn v4 ``verify_only`` to its coordinator as a broker."""
        local = self.coordinator.coordinator_error(transactional_id)
        if local is None:
            try:
                return self.coordinator.verify(transactional_id, producer_id,
                                               producer_epoch, partitions)
            except TxnError as exc:
                return dict.fromkeys(partitions, exc.code)
        found = self.find_coordinator(transactional_id)
        if found["error_code"] != 0:
            return dict.fromkeys(partitions, ErrorCode(found["error_code"]))
        if found["node_id"] == self.config.node_id:  # ours, loading or not loaded yet
            return dict.fromkeys(partitions, local)
        endpoint = self.replication_endpoint(found["node_id"])
        if endpoint is None:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return await self.remote_verifier.verify(found["node_id"], endpoint, transactional_id,
                                                 producer_id, producer_epoch, partitions)

    def shutdown(self) -> None:
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        self.remote_verifier.close()
        self.markers.stop()
